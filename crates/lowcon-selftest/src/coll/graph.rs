//! Collectives captured into CUDA graphs (NOTE [graph flags] in
//! `lowcon::sync::gpu::graph`). The host backend has no graphs: these run on GPUs only.
//!
//! - one graph of twelve calls (every algorithm, plain and symmetric buffers, an
//!   in-place all-gather, a captured barrier) replayed `replays` times, with fresh
//!   random inputs and poisoned outputs before every replay and every output checked
//!   against the CPU reference; every tenth replay is followed by eager calls on the
//!   same channel (epochs, LL rounds and workspace shared with the replays);
//! - two graphs on two channels, replayed concurrently from two streams, checked;
//! - what a capture refuses, with the capture still valid afterwards: a workspace or
//!   LL buffer not reserved before, point-to-point signals, `synchronize`.
//!
//! - which waits a capture records (`CollOptions::graph_sync`, NOTE [captured sync]):
//!   kernel waits by default whatever `sync` says, stream-memop waits when asked, read
//!   off the graph's node types, and the replays checked.
//!
//! `graph_dead_peer` kills a rank while the others replay.

use lowcon::cuda::Graph;

use super::runners::Mem;
use super::*;

/// Workspace each test channel reserves before its capture.
const RESERVE: usize = 64 << 20;

/// One captured call: its case, its buffers, and whether it is an in-place all-gather
/// (the input is this rank's slot of the output).
struct Call {
    case: Case,
    in_place: bool,
    inp: Mem,
    out: Mem,
}

fn case(coll: Coll, dtype: DType, count: usize, symmetric: bool, sync: SyncMethod, channel: u32) -> Case {
    Case {
        coll,
        dtype,
        count,
        symmetric,
        misalign: 0,
        sync,
        channel,
        launch: ReduceLaunch::Auto,
        arrival: Arrival::Auto,
    }
}

/// The twelve calls of the main graph (on `channel`).
fn mixed(sync: SyncMethod, channel: u32) -> Vec<(Case, bool)> {
    use AllGatherAlgorithm as A;
    use ReduceScatterAlgorithm as R;
    let c = |coll, dtype, count, symmetric| case(coll, dtype, count, symmetric, sync, channel);
    vec![
        (c(Coll::AllGather(A::CePull), DType::F32, 70_001, false), false),
        (c(Coll::AllGather(A::CePull), DType::Bf16, 4_099, true), false),
        (c(Coll::AllGather(A::CePull), DType::F32, 8_191, true), true),
        (c(Coll::AllGather(A::CePush), DType::F16, 33_333, true), false),
        (c(Coll::AllGather(A::SmOneshot), DType::F32, 1_001, false), false),
        (c(Coll::AllGather(A::Ll), DType::Bf16, 16_385, false), false),
        (c(Coll::ReduceScatter(R::CeReduce, ReduceOp::Sum), DType::F32, 300_001, false), false),
        // One reduction launch per call: its piece flags must be back at rest each replay.
        (
            Case {
                launch: ReduceLaunch::Once,
                ..c(Coll::ReduceScatter(R::CeReduce, ReduceOp::Avg), DType::Bf16, 700_001, true)
            },
            false,
        ),
        (c(Coll::ReduceScatter(R::SmDirect, ReduceOp::Avg), DType::Bf16, 12_345, true), false),
        (c(Coll::ReduceScatter(R::TmaReduce, ReduceOp::Max), DType::F32, 65_536, true), false),
        (c(Coll::ReduceScatter(R::TmaPushReduce, ReduceOp::Sum), DType::F32, 20_000, true), false),
        (c(Coll::ReduceScatter(R::Ll, ReduceOp::Sum), DType::F16, 9_999, false), false),
    ]
}

impl Call {
    fn new(r: &GpuRunner, stream: &Stream, (case, in_place): (Case, bool)) -> Result<Self, String> {
        let world = r.g.world_size();
        let s = case.dtype.size();
        let out = Mem::new(r.g, stream, case.symmetric, case.out_count(world) * s + 16)?;
        let inp = Mem::new(r.g, stream, case.symmetric, if in_place { 16 } else { case.in_count(world) * s + 16 })?;
        Ok(Self { case, in_place, inp, out })
    }

    /// Where this rank's input goes.
    fn input_ptr(&self, rank: usize) -> u64 {
        match self.in_place {
            true => self.out.ptr() + (rank * self.case.count * self.case.dtype.size()) as u64,
            false => self.inp.ptr(),
        }
    }

    /// Poisons the output and writes fresh input for `seed`, on `stream` (synchronous).
    fn refill(&self, stream: &Stream, seed: u64, rank: usize, world: usize) -> Result<(), String> {
        let input = input_bytes(self.case.dtype, seed, rank, 0, self.case.in_count(world));
        let out_len = self.case.out_count(world) * self.case.dtype.size();
        // SAFETY: both buffers hold what is written (sized in `new`); synchronous copies.
        unsafe {
            stream.fill(self.out.ptr(), 0xFF, out_len).map_err(e)?;
            stream.copy_from_host(self.input_ptr(rank), &input).map_err(e)?;
        }
        Ok(())
    }

    /// The input and output buffers of a call.
    fn bufs(&self, rank: usize, world: usize) -> Result<(DeviceBuf<'_>, DeviceBuf<'_>), String> {
        let c = &self.case;
        let ob = self.out.buf(0, c.out_count(world), c.dtype)?;
        let ib = match self.in_place {
            true => self.out.buf(rank * c.count * c.dtype.size(), c.count, c.dtype)?,
            false => self.inp.buf(0, c.in_count(world), c.dtype)?,
        };
        Ok((ib, ob))
    }

    fn enqueue(&self, r: &GpuRunner, stream: &Stream) -> Result<(), String> {
        let (rank, world) = (r.g.rank(), r.g.world_size());
        let c = &self.case;
        let (ib, ob) = self.bufs(rank, world)?;
        match c.coll {
            Coll::AllGather(a) => r.g.all_gather(ib, ob, stream, &c.ag_opts(a)),
            Coll::ReduceScatter(a, op) => r.g.reduce_scatter(ib, ob, op, stream, &c.rs_opts(a)),
        }
        .map_err(|m| format!("rank {rank}: {}: {m}", c.name()))
    }

    /// Checks the output against the reference for `seed`; returns the elements checked.
    fn check(&self, stream: &Stream, seed: u64, rank: usize, world: usize, what: &str) -> Result<usize, String> {
        let mut got = vec![0u8; self.case.out_count(world) * self.case.dtype.size()];
        // SAFETY: `out` holds `got.len()` bytes; synchronous copy.
        unsafe { stream.copy_to_host(&mut got, self.out.ptr()) }.map_err(e)?;
        let (wrong, first) = compare(&self.case, seed, rank, world, &got);
        if wrong > 0 {
            let place = if self.in_place { " in place" } else { "" };
            return Err(format!("rank {rank}: {what}: {}{place}: {wrong} wrong; first: {first}", self.case.name()));
        }
        Ok(self.case.out_count(world))
    }
}

/// Captures `calls` (and, with `barrier`, a barrier between them) on `stream`.
fn capture(
    r: &GpuRunner,
    stream: &Stream,
    calls: &[Call],
    barrier: Option<(u32, SyncMethod)>,
) -> Result<Graph, String> {
    stream.begin_capture().map_err(e)?;
    let mut res = Ok(());
    for (i, c) in calls.iter().enumerate() {
        res = res.and_then(|()| c.enqueue(r, stream));
        if i == calls.len() / 2
            && let Some((ch, m)) = barrier
        {
            res = res.and_then(|()| r.g.barrier(stream, ch, m).map_err(e));
        }
    }
    // The capture ends either way, so a failure leaves the stream usable.
    let g = stream.end_capture().map_err(e);
    res?;
    g
}

/// The seed of replay `i`, from the shared `base`.
fn seed(base: u64, i: usize) -> u64 {
    base ^ (i as u64 + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15)
}

/// The graph checks for one sync method (module docs).
pub fn gpu_graph(r: &GpuRunner, sync: SyncMethod, replays: usize) -> Result<String, String> {
    let (rank, world) = (r.g.rank(), r.g.world_size());
    let refused = refusals(r, sync)?;
    let ch = 3;
    r.g.reserve_workspace(ch, RESERVE).map_err(e)?;
    let calls = mixed(sync, ch).into_iter().map(|c| Call::new(r, r.stream, c)).collect::<Result<Vec<_>, _>>()?;
    let graph = capture(r, r.stream, &calls, Some((ch, sync)))?;
    let base = seed_of_rank0(|m| r.g.all_gather_bytes("graph-base", m))?;
    // Eager calls on the same channel between replays: epochs, LL rounds and the
    // workspace are shared with the captured calls.
    let eager = [
        (case(Coll::AllGather(AllGatherAlgorithm::CePull), DType::F32, 5_000, false, sync, ch), false),
        (case(Coll::AllGather(AllGatherAlgorithm::Ll), DType::F32, 777, false, sync, ch), false),
        (
            case(
                Coll::ReduceScatter(ReduceScatterAlgorithm::SmDirect, ReduceOp::Sum),
                DType::F32,
                3_001,
                true,
                sync,
                ch,
            ),
            false,
        ),
    ]
    .into_iter()
    .map(|c| Call::new(r, r.stream, c))
    .collect::<Result<Vec<_>, _>>()?;
    let (mut checked, mut eager_calls) = (0usize, 0usize);
    // Where a replay's time goes (printed, not asserted): refilling the inputs, the
    // replay to its synchronize, checking the outputs (the CPU reference), in ms.
    let mut split = [Vec::new(), Vec::new(), Vec::new()];
    for i in 0..replays {
        let s = seed(base, i);
        let t0 = Instant::now();
        for c in &calls {
            c.refill(r.stream, s, rank, world)?;
        }
        let t1 = Instant::now();
        r.g.replay(&graph).map_err(|m| format!("rank {rank}: replay {i}: {m}"))?;
        r.g.synchronize(r.stream).map_err(|m| format!("rank {rank}: replay {i}: {m}"))?;
        let t2 = Instant::now();
        for c in &calls {
            checked += c.check(r.stream, s, rank, world, &format!("replay {i}"))?;
        }
        for (v, (a, b)) in split.iter_mut().zip([(t0, t1), (t1, t2), (t2, Instant::now())]) {
            v.push((b - a).as_secs_f64() * 1e3);
        }
        if i % 10 == 9 {
            let s = seed(base ^ 0xEA6E4, i);
            for c in &eager {
                c.refill(r.stream, s, rank, world)?;
                c.enqueue(r, r.stream)?;
            }
            r.g.synchronize(r.stream).map_err(|m| format!("rank {rank}: eager calls after replay {i}: {m}"))?;
            for c in &eager {
                checked += c.check(r.stream, s, rank, world, &format!("eager call after replay {i}"))?;
                eager_calls += 1;
            }
        }
    }
    let host = replay_host_costs(r, &graph)?;
    let concurrent = two_streams(r, sync, replays.div_ceil(10))?;
    let waits = captured_sync(r, sync)?;
    let [fill, replay, check] = split.map(median);
    Ok(format!(
        "{sync:?}: {} captured calls replayed {replays} times with {eager_calls} eager calls between, \
         {concurrent}, {checked} elements checked; per replay (ms, medians): refill {fill:.2}, replay to \
         synchronize {replay:.2}, check {check:.2}; {waits}; refused: {refused}; {host}",
        calls.len()
    ))
}

/// The median of `v` (0 for none).
fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v.get(v.len() / 2).copied().unwrap_or(0.0)
}

/// The host time of replaying `graph` and of its parts (NOTE [captured sync]): µs
/// medians of 200 rounds, printed, not asserted (speed is the benchmarks'). A round:
/// launch and `track_replay` on an idle stream (the watchdog is woken), launch and
/// `track_replay` again behind it (no wake), an event record alone, the capture query
/// alone, then `synchronize`.
fn replay_host_costs(r: &GpuRunner, graph: &Graph) -> Result<String, String> {
    let stream = graph.stream();
    let ev = stream.event(false).map_err(e)?;
    let mut t = vec![Vec::new(); 6];
    for _ in 0..200 {
        let mut at = [Instant::now(); 7];
        graph.launch().map_err(e)?;
        at[1] = Instant::now();
        r.g.track_replay(stream).map_err(e)?;
        at[2] = Instant::now();
        graph.launch().map_err(e)?;
        at[3] = Instant::now();
        r.g.track_replay(stream).map_err(e)?;
        at[4] = Instant::now();
        stream.record(&ev).map_err(e)?;
        at[5] = Instant::now();
        let _ = stream.capture_status();
        at[6] = Instant::now();
        r.g.synchronize(stream).map_err(e)?;
        for (k, v) in t.iter_mut().enumerate() {
            v.push((at[k + 1] - at[k]).as_secs_f64() * 1e6);
        }
    }
    let m: Vec<f64> = t.into_iter().map(median).collect();
    let nodes = graph.node_counts().map_err(e)?;
    Ok(format!(
        "host µs per replay of {} nodes ({} memop): launch {:.1}, track_replay {:.1} (idle stream) / {:.1} (behind a \
         replay), second launch {:.1}, event record alone {:.1}, capture query {:.2}",
        nodes.total, nodes.mem_ops, m[0], m[1], m[3], m[2], m[4], m[5]
    ))
}

/// Captures a ce-pull all-gather and a ce-reduce reduce-scatter with eager `sync` and
/// each `graph_sync` (the default, then both methods), and checks the waits recorded by
/// the graph's node types: stream-memop waits are batch nodes, kernel waits add none.
/// Each graph is replayed twice, checked.
fn captured_sync(r: &GpuRunner, sync: SyncMethod) -> Result<String, String> {
    use AllGatherAlgorithm as A;
    use ReduceScatterAlgorithm as R;
    let (rank, world) = (r.g.rank(), r.g.world_size());
    let ch = 6;
    r.g.reserve_workspace(ch, RESERVE).map_err(e)?;
    let calls = [
        (case(Coll::AllGather(A::CePull), DType::F32, 10_001, true, sync, ch), false),
        (case(Coll::ReduceScatter(R::CeReduce, ReduceOp::Sum), DType::Bf16, 30_001, true, sync, ch), false),
    ]
    .into_iter()
    .map(|c| Call::new(r, r.stream, c))
    .collect::<Result<Vec<_>, _>>()?;
    let base = seed_of_rank0(|m| r.g.all_gather_bytes("graph-captured-sync", m))?;
    let mut seen = Vec::new();
    for graph_sync in [None, Some(SyncMethod::Kernel), Some(SyncMethod::StreamMemop)] {
        r.stream.begin_capture().map_err(e)?;
        let mut res = Ok(());
        for c in &calls {
            let (ib, ob) = c.bufs(rank, world)?;
            // The case sets both syncs to `sync`; `None` puts the library's default for
            // graphs under test.
            let gs = graph_sync.or(lowcon::CollOptions::<A>::default().graph_sync);
            let ag = AllGatherOptions { graph_sync: gs, ..c.case.ag_opts(A::CePull) };
            let rs = ReduceScatterOptions { graph_sync: gs, ..c.case.rs_opts(R::CeReduce) };
            res = res.and_then(|()| {
                match c.case.coll {
                    Coll::AllGather(_) => r.g.all_gather(ib, ob, r.stream, &ag),
                    Coll::ReduceScatter(_, op) => r.g.reduce_scatter(ib, ob, op, r.stream, &rs),
                }
                .map_err(e)
            });
        }
        let graph = r.stream.end_capture().map_err(e);
        res?;
        let graph = graph?;
        let nodes = graph.node_counts().map_err(e)?;
        let memop = graph_sync == Some(SyncMethod::StreamMemop);
        let name = graph_sync.map_or("default".to_string(), |m| format!("{m:?}"));
        // At one rank there is nobody to wait for: no barrier node either way.
        if world > 1 && memop != (nodes.mem_ops > 0) {
            return Err(format!(
                "rank {rank}: eager sync {sync:?}, graph_sync {name}: the graph holds {} stream-memop nodes of \
                 {} ({} kernels): expected {}",
                nodes.mem_ops,
                nodes.total,
                nodes.kernels,
                if memop { "some" } else { "none (kernel waits)" }
            ));
        }
        for i in 0..2 {
            let s = seed(base, i);
            for c in &calls {
                c.refill(r.stream, s, rank, world)?;
            }
            r.g.replay(&graph).map_err(|m| format!("rank {rank}: graph_sync {name}: replay {i}: {m}"))?;
            r.g.synchronize(r.stream).map_err(e)?;
            for c in &calls {
                c.check(r.stream, s, rank, world, &format!("graph_sync {name}, replay {i}"))?;
            }
        }
        seen.push(format!("{name} {}/{}", nodes.mem_ops, nodes.total));
    }
    Ok(format!("memop nodes/nodes by graph_sync: {}", seen.join(", ")))
}

/// Two graphs on channels 4 and 5, captured on two streams and replayed concurrently.
fn two_streams(r: &GpuRunner, sync: SyncMethod, replays: usize) -> Result<String, String> {
    use AllGatherAlgorithm as A;
    use ReduceScatterAlgorithm as R;
    let (rank, world) = (r.g.rank(), r.g.world_size());
    let streams =
        [r.g.device().stream(StreamPriority::High).map_err(e)?, r.g.device().stream(StreamPriority::High).map_err(e)?];
    let sets = [
        vec![
            (case(Coll::AllGather(A::CePull), DType::F32, 50_000, false, sync, 4), false),
            (case(Coll::ReduceScatter(R::SmDirect, ReduceOp::Sum), DType::F32, 20_000, true, sync, 4), false),
        ],
        vec![
            (case(Coll::ReduceScatter(R::CeReduce, ReduceOp::Max), DType::Bf16, 40_000, false, sync, 5), false),
            (case(Coll::AllGather(A::Ll), DType::F32, 3_000, false, sync, 5), false),
        ],
    ];
    let mut graphs = Vec::new();
    let mut all = Vec::new();
    for (k, set) in sets.into_iter().enumerate() {
        r.g.reserve_workspace(4 + k as u32, RESERVE).map_err(e)?;
        let calls = set.into_iter().map(|c| Call::new(r, &streams[k], c)).collect::<Result<Vec<_>, _>>()?;
        graphs.push(capture(r, &streams[k], &calls, None)?);
        all.push(calls);
    }
    let base = seed_of_rank0(|m| r.g.all_gather_bytes("graph-two-streams", m))?;
    for i in 0..replays {
        let s = seed(base, i);
        for (k, calls) in all.iter().enumerate() {
            for c in calls {
                c.refill(&streams[k], s, rank, world)?;
            }
        }
        for g in &graphs {
            r.g.replay(g).map_err(|m| format!("rank {rank}: concurrent replay {i}: {m}"))?;
        }
        for (k, calls) in all.iter().enumerate() {
            r.g.synchronize(&streams[k]).map_err(e)?;
            for c in calls {
                c.check(&streams[k], s, rank, world, &format!("concurrent replay {i} on channel {}", 4 + k))?;
            }
        }
    }
    Ok(format!("two graphs on channels 4 and 5 replayed {replays} times concurrently"))
}

/// What a capture must refuse (each with `InvalidArgument`, naming what to do), and the
/// capture still valid after each refusal: the graph of the call that follows it works.
fn refusals(r: &GpuRunner, sync: SyncMethod) -> Result<String, String> {
    let rank = r.g.rank();
    let world = r.g.world_size();
    // Fresh channels: nothing reserved there yet (a fresh group per method would cost
    // more; channels 9 and 10 are used by nothing else in this test).
    let (ws_ch, ll_ch) = if sync == SyncMethod::Kernel { (9, 10) } else { (11, 12) };
    let plain = Call::new(
        r,
        r.stream,
        (case(Coll::AllGather(AllGatherAlgorithm::CePull), DType::F32, 1000, false, sync, ws_ch), false),
    )?;
    let ll = Call::new(
        r,
        r.stream,
        (case(Coll::AllGather(AllGatherAlgorithm::Ll), DType::F32, 100, false, sync, ll_ch), false),
    )?;
    let symm = Call::new(
        r,
        r.stream,
        (case(Coll::AllGather(AllGatherAlgorithm::CePull), DType::F32, 1000, true, sync, ws_ch), false),
    )?;
    let expect = |what: &str, res: Result<(), String>, needle: &str| -> Result<(), String> {
        match res {
            Err(m) if m.contains(needle) && m.contains(&format!("rank {rank}")) => Ok(()),
            Err(m) => Err(format!("rank {rank}: {what}: refused, but the message lacks {needle:?}: {m}")),
            Ok(()) => Err(format!("rank {rank}: {what} was captured although it must be refused")),
        }
    };
    r.stream.begin_capture().map_err(e)?;
    let a = plain.enqueue(r, r.stream);
    let b = ll.enqueue(r, r.stream);
    let c = r.g.put_signal(r.stream, (rank + 1) % world, ws_ch, sync).map_err(e);
    let d = r.g.synchronize(r.stream).map_err(e);
    // The capture is still valid: a symmetric ce-pull (no workspace) is captured and runs.
    let ok = symm.enqueue(r, r.stream);
    let graph = r.stream.end_capture().map_err(e);
    expect("a ce-pull that needs a workspace not reserved", a, "reserve_workspace")?;
    expect("an ll call before the channel's LL buffer exists", b, "LL buffer")?;
    expect("put_signal", c, "cannot be captured")?;
    expect("synchronize", d, "cannot be captured")?;
    ok?;
    let graph = graph?;
    let base = seed_of_rank0(|m| r.g.all_gather_bytes("graph-refusals", m))?;
    symm.refill(r.stream, base, rank, world)?;
    r.g.replay(&graph).map_err(e)?;
    r.g.synchronize(r.stream).map_err(e)?;
    symm.check(r.stream, base, rank, world, "the call captured after the refusals")?;
    Ok("unreserved workspace, LL buffer, put_signal and synchronize (capture still valid)".into())
}

/// Rank `victim` dies (`exit`) at replay `kill_at` of a graph of calls (ce-pull and
/// sm-direct, both syncs' barriers) replayed back to back: every other rank must get an
/// error naming it, from a replay or from `synchronize`, within the group's timeout.
pub fn graph_dead_peer(
    victim: usize,
    kill_at: usize,
    exit: crate::dying::Exit,
    timeout: std::time::Duration,
    sync: SyncMethod,
) -> Result<String, String> {
    let run = Runner::from_env(true, Some(timeout))?;
    let r = run.gpu("coll-graph")?;
    let (rank, world) = (r.g.rank(), r.g.world_size());
    r.g.reserve_workspace(0, RESERVE).map_err(e)?;
    let calls = [
        (case(Coll::AllGather(AllGatherAlgorithm::CePull), DType::F32, 1 << 18, false, sync, 0), false),
        (
            case(
                Coll::ReduceScatter(ReduceScatterAlgorithm::SmDirect, ReduceOp::Sum),
                DType::F32,
                1 << 16,
                true,
                sync,
                0,
            ),
            false,
        ),
    ]
    .into_iter()
    .map(|c| Call::new(&r, r.stream, c))
    .collect::<Result<Vec<_>, _>>()?;
    for c in &calls {
        c.refill(r.stream, 11, rank, world)?;
    }
    let graph = capture(&r, r.stream, &calls, None)?;
    let res = crate::dying::dead_peer_loop(
        rank,
        victim,
        kill_at,
        exit,
        1000,
        timeout,
        |_| r.g.replay(&graph),
        || r.g.synchronize(r.stream),
    );
    crate::survivors_barrier("graph-dead-peer", world - 1)?;
    res
}
