//! SVG charts drawn with plotters: one policy's schedule as a Gantt chart, and
//! several policies' metrics side by side.

use std::collections::HashMap;
use std::path::Path;

use anyhow::{Context, Result};
use gpu_agent_core::host::Host;
use gpu_agent_core::metrics::Metrics;
use gpu_agent_sim::schedule::ScheduleRow;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};

const ON_TIME: RGBColor = RGBColor(70, 130, 180);
const LATE: RGBColor = RGBColor(214, 69, 65);
/// Colours of the policies in the comparison chart, in order.
const POLICY_COLOURS: [RGBColor; 8] = [
    RGBColor(31, 119, 180),
    RGBColor(255, 127, 14),
    RGBColor(44, 160, 44),
    RGBColor(214, 39, 40),
    RGBColor(148, 103, 189),
    RGBColor(140, 86, 75),
    RGBColor(227, 119, 194),
    RGBColor(127, 127, 127),
];

/// Draws `rows` (one policy's schedule on `host`) as a Gantt chart: a lane per
/// device, a bar per task labelled with its id where it fits, red when the
/// task ended after its deadline (`deadlines` by task id).
pub fn gantt(
    path: &Path,
    metrics: &Metrics,
    host: &Host,
    rows: &[ScheduleRow],
    deadlines: &HashMap<&str, f64>,
) -> Result<()> {
    let lanes = host.devices.len();
    let height = 110 + 28 * lanes.max(6) as u32;
    let root = SVGBackend::new(path, (1400, height)).into_drawing_area();
    draw_gantt(&root, metrics, host, rows, deadlines)
        .and_then(|()| root.present().map_err(|e| anyhow::anyhow!("{e}")))
        .with_context(|| format!("cannot draw {}", path.display()))
}

fn draw_gantt(
    root: &DrawingArea<SVGBackend<'_>, plotters::coord::Shift>,
    metrics: &Metrics,
    host: &Host,
    rows: &[ScheduleRow],
    deadlines: &HashMap<&str, f64>,
) -> Result<()> {
    let lanes = host.devices.len();
    let end = rows.iter().map(|r| r.end).fold(0.0, f64::max).max(1e-9);
    // Device 0 on top.
    let lane_y = |gpu: u32| (lanes - 1 - gpu as usize) as f64;
    root.fill(&WHITE).map_err(plot_error)?;
    let caption = format!(
        "{}: {} tasks on {} devices; twt {:.1}, {} late (red), makespan {:.1} s",
        metrics.policy,
        metrics.tasks - metrics.rejected.len(),
        lanes,
        metrics.twt,
        metrics.dmc,
        metrics.makespan
    );
    let mut chart = ChartBuilder::on(root)
        .caption(caption, ("sans-serif", 18))
        .margin(12)
        .x_label_area_size(36)
        .y_label_area_size(170)
        .build_cartesian_2d(0.0..end * 1.01, -0.5..lanes as f64 - 0.5)
        .map_err(plot_error)?;
    let label = |y: &f64| {
        let lane = y.round();
        if (y - lane).abs() > 1e-6 || lane < 0.0 || lane as usize >= lanes {
            return String::new();
        }
        let device = &host.devices[lanes - 1 - lane as usize];
        match device.mig() {
            Some(_) => format!("{} MIG {}", device.index, device.label()),
            None if !device.schedulable() => {
                format!("GPU {} {} (MIG)", device.index, device.model.name)
            }
            None => format!("GPU {} {}", device.index, device.model.name),
        }
    };
    chart
        .configure_mesh()
        .disable_y_mesh()
        .y_labels(lanes)
        .y_label_formatter(&label)
        .x_desc("time (s)")
        .draw()
        .map_err(plot_error)?;
    chart
        .draw_series(rows.iter().map(|r| {
            let late = deadlines.get(r.id.as_str()).is_some_and(|&d| r.end > d);
            let y = lane_y(r.gpu);
            let colour = if late { LATE } else { ON_TIME };
            Rectangle::new([(r.start, y - 0.38), (r.end, y + 0.38)], colour.filled())
        }))
        .map_err(plot_error)?;
    // Thin white edges keep back-to-back tasks apart.
    chart
        .draw_series(rows.iter().map(|r| {
            let y = lane_y(r.gpu);
            Rectangle::new(
                [(r.start, y - 0.38), (r.end, y + 0.38)],
                WHITE.stroke_width(1),
            )
        }))
        .map_err(plot_error)?;
    let style = TextStyle::from(("sans-serif", 11).into_font())
        .color(&WHITE)
        .pos(Pos::new(HPos::Center, VPos::Center));
    let labels: Vec<_> = rows
        .iter()
        .filter(|r| {
            let (x0, _) = chart.backend_coord(&(r.start, 0.0));
            let (x1, _) = chart.backend_coord(&(r.end, 0.0));
            (x1 - x0) as usize > 7 * r.id.len() + 4
        })
        .map(|r| {
            Text::new(
                r.id.clone(),
                ((r.start + r.end) / 2.0, lane_y(r.gpu)),
                style.clone(),
            )
        })
        .collect();
    chart.draw_series(labels).map_err(plot_error)?;
    Ok(())
}

/// A metric of the comparison chart: its name and how a policy's value reads.
type Compared = (&'static str, fn(&Metrics) -> f64);

/// The metrics drawn in the comparison chart: lower is better for each.
const COMPARED: [Compared; 5] = [
    ("twt", |m| m.twt),
    ("twct", |m| m.twct),
    ("act", |m| m.act),
    ("dmr", |m| m.dmr),
    ("makespan", |m| m.makespan),
];

/// Draws the policies' twt, twct, act, dmr and makespan as grouped bars, each
/// metric relative to the largest value among the policies.
pub fn comparison(path: &Path, title: &str, metrics: &[&Metrics]) -> Result<()> {
    let root = SVGBackend::new(path, (960, 480)).into_drawing_area();
    draw_comparison(&root, title, metrics)
        .and_then(|()| root.present().map_err(|e| anyhow::anyhow!("{e}")))
        .with_context(|| format!("cannot draw {}", path.display()))
}

fn draw_comparison(
    root: &DrawingArea<SVGBackend<'_>, plotters::coord::Shift>,
    title: &str,
    metrics: &[&Metrics],
) -> Result<()> {
    root.fill(&WHITE).map_err(plot_error)?;
    let groups = COMPARED.len() as f64;
    let mut chart = ChartBuilder::on(root)
        .caption(title, ("sans-serif", 18))
        .margin(12)
        .y_label_area_size(48)
        .build_cartesian_2d(0.0..groups, -0.1..1.3)
        .map_err(plot_error)?;
    chart
        .configure_mesh()
        .disable_x_mesh()
        .x_labels(0)
        .y_desc("relative to the largest (lower is better)")
        .y_label_formatter(&|y| {
            if *y < 0.0 {
                String::new()
            } else {
                if *y > 1.0 + 1e-9 {
                    String::new()
                } else {
                    format!("{y:.1}")
                }
            }
        })
        .draw()
        .map_err(plot_error)?;
    let width = 0.8 / metrics.len() as f64;
    for (p, m) in metrics.iter().enumerate() {
        let colour = POLICY_COLOURS[p % POLICY_COLOURS.len()];
        let bars = COMPARED.iter().enumerate().map(|(g, (_, value))| {
            let largest = metrics.iter().map(|m| value(m)).fold(0.0, f64::max);
            let share = if largest > 0.0 {
                value(m) / largest
            } else {
                0.0
            };
            let x = g as f64 + 0.1 + width * p as f64;
            Rectangle::new([(x, 0.0), (x + width * 0.92, share)], colour.filled())
        });
        chart
            .draw_series(bars)
            .map_err(plot_error)?
            .label(m.policy.clone())
            .legend(move |(x, y)| Rectangle::new([(x, y - 5), (x + 12, y + 5)], colour.filled()));
    }
    let style =
        TextStyle::from(("sans-serif", 14).into_font()).pos(Pos::new(HPos::Center, VPos::Top));
    chart
        .draw_series(
            COMPARED
                .iter()
                .enumerate()
                .map(|(g, (name, _))| Text::new(*name, (g as f64 + 0.5, -0.02), style.clone())),
        )
        .map_err(plot_error)?;
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperRight)
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .draw()
        .map_err(plot_error)?;
    Ok(())
}

fn plot_error(e: impl std::fmt::Display) -> anyhow::Error {
    anyhow::anyhow!("{e}")
}

/// Draws a time/energy trade-off curve (`points` as (time, energy), both
/// relative to default clocks) and marks the unconstrained `optimum`.
pub fn trade_off(
    path: &Path,
    title: &str,
    points: &[(f64, f64)],
    optimum: (f64, f64),
) -> Result<()> {
    let root = SVGBackend::new(path, (720, 480)).into_drawing_area();
    draw_trade_off(&root, title, points, optimum)
        .and_then(|()| root.present().map_err(|e| anyhow::anyhow!("{e}")))
        .with_context(|| format!("cannot draw {}", path.display()))
}

fn draw_trade_off(
    root: &DrawingArea<SVGBackend<'_>, plotters::coord::Shift>,
    title: &str,
    points: &[(f64, f64)],
    optimum: (f64, f64),
) -> Result<()> {
    root.fill(&WHITE).map_err(plot_error)?;
    let all = points.iter().chain(std::iter::once(&optimum));
    let (mut x0, mut x1, mut y0, mut y1) = (f64::MAX, f64::MIN, f64::MAX, f64::MIN);
    for &(x, y) in all {
        (x0, x1, y0, y1) = (x0.min(x), x1.max(x), y0.min(y), y1.max(y));
    }
    let pad = |a: f64, b: f64| ((b - a) * 0.1).max(0.01);
    let (px, py) = (pad(x0, x1), pad(y0, y1));
    let mut chart = ChartBuilder::on(root)
        .caption(title, ("sans-serif", 16))
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(56)
        .build_cartesian_2d((x0 - px)..(x1 + px), (y0 - py)..(y1 + py))
        .map_err(plot_error)?;
    chart
        .configure_mesh()
        .x_desc("time bound (x default-clock time)")
        .y_desc("energy (x default-clock energy)")
        .draw()
        .map_err(plot_error)?;
    let colour = POLICY_COLOURS[0];
    chart
        .draw_series(LineSeries::new(
            points.iter().copied(),
            colour.stroke_width(2),
        ))
        .map_err(plot_error)?;
    chart
        .draw_series(points.iter().map(|&p| Circle::new(p, 3, colour.filled())))
        .map_err(plot_error)?;
    chart
        .draw_series(std::iter::once(Circle::new(optimum, 6, LATE.filled())))
        .map_err(plot_error)?;
    Ok(())
}
