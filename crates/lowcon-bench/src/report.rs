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
}

impl SweepRow {
    /// The series label used in tables and plots.
    pub fn label(&self) -> String {
        match self.implementation.as_str() {
            "lowcon" => {
                let c = self.ctas.map(|c| format!(" ctas={c}")).unwrap_or_default();
                let p = self.pipeline.map(|p| format!(" pieces={p}")).unwrap_or_default();
                format!("lowcon {} {}{c}{p}", self.algorithm, self.sync)
            }
            other => other.to_string(),
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

/// Prints the column names of the sweep table.
pub fn print_sweep_columns() {
    println!(
        "{:>12} {:>12} {:>12}  {:<34} {:>10} {:>10} {:>10} {:>8}",
        "size/rank", "total", "count", "implementation", "time(us)", "algbw", "busbw", "#wrong"
    );
}

/// Prints one row of the sweep table.
pub fn print_sweep_row(r: &SweepRow) {
    let wrong = r.wrong.map_or("-".to_string(), |w| w.to_string());
    println!(
        "{:>12} {:>12} {:>12}  {:<34} {:>10.1} {:>10.2} {:>10.2} {:>8}",
        r.size,
        r.total,
        r.count,
        r.label(),
        r.time_us,
        r.algbw_gbs,
        r.busbw_gbs,
        wrong
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

/// The sweep rows of one `--json` file of a sweep (every line a [`SweepRow`]).
pub fn read_sweep_json(path: &Path) -> Res<Vec<SweepRow>> {
    let mut rows = Vec::new();
    for line in std::fs::read_to_string(path)?.lines() {
        rows.push(serde_json::from_str(line)?);
    }
    Ok(rows)
}

/// Every row of `--json` files of earlier runs, sweeps and overlaps apart; blank lines
/// are skipped, and so (with a note on stderr) are files that cannot be read.
pub fn read_json(files: &[PathBuf]) -> Res<(Vec<SweepRow>, Vec<OverlapRow>)> {
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
    Ok((rows, ov))
}

#[cfg(test)]
mod tests {
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
        let (rows, ov) = read_json(&[json.clone(), dir.path().join("missing.json")]).unwrap();
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
