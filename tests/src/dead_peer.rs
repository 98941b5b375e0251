//! Dead peers: one rank leaves mid-loop (SIGKILL, or a clean `_exit(0)`) and every other
//! rank must get an error naming it, within the group's timeout, with no launcher's help
//! (`lowcon selftest coll-dead-peer`; `docs/faults.md` has the whole fault matrix).

use std::time::{Duration, Instant};

use lowcon::{AllGatherAlgorithm, AllGatherOptions, DType, HostInput, ReduceLaunch, SyncMethod};

use crate::coll::{Case, Coll, GpuRunner, HostRunner, input_bytes};

/// Whether `err` blames `victim` (directly, or through the group's recorded failure).
pub(crate) fn blames(err: &lowcon::Error, victim: usize) -> bool {
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

/// Host backend: [`dead_peer_loop`] over small all-gathers.
pub fn host_dead_peer(victim: usize, kill_at: usize, exit: Exit, timeout: Duration) -> Result<String, String> {
    let r = HostRunner::from_env(Some(timeout))?;
    let (rank, world) = (r.g.rank(), r.g.world_size());
    let input = input_bytes(DType::F32, 7, rank, 0, 1024);
    let mut out = vec![0u8; input.len() * world];
    let opts = AllGatherOptions::default();
    let res = dead_peer_loop(
        rank,
        victim,
        kill_at,
        exit,
        1000,
        timeout,
        |_| r.g.all_gather(HostInput::Plain(&input), &mut out, DType::F32, &opts),
        || Ok(()),
    );
    crate::survivors_barrier("coll-dead-peer", world - 1)?;
    res
}

/// GPU backend: [`dead_peer_loop`] over all-gathers of `count` f32 elements per rank
/// (from symmetric buffers, or `staged` from ordinary ones), enqueued back to back,
/// never synchronising until the end.
#[allow(clippy::too_many_arguments)]
pub fn gpu_dead_peer(
    victim: usize,
    kill_at: usize,
    exit: Exit,
    count: usize,
    staged: bool,
    timeout: Duration,
    sync: SyncMethod,
) -> Result<String, String> {
    let r = GpuRunner::from_env(Some(timeout))?;
    let (rank, world) = (r.g.rank(), r.g.world_size());
    let case = Case {
        launch: ReduceLaunch::Auto,
        coll: Coll::AllGather(AllGatherAlgorithm::Auto),
        dtype: DType::F32,
        count,
        symmetric: !staged,
        misalign: 0,
        sync,
        channel: 0,
    };
    let (inp, out) = r.prepare(&case, &input_bytes(DType::F32, 7, rank, 0, case.count))?;
    let res = dead_peer_loop(
        rank,
        victim,
        kill_at,
        exit,
        1000,
        timeout,
        |_| {
            let ib = inp.buf(0, case.count, case.dtype).map_err(lowcon::Error::InvalidArgument)?;
            let ob = out.buf(0, case.count * world, case.dtype).map_err(lowcon::Error::InvalidArgument)?;
            r.g.all_gather(ib, ob, &r.stream, &case.ag_opts(AllGatherAlgorithm::Auto))
        },
        || r.g.synchronize(&r.stream),
    );
    lowcon::log::trace(rank, &format!("dead-peer loop ended: {res:?}"));
    crate::survivors_barrier("coll-dead-peer", world - 1)?;
    drop((inp, out));
    drop(r);
    lowcon::log::trace(rank, "buffers and group released");
    res
}
