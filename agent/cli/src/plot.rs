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

/// Width of the Gantt chart, pixels.
const GANTT_WIDTH: u32 = 1400;
/// Left of the Gantt's plotting area: its margin and the device labels, pixels.
const GANTT_LEFT: u32 = 12 + 170;
/// The narrowest bar a task gets, and the gap after it in its row, pixels.
const MIN_BAR: i32 = 1;
const BAR_GAP: i32 = 1;
/// Height of a row of bars in a lane split into rows, pixels.
const ROW_HEIGHT: u32 = 6;
/// Height of a lane of one row, pixels.
const LANE_HEIGHT: u32 = 28;

/// Draws `rows` (one policy's schedule on `host`) as a Gantt chart: a lane per
/// device, a bar per task and device labelled with its id where it fits, red
/// when the task ended after its deadline (`deadlines` by task id).
///
/// Every task keeps a visible bar: one shorter than a pixel is drawn
/// [`MIN_BAR`] wide, and where bars would touch or overlap at the chart's
/// scale the device's lane is split into rows (each bar in the first row
/// free at its start), so a trace with more tasks than pixels stays readable;
/// a note under the chart says so. The time axis is in s, min or h.
pub fn gantt(
    path: &Path,
    metrics: &Metrics,
    host: &Host,
    rows: &[ScheduleRow],
    deadlines: &HashMap<&str, f64>,
) -> Result<()> {
    let lanes = host.devices.len().max(1);
    let end = rows.iter().map(|r| r.end).fold(0.0, f64::max).max(1e-9);
    // The plotting area spans the width less the labels and the right margin.
    let span_px = f64::from(GANTT_WIDTH - GANTT_LEFT - 12);
    let to_px = |t: f64| (t / (end * 1.01) * span_px).floor() as i32;
    let packed = pack(rows, to_px);
    let most = packed
        .rows_per_gpu
        .iter()
        .copied()
        .max()
        .unwrap_or(1)
        .max(1);
    let lane_px = LANE_HEIGHT.max(most * ROW_HEIGHT * 100 / 76 + 1);
    let height = 134 + lane_px * lanes.max(6) as u32;
    let root = SVGBackend::new(path, (GANTT_WIDTH, height)).into_drawing_area();
    draw_gantt(&root, metrics, host, rows, deadlines, end, &packed)
        .and_then(|()| root.present().map_err(|e| anyhow::anyhow!("{e}")))
        .with_context(|| format!("cannot draw {}", path.display()))
}

/// The bars of a Gantt chart laid out in pixels.
struct Packed {
    /// Per schedule row: its bar's row in its device's lane, and its left
    /// and right edges in pixels from the plotting area's left.
    bars: Vec<(u32, i32, i32)>,
    /// Rows in each device's lane (by device index).
    rows_per_gpu: Vec<u32>,
    /// Bars widened to [`MIN_BAR`].
    widened: usize,
}

/// Lays `rows` out: each bar at least [`MIN_BAR`] wide and [`BAR_GAP`] clear
/// of the next in its row, in the first row of its device's lane free at its
/// start (`to_px`: seconds to pixels).
fn pack(rows: &[ScheduleRow], to_px: impl Fn(f64) -> i32) -> Packed {
    let gpus = rows.iter().map(|r| r.gpu as usize + 1).max().unwrap_or(0);
    let mut order: Vec<usize> = (0..rows.len()).collect();
    order.sort_by(|&a, &b| rows[a].start.total_cmp(&rows[b].start));
    // Per device: where each of its rows is free from, pixels.
    let mut free: Vec<Vec<i32>> = vec![Vec::new(); gpus];
    let mut bars = vec![(0, 0, 0); rows.len()];
    let mut widened = 0;
    for i in order {
        let r = &rows[i];
        let (x0, x1) = (to_px(r.start), to_px(r.end));
        let right = if x1 - x0 >= MIN_BAR + BAR_GAP {
            x1 - BAR_GAP
        } else {
            widened += 1;
            x0 + MIN_BAR
        };
        let lane = &mut free[r.gpu as usize];
        let row = match lane.iter().position(|&f| f <= x0) {
            Some(row) => row,
            None => {
                lane.push(x0);
                lane.len() - 1
            }
        };
        lane[row] = right + BAR_GAP;
        bars[i] = (row as u32, x0, right);
    }
    Packed {
        bars,
        rows_per_gpu: free.iter().map(|l| l.len().max(1) as u32).collect(),
        widened,
    }
}

/// A unit the time axis reads in: its name and its length in seconds, chosen
/// so that a chart of `end` seconds has labels of a few digits.
fn time_unit(end: f64) -> (&'static str, f64) {
    if end < 180.0 {
        ("s", 1.0)
    } else if end < 3.0 * 3600.0 {
        ("min", 60.0)
    } else {
        ("h", 3600.0)
    }
}

/// `x` with the decimals it needs (at most 2): `1`, `2.5`, `0.25`.
fn short_number(x: f64) -> String {
    let text = format!("{x:.2}");
    let text = text.trim_end_matches('0').trim_end_matches('.');
    if text == "-0" {
        "0".into()
    } else {
        text.into()
    }
}

fn draw_gantt(
    root: &DrawingArea<SVGBackend<'_>, plotters::coord::Shift>,
    metrics: &Metrics,
    host: &Host,
    rows: &[ScheduleRow],
    deadlines: &HashMap<&str, f64>,
    end: f64,
    packed: &Packed,
) -> Result<()> {
    let lanes = host.devices.len();
    let (unit, unit_s) = time_unit(end);
    // Device 0 on top.
    let lane_y = |gpu: u32| (lanes - 1 - gpu as usize) as f64;
    root.fill(&WHITE).map_err(plot_error)?;
    let caption = format!(
        "{}: {} tasks on {} devices; twt {:.1}, {} late (red), makespan {} {unit}",
        metrics.policy,
        metrics.tasks - metrics.rejected.len(),
        lanes,
        metrics.twt,
        metrics.dmc,
        short_number(metrics.makespan / unit_s)
    );
    let (body, foot) = root.split_vertically(root.dim_in_pixel().1 - 24);
    let mut chart = ChartBuilder::on(&body)
        .caption(caption, ("sans-serif", 18))
        .margin(12)
        .x_label_area_size(36)
        .y_label_area_size(GANTT_LEFT - 12)
        .build_cartesian_2d(0.0..end * 1.01 / unit_s, -0.5..lanes as f64 - 0.5)
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
        .x_label_formatter(&|x| short_number(*x))
        .x_desc(format!("time ({unit})"))
        .draw()
        .map_err(plot_error)?;
    // Bars in pixels: a lane's middle 76 % holds its rows.
    let left = chart.backend_coord(&(0.0, 0.0)).0;
    let lane_top = |gpu: u32| {
        let y = lane_y(gpu);
        chart.backend_coord(&(0.0, y + 0.38)).1
    };
    let lane_bottom = |gpu: u32| chart.backend_coord(&(0.0, lane_y(gpu) - 0.38)).1;
    let row_box = |r: &ScheduleRow, row: u32| {
        let (top, bottom) = (lane_top(r.gpu), lane_bottom(r.gpu));
        let count = packed
            .rows_per_gpu
            .get(r.gpu as usize)
            .copied()
            .unwrap_or(1) as i32;
        let row = row as i32;
        let height = bottom - top;
        (
            top + height * row / count,
            top + height * (row + 1) / count - i32::from(count > 1),
        )
    };
    let bars = rows.iter().zip(&packed.bars).map(|(r, &(row, x0, x1))| {
        let late = deadlines.get(r.id.as_str()).is_some_and(|&d| r.end > d);
        let colour = if late { LATE } else { ON_TIME };
        let (y0, y1) = row_box(r, row);
        Rectangle::new([(left + x0, y0), (left + x1, y1)], colour.filled())
    });
    for bar in bars {
        body.draw(&bar).map_err(plot_error)?;
    }
    let style = TextStyle::from(("sans-serif", 11).into_font())
        .color(&WHITE)
        .pos(Pos::new(HPos::Center, VPos::Center));
    for (r, &(row, x0, x1)) in rows.iter().zip(&packed.bars) {
        let (y0, y1) = row_box(r, row);
        if (x1 - x0) as usize > 7 * r.id.len() + 4 && y1 - y0 >= 12 {
            let at = (left + (x0 + x1) / 2, (y0 + y1) / 2);
            body.draw(&Text::new(r.id.clone(), at, style.clone()))
                .map_err(plot_error)?;
        }
    }
    let split = packed.rows_per_gpu.iter().filter(|&&n| n > 1).count();
    let mut notes = Vec::new();
    if packed.widened > 0 {
        let bars = if packed.widened == 1 { "bar" } else { "bars" };
        notes.push(format!(
            "{} {bars} shorter than {MIN_BAR} px drawn {MIN_BAR} px wide",
            packed.widened
        ));
    }
    if split > 0 {
        let most = packed.rows_per_gpu.iter().max().copied().unwrap_or(1);
        let lanes = if split == 1 { "lane" } else { "lanes" };
        notes.push(format!(
            "{split} {lanes} split into up to {most} rows where bars would touch at this scale"
        ));
    }
    if !notes.is_empty() {
        let style =
            TextStyle::from(("sans-serif", 13).into_font()).pos(Pos::new(HPos::Left, VPos::Top));
        foot.draw(&Text::new(
            format!("Every task has a bar: {}.", notes.join("; ")),
            (12, 2),
            style,
        ))
        .map_err(plot_error)?;
    }
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

/// Width of the comparison chart's legend, right of its bars, pixels.
const LEGEND_WIDTH: u32 = 200;

/// Draws the policies' twt, twct, act, dmr and makespan as grouped bars, each
/// metric relative to the largest value among the policies, with the legend
/// in a column of its own right of the bars.
pub fn comparison(path: &Path, title: &str, metrics: &[&Metrics]) -> Result<()> {
    let height = 480.max(80 + 22 * metrics.len() as u32);
    let root = SVGBackend::new(path, (960 + LEGEND_WIDTH, height)).into_drawing_area();
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
    let (bars_area, legend_area) = root.split_horizontally(root.dim_in_pixel().0 - LEGEND_WIDTH);
    let groups = COMPARED.len() as f64;
    let mut chart = ChartBuilder::on(&bars_area)
        .caption(title, ("sans-serif", 18))
        .margin(12)
        .y_label_area_size(48)
        .build_cartesian_2d(0.0..groups, -0.1..1.05)
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
        chart.draw_series(bars).map_err(plot_error)?;
        // The legend: a swatch and the policy's name, one a line from the top
        // of the bars' area.
        let y = 50 + 22 * p as i32;
        legend_area
            .draw(&Rectangle::new([(4, y - 6), (18, y + 6)], colour.filled()))
            .map_err(plot_error)?;
        let style =
            TextStyle::from(("sans-serif", 14).into_font()).pos(Pos::new(HPos::Left, VPos::Center));
        legend_area
            .draw(&Text::new(m.policy.clone(), (24, y), style))
            .map_err(plot_error)?;
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
    Ok(())
}

fn plot_error(e: impl std::fmt::Display) -> anyhow::Error {
    anyhow::anyhow!("{e}")
}

/// Draws a time/energy trade-off curve (`points` as (time, energy), both
/// relative to default clocks), marks the search's unconstrained `optimum`
/// and, where it has less energy, the `least` energy over the curve's
/// settings, with a legend naming each.
pub fn trade_off(
    path: &Path,
    title: &str,
    points: &[(f64, f64)],
    optimum: (f64, f64),
    least: Option<(f64, f64)>,
) -> Result<()> {
    let root = SVGBackend::new(path, (720, 480)).into_drawing_area();
    draw_trade_off(&root, title, points, optimum, least)
        .and_then(|()| root.present().map_err(|e| anyhow::anyhow!("{e}")))
        .with_context(|| format!("cannot draw {}", path.display()))
}

fn draw_trade_off(
    root: &DrawingArea<SVGBackend<'_>, plotters::coord::Shift>,
    title: &str,
    points: &[(f64, f64)],
    optimum: (f64, f64),
    least: Option<(f64, f64)>,
) -> Result<()> {
    root.fill(&WHITE).map_err(plot_error)?;
    let all = points.iter().chain([&optimum]).chain(least.as_ref());
    let (mut x0, mut x1, mut y0, mut y1) = (f64::MAX, f64::MIN, f64::MAX, f64::MIN);
    for &(x, y) in all {
        (x0, x1, y0, y1) = (x0.min(x), x1.max(x), y0.min(y), y1.max(y));
    }
    let pad = |a: f64, b: f64| ((b - a) * 0.1).max(0.01);
    let (px, py) = (pad(x0, x1), pad(y0, y1));
    // Room above the curve for the legend.
    let mut chart = ChartBuilder::on(root)
        .caption(title, ("sans-serif", 16))
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(56)
        .build_cartesian_2d((x0 - px)..(x1 + px), (y0 - py)..(y1 + 5.0 * py))
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
        .map_err(plot_error)?
        .label("least energy under a time bound (the table's rows)")
        .legend(move |(x, y)| PathElement::new([(x, y), (x + 16, y)], colour.stroke_width(2)));
    chart
        .draw_series(points.iter().map(|&p| Circle::new(p, 3, colour.filled())))
        .map_err(plot_error)?;
    chart
        .draw_series(std::iter::once(Circle::new(optimum, 6, LATE.filled())))
        .map_err(plot_error)?
        .label("the search's optimum")
        .legend(|(x, y)| Circle::new((x + 8, y), 5, LATE.filled()));
    if let Some(least) = least {
        let green = POLICY_COLOURS[2];
        chart
            .draw_series(std::iter::once(Circle::new(least, 6, green.filled())))
            .map_err(plot_error)?
            .label("exact optimum over the table's settings")
            .legend(move |(x, y)| Circle::new((x + 8, y), 5, green.filled()));
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperRight)
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .draw()
        .map_err(plot_error)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use gpu_agent_plugin_api::Clocks;

    fn row(id: &str, gpu: u32, start: f64, end: f64) -> ScheduleRow {
        ScheduleRow {
            id: id.into(),
            gpu,
            device: gpu.to_string().into(),
            start,
            end,
            core_mhz: 0,
            mem_mhz: 0,
            energy_j: 0.0,
            clocks: Clocks::DEFAULT,
            runtime: end - start,
            power_w: 0.0,
            default_energy_j: 0.0,
            dvfs: None,
        }
    }

    #[test]
    fn every_bar_is_visible_and_apart_from_the_others_in_its_row() {
        // One pixel a second: b overlaps a's last pixel and takes a second
        // row; c and then d follow a in the first, a pixel apart; e, on
        // another device, is widened to a pixel like b and c.
        let rows = [
            row("a", 0, 0.0, 10.0),
            row("b", 0, 9.6, 9.8),
            row("c", 0, 10.0, 10.2),
            row("d", 0, 12.0, 20.0),
            row("e", 1, 0.0, 0.1),
        ];
        let packed = pack(&rows, |t| t.floor() as i32);
        assert_eq!(
            packed.bars,
            [(0, 0, 9), (1, 9, 10), (0, 10, 11), (0, 12, 19), (0, 0, 1)]
        );
        assert_eq!(packed.rows_per_gpu, [2, 1]);
        assert_eq!(packed.widened, 3);
    }

    #[test]
    fn time_reads_in_a_unit_with_the_decimals_it_needs() {
        assert_eq!(time_unit(90.0), ("s", 1.0));
        assert_eq!(time_unit(600.0), ("min", 60.0));
        assert_eq!(time_unit(123_504.0), ("h", 3600.0));
        let labels = [0.0, 2.5, 30.0, 0.25, 1.0 / 3.0].map(short_number);
        assert_eq!(labels, ["0", "2.5", "30", "0.25", "0.33"]);
    }
}
