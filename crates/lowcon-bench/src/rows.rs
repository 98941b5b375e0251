//! The record of each measurement, one type per benchmark ([`SweepRow`], [`OverlapRow`],
//! [`SaturatedRow`]): what `report` prints and writes and `plot` draws, so neither needs
//! the other's types.

use serde::{Deserialize, Serialize};

/// One sweep measurement: one implementation at one size (`lowcon bench all-gather`,
/// `reduce-scatter`; a JSON line / CSV row each).
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct SweepRow {
    pub bench: String,
    /// `lowcon`, `nccl` or `nccl-ce`.
    pub implementation: String,
    pub algorithm: String,
    pub sync: String,
    pub ctas: Option<u32>,
    /// ce-reduce pieces, when set explicitly.
    #[serde(default)]
    pub pipeline: Option<u32>,
    pub ranks: usize,
    pub dtype: String,
    pub op: Option<String>,
    /// Bytes per rank.
    pub size: usize,
    /// ranks × size.
    pub total: usize,
    /// Elements per rank.
    pub count: usize,
    pub time_us: f64,
    pub algbw_gbs: f64,
    pub busbw_gbs: f64,
    /// Wrong elements seen by `--check` (max over ranks), when checked.
    pub wrong: Option<u64>,
    /// Timed as replays of a CUDA graph of `iters` captured calls (`--graph`).
    #[serde(default)]
    pub graph: bool,
    /// Host time per call, µs (max over ranks; `--graph` only): enqueueing it eagerly,
    /// or its share of one replay's launch.
    #[serde(default)]
    pub host_us: Option<f64>,
    /// Reduce-scatter: the type on the peer links when it is not `dtype` (the bf16 wire,
    /// or NCCL's bf16 row beside an f32 sweep).
    #[serde(default)]
    pub wire: Option<String>,
    /// busbw on the bytes that crossed (`busbw_gbs` is on the `size` bytes asked for).
    #[serde(default)]
    pub wire_busbw_gbs: Option<f64>,
    /// Only `host_us` was kept (`--host-only`): the device columns are 0 and print `-`.
    #[serde(default)]
    pub host_only: bool,
    /// The spread of `time_us` over the `reps` batches, µs per call: the max over ranks of
    /// each rank's fastest batch (`time_us_min`) and the slowest batch of any rank
    /// (`time_us_max`), so they hold `time_us`, the max over ranks of each rank's median
    /// batch. Absent in rows written before 2026-11-28.
    #[serde(default)]
    pub time_us_min: Option<f64>,
    #[serde(default)]
    pub time_us_max: Option<f64>,
    /// Each batch's µs per call, in the order run, space-separated: for each batch the max
    /// over ranks (the ranks start each batch together, so a batch's slowest rank sets
    /// everyone's time). Whether a spread is one slow batch or many, and which. Absent in
    /// rows written before 4d54bbc (2026-11-28).
    #[serde(default)]
    pub batches_us: Option<String>,
}

impl SweepRow {
    /// Keeps the host time alone (`--host-only`): the device time and the bandwidths,
    /// measured where they may mean nothing (ranks sharing a GPU), are dropped.
    pub fn host_only(&mut self) {
        self.host_only = true;
        (self.time_us, self.algbw_gbs, self.busbw_gbs, self.wire_busbw_gbs) = (0.0, 0.0, 0.0, None);
        (self.time_us_min, self.time_us_max, self.batches_us) = (None, None, None);
    }

    /// The series label used in tables and plots.
    pub fn label(&self) -> String {
        let g = if self.graph { " graph" } else { "" };
        match self.implementation.as_str() {
            "lowcon" => {
                let c = self.ctas.map(|c| format!(" ctas={c}")).unwrap_or_default();
                let p = self.pipeline.map(|p| format!(" pieces={p}")).unwrap_or_default();
                let w = self.wire.as_ref().map(|w| format!(" wire={w}")).unwrap_or_default();
                format!("lowcon {} {}{c}{p}{w}{g}", self.algorithm, self.sync)
            }
            other => format!("{other}{g}"),
        }
    }
}

/// One implementation's overlap result (`lowcon bench overlap`; max over ranks of
/// per-rank medians).
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct OverlapRow {
    pub bench: String,
    pub implementation: String,
    pub ranks: usize,
    pub shard_bytes: usize,
    pub colls: usize,
    pub gemms: usize,
    pub gemm_alone_ms: f64,
    pub gemm_overlapped_ms: f64,
    pub gemm_slowdown_pct: f64,
    pub comm_alone_ms: f64,
    pub comm_overlapped_ms: f64,
    pub total_ms: f64,
    pub serial_ms: f64,
    pub ideal_ms: f64,
    pub total_over_ideal_pct: f64,
}

/// One configuration of the saturated interference benchmark (`lowcon bench overlap`,
/// the default mode): an implementation, shard, stream priority and enqueue style.
/// Medians and spreads are over the trial pairs of per-trial values folded over ranks
/// (the slowest rank's GEMM, the worst rank's bandwidth); `None` where not measured
/// (no NVML, no collective finished inside the window, an unknown CTA count).
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct SaturatedRow {
    /// `saturated-all-gather` or `saturated-reduce-scatter`.
    pub bench: String,
    pub implementation: String,
    pub ranks: usize,
    pub shard_bytes: usize,
    /// The collective stream's priority: `high` or `default`.
    pub priority: String,
    /// `interleaved` (one thread: a GEMM, then the collectives covering it) or
    /// `threads` (one host thread per stream).
    pub enqueue: String,
    pub trials: usize,
    pub gemms: usize,
    /// Collectives per window (enough to cover it at the alone rate, plus 25%).
    pub calls: usize,
    /// Untimed GEMMs before each window (`--prelude-ms`; 0 in runs before it existed).
    #[serde(default)]
    pub prelude_gemms: usize,
    pub gemm_alone_ms: f64,
    /// GEMM slowdown: median of the pairwise ratios, and their spread.
    pub slowdown_pct: f64,
    pub slowdown_min: f64,
    pub slowdown_max: f64,
    pub slowdown_q1: f64,
    pub slowdown_q3: f64,
    /// busbw alone and inside the GEMM window (GB/s, medians).
    pub busbw_alone_gbs: Option<f64>,
    pub busbw_window_gbs: Option<f64>,
    /// Calls that finished inside the window per GEMM of the window (median over
    /// trials of the fewest over ranks): 1/2, 1, 2... when calls end on GEMM boundaries.
    #[serde(default)]
    pub calls_per_gemm: Option<f64>,
    /// Trials whose last call ended inside the GEMM window on some rank (the calls did
    /// not cover the window); `None` in runs before it was measured.
    #[serde(default)]
    pub uncovered_trials: Option<usize>,
    /// Bandwidth kept inside the window against alone (%): median and spread. Calls end
    /// on GEMM boundaries inside the window, so this favours slow calls: read
    /// `busbw_window_gbs` and `calls_per_gemm` first.
    pub kept_pct: Option<f64>,
    pub kept_min: Option<f64>,
    pub kept_max: Option<f64>,
    /// CTAs the collective's kernels hold, and where that number comes from.
    pub ctas: Option<u32>,
    pub ctas_source: String,
    /// CTAs × call time alone per GB a rank sends (CTA-ms/GB, an upper bound).
    pub sm_ms_per_gb: Option<f64>,
    /// NVML: mean SM clock (median over trials, slowest rank), lowest SM clock seen,
    /// power from the energy counter per phase (energy over time, both summed over
    /// every trial; highest rank; `None` when the counter never moved), reasons seen
    /// while overlapped.
    pub sm_mhz_alone: Option<f64>,
    pub sm_mhz_overlapped: Option<f64>,
    pub sm_mhz_min_overlapped: Option<f64>,
    pub watts_alone: Option<f64>,
    pub watts_comm_alone: Option<f64>,
    pub watts_overlapped: Option<f64>,
    pub throttle_overlapped: String,
}

/// One variant's result in `lowcon bench reduce-kernels` (`crate::reduce_kernels`).
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct ReduceKernelRow {
    pub kernel: String,
    pub ctas: u32,
    pub threads: u32,
    pub pieces: u32,
    pub priority: String,
    pub world: usize,
    pub elems: usize,
    pub inexact: bool,
    pub bytes: usize,
    pub alone_us: f64,
    pub alone_gbs: f64,
    /// GEMM slowdown (%), median of the pairs and its 95% interval.
    pub slowdown_pct: Option<f64>,
    pub slowdown_lo: Option<f64>,
    pub slowdown_hi: Option<f64>,
    /// The kernel's rate inside the GEMM window over alone (%), median and interval.
    pub kept_pct: Option<f64>,
    pub kept_lo: Option<f64>,
    pub kept_hi: Option<f64>,
    pub gemm_alone_ms: Option<f64>,
    pub wrong: Option<usize>,
}

/// Rows as the tests of `report` and `plot` need them.
#[cfg(test)]
pub(crate) mod fixtures {
    use super::*;

    pub(crate) fn saturated_row(implementation: &str, priority: &str, nvml: bool) -> SaturatedRow {
        SaturatedRow {
            bench: "saturated-all-gather".into(),
            implementation: implementation.into(),
            ranks: 2,
            shard_bytes: 64 << 20,
            priority: priority.into(),
            enqueue: "interleaved".into(),
            trials: 7,
            gemms: 23,
            calls: 150,
            prelude_gemms: 12,
            gemm_alone_ms: 30.1,
            slowdown_pct: 6.5,
            slowdown_min: 5.9,
            slowdown_max: 7.2,
            slowdown_q1: 6.1,
            slowdown_q3: 6.8,
            busbw_alone_gbs: Some(340.0),
            busbw_window_gbs: Some(290.0),
            calls_per_gemm: Some(2.0),
            uncovered_trials: Some(0),
            kept_pct: Some(85.3),
            kept_min: Some(80.0),
            kept_max: Some(90.0),
            ctas: if implementation == "nccl" { None } else { Some(1) },
            ctas_source: "barrier".into(),
            sm_ms_per_gb: Some(2.9),
            sm_mhz_alone: nvml.then_some(1980.0),
            sm_mhz_overlapped: nvml.then_some(1830.0),
            sm_mhz_min_overlapped: nvml.then_some(1755.0),
            watts_alone: nvml.then_some(650.0),
            watts_comm_alone: nvml.then_some(250.0),
            watts_overlapped: nvml.then_some(700.0),
            throttle_overlapped: if nvml { "sw-power".into() } else { "-".into() },
        }
    }
}
