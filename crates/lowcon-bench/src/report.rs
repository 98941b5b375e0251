//! Results: the record of each measurement ([`SweepRow`], [`OverlapRow`]), their table
//! rows on stdout, and the files rank 0 writes besides the table ([`Output`]: JSON lines,
//! CSV, a plot), read back by `lowcon bench plot` and `lowcon bench quick`.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::Res;

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
}

impl SweepRow {
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

fn opt(x: Option<f64>, digits: usize) -> String {
    x.map_or("-".into(), |v| format!("{v:.digits$}"))
}

/// Prints what the implementation names mean (the line above the saturated table).
pub fn print_saturated_legend() {
    println!(
        "# legend: lowcon ALGO kernel = barriers as a 1-CTA kernel (waits for an SM, maybe behind the GEMM's CTAs); \
         lowcon ALGO memop = barriers as stream memory operations (no SM); tma-reduce/sm-direct/ce-reduce hold their \
         reduction CTAs either way; nccl-ce = NCCL copy-engine communicator; null = peer copies, no sync (the floor); \
         null+local = null plus a same-device copy of the shard per call (not counted in its busbw)"
    );
    println!(
        "# prio = the priority of the stream the benchmark enqueues on; lowcon's internal channel copy stream is always \
         high priority, so 'default' lowcon rows are not fully default priority"
    );
    println!(
        "# bw+g = busbw of the calls that finished inside the GEMM window; calls/G = those calls per GEMM of the window \
         (synchronised calls end on GEMM boundaries: 0.5, 1, 2 ... GEMM periods per call); cover = trials whose calls \
         outlasted the GEMM window, of all trials; kept% = bw+g / bw, last: it rewards slow calls, read bw+g and calls/G"
    );
}

/// Width of the implementation column (`lowcon tma-reduce-evict kernel` is 30).
const IMPL_W: usize = 31;

/// Prints the column names of the saturated table.
pub fn print_saturated_columns() {
    println!(
        "{:<IMPL_W$} {:>7} {:<11} {:>5} {:>7}  {:<22} {:>7} {:>7} {:>7} {:>5} {:>9} {:>9} {:>11} {:>11}  {:<16} kept% [min..max]",
        "implementation",
        "prio",
        "enqueue",
        "shard",
        "gemm",
        "slowdown% [min..max]",
        "bw",
        "bw+g",
        "calls/G",
        "cover",
        "ctas",
        "CTAms/GB",
        "MHz a/o",
        "W a/c/o",
        "throttle"
    );
}

/// Prints one row of the saturated table.
pub fn print_saturated_row(r: &SaturatedRow) {
    let kept = match (r.kept_pct, r.kept_min, r.kept_max) {
        (Some(k), Some(a), Some(b)) => format!("{k:.1} [{a:.1}..{b:.1}]"),
        _ => "-".into(),
    };
    let ctas = r.ctas.map_or(format!("?({})", r.ctas_source), |c| format!("{c}({})", r.ctas_source));
    println!(
        "{:<IMPL_W$} {:>7} {:<11} {:>4}M {:>7.2}  {:<22} {:>7} {:>7} {:>7} {:>5} {:>9} {:>9} {:>11} {:>11}  {:<16} {}",
        r.implementation,
        r.priority,
        r.enqueue,
        r.shard_bytes >> 20,
        r.gemm_alone_ms,
        format!("{:.2} [{:.2}..{:.2}]", r.slowdown_pct, r.slowdown_min, r.slowdown_max),
        opt(r.busbw_alone_gbs, 1),
        opt(r.busbw_window_gbs, 1),
        opt(r.calls_per_gemm, 2),
        r.uncovered_trials.map_or("-".into(), |u| format!("{}/{}", r.trials.saturating_sub(u), r.trials)),
        ctas,
        opt(r.sm_ms_per_gb, 1),
        format!("{}/{}", opt(r.sm_mhz_alone, 0), opt(r.sm_mhz_overlapped, 0)),
        format!("{}/{}/{}", opt(r.watts_alone, 0), opt(r.watts_comm_alone, 0), opt(r.watts_overlapped, 0)),
        r.throttle_overlapped,
        kept
    );
}

/// Writes saturated rows where `out` says (rank 0 only): JSON lines, CSV, and the
/// slowdown-against-bandwidth-kept plot.
pub fn write_saturated(out: &Output, rows: &[SaturatedRow]) -> Res<()> {
    if !crate::is_rank0() {
        return Ok(());
    }
    if let Some(p) = &out.json {
        let mut s = String::new();
        push_json_lines(&mut s, rows)?;
        std::fs::write(p, s)?;
    }
    if let Some(p) = &out.csv {
        write_csv(p, rows)?;
    }
    // The plot last: its failure must not cost the files above.
    if let Some(p) = &out.plot {
        let wrote = crate::plot::draw_saturated(p, rows).map_err(written_before_plot)?;
        eprintln!("wrote {}", wrote.display());
    }
    Ok(())
}

/// Prints the column names of the sweep table.
pub fn print_sweep_columns() {
    println!(
        "{:>12} {:>12} {:>12}  {:<34} {:>10} {:>10} {:>10} {:>8} {:>9} {:>10}",
        "size/rank",
        "total",
        "count",
        "implementation",
        "time(us)",
        "algbw",
        "busbw",
        "#wrong",
        "host(us)",
        "wire busbw"
    );
}

/// Prints one row of the sweep table.
pub fn print_sweep_row(r: &SweepRow) {
    let wrong = r.wrong.map_or("-".to_string(), |w| w.to_string());
    println!(
        "{:>12} {:>12} {:>12}  {:<34} {:>10.1} {:>10.2} {:>10.2} {:>8} {:>9} {:>10}",
        r.size,
        r.total,
        r.count,
        r.label(),
        r.time_us,
        r.algbw_gbs,
        r.busbw_gbs,
        wrong,
        r.host_us.map_or("-".to_string(), |h| format!("{h:.2}")),
        r.wire_busbw_gbs.map_or("-".to_string(), |b| format!("{b:.2}"))
    );
}

/// Prints the column names of the overlap table.
pub fn print_overlap_columns() {
    println!(
        "{:<28} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9}",
        "implementation", "gemm", "gemm+c", "slowdown", "comm", "comm+g", "total", "serial", "ideal", "vs ideal"
    );
}

/// Prints one row of the overlap table.
pub fn print_overlap_row(r: &OverlapRow) {
    println!(
        "{:<28} {:>9.2} {:>9.2} {:>8.1}% {:>9.2} {:>9.2} {:>9.2} {:>9.2} {:>9.2} {:>8.1}%",
        r.implementation,
        r.gemm_alone_ms,
        r.gemm_overlapped_ms,
        r.gemm_slowdown_pct,
        r.comm_alone_ms,
        r.comm_overlapped_ms,
        r.total_ms,
        r.serial_ms,
        r.ideal_ms,
        r.total_over_ideal_pct
    );
}

/// Where results go besides the table on stdout (the `--json`, `--csv` and `--plot`
/// flags of the sweeps and the overlap benchmark).
#[derive(Clone, Debug, Default)]
pub struct Output {
    /// Every measurement as JSON lines.
    pub json: Option<PathBuf>,
    /// Every measurement as CSV (overlap rows beside it, in `FILE.overlap.csv`).
    pub csv: Option<PathBuf>,
    /// busbw vs size (and overlap bars) as a PNG.
    pub plot: Option<PathBuf>,
}

/// Writes `rows` and `ov` where `out` says; only rank 0 writes, the others return at once.
pub fn write(out: &Output, rows: &[SweepRow], ov: &[OverlapRow]) -> Res<()> {
    if !crate::is_rank0() {
        return Ok(());
    }
    if let Some(p) = &out.json {
        let mut s = String::new();
        push_json_lines(&mut s, rows)?;
        push_json_lines(&mut s, ov)?;
        std::fs::write(p, s)?;
    }
    if let Some(p) = &out.csv {
        write_csv(p, rows)?;
        if !ov.is_empty() {
            write_csv(&p.with_extension("overlap.csv"), ov)?;
        }
    }
    // The plot last: its failure must not cost the files above.
    if let Some(p) = &out.plot {
        let wrote = crate::plot::draw(p, rows, ov).map_err(written_before_plot)?;
        eprintln!("wrote {}", wrote.display());
    }
    Ok(())
}

/// Appends one JSON line per row.
fn push_json_lines<T: Serialize>(s: &mut String, rows: &[T]) -> Res<()> {
    for r in rows {
        s.push_str(&serde_json::to_string(r)?);
        s.push('\n');
    }
    Ok(())
}

/// Writes the rows as CSV to `path`.
fn write_csv<T: Serialize>(path: &Path, rows: &[T]) -> Res<()> {
    let mut w = csv::Writer::from_path(path)?;
    for r in rows {
        w.serialize(r)?;
    }
    w.flush()?;
    Ok(())
}

/// A plot error, saying that the table and the `--json`/`--csv` files are complete.
fn written_before_plot(e: Box<dyn std::error::Error>) -> Box<dyn std::error::Error> {
    format!("{e} (the table and any --json/--csv files were written before the plot)").into()
}

/// The sweep rows of one `--json` file of a sweep (every line a [`SweepRow`]).
pub fn read_sweep_json(path: &Path) -> Res<Vec<SweepRow>> {
    let mut rows = Vec::new();
    for line in std::fs::read_to_string(path)?.lines() {
        rows.push(serde_json::from_str(line)?);
    }
    Ok(rows)
}

/// Every row of `--json` files of earlier runs: sweeps, burst overlaps and saturated
/// overlaps apart; blank lines are skipped, and so (with a note on stderr) are files
/// that cannot be read.
pub fn read_json(files: &[PathBuf]) -> Res<(Vec<SweepRow>, Vec<OverlapRow>, Vec<SaturatedRow>)> {
    let (mut rows, mut ov, mut sat) = (Vec::new(), Vec::new(), Vec::new());
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
            let bench = v["bench"].as_str().unwrap_or_default();
            if bench.is_empty() && v.get("kernel").is_some() {
                continue; // a `bench reduce-kernels` row: `read_kernel_rows`
            }
            if bench.starts_with("saturated") {
                sat.push(serde_json::from_value(v).map_err(|e| format!("{}:{}: {e}", f.display(), i + 1))?);
            } else if bench.starts_with("overlap") {
                ov.push(serde_json::from_value(v)?);
            } else {
                rows.push(serde_json::from_value(v)?);
            }
        }
    }
    Ok((rows, ov, sat))
}

/// The rows of `lowcon bench reduce-kernels --json` files (other lines are skipped).
pub fn read_kernel_rows(files: &[PathBuf]) -> Res<Vec<crate::reduce_kernels::ReduceKernelRow>> {
    let mut rows = Vec::new();
    for f in files {
        let Ok(text) = std::fs::read_to_string(f) else { continue };
        for (i, line) in text.lines().enumerate().filter(|(_, l)| !l.trim().is_empty()) {
            let v: serde_json::Value =
                serde_json::from_str(line).map_err(|e| format!("{}:{}: {e}", f.display(), i + 1))?;
            if v.get("bench").is_none() && v.get("kernel").is_some() {
                rows.push(serde_json::from_value(v).map_err(|e| format!("{}:{}: {e}", f.display(), i + 1))?);
            }
        }
    }
    Ok(rows)
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    fn sweep_row(implementation: &str, size: usize) -> SweepRow {
        SweepRow {
            bench: "all-gather".into(),
            implementation: implementation.into(),
            algorithm: "ce-pull".into(),
            sync: "kernel".into(),
            ctas: Some(8),
            pipeline: None,
            ranks: 4,
            dtype: "bf16".into(),
            op: None,
            size,
            total: 4 * size,
            count: size / 2,
            time_us: 10.0,
            algbw_gbs: 1.0,
            busbw_gbs: 0.75,
            wrong: Some(0),
            graph: false,
            host_us: None,
            wire: None,
            wire_busbw_gbs: None,
        }
    }

    fn overlap_row() -> OverlapRow {
        OverlapRow {
            bench: "overlap-reduce-scatter".into(),
            implementation: "nccl".into(),
            ranks: 4,
            shard_bytes: 1 << 20,
            colls: 20,
            gemms: 3,
            gemm_alone_ms: 30.0,
            gemm_overlapped_ms: 31.5,
            gemm_slowdown_pct: 5.0,
            comm_alone_ms: 10.0,
            comm_overlapped_ms: 12.0,
            total_ms: 32.0,
            serial_ms: 40.0,
            ideal_ms: 30.0,
            total_over_ideal_pct: 6.7,
        }
    }

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

    #[test]
    fn saturated_rows_write_and_read_back_with_missing_columns() {
        if !crate::is_rank0() {
            return;
        }
        let dir = tempfile::tempdir().unwrap();
        let (json, csv, png) = (dir.path().join("s.json"), dir.path().join("s.csv"), dir.path().join("s.png"));
        let rows = [saturated_row("lowcon ce-push kernel", "high", true), saturated_row("nccl", "default", false)];
        let out = Output { json: Some(json.clone()), csv: Some(csv.clone()), plot: Some(png.clone()) };
        write_saturated(&out, &rows).unwrap();
        let text = std::fs::read_to_string(&csv).unwrap();
        assert_eq!(text.lines().count(), 3, "{text}");
        assert!(text.lines().next().unwrap().contains("slowdown_q3"), "{text}");
        assert!(std::fs::metadata(&png).unwrap().len() > 1000, "a PNG was drawn");
        let (sw, ov, sat) = read_json(&[json]).unwrap();
        assert!(sw.is_empty() && ov.is_empty());
        assert_eq!(sat.len(), 2);
        assert_eq!(sat[0].sm_mhz_overlapped, Some(1830.0));
        assert_eq!((sat[1].watts_overlapped, sat[1].ctas), (None, None));
        assert_eq!((sat[0].prelude_gemms, sat[0].calls_per_gemm, sat[0].uncovered_trials), (12, Some(2.0), Some(0)));
        // A row of a run before the prelude and calls/GEMM existed still reads back.
        let mut old: serde_json::Value = serde_json::to_value(&rows[0]).unwrap();
        for k in ["prelude_gemms", "calls_per_gemm", "uncovered_trials"] {
            old.as_object_mut().unwrap().remove(k);
        }
        let old: SaturatedRow = serde_json::from_value(old).unwrap();
        assert_eq!((old.prelude_gemms, old.calls_per_gemm, old.uncovered_trials), (0, None, None));
        print_saturated_columns();
        print_saturated_row(&sat[1]);
    }

    #[test]
    fn labels_name_the_lowcon_variant_and_nccl_plainly() {
        assert_eq!(sweep_row("lowcon", 1024).label(), "lowcon ce-pull kernel ctas=8");
        let r = SweepRow { ctas: None, pipeline: Some(4), ..sweep_row("lowcon", 1024) };
        assert_eq!(r.label(), "lowcon ce-pull kernel pieces=4");
        assert_eq!(sweep_row("nccl-ce", 1024).label(), "nccl-ce");
    }

    #[test]
    fn json_files_read_back_into_sweeps_and_overlaps() {
        if !crate::is_rank0() {
            return; // `write` writes on rank 0 only.
        }
        let dir = tempfile::tempdir().unwrap();
        let (json, csv) = (dir.path().join("r.json"), dir.path().join("r.csv"));
        let out = Output { json: Some(json.clone()), csv: Some(csv.clone()), plot: None };
        write(&out, &[sweep_row("lowcon", 1024), sweep_row("nccl", 4096)], &[overlap_row()]).unwrap();
        assert_eq!(std::fs::read_to_string(&csv).unwrap().lines().count(), 3, "a header and two rows");
        assert_eq!(std::fs::read_to_string(dir.path().join("r.overlap.csv")).unwrap().lines().count(), 2);
        // Blank lines are skipped, and so is a file that is not there.
        let text = std::fs::read_to_string(&json).unwrap();
        std::fs::write(&json, format!("\n{text}\n")).unwrap();
        let (rows, ov, _) = read_json(&[json.clone(), dir.path().join("missing.json")]).unwrap();
        assert_eq!(
            rows.iter().map(|r| (r.implementation.as_str(), r.size)).collect::<Vec<_>>(),
            [("lowcon", 1024), ("nccl", 4096)]
        );
        assert_eq!(ov.len(), 1);
        assert_eq!(ov[0].gemm_slowdown_pct, 5.0);
        // A bad line is an error naming the file and line.
        std::fs::write(&json, "\nnot json\n").unwrap();
        let e = read_json(std::slice::from_ref(&json)).unwrap_err().to_string();
        assert!(e.contains("r.json:2: "), "{e}");
    }
}
