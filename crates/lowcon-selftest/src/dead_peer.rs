//! Dead peers: one rank leaves mid-loop (SIGKILL, or a clean `_exit(0)`) and every other
//! rank must get an error naming it, within the group's timeout, with no launcher's help
//! (`lowcon selftest coll-dead-peer`; `docs/faults.md` has the whole fault matrix).

use std::time::Duration;

use lowcon::{AllGatherAlgorithm, AllGatherOptions, DType, HostInput, ReduceLaunch, SyncMethod};

use crate::coll::{Case, Coll, Runner, host_group, input_bytes};

pub use crate::dying::{Exit, blames, dead_peer_loop};

/// Host backend: [`dead_peer_loop`] over small all-gathers.
pub fn host_dead_peer(victim: usize, kill_at: usize, exit: Exit, timeout: Duration) -> Result<String, String> {
    let g = host_group(Some(timeout))?;
    let (rank, world) = (g.rank(), g.world_size());
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
        |_| g.all_gather(HostInput::Plain(&input), &mut out, DType::F32, &opts),
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
    let run = Runner::from_env(true, Some(timeout))?;
    let r = run.gpu("coll-dead-peer")?;
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
            r.g.all_gather(ib, ob, r.stream, &case.ag_opts(AllGatherAlgorithm::Auto))
        },
        || r.g.synchronize(r.stream),
    );
    lowcon::log::trace(rank, &format!("dead-peer loop ended: {res:?}"));
    crate::survivors_barrier("coll-dead-peer", world - 1)?;
    drop((inp, out));
    drop(run);
    lowcon::log::trace(rank, "buffers and group released");
    res
}
