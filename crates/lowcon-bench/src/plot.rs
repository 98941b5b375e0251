//! PNG plots of benchmark results (plotters, bitmap backend, an embedded DejaVu Sans
//! font so no system fonts are needed): busbw against size per series (log-x), one
//! panel per collective, and the overlap GEMM slowdowns as bars.

use std::collections::BTreeMap;
use std::path::Path;

use plotters::prelude::*;
use plotters::style::{FontStyle, register_font};

use crate::Res;
use crate::report::{OverlapRow, SweepRow};

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

/// Draws `rows` (sweeps) and `overlap` into one PNG: a panel per collective swept,
/// and a panel of overlap slowdowns when there are any.
pub fn draw(path: &Path, rows: &[SweepRow], overlap: &[OverlapRow]) -> Res<()> {
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
