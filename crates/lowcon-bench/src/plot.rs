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

fn human(bytes: f64) -> String {
    let b = bytes.round() as u64;
    match b {
        b if b >= 1 << 30 => format!("{}G", b >> 30),
        b if b >= 1 << 20 => format!("{}M", b >> 20),
        b if b >= 1 << 10 => format!("{}K", b >> 10),
        b => format!("{b}"),
    }
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
    drawing(path, |p| draw_sweeps(p, rows, overlap))
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
        let mut chart = ChartBuilder::on(area)
            .caption(format!("{bench}: bus bandwidth, {ranks} ranks"), ("sans-serif", 24))
            .margin(12)
            .x_label_area_size(40)
            .y_label_area_size(60)
            .build_cartesian_2d((xmin..xmax).log_scale(), 0.0..ymax)?;
        chart
            .configure_mesh()
            .x_desc("size per rank (bytes)")
            .y_desc("busbw (GB/s)")
            .x_label_formatter(&|x| human(*x))
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
                    human(*shard as f64),
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
