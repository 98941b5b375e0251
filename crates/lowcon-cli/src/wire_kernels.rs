//! `lowcon bench wire-kernels`: the flags of the bf16 wire's kernel harness
//! (`lowcon_bench::wire_kernels`).

use std::path::PathBuf;

use clap::Args;

use crate::bench::parse_size;

/// Flags of `lowcon bench wire-kernels`.
#[derive(Args, Clone, Debug)]
pub struct WireKernelFlags {
    /// f32 elements per chunk (one launch's piece).
    #[arg(long, default_value = "16M", value_parser = parse_size)]
    pub elems: usize,
    /// The world the buffers play.
    #[arg(long, default_value_t = 2)]
    pub world: usize,
    /// CTA counts, comma-separated.
    #[arg(long, default_value = "4,8,16")]
    pub ctas: String,
    /// Launches per timed batch (alone).
    #[arg(short = 'n', long, default_value_t = 20)]
    pub iters: usize,
    /// Timed batches (alone; the median counts).
    #[arg(long, default_value_t = 5)]
    pub reps: usize,
    /// Interleaved pairs beside the GEMM (0: alone only).
    #[arg(long, default_value_t = 3)]
    pub trials: usize,
    /// GEMM size (m = n = k, bf16).
    #[arg(long, default_value_t = 8192)]
    pub m: usize,
    /// GEMMs per window.
    #[arg(long, default_value_t = 20)]
    pub gemms: usize,
    /// Data whose bottom halves are nonzero: the reduction reads them (the fallback).
    #[arg(long)]
    pub inexact: bool,
    /// Write the rows as JSON lines to FILE.
    #[arg(long, value_name = "FILE")]
    pub json: Option<PathBuf>,
}

/// Runs the harness on this process's GPU.
pub fn run(f: &WireKernelFlags) -> Result<(), Box<dyn std::error::Error>> {
    let ctas = f
        .ctas
        .split(',')
        .map(|c| c.trim().parse::<u32>().map_err(|e| format!("ctas {c:?}: {e}")))
        .collect::<Result<Vec<_>, _>>()?;
    let a = lowcon_bench::wire_kernels::WireKernelOptions {
        elems: f.elems,
        world: f.world,
        ctas,
        iters: f.iters,
        reps: f.reps,
        trials: f.trials,
        m: f.m,
        gemms: f.gemms,
        inexact: f.inexact,
        json: f.json.clone(),
    };
    lowcon_bench::wire_kernels::run(&a).map(|_| ())
}
