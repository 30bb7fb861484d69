//! `crossgpu bench chart`, and the charts a run draws at the end of its all-reduce section:
//! latency and bandwidth against size (PNG, plotters), one line per layout and mode, the devices
//! and the date under the title, a dashed line where the wire becomes f16.

use std::path::{Path, PathBuf};

use crossgpu::bench::allreduce::AllReducePoint;

use super::text::{fmt_bytes, sig3};
use crate::cli::{fail, plural, CliResult};

/// An axis label: [`sig3`] without trailing zeros (0.01, 0.1, 1, 10).
fn axis_number(x: f64) -> String {
    let s = sig3(x);
    if s.contains('.') {
        s.trim_end_matches('0').trim_end_matches('.').to_string()
    } else {
        s
    }
}

/// The chart's second line: the devices measured and the date.
pub fn subtitle(devices: &[String], date: &str) -> String {
    let mut s = devices.join(" + ");
    if !date.is_empty() {
        s = if s.is_empty() { date.to_string() } else { format!("{s}, {date}") };
    }
    s
}

/// `bench chart`: redraws the charts from a bench.json.
pub fn chart_from_file(json: &Path, out: &Path) -> CliResult {
    let shown = json.display();
    let text = std::fs::read_to_string(json).map_err(|e| fail(format!("{shown}: {e}")))?;
    let v: serde_json::Value = serde_json::from_str(&text)
        .map_err(|e| fail(format!("{shown}: not a bench.json (bad JSON: {e})")))?;
    let raw = v["allreduce"].as_array().map_or(&[][..], |a| a.as_slice());
    let points: Vec<AllReducePoint> = raw.iter().filter_map(point_from_json).collect();
    if points.is_empty() {
        return Err(fail(if raw.is_empty() {
            format!("{shown} has no all-reduce points to chart")
        } else {
            format!(
                "{shown} has no all-reduce points to chart ({}, none with the fields of a point)",
                plural(raw.len(), "entry", "entries")
            )
        }));
    }
    std::fs::create_dir_all(out)
        .map_err(|e| fail(format!("--out {}: cannot create the folder: {e}", out.display())))?;
    // The devices measured; older files list only every adapter of the instance.
    let list = |key: &str| -> Vec<String> {
        v[key]
            .as_array()
            .map_or(Vec::new(), |a| a.iter().filter_map(|d| d.as_str().map(String::from)).collect())
    };
    let devices = match list("devices") {
        d if !d.is_empty() => d,
        _ => list("adapters"),
    };
    let files = chart(&points, out, &subtitle(&devices, v["date"].as_str().unwrap_or("")))
        .map_err(|e| fail(format!("drawing the charts into {}: {e}", out.display())))?;
    println!(
        "{}: {} all-reduce points charted: {}",
        shown,
        points.len(),
        files.iter().map(|f| f.display().to_string()).collect::<Vec<_>>().join(", ")
    );
    Ok(())
}

fn point_from_json(v: &serde_json::Value) -> Option<AllReducePoint> {
    let s = &v["us_per_round"];
    Some(AllReducePoint {
        layout: v["layout"].as_str()?.to_string(),
        members: v["members"].as_u64()? as usize,
        mode: v["mode"].as_str()?.to_string(),
        bytes: v["bytes"].as_u64()?,
        wire: if v["wire"].as_str()? == "f16" { "f16" } else { "f32" },
        us_per_round: crossgpu::bench::Summary {
            median: s["median"].as_f64()?,
            p10: s["p10"].as_f64()?,
            p90: s["p90"].as_f64()?,
            samples: s["samples"].as_u64()? as usize,
        },
        algbw_gbps: v["algbw_gbps"].as_f64()?,
        rounds_per_batch: v["rounds_per_batch"].as_u64()? as usize,
        host_us_per_round: v["host_us_per_round"].as_f64(),
        bridge_blocked_pct: v["bridge_blocked_pct"].as_f64(),
        bridge_poll_us: v["bridge_poll_us"].as_f64(),
        bridge_signal_us: v["bridge_signal_us"].as_f64(),
        queue_submit_us: v["queue_submit_us"].as_f64(),
        rounds_per_submit: v["rounds_per_submit"].as_u64().map(|r| r as usize),
    })
}

/// The payloads where a series' wire turns from f32 to f16 (the first f16 point after an f32
/// one), each once.
fn f16_switches(series: &[(String, Vec<&AllReducePoint>)]) -> Vec<u64> {
    let mut out = Vec::new();
    for (_, pts) in series {
        let mut sorted = pts.clone();
        sorted.sort_by_key(|p| p.bytes);
        if let Some(w) = sorted.windows(2).find(|w| w[0].wire == "f32" && w[1].wire == "f16") {
            if !out.contains(&w[1].bytes) {
                out.push(w[1].bytes);
            }
        }
    }
    out.sort_unstable();
    out
}

/// Latency and bandwidth against size, one line per layout and mode; the devices and the date
/// under the title, a dashed line where the wire becomes f16. Returns the files written; no
/// points, no files.
pub fn chart(
    points: &[AllReducePoint],
    out: &Path,
    subtitle: &str,
) -> std::result::Result<Vec<PathBuf>, String> {
    use plotters::prelude::*;
    use plotters::style::text_anchor::{HPos, Pos, VPos};
    if points.is_empty() {
        return Ok(Vec::new());
    }
    let mut series: Vec<(String, Vec<&AllReducePoint>)> = Vec::new();
    for p in points {
        let key = format!("{} {}", p.layout, p.mode);
        match series.iter_mut().find(|s| s.0 == key) {
            Some(s) => s.1.push(p),
            None => series.push((key, vec![p])),
        }
    }
    let switches = f16_switches(&series);
    let sizes: Vec<f64> = points
        .iter()
        .map(|p| p.bytes)
        .collect::<std::collections::BTreeSet<_>>()
        .into_iter()
        .map(|b| b as f64)
        .collect();
    let n_series = series.len().max(1) as f64;
    let e = |e: &dyn std::fmt::Display| e.to_string();
    let mut files = Vec::new();
    for (file, title, value, unit) in [
        ("allreduce-latency.png", "all-reduce time per round (pipelined)", 0, "µs per round"),
        ("allreduce-bandwidth.png", "all-reduce algorithmic bandwidth", 1, "GB/s"),
    ] {
        let path = out.join(file);
        files.push(path.clone());
        let root = BitMapBackend::new(&path, (1200, 800)).into_drawing_area();
        root.fill(&WHITE).map_err(|x| e(&x))?;
        let root = root.titled(title, ("sans-serif", 28)).map_err(|x| e(&x))?;
        let root = root
            .titled(subtitle, ("sans-serif", 16).into_font().color(&RGBColor(90, 90, 90)))
            .map_err(|x| e(&x))?;
        let get = |p: &AllReducePoint| if value == 0 { p.us_per_round.median } else { p.algbw_gbps };
        let ys: Vec<f64> = points.iter().map(get).filter(|v| v.is_finite() && *v > 0.0).collect();
        let (lo, hi) =
            (ys.iter().copied().fold(f64::MAX, f64::min) / 1.5, ys.iter().copied().fold(0.0, f64::max) * 1.5);
        let (lo, hi) = (lo.max(1e-4), hi.max(lo.max(1e-4) * 10.0));
        let (xlo, xhi) = (sizes[0] / 1.5, sizes[sizes.len() - 1] * 1.5);
        let mut c = ChartBuilder::on(&root)
            .margin(15)
            .x_label_area_size(50)
            .y_label_area_size(80)
            .build_cartesian_2d((xlo..xhi).log_scale().with_key_points(sizes.clone()), (lo..hi).log_scale())
            .map_err(|x| e(&x))?;
        c.configure_mesh()
            .x_desc("payload per member")
            .y_desc(unit)
            .axis_desc_style(("sans-serif", 18))
            .label_style(("sans-serif", 14))
            .x_label_formatter(&|x| fmt_bytes(x.round() as u64))
            .y_label_formatter(&|y| axis_number(*y))
            .draw()
            .map_err(|x| e(&x))?;
        for &b in &switches {
            let grey = RGBColor(120, 120, 120);
            c.draw_series(DashedLineSeries::new(
                vec![(b as f64, lo), (b as f64, hi)],
                8,
                6,
                grey.stroke_width(2),
            ))
            .map_err(|x| e(&x))?;
            // Beside the line, on the side with room (left of it in the right half).
            let right_half = (b as f64 / xlo).ln() > (xhi / xlo).ln() / 2.0;
            let (x, anchor) =
                if right_half { (b as f64 / 1.04, HPos::Right) } else { (b as f64 * 1.04, HPos::Left) };
            c.draw_series(std::iter::once(Text::new(
                format!("f16 wire from {}", fmt_bytes(b)),
                (x, hi / 1.25),
                ("sans-serif", 16).into_font().color(&grey).pos(Pos::new(anchor, VPos::Top)),
            )))
            .map_err(|x| e(&x))?;
        }
        for (i, (name, pts)) in series.iter().enumerate() {
            // Evenly spaced hues, alternating lightness, so neighbours differ.
            let color = HSLColor(i as f64 / n_series, 0.85, if i % 2 == 0 { 0.38 } else { 0.55 }).to_rgba();
            let data: Vec<(f64, f64)> =
                pts.iter().map(|p| (p.bytes as f64, get(p))).filter(|v| v.1 > 0.0).collect();
            c.draw_series(LineSeries::new(data.clone(), color.stroke_width(2)))
                .map_err(|x| e(&x))?
                // A series on the f16 wire at every size has no switch to mark: its name says so.
                .label(if pts.iter().all(|p| p.wire == "f16") {
                    format!("{name} (f16 wire)")
                } else {
                    name.clone()
                })
                .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], color.stroke_width(2)));
            c.draw_series(data.into_iter().map(|p| Circle::new(p, 3, color.filled()))).map_err(|x| e(&x))?;
        }
        c.configure_series_labels()
            .position(SeriesLabelPosition::UpperLeft)
            .background_style(WHITE.mix(0.8))
            .border_style(BLACK)
            .draw()
            .map_err(|x| e(&x))?;
        root.present().map_err(|x| e(&x))?;
    }
    Ok(files)
}
