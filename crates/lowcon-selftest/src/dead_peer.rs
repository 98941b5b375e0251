//! Dead peers: one rank leaves mid-loop (SIGKILL, or a clean `_exit(0)`) and every other
//! rank must get an error naming it, within the group's timeout, with no launcher's help
//! (`lowcon selftest coll-dead-peer`; `docs/faults.md` has the whole fault matrix).

use std::time::Duration;

use lowcon::{
    AllGatherAlgorithm, AllGatherOptions, Arrival, DType, HostInput, ReduceLaunch, ReduceOp, ReduceScatterAlgorithm,
    ReduceScatterOptions, SyncMethod,
};

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

/// What the GPU dead-peer loop calls.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DeadPeerCall {
    /// All-gathers from symmetric buffers.
    AllGather,
    /// All-gathers from ordinary buffers (staged).
    Staged,
    /// bf16-wire reduce-scatters of ordinary buffers: from the second call on, each is
    /// launched as one graph (NOTE [wire replays]), so the victim dies between replays.
    Wire,
    /// Reduce-scatters of a bf16 input into f32 on sm-direct (FSDP2's bf16 copy-in), of
    /// ordinary buffers: packed as the wire is (`RsPlan::packs`) and replayed alike.
    Bf16In,
    /// The same, read in place (`map_ordinary`, NOTE [bf16 input read in place]): an
    /// address exchange per call, then one kernel; nothing packed or replayed.
    Bf16InPlace,
}

/// GPU backend: [`dead_peer_loop`] over `call`s of `count` f32 elements per rank (the
/// all-gather's input, the reduce-scatter's output), enqueued back to back, never
/// synchronising until the end.
#[allow(clippy::too_many_arguments)]
pub fn gpu_dead_peer(
    victim: usize,
    kill_at: usize,
    exit: Exit,
    count: usize,
    call: DeadPeerCall,
    timeout: Duration,
    sync: SyncMethod,
) -> Result<String, String> {
    let run = Runner::from_env(true, Some(timeout))?;
    let r = run.gpu("coll-dead-peer")?;
    let (rank, world) = (r.g.rank(), r.g.world_size());
    let packs = matches!(call, DeadPeerCall::Wire | DeadPeerCall::Bf16In);
    let coll = match call {
        DeadPeerCall::Wire => Coll::ReduceScatter(ReduceScatterAlgorithm::Auto, ReduceOp::Sum),
        DeadPeerCall::Bf16In | DeadPeerCall::Bf16InPlace => {
            Coll::ReduceScatter(ReduceScatterAlgorithm::SmDirect, ReduceOp::Sum)
        }
        _ => Coll::AllGather(AllGatherAlgorithm::Auto),
    };
    let case = Case {
        launch: ReduceLaunch::Auto,
        arrival: Arrival::Auto,
        coll,
        dtype: DType::F32,
        count,
        symmetric: call == DeadPeerCall::AllGather,
        misalign: 0,
        sync,
        channel: 0,
    };
    let (inp, out) = r.prepare(&case, &input_bytes(DType::F32, 7, rank, 0, case.in_count(world)))?;
    let wire = ReduceScatterOptions { wire: Some(DType::Bf16), ..case.rs_opts(ReduceScatterAlgorithm::Auto) };
    let bf16_in = case.rs_opts(ReduceScatterAlgorithm::SmDirect);
    let in_place = ReduceScatterOptions { map_ordinary: Some(true), ..bf16_in };
    let res = dead_peer_loop(
        rank,
        victim,
        kill_at,
        exit,
        1000,
        timeout,
        |_| {
            // A bf16 input takes the first half of the f32 case's input buffer.
            let bf16 = matches!(call, DeadPeerCall::Bf16In | DeadPeerCall::Bf16InPlace);
            let in_dtype = if bf16 { DType::Bf16 } else { case.dtype };
            let ib = inp.buf(0, case.in_count(world), in_dtype).map_err(lowcon::Error::InvalidArgument)?;
            let ob = out.buf(0, case.out_count(world), case.dtype).map_err(lowcon::Error::InvalidArgument)?;
            match call {
                DeadPeerCall::Wire => r.g.reduce_scatter(ib, ob, ReduceOp::Sum, r.stream, &wire),
                DeadPeerCall::Bf16In => r.g.reduce_scatter(ib, ob, ReduceOp::Sum, r.stream, &bf16_in),
                DeadPeerCall::Bf16InPlace => r.g.reduce_scatter(ib, ob, ReduceOp::Sum, r.stream, &in_place),
                _ => r.g.all_gather(ib, ob, r.stream, &case.ag_opts(AllGatherAlgorithm::Auto)),
            }
        },
        || r.g.synchronize(r.stream),
    );
    // The replays are counted on the host: readable after the group failed, unless the
    // stats' device read fails too (then not judged).
    let replays = r.g.stats().map(|s| s.wire_replays);
    lowcon::log::trace(rank, &format!("dead-peer loop ended ({replays:?} wire replays): {res:?}"));
    crate::survivors_barrier("coll-dead-peer", world - 1)?;
    drop((inp, out));
    drop(run);
    lowcon::log::trace(rank, "buffers and group released");
    // The loop's own verdict first; then, for the calls that pack, that they replayed (a
    // loop of eager calls would not test the graphs).
    let detail = res?;
    if packs && world > 1 && matches!(replays, Ok(0)) {
        return Err(format!("rank {rank}: coll-dead-peer {call:?}: no call was replayed (wire_replays 0)"));
    }
    Ok(detail)
}
