//! `lowcon bench wire-kernels`: the bf16 wire's pack and reduction kernels (NOTE [bf16
//! wire]) on one GPU, alone and beside a saturated GEMM, at several CTA counts. A
//! collective at one rank packs nothing, and ranks sharing a GPU do not time their own
//! kernels, so the kernels run here by themselves ([`lowcon::cuda::WireKernels`]: a
//! world of `world` ranks played by this GPU's buffers).
//!
//! Per kernel and CTA count:
//! - **alone**: `iters` launches back to back between two CUDA events, the median of
//!   `reps` batches: µs per launch, and GB/s of the bytes it reads and writes;
//! - **beside the GEMM**: `trials` interleaved pairs of a GEMM window (`gemms` bf16
//!   `m`³ GEMMs on a default-priority stream) alone and with the kernel launched back to
//!   back on a high-priority stream, enough launches to cover the window at the kernel's
//!   own rate plus 25% (as `lowcon bench overlap` does). The GEMM slowdown is the median
//!   pairwise ratio of the window's times; the bandwidth kept counts the launches that
//!   ended inside the window (an event after each) against the alone rate.
//!
//! Every configuration's last reduction is checked against the CPU (`WireKernels::check`).

use lowcon::cuda::{Device, Event, Stream, StreamPriority, WireKernels};
use serde::Serialize;

use crate::Res;
use crate::overlap::Gemm8;
use crate::stats;

/// The flags of `lowcon bench wire-kernels`.
#[derive(Clone, Debug)]
pub struct WireKernelOptions {
    /// f32 elements per chunk (the piece a launch handles).
    pub elems: usize,
    /// The simulated world.
    pub world: usize,
    pub ctas: Vec<u32>,
    pub iters: usize,
    pub reps: usize,
    /// Interleaved pairs beside the GEMM (0: alone only).
    pub trials: usize,
    /// GEMM size and count per window.
    pub m: usize,
    pub gemms: usize,
    /// Data whose bottom halves are nonzero (the reduction's fallback).
    pub inexact: bool,
    /// Write the rows as JSON lines.
    pub json: Option<std::path::PathBuf>,
}

/// One kernel at one CTA count.
#[derive(Clone, Debug, Serialize)]
pub struct WireKernelRow {
    pub kernel: String,
    pub ctas: u32,
    pub world: usize,
    pub elems: usize,
    pub inexact: bool,
    pub bytes: usize,
    pub alone_us: f64,
    pub alone_gbs: f64,
    /// Median GEMM slowdown over the trials, %; its spread (min, max).
    pub gemm_slowdown_pct: Option<f64>,
    pub gemm_slowdown_min_pct: Option<f64>,
    pub gemm_slowdown_max_pct: Option<f64>,
    /// The kernel's GB/s inside the GEMM window over its GB/s alone, %.
    pub kept_pct: Option<f64>,
    pub gemm_alone_ms: Option<f64>,
    pub wrong: usize,
}

fn ms(a: &Event, b: &Event) -> Res<f64> {
    Ok(a.elapsed_ms(b)? as f64)
}

/// Runs the harness on GPU 0 (`LOWCON_DEVICE` or the launcher's local rank if set).
pub fn run(a: &WireKernelOptions) -> Res<Vec<WireKernelRow>> {
    lowcon::cuda::init()?;
    let index = lowcon::cuda::rank_device(std::env::var("LOCAL_RANK").ok().and_then(|r| r.parse().ok()).unwrap_or(0))?;
    let device = Device::open(index)?;
    let info = device.info()?;
    let (compute, side) = (device.stream(StreamPriority::Default)?, device.stream(StreamPriority::High)?);
    let w = WireKernels::new(&device, &side, a.elems, a.world, a.inexact)?;
    let mut gemm = if a.trials > 0 { Some(Gemm8::new(&compute, a.m)?) } else { None };
    println!(
        "# lowcon bench wire-kernels on {} ({} SMs): {} f32 elements per chunk, a world of {} played by one GPU, {} data; \
         alone: median of {} x {} launches; beside {} bf16 {}^3 GEMMs: median of {} interleaved pairs",
        info.name,
        info.sm_count,
        a.elems,
        a.world,
        if a.inexact { "inexact (every piece falls back)" } else { "bf16-exact" },
        a.reps,
        a.iters,
        a.gemms,
        a.m,
        a.trials
    );
    println!(
        "{:<8} {:>5} {:>10} {:>10} {:>10} {:>18} {:>8} {:>6}",
        "kernel", "ctas", "alone us", "alone GB/s", "slowdown", "[min, max]", "kept", "wrong"
    );
    let mut rows = Vec::new();
    for &ctas in &a.ctas {
        for kernel in ["pack", "reduce"] {
            let launch = |s: &Stream| -> lowcon::Result<()> {
                match kernel {
                    "pack" => w.pack(s, ctas),
                    _ => w.reduce(s, ctas),
                }
            };
            let bytes = if kernel == "pack" { w.pack_bytes() } else { w.reduce_bytes() };
            // The reduction reads what the pack wrote.
            w.pack(&side, ctas)?;
            for _ in 0..3 {
                launch(&side)?;
            }
            let (e0, e1) = (side.event(true)?, side.event(true)?);
            let mut per = Vec::new();
            for _ in 0..a.reps.max(1) {
                side.record(&e0)?;
                for _ in 0..a.iters.max(1) {
                    launch(&side)?;
                }
                side.record(&e1)?;
                e1.synchronize()?;
                per.push(ms(&e0, &e1)? * 1e3 / a.iters.max(1) as f64);
            }
            let alone_us = stats::median(&per);
            let alone_gbs = bytes as f64 / (alone_us * 1e-6) / 1e9;
            let mut row = WireKernelRow {
                kernel: kernel.into(),
                ctas,
                world: a.world,
                elems: a.elems,
                inexact: a.inexact,
                bytes,
                alone_us,
                alone_gbs,
                gemm_slowdown_pct: None,
                gemm_slowdown_min_pct: None,
                gemm_slowdown_max_pct: None,
                kept_pct: None,
                gemm_alone_ms: None,
                wrong: 0,
            };
            if let Some(g) = gemm.as_mut() {
                let (ratios, kept, alone_ms) = beside_gemm(g, &compute, &side, a, alone_us, bytes, &launch)?;
                row.gemm_slowdown_pct = Some((stats::median(&ratios) - 1.0) * 100.0);
                row.gemm_slowdown_min_pct = ratios.iter().copied().reduce(f64::min).map(|r| (r - 1.0) * 100.0);
                row.gemm_slowdown_max_pct = ratios.iter().copied().reduce(f64::max).map(|r| (r - 1.0) * 100.0);
                row.kept_pct = Some(stats::median(&kept) * 100.0);
                row.gemm_alone_ms = Some(stats::median(&alone_ms));
            }
            if kernel == "reduce" {
                side.synchronize()?;
                row.wrong = w.check(&side)?;
            }
            let pct = |x: Option<f64>| x.map_or("-".to_string(), |v| format!("{v:.1}%"));
            let spread = match (row.gemm_slowdown_min_pct, row.gemm_slowdown_max_pct) {
                (Some(lo), Some(hi)) => format!("[{lo:.1}, {hi:.1}]"),
                _ => "-".into(),
            };
            println!(
                "{:<8} {:>5} {:>10.1} {:>10.1} {:>10} {:>18} {:>8} {:>6}",
                row.kernel,
                row.ctas,
                row.alone_us,
                row.alone_gbs,
                pct(row.gemm_slowdown_pct),
                spread,
                pct(row.kept_pct),
                if kernel == "reduce" { row.wrong.to_string() } else { "-".into() }
            );
            rows.push(row);
        }
    }
    side.synchronize()?;
    compute.synchronize()?;
    if let Some(p) = &a.json {
        let mut text = String::new();
        for r in &rows {
            text.push_str(&serde_json::to_string(r)?);
            text.push('\n');
        }
        std::fs::write(p, text)?;
    }
    if let Some(bad) = rows.iter().find(|r| r.wrong > 0) {
        return Err(format!("wire reduce at {} CTAs: {} wrong elements", bad.ctas, bad.wrong).into());
    }
    Ok(rows)
}

/// `trials` interleaved pairs: the GEMM window alone, then with the kernel back to back
/// beside it. Returns the pairwise slowdown ratios, the bandwidth kept per trial (0 to
/// 1), and the alone window times (ms).
#[allow(clippy::too_many_arguments)]
fn beside_gemm(
    g: &mut Gemm8,
    compute: &Stream,
    side: &Stream,
    a: &WireKernelOptions,
    alone_us: f64,
    bytes: usize,
    launch: &dyn Fn(&Stream) -> lowcon::Result<()>,
) -> Res<(Vec<f64>, Vec<f64>, Vec<f64>)> {
    let (g0, g1, start) = (compute.event(true)?, compute.event(true)?, compute.event(true)?);
    let (mut ratios, mut kept, mut alone) = (Vec::new(), Vec::new(), Vec::new());
    g.run(3)?; // warm the GEMM
    for _ in 0..a.trials {
        compute.record(&g0)?;
        g.run(a.gemms)?;
        compute.record(&g1)?;
        g1.synchronize()?;
        let t_alone = ms(&g0, &g1)?;
        // Launches enough to cover the window at the kernel's own rate, plus 25%.
        let calls = ((t_alone * 1e3 / alone_us) * 1.25).ceil().max(1.0) as usize;
        let ends: Vec<Event> = (0..calls).map(|_| side.event(true)).collect::<lowcon::Result<_>>()?;
        compute.record(&start)?;
        side.wait(&start)?;
        compute.record(&g0)?;
        // Interleaved as a trainer enqueues: a GEMM, then the kernels of its share.
        let per_gemm = calls.div_ceil(a.gemms.max(1));
        let mut k = 0;
        for _ in 0..a.gemms {
            g.run(1)?;
            for _ in 0..per_gemm {
                if k < calls {
                    launch(side)?;
                    side.record(&ends[k])?;
                    k += 1;
                }
            }
        }
        compute.record(&g1)?;
        side.synchronize()?;
        g1.synchronize()?;
        let t_both = ms(&g0, &g1)?;
        let mut done = 0usize;
        for e in &ends {
            if ms(&g0, e)? <= t_both {
                done += 1;
            }
        }
        ratios.push(t_both / t_alone);
        let gbs_in = (done * bytes) as f64 / (t_both * 1e-3) / 1e9;
        kept.push(gbs_in / (bytes as f64 / (alone_us * 1e-6) / 1e9));
        alone.push(t_alone);
    }
    Ok((ratios, kept, alone))
}
