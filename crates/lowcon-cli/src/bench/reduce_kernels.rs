//! `lowcon bench reduce-kernels`: the flags of the reduction-kernel harness
//! (`lowcon_bench::reduce_kernels`).

use std::path::PathBuf;

use clap::Args;
use lowcon::cuda::StreamPriority;

use super::parse_size;

/// Flags of `lowcon bench reduce-kernels`.
#[derive(Args, Clone, Debug)]
pub struct ReduceKernelFlags {
    /// f32 elements per call (its output; 64M: 256 MiB).
    #[arg(long, default_value = "64M", value_parser = parse_size)]
    pub elems: usize,
    /// The world the buffers play.
    #[arg(long, default_value_t = 2)]
    pub world: usize,
    /// Kernels, comma-separated: reduce (ce-reduce's, one launch per piece), reduce-once
    /// (the same in one launch per call, its pieces behind flags), pack and wire-reduce
    /// (the bf16 wire's), `bulk-add/<KiB>K` (cp.reduce.async.bulk, tiles of that size), and the
    /// controls spin (the SMs held as long as `reduce`, listed before it, runs; no bytes)
    /// and memcpy (the bytes, no kernel of ours).
    #[arg(long, default_value = "reduce,reduce-once,spin,memcpy,wire-reduce,pack,bulk-add/16K,bulk-add/4K")]
    pub kernels: String,
    /// Launch shapes, CTASxTHREADS, comma-separated.
    #[arg(long, default_value = "4x512,8x512,16x512,16x128,32x128,64x64,132x64")]
    pub shapes: String,
    /// Launches per call (ce-reduce's pieces), comma-separated.
    #[arg(long, default_value = "1,16")]
    pub pieces: String,
    /// The kernels' stream priority: high, default, or both.
    #[arg(long, default_value = "high")]
    pub priority: String,
    /// Calls per timed batch (alone).
    #[arg(short = 'n', long, default_value_t = 10)]
    pub iters: usize,
    /// Timed batches (alone; the median counts).
    #[arg(long, default_value_t = 5)]
    pub reps: usize,
    /// Interleaved pairs beside the GEMM (0: alone only).
    #[arg(long, default_value_t = 7)]
    pub trials: usize,
    /// GEMM size (m = n = k, bf16).
    #[arg(long, default_value_t = 8192)]
    pub m: usize,
    /// GEMMs per window.
    #[arg(long, default_value_t = 20)]
    pub gemms: usize,
    /// Data whose bottom halves are nonzero: the wire's reduction reads them.
    #[arg(long)]
    pub inexact: bool,
    /// Write the rows as JSON lines to FILE.
    #[arg(long, value_name = "FILE")]
    pub json: Option<PathBuf>,
}

/// Runs the harness on this process's GPU.
pub fn run(f: &ReduceKernelFlags) -> Result<(), Box<dyn std::error::Error>> {
    let list = |s: &str| s.split(',').map(|x| x.trim().to_string()).filter(|x| !x.is_empty()).collect::<Vec<_>>();
    let kernels = list(&f.kernels);
    for k in &kernels {
        lowcon_bench::reduce_kernels::kernel_of(k)?;
    }
    let pieces = list(&f.pieces)
        .iter()
        .map(|p| match p.parse::<u32>() {
            Ok(n) if (1..=1024).contains(&n) => Ok(n),
            _ => Err(format!("pieces {p:?}: expected 1 to 1024")),
        })
        .collect::<Result<Vec<_>, _>>()?;
    let priorities = match f.priority.as_str() {
        "high" => vec![StreamPriority::High],
        "default" => vec![StreamPriority::Default],
        "both" => vec![StreamPriority::High, StreamPriority::Default],
        other => return Err(format!("priority {other:?}: expected high, default or both").into()),
    };
    let a = lowcon_bench::reduce_kernels::ReduceKernelOptions {
        elems: f.elems,
        world: f.world,
        kernels,
        shapes: lowcon_bench::reduce_kernels::shapes_of(&f.shapes)?,
        pieces,
        priorities,
        iters: f.iters,
        reps: f.reps,
        trials: f.trials,
        m: f.m,
        gemms: f.gemms,
        inexact: f.inexact,
        json: f.json.clone(),
    };
    lowcon_bench::reduce_kernels::run(&a).map(|_| ())
}
