//! `lowcon bench all-gather|reduce-scatter`: an nccl-tests-style sweep of lowcon's
//! algorithms (and sync methods and CTA counts) with NCCL in the same run.
//!
//! Definitions (nccl-tests'): `size` is the bytes per rank (the all-gather shard, or the
//! reduce-scatter output); `total` = ranks × size; algbw = total / time; busbw = algbw ×
//! (n − 1) / n. Time: each rank runs `reps` batches of `iters` back-to-back calls between
//! two CUDA events after `warmup` calls; a rank's time is the median batch's mean per
//! call, and the table shows the max over ranks. Buffers are symmetric (zero-copy)
//! unless `--staged`; NCCL's are cudaMalloc'ed (default mode) or window-registered
//! `ncclMemAlloc` memory (copy-engine mode).

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
    /// Capture `iters` calls into a CUDA graph and time its replays (GPU; NCCL's calls
    /// are captured the same way), and report the host time per call, eager against
    /// replayed.
    pub graph: bool,
    /// Reduce-scatter: the bf16 wire (NOTE [bf16 wire]); the data are bf16-exact f32
    /// unless `inexact`.
    pub wire: Option<DType>,
    /// With `wire`: data whose every bottom half is nonzero (every piece falls back).
    pub inexact: bool,
}

/// Runs the sweep `a` asks for (on GPUs or the host backend) as one rank: prints the
/// table (rank 0), writes `out`, and fails if `--check` found wrong elements.
pub fn run(a: &SweepOptions, out: &Output) -> Res<()> {
    if a.backend_host && a.graph {
        return Err("--graph: the host backend has no CUDA graphs (use --backend gpu)".into());
    }
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

pub(crate) fn method_name(m: SyncMethod) -> &'static str {
    match m {
        SyncMethod::Kernel => "kernel",
        SyncMethod::StreamMemop => "memop",
    }
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
                                    let opts =
                                        AllGatherOptions { algorithm: algo.parse()?, ctas, ..Default::default() }
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
                        let mx = gather_max(
                            runner.g,
                            &format!("sweep/{algo}/{m:?}/{ctas:?}/{pipeline:?}/{size}"),
                            &[t.us, wrong.unwrap_or(0) as f64, t.host_eager, t.host_replay],
                        )?;
                        let mut r = row(
                            a,
                            world,
                            "lowcon",
                            algo,
                            method_name(m),
                            label_ctas,
                            size,
                            mx[0],
                            wrong.map(|_| mx[1] as u64),
                        );
                        r.pipeline = pipeline;
                        let r = with_wire(r, a.wire, a.dtype);
                        let rows_here = host_split(r, a.graph, &mx[2..4]);
                        for r in rows_here {
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
    let coll = match a.kind {
        Kind::AllGather => Coll::AllGather(algo.parse()?),
        Kind::ReduceScatter => Coll::ReduceScatter(crate::rs_variant(algo)?.0, a.op),
    };
    let launch = match a.kind {
        Kind::AllGather => lowcon::ReduceLaunch::Auto,
        Kind::ReduceScatter => crate::rs_variant(algo)?.1,
    };
    Ok(Case { coll, dtype: a.dtype, count, symmetric: !a.staged, misalign: 0, sync: m, channel: 0, launch })
}

/// What [`time_calls`] measured on this rank: device µs per call, and (with `--graph`)
/// host µs per call, enqueued eagerly and replayed.
struct Timed {
    us: f64,
    host_eager: f64,
    host_replay: f64,
}

/// With `--graph`, a timed row becomes two: the replayed one (its device time, and the
/// host's share of a replay per call) and an eager one carrying only the host time per
/// eager call (its device time is the plain sweep's). Without, the row as it is.
fn host_split(mut r: SweepRow, graph: bool, host: &[f64]) -> Vec<SweepRow> {
    if !graph {
        return vec![r];
    }
    let mut eager = r.clone();
    eager.graph = false;
    eager.host_us = Some(host[0]);
    r.host_us = Some(host[1]);
    vec![eager, r]
}

/// Times `call` as described in the module docs; returns this rank's µs per call. With
/// `--graph`, `iters` calls are captured into a graph once (after the eager warm-up,
/// which also sets up workspaces), and each batch is one replay.
fn time_calls(
    g: &GpuGroup,
    stream: &Stream,
    a: &SweepOptions,
    call: &mut dyn FnMut(&Stream) -> Result<(), String>,
) -> Res<Timed> {
    let iters = a.iters.max(1);
    // The first call may set up the channel (workspace, LL buffer): not in the host time.
    call(stream)?;
    let n = a.warmup.max(2) - 1;
    let warm = std::time::Instant::now();
    for _ in 0..n {
        call(stream)?;
    }
    let host_eager = warm.elapsed().as_secs_f64() * 1e6 / n as f64;
    g.synchronize(stream)?;
    let graph = match a.graph {
        true => {
            stream.begin_capture()?;
            let mut captured = Ok(());
            for _ in 0..iters {
                captured = captured.and_then(|()| call(stream));
            }
            let graph = stream.end_capture();
            captured?;
            let graph = graph?;
            g.replay(&graph)?;
            g.synchronize(stream)?;
            Some(graph)
        }
        false => None,
    };
    let (e0, e1) = (stream.event(true)?, stream.event(true)?);
    let (mut per_call, mut host) = (Vec::new(), Vec::new());
    for _ in 0..a.reps.max(1) {
        stream.record(&e0)?;
        let t = std::time::Instant::now();
        match &graph {
            Some(graph) => g.replay(graph)?,
            None => {
                for _ in 0..iters {
                    call(stream)?;
                }
            }
        }
        host.push(t.elapsed().as_secs_f64() * 1e6 / iters as f64);
        stream.record(&e1)?;
        g.synchronize(stream)?;
        per_call.push(e0.elapsed_ms(&e1)? as f64 * 1e3 / iters as f64);
    }
    Ok(Timed { us: median(&per_call), host_eager, host_replay: median(&host) })
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
                    let mx =
                        gather_max(r.g, &format!("sweep/{mode}/{dt}/{size}"), &[t.us, t.host_eager, t.host_replay])?;
                    let name = if dt == a.dtype { mode.to_string() } else { format!("{mode} {dt}") };
                    let mut r = row(a, world, &name, mode, "-", None, size, mx[0], None);
                    if a.wire.is_some() {
                        // busbw on the f32 bytes (`size`), and on the bytes NCCL sent.
                        r = with_wire(r, Some(dt), a.dtype);
                        r.dtype = dt.name().into();
                    }
                    for r in host_split(r, a.graph, &mx[1..3]) {
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
