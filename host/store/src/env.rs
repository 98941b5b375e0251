//! The launcher's environment contract, shared with torchrun.
//!
//! `lowcon launch` and `torchrun` both start ranks with `RANK`, `WORLD_SIZE`,
//! `LOCAL_RANK`, `LOCAL_WORLD_SIZE`, `MASTER_ADDR` and `MASTER_PORT`. Where lowcon's
//! store lives:
//!
//! - under `lowcon launch`, the launcher hosts it and sets `LOWCON_STORE_ADDR`;
//! - otherwise (torchrun, or ranks started by hand), `MASTER_PORT` belongs to torch's
//!   own store, so rank 0 hosts lowcon's at `MASTER_ADDR:LOWCON_STORE_PORT`, which
//!   defaults to `MASTER_PORT + 1`, and the other ranks connect there.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock, Weak};
use std::time::Duration;

use crate::{ClientOptions, ServerOptions, StoreClient, StoreError, StoreServer};

/// Set by `lowcon launch`: the `host:port` of the store it hosts.
pub const STORE_ADDR_ENV: &str = "LOWCON_STORE_ADDR";
/// Port of the store rank 0 hosts when no launcher does (default `MASTER_PORT + 1`).
pub const STORE_PORT_ENV: &str = "LOWCON_STORE_PORT";
/// A job identifier shared by all ranks (set by `lowcon launch`).
pub const JOB_ID_ENV: &str = "LOWCON_JOB_ID";

/// One rank's place in the job, read from the environment.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RankEnv {
    pub rank: usize,
    pub world_size: usize,
    pub local_rank: usize,
    pub local_world_size: usize,
    pub master_addr: String,
    pub master_port: u16,
    /// `LOWCON_STORE_ADDR`, when a launcher hosts the store.
    pub store_addr: Option<String>,
    /// `LOWCON_JOB_ID`, when set.
    pub job_id: Option<String>,
}

fn num<T: std::str::FromStr>(name: &'static str, value: &str) -> Result<T, StoreError> {
    value.trim().parse().map_err(|_| StoreError::Env { var: name, reason: format!("{value:?} is not a valid number") })
}

impl RankEnv {
    /// Reads the contract from this process's environment.
    pub fn from_env() -> Result<Self, StoreError> {
        Self::from_lookup(|k| std::env::var(k).ok())
    }

    /// Reads the contract through `get` (testable without touching the environment).
    pub fn from_lookup(get: impl Fn(&'static str) -> Option<String>) -> Result<Self, StoreError> {
        let req = |k: &'static str| {
            get(k).ok_or(StoreError::Env {
                var: k,
                reason: "not set (start ranks with `lowcon launch` or torchrun)".into(),
            })
        };
        let rank: usize = num("RANK", &req("RANK")?)?;
        let world_size: usize = num("WORLD_SIZE", &req("WORLD_SIZE")?)?;
        let local_rank: usize = get("LOCAL_RANK").map(|v| num("LOCAL_RANK", &v)).transpose()?.unwrap_or(rank);
        let local_world_size: usize =
            get("LOCAL_WORLD_SIZE").map(|v| num("LOCAL_WORLD_SIZE", &v)).transpose()?.unwrap_or(world_size);
        let master_addr = req("MASTER_ADDR")?;
        let master_port: u16 = num("MASTER_PORT", &req("MASTER_PORT")?)?;
        if world_size == 0 {
            return Err(StoreError::Env { var: "WORLD_SIZE", reason: "must be at least 1".into() });
        }
        if rank >= world_size {
            return Err(StoreError::Env {
                var: "RANK",
                reason: format!("{rank} is not below WORLD_SIZE {world_size}"),
            });
        }
        if local_rank >= local_world_size {
            return Err(StoreError::Env {
                var: "LOCAL_RANK",
                reason: format!("{local_rank} is not below LOCAL_WORLD_SIZE {local_world_size}"),
            });
        }
        Ok(Self {
            rank,
            world_size,
            local_rank,
            local_world_size,
            master_addr,
            master_port,
            store_addr: get(STORE_ADDR_ENV).filter(|s| !s.is_empty()),
            job_id: get(JOB_ID_ENV).filter(|s| !s.is_empty()),
        })
    }

    /// Where lowcon's store is (see the module docs), and whether this rank hosts it.
    pub fn store_location(&self, store_port: Option<u16>) -> Result<(String, bool), StoreError> {
        if let Some(addr) = &self.store_addr {
            return Ok((addr.clone(), false));
        }
        let port = match store_port {
            Some(p) => p,
            None => self.master_port.checked_add(1).ok_or(StoreError::Env {
                var: "MASTER_PORT",
                reason: "65535 leaves no room for lowcon's store at MASTER_PORT + 1; set LOWCON_STORE_PORT".into(),
            })?,
        };
        Ok((format!("{}:{port}", self.master_addr), self.rank == 0))
    }
}

/// A connected rank: its environment, a store client, and (on the rank that hosts it)
/// the store server, which lives as long as this value (or another holder of it).
pub struct Rendezvous {
    pub env: RankEnv,
    pub client: StoreClient,
    server: Option<Arc<StoreServer>>,
}

/// The store servers this process hosts, by address: a second group made from the same
/// environment (torchrun mode) shares the first one's server instead of failing to bind
/// its port. Each holder keeps it alive; the last one to go stops it.
fn hosted() -> &'static Mutex<HashMap<String, Weak<StoreServer>>> {
    static HOSTED: OnceLock<Mutex<HashMap<String, Weak<StoreServer>>>> = OnceLock::new();
    HOSTED.get_or_init(|| Mutex::new(HashMap::new()))
}

/// This process's server at `addr`, started if none is alive.
fn host_at(addr: &str) -> Result<Arc<StoreServer>, StoreError> {
    let mut m = hosted().lock().unwrap_or_else(|p| p.into_inner());
    if let Some(s) = m.get(addr).and_then(Weak::upgrade) {
        return Ok(s);
    }
    let s = match StoreServer::start(addr, ServerOptions::from_env()) {
        Ok(s) => Arc::new(s),
        // Rank 0 hosts the store: a port in use is most often a second RANK=0.
        Err(StoreError::Bind { addr, source, .. }) if source.kind() == std::io::ErrorKind::AddrInUse => {
            return Err(StoreError::Bind {
                addr,
                source,
                hint: " (rank 0 hosts the store there: is another process of this job running as RANK=0, or \
                       an earlier job's store still on the port? LOWCON_STORE_PORT picks another port)",
            });
        }
        Err(e) => return Err(e),
    };
    m.insert(addr.to_string(), Arc::downgrade(&s));
    Ok(s)
}

impl Rendezvous {
    /// Reads the environment, starts the store on rank 0 when no launcher hosts one, and
    /// connects (retrying while the store starts, up to `connect_timeout`).
    pub fn from_env(connect_timeout: Duration) -> Result<Self, StoreError> {
        let env = RankEnv::from_env()?;
        let store_port = std::env::var(STORE_PORT_ENV).ok().map(|v| num(STORE_PORT_ENV, &v)).transpose()?;
        let (addr, host) = env.store_location(store_port)?;
        let server = if host { Some(host_at(&addr)?) } else { None };
        let client = StoreClient::connect(addr, ClientOptions { connect_timeout, ..ClientOptions::from_env() })?;
        Ok(Self { env, client, server })
    }

    /// Whether this rank hosts the store (then it must outlive the other ranks' use of
    /// it: end with a barrier before dropping).
    pub fn hosts_store(&self) -> bool {
        self.server.is_some()
    }

    /// The parts, for an owner that keeps the server (if this rank hosts it) alive as
    /// long as it needs the store.
    pub fn into_parts(self) -> (RankEnv, StoreClient, Option<Arc<StoreServer>>) {
        (self.env, self.client, self.server)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn env(pairs: &[(&'static str, &str)]) -> impl Fn(&'static str) -> Option<String> {
        let m: HashMap<&'static str, String> = pairs.iter().map(|(k, v)| (*k, v.to_string())).collect();
        move |k| m.get(k).cloned()
    }

    #[test]
    fn a_second_group_at_one_address_shares_the_hosted_server() {
        let a = host_at("127.0.0.1:0").unwrap();
        let b = host_at("127.0.0.1:0").unwrap();
        assert!(Arc::ptr_eq(&a, &b));
        let first = Arc::as_ptr(&a);
        drop((a, b));
        // The last holder stopped it; the next one starts a new server.
        let c = host_at("127.0.0.1:0").unwrap();
        assert!(!std::ptr::eq(Arc::as_ptr(&c), first) || Arc::strong_count(&c) == 1);
        assert_eq!(Arc::strong_count(&c), 1);
    }

    #[test]
    fn a_port_held_by_another_process_says_what_may_hold_it() {
        // Another process's socket (here a listener of this test, not a hosted store).
        let held = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = held.local_addr().unwrap().to_string();
        let e = host_at(&addr).err().expect("the port is held").to_string();
        assert!(e.contains(&format!("cannot start the lowcon store on {addr}")), "{e}");
        assert!(e.contains("RANK=0") && e.contains("LOWCON_STORE_PORT"), "{e}");
    }

    #[test]
    fn reads_the_torchrun_contract() {
        let e = RankEnv::from_lookup(env(&[
            ("RANK", "2"),
            ("WORLD_SIZE", "4"),
            ("LOCAL_RANK", "2"),
            ("LOCAL_WORLD_SIZE", "4"),
            ("MASTER_ADDR", "127.0.0.1"),
            ("MASTER_PORT", "29500"),
        ]))
        .unwrap();
        assert_eq!((e.rank, e.world_size, e.local_rank, e.master_port), (2, 4, 2, 29500));
        assert_eq!(e.store_location(None).unwrap(), ("127.0.0.1:29501".to_string(), false));
        assert_eq!(e.store_location(Some(4000)).unwrap().0, "127.0.0.1:4000");
    }

    #[test]
    fn launcher_store_address_wins() {
        let e = RankEnv::from_lookup(env(&[
            ("RANK", "0"),
            ("WORLD_SIZE", "1"),
            ("MASTER_ADDR", "h"),
            ("MASTER_PORT", "1"),
            ("LOWCON_STORE_ADDR", "127.0.0.1:5555"),
        ]))
        .unwrap();
        assert_eq!(e.store_location(None).unwrap(), ("127.0.0.1:5555".to_string(), false));
    }

    #[test]
    fn bad_values_name_the_variable() {
        let base = [("WORLD_SIZE", "4"), ("MASTER_ADDR", "h"), ("MASTER_PORT", "1")];
        let err = RankEnv::from_lookup(env(&[&base[..], &[("RANK", "x")]].concat())).unwrap_err();
        assert!(err.to_string().contains("RANK") && err.to_string().contains("\"x\""), "{err}");
        let err = RankEnv::from_lookup(env(&[&base[..], &[("RANK", "4")]].concat())).unwrap_err();
        assert!(err.to_string().contains("not below WORLD_SIZE 4"), "{err}");
        let err = RankEnv::from_lookup(env(&base)).unwrap_err();
        assert!(err.to_string().contains("RANK: not set"), "{err}");
        let err = RankEnv::from_lookup(env(&[("RANK", "0"), ("WORLD_SIZE", "1"), ("MASTER_ADDR", "h")])).unwrap_err();
        assert!(err.to_string().contains("MASTER_PORT"), "{err}");
    }
}
