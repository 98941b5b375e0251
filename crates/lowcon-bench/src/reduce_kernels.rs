//! `lowcon bench reduce-kernels`: lowcon's reduction kernels on one GPU, alone and beside
//! a saturated GEMM, per variant (kernel, launch shape, pieces per call, stream
//! priority), with two controls that split what a kernel costs the GEMM into taking SMs
//! and moving bytes. A collective at one rank reduces nothing and ranks sharing a GPU do
//! not time their own kernels, so the kernels run here by themselves
//! ([`lowcon::instruments::reduce_kernels::ReduceKernels`]: a world of `world` ranks played by this GPU's
//! buffers).
//!
//! Per variant:
//! - **alone**: `iters` calls back to back between two CUDA events, the median of
//!   `reps` batches: µs per call, GB/s of the bytes it reads and writes;
//! - **beside the GEMM**: `trials` interleaved pairs of a GEMM window (`gemms` bf16 `m`³
//!   GEMMs on a default-priority stream) alone, then with the kernel's calls back to back
//!   on a stream of the variant's priority, enqueued a GEMM at a time as a trainer
//!   would, enough calls to cover the window at the alone rate plus 25%. Slowdown: the
//!   median pairwise ratio of the window's times, with a 95% bootstrap interval; kept:
//!   the calls that ended inside the window (an event after each) against the alone
//!   rate, median and interval.
//!
//! The controls: `spin` holds the variant's CTAs for the reduction's own alone time
//! with no memory traffic (the cost of taking SMs: the GEMM's tiles wait, wave
//! quantization), `memcpy` moves the reduction's bytes with no kernel of ours (the cost of
//! HBM traffic, where the driver uses a copy engine).
//!
//! Every reduction's output is checked against the CPU after its variant.

use lowcon::cuda::{Device, Event, Stream, StreamPriority};
use lowcon::instruments::reduce_kernels::{KernelKind, ReduceKernels, Shape};

use crate::Res;
use crate::overlap::Gemm8;
use crate::stats;

/// The flags of `lowcon bench reduce-kernels`.
#[derive(Clone, Debug)]
pub struct ReduceKernelOptions {
    /// f32 elements per chunk (the output of one call).
    pub elems: usize,
    /// The simulated world.
    pub world: usize,
    pub kernels: Vec<String>,
    pub shapes: Vec<Shape>,
    /// Launches per call (ce-reduce's pieces).
    pub pieces: Vec<u32>,
    pub priorities: Vec<StreamPriority>,
    pub iters: usize,
    pub reps: usize,
    /// Interleaved pairs beside the GEMM (0: alone only).
    pub trials: usize,
    /// GEMM size and count per window.
    pub m: usize,
    pub gemms: usize,
    /// Data whose bottom halves are nonzero (the wire reduction's fallback).
    pub inexact: bool,
    /// Write the rows as JSON lines.
    pub json: Option<std::path::PathBuf>,
}

pub use crate::rows::ReduceKernelRow;

fn ms(a: &Event, b: &Event) -> Res<f64> {
    Ok(a.elapsed_ms(b)? as f64)
}

/// Parses a kernel name of `--kernels`.
pub fn kernel_of(name: &str) -> Result<KernelKind, String> {
    Ok(match name {
        "reduce" => KernelKind::Reduce,
        "reduce-once" => KernelKind::Once,
        "pack" => KernelKind::Pack,
        "wire-reduce" => KernelKind::WireReduce,
        "memcpy" => KernelKind::Memcpy,
        // The spin's time is set per shape from the reduction's.
        "spin" => KernelKind::Spin { ns: 0 },
        n if n.starts_with("bulk-add") => {
            let kb = n.strip_prefix("bulk-add").and_then(|t| t.strip_prefix('/')).unwrap_or("16K");
            let kb: u32 =
                kb.trim_end_matches(['K', 'k']).parse().map_err(|_| format!("kernel {name:?}: bulk-add/<KiB>K"))?;
            KernelKind::BulkAdd { tile: kb << 10 }
        }
        other => {
            return Err(format!(
                "kernel {other:?}: expected reduce, reduce-once, pack, wire-reduce, bulk-add/<KiB>K, spin or memcpy"
            ));
        }
    })
}

/// Parses `--shapes` (`CTAS x THREADS`, comma-separated).
pub fn shapes_of(text: &str) -> Result<Vec<Shape>, String> {
    text.split(',')
        .map(|s| {
            let (c, t) = s.trim().split_once('x').ok_or_else(|| format!("shape {s:?}: CTASxTHREADS, e.g. 16x512"))?;
            let ctas = c.parse::<u32>().map_err(|e| format!("shape {s:?}: {e}"))?;
            let threads = t.parse::<u32>().map_err(|e| format!("shape {s:?}: {e}"))?;
            if ctas == 0 || !(32..=512).contains(&threads) || !threads.is_multiple_of(32) {
                return Err(format!("shape {s:?}: at least 1 CTA of 32 to 512 threads, a multiple of 32"));
            }
            Ok(Shape { ctas, threads })
        })
        .collect()
}

/// Runs the harness on this process's GPU.
pub fn run(a: &ReduceKernelOptions) -> Res<Vec<ReduceKernelRow>> {
    lowcon::cuda::init()?;
    let index = lowcon::cuda::rank_device(std::env::var("LOCAL_RANK").ok().and_then(|r| r.parse().ok()).unwrap_or(0))?;
    let device = Device::open(index)?;
    let info = device.info()?;
    let compute = device.stream(StreamPriority::Default)?;
    let k = ReduceKernels::new(&device, &compute, a.elems, a.world, a.inexact)?;
    let kinds = a.kernels.iter().map(|n| kernel_of(n)).collect::<Result<Vec<_>, _>>()?;
    let mut gemm = if a.trials > 0 { Some(Gemm8::new(&compute, a.m)?) } else { None };
    println!(
        "# lowcon bench reduce-kernels on {} ({} SMs): {} f32 elements per call ({} MiB out), a world of {} played by \
         one GPU, {} data; alone: median of {} x {} calls; beside {} bf16 {}^3 GEMMs: {} interleaved pairs, median \
         [95% bootstrap interval]",
        info.name,
        info.sm_count,
        a.elems,
        (a.elems * 4) >> 20,
        a.world,
        if a.inexact { "inexact" } else { "bf16-exact" },
        a.reps,
        a.iters,
        a.gemms,
        a.m,
        a.trials
    );
    println!(
        "{:<14} {:>9} {:>6} {:>7} {:>9} {:>8} {:>22} {:>22} {:>5}",
        "kernel", "shape", "pieces", "prio", "alone us", "GB/s", "GEMM slowdown %", "kept %", "wrong"
    );
    let mut rows = Vec::new();
    for &shape in &a.shapes {
        // The spin control holds the CTAs as long as the reduction runs alone.
        let mut reduce_us = None;
        for &kind in &kinds {
            for &pieces in &a.pieces {
                for &prio in &a.priorities {
                    let side = device.stream(prio)?;
                    let kind = match kind {
                        KernelKind::Spin { .. } => KernelKind::Spin { ns: (reduce_us.unwrap_or(500.0) * 1e3) as u64 },
                        k => k,
                    };
                    let call = |s: &Stream| -> lowcon::Result<()> { k.launch(s, kind, shape, pieces) };
                    if kind == KernelKind::WireReduce {
                        // The reduction reads what a pack wrote.
                        k.launch(&side, KernelKind::Pack, shape, pieces)?;
                    }
                    let (alone_us, row_bytes) = alone(&side, a, &call, k.bytes(kind))?;
                    if kind == KernelKind::Reduce && pieces == a.pieces[0] {
                        reduce_us = Some(alone_us);
                    }
                    let mut row = ReduceKernelRow {
                        kernel: kind.name(),
                        ctas: shape.ctas,
                        threads: if matches!(kind, KernelKind::BulkAdd { .. }) { 128 } else { shape.threads },
                        pieces,
                        priority: if prio == StreamPriority::High { "high" } else { "default" }.into(),
                        world: a.world,
                        elems: a.elems,
                        inexact: a.inexact,
                        bytes: row_bytes,
                        alone_us,
                        alone_gbs: row_bytes as f64 / (alone_us * 1e-6) / 1e9,
                        slowdown_pct: None,
                        slowdown_lo: None,
                        slowdown_hi: None,
                        kept_pct: None,
                        kept_lo: None,
                        kept_hi: None,
                        gemm_alone_ms: None,
                        wrong: None,
                    };
                    if let Some(g) = gemm.as_mut() {
                        let (ratios, kept, alone_ms) = beside_gemm(g, &compute, &side, a, alone_us, &call)?;
                        let pct: Vec<f64> = ratios.iter().map(|r| (r - 1.0) * 100.0).collect();
                        let kept: Vec<f64> = kept.iter().map(|x| x * 100.0).collect();
                        let ((slo, shi), (klo, khi)) = (stats::median_ci95(&pct), stats::median_ci95(&kept));
                        row.slowdown_pct = Some(stats::median(&pct));
                        (row.slowdown_lo, row.slowdown_hi) = (Some(slo), Some(shi));
                        row.kept_pct = Some(stats::median(&kept));
                        (row.kept_lo, row.kept_hi) = (Some(klo), Some(khi));
                        row.gemm_alone_ms = Some(stats::median(&alone_ms));
                    }
                    side.synchronize()?;
                    if matches!(kind, KernelKind::Reduce | KernelKind::Once | KernelKind::WireReduce) {
                        // One more call into a poisoned output, checked against the CPU.
                        k.poison(&side)?;
                        if kind == KernelKind::WireReduce {
                            k.launch(&side, KernelKind::Pack, shape, pieces)?;
                        }
                        call(&side)?;
                        row.wrong = Some(k.check(&side, kind == KernelKind::WireReduce)?);
                    }
                    print_row(&row);
                    rows.push(row);
                }
            }
        }
    }
    compute.synchronize()?;
    if let Some(p) = &a.json {
        let mut text = String::new();
        for r in &rows {
            text.push_str(&serde_json::to_string(r)?);
            text.push('\n');
        }
        std::fs::write(p, text)?;
    }
    if let Some(bad) = rows.iter().find(|r| r.wrong.is_some_and(|w| w > 0)) {
        return Err(format!(
            "{} at {}x{}: {} wrong elements",
            bad.kernel,
            bad.ctas,
            bad.threads,
            bad.wrong.unwrap_or(0)
        )
        .into());
    }
    Ok(rows)
}

fn print_row(r: &ReduceKernelRow) {
    let iv = |m: Option<f64>, lo: Option<f64>, hi: Option<f64>| match (m, lo, hi) {
        (Some(m), Some(lo), Some(hi)) => format!("{m:.1} [{lo:.1}, {hi:.1}]"),
        _ => "-".into(),
    };
    println!(
        "{:<14} {:>9} {:>6} {:>7} {:>9.1} {:>8.1} {:>22} {:>22} {:>5}",
        r.kernel,
        format!("{}x{}", r.ctas, r.threads),
        r.pieces,
        r.priority,
        r.alone_us,
        r.alone_gbs,
        iv(r.slowdown_pct, r.slowdown_lo, r.slowdown_hi),
        iv(r.kept_pct, r.kept_lo, r.kept_hi),
        r.wrong.map_or("-".into(), |w| w.to_string())
    );
}

/// The call's time alone (µs, median batch) and its bytes.
fn alone(
    side: &Stream,
    a: &ReduceKernelOptions,
    call: &dyn Fn(&Stream) -> lowcon::Result<()>,
    bytes: usize,
) -> Res<(f64, usize)> {
    for _ in 0..2 {
        call(side)?;
    }
    let (e0, e1) = (side.event(true)?, side.event(true)?);
    let mut per = Vec::new();
    for _ in 0..a.reps.max(1) {
        side.record(&e0)?;
        for _ in 0..a.iters.max(1) {
            call(side)?;
        }
        side.record(&e1)?;
        e1.synchronize()?;
        per.push(ms(&e0, &e1)? * 1e3 / a.iters.max(1) as f64);
    }
    Ok((stats::median(&per), bytes))
}

/// `trials` interleaved pairs: the GEMM window alone, then with the calls back to back
/// beside it. Returns the pairwise time ratios, the rate kept per trial (0 to 1), and the
/// alone window times (ms).
fn beside_gemm(
    g: &mut Gemm8,
    compute: &Stream,
    side: &Stream,
    a: &ReduceKernelOptions,
    alone_us: f64,
    call: &dyn Fn(&Stream) -> lowcon::Result<()>,
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
        let calls = ((t_alone * 1e3 / alone_us) * 1.25).ceil().max(1.0) as usize;
        let ends: Vec<Event> = (0..calls).map(|_| side.event(true)).collect::<lowcon::Result<_>>()?;
        compute.record(&start)?;
        side.wait(&start)?;
        compute.record(&g0)?;
        // Interleaved as a trainer enqueues: a GEMM, then the calls of its share.
        let per_gemm = calls.div_ceil(a.gemms.max(1));
        let mut k = 0;
        for _ in 0..a.gemms {
            g.run(1)?;
            for _ in 0..per_gemm {
                if k < calls {
                    call(side)?;
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
        kept.push(done as f64 * alone_us * 1e-3 / t_both);
        alone.push(t_alone);
    }
    Ok((ratios, kept, alone))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kernel_names_and_shapes_parse_or_say_why() {
        assert_eq!(kernel_of("reduce").unwrap(), KernelKind::Reduce);
        assert_eq!(kernel_of("bulk-add/4K").unwrap(), KernelKind::BulkAdd { tile: 4096 });
        assert_eq!(kernel_of("bulk-add").unwrap(), KernelKind::BulkAdd { tile: 16 << 10 });
        assert!(kernel_of("fma").unwrap_err().contains("expected reduce"));
        assert_eq!(
            shapes_of("16x512, 64x64").unwrap(),
            vec![Shape { ctas: 16, threads: 512 }, Shape { ctas: 64, threads: 64 }]
        );
        for bad in ["16", "0x512", "8x48", "8x1024"] {
            assert!(shapes_of(bad).is_err(), "{bad}");
        }
    }
}
