//! Folding the per-trial values every rank measured into one [`SaturatedRow`].

use super::{Enqueue, Setup};
use crate::nvml::power_w;
use crate::rows::SaturatedRow;
use crate::stats::{self, Spread};
use crate::sweep::Kind;

fn fin(x: f64) -> Option<f64> {
    x.is_finite().then_some(x)
}

/// A phase's power (W), highest rank: each rank's energy over its time, both summed
/// over trials (`mj[rank][trial]`, `ms[rank][trial]`); `None` where no rank's counter moved.
fn phase_power(mj: &[Vec<f64>], ms: &[Vec<f64>]) -> Option<f64> {
    mj.iter().zip(ms).map(|(e, t)| power_w(e, t)).filter(|w| w.is_finite()).reduce(f64::max)
}

/// Folds every rank's per-trial values (`f[field][rank][trial]`) into a row.
#[allow(clippy::too_many_arguments)]
pub(super) fn row(
    kind: Kind,
    name: &str,
    world: usize,
    shard: usize,
    priority: &str,
    enq: Enqueue,
    s: &Setup,
    calls: usize,
    call_ms: f64,
    f: &[Vec<Vec<f64>>],
    ctas: Option<u32>,
    ctas_source: String,
) -> SaturatedRow {
    let (ga, go) = (stats::max_over_ranks(&f[0]), stats::max_over_ranks(&f[1]));
    let slow = Spread::of(&stats::pairwise_pct(&ga, &go));
    let (ba, bw) = (stats::min_over_ranks(&f[2]), stats::min_over_ranks(&f[3]));
    let kept = Spread::of(&stats::kept_pct(&ba, &bw));
    // Calls per GEMM: the fewest calls in the window of any rank, per trial.
    let per_gemm: Vec<f64> = stats::min_over_ranks(&f[14]).iter().map(|k| k / s.gemms.max(1) as f64).collect();
    // A trial is covered when every rank's last call ended after its window.
    let uncovered = stats::min_over_ranks(&f[15]).iter().filter(|&&c| c < 1.0).count();
    let med = |x: Vec<f64>| fin(stats::median(&x));
    let reasons = f[13].iter().flatten().filter(|x| x.is_finite()).fold(0u64, |m, &x| m | x as u64);
    SaturatedRow {
        bench: format!("saturated-{}", kind.name()),
        implementation: name.to_string(),
        ranks: world,
        shard_bytes: shard,
        priority: priority.to_string(),
        enqueue: enq.name().to_string(),
        trials: s.trials,
        gemms: s.gemms,
        calls,
        prelude_gemms: s.prelude,
        gemm_alone_ms: stats::median(&ga),
        slowdown_pct: slow.median,
        slowdown_min: slow.min,
        slowdown_max: slow.max,
        slowdown_q1: slow.q1,
        slowdown_q3: slow.q3,
        busbw_alone_gbs: med(ba),
        busbw_window_gbs: med(bw),
        calls_per_gemm: med(per_gemm),
        uncovered_trials: Some(uncovered),
        kept_pct: fin(kept.median),
        kept_min: fin(kept.min),
        kept_max: fin(kept.max),
        ctas,
        ctas_source,
        sm_ms_per_gb: ctas.and_then(|c| fin(stats::sm_ms_per_gb(c, call_ms, shard, world))),
        sm_mhz_alone: med(stats::min_over_ranks(&f[4])),
        sm_mhz_overlapped: med(stats::min_over_ranks(&f[5])),
        sm_mhz_min_overlapped: med(stats::min_over_ranks(&f[6])),
        watts_alone: phase_power(&f[7], &f[8]),
        watts_comm_alone: phase_power(&f[9], &f[10]),
        watts_overlapped: phase_power(&f[11], &f[12]),
        throttle_overlapped: if s.nvml.is_some() { stats::throttle_names(reasons) } else { "-".into() },
    }
}
