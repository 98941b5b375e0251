//! The watchdog: one thread per GPU group that finds failures, so that no collective
//! call ever waits for the GPU.
//!
//! Every call registers its completion event ([`GpuSync::track`]) and returns. The
//! watchdog, on each round ([`inflight::poll_interval`]: 1 ms while calls are in
//! flight and for 200 ms after, otherwise asleep on a condition variable with a 100 ms
//! tick, which a new call wakes: NOTE [watchdog wakes]):
//!
//! 1. retires the calls seen complete, and frees the workspaces they were the last
//!    users of (replaced by larger ones: a call never waits to free memory);
//! 2. reads the error record (a kernel's device-side wait timed out), each peer's
//!    socket (a dead peer) and the head times of the calls in flight (a late peer);
//! 3. decides ([`inflight::Rules::decide`]): on a failure it records the error naming
//!    the rank in the group (the next call, `synchronize` and `check` return it) and
//!    from then on releases the stuck waits every round until nothing is in flight,
//!    so the streams drain and even a caller blocked in the driver's full queue gets
//!    its enqueue back.
//!
//! The thread holds the group's synchronisation state through an `Arc`; dropping the
//! group stops it (after a last bounded release if the group has failed) and joins it
//! before any memory is released.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// How long a call must have waited at a stream's head, while an LL call is in flight,
/// before a hung-up peer is blamed for it. An LL call whose data already arrived
/// completes within microseconds, so a peer that sent its part and exited normally is
/// not blamed; one that died first is named about this much later.
const LL_DEAD_PEER_GRACE: Duration = Duration::from_millis(20);

use super::GpuSync;
use super::inflight::{Action, InFlight, Observation, poll_interval};
use super::sentinel::{Sentinel, Step};
use crate::cuda::{Event, raw};
use crate::error::{Error, Result};
use crate::memory::SymmetricBuffer;

/// The running watchdog of one group, with its sentinel (NOTE [stuck watchdog]);
/// dropping it stops and joins the watchdog thread, then the sentinel's.
pub(crate) struct Watchdog {
    sync: Arc<GpuSync>,
    thread: Option<JoinHandle<()>>,
    // Dropped after `drop` joined the watchdog: it watches the watchdog's last rounds too.
    _sentinel: Sentinel,
}

impl Watchdog {
    /// Starts the watchdog of `sync`'s group.
    pub(crate) fn spawn(sync: Arc<GpuSync>) -> Result<Self> {
        let sentinel = Sentinel::spawn(sync.clone())?;
        let s = sync.clone();
        let thread = std::thread::Builder::new()
            .name(format!("lowcon-watch-{}", sync.core.rank))
            .spawn(move || {
                raw::capture::relax_this_thread();
                s.watch()
            })
            .map_err(|e| Error::Rendezvous(format!("rank {}: cannot start the watchdog: {e}", sync.core.rank)))?;
        Ok(Self { sync, thread: Some(thread), _sentinel: sentinel })
    }
}

impl Drop for Watchdog {
    fn drop(&mut self) {
        {
            let _q = self.sync.inflight.lock().unwrap_or_else(|p| p.into_inner());
            self.sync.stopping.store(true, Ordering::Release);
            self.sync.wake.notify_all();
        }
        if let Some(t) = self.thread.take()
            && t.join().is_err()
        {
            crate::log::warn(&format!("rank {}: the watchdog thread panicked", self.sync.core.rank));
        }
    }
}

/// NOTE [watchdog wakes]: a call registered while the watchdog sleeps its long idle tick
/// (100 ms) wakes it, so a dead peer is found within the short tick's bounds. Waking it
/// costs the caller a futex wake, on every call of a loop that synchronises between
/// calls (a replay loop, with `track_replay` after each launch). So the watchdog keeps
/// its short tick (1 ms) for `IDLE_GRACE` after the last call it saw in flight, and only
/// then sleeps long with `watchdog_asleep` set; a call wakes it only then. The flag is
/// set and read under `inflight`'s lock (the condition variable's), so a call pushed
/// before the watchdog's check is seen in flight, and one pushed after sees the flag.
const IDLE_GRACE: Duration = Duration::from_millis(200);

/// How long a stopping watchdog keeps releasing the waits of a failed group.
const FINAL_RELEASE: Duration = Duration::from_secs(2);

impl GpuSync {
    /// The watchdog thread's body.
    fn watch(&self) {
        let rank = self.core.rank;
        if let Err(e) = self.device.bind_to_thread() {
            self.core.fail(Error::Rendezvous(format!("rank {rank}: the watchdog cannot use the GPU: {e}")));
            return;
        }
        let run = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            let mut last_busy = Instant::now();
            while !self.stopping.load(Ordering::Acquire) {
                let busy = self.round();
                let q = self.inflight.lock().unwrap_or_else(|p| p.into_inner());
                if !self.stopping.load(Ordering::Acquire) {
                    if busy || q.pending() > 0 {
                        last_busy = Instant::now();
                    }
                    // NOTE [watchdog wakes]: the short tick for IDLE_GRACE after the
                    // last call, then the long sleep, flagged so that a new call wakes it.
                    let short = last_busy.elapsed() < IDLE_GRACE;
                    self.watchdog_asleep.store(!short, Ordering::Relaxed);
                    let (q, _) = self.wake.wait_timeout(q, poll_interval(short)).unwrap_or_else(|p| p.into_inner());
                    self.watchdog_asleep.store(false, Ordering::Relaxed);
                    drop(q);
                }
            }
            // Stopping: calls may still be in flight (the caller need not synchronise
            // before dropping the group). Keep watching, and releasing once failed, until
            // they are done: the memory released next waits for them, and a peer that
            // dies meanwhile must still be found. Bounded by the timeout rule (healthy)
            // or FINAL_RELEASE (failed).
            let start = Instant::now();
            while self.round() {
                let cap = if self.core.is_failed() { FINAL_RELEASE } else { self.rules.stuck_after };
                if start.elapsed() > cap {
                    break;
                }
                std::thread::sleep(poll_interval(true));
            }
        }));
        if run.is_err() {
            self.core.fail(Error::Rendezvous(format!(
                "rank {rank}: lowcon's watchdog panicked (a bug in lowcon); the group can no longer detect failures"
            )));
        }
    }

    /// One round: observe, decide, act. Returns whether calls are still in flight.
    fn round(&self) -> bool {
        let rank = self.core.rank;
        // NOTE [completions off the lock]: the events are queried with the lock released,
        // so a caller registering its next call never waits for the queries.
        let probe = self.inflight.lock().unwrap_or_else(|p| p.into_inner()).probe();
        let done = {
            let _step = self.watch_step.enter(Step::Poll);
            InFlight::completed(&probe)
        };
        drop(probe);
        let (head_wait, unused) = {
            let mut q = self.inflight.lock().unwrap_or_else(|p| p.into_inner());
            let w = q.retire(&done, Instant::now());
            self.watch_step.set_head_wait(w);
            (w, self.take_unused(&q))
        };
        // Freed outside the lock and off this thread: unmapping (or, with IPC handles,
        // cuMemFree, which can wait for the whole device) must not stop the watchdog.
        if !unused.is_empty() {
            let spawned = std::thread::Builder::new().name("lowcon-free".into()).spawn(move || {
                raw::capture::relax_this_thread();
                for buf in unused {
                    // SAFETY: every call that used the buffer has completed on this rank,
                    // and those calls' exit barriers mean the peers are done with it too.
                    if let Err(e) = unsafe { buf.close_unused() } {
                        crate::log::warn(&format!("rank {rank}: freeing a retired workspace: {e}"));
                    }
                }
            });
            if let Err(e) = spawned {
                crate::log::warn(&format!("rank {rank}: cannot start a thread to free workspaces: {e}"));
            }
        }
        let rec = self.claimed_record();
        let hung_up = if head_wait.is_some() {
            (0..self.core.world).filter(|&p| p != rank).find(|&p| self.core.mesh.peer_hung_up(p))
        } else {
            None
        };
        let obs = Observation { failed: self.core.is_failed(), record_claimed: rec.is_some(), hung_up, head_wait };
        let fail = |e: Error| {
            self.core.fail(e);
        };
        match self.rules.decide(&obs) {
            Action::Nothing => return head_wait.is_some(),
            Action::FailRecord => fail(Error::DeviceTimeout(rec.expect("claimed"))),
            Action::FailPeerGone(peer) => {
                // Only if work really waits for it: a peer that finished its part and
                // exited leaves calls (or the caller's own work) that still complete.
                // LL kernels wait for data lines, which the pad does not show: a call
                // stuck at a stream's head for the grace period while an LL call is in
                // flight counts as waiting for the peer.
                // Replayed graphs likewise: their flags do not say which wait is current
                // (NOTE [graph flags]).
                let ll_stuck = head_wait.is_some_and(|w| w >= LL_DEAD_PEER_GRACE)
                    && (self.ll_in_flight() || self.replay_in_flight());
                if !ll_stuck && !self.awaits_missing_from(peer) {
                    return true;
                }
                fail(Error::PeerGone { rank, peer, what: "its signals were awaited on the GPU".into() })
            }
            Action::FailStuck => {
                self.diagnosing.store(true, Ordering::Release);
                let e = self.diagnose_timeout();
                self.diagnosing.store(false, Ordering::Release);
                fail(e)
            }
            Action::Release => {}
        }
        let n = self.release_round();
        // Rounds repeat every millisecond until the streams drain: log the first and
        // then one a second.
        let k = self.release_rounds.fetch_add(1, Ordering::Relaxed);
        if k.is_multiple_of(1000) {
            crate::log::trace(rank, &format!("released {n} awaited pad slots (release round {})", k + 1));
        }
        true
    }

    /// Takes the retired workspaces whose last users have completed.
    fn take_unused(&self, q: &InFlight<Arc<Event>>) -> Vec<SymmetricBuffer> {
        let mut retired = self.retired.lock().unwrap_or_else(|p| p.into_inner());
        let (done, keep): (Vec<_>, Vec<_>) = retired.drain(..).partition(|(seq, _)| q.done_before(*seq));
        *retired = keep;
        done.into_iter().map(|(_, b)| b).collect()
    }
}
