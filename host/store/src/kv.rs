//! [`Store`]: what a group needs of a key-value store to meet, so that lowcon's own TCP
//! store ([`crate::StoreClient`]) and a framework's (torch.distributed's store, reached
//! through Python) both fit. Barriers and all-gathers are built on the four primitives
//! here ([`barrier`], [`all_gather`]), with keys that carry a generation the caller
//! counts, so a name can be reused.

use std::time::{Duration, Instant};

use crate::{StoreError, StoreInterrupter};

/// A key-value store a group meets through. Every call is bounded: a wait that runs out
/// is [`StoreError::Timeout`] naming the keys.
pub trait Store: Send {
    /// Stores `value` under `key`.
    fn set(&mut self, key: &str, value: &[u8]) -> Result<(), StoreError>;
    /// The value of `key`, waiting up to `timeout` for it to be set.
    fn get_timeout(&mut self, key: &str, timeout: Duration) -> Result<Vec<u8>, StoreError>;
    /// Atomically adds `delta` to the counter at `key` (0 if absent); the new value.
    fn add(&mut self, key: &str, delta: i64) -> Result<i64, StoreError>;
    /// The values of all `keys` in order, waiting up to `timeout` in all.
    fn multi_get(&mut self, keys: &[&str], timeout: Duration) -> Result<Vec<Vec<u8>>, StoreError> {
        let end = Instant::now() + timeout;
        keys.iter().map(|k| self.get_timeout(k, end.saturating_duration_since(Instant::now()))).collect()
    }
    /// A handle that breaks off a wait in progress from another thread, where the store
    /// can (lowcon's can; a framework's store may not, and its waits end at their timeout).
    fn interrupter(&self) -> Option<StoreInterrupter> {
        None
    }
}

impl Store for crate::StoreClient {
    fn set(&mut self, key: &str, value: &[u8]) -> Result<(), StoreError> {
        crate::StoreClient::set(self, key, value)
    }
    fn get_timeout(&mut self, key: &str, timeout: Duration) -> Result<Vec<u8>, StoreError> {
        crate::StoreClient::get_timeout(self, key, timeout)
    }
    fn add(&mut self, key: &str, delta: i64) -> Result<i64, StoreError> {
        crate::StoreClient::add(self, key, delta)
    }
    fn multi_get(&mut self, keys: &[&str], timeout: Duration) -> Result<Vec<Vec<u8>>, StoreError> {
        crate::StoreClient::multi_get(self, keys, timeout)
    }
    fn interrupter(&self) -> Option<StoreInterrupter> {
        Some(crate::StoreClient::interrupter(self))
    }
}

impl Store for Box<dyn Store> {
    fn set(&mut self, key: &str, value: &[u8]) -> Result<(), StoreError> {
        (**self).set(key, value)
    }
    fn get_timeout(&mut self, key: &str, timeout: Duration) -> Result<Vec<u8>, StoreError> {
        (**self).get_timeout(key, timeout)
    }
    fn add(&mut self, key: &str, delta: i64) -> Result<i64, StoreError> {
        (**self).add(key, delta)
    }
    fn multi_get(&mut self, keys: &[&str], timeout: Duration) -> Result<Vec<Vec<u8>>, StoreError> {
        (**self).multi_get(keys, timeout)
    }
    fn interrupter(&self) -> Option<StoreInterrupter> {
        (**self).interrupter()
    }
}

/// Blocks until `world` ranks have called the `generation`-th barrier named `name`.
pub fn barrier(
    store: &mut dyn Store,
    name: &str,
    generation: u64,
    world: usize,
    timeout: Duration,
) -> Result<(), StoreError> {
    let base = format!("lowcon/kv-barrier/{name}/{generation}");
    let arrived = store.add(&format!("{base}/arrived"), 1)?;
    if arrived as usize == world {
        store.set(&format!("{base}/done"), b"1")?;
    } else if arrived as usize > world {
        return Err(StoreError::InvalidArgument(format!(
            "barrier {name:?}: {arrived} arrivals for a world of {world} (ranks disagree on the world size?)"
        )));
    }
    store.get_timeout(&format!("{base}/done"), timeout).map(|_| ())
}

/// The key under which [`all_gather`] stores `rank`'s part of round `generation` of
/// `name` (for callers that wait for it in steps of their own).
pub fn all_gather_key(name: &str, generation: u64, rank: usize) -> String {
    format!("lowcon/kv-all-gather/{name}/{generation}/{rank}")
}

/// Every rank contributes `data` to the `generation`-th all-gather named `name`; all
/// ranks' contributions in rank order.
pub fn all_gather(
    store: &mut dyn Store,
    name: &str,
    generation: u64,
    rank: usize,
    world: usize,
    data: &[u8],
    timeout: Duration,
) -> Result<Vec<Vec<u8>>, StoreError> {
    if rank >= world {
        return Err(StoreError::InvalidArgument(format!("all_gather {name:?}: rank {rank} >= world size {world}")));
    }
    store.set(&all_gather_key(name, generation, rank), data)?;
    let keys: Vec<String> = (0..world).map(|r| all_gather_key(name, generation, r)).collect();
    let refs: Vec<&str> = keys.iter().map(String::as_str).collect();
    store.multi_get(&refs, timeout)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;
    use std::sync::{Arc, Condvar, Mutex};

    /// An in-process store shared by threads (what a framework's store looks like to us).
    type Shared = (Mutex<HashMap<String, Vec<u8>>>, Condvar);

    #[derive(Clone, Default)]
    struct Mem(Arc<Shared>);

    impl Store for Mem {
        fn set(&mut self, key: &str, value: &[u8]) -> Result<(), StoreError> {
            self.0.0.lock().unwrap().insert(key.into(), value.to_vec());
            self.0.1.notify_all();
            Ok(())
        }
        fn get_timeout(&mut self, key: &str, timeout: Duration) -> Result<Vec<u8>, StoreError> {
            let (m, cv) = &*self.0;
            let g = m.lock().unwrap();
            let (g, _) = cv.wait_timeout_while(g, timeout, |m| !m.contains_key(key)).unwrap();
            g.get(key).cloned().ok_or_else(|| StoreError::Timeout {
                addr: "memory".into(),
                op: "get",
                keys: key.into(),
                secs: timeout.as_secs_f64(),
            })
        }
        fn add(&mut self, key: &str, delta: i64) -> Result<i64, StoreError> {
            let mut m = self.0.0.lock().unwrap();
            let v = m.get(key).map_or(0, |b| i64::from_le_bytes(b[..8].try_into().unwrap())) + delta;
            m.insert(key.into(), v.to_le_bytes().to_vec());
            self.0.1.notify_all();
            Ok(v)
        }
    }

    #[test]
    fn barrier_and_all_gather_on_any_store() {
        let mem = Mem::default();
        let handles: Vec<_> = (0..3)
            .map(|r| {
                let mut s = mem.clone();
                std::thread::spawn(move || {
                    for generation in 1..=3u64 {
                        barrier(&mut s, "b", generation, 3, Duration::from_secs(5)).unwrap();
                        let all = all_gather(
                            &mut s,
                            "g",
                            generation,
                            r,
                            3,
                            &[r as u8, generation as u8],
                            Duration::from_secs(5),
                        )
                        .unwrap();
                        assert_eq!(all, (0..3).map(|p| vec![p as u8, generation as u8]).collect::<Vec<_>>());
                    }
                })
            })
            .collect();
        for h in handles {
            h.join().unwrap();
        }
    }

    #[test]
    fn a_missing_rank_is_a_timeout_naming_the_key() {
        let mut s = Mem::default();
        let e = all_gather(&mut s, "lonely", 1, 0, 2, b"x", Duration::from_millis(50)).unwrap_err().to_string();
        assert!(e.contains("lowcon/kv-all-gather/lonely/1/1"), "{e}");
        let e = barrier(&mut s, "lonely", 1, 2, Duration::from_millis(50)).unwrap_err().to_string();
        assert!(e.contains("done"), "{e}");
        assert!(all_gather(&mut s, "bad", 1, 2, 2, b"x", Duration::from_millis(1)).is_err());
    }
}
