//! PNG plots of benchmark results (plotters, bitmap backend, an embedded DejaVu Sans
//! font so no system fonts are needed): busbw against size per series (log-x), one
//! panel per collective, the burst-overlap GEMM slowdowns as bars, and the saturated
//! benchmark's GEMM slowdown against bandwidth kept, one point per implementation.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use plotters::prelude::*;
use plotters::style::{FontStyle, register_font};

use crate::Res;
use crate::rows::{OverlapRow, ReduceKernelRow, SaturatedRow, SweepRow};

static FONT: &[u8] = include_bytes!("../assets/DejaVuSans.ttf");

fn fonts() {
    // Registering twice is harmless; the error type only says the font was bad.
    let _ = register_font("sans-serif", FontStyle::Normal, FONT);
}

/// A byte count in binary units, as the size axis and captions show it: K = 1024,
/// M = 1024^2, G = 1024^3, the largest unit the count reaches; a whole number of that
/// unit prints bare (64K, 512K, 4M, 3M), anything else with one decimal (100000 bytes is
/// 97.7K), and below 1K the bytes themselves.
pub fn binary_size(bytes: u64) -> String {
    let (unit, suffix) = match bytes {
        b if b >= 1 << 30 => (1u64 << 30, "G"),
        b if b >= 1 << 20 => (1 << 20, "M"),
        b if b >= 1 << 10 => (1 << 10, "K"),
        b => return format!("{b}"),
    };
    if bytes.is_multiple_of(unit) {
        return format!("{}{suffix}", bytes / unit);
    }
    let s = format!("{:.1}", bytes as f64 / unit as f64);
    format!("{}{suffix}", s.strip_suffix(".0").unwrap_or(&s))
}

/// The most size-axis labels a sweep panel shows.
pub const MAX_SIZE_TICKS: usize = 12;

/// Where a sweep panel's log-scale size axis is labelled: at the sizes measured (sorted,
/// once each, zero left out) when there are at most `max` of them; else at every k-th
/// power of two among them (every k-th size when none is a power of two), k the least
/// that keeps the count within `max`, starting from the smallest.
pub fn size_ticks(sizes: &[u64], max: usize) -> Vec<u64> {
    let mut all: Vec<u64> = sizes.iter().copied().filter(|&s| s > 0).collect();
    all.sort_unstable();
    all.dedup();
    let max = max.max(1);
    if all.len() <= max {
        return all;
    }
    let pow2: Vec<u64> = all.iter().copied().filter(|s| s.is_power_of_two()).collect();
    let from = if pow2.is_empty() { all } else { pow2 };
    let k = from.len().div_ceil(max);
    from.into_iter().step_by(k).collect()
}

/// Image formats the bitmap backend can encode (plotters-bitmap's `image` features).
const IMAGE_EXTENSIONS: [&str; 4] = ["png", "jpg", "jpeg", "bmp"];

/// The file a plot goes to: `path` itself when it ends in an image extension the
/// backend encodes, else `path` with `.png` appended (`--plot /tmp/sat` writes
/// `/tmp/sat.png`; the backend picks the format from the extension and fails on none).
pub fn image_path(path: &Path) -> PathBuf {
    let ok = path
        .extension()
        .and_then(|e| e.to_str())
        .is_some_and(|e| IMAGE_EXTENSIONS.iter().any(|x| x.eq_ignore_ascii_case(e)));
    if ok {
        path.to_path_buf()
    } else {
        let mut s = path.as_os_str().to_owned();
        s.push(".png");
        PathBuf::from(s)
    }
}

/// Runs `f` on the image path of `path`; an error names the file.
fn drawing(path: &Path, f: impl FnOnce(&Path) -> Res<()>) -> Res<PathBuf> {
    let p = image_path(path);
    f(&p).map_err(|e| format!("plot {}: {e}", p.display()))?;
    Ok(p)
}

/// Draws `rows` (sweeps) and `overlap` into one image (PNG unless `path` ends in .jpg
/// or .bmp; see [`image_path`]): a panel per collective swept, and a panel of overlap
/// slowdowns when there are any. Returns the file written.
pub fn draw(path: &Path, rows: &[SweepRow], overlap: &[OverlapRow]) -> Res<PathBuf> {
    // `--host-only` rows have no bandwidth to draw.
    let rows: Vec<SweepRow> = rows.iter().filter(|r| !r.host_only).cloned().collect();
    drawing(path, |p| draw_sweeps(p, &rows, overlap))
}

fn draw_sweeps(path: &Path, rows: &[SweepRow], overlap: &[OverlapRow]) -> Res<()> {
    fonts();
    let mut benches: Vec<String> = rows.iter().map(|r| r.bench.clone()).collect();
    benches.dedup();
    benches.sort();
    benches.dedup();
    let panels = benches.len() + usize::from(!overlap.is_empty());
    if panels == 0 {
        return Err("nothing to plot".into());
    }
    let root = BitMapBackend::new(path, (1100, 520 * panels as u32)).into_drawing_area();
    root.fill(&WHITE)?;
    let areas = root.split_evenly((panels, 1));
    for (area, bench) in areas.iter().zip(&benches) {
        let mine: Vec<&SweepRow> = rows.iter().filter(|r| &r.bench == bench).collect();
        let mut series: BTreeMap<String, Vec<(f64, f64)>> = BTreeMap::new();
        for r in &mine {
            series.entry(r.label()).or_default().push((r.size as f64, r.busbw_gbs));
        }
        let xmin = mine.iter().map(|r| r.size as f64).fold(f64::MAX, f64::min);
        let xmax = mine.iter().map(|r| r.size as f64).fold(0.0, f64::max).max(xmin * 2.0);
        let ymax = mine.iter().map(|r| r.busbw_gbs).fold(0.0, f64::max).max(1e-3) * 1.1;
        let ranks = mine.first().map_or(0, |r| r.ranks);
        // Labels at the (power-of-two) sizes measured, not at plotters' powers of ten;
        // a light grid line at every size measured.
        let sizes: Vec<u64> = mine.iter().map(|r| r.size as u64).collect();
        let ticks: Vec<f64> = size_ticks(&sizes, MAX_SIZE_TICKS).into_iter().map(|s| s as f64).collect();
        let grid: Vec<f64> = size_ticks(&sizes, usize::MAX).into_iter().map(|s| s as f64).collect();
        let x = (xmin..xmax).log_scale().with_key_points(ticks).with_light_points(grid);
        let mut chart = ChartBuilder::on(area)
            .caption(format!("{bench}: bus bandwidth, {ranks} ranks"), ("sans-serif", 24))
            .margin(12)
            .x_label_area_size(40)
            .y_label_area_size(60)
            .build_cartesian_2d(x, 0.0..ymax)?;
        chart
            .configure_mesh()
            .x_desc("size per rank (bytes)")
            .y_desc("busbw (GB/s)")
            .x_label_formatter(&|x| binary_size(x.round() as u64))
            .label_style(("sans-serif", 14))
            .draw()?;
        for (i, (label, pts)) in series.iter().enumerate() {
            let color = Palette99::pick(i).to_rgba();
            let style = ShapeStyle { color, filled: true, stroke_width: 2 };
            chart
                .draw_series(LineSeries::new(pts.iter().copied(), style))?
                .label(label.clone())
                .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 18, y)], style));
            chart.draw_series(pts.iter().map(|&p| Circle::new(p, 3, style)))?;
        }
        chart
            .configure_series_labels()
            .position(SeriesLabelPosition::UpperLeft)
            .background_style(WHITE.mix(0.85))
            .border_style(BLACK)
            .label_font(("sans-serif", 13))
            .draw()?;
    }
    if !overlap.is_empty() {
        let area = &areas[benches.len()];
        let labels: Vec<String> = overlap
            .iter()
            .map(|o| format!("{} {}", o.bench.trim_start_matches("overlap-"), o.implementation))
            .collect();
        let ymax = overlap.iter().map(|o| o.gemm_slowdown_pct).fold(1.0, f64::max) * 1.15;
        let ymin = overlap.iter().map(|o| o.gemm_slowdown_pct).fold(0.0, f64::min) * 1.15;
        let n = overlap.len();
        let mut chart = ChartBuilder::on(area)
            .caption("GEMM slowdown next to a stream of collectives (lower is better)", ("sans-serif", 24))
            .margin(12)
            .x_label_area_size(150)
            .y_label_area_size(60)
            .build_cartesian_2d(0.0..n as f64, ymin..ymax)?;
        chart
            .configure_mesh()
            .disable_x_mesh()
            .x_labels(n.max(1))
            .x_label_formatter(&|x| {
                let i = x.floor() as usize;
                labels.get(i).cloned().unwrap_or_default()
            })
            .x_label_style(("sans-serif", 12).into_font().transform(FontTransform::Rotate90))
            .y_desc("GEMM slowdown (%)")
            .label_style(("sans-serif", 14))
            .draw()?;
        chart.draw_series(overlap.iter().enumerate().map(|(i, o)| {
            let color = if o.implementation.starts_with("nccl") { RED.mix(0.7) } else { BLUE.mix(0.7) };
            Rectangle::new([(i as f64 + 0.15, 0.0), (i as f64 + 0.85, o.gemm_slowdown_pct)], color.filled())
        }))?;
    }
    root.present()?;
    Ok(())
}

/// The rows the saturated plot shows for one panel: the trainer-like configuration
/// (high priority, interleaved enqueue) when present, else every row of the panel.
pub fn saturated_points<'a>(rows: &[&'a SaturatedRow]) -> Vec<&'a SaturatedRow> {
    let main: Vec<&SaturatedRow> =
        rows.iter().copied().filter(|r| r.priority == "high" && r.enqueue == "interleaved").collect();
    if main.is_empty() { rows.to_vec() } else { main }
}

/// Draws the saturated benchmark: one panel per collective and shard, GEMM slowdown
/// (median, bar from min to max) against bandwidth kept inside the window, one point
/// per implementation (high-priority stream, interleaved enqueue). The file is as in
/// [`draw`]; returns it.
pub fn draw_saturated(path: &Path, rows: &[SaturatedRow]) -> Res<PathBuf> {
    drawing(path, |p| draw_saturated_into(p, rows))
}

fn draw_saturated_into(path: &Path, rows: &[SaturatedRow]) -> Res<()> {
    fonts();
    let mut panels: Vec<(String, usize)> = rows.iter().map(|r| (r.bench.clone(), r.shard_bytes)).collect();
    panels.sort();
    panels.dedup();
    if panels.is_empty() {
        return Err("nothing to plot".into());
    }
    let root = BitMapBackend::new(path, (1100, 560 * panels.len() as u32)).into_drawing_area();
    root.fill(&WHITE)?;
    let mut names: Vec<&str> = rows.iter().map(|r| r.implementation.as_str()).collect();
    names.sort();
    names.dedup();
    for (area, (bench, shard)) in root.split_evenly((panels.len(), 1)).iter().zip(&panels) {
        let mine: Vec<&SaturatedRow> = rows.iter().filter(|r| &r.bench == bench && r.shard_bytes == *shard).collect();
        let pts = saturated_points(&mine);
        let ymax = pts.iter().map(|r| r.slowdown_max).fold(1.0, f64::max) * 1.15;
        let ymin = pts.iter().map(|r| r.slowdown_min).fold(0.0, f64::min) * 1.15;
        let xmax = pts.iter().filter_map(|r| r.kept_max).fold(100.0, f64::max) * 1.05;
        let mut chart = ChartBuilder::on(area)
            .caption(
                format!(
                    "{}, {} shards, {} ranks: GEMM slowdown vs collective bandwidth kept",
                    bench.trim_start_matches("saturated-"),
                    binary_size(*shard as u64),
                    pts.first().map_or(0, |r| r.ranks)
                ),
                ("sans-serif", 22),
            )
            .margin(12)
            .x_label_area_size(40)
            .y_label_area_size(60)
            .build_cartesian_2d(0.0..xmax, ymin..ymax)?;
        chart
            .configure_mesh()
            .x_desc("busbw inside the GEMM window / alone (%), higher is better")
            .y_desc("GEMM slowdown (%), lower is better")
            .label_style(("sans-serif", 14))
            .draw()?;
        for r in &pts {
            let i = names.iter().position(|n| *n == r.implementation).unwrap_or(0);
            let color = Palette99::pick(i).to_rgba();
            let style = ShapeStyle { color, filled: true, stroke_width: 2 };
            let x = r.kept_pct.unwrap_or(0.0);
            chart
                .draw_series([Circle::new((x, r.slowdown_pct), 5, style)])?
                .label(format!("{} ({}, {})", r.implementation, r.priority, r.enqueue))
                .legend(move |(x, y)| Circle::new((x + 9, y), 5, style));
            chart.draw_series([PathElement::new(vec![(x, r.slowdown_min), (x, r.slowdown_max)], style)])?;
        }
        chart
            .configure_series_labels()
            .position(SeriesLabelPosition::UpperLeft)
            .background_style(WHITE.mix(0.85))
            .border_style(BLACK)
            .label_font(("sans-serif", 13))
            .draw()?;
    }
    root.present()?;
    Ok(())
}

/// Draws `lowcon bench reduce-kernels`' frontier: GEMM slowdown against the share of
/// its speed a reduction kept beside the GEMM, one point per kernel, shape and launches
/// per call (95% intervals as bars both ways), the targets as dashed lines. Rows
/// measured alone only (no GEMM) are left out. The file is as in [`draw`].
pub fn draw_frontier(path: &Path, rows: &[ReduceKernelRow]) -> Res<PathBuf> {
    drawing(path, |p| draw_frontier_into(p, rows))
}

fn draw_frontier_into(path: &Path, rows: &[ReduceKernelRow]) -> Res<()> {
    fonts();
    let pts: Vec<&ReduceKernelRow> = rows.iter().filter(|r| r.slowdown_pct.is_some() && r.kept_pct.is_some()).collect();
    if pts.is_empty() {
        return Err("nothing to plot: no row was measured beside the GEMM".into());
    }
    let val = |o: Option<f64>| o.unwrap_or(0.0);
    let ymax = pts.iter().map(|r| val(r.slowdown_hi).max(val(r.slowdown_pct))).fold(5.0, f64::max) * 1.1;
    let ymin = pts.iter().map(|r| val(r.slowdown_lo)).fold(0.0, f64::min) * 1.1;
    // The spin control is named by its hold time: one series for all of them.
    let name_of = |r: &ReduceKernelRow| {
        let k = if r.kernel.starts_with("spin/") { "spin (control)" } else { r.kernel.as_str() };
        format!("{k} x{} launches", r.pieces)
    };
    let mut series: Vec<String> = pts.iter().map(|r| name_of(r)).collect();
    series.sort();
    series.dedup();
    let root = BitMapBackend::new(path, (1200, 760)).into_drawing_area();
    root.fill(&WHITE)?;
    let mut chart = ChartBuilder::on(&root)
        .caption(
            format!(
                "reduction kernels beside a saturated GEMM ({} ranks' buffers on one GPU)",
                pts.first().map_or(0, |r| r.world)
            ),
            ("sans-serif", 22),
        )
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(60)
        .build_cartesian_2d(0.0..100.0, ymin..ymax)?;
    chart
        .configure_mesh()
        .x_desc("its speed kept beside the GEMM (%), higher is better")
        .y_desc("GEMM slowdown (%), lower is better")
        .label_style(("sans-serif", 14))
        .draw()?;
    // The targets: at most 4.5% slowdown, at least 50% kept.
    let dash = ShapeStyle { color: BLACK.mix(0.4), filled: false, stroke_width: 1 };
    chart.draw_series(DashedLineSeries::new([(0.0, 4.5), (100.0, 4.5)], 6, 4, dash))?;
    chart.draw_series(DashedLineSeries::new([(50.0, ymin), (50.0, ymax)], 6, 4, dash))?;
    for (i, name) in series.iter().enumerate() {
        let color = Palette99::pick(i).to_rgba();
        let style = ShapeStyle { color, filled: true, stroke_width: 2 };
        let mine: Vec<&&ReduceKernelRow> = pts.iter().filter(|r| name_of(r) == *name).collect();
        for r in &mine {
            let (x, y) = (val(r.kept_pct), val(r.slowdown_pct));
            chart.draw_series([PathElement::new(vec![(x, val(r.slowdown_lo)), (x, val(r.slowdown_hi))], style)])?;
            chart.draw_series([PathElement::new(vec![(val(r.kept_lo), y), (val(r.kept_hi), y)], style)])?;
            let shape = format!("{}x{}", r.ctas, r.threads);
            chart.draw_series([Text::new(shape, (x + 0.8, y + 0.15), ("sans-serif", 12).into_font())])?;
        }
        chart
            .draw_series(mine.iter().map(|r| Circle::new((val(r.kept_pct), val(r.slowdown_pct)), 5, style)))?
            .label(name.clone())
            .legend(move |(x, y)| Circle::new((x + 9, y), 5, style));
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperRight)
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .label_font(("sans-serif", 13))
        .draw()?;
    root.present()?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rows::fixtures::saturated_row;

    #[test]
    fn the_saturated_plot_shows_the_trainer_configuration() {
        let rows = [saturated_row("a", "high", true), saturated_row("b", "default", true)];
        let refs: Vec<&SaturatedRow> = rows.iter().collect();
        let p = saturated_points(&refs);
        assert_eq!(p.iter().map(|r| r.implementation.as_str()).collect::<Vec<_>>(), ["a"]);
        // Without a high-priority interleaved row, every row is shown.
        let p = saturated_points(&refs[1..]);
        assert_eq!(p.len(), 1);
        assert!(draw_saturated(Path::new("/nonexistent-dir/x.png"), &rows).is_err());
        assert!(draw_saturated(Path::new("x.png"), &[]).is_err());
    }

    const K: u64 = 1 << 10;
    const M: u64 = 1 << 20;
    const G: u64 = 1 << 30;

    fn labels(ticks: &[u64]) -> Vec<String> {
        ticks.iter().map(|&t| binary_size(t)).collect()
    }

    /// `from`, `from * factor`, ... up to `to`.
    fn sweep(from: u64, to: u64, factor: u64) -> Vec<u64> {
        std::iter::successors(Some(from), |&s| Some(s * factor)).take_while(|&s| s <= to).collect()
    }

    #[test]
    fn sizes_are_labelled_in_binary_units() {
        assert_eq!(binary_size(K), "1K");
        assert_eq!(binary_size(64 * K), "64K");
        assert_eq!(binary_size(512 * K), "512K");
        assert_eq!(binary_size(4 * M), "4M");
        assert_eq!(binary_size(32 * M), "32M");
        assert_eq!(binary_size(G), "1G");
        assert_eq!(binary_size(3 * G), "3G");
        // Whole multiples that are not powers of two print bare too.
        assert_eq!(binary_size(3 * M), "3M");
        assert_eq!(binary_size(1000 * K), "1000K");
        // The rest: one decimal, never a truncated whole (the old labels said 97K).
        assert_eq!(binary_size(100_000), "97.7K");
        assert_eq!(binary_size(1536 * K), "1.5M");
        assert_eq!(binary_size(M - 1), "1024K");
        assert_eq!(binary_size(3 * M + 1), "3M");
        assert_eq!(binary_size(1023), "1023");
        assert_eq!(binary_size(0), "0");
    }

    #[test]
    fn the_size_axis_is_labelled_at_the_sizes_measured() {
        // `bench quick`'s sweep: 64K to 64M by 8, measured by two series, in any order.
        let quick = sweep(64 * K, 64 * M, 8);
        let mut both = quick.clone();
        both.extend(quick.iter().rev());
        let ticks = size_ticks(&both, MAX_SIZE_TICKS);
        assert_eq!(ticks, quick);
        assert_eq!(labels(&ticks), ["64K", "512K", "4M", "32M"]);
        assert_eq!(labels(&size_ticks(&[K], MAX_SIZE_TICKS)), ["1K"]);
        // Few sizes: each measured size is labelled, power of two or not.
        assert_eq!(labels(&size_ticks(&[5 * M, 3 * M, 100_000], MAX_SIZE_TICKS)), ["97.7K", "3M", "5M"]);
        // A zero size has no place on a log axis; no room for labels still gives one.
        assert_eq!(size_ticks(&[0, 4 * K], MAX_SIZE_TICKS), [4 * K]);
        assert_eq!(size_ticks(&[K, 2 * K], 0), [K]);
        assert!(size_ticks(&[], MAX_SIZE_TICKS).is_empty());
    }

    #[test]
    fn a_long_sweep_is_labelled_at_some_of_its_powers_of_two() {
        let long = sweep(K, G, 2);
        assert_eq!(long.len(), 21);
        let ticks = size_ticks(&long, MAX_SIZE_TICKS);
        assert!(ticks.len() <= MAX_SIZE_TICKS && ticks.len() >= MAX_SIZE_TICKS / 2, "{ticks:?}");
        assert!(ticks.iter().all(|t| t.is_power_of_two() && long.contains(t)), "{ticks:?}");
        assert_eq!(labels(&ticks), ["1K", "4K", "16K", "64K", "256K", "1M", "4M", "16M", "64M", "256M", "1G"]);
        for max in 1..=30 {
            let t = size_ticks(&long, max);
            assert!(!t.is_empty() && t.len() <= max, "max {max}: {t:?}");
            assert!(t.windows(2).all(|w| w[0] < w[1]), "max {max}: {t:?}");
        }
        // Many sizes, some not powers of two: only the powers of two are labelled.
        let mut mixed = long.clone();
        mixed.extend(long.iter().map(|s| s * 3));
        let ticks = size_ticks(&mixed, MAX_SIZE_TICKS);
        assert_eq!(ticks, size_ticks(&long, MAX_SIZE_TICKS));
        // Many sizes and no power of two among them: every k-th size.
        let threes: Vec<u64> = (1..=30).map(|i| 3 * i * K).collect();
        let ticks = size_ticks(&threes, 10);
        assert_eq!(ticks.len(), 10);
        assert!(ticks.iter().all(|t| threes.contains(t)));
        assert_eq!(ticks[..3], [3 * K, 12 * K, 21 * K]);
    }

    fn sweep_row(bench: &str, implementation: &str, size: u64, busbw_gbs: f64) -> SweepRow {
        SweepRow {
            bench: bench.into(),
            implementation: implementation.into(),
            algorithm: "ring".into(),
            sync: "kernel".into(),
            ctas: None,
            pipeline: None,
            ranks: 4,
            dtype: "f32".into(),
            op: None,
            size: size as usize,
            total: 4 * size as usize,
            count: size as usize / 4,
            time_us: 10.0,
            algbw_gbs: busbw_gbs,
            busbw_gbs,
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

    #[test]
    fn a_sweep_plot_draws_with_its_own_size_labels() {
        let tmp = tempfile::tempdir().unwrap();
        let mut rows = Vec::new();
        for (i, &s) in sweep(64 * K, 64 * M, 8).iter().enumerate() {
            rows.push(sweep_row("all-gather", "lowcon", s, 1.0 + i as f64));
            rows.push(sweep_row("all-gather", "nccl", s, 2.0 + i as f64));
        }
        for (i, &s) in sweep(K, G, 2).iter().enumerate() {
            rows.push(sweep_row("reduce-scatter", "lowcon", s, i as f64));
        }
        rows.push(sweep_row("reduce-scatter", "nccl", 3 * M, 5.0));
        let wrote = draw(&tmp.path().join("sweep.png"), &rows, &[]).unwrap();
        assert!(std::fs::metadata(&wrote).unwrap().len() > 0);
        // One size only: the axis spans it and twice it, labelled at it.
        let one = draw(&tmp.path().join("one.png"), &rows[..1], &[]).unwrap();
        assert!(one.is_file());
    }

    #[test]
    fn a_plot_name_without_an_image_extension_gets_png() {
        assert_eq!(image_path(Path::new("/tmp/l/sat")), Path::new("/tmp/l/sat.png"));
        assert_eq!(image_path(Path::new("/tmp/l/sat.v2")), Path::new("/tmp/l/sat.v2.png"));
        assert_eq!(image_path(Path::new("a.PNG")), Path::new("a.PNG"));
        assert_eq!(image_path(Path::new("a.jpg")), Path::new("a.jpg"));
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path();
        let rows = [saturated_row("a", "high", true)];
        let wrote = draw_saturated(&dir.join("sat"), &rows).unwrap();
        assert_eq!(wrote, dir.join("sat.png"));
        assert!(wrote.is_file());
        // A failure names the file.
        let e = draw_saturated(Path::new("/nonexistent-dir/y"), &rows).unwrap_err().to_string();
        assert!(e.contains("/nonexistent-dir/y.png"), "{e}");
    }
}
