//! Results: the table rows of each measurement ([`crate::rows`]) on stdout, and the files
//! rank 0 writes besides the table ([`Output`]: JSON lines, CSV, a plot), read back by
//! `lowcon bench plot` and `lowcon bench quick`.

use std::path::{Path, PathBuf};

use serde::Serialize;

use crate::Res;
pub use crate::rows::{OverlapRow, SaturatedRow, SweepRow};

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
        "{:>12} {:>12} {:>12}  {:<34} {:>10} {:>10} {:>10} {:>8} {:>9} {:>10}  batches(us)",
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
    // `--host-only` rows keep no device time.
    let device = |v: f64, digits: usize| if r.host_only { "-".to_string() } else { format!("{v:.digits$}") };
    println!(
        "{:>12} {:>12} {:>12}  {:<34} {:>10} {:>10} {:>10} {:>8} {:>9} {:>10}  {}",
        r.size,
        r.total,
        r.count,
        r.label(),
        device(r.time_us, 1),
        device(r.algbw_gbs, 2),
        device(r.busbw_gbs, 2),
        wrong,
        r.host_us.map_or("-".to_string(), |h| format!("{h:.2}")),
        r.wire_busbw_gbs.map_or("-".to_string(), |b| format!("{b:.2}")),
        batch_range(r)
    );
}

/// The fastest and slowest batch of a row (`SweepRow::time_us_min`, `time_us_max`), as
/// the sweep table's last column: "lo-hi" µs per call, `-` where none was kept.
pub fn batch_range(r: &SweepRow) -> String {
    match (r.time_us_min, r.time_us_max) {
        (Some(lo), Some(hi)) if !r.host_only => format!("{lo:.1}-{hi:.1}"),
        _ => "-".to_string(),
    }
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
pub fn read_kernel_rows(files: &[PathBuf]) -> Res<Vec<crate::rows::ReduceKernelRow>> {
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
    use crate::rows::fixtures::saturated_row;

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
            host_only: false,
            time_us_min: None,
            time_us_max: None,
            batches_us: None,
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
    fn the_sweep_table_shows_the_batches_spread_and_old_rows_read_back_without_it() {
        let r = SweepRow { time_us_min: Some(4.84), time_us_max: Some(12.06), ..sweep_row("lowcon", 1024) };
        assert_eq!(batch_range(&r), "4.8-12.1");
        assert_eq!(batch_range(&sweep_row("lowcon", 1024)), "-");
        let mut host = r.clone();
        host.host_only();
        assert_eq!(batch_range(&host), "-");
        // A row of a run before the spread was kept.
        let mut old = serde_json::to_value(&r).unwrap();
        for k in ["time_us_min", "time_us_max"] {
            assert!(old.as_object_mut().unwrap().remove(k).is_some(), "{k}");
        }
        let old: SweepRow = serde_json::from_value(old).unwrap();
        assert_eq!((old.time_us_min, old.time_us_max, old.time_us), (None, None, r.time_us));
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

    #[test]
    fn the_frontier_reads_kernel_rows_and_plots_those_measured_beside_the_gemm() {
        let tmp = tempfile::tempdir().unwrap();
        let json = tmp.path().join("k.json");
        let beside = r#"{"kernel":"reduce","ctas":4,"threads":512,"pieces":16,"priority":"high","world":2,"elems":64,"inexact":false,"bytes":768,"alone_us":1.0,"alone_gbs":0.8,"slowdown_pct":3.3,"slowdown_lo":1.2,"slowdown_hi":6.1,"kept_pct":6.8,"kept_lo":6.6,"kept_hi":6.8,"gemm_alone_ms":28.5,"wrong":0}"#;
        let alone = beside.replace(r#""slowdown_pct":3.3"#, r#""slowdown_pct":null"#).replace("reduce", "spin/1us");
        let sweep = r#"{"bench":"all-gather","implementation":"nccl","algorithm":"-","sync":"-","ctas":null,"ranks":2,"dtype":"bf16","op":null,"size":4,"total":8,"count":2,"time_us":1.0,"algbw_gbs":1.0,"busbw_gbs":0.5,"wrong":null}"#;
        std::fs::write(&json, format!("{beside}\n{alone}\n{sweep}\n")).unwrap();
        let rows = read_kernel_rows(std::slice::from_ref(&json)).unwrap();
        assert_eq!(rows.iter().map(|r| r.kernel.as_str()).collect::<Vec<_>>(), ["reduce", "spin/1us"]);
        // The sweep reader skips the kernel rows.
        let (sw, ov, sat) = read_json(std::slice::from_ref(&json)).unwrap();
        assert_eq!((sw.len(), ov.len(), sat.len()), (1, 0, 0));
        let wrote = crate::plot::draw_frontier(&tmp.path().join("f"), &rows).unwrap();
        assert!(wrote.is_file());
        let e = crate::plot::draw_frontier(&tmp.path().join("g.png"), &rows[1..]).unwrap_err().to_string();
        assert!(e.contains("no row was measured beside the GEMM"), "{e}");
    }
}
