//! The pure arithmetic of the saturated interference benchmark ([`crate::saturated`]):
//! medians and spreads of per-trial ratios, bus bandwidth, SM time per GB, how the
//! collectives of a saturated window are spread over the GEMMs when they are enqueued
//! as a trainer does, and NVML's throttle-reason bits. Nothing here touches a GPU, so
//! all of it is unit-tested. Also the one way the benchmarks gather their numbers over
//! ranks ([`gather`], through the group's store) and the one median ([`median`]).

/// The `q`-quantile (0..=1) of `v`, linearly interpolated between order statistics
/// (numpy's default); `NaN` for an empty slice. NaNs in `v` are ignored.
pub fn quantile(v: &[f64], q: f64) -> f64 {
    let mut s: Vec<f64> = v.iter().copied().filter(|x| !x.is_nan()).collect();
    if s.is_empty() {
        return f64::NAN;
    }
    s.sort_by(f64::total_cmp);
    let pos = q.clamp(0.0, 1.0) * (s.len() - 1) as f64;
    let (lo, hi) = (pos.floor() as usize, pos.ceil() as usize);
    s[lo] + (s[hi] - s[lo]) * (pos - lo as f64)
}

/// The median of `v` (the mean of the two middle values for an even count).
pub fn median(v: &[f64]) -> f64 {
    quantile(v, 0.5)
}

/// A group whose ranks exchange bytes through its store (both backends' groups).
pub trait Exchange {
    /// Every rank's `data` under `name`, in rank order (collective).
    fn exchange(&self, name: &str, data: &[u8]) -> lowcon::Result<Vec<Vec<u8>>>;
}

impl Exchange for lowcon::GpuGroup {
    fn exchange(&self, name: &str, data: &[u8]) -> lowcon::Result<Vec<Vec<u8>>> {
        self.all_gather_bytes(name, data)
    }
}

impl Exchange for lowcon::HostGroup {
    fn exchange(&self, name: &str, data: &[u8]) -> lowcon::Result<Vec<Vec<u8>>> {
        self.all_gather_bytes(name, data)
    }
}

/// Every rank's `values` under `name` (collective; every rank sends as many):
/// `per_rank[r][k]`. A rank that sent another count is an error naming it.
pub fn gather(g: &impl Exchange, name: &str, values: &[f64]) -> crate::Res<Vec<Vec<f64>>> {
    let mine: Vec<u8> = values.iter().flat_map(|x| x.to_le_bytes()).collect();
    let all = g.exchange(name, &mine)?;
    all.iter()
        .enumerate()
        .map(|(r, b)| {
            if b.len() != mine.len() {
                return Err(format!("{name}: rank {r} sent {} values, expected {}", b.len() / 8, values.len()).into());
            }
            Ok(b.chunks_exact(8).map(|c| f64::from_le_bytes(c.try_into().expect("8 bytes"))).collect())
        })
        .collect()
}

/// [`gather`], then each value's max over ranks (the slowest rank sets a time).
pub fn gather_max(g: &impl Exchange, name: &str, values: &[f64]) -> crate::Res<Vec<f64>> {
    Ok(max_over_ranks(&gather(g, name, values)?))
}

/// A median with its spread over trials.
#[derive(Clone, Copy, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Spread {
    pub median: f64,
    pub min: f64,
    pub max: f64,
    /// First and third quartiles.
    pub q1: f64,
    pub q3: f64,
}

impl Spread {
    pub fn of(v: &[f64]) -> Self {
        Self {
            median: median(v),
            min: quantile(v, 0.0),
            max: quantile(v, 1.0),
            q1: quantile(v, 0.25),
            q3: quantile(v, 0.75),
        }
    }

    /// `median [min..max]` with `digits` decimals, for tables.
    pub fn show(&self, digits: usize) -> String {
        format!("{:.d$} [{:.d$}..{:.d$}]", self.median, self.min, self.max, d = digits)
    }
}

/// A 95% percentile-bootstrap interval of the median of `v` (2000 resamples from a
/// fixed seed, so a table is reproducible from its trials); `(NaN, NaN)` when empty.
pub fn median_ci95(v: &[f64]) -> (f64, f64) {
    let v: Vec<f64> = v.iter().copied().filter(|x| !x.is_nan()).collect();
    if v.is_empty() {
        return (f64::NAN, f64::NAN);
    }
    let mut state = 0x9E37_79B9_7F4A_7C15u64;
    let mut next = || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    let mut meds: Vec<f64> = (0..2000)
        .map(|_| {
            let sample: Vec<f64> = (0..v.len()).map(|_| v[(next() % v.len() as u64) as usize]).collect();
            median(&sample)
        })
        .collect();
    meds.sort_by(f64::total_cmp);
    (quantile(&meds, 0.025), quantile(&meds, 0.975))
}

/// Per-trial ratios `after[t] / before[t] - 1`, in percent: each overlapped trial is
/// compared with the alone trial run just before it (interleaved pairs), so slow drift
/// of clocks and temperature cancels within a pair instead of biasing one side.
pub fn pairwise_pct(before: &[f64], after: &[f64]) -> Vec<f64> {
    before.iter().zip(after).map(|(b, a)| if *b > 0.0 { (a / b - 1.0) * 100.0 } else { f64::NAN }).collect()
}

/// Per-trial `part[t] / whole[t]` in percent (bandwidth kept).
pub fn kept_pct(whole: &[f64], part: &[f64]) -> Vec<f64> {
    whole.iter().zip(part).map(|(w, p)| if *w > 0.0 { p / w * 100.0 } else { f64::NAN }).collect()
}

/// Element-wise max over ranks: `per_rank[r][t]` → `out[t]` (the slowest rank sets a
/// step's time). Ranks with fewer trials are ignored past their end.
pub fn max_over_ranks(per_rank: &[Vec<f64>]) -> Vec<f64> {
    fold_ranks(per_rank, f64::max)
}

/// Element-wise min over ranks (the worst rank's bandwidth).
pub fn min_over_ranks(per_rank: &[Vec<f64>]) -> Vec<f64> {
    fold_ranks(per_rank, f64::min)
}

fn fold_ranks(per_rank: &[Vec<f64>], f: fn(f64, f64) -> f64) -> Vec<f64> {
    let n = per_rank.iter().map(Vec::len).max().unwrap_or(0);
    (0..n).map(|t| per_rank.iter().filter_map(|r| r.get(t).copied()).reduce(f).unwrap_or(f64::NAN)).collect()
}

/// nccl-tests' bus bandwidth (GB/s) of an all-gather or reduce-scatter with `shard`
/// bytes per rank on `world` ranks taking `ms` per call: algbw = world × shard / time,
/// busbw = algbw × (world − 1) / world, i.e. (world − 1) × shard / time.
pub fn busbw_gbs(shard: usize, world: usize, ms: f64) -> f64 {
    if ms <= 0.0 || world == 0 {
        return f64::NAN;
    }
    let algbw = (world * shard) as f64 / (ms * 1e-3) / 1e9;
    algbw * (world - 1) as f64 / world as f64
}

/// Bytes one rank sends over NVLink per call: (world − 1) × shard for both collectives.
pub fn bytes_moved_per_rank(shard: usize, world: usize) -> usize {
    world.saturating_sub(1) * shard
}

/// SM time per GB moved, in CTA-milliseconds per GB: `ctas` CTAs held for `call_ms`
/// per call, over the bytes a rank sends per call. With `call_ms` the call's whole
/// duration this is an upper bound (the CTAs may be resident for part of it only).
pub fn sm_ms_per_gb(ctas: u32, call_ms: f64, shard: usize, world: usize) -> f64 {
    let gb = bytes_moved_per_rank(shard, world) as f64 / 1e9;
    if gb <= 0.0 {
        return f64::NAN;
    }
    ctas as f64 * call_ms / gb
}

/// How many collectives keep the collective stream busy for a GEMM window of
/// `window_ms`, when one call alone takes `call_ms`: enough to cover the window at
/// the alone rate, plus `margin` (0.05 = 5%). Next to a GEMM a call only gets slower,
/// so the collectives then run at least until the GEMMs end.
pub fn saturating_calls(window_ms: f64, call_ms: f64, margin: f64) -> usize {
    if call_ms <= 0.0 || window_ms <= 0.0 {
        return 1;
    }
    ((window_ms * (1.0 + margin) / call_ms).ceil() as usize).max(1)
}

/// Margin of [`saturating_calls`] in the saturated benchmark: the call time comes from
/// a calibration on an idle GPU, and a loaded GPU may run some calls faster than that
/// (the null copies did), so the window gets 25% more calls than it needs at that rate.
pub const CALLS_MARGIN: f64 = 0.25;

/// How many GEMMs of `one_ms` make an untimed prelude of about `prelude_ms` (0 for none,
/// at least 1 otherwise).
pub fn prelude_gemms(prelude_ms: f64, one_ms: f64) -> usize {
    if prelude_ms <= 0.0 || one_ms <= 0.0 || !prelude_ms.is_finite() {
        return 0;
    }
    ((prelude_ms / one_ms).round() as usize).max(1)
}

/// Of collectives that finished `done_ms` after the window's start (in enqueue order),
/// how many finished inside a GEMM window of `window_ms`, and whether the last one
/// finished at or after its end (the collectives covered the whole window).
pub fn in_window(done_ms: &[f64], window_ms: f64) -> (usize, bool) {
    let k = done_ms.iter().take_while(|&&t| t <= window_ms).count();
    (k, done_ms.last().is_some_and(|&t| t >= window_ms))
}

/// How a trainer enqueues `calls` collectives next to `gemms` GEMMs: GEMM i, then the
/// collectives whose share of the window falls in GEMM i's span. Entry i is the number
/// of collectives enqueued right after GEMM i; the counts sum to `calls` and differ by
/// at most one (the first GEMM is never left without a collective when there are any).
pub fn interleave(gemms: usize, calls: usize) -> Vec<usize> {
    if gemms == 0 {
        return Vec::new();
    }
    // Collective j starts at j/calls of the window; it goes after GEMM floor(j·gemms/calls).
    let mut out = vec![0; gemms];
    for j in 0..calls {
        out[j * gemms / calls] += 1;
    }
    out
}

/// NVML's clock-event (throttle) reason bits (`nvmlClocksEventReason*`) and short names.
pub const THROTTLE_REASONS: [(u64, &str); 9] = [
    (0x1, "idle"),
    (0x2, "app-clocks"),
    (0x4, "sw-power"),
    (0x8, "hw-slowdown"),
    (0x10, "sync-boost"),
    (0x20, "sw-thermal"),
    (0x40, "hw-thermal"),
    (0x80, "hw-power-brake"),
    (0x100, "display-clocks"),
];

/// The names of the reasons set in `mask`, `+`-joined (`none` when none is set);
/// unknown bits are shown in hex.
pub fn throttle_names(mask: u64) -> String {
    if mask == 0 {
        return "none".into();
    }
    let mut names: Vec<String> =
        THROTTLE_REASONS.iter().filter(|(b, _)| mask & b != 0).map(|(_, n)| n.to_string()).collect();
    let known: u64 = THROTTLE_REASONS.iter().map(|(b, _)| b).sum();
    if mask & !known != 0 {
        names.push(format!("{:#x}", mask & !known));
    }
    names.join("+")
}

#[cfg(test)]
mod tests {
    #[test]
    fn median_intervals_cover_the_median_and_shrink_with_agreement() {
        let (lo, hi) = median_ci95(&[1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0]);
        assert!(lo <= 4.0 && 4.0 <= hi && lo >= 1.0 && hi <= 7.0, "{lo} {hi}");
        assert_eq!(median_ci95(&[2.5; 7]), (2.5, 2.5));
        assert_eq!(median_ci95(&[3.0, 1.0, 2.0]), median_ci95(&[3.0, 1.0, 2.0]), "reproducible");
        assert!(median_ci95(&[]).0.is_nan());
    }

    use super::*;

    #[test]
    fn quantiles_interpolate_and_skip_nan() {
        assert_eq!(median(&[3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(&[4.0, 1.0, 2.0, 3.0]), 2.5);
        assert_eq!(quantile(&[1.0, 2.0, 3.0, 4.0, 5.0], 0.25), 2.0);
        assert_eq!(quantile(&[0.0, 10.0], 0.75), 7.5);
        assert_eq!(median(&[f64::NAN, 5.0]), 5.0);
        assert!(median(&[]).is_nan());
        let s = Spread::of(&[5.0, 1.0, 9.0, 3.0, 7.0, 2.0, 8.0]);
        assert_eq!((s.median, s.min, s.max, s.q1, s.q3), (5.0, 1.0, 9.0, 2.5, 7.5));
        assert_eq!(s.show(1), "5.0 [1.0..9.0]");
    }

    #[test]
    fn pairwise_ratios_compare_each_trial_with_its_own_alone_run() {
        // Drift: the GEMM gets 10% slower over the run, overlap adds 2% in every pair.
        let alone = [10.0, 10.5, 11.0];
        let over = [10.2, 10.71, 11.22];
        let r = pairwise_pct(&alone, &over);
        assert!(r.iter().all(|x| (x - 2.0).abs() < 1e-9), "{r:?}");
        // A ratio of medians would not see the same: a pair with a zero alone time is NaN.
        assert!(pairwise_pct(&[0.0], &[1.0])[0].is_nan());
        assert_eq!(kept_pct(&[200.0, 100.0], &[150.0, 100.0]), [75.0, 100.0]);
    }

    #[test]
    fn rank_folds_take_the_slowest_and_the_worst() {
        let r = vec![vec![1.0, 5.0, 2.0], vec![3.0, 4.0]];
        assert_eq!(max_over_ranks(&r), [3.0, 5.0, 2.0]);
        assert_eq!(min_over_ranks(&r), [1.0, 4.0, 2.0]);
        assert!(max_over_ranks(&[]).is_empty());
    }

    #[test]
    fn busbw_is_nccl_tests_formula() {
        // 2 ranks, 256 MiB shard, 1 ms: algbw 536.9 GB/s, busbw half of it.
        let b = busbw_gbs(256 << 20, 2, 1.0);
        assert!((b - 268.435456).abs() < 1e-6, "{b}");
        // 4 ranks: (4-1) × shard / time.
        let b4 = busbw_gbs(1 << 30, 4, 10.0);
        assert!((b4 - 3.0 * (1u64 << 30) as f64 / 1e-2 / 1e9).abs() < 1e-6, "{b4}");
        assert!(busbw_gbs(1, 2, 0.0).is_nan());
        assert_eq!(bytes_moved_per_rank(100, 4), 300);
    }

    #[test]
    fn sm_time_is_ctas_times_time_over_bytes() {
        // 16 CTAs × 1 ms per call, 1 GB sent per call (2 ranks, 1 GB shard): 16 CTA-ms/GB.
        assert_eq!(sm_ms_per_gb(16, 1.0, 1_000_000_000, 2), 16.0);
        // Half the bytes per call at the same cost: twice the SM time per GB.
        assert_eq!(sm_ms_per_gb(16, 1.0, 500_000_000, 2), 32.0);
        assert_eq!(sm_ms_per_gb(0, 3.0, 1 << 20, 2), 0.0);
        assert!(sm_ms_per_gb(8, 1.0, 1 << 20, 1).is_nan());
    }

    #[test]
    fn saturating_calls_cover_the_window() {
        assert_eq!(saturating_calls(30.0, 0.25, 0.0), 120);
        assert_eq!(saturating_calls(30.0, 0.5, 0.25), 75); // 37.5 / 0.5
        assert_eq!(saturating_calls(30.0, 0.51, 0.25), 74); // 73.5 rounds up
        assert_eq!(saturating_calls(1.0, 5.0, 0.05), 1);
        assert_eq!(saturating_calls(30.0, 0.0, 0.05), 1);
    }

    #[test]
    fn preludes_and_windows() {
        assert_eq!(prelude_gemms(15.0, 1.3), 12); // 11.5 rounds to 12
        assert_eq!(prelude_gemms(0.0, 1.3), 0);
        assert_eq!(prelude_gemms(0.1, 1.3), 1);
        assert_eq!(prelude_gemms(15.0, 0.0), 0);
        assert_eq!(in_window(&[1.0, 2.0, 3.0, 4.0], 3.0), (3, true));
        assert_eq!(in_window(&[1.0, 2.0, 2.9], 3.0), (3, false));
        assert_eq!(in_window(&[3.5, 4.0], 3.0), (0, true));
        assert_eq!(in_window(&[], 3.0), (0, false));
    }

    #[test]
    fn interleave_spreads_calls_evenly_after_each_gemm() {
        assert_eq!(interleave(4, 10), [3, 2, 3, 2]);
        assert_eq!(interleave(3, 3), [1, 1, 1]);
        assert_eq!(interleave(4, 2), [1, 0, 1, 0]);
        assert_eq!(interleave(1, 7), [7]);
        assert!(interleave(0, 5).is_empty());
        for (g, c) in [(23, 150), (7, 45), (5, 1), (12, 0)] {
            let s = interleave(g, c);
            assert_eq!(s.len(), g);
            assert_eq!(s.iter().sum::<usize>(), c, "{g} {c}");
            let (lo, hi) = (s.iter().min().unwrap(), s.iter().max().unwrap());
            assert!(hi - lo <= 1, "{s:?}");
            if c > 0 {
                assert!(s[0] > 0, "the first GEMM has a collective beside it: {s:?}");
            }
        }
    }

    #[test]
    fn throttle_reasons_are_named() {
        assert_eq!(throttle_names(0), "none");
        assert_eq!(throttle_names(0x4), "sw-power");
        assert_eq!(throttle_names(0x4 | 0x40), "sw-power+hw-thermal");
        assert_eq!(throttle_names(0x1000 | 0x1), "idle+0x1000");
    }
}
