//! `lowcon bench all-gather|reduce-scatter`: an nccl-tests-style sweep of lowcon's
//! algorithms (and sync methods and CTA counts) with NCCL in the same run.
//!
//! Definitions (nccl-tests'): `size` is the bytes per rank (the all-gather shard, or the
//! reduce-scatter output); `total` = ranks × size; algbw = total / time; busbw = algbw ×
//! (n − 1) / n. Time: each rank runs `reps` batches of `iters` back-to-back calls between
//! two CUDA events after `warmup` calls; a rank's time is the median batch's mean per
//! call, and the table shows the max over ranks. Each batch's first event follows a
//! device barrier of the ranks (lowcon's, on its channel 0), so a rank whose host comes
//! back late from the previous batch's synchronisation adds nothing to the others' time
//! (before 2026-11-27 it did: eager rows of calls faster on the GPU than their host
//! could queue them ran up to 2x slow, by the luck of each batch). With `--graph`, each configuration gets
//! two rows: the eager calls timed so, and then the replays of a graph of `iters` captured
//! calls timed the same way (a batch is one replay), each row with its own host µs per
//! call. Buffers are symmetric (zero-copy) unless `--staged`; NCCL's are cudaMalloc'ed
//! (default mode) or window-registered `ncclMemAlloc` memory (copy-engine mode).

use lowcon::cuda::Stream;
use lowcon::{AllGatherOptions, DType, GpuGroup, GpuGroupOptions, ReduceOp, ReduceScatterOptions, SyncMethod};
use lowcon_selftest::coll::{Case, Coll, GpuRunner, Runner, count_wrong};

use crate::report::{self, Output, SweepRow};
use crate::stats::{gather_max, median};

mod buffers;
mod host;
use crate::{Res, nccl};
use buffers::Buffers;
pub use host::host;

/// Which collective a sweep runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    AllGather,
    ReduceScatter,
}

impl Kind {
    pub fn name(self) -> &'static str {
        match self {
            Kind::AllGather => "all-gather",
            Kind::ReduceScatter => "reduce-scatter",
        }
    }
}

/// What a sweep measures (the flags of `lowcon bench all-gather|reduce-scatter`).
#[derive(Clone, Debug)]
pub struct SweepOptions {
    pub kind: Kind,
    /// Smallest size per rank, bytes (`-b`).
    pub min_bytes: usize,
    /// Largest size per rank, bytes (`-e`).
    pub max_bytes: usize,
    /// Size multiplication factor (`-f`; below 2, only the smallest size).
    pub factor: usize,
    /// Timed calls per batch (`-n`).
    pub iters: usize,
    /// Untimed calls first (`-w`).
    pub warmup: usize,
    /// Timed batches; the median batch counts.
    pub reps: usize,
    pub dtype: DType,
    /// Reduction operator (reduce-scatter).
    pub op: ReduceOp,
    /// lowcon algorithms by name.
    pub algorithms: Vec<String>,
    pub methods: Vec<SyncMethod>,
    /// CTA counts of the SM parts (`None`: the library's default).
    pub ctas: Vec<Option<u32>>,
    /// ce-reduce pipeline pieces (`None`: the library's choice).
    pub pipeline: Vec<Option<u32>>,
    /// Check every size against a CPU reference and count wrong elements.
    pub check: bool,
    /// Measure NCCL too.
    pub nccl: bool,
    /// Ordinary device buffers (staged through the workspace) instead of symmetric ones.
    pub staged: bool,
    /// The host backend (CPU shared memory) instead of GPUs.
    pub backend_host: bool,
    /// Besides the eager calls, capture `iters` calls into a CUDA graph and time its
    /// replays (GPU; NCCL's calls are captured the same way): two rows per
    /// configuration, eager and replayed, each with its device and host time per call.
    pub graph: bool,
    /// Reduce-scatter: the bf16 wire (NOTE [bf16 wire]); the data are bf16-exact f32
    /// unless `inexact`.
    pub wire: Option<DType>,
    /// With `wire`: data whose every bottom half is nonzero (every piece falls back).
    pub inexact: bool,
    /// With `graph`: rows keep the host µs per call alone; their device times (which
    /// mean nothing where ranks share a GPU) are dropped (`SweepRow::host_only`).
    pub host_only: bool,
}

/// Runs the sweep `a` asks for (on GPUs or the host backend) as one rank: prints the
/// table (rank 0), writes `out`, and fails if `--check` found wrong elements.
pub fn run(a: &SweepOptions, out: &Output) -> Res<()> {
    if a.backend_host && a.graph {
        return Err("--graph: the host backend has no CUDA graphs (use --backend gpu)".into());
    }
    if a.host_only && (!a.graph || a.nccl) {
        return Err("host-only rows: with --graph and without NCCL".into());
    }
    // `host_only` rows drop their device columns as they are made (printed at once).
    let rows = if a.backend_host { host(a)? } else { gpu(a)? };
    report::write(out, &rows, &[])?;
    if let Some(bad) = rows.iter().find(|r| r.wrong.is_some_and(|w| w > 0)) {
        return Err(format!(
            "{} at {} bytes per rank: {} wrong elements",
            bad.label(),
            bad.size,
            bad.wrong.unwrap_or(0)
        )
        .into());
    }
    Ok(())
}

/// Largest size per rank at which the sweep runs `ll` (a small-message algorithm: half of
/// what it moves is flags, and it runs a kernel per 1 MiB round at 2 ranks).
const LL_SWEEP_MAX: usize = 16 << 20;

fn sizes(a: &SweepOptions) -> Vec<usize> {
    let mut v = Vec::new();
    let mut s = a.min_bytes.max(a.dtype.size());
    while s <= a.max_bytes {
        v.push(s / a.dtype.size() * a.dtype.size());
        if a.factor < 2 {
            break;
        }
        s *= a.factor;
    }
    v
}

#[allow(clippy::too_many_arguments)]
fn row(
    a: &SweepOptions,
    world: usize,
    implementation: &str,
    algorithm: &str,
    sync: &str,
    ctas: Option<u32>,
    size: usize,
    us: f64,
    wrong: Option<u64>,
) -> SweepRow {
    let total = size * world;
    let algbw = total as f64 / (us * 1e-6) / 1e9;
    SweepRow {
        bench: a.kind.name().into(),
        implementation: implementation.into(),
        algorithm: algorithm.into(),
        sync: sync.into(),
        ctas,
        pipeline: None,
        ranks: world,
        dtype: a.dtype.name().into(),
        op: (a.kind == Kind::ReduceScatter).then(|| a.op.name().to_string()),
        size,
        total,
        count: size / a.dtype.size(),
        time_us: us,
        algbw_gbs: algbw,
        busbw_gbs: algbw * (world - 1) as f64 / world as f64,
        wrong,
        graph: a.graph,
        host_us: None,
        wire: None,
        wire_busbw_gbs: None,
        host_only: false,
        time_us_min: None,
        time_us_max: None,
        batches_us: None,
    }
}

/// A row's bytes on the wire: with `wire`, busbw also on the bytes that crossed (the
/// wire type's share of `size`, the f32 bytes asked for).
fn with_wire(mut r: SweepRow, wire: Option<DType>, dtype: DType) -> SweepRow {
    if let Some(w) = wire {
        r.wire = Some(w.name().into());
        r.wire_busbw_gbs = Some(r.busbw_gbs * w.size() as f64 / dtype.size() as f64);
    }
    r
}

/// Prints the table header (rank 0).
fn header(a: &SweepOptions, world: usize, what: &str) {
    let what = if a.host_only { "ranks (--host-only: host µs per call alone)" } else { what };
    println!(
        "# lowcon bench {} on {world} {what}, dtype {}{}, {} x {} iterations after {} warm-up; time = median batch, max over ranks",
        a.kind.name(),
        a.dtype,
        if a.kind == Kind::ReduceScatter { format!(", op {}", a.op) } else { String::new() },
        a.reps,
        a.iters,
        a.warmup
    );
    report::print_sweep_columns();
}

/// Runs the sweep on GPUs; returns the rows (complete on rank 0).
pub fn gpu(a: &SweepOptions) -> Res<Vec<SweepRow>> {
    let run = Runner::new(GpuGroup::from_env(GpuGroupOptions::default())?)?;
    let runner = run.gpu("the GPU sweep")?;
    let (rank, world) = (runner.g.rank(), runner.g.world_size());
    let sizes = sizes(a);
    let max = *sizes.last().ok_or("no sizes in the range")?;
    let (in_max, out_max) = match a.kind {
        Kind::AllGather => (max, max * world),
        Kind::ReduceScatter => (max * world, max),
    };
    if rank == 0 {
        header(a, world, "GPUs");
    }
    let mut rows = Vec::new();
    // A progress line (rewritten in place) only on a terminal: in a log it would be
    // glued to the table's rows.
    let progress = progress_shown();
    // Symmetric (or ordinary) buffers for the largest size, filled with a harmless
    // pattern (bf16/f32 0x3c3c... is a small normal number).
    let bufs = Buffers::new(&runner, a.staged, in_max, out_max)?;
    if a.wire.is_some() && !a.inexact {
        // f32 values that are bf16-exact (0x3c3c0000: 0.0115), as FSDP2's upcast
        // gradients: the wire sends their top halves, nothing falls back. (`--inexact`
        // keeps the 0x3c3c3c3c fill, whose every bottom half is nonzero.)
        bufs.input.fill_words(&runner, 0x3c3c_0000, in_max)?;
    }
    let algos: Vec<String> = a.algorithms.clone();
    for algo in &algos {
        for &m in &a.methods {
            for &ctas in &a.ctas {
                for &pipeline in &a.pipeline {
                    for &size in &sizes {
                        if algo == "ll" && size > LL_SWEEP_MAX {
                            continue;
                        }
                        let count = size / a.dtype.size();
                        let label_ctas = ctas;
                        let call = |s: &Stream| -> lowcon::Result<()> {
                            let (ic, oc) = match a.kind {
                                Kind::AllGather => (count, count * world),
                                Kind::ReduceScatter => (count * world, count),
                            };
                            let (ib, ob) = (bufs.input(ic, a.dtype)?, bufs.output(oc, a.dtype)?);
                            match a.kind {
                                Kind::AllGather => {
                                    // `--sync` names the waits of captured calls too.
                                    let (algorithm, arrival) = crate::ag_variant(algo)?;
                                    let opts = AllGatherOptions { algorithm, arrival, ctas, ..Default::default() }
                                        .with_sync(m);
                                    runner.g.all_gather(ib, ob, s, &opts)
                                }
                                Kind::ReduceScatter => {
                                    let (algorithm, reduce_launch) = crate::rs_variant(algo)?;
                                    let opts = ReduceScatterOptions {
                                        algorithm,
                                        reduce_launch,
                                        ctas,
                                        pipeline,
                                        wire: a.wire,
                                        ..Default::default()
                                    }
                                    .with_sync(m);
                                    runner.g.reduce_scatter(ib, ob, a.op, s, &opts)
                                }
                            }
                        };
                        let t = time_calls(runner.g, runner.stream, a, &mut |s| call(s).map_err(|e| e.to_string()))?;
                        let wrong = if a.check {
                            let case = case_for(a, algo, m, count)?;
                            let (w, first, _) = count_wrong(&run, &case, &format!("check/{algo}/{size}"))?;
                            if w > 0 {
                                eprintln!("rank {rank}: {}: {w} wrong, first: {first}", case.name());
                            }
                            Some(w as u64)
                        } else {
                            None
                        };
                        let mut values = vec![wrong.unwrap_or(0) as f64];
                        values.extend(t.values());
                        let mx =
                            gather_max(runner.g, &format!("sweep/{algo}/{m:?}/{ctas:?}/{pipeline:?}/{size}"), &values)?;
                        let timed = Timed::from_values(&mx[1..], a.graph);
                        let mk = |us: f64| {
                            let mut r = row(
                                a,
                                world,
                                "lowcon",
                                algo,
                                m.name(),
                                label_ctas,
                                size,
                                us,
                                wrong.map(|_| mx[0] as u64),
                            );
                            r.pipeline = pipeline;
                            with_wire(r, a.wire, a.dtype)
                        };
                        for mut r in host_split(mk, &timed) {
                            if a.host_only {
                                r.host_only();
                            }
                            if rank == 0 {
                                report::print_sweep_row(&r);
                            }
                            rows.push(r);
                        }
                        if rank == 0 && progress {
                            eprint!("\r{} {} {size} B done   ", a.kind.name(), rows.last().expect("pushed").label());
                        }
                    }
                }
            }
        }
    }
    if a.nccl {
        rows.extend(nccl_rows(&runner, a, &sizes, in_max, out_max)?);
    }
    if rank == 0 && progress {
        eprintln!();
    }
    drop(bufs);
    runner.g.store_barrier("sweep-done")?;
    Ok(rows)
}

/// Whether the sweep shows its progress line: only when stderr is a terminal (and stdout
/// too, since the line is rewritten over the table's last row when both are one).
fn progress_shown() -> bool {
    use std::io::IsTerminal;
    std::io::stderr().is_terminal() && std::io::stdout().is_terminal()
}

fn case_for(a: &SweepOptions, algo: &str, m: SyncMethod, count: usize) -> Res<Case> {
    let (coll, launch, arrival) = match a.kind {
        Kind::AllGather => {
            let (algorithm, arrival) = crate::ag_variant(algo)?;
            (Coll::AllGather(algorithm), lowcon::ReduceLaunch::Auto, arrival)
        }
        Kind::ReduceScatter => {
            let (algorithm, launch) = crate::rs_variant(algo)?;
            (Coll::ReduceScatter(algorithm, a.op), launch, lowcon::Arrival::Auto)
        }
    };
    Ok(Case { coll, dtype: a.dtype, count, symmetric: !a.staged, misalign: 0, sync: m, channel: 0, launch, arrival })
}

/// Per-call times of one configuration, µs: the eager calls' (device and host), and with
/// `--graph` the replays' (device, and the host's share of a replay). What
/// [`time_calls`] measured on one rank, or after [`gather_max`] the max over ranks.
#[derive(Clone, Debug, PartialEq)]
struct Timed {
    eager: PerCall,
    replay: Option<PerCall>,
}

/// Device and host µs per call: the median batch of each (they may come from different
/// batches), the fastest and slowest batch's device µs per call (the spread), and each
/// batch's device µs per call in order.
#[derive(Clone, Debug, PartialEq)]
struct PerCall {
    device_us: f64,
    host_us: f64,
    device_range_us: (f64, f64),
    batches_us: Vec<f64>,
}

impl Timed {
    /// As the numbers [`gather_max`] folds: for the eager calls, then the replays (zeros
    /// without, so every rank sends as many), the device and host µs and the fastest and
    /// slowest batch's device µs; then each eager batch's device µs, then each replayed
    /// batch's (zeros without). Folded by max, the range becomes the max over ranks of
    /// each rank's fastest batch and the slowest batch of any rank, so it holds the
    /// median's fold, and each batch the time of its slowest rank (the ranks start each
    /// batch together).
    fn values(&self) -> Vec<f64> {
        let e = &self.eager;
        let zeros = PerCall { device_us: 0.0, host_us: 0.0, device_range_us: (0.0, 0.0), batches_us: vec![] };
        let r = self.replay.as_ref().unwrap_or(&zeros);
        let mut v = vec![e.device_us, e.host_us, e.device_range_us.0, e.device_range_us.1];
        v.extend([r.device_us, r.host_us, r.device_range_us.0, r.device_range_us.1]);
        v.extend(&e.batches_us);
        v.extend((0..e.batches_us.len()).map(|i| r.batches_us.get(i).copied().unwrap_or(0.0)));
        v
    }

    /// Back from [`Timed::values`] (folded over ranks); `graph`: whether replays were timed.
    fn from_values(v: &[f64], graph: bool) -> Self {
        let n = v.len().saturating_sub(8) / 2;
        let at = |i: usize, b: usize| PerCall {
            device_us: v[i],
            host_us: v[i + 1],
            device_range_us: (v[i + 2], v[i + 3]),
            batches_us: v[8 + b * n..8 + (b + 1) * n].to_vec(),
        };
        Timed { eager: at(0, 0), replay: graph.then(|| at(4, 1)) }
    }
}

/// Batch times as [`SweepRow::batches_us`] keeps them (None for none).
pub(crate) fn batches_text(us: &[f64]) -> Option<String> {
    (!us.is_empty()).then(|| us.iter().map(|x| format!("{x:.2}")).collect::<Vec<_>>().join(" "))
}

/// The table rows of one timed configuration, `mk` building a row for a device time
/// (µs per call; it derives the bandwidths). Without replays, one row (no host time, as
/// the plain sweep always had); with `--graph`, two: the eager calls' row (their own
/// device time and host time per call) and the replayed one (the replays' device time
/// and the host's share of a replay per call).
fn host_split(mk: impl Fn(f64) -> SweepRow, t: &Timed) -> Vec<SweepRow> {
    let timed = |p: &PerCall, graph: bool, host_us: Option<f64>| SweepRow {
        graph,
        host_us,
        time_us_min: Some(p.device_range_us.0),
        time_us_max: Some(p.device_range_us.1),
        batches_us: batches_text(&p.batches_us),
        ..mk(p.device_us)
    };
    match &t.replay {
        None => vec![timed(&t.eager, false, None)],
        Some(replay) => vec![timed(&t.eager, false, Some(t.eager.host_us)), timed(replay, true, Some(replay.host_us))],
    }
}

/// Times `call` as described in the module docs on this rank: `reps` batches of `iters`
/// eager calls after the warm-up, and with `--graph` then `iters` calls captured into a
/// graph once (after the eager calls, which also set up workspaces) and `reps` batches of
/// one replay each.
fn time_calls(
    g: &GpuGroup,
    stream: &Stream,
    a: &SweepOptions,
    call: &mut dyn FnMut(&Stream) -> Result<(), String>,
) -> Res<Timed> {
    let iters = a.iters.max(1);
    // The first call may set up the channel (workspace, LL buffer).
    call(stream)?;
    for _ in 1..a.warmup.max(2) {
        call(stream)?;
    }
    g.synchronize(stream)?;
    let (e0, e1) = (stream.event(true)?, stream.event(true)?);
    let eager = batches(g, stream, (&e0, &e1), a.reps, iters, &mut || {
        for _ in 0..iters {
            call(stream)?;
        }
        Ok(())
    })?;
    let replay = match a.graph {
        true => {
            stream.begin_capture()?;
            let mut captured = Ok(());
            for _ in 0..iters {
                captured = captured.and_then(|()| call(stream));
            }
            let graph = stream.end_capture();
            captured?;
            let graph = graph?;
            // One untimed replay first (the graph's upload).
            g.replay(&graph)?;
            g.synchronize(stream)?;
            Some(batches(g, stream, (&e0, &e1), a.reps, iters, &mut || g.replay(&graph).map_err(|e| e.to_string()))?)
        }
        false => None,
    };
    Ok(Timed { eager, replay })
}

/// `reps` batches of `batch` (which makes `iters` calls), each between two events on
/// `stream` and synchronised after: the median batch's device and host µs per call.
fn batches(
    g: &GpuGroup,
    stream: &Stream,
    (e0, e1): (&lowcon::cuda::Event, &lowcon::cuda::Event),
    reps: usize,
    iters: usize,
    batch: &mut dyn FnMut() -> Result<(), String>,
) -> Res<PerCall> {
    let (mut device, mut host) = (Vec::new(), Vec::new());
    for _ in 0..reps.max(1) {
        // The ranks meet on the device first (module docs): the batch starts together.
        g.barrier(stream, 0, SyncMethod::Kernel)?;
        stream.record(e0)?;
        let t = std::time::Instant::now();
        batch()?;
        host.push(t.elapsed().as_secs_f64() * 1e6 / iters as f64);
        stream.record(e1)?;
        g.synchronize(stream)?;
        device.push(e0.elapsed_ms(e1)? as f64 * 1e3 / iters as f64);
    }
    let lo = device.iter().copied().fold(f64::INFINITY, f64::min);
    let hi = device.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    Ok(PerCall { device_us: median(&device), host_us: median(&host), device_range_us: (lo, hi), batches_us: device })
}

/// NCCL's rows: default mode, then copy-engine mode where this NCCL supports it.
fn nccl_rows(r: &GpuRunner, a: &SweepOptions, sizes: &[usize], in_max: usize, out_max: usize) -> Res<Vec<SweepRow>> {
    let (rank, world) = (r.g.rank(), r.g.world_size());
    let mut rows = Vec::new();
    let v = match nccl::version() {
        Ok(v) => v,
        Err(why) => {
            if rank == 0 {
                println!("# NCCL baseline skipped: {why}");
            }
            return Ok(rows);
        }
    };
    for (mode, ce) in [("nccl", false), ("nccl-ce", true)] {
        if ce && v < 22800 {
            if rank == 0 {
                println!("# nccl-ce skipped: NCCL {v} predates copy-engine collectives (2.28)");
            }
            continue;
        }
        let res = (|| -> Res<Vec<SweepRow>> {
            let mut out = Vec::new();
            let mut comm = nccl::Comm::new(r.g, mode, ce)?;
            let (send, recv) =
                if ce { (Some(comm.alloc_window(in_max)?), Some(comm.alloc_window(out_max)?)) } else { (None, None) };
            let plain_in = r.stream.alloc_zeros::<u8>(if ce { 1 } else { in_max })?;
            let plain_out = r.stream.alloc_zeros::<u8>(if ce { 1 } else { out_max })?;
            let sp = send.as_ref().map_or(lowcon::cuda::device_ptr(&plain_in), |m| m.ptr());
            let rp = recv.as_ref().map_or(lowcon::cuda::device_ptr(&plain_out), |m| m.ptr());
            // With a wire, NCCL reduces the f32 data and, beside it, the same element
            // count in the wire's type (what NCCL's users send to halve the bytes).
            let dtypes: Vec<DType> = std::iter::once(a.dtype).chain(a.wire.filter(|&w| w != a.dtype)).collect();
            for &dt in &dtypes {
                for &size in sizes {
                    let count = size / a.dtype.size();
                    let mut call = |s: &Stream| -> Result<(), String> {
                        // SAFETY: both buffers hold the sweep's maximum sizes.
                        unsafe {
                            match a.kind {
                                Kind::AllGather => comm.all_gather(sp, rp, size, s.raw() as _),
                                Kind::ReduceScatter => comm.reduce_scatter(sp, rp, count, dt, a.op, s.raw() as _),
                            }
                        }
                    };
                    let t = time_calls(r.g, r.stream, a, &mut call)?;
                    let mx = gather_max(r.g, &format!("sweep/{mode}/{dt}/{size}"), &t.values())?;
                    let name = if dt == a.dtype { mode.to_string() } else { format!("{mode} {dt}") };
                    let mk = |us: f64| {
                        let mut r = row(a, world, &name, mode, "-", None, size, us, None);
                        if a.wire.is_some() {
                            // busbw on the f32 bytes (`size`), and on the bytes NCCL sent.
                            r = with_wire(r, Some(dt), a.dtype);
                            r.dtype = dt.name().into();
                        }
                        r
                    };
                    for mut r in host_split(mk, &Timed::from_values(&mx, a.graph)) {
                        if a.host_only {
                            r.host_only();
                        }
                        if rank == 0 {
                            report::print_sweep_row(&r);
                        }
                        out.push(r);
                    }
                }
            }
            r.stream.synchronize()?;
            drop(comm);
            Ok(out)
        })();
        match res {
            Ok(v) => rows.extend(v),
            Err(e) => {
                if rank == 0 {
                    println!("# {mode} skipped: {e}");
                }
                eprintln!("rank {rank}: {mode}: {e}");
            }
        }
    }
    Ok(rows)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn options(kind: Kind, graph: bool) -> SweepOptions {
        SweepOptions {
            kind,
            min_bytes: 8 << 10,
            max_bytes: 256 << 20,
            factor: 4,
            iters: 20,
            warmup: 5,
            reps: 5,
            dtype: DType::Bf16,
            op: ReduceOp::Sum,
            algorithms: vec!["ll".into()],
            methods: vec![SyncMethod::Kernel],
            ctas: vec![None],
            pipeline: vec![None],
            check: false,
            nccl: true,
            staged: false,
            backend_host: false,
            graph,
            wire: None,
            inexact: false,
            host_only: false,
        }
    }

    #[test]
    fn host_only_rows_keep_the_host_time_alone_and_need_graphs_without_nccl() {
        let a = options(Kind::AllGather, true);
        let mk = |us| row(&a, 4, "lowcon", "ce-pull", "kernel", None, 1 << 20, us, None);
        let mut rows = host_split(mk, &timed(true));
        rows.iter_mut().for_each(SweepRow::host_only);
        let (eager, replayed) = (&rows[0], &rows[1]);
        assert_eq!((eager.host_us, replayed.host_us), (Some(6.5), Some(0.2)));
        for r in &rows {
            assert!(r.host_only && r.time_us == 0.0 && r.busbw_gbs == 0.0 && r.wire_busbw_gbs.is_none());
            assert_eq!((r.time_us_min, r.time_us_max), (None, None));
        }
        // Only graph sweeps without NCCL keep host rows (the CLI says so before this).
        for a in [
            SweepOptions { host_only: true, ..options(Kind::AllGather, false) },
            SweepOptions { host_only: true, ..options(Kind::AllGather, true) },
        ] {
            let e = run(&a, &Output::default()).unwrap_err().to_string();
            assert!(e.contains("--graph and without NCCL"), "{e}");
        }
    }

    fn timed(graph: bool) -> Timed {
        // Eager: 12 µs on the device (batches 11 to 20), 6.5 µs of host per call; replayed:
        // 5 (4.8 to 5.5) and 0.2.
        Timed::from_values(&[12.0, 6.5, 11.0, 20.0, 5.0, 0.2, 4.8, 5.5], graph)
    }

    #[test]
    fn a_graph_sweep_keeps_eager_and_replayed_times_each_in_its_own_row() {
        let a = options(Kind::AllGather, true);
        let mk = |us| row(&a, 2, "lowcon", "ll", "kernel", None, 64 << 10, us, None);
        let rows = host_split(mk, &timed(true));
        assert_eq!(rows.len(), 2);
        let (eager, replayed) = (&rows[0], &rows[1]);
        assert_eq!((eager.graph, eager.time_us, eager.host_us), (false, 12.0, Some(6.5)));
        assert_eq!((replayed.graph, replayed.time_us, replayed.host_us), (true, 5.0, Some(0.2)));
        // Each row keeps its own batches' spread.
        let range = |r: &SweepRow| (r.time_us_min, r.time_us_max);
        assert_eq!((range(eager), range(replayed)), ((Some(11.0), Some(20.0)), (Some(4.8), Some(5.5))));
        // Each row's bandwidths follow its own time: 2 × 64 KiB in 12 and in 5 µs.
        let gbs = |us: f64| (2 * (64 << 10)) as f64 / (us * 1e-6) / 1e9;
        assert!((eager.algbw_gbs - gbs(12.0)).abs() < 1e-9, "{eager:?}");
        assert!((replayed.algbw_gbs - gbs(5.0)).abs() < 1e-9, "{replayed:?}");
        assert!((eager.busbw_gbs - gbs(12.0) / 2.0).abs() < 1e-9, "{eager:?}");
        assert_eq!((eager.label(), replayed.label()), ("lowcon ll kernel".into(), "lowcon ll kernel graph".into()));
    }

    #[test]
    fn a_graph_sweep_over_a_wire_derives_each_rows_wire_busbw_from_its_own_time() {
        let a = SweepOptions { dtype: DType::F32, wire: Some(DType::Bf16), ..options(Kind::ReduceScatter, true) };
        // As NCCL's bf16 row beside an f32 sweep builds it.
        let mk = |us| {
            let mut r =
                with_wire(row(&a, 2, "nccl bf16", "nccl", "-", None, 1 << 20, us, None), Some(DType::Bf16), a.dtype);
            r.dtype = "bf16".into();
            r
        };
        let rows = host_split(mk, &timed(true));
        assert_eq!(rows.len(), 2);
        for (r, us) in rows.iter().zip([12.0, 5.0]) {
            assert_eq!(r.time_us, us);
            let wire = r.wire_busbw_gbs.expect("a wire row");
            assert!((wire - r.busbw_gbs / 2.0).abs() < 1e-9, "{r:?}");
        }
        assert!(rows[0].busbw_gbs < rows[1].busbw_gbs, "{rows:?}");
        assert_eq!((rows[0].label(), rows[1].label()), ("nccl bf16".into(), "nccl bf16 graph".into()));
    }

    #[test]
    fn a_plain_sweep_has_one_row_with_the_eager_time_and_no_host_time() {
        let a = options(Kind::ReduceScatter, false);
        let mk = |us| row(&a, 4, "lowcon", "ce-reduce", "kernel", None, 1 << 20, us, Some(0));
        // Whatever the other ranks sent for the replay, a plain sweep has none.
        let rows = host_split(mk, &timed(false));
        assert_eq!(rows.len(), 1);
        assert_eq!((rows[0].graph, rows[0].time_us, rows[0].host_us, rows[0].wrong), (false, 12.0, None, Some(0)));
        assert_eq!((rows[0].time_us_min, rows[0].time_us_max), (Some(11.0), Some(20.0)));
    }

    #[test]
    fn timings_survive_the_fold_over_ranks_in_order() {
        let pc = |device_us, host_us, lo, hi, batches: &[f64]| PerCall {
            device_us,
            host_us,
            device_range_us: (lo, hi),
            batches_us: batches.to_vec(),
        };
        let t = Timed {
            eager: pc(12.0, 6.5, 11.0, 20.0, &[11.0, 12.0, 20.0]),
            replay: Some(pc(5.0, 0.2, 4.8, 5.5, &[4.8, 5.0, 5.5])),
        };
        let head = [12.0, 6.5, 11.0, 20.0, 5.0, 0.2, 4.8, 5.5];
        assert_eq!(t.values(), [&head[..], &[11.0, 12.0, 20.0, 4.8, 5.0, 5.5]].concat());
        assert_eq!(Timed::from_values(&t.values(), true), t);
        let plain = Timed { replay: None, ..t.clone() };
        assert_eq!(plain.values(), [&head[..4], &[0.0; 4], &[11.0, 12.0, 20.0], &[0.0; 3]].concat());
        assert_eq!(Timed::from_values(&plain.values(), false), plain);
        // Two ranks: the max of each number, as `gather_max` folds them. The range stays
        // around the median: the max over ranks of each rank's fastest batch up to the
        // slowest batch of any rank; each batch becomes its slowest rank's.
        let other = Timed {
            eager: pc(13.0, 6.0, 12.5, 14.0, &[14.0, 12.5, 13.0]),
            replay: Some(pc(4.0, 0.3, 3.9, 6.0, &[6.0, 3.9, 4.0])),
        };
        let mx = crate::stats::max_over_ranks(&[t.values(), other.values()]);
        let folded = Timed::from_values(&mx, true);
        assert_eq!(
            folded,
            Timed {
                eager: pc(13.0, 6.5, 12.5, 20.0, &[14.0, 12.5, 20.0]),
                replay: Some(pc(5.0, 0.3, 4.8, 6.0, &[6.0, 5.0, 5.5])),
            }
        );
        for p in [&folded.eager, folded.replay.as_ref().unwrap()] {
            assert!(p.device_range_us.0 <= p.device_us && p.device_us <= p.device_range_us.1, "{p:?}");
        }
        // The rows keep each batch, in order; none without batches.
        let a = options(Kind::AllGather, true);
        let rows = host_split(|us| row(&a, 2, "lowcon", "ll", "kernel", None, 8 << 10, us, None), &folded);
        assert_eq!(rows[0].batches_us.as_deref(), Some("14.00 12.50 20.00"));
        assert_eq!(rows[1].batches_us.as_deref(), Some("6.00 5.00 5.50"));
        assert_eq!(batches_text(&[]), None);
    }

    #[test]
    fn the_sizes_go_up_by_the_factor_from_the_smallest_and_stop_at_the_largest() {
        let k = |n: usize| n << 10;
        // The CLI's defaults: 8K by 4 up to 256M ends at 128M.
        let a = options(Kind::AllGather, false);
        assert_eq!(sizes(&a), [k(8), k(32), k(128), k(512), k(2048), k(8192), k(32768), k(131072)]);
        let a = SweepOptions { factor: 2, max_bytes: k(64), ..a };
        assert_eq!(sizes(&a), [k(8), k(16), k(32), k(64)]);
        // Below 2, only the smallest; sizes are whole elements.
        let a = SweepOptions { factor: 1, min_bytes: 8191, dtype: DType::F32, ..a };
        assert_eq!(sizes(&a), [8188]);
    }
}
