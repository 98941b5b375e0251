//! `lowcon bench ...`: the command line of the benchmarks in `lowcon-bench`. The flags
//! are parsed here and handed over as `lowcon_bench` options; `quick` starts its ranks
//! through `lowcon launch` of this executable.

mod reduce_kernels;

use std::path::{Path, PathBuf};

use crate::Backend;
use clap::{Args, Subcommand};
use lowcon::SyncMethod;
use lowcon::cuda::StreamPriority;
use lowcon_bench::overlap::OverlapOptions;
use lowcon_bench::saturated::{Enqueue, SaturatedOptions};
use lowcon_bench::sweep::SweepOptions;
use lowcon_bench::{Kind, Output, SweepRow, report};

/// Where results go besides the table on stdout (rank 0 writes them).
#[derive(Args, Clone, Debug, Default)]
pub struct OutputFlags {
    /// Write every measurement as JSON lines to FILE.
    #[arg(long, value_name = "FILE")]
    json: Option<PathBuf>,
    /// Write every measurement as CSV to FILE.
    #[arg(long, value_name = "FILE")]
    csv: Option<PathBuf>,
    /// Draw a plot (busbw vs size, overlap bars, or slowdown vs bandwidth kept) into
    /// FILE, a PNG (`.png` is appended unless FILE ends in .png, .jpg, .jpeg or .bmp);
    /// written after the JSON and CSV files.
    #[arg(long, value_name = "FILE")]
    plot: Option<PathBuf>,
}

impl OutputFlags {
    /// Fails before any measuring when a result file's folder does not exist.
    fn check(&self) -> Result<(), String> {
        for (flag, p) in [("--json", &self.json), ("--csv", &self.csv), ("--plot", &self.plot)] {
            let Some(p) = p else { continue };
            let dir = p.parent().filter(|d| !d.as_os_str().is_empty()).unwrap_or(Path::new("."));
            if !dir.is_dir() {
                return Err(format!("{flag} {}: folder {} does not exist", p.display(), dir.display()));
            }
        }
        Ok(())
    }
}

/// Flags of the collective sweeps.
#[derive(Args, Clone, Debug)]
pub struct SweepFlags {
    /// Smallest size per rank (bytes; K/M/G suffixes). The sizes are -b times powers of
    /// -f, up to -e: with the defaults 8K to 128M (-f 2, or -b 64K, reaches 256M).
    #[arg(short = 'b', long = "minbytes", default_value = "8K", value_parser = parse_size)]
    min: usize,
    /// Largest size per rank.
    #[arg(short = 'e', long = "maxbytes", default_value = "256M", value_parser = parse_size)]
    max: usize,
    /// Size multiplication factor.
    #[arg(short = 'f', long = "stepfactor", default_value_t = 4)]
    factor: usize,
    /// Timed calls per batch.
    #[arg(short = 'n', long, default_value_t = 20, value_parser = at_least_one)]
    iters: usize,
    /// Untimed calls first.
    #[arg(short = 'w', long, default_value_t = 5)]
    warmup: usize,
    /// Timed batches (the median batch counts).
    #[arg(long, default_value_t = 5, value_parser = at_least_one)]
    reps: usize,
    /// Element type.
    #[arg(long, default_value = "bf16")]
    dtype: String,
    /// Reduction operator (reduce-scatter).
    #[arg(long, default_value = "sum")]
    op: String,
    /// lowcon algorithms, comma-separated (`all` for every named one).
    #[arg(long, alias = "algorithm", default_value = "all")]
    algorithms: String,
    /// Sync methods: kernel, memop or both (comma-separated).
    #[arg(long, default_value = "kernel")]
    sync: String,
    /// CTA counts of the SM parts, comma-separated (`default` for the library's).
    #[arg(long, default_value = "default")]
    ctas: String,
    /// ce-reduce pipeline pieces, comma-separated (`default` for the library's choice).
    #[arg(long, default_value = "default")]
    pipeline: String,
    /// Check every size against a CPU reference and count wrong elements.
    #[arg(long)]
    check: bool,
    /// Leave NCCL out.
    #[arg(long)]
    no_nccl: bool,
    /// Use ordinary device buffers (staged through the workspace) instead of symmetric ones.
    #[arg(long)]
    staged: bool,
    /// CUDA graphs: besides the eager calls, capture `-n` calls into a graph and time its
    /// replays (NCCL's calls captured alike): two rows per configuration, eager and
    /// replayed, each with its own device µs and host µs per call (GPU only).
    #[arg(long)]
    graph: bool,
    /// `gpu`, or `host` for the CPU backend (no GPU needed).
    #[arg(long, value_enum, default_value_t = Backend::Gpu)]
    backend: Backend,
    /// Reduce-scatter: the type on the peer links (`bf16` with `--dtype f32`: the bf16
    /// wire, NOTE [bf16 wire]). Rows then show busbw on the f32 bytes and on the wire's,
    /// and NCCL runs f32 and bf16.
    #[arg(long)]
    wire: Option<String>,
    /// With `--wire`: data whose bottom halves are not zero, so every piece falls back
    /// (default: bf16-exact data, as FSDP2's upcast gradients).
    #[arg(long)]
    inexact: bool,
    /// With `--graph --no-nccl`: only the host µs per call, eager and replayed; the device
    /// columns print `-`. The one sweep that runs where ranks share a GPU
    /// (`lowcon launch --gpus 1`): the host's cost of enqueueing or launching a call
    /// does not depend on the GPU's speed, its device time does.
    #[arg(long)]
    host_only: bool,
    #[command(flatten)]
    out: OutputFlags,
}

pub(crate) fn parse_size(s: &str) -> Result<usize, String> {
    let s = s.trim();
    let (num, mult) = match s.chars().last() {
        Some('K' | 'k') => (&s[..s.len() - 1], 1usize << 10),
        Some('M' | 'm') => (&s[..s.len() - 1], 1 << 20),
        Some('G' | 'g') => (&s[..s.len() - 1], 1 << 30),
        _ => (s, 1),
    };
    num.parse::<usize>().map(|n| n * mult).map_err(|e| format!("size {s:?}: {e}"))
}

/// A count of 1 or more (`-n`, `--reps`): 0 would time nothing (it used to time one
/// call, under a header that said 0).
fn at_least_one(s: &str) -> Result<usize, String> {
    match s.parse::<usize>() {
        Ok(0) => Err("must be at least 1".into()),
        Ok(n) => Ok(n),
        Err(e) => Err(e.to_string()),
    }
}

/// One entry of `--ctas` or `--pipeline`: a count of 1 or more.
fn positive(x: &str, what: &str) -> Result<u32, String> {
    match x.parse::<u32>() {
        Ok(0) => Err(format!("{what} {x:?}: must be at least 1 (or `default`)")),
        Ok(n) => Ok(n),
        Err(e) => Err(format!("{what} {x:?}: {e}")),
    }
}

fn list<T>(s: &str, all: impl Fn() -> Vec<T>, parse: impl Fn(&str) -> Result<T, String>) -> Result<Vec<T>, String> {
    if s == "all" {
        return Ok(all());
    }
    s.split(',').map(|x| parse(x.trim())).collect()
}

/// A variant's name as the tables print it: the algorithm, and after a `/` the second
/// choice where `x` named one.
fn canonical<A: std::fmt::Display, B: std::fmt::Display>(x: &str, (a, b): (A, B)) -> String {
    if x.contains('/') { format!("{a}/{b}") } else { a.to_string() }
}

impl SweepFlags {
    fn options(&self, kind: Kind) -> Result<SweepOptions, String> {
        let dtype: lowcon::DType = self.dtype.parse().map_err(|e: lowcon::Error| e.to_string())?;
        let algorithms = match kind {
            Kind::AllGather => list(
                &self.algorithms,
                || lowcon::AllGatherAlgorithm::NAMED.iter().map(|a| a.name().to_string()).collect(),
                // `ce-pull/in-order`: the algorithm and what its copies wait for.
                |x| lowcon_bench::ag_variant(x).map(|v| canonical(x, v)).map_err(|e| e.to_string()),
            )?,
            Kind::ReduceScatter => list(
                &self.algorithms,
                || lowcon::ReduceScatterAlgorithm::NAMED.iter().map(|a| a.name().to_string()).collect(),
                // `ce-reduce/once`: the algorithm and how ce-reduce launches its reduction.
                |x| lowcon_bench::rs_variant(x).map(|v| canonical(x, v)).map_err(|e| e.to_string()),
            )?,
        };
        let methods = list(
            &self.sync,
            || vec![SyncMethod::Kernel, SyncMethod::StreamMemop],
            |x| x.parse::<SyncMethod>().map_err(|e| e.to_string()),
        )?;
        let ctas =
            list(&self.ctas, || vec![None], |x| if x == "default" { Ok(None) } else { positive(x, "ctas").map(Some) })?;
        let pipeline = list(
            &self.pipeline,
            || vec![None],
            |x| if x == "default" { Ok(None) } else { positive(x, "pipeline").map(Some) },
        )?;
        if self.min == 0 || self.min > self.max {
            return Err(format!("sizes: -b {} must be at least 1 and at most -e {}", self.min, self.max));
        }
        if !self.min.is_multiple_of(dtype.size()) {
            return Err(format!(
                "sizes: -b {} is not a whole number of {dtype} elements ({} bytes each)",
                self.min,
                dtype.size()
            ));
        }
        let wire = self.wire.as_deref().map(str::parse::<lowcon::DType>).transpose().map_err(|e| e.to_string())?;
        // The wire of an f32 call runs on ce-reduce and sm-direct (NOTE [the wire read
        // directly]): `all` means those two, and any other is refused now, not after the
        // rows before it were measured.
        // NOTE [algorithm capabilities]: what can carry the split wire, as the library declares it.
        let carries_wire = |a: &str| {
            a.split('/')
                .next()
                .and_then(|n| n.parse::<lowcon::ReduceScatterAlgorithm>().ok())
                .is_some_and(|a| a.named().is_none_or(|a| a.caps().split_wire))
        };
        let algorithms = match wire {
            Some(_) if self.algorithms == "all" => vec!["ce-reduce".to_string(), "sm-direct".to_string()],
            Some(w) => match algorithms.iter().find(|a| !carries_wire(a)) {
                Some(a) => return Err(format!("--wire {w}: runs on ce-reduce, sm-direct (or auto), not {a}")),
                None => algorithms,
            },
            None => algorithms,
        };
        if wire.is_some() && kind != Kind::ReduceScatter {
            return Err("--wire: reduce-scatter only".into());
        }
        if wire.is_some() && self.check {
            return Err("--wire with --check: the wire is checked bit for bit by `lowcon selftest coll-wire`".into());
        }
        if self.inexact && wire.is_none() {
            return Err("--inexact: with --wire only".into());
        }
        if self.host_only && (!self.graph || !self.no_nccl || self.check) {
            return Err("--host-only: with --graph and --no-nccl, without --check (NCCL cannot share a GPU, and \
                        host µs per call is what it measures)"
                .into());
        }
        Ok(SweepOptions {
            kind,
            min_bytes: self.min,
            max_bytes: self.max,
            factor: self.factor,
            iters: self.iters,
            warmup: self.warmup,
            reps: self.reps,
            dtype,
            op: self.op.parse().map_err(|e: lowcon::Error| e.to_string())?,
            algorithms,
            methods,
            ctas,
            pipeline,
            check: self.check,
            nccl: !self.no_nccl,
            staged: self.staged,
            graph: self.graph,
            backend_host: self.backend == Backend::Host,
            wire,
            inexact: self.inexact,
            host_only: self.host_only,
        })
    }
}

/// Flags of the overlap benchmark.
#[derive(Args, Clone, Debug)]
pub struct OverlapFlags {
    /// `saturated` (the collective runs back-to-back for the whole GEMM window, enqueued
    /// as a trainer does; interleaved trial pairs) or `burst` (the first test: `--colls`
    /// collectives enqueued before the GEMMs, for the never-block check).
    #[arg(long, default_value = "saturated")]
    mode: String,
    /// Collective: all-gather or reduce-scatter (comma-separated for both).
    #[arg(long, default_value = "all-gather,reduce-scatter")]
    collective: String,
    /// GEMM size M = N = K.
    #[arg(long, default_value_t = 8192)]
    gemm: usize,
    /// GEMM time to aim for (ms); GEMMs are repeated to about this.
    #[arg(long, default_value_t = 30.0)]
    gemm_ms: f64,
    /// Shards (bytes per rank), comma-separated (K/M/G suffixes).
    #[arg(long, default_value = "64M,256M")]
    shard: String,
    /// Collectives per trial (burst mode; saturated mode covers the window).
    #[arg(long, default_value_t = 20)]
    colls: usize,
    /// Trials: alone/overlapped pairs in saturated mode (default 7), trials of each
    /// phase in burst mode (default 5).
    #[arg(long)]
    trials: Option<usize>,
    /// Collective stream priorities (saturated): high, default, or both.
    #[arg(long, default_value = "high,default")]
    priority: String,
    /// How the host enqueues (saturated): interleaved (a GEMM, then the collectives
    /// covering it, one thread), threads (one host thread per stream), or both
    /// (`interleaved,threads` doubles the run: about 170 s at 2 ranks with the defaults).
    #[arg(long, default_value = "interleaved")]
    enqueue: String,
    /// lowcon algorithms per collective (comma-separated; `all` for every named one).
    #[arg(long, default_value = "all")]
    algorithms: String,
    /// CTA counts of lowcon's SM parts (reductions, one-shot kernels), comma-separated
    /// (`default` for the library's): fewer CTAs take fewer SMs from the GEMM. Saturated
    /// mode takes the first.
    #[arg(long, default_value = "default")]
    ctas: String,
    /// Sync methods (kernel, memop, comma-separated, or `all`); default: both. Rows are
    /// labelled `lowcon ALGO kernel` or `lowcon ALGO memop`.
    #[arg(long)]
    sync: Option<String>,
    /// Leave NCCL out.
    #[arg(long)]
    no_nccl: bool,
    /// Leave the null collective (copies with no sync) out (saturated).
    #[arg(long)]
    no_null: bool,
    /// Also run null+local (saturated): the null's peer copies plus a same-device copy
    /// of the shard per call, to see whether a plain local copy slows down beside a
    /// persistent GEMM. Off by default.
    #[arg(long)]
    null_local: bool,
    /// Untimed GEMMs (in ms) before each GEMM window, alone and overlapped (saturated),
    /// so both start from a busy GPU; the overlapped collectives start at its end. 0: none.
    #[arg(long, default_value_t = 15.0)]
    prelude_ms: f64,
    /// Reduce-scatter over the bf16 wire (saturated mode): lowcon reduces f32 (`--shard`
    /// bytes of f32 per rank) sending bf16, NCCL reduces the same elements in f32 and in
    /// bf16; busbw counts the f32 bytes.
    #[arg(long)]
    wire: Option<String>,
    /// Reduce-scatter of a bf16 input into f32 (saturated mode; FSDP2's bf16 copy-in, what
    /// `lowcon.fsdp` sends): lowcon reduces `--shard / 4` bf16 elements per rank into f32
    /// (ce-reduce or sm-direct), NCCL the same elements in f32 and in bf16; busbw counts
    /// the f32 bytes.
    #[arg(long)]
    bf16_in: bool,
    /// With --bf16-in: lowcon's `map_ordinary` (yes or no; default: the plan's). "yes" has
    /// sm-direct read the bf16 input where it is, one launch per call, instead of packing
    /// it into the wire's planes (what an FSDP2 rule with `map=yes` sends).
    #[arg(long, value_parser = ["yes", "no"])]
    map_ordinary: Option<String>,
    #[command(flatten)]
    out: OutputFlags,
}

#[derive(Subcommand)]
pub enum BenchCommand {
    /// All-gather sweep, nccl-tests style, NCCL in the same run.
    AllGather(SweepFlags),
    /// Reduce-scatter sweep, nccl-tests style, NCCL in the same run.
    ReduceScatter(SweepFlags),
    /// Interference: GEMM slowdown and collective bandwidth kept when the collective
    /// saturates the GEMM window (lowcon, NCCL, NCCL copy-engine, a null copy), with
    /// clocks and energy; `--mode burst` for the first test.
    Overlap(OverlapFlags),
    /// Measure the planner's candidates on this box at this world size and write a tuning
    /// table (NOTE [tuning tables]): small messages eager and replayed, large ones eager,
    /// alone; FSDP2 and TP rules carried over from the table in use. Load it with
    /// `LOWCON_TUNING=FILE`.
    Tune {
        /// The table to write (rank 0).
        #[arg(long)]
        out: PathBuf,
        /// The table's `source` line: date, commit, machine.
        #[arg(long, default_value = "lowcon bench tune")]
        source: String,
        /// Timed calls per batch.
        #[arg(short = 'n', long, default_value_t = 20)]
        iters: usize,
        /// Timed batches (the median counts).
        #[arg(long, default_value_t = 15)]
        reps: usize,
        /// Untimed calls first.
        #[arg(short = 'w', long, default_value_t = 5)]
        warmup: usize,
        /// Largest size per rank of the small-message candidates.
        #[arg(long, default_value = "1M", value_parser = parse_size)]
        small_max: usize,
        /// Largest size per rank of the large ones.
        #[arg(long, default_value = "256M", value_parser = parse_size)]
        large_max: usize,
    },
    /// Draw a PNG from `--json` files of earlier runs.
    Plot {
        /// JSON-lines files written by `--json`.
        #[arg(long, num_args = 1.., required = true)]
        json: Vec<PathBuf>,
        /// The PNG to write.
        #[arg(long)]
        out: PathBuf,
    },
    /// Short check-and-benchmark of all-gather and reduce-scatter on every visible GPU
    /// (or 4 host-backend ranks without GPUs): starts the ranks itself.
    Quick {
        /// Largest size per rank.
        #[arg(long, default_value = "64M", value_parser = parse_size)]
        max: usize,
        /// The plot to write.
        #[arg(long, default_value = "lowcon-quick.png")]
        plot: PathBuf,
    },
    /// Where the driver's per-stream queue makes an enqueue block (lowcon and NCCL):
    /// calls enqueued behind a stalled stream, each enqueue timed.
    QueueDepth {
        /// Calls per configuration.
        #[arg(long, default_value_t = 3000)]
        calls: usize,
        /// Bytes per rank of each call.
        #[arg(long, default_value = "64K", value_parser = parse_size)]
        shard: usize,
        /// How long the stream is held, in milliseconds.
        #[arg(long, default_value_t = 2000)]
        hold_ms: u64,
    },
    /// lowcon's reduction kernels on ONE GPU (one process, no launcher), alone and
    /// beside a saturated GEMM, per kernel, launch shape, pieces and priority, with an
    /// SM-holding and a bytes-only control: µs, GB/s, GEMM slowdown and rate kept with
    /// 95% intervals (a collective at one rank reduces nothing).
    ReduceKernels(reduce_kernels::ReduceKernelFlags),
    /// Barrier latency, kernel vs stream-memop.
    Barrier {
        /// Timed barriers per method.
        #[arg(long, default_value_t = 2000)]
        iters: usize,
        /// Untimed barriers first.
        #[arg(long, default_value_t = 200)]
        warmup: usize,
        /// Also print one JSON object per row.
        #[arg(long)]
        json: bool,
    },
}

impl From<&OutputFlags> for Output {
    fn from(f: &OutputFlags) -> Self {
        Output { json: f.json.clone(), csv: f.csv.clone(), plot: f.plot.clone() }
    }
}

pub fn run(cmd: BenchCommand) -> Result<(), Box<dyn std::error::Error>> {
    // A host-time sweep measures the host alone (`--host-only`).
    let host_only = matches!(&cmd, BenchCommand::AllGather(f) | BenchCommand::ReduceScatter(f) if f.host_only);
    if !matches!(cmd, BenchCommand::Plot { .. }) && !host_only {
        refuse_shared_gpus()?;
    }
    match cmd {
        BenchCommand::QueueDepth { calls, shard, hold_ms } => {
            // SAFETY: called before anything in this process starts a thread.
            unsafe { lowcon_bench::no_nvls() };
            lowcon_bench::queue::run(calls, shard, std::time::Duration::from_millis(hold_ms))
        }
        BenchCommand::Barrier { iters, warmup, json } => lowcon_bench::barrier::run(iters.max(1), warmup, json),
        BenchCommand::ReduceKernels(f) => reduce_kernels::run(&f),
        BenchCommand::AllGather(f) => sweep(&f, Kind::AllGather),
        BenchCommand::ReduceScatter(f) => sweep(&f, Kind::ReduceScatter),
        BenchCommand::Overlap(f) => overlap(&f),
        BenchCommand::Quick { max, plot } => quick(max, &plot),
        BenchCommand::Tune { out, source, iters, reps, warmup, small_max, large_max } => {
            // SAFETY: called before anything in this process starts a thread.
            unsafe { lowcon_bench::no_nvls() };
            let dir = out.parent().filter(|d| !d.as_os_str().is_empty()).unwrap_or(Path::new("."));
            if !dir.is_dir() {
                return Err(format!("--out {}: folder {} does not exist", out.display(), dir.display()).into());
            }
            let t = lowcon_bench::tune::TuneOptions { out, source, iters, reps, warmup, small_max, large_max };
            lowcon_bench::tune::run(&t)
        }
        BenchCommand::Plot { json, out } => {
            let (rows, ov, sat) = report::read_json(&json)?;
            let kernels = report::read_kernel_rows(&json)?;
            let wrote = if rows.is_empty() && ov.is_empty() && sat.is_empty() && !kernels.is_empty() {
                lowcon_bench::plot::draw_frontier(&out, &kernels)?
            } else if rows.is_empty() && ov.is_empty() && !sat.is_empty() {
                lowcon_bench::plot::draw_saturated(&out, &sat)?
            } else {
                lowcon_bench::plot::draw(&out, &rows, &ov)?
            };
            println!("wrote {}", wrote.display());
            Ok(())
        }
    }
}

/// Benchmarks refuse ranks that share a GPU: their timings measure time-slicing or MPS,
/// not NVLink or copy engines.
fn refuse_shared_gpus() -> Result<(), Box<dyn std::error::Error>> {
    if lowcon::config::share_gpu()? {
        return Err(format!(
            "{}=1 lets ranks share a GPU, for correctness checks only: timings of ranks sharing a GPU \
             mean nothing (no NVLink, shared copy engines and SMs), so lowcon bench does not run; unset it \
             and run one rank per GPU (on a machine without GPUs, the host backend needs no sharing either)",
            lowcon::config::SHARE_GPU_ENV
        )
        .into());
    }
    Ok(())
}

fn sweep(f: &SweepFlags, kind: Kind) -> Result<(), Box<dyn std::error::Error>> {
    // SAFETY: called before anything in this process starts a thread.
    unsafe { lowcon_bench::no_nvls() };
    f.out.check()?;
    let opts = f.options(kind)?;
    if f.backend == Backend::Gpu && matches!(lowcon::cuda::device_count(), Err(lowcon::Error::NoDriver)) {
        return Err(
            format!("{}; with no GPU, `--backend host` runs the sweep on the CPU", lowcon::Error::NoDriver).into()
        );
    }
    lowcon_bench::sweep::run(&opts, &(&f.out).into())
}

fn overlap(f: &OverlapFlags) -> Result<(), Box<dyn std::error::Error>> {
    // SAFETY: called before anything in this process starts a thread.
    unsafe { lowcon_bench::no_nvls() };
    let saturated = match f.mode.as_str() {
        "saturated" => true,
        "burst" => false,
        other => return Err(format!("mode {other:?}: expected saturated or burst").into()),
    };
    f.out.check()?;
    let shards = list(&f.shard, Vec::new, parse_size)?;
    if shards.is_empty() || shards.iter().any(|&s| s == 0 || s % 2 != 0) {
        return Err(format!("--shard {:?}: sizes must be even and at least 2 bytes (bf16)", f.shard).into());
    }
    let wire = f.wire.as_deref().map(str::parse::<lowcon::DType>).transpose()?;
    if f.map_ordinary.is_some() && !f.bf16_in {
        return Err("--map-ordinary: with --bf16-in only (how sm-direct reads a bf16 input)".into());
    }
    if wire.is_some() && !saturated {
        return Err("--wire: the saturated mode only (--mode saturated)".into());
    }
    if wire.is_some() && shards.iter().any(|&s| s % 4 != 0) {
        return Err(format!("--wire: --shard {:?} must be a multiple of 4 bytes (f32)", f.shard).into());
    }
    if f.bf16_in {
        check_bf16_in(f, saturated, wire.is_some(), &shards)?;
    }
    let mut kinds = Vec::new();
    for c in f.collective.split(',') {
        kinds.push(match c.trim() {
            "all-gather" => Kind::AllGather,
            "reduce-scatter" => Kind::ReduceScatter,
            other => return Err(format!("collective {other:?}: expected all-gather or reduce-scatter").into()),
        });
    }
    let sync = f.sync.clone().unwrap_or_else(|| "kernel,memop".into());
    let options = |kind: Kind| {
        let flags = SweepFlags {
            // Sizes unused here (the overlap has its own): whole elements of any dtype.
            min: 8,
            max: 8,
            factor: 2,
            iters: 1,
            warmup: 0,
            reps: 1,
            dtype: "bf16".into(),
            op: "sum".into(),
            algorithms: f.algorithms.clone(),
            sync: sync.clone(),
            ctas: f.ctas.clone(),
            pipeline: "default".into(),
            check: false,
            no_nccl: f.no_nccl,
            staged: false,
            graph: false,
            backend: Backend::Gpu,
            // The reduce-scatter's algorithms with a wire: ce-reduce, sm-direct (checked there).
            wire: f.wire.clone().filter(|_| kind == Kind::ReduceScatter),
            inexact: false,
            host_only: false,
            out: OutputFlags::default(),
        };
        flags.options(kind)
    };
    if saturated {
        // SAFETY: called before anything in this process starts a thread.
        unsafe { lowcon_bench::nccl_debug_to_file() };
        let mut algorithms = Vec::new();
        let (mut methods, mut ctas) = (Vec::new(), None);
        for &kind in &kinds {
            let s = options(kind)?;
            // Small-message algorithms are left out of the 64M/256M-shard saturated runs.
            algorithms.extend(s.algorithms.into_iter().filter(|x| !matches!(x.as_str(), "sm-oneshot" | "ll" | "auto")));
            (methods, ctas) = (s.methods, s.ctas.first().copied().flatten());
        }
        if f.bf16_in {
            check_bf16_in_algorithms(&algorithms)?;
        }
        let priorities = list(&f.priority, Vec::new, |x| match x {
            "high" => Ok(StreamPriority::High),
            "default" => Ok(StreamPriority::Default),
            other => Err(format!("priority {other:?}: expected high or default")),
        })?;
        let enqueue = list(&f.enqueue, Vec::new, |x| match x {
            "interleaved" => Ok(Enqueue::Interleaved),
            "threads" => Ok(Enqueue::Threads),
            other => Err(format!("enqueue {other:?}: expected interleaved or threads")),
        })?;
        let a = SaturatedOptions {
            kinds,
            m: f.gemm,
            gemm_ms: f.gemm_ms,
            shards,
            priorities,
            enqueue,
            trials: f.trials.unwrap_or(7).max(1),
            algorithms,
            methods,
            ctas,
            nccl: !f.no_nccl,
            null: !f.no_null,
            null_local: f.null_local,
            prelude_ms: f.prelude_ms,
            wire,
            bf16_in: f.bf16_in,
            map: f.map_ordinary.as_deref().map(|m| m == "yes"),
        };
        let rows = lowcon_bench::saturated::run(&a)?;
        return report::write_saturated(&(&f.out).into(), &rows);
    }
    let mut all = Vec::new();
    for &kind in &kinds {
        for &shard in &shards {
            let s = options(kind)?;
            let a = OverlapOptions {
                kind,
                m: f.gemm,
                gemm_ms: f.gemm_ms,
                shard_bytes: shard,
                colls: f.colls,
                trials: f.trials.unwrap_or(5),
                algorithms: s.algorithms.into_iter().filter(|x| x != "sm-oneshot" && x != "ll").collect(),
                methods: s.methods,
                ctas: s.ctas,
                nccl: !f.no_nccl,
            };
            all.extend(lowcon_bench::overlap::run(&a)?);
        }
    }
    report::write(&(&f.out).into(), &[], &all)
}

/// `overlap --bf16-in`'s refusals: the saturated mode, no wire beside it, f32-sized shards,
/// and only the reduce-scatters that take a bf16 input into f32.
fn check_bf16_in(f: &OverlapFlags, saturated: bool, wire: bool, shards: &[usize]) -> Result<(), String> {
    if !saturated || wire {
        return Err("--bf16-in: the saturated mode only (--mode saturated), without --wire".into());
    }
    if shards.iter().any(|&s| s % 4 != 0) {
        return Err(format!("--bf16-in: --shard {:?} must be a multiple of 4 bytes (the f32 output)", f.shard));
    }
    Ok(())
}

/// `overlap --bf16-in`: every reduce-scatter algorithm asked for takes a bf16 input into
/// f32 (`RsCaps::bf16_in`), else the refusal names it and the ones that do.
fn check_bf16_in_algorithms(algorithms: &[String]) -> Result<(), String> {
    for a in algorithms {
        let Ok((algo, _)) = lowcon_bench::rs_variant(a) else { continue };
        if algo.named().is_some_and(|x| !x.caps().bf16_in) {
            let can = lowcon::RsAlgo::names_where(|c| c.bf16_in).join(", ");
            return Err(format!("--bf16-in: {a} cannot reduce a bf16 input into f32 (only {can})"));
        }
    }
    Ok(())
}

/// Runs `lowcon launch` of this executable with `args`; errors if the job failed.
fn launch_self(n: usize, args: &[String]) -> Result<(), Box<dyn std::error::Error>> {
    let me = std::env::current_exe()?;
    let st = std::process::Command::new(&me)
        .args(["launch", "--nproc-per-node", &n.to_string(), "--"])
        .arg(&me)
        .args(args)
        .status()?;
    if !st.success() {
        return Err(format!("the benchmark job failed ({st})").into());
    }
    Ok(())
}

/// `lowcon bench quick`: a checked all-gather and reduce-scatter sweep, each a job of
/// this executable under `lowcon launch`, then one plot of both.
fn quick(max: usize, plot: &Path) -> Result<(), Box<dyn std::error::Error>> {
    let gpus = lowcon::cuda::device_count().unwrap_or(0);
    let (n, backend) = if gpus >= 2 {
        println!("lowcon quick check: {gpus} GPUs, all-gather and reduce-scatter, checked against a CPU reference");
        (gpus, "gpu")
    } else {
        println!(
            "lowcon quick check: {} GPU(s) usable, so running 4 ranks on the host backend (CPU shared memory); the numbers measure the CPU, not a GPU",
            gpus
        );
        (4, "host")
    };
    let dir = tempfile_dir()?;
    let mut rows: Vec<SweepRow> = Vec::new();
    for kind in ["all-gather", "reduce-scatter"] {
        let json = dir.join(format!("{kind}.json"));
        let mut args: Vec<String> = ["bench", kind, "-b", "64K", "-e"].iter().map(|s| s.to_string()).collect();
        args.push(max.to_string());
        args.extend(
            ["-f", "8", "-n", "10", "-w", "3", "--reps", "3", "--check", "--backend", backend, "--json"]
                .map(String::from),
        );
        args.push(json.display().to_string());
        launch_self(n, &args)?;
        rows.extend(report::read_sweep_json(&json)?);
    }
    let wrote = lowcon_bench::plot::draw(plot, &rows, &[])?;
    println!("wrote {}", wrote.display());
    Ok(())
}

fn tempfile_dir() -> Result<PathBuf, Box<dyn std::error::Error>> {
    let d = std::env::temp_dir().join(format!("lowcon-quick-{}", std::process::id()));
    std::fs::create_dir_all(&d)?;
    Ok(d)
}
