//! A rank that leaves on purpose (SIGKILL or a clean `_exit(0)`) in the middle of a loop
//! of calls, and how the survivors' errors are judged: the driver every dead-peer
//! scenario shares (`crate::dead_peer`, and the graph replays of `crate::coll::graph`).

use std::time::{Duration, Instant};

/// Whether `err` blames `victim` (directly, or through the group's recorded failure).
pub fn blames(err: &lowcon::Error, victim: usize) -> bool {
    match err {
        lowcon::Error::PeerGone { peer, .. } | lowcon::Error::PeerTimeout { peer, .. } => *peer == victim,
        lowcon::Error::GroupFailed(msg) => msg.contains(&format!("peer rank {victim} ")),
        _ => false,
    }
}

/// How the victim of a dead-peer scenario leaves.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Exit {
    /// SIGKILL: like a crash, no destructors, no goodbye on any socket.
    Kill,
    /// `_exit(0)`: a clean exit no launcher counts as a failure, with calls in flight.
    Clean,
}

impl std::str::FromStr for Exit {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "sigkill" => Ok(Exit::Kill),
            "exit" => Ok(Exit::Clean),
            o => Err(format!("exit {o:?}: expected sigkill or exit")),
        }
    }
}

/// Rank `victim` leaves (`exit`) before call `kill_at` of a loop of `iters` collective
/// calls (`call(i)` enqueues or runs call `i`; `finish` synchronises). Every other rank
/// must get an error naming the victim, from a call or from `finish`, within the
/// group's timeout, without help from a launcher.
#[allow(clippy::too_many_arguments)]
pub fn dead_peer_loop(
    rank: usize,
    victim: usize,
    kill_at: usize,
    exit: Exit,
    iters: usize,
    timeout: Duration,
    mut call: impl FnMut(usize) -> lowcon::Result<()>,
    finish: impl FnOnce() -> lowcon::Result<()>,
) -> Result<String, String> {
    let mut since: Option<Instant> = None;
    let verdict = |err: lowcon::Error, i: usize, since: Option<Instant>| -> Result<String, String> {
        let took = since.map_or(Duration::ZERO, |t| t.elapsed());
        if !blames(&err, victim) {
            return Err(format!("rank {rank}: call {i} failed without naming rank {victim}: {err}"));
        }
        if took > timeout + Duration::from_secs(5) {
            return Err(format!("rank {rank}: noticed only after {took:?} (timeout {timeout:?}): {err}"));
        }
        Ok(format!("call {i} failed {:.0} ms after the kill point: {err}", took.as_secs_f64() * 1e3))
    };
    for i in 0..iters {
        if i == kill_at {
            if rank == victim {
                match exit {
                    Exit::Kill => {
                        let _ = nix::sys::signal::raise(nix::sys::signal::Signal::SIGKILL);
                    }
                    // SAFETY: `_exit` ends the process at once; nothing runs after it.
                    Exit::Clean => unsafe { nix::libc::_exit(0) },
                }
            }
            since = Some(Instant::now());
        }
        if let Err(err) = call(i) {
            return verdict(err, i, since);
        }
    }
    match finish() {
        Err(err) => verdict(err, iters, since),
        Ok(()) => Err(format!("rank {rank}: {iters} calls and a synchronize succeeded although rank {victim} died")),
    }
}
