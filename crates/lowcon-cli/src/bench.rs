//! `lowcon bench ...`: measurements, run as one process per rank under `lowcon launch`.
//! Rank 0 prints the table (and `--json` lines); every number is the max over ranks of
//! each rank's median (or p99), timed with CUDA events on the device.

use std::path::{Path, PathBuf};

use clap::{Args, Subcommand};
use lowcon::{GpuGroup, GpuGroupOptions, SyncMethod};

use crate::overlap::{OverlapArgs, OverlapRow};
use crate::sweep::{Kind, Row, SweepArgs};

/// Where results go besides the table on stdout (rank 0 writes them).
#[derive(Args, Clone, Debug, Default)]
pub struct Output {
    /// Write every measurement as JSON lines to FILE.
    #[arg(long, value_name = "FILE")]
    json: Option<PathBuf>,
    /// Write every measurement as CSV to FILE.
    #[arg(long, value_name = "FILE")]
    csv: Option<PathBuf>,
    /// Draw busbw vs size (and overlap bars) into FILE.png.
    #[arg(long, value_name = "FILE")]
    plot: Option<PathBuf>,
}

/// Flags of the collective sweeps.
#[derive(Args, Clone, Debug)]
pub struct SweepFlags {
    /// Smallest size per rank (bytes; K/M/G suffixes).
    #[arg(short = 'b', long = "minbytes", default_value = "64K", value_parser = parse_size)]
    min: usize,
    /// Largest size per rank.
    #[arg(short = 'e', long = "maxbytes", default_value = "256M", value_parser = parse_size)]
    max: usize,
    /// Size multiplication factor.
    #[arg(short = 'f', long = "stepfactor", default_value_t = 4)]
    factor: usize,
    /// Timed calls per batch.
    #[arg(short = 'n', long, default_value_t = 20)]
    iters: usize,
    /// Untimed calls first.
    #[arg(short = 'w', long, default_value_t = 5)]
    warmup: usize,
    /// Timed batches (the median batch counts).
    #[arg(long, default_value_t = 5)]
    reps: usize,
    /// Element type.
    #[arg(long, default_value = "bf16")]
    dtype: String,
    /// Reduction operator (reduce-scatter).
    #[arg(long, default_value = "sum")]
    op: String,
    /// lowcon algorithms, comma-separated (`all` for every named one).
    #[arg(long, default_value = "all")]
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
    /// `gpu`, or `host` for the CPU backend.
    #[arg(long, default_value = "gpu")]
    backend: String,
    #[command(flatten)]
    out: Output,
}

fn parse_size(s: &str) -> Result<usize, String> {
    let s = s.trim();
    let (num, mult) = match s.chars().last() {
        Some('K' | 'k') => (&s[..s.len() - 1], 1usize << 10),
        Some('M' | 'm') => (&s[..s.len() - 1], 1 << 20),
        Some('G' | 'g') => (&s[..s.len() - 1], 1 << 30),
        _ => (s, 1),
    };
    num.parse::<usize>().map(|n| n * mult).map_err(|e| format!("size {s:?}: {e}"))
}

fn list<T>(s: &str, all: impl Fn() -> Vec<T>, parse: impl Fn(&str) -> Result<T, String>) -> Result<Vec<T>, String> {
    if s == "all" {
        return Ok(all());
    }
    s.split(',').map(|x| parse(x.trim())).collect()
}

impl SweepFlags {
    fn args(&self, kind: Kind) -> Result<SweepArgs, String> {
        let dtype: lowcon::DType = self.dtype.parse().map_err(|e: lowcon::Error| e.to_string())?;
        let algorithms = match kind {
            Kind::AllGather => list(
                &self.algorithms,
                || lowcon::AllGatherAlgorithm::NAMED.iter().map(|a| a.name().to_string()).collect(),
                |x| x.parse::<lowcon::AllGatherAlgorithm>().map(|a| a.name().to_string()).map_err(|e| e.to_string()),
            )?,
            Kind::ReduceScatter => list(
                &self.algorithms,
                || lowcon::ReduceScatterAlgorithm::NAMED.iter().map(|a| a.name().to_string()).collect(),
                |x| {
                    x.parse::<lowcon::ReduceScatterAlgorithm>().map(|a| a.name().to_string()).map_err(|e| e.to_string())
                },
            )?,
        };
        let methods = list(
            &self.sync,
            || vec![SyncMethod::Kernel, SyncMethod::StreamMemop],
            |x| x.parse::<SyncMethod>().map_err(|e| e.to_string()),
        )?;
        let ctas = list(
            &self.ctas,
            || vec![None],
            |x| if x == "default" { Ok(None) } else { x.parse().map(Some).map_err(|e| format!("ctas {x:?}: {e}")) },
        )?;
        let pipeline = list(
            &self.pipeline,
            || vec![None],
            |x| if x == "default" { Ok(None) } else { x.parse().map(Some).map_err(|e| format!("pipeline {x:?}: {e}")) },
        )?;
        if self.min == 0 || self.min > self.max {
            return Err(format!("sizes: -b {} must be at least 1 and at most -e {}", self.min, self.max));
        }
        Ok(SweepArgs {
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
            backend_host: self.backend == "host",
        })
    }
}

/// Flags of the overlap benchmark.
#[derive(Args, Clone, Debug)]
pub struct OverlapFlags {
    /// Collective: all-gather or reduce-scatter (comma-separated for both).
    #[arg(long, default_value = "all-gather,reduce-scatter")]
    collective: String,
    /// GEMM size M = N = K.
    #[arg(long, default_value_t = 8192)]
    gemm: usize,
    /// GEMM time to aim for (ms); GEMMs are repeated to about this.
    #[arg(long, default_value_t = 30.0)]
    gemm_ms: f64,
    /// Shard (bytes per rank) of each collective.
    #[arg(long, default_value = "64M", value_parser = parse_size)]
    shard: usize,
    /// Collectives per trial.
    #[arg(long, default_value_t = 20)]
    colls: usize,
    /// Trials (medians are reported).
    #[arg(long, default_value_t = 5)]
    trials: usize,
    /// lowcon algorithms per collective (comma-separated; `all` for every named one).
    #[arg(long, default_value = "all")]
    algorithms: String,
    /// CTA counts of lowcon's SM parts (reductions, one-shot kernels), comma-separated
    /// (`default` for the library's): fewer CTAs take fewer SMs from the GEMM.
    #[arg(long, default_value = "default")]
    ctas: String,
    /// Sync methods (comma-separated, or `all`).
    #[arg(long, default_value = "all")]
    sync: String,
    /// Leave NCCL out.
    #[arg(long)]
    no_nccl: bool,
    #[command(flatten)]
    out: Output,
}

#[derive(Subcommand)]
pub enum BenchCommand {
    /// All-gather sweep, nccl-tests style, NCCL in the same run.
    AllGather(SweepFlags),
    /// Reduce-scatter sweep, nccl-tests style, NCCL in the same run.
    ReduceScatter(SweepFlags),
    /// GEMM slowdown next to a stream of collectives, lowcon vs NCCL.
    Overlap(OverlapFlags),
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

pub fn run(cmd: BenchCommand) -> Result<(), Box<dyn std::error::Error>> {
    match cmd {
        BenchCommand::Barrier { iters, warmup, json } => barrier(iters.max(1), warmup, json),
        BenchCommand::AllGather(f) => sweep(&f, Kind::AllGather),
        BenchCommand::ReduceScatter(f) => sweep(&f, Kind::ReduceScatter),
        BenchCommand::Overlap(f) => overlap(&f),
        BenchCommand::Quick { max, plot } => quick(max, &plot),
        BenchCommand::Plot { json, out } => plot_files(&json, &out),
    }
}

fn is_rank0() -> bool {
    std::env::var("RANK").map_or(true, |r| r == "0")
}

fn no_nvls() {
    if std::env::var("NCCL_NVLS_ENABLE").is_err() {
        // SAFETY: called at the start of a benchmark, before any thread is started.
        unsafe { std::env::set_var("NCCL_NVLS_ENABLE", "0") };
    }
}

fn write_outputs(out: &Output, rows: &[Row], ov: &[OverlapRow]) -> Result<(), Box<dyn std::error::Error>> {
    if !is_rank0() {
        return Ok(());
    }
    if let Some(p) = &out.json {
        let mut s = String::new();
        for r in rows {
            s.push_str(&serde_json::to_string(r)?);
            s.push('\n');
        }
        for r in ov {
            s.push_str(&serde_json::to_string(r)?);
            s.push('\n');
        }
        std::fs::write(p, s)?;
    }
    if let Some(p) = &out.csv {
        let mut w = csv::Writer::from_path(p)?;
        for r in rows {
            w.serialize(r)?;
        }
        w.flush()?;
        if !ov.is_empty() {
            let p2 = p.with_extension("overlap.csv");
            let mut w = csv::Writer::from_path(&p2)?;
            for r in ov {
                w.serialize(r)?;
            }
            w.flush()?;
        }
    }
    if let Some(p) = &out.plot {
        crate::plot::draw(p, rows, ov)?;
        eprintln!("wrote {}", p.display());
    }
    Ok(())
}

fn sweep(f: &SweepFlags, kind: Kind) -> Result<(), Box<dyn std::error::Error>> {
    no_nvls();
    let a = f.args(kind)?;
    let rows = if a.backend_host { crate::sweep::host(&a)? } else { crate::sweep::gpu(&a)? };
    write_outputs(&f.out, &rows, &[])?;
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

fn overlap(f: &OverlapFlags) -> Result<(), Box<dyn std::error::Error>> {
    no_nvls();
    let mut all = Vec::new();
    for c in f.collective.split(',') {
        let kind = match c.trim() {
            "all-gather" => Kind::AllGather,
            "reduce-scatter" => Kind::ReduceScatter,
            other => return Err(format!("collective {other:?}: expected all-gather or reduce-scatter").into()),
        };
        let flags = SweepFlags {
            min: 1,
            max: 1,
            factor: 2,
            iters: 1,
            warmup: 0,
            reps: 1,
            dtype: "bf16".into(),
            op: "sum".into(),
            algorithms: f.algorithms.clone(),
            sync: f.sync.clone(),
            ctas: f.ctas.clone(),
            pipeline: "default".into(),
            check: false,
            no_nccl: f.no_nccl,
            staged: false,
            backend: "gpu".into(),
            out: Output::default(),
        };
        let s = flags.args(kind)?;
        let a = OverlapArgs {
            kind,
            m: f.gemm,
            gemm_ms: f.gemm_ms,
            shard_bytes: f.shard,
            colls: f.colls,
            trials: f.trials,
            algorithms: s.algorithms.into_iter().filter(|x| x != "sm-oneshot").collect(),
            methods: s.methods,
            ctas: s.ctas,
            nccl: !f.no_nccl,
        };
        all.extend(crate::overlap::run(&a)?);
    }
    write_outputs(&f.out, &[], &all)
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

fn quick(max: usize, plot: &Path) -> Result<(), Box<dyn std::error::Error>> {
    let gpus = lowcon::cuda::device_count().unwrap_or(0);
    let (n, backend) = if gpus >= 2 {
        println!("lowcon quick check: {gpus} GPUs, all-gather and reduce-scatter, checked against a CPU reference");
        (gpus, "gpu")
    } else {
        println!(
            "lowcon quick check: {} GPU(s) usable, so running 4 ranks on the host backend (CPU shared memory);              the numbers measure the CPU, not a GPU",
            gpus
        );
        (4, "host")
    };
    let dir = tempfile_dir()?;
    let mut rows: Vec<Row> = Vec::new();
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
        for line in std::fs::read_to_string(&json)?.lines() {
            rows.push(serde_json::from_str(line)?);
        }
    }
    crate::plot::draw(plot, &rows, &[])?;
    println!("wrote {}", plot.display());
    Ok(())
}

fn plot_files(files: &[PathBuf], out: &Path) -> Result<(), Box<dyn std::error::Error>> {
    let (mut rows, mut ov) = (Vec::new(), Vec::new());
    for f in files {
        let text = match std::fs::read_to_string(f) {
            Ok(t) => t,
            Err(e) => {
                eprintln!("skipping {}: {e}", f.display());
                continue;
            }
        };
        for (i, line) in text.lines().enumerate().filter(|(_, l)| !l.trim().is_empty()) {
            let v: serde_json::Value =
                serde_json::from_str(line).map_err(|e| format!("{}:{}: {e}", f.display(), i + 1))?;
            if v["bench"].as_str().is_some_and(|b| b.starts_with("overlap")) {
                ov.push(serde_json::from_value(v)?);
            } else {
                rows.push(serde_json::from_value(v)?);
            }
        }
    }
    crate::plot::draw(out, &rows, &ov)?;
    println!("wrote {}", out.display());
    Ok(())
}

fn tempfile_dir() -> Result<PathBuf, Box<dyn std::error::Error>> {
    let d = std::env::temp_dir().join(format!("lowcon-quick-{}", std::process::id()));
    std::fs::create_dir_all(&d)?;
    Ok(d)
}

fn barrier(iters: usize, warmup: usize, json: bool) -> Result<(), Box<dyn std::error::Error>> {
    let g = GpuGroup::from_env(GpuGroupOptions::default())?;
    let (rank, world) = (g.rank(), g.world_size());
    if rank == 0 {
        println!("# barrier latency, {world} GPUs, {iters} timed barriers after {warmup} warm-up, max over ranks");
        println!("{:<8} {:>6} {:>12} {:>10} {:>18}", "method", "ranks", "median (us)", "p99 (us)", "back-to-back (us)");
    }
    for method in [SyncMethod::Kernel, SyncMethod::StreamMemop] {
        let l = lowcon_tests::gpu_ranks::barrier_latency(&g, method, iters, warmup)?;
        let mine = [l.median_us, l.p99_us, l.back_to_back_us].map(f64::to_le_bytes).concat();
        let all = g.all_gather_bytes(&format!("bench-barrier-{method:?}"), &mine)?;
        let max = |k: usize| {
            all.iter().map(|b| f64::from_le_bytes(b[8 * k..8 * k + 8].try_into().expect("8 bytes"))).fold(0.0, f64::max)
        };
        if rank == 0 {
            let name = match method {
                SyncMethod::Kernel => "kernel",
                SyncMethod::StreamMemop => "memop",
            };
            println!("{name:<8} {world:>6} {:>12.2} {:>10.2} {:>18.2}", max(0), max(1), max(2));
            if json {
                println!(
                    "{{\"bench\":\"barrier\",\"method\":\"{name}\",\"ranks\":{world},\"iters\":{iters},\"median_us\":{:.3},\"p99_us\":{:.3},\"back_to_back_us\":{:.3}}}",
                    max(0),
                    max(1),
                    max(2)
                );
            }
        }
    }
    g.store_barrier("bench-barrier-done")?;
    Ok(())
}
