//! Aligned text tables, and the one metrics table that `simulate` and
//! `metrics` both print.

use gpu_agent_core::metrics::Metrics;

/// How the cells of a column line up.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Align {
    /// Padded on the right (text).
    Left,
    /// Padded on the left (numbers).
    Right,
}

/// Rows of cells printed in columns two spaces apart, each as wide as its
/// widest cell. No line ends in padding. A cell of any column but the last
/// longer than [`MAX_CELL`] characters is cut there, ending in `…`, so that
/// one long value (a task's name) cannot push every other row apart.
pub struct Table {
    align: Vec<Align>,
    rows: Vec<Vec<String>>,
}

/// The most characters a cell shows outside the last column.
pub const MAX_CELL: usize = 64;

/// `cell`, cut to [`MAX_CELL`] characters (the last one `…`) if longer.
fn cut(cell: &str) -> std::borrow::Cow<'_, str> {
    match cell.char_indices().nth(MAX_CELL - 1) {
        Some((end, _)) if cell.chars().count() > MAX_CELL => format!("{}…", &cell[..end]).into(),
        _ => cell.into(),
    }
}

impl Table {
    /// An empty table whose columns line up as `align` says.
    pub fn new(align: &[Align]) -> Table {
        Table {
            align: align.to_vec(),
            rows: Vec::new(),
        }
    }

    /// A table whose first row is the column names, lined up like the column.
    pub fn with_header(columns: &[(&str, Align)]) -> Table {
        let align: Vec<Align> = columns.iter().map(|(_, a)| *a).collect();
        let mut table = Table::new(&align);
        table.row(columns.iter().map(|(name, _)| name.to_string()).collect());
        table
    }

    /// Appends a row; it must have one cell per column.
    pub fn row(&mut self, cells: Vec<String>) {
        self.insert_row(self.rows.len(), cells);
    }

    /// Inserts a row before row `at`; it must have one cell per column.
    pub fn insert_row(&mut self, at: usize, cells: Vec<String>) {
        assert_eq!(cells.len(), self.align.len(), "one cell per column");
        self.rows.insert(at, cells);
    }

    /// The table as text, one line per row.
    pub fn render(&self) -> String {
        let last = self.align.len().saturating_sub(1);
        let shown: Vec<Vec<std::borrow::Cow<'_, str>>> = self
            .rows
            .iter()
            .map(|r| {
                r.iter()
                    .enumerate()
                    .map(|(c, cell)| if c < last { cut(cell) } else { cell.into() })
                    .collect()
            })
            .collect();
        let widths: Vec<usize> = (0..self.align.len())
            .map(|c| {
                shown
                    .iter()
                    .map(|r| r[c].chars().count())
                    .max()
                    .unwrap_or(0)
            })
            .collect();
        let mut text = String::new();
        for row in &shown {
            let mut line = String::new();
            for (c, cell) in row.iter().enumerate() {
                if c > 0 {
                    line.push_str("  ");
                }
                // Padded by hand: `format!`'s width takes at most 65,535.
                let pad = " ".repeat(widths[c] - cell.chars().count());
                match self.align[c] {
                    Align::Left => {
                        line.push_str(cell);
                        line.push_str(&pad);
                    }
                    Align::Right => {
                        line.push_str(&pad);
                        line.push_str(cell);
                    }
                }
            }
            text.push_str(line.trim_end());
            text.push('\n');
        }
        text
    }

    /// The table in GitHub markdown: the first row is the header.
    pub fn render_markdown(&self) -> String {
        let line = |cells: &[String]| format!("| {} |\n", cells.join(" | "));
        let Some((header, body)) = self.rows.split_first() else {
            return String::new();
        };
        let rule: Vec<String> = self
            .align
            .iter()
            .map(|a| match a {
                Align::Left => "---".to_string(),
                Align::Right => "---:".to_string(),
            })
            .collect();
        let mut text = line(header);
        text.push_str(&line(&rule));
        for row in body {
            text.push_str(&line(row));
        }
        text
    }
}

/// One row of the metrics table: its label and how a policy's value reads.
type MetricRow = (&'static str, fn(&Metrics) -> String);

/// `x` written by `f`, or `-` when unknown (NaN: a daemon that does not send it).
fn known(x: f64, f: impl Fn(f64) -> String) -> String {
    if x.is_nan() {
        "-".into()
    } else {
        f(x)
    }
}

/// The metrics (formats.md §4) as a table: one row per metric, one column
/// per policy.
pub fn metrics_table(metrics: &[&Metrics]) -> Table {
    let fields: [MetricRow; 16] = [
        ("policy", |m| m.policy.clone()),
        ("tasks", |m| m.tasks.to_string()),
        ("rejected", |m| m.rejected.len().to_string()),
        ("twt", |m| format!("{:.3}", m.twt)),
        ("twct", |m| format!("{:.3}", m.twct)),
        ("act", |m| format!("{:.3}", m.act)),
        ("dmc", |m| m.dmc.to_string()),
        ("dmr", |m| format!("{:.4}", m.dmr)),
        ("utilization", |m| format!("{:.4}", m.utilization)),
        ("makespan", |m| format!("{:.3}", m.makespan)),
        ("energy_j", |m| format!("{:.1}", m.energy_j)),
        ("energy_run_j", |m| {
            known(m.energy_run_j, |x| format!("{x:.1}"))
        }),
        ("energy_idle_j", |m| {
            known(m.energy_idle_j, |x| format!("{x:.1}"))
        }),
        ("energy_overhead_j", |m| {
            known(m.energy_overhead_j, |x| format!("{x:.1}"))
        }),
        ("energy_baseline_j", |m| {
            known(m.energy_baseline_j, |x| format!("{x:.1}"))
        }),
        ("energy_saving", |m| {
            known(m.energy_saving, |x| format!("{x:.4}"))
        }),
    ];
    let mut align = vec![Align::Left];
    align.extend(std::iter::repeat_n(Align::Right, metrics.len()));
    let mut table = Table::new(&align);
    for (label, value) in fields {
        let mut row = vec![label.to_string()];
        row.extend(metrics.iter().map(|m| value(m)));
        table.row(row);
    }
    table
}

#[cfg(test)]
mod tests {
    use super::*;
    use gpu_agent_core::metrics::Rejection;

    #[test]
    fn columns_line_up_without_trailing_padding() {
        let mut t = Table::with_header(&[
            ("ID", Align::Left),
            ("N", Align::Right),
            ("NOTE", Align::Left),
        ]);
        t.row(vec!["a".into(), "1234".into(), "x".into()]);
        t.row(vec!["long-id".into(), "5".into(), String::new()]);
        assert_eq!(
            t.render(),
            "ID          N  NOTE\n\
             a        1234  x\n\
             long-id     5\n"
        );
    }

    /// A cell longer than `format!`'s widest width (65,535) panicked
    /// `gpuctl tasks` ("Formatting argument out of range"); a long cell is
    /// now cut outside the last column and kept whole in it.
    #[test]
    fn long_cells_are_cut_outside_the_last_column() {
        let long = "n".repeat(70_000);
        let mut t = Table::with_header(&[
            ("ID", Align::Left),
            ("NAME", Align::Left),
            ("N", Align::Right),
            ("NOTE", Align::Left),
        ]);
        t.row(vec!["t1".into(), long.clone(), "7".into(), long.clone()]);
        t.row(vec!["t2".into(), "ab".into(), "12".into(), "é".into()]);
        let text = t.render();
        let lines: Vec<&str> = text.lines().collect();
        let cut = format!("{}…", "n".repeat(MAX_CELL - 1));
        assert_eq!(
            lines[0],
            format!("ID  NAME{}   N  NOTE", " ".repeat(MAX_CELL - 4))
        );
        assert_eq!(lines[1], format!("t1  {cut}   7  {long}"));
        assert_eq!(
            lines[2],
            format!("t2  ab{}  12  é", " ".repeat(MAX_CELL - 2))
        );
    }

    #[test]
    fn markdown_marks_number_columns_right_aligned() {
        let mut t = Table::with_header(&[("metric", Align::Left), ("fifo", Align::Right)]);
        t.row(vec!["twt".into(), "1.500".into()]);
        assert_eq!(
            t.render_markdown(),
            "| metric | fifo |\n| --- | ---: |\n| twt | 1.500 |\n"
        );
    }

    #[test]
    fn metrics_table_has_one_column_per_policy() {
        let a = Metrics {
            policy: "fifo".into(),
            tasks: 3,
            rejected: vec![Rejection {
                id: "t3".into(),
                reason: "too big".into(),
            }],
            twt: 2.0,
            twct: 10.0,
            act: 3.0,
            dmc: 1,
            dmr: 0.5,
            utilization: 8.0 / 12.0,
            makespan: 4.0,
            energy_j: 40.0,
            energy_run_j: 30.0,
            energy_idle_j: 10.0,
            energy_overhead_j: 0.0,
            energy_baseline_j: 50.0,
            energy_saving: 0.2,
        };
        let b = Metrics {
            policy: "greedy-eft".into(),
            twt: 12.25,
            energy_j: 1234.5,
            energy_run_j: f64::NAN,
            ..a.clone()
        };
        assert_eq!(
            metrics_table(&[&a, &b]).render(),
            "policy               fifo  greedy-eft\n\
             tasks                   3           3\n\
             rejected                1           1\n\
             twt                 2.000      12.250\n\
             twct               10.000      10.000\n\
             act                 3.000       3.000\n\
             dmc                     1           1\n\
             dmr                0.5000      0.5000\n\
             utilization        0.6667      0.6667\n\
             makespan            4.000       4.000\n\
             energy_j             40.0      1234.5\n\
             energy_run_j         30.0           -\n\
             energy_idle_j        10.0        10.0\n\
             energy_overhead_j     0.0         0.0\n\
             energy_baseline_j    50.0        50.0\n\
             energy_saving      0.2000      0.2000\n"
        );
    }
}
