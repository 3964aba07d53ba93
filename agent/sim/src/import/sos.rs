//! The stochastic online scheduling (SOS) workload of the published SOS
//! software (`sim_5_machines.txt`): one job a line, whitespace-separated,
//! `weight p_0 .. p_{m-1} alpha_0 .. alpha_{m-1} release_tick`.
//!
//! Host: m identical devices (the machines are unrelated through the trace's
//! `runtimes` column, not through speeds). Trace: one task per job, run times
//! the p_i, arrival the release tick, deadline the arrival plus a slack factor
//! times the shortest p_i. Each alpha_i must be floor(0.6 p_i): the file was
//! made for the `sos` policy with α = 0.6. docs/import.md gives the reasons.

use std::io::BufRead;
use std::path::Path;

use serde::Serialize;

use super::{column_error, unreadable, Conversion, HostEntry, ImportError};
use crate::input::InputError;
use gpu_agent_core::catalogue;
use gpu_agent_core::TaskSpec;
use gpu_agent_plugin_api::AppModel;

/// The catalogue model of the host's identical devices.
pub const MODEL: &str = "V100-SXM2-32GB";

/// α of the `sos` policy the workload was made for, as tenths: alpha_i =
/// floor(6 p_i / 10).
pub const ALPHA_TENTHS: u64 = 6;

/// The default slack factor: deadline = arrival + slack × min_i p_i.
pub const DEFAULT_SLACK: f64 = 2.0;

/// How to convert.
#[derive(Debug, Clone, PartialEq)]
pub struct Options {
    /// Seconds per tick (> 0).
    pub tick_seconds: f64,
    /// Deadline slack factor (> 0).
    pub slack: f64,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            tick_seconds: 1.0,
            slack: DEFAULT_SLACK,
        }
    }
}

/// What was converted.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Summary {
    /// Jobs read (all become tasks).
    pub jobs: usize,
    /// Machines per job, hence devices in the host.
    pub machines: usize,
}

/// Reads `path` and converts it.
pub fn import(path: &Path, options: &Options) -> Result<(Conversion, Summary), ImportError> {
    let file = std::fs::File::open(path).map_err(|e| unreadable(path, e))?;
    convert(path, std::io::BufReader::new(file), options)
}

/// Converts the jobs read from `reader`; `path` only names it in errors.
/// Blank lines are ignored; the first job sets the number of machines.
pub fn convert(
    path: &Path,
    reader: impl BufRead,
    options: &Options,
) -> Result<(Conversion, Summary), ImportError> {
    for (option, value) in [
        ("--tick-seconds", options.tick_seconds),
        ("--slack", options.slack),
    ] {
        if !(value.is_finite() && value > 0.0) {
            return Err(ImportError::Option {
                option,
                message: format!("expected a number > 0, got {value}"),
            });
        }
    }
    let tick = options.tick_seconds;
    // (fields per line, the line that set it)
    let mut shape: Option<(usize, u64)> = None;
    let mut tasks = Vec::new();
    for (index, text) in reader.lines().enumerate() {
        let line = index as u64 + 1;
        let text = text.map_err(|e| {
            ImportError::from(InputError::at(
                path,
                Some(line),
                None,
                format!("cannot read: {e}"),
            ))
        })?;
        let fields: Vec<&str> = text.split_whitespace().collect();
        if fields.is_empty() {
            continue;
        }
        let (expected, first) = *shape.get_or_insert((fields.len(), line));
        if expected < 4 || expected % 2 != 0 {
            return Err(InputError::at(
                path,
                Some(line),
                None,
                format!(
                    "expected a weight, m processing times, m alphas and a release tick \
                     (an even number of fields, at least 4), got {expected}"
                ),
            )
            .into());
        }
        if fields.len() != expected {
            return Err(InputError::at(
                path,
                Some(line),
                None,
                format!(
                    "expected {expected} fields like line {first}, got {}",
                    fields.len()
                ),
            )
            .into());
        }
        let m = (expected - 2) / 2;
        let integer = |i: usize, column: &str, min: u64| {
            let text = fields[i];
            match text.parse::<u64>() {
                Ok(x) if x >= min => Ok(x),
                _ => Err(column_error(
                    path,
                    line,
                    column,
                    format!("expected an integer >= {min}, got {text:?}"),
                )),
            }
        };
        let weight = match fields[0].parse::<f64>() {
            Ok(w) if w.is_finite() && w > 0.0 => w,
            _ => {
                return Err(column_error(
                    path,
                    line,
                    "weight",
                    format!("expected a number > 0, got {:?}", fields[0]),
                ))
            }
        };
        let mut p = Vec::with_capacity(m);
        for i in 0..m {
            p.push(integer(1 + i, &format!("p_{i}"), 1)?);
        }
        for (i, &p_i) in p.iter().enumerate() {
            let alpha = integer(1 + m + i, &format!("alpha_{i}"), 0)?;
            let expected = (u128::from(ALPHA_TENTHS) * u128::from(p_i) / 10) as u64;
            if alpha != expected {
                return Err(column_error(
                    path,
                    line,
                    &format!("alpha_{i}"),
                    format!(
                        "expected floor(0.{ALPHA_TENTHS} × p_{i}) = {expected} (the workload is for α = 0.{ALPHA_TENTHS}), got {alpha}"
                    ),
                ));
            }
        }
        let release = integer(1 + 2 * m, "release_tick", 0)?;
        let shortest = *p.iter().min().expect("at least one machine");
        let arrival = release as f64 * tick;
        tasks.push(TaskSpec {
            id: format!("j{line}"),
            arrival,
            workload: shortest as f64 * tick,
            mem_gb: 0.0,
            deadline: arrival + options.slack * shortest as f64 * tick,
            weight,
            gpus: 1,
            alt_gpus: Vec::new(),
            runtimes: p.iter().map(|&p_i| p_i as f64 * tick).collect(),
            app: AppModel::builtin_default(),
        });
    }
    let machines = shape.map_or(0, |(fields, _)| (fields - 2) / 2);
    let model = catalogue::lookup(MODEL).expect("MODEL is in the catalogue");
    let host = if machines == 0 {
        Vec::new()
    } else {
        vec![HostEntry {
            note: format!(
                "{machines} identical machines; the trace's runtimes make them unrelated"
            ),
            model,
            count: machines as u32,
            speed: 1.0,
            mem_gb: None,
        }]
    };
    let summary = Summary {
        jobs: tasks.len(),
        machines,
    };
    Ok((
        Conversion {
            host_header:
                "# Converted by `gpuctl trace import sos` (/usr/share/doc/gpu-agent/import.md).\n"
                    .into(),
            host,
            tasks,
        },
        summary,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use gpu_agent_core::apps::AppLibrary;

    fn convert_text(text: &str, options: &Options) -> Result<(Conversion, Summary), String> {
        convert(Path::new("jobs.txt"), text.as_bytes(), options).map_err(|e| e.to_string())
    }

    /// The first two lines of sim_5_machines.txt and a later release.
    const JOBS: &str = "87 73 170 16 109 190 43 102 9 65 114 0\n\
                        22 22 65 122 135 251 13 39 73 81 150 0\n\
                        \n\
                        5 10 11 12 13 14 6 6 7 7 8 3\n";

    #[test]
    fn jobs_become_tasks_with_one_run_time_per_machine() {
        let (c, summary) = convert_text(JOBS, &Options::default()).unwrap();
        assert_eq!(
            summary,
            Summary {
                jobs: 3,
                machines: 5
            }
        );
        assert_eq!(
            c.trace_csv(),
            "id,arrival,workload,mem_gb,deadline,weight,gpus,runtimes\n\
             j1,0,16,0,32,87,1,73;170;16;109;190\n\
             j2,0,22,0,44,22,1,22;65;122;135;251\n\
             j4,3,10,0,23,5,1,10;11;12;13;14\n"
        );
        assert_eq!(
            c.host_toml(),
            "# Converted by `gpuctl trace import sos` (/usr/share/doc/gpu-agent/import.md).\n\
             \n# 5 identical machines; the trace's runtimes make them unrelated\n\
             [[gpu]]\nmodel = \"V100-SXM2-32GB\"\ncount = 5\nspeed = 1.0\n"
        );
        let (_, trace) = c.read_back(&AppLibrary::default()).unwrap();
        assert_eq!(
            trace.tasks[2].spec.runtimes,
            vec![10.0, 11.0, 12.0, 13.0, 14.0]
        );
    }

    #[test]
    fn ticks_scale_every_time_and_slack_the_deadline() {
        let options = Options {
            tick_seconds: 0.5,
            slack: 3.0,
        };
        let (c, _) = convert_text("5 10 11 12 13 14 6 6 7 7 8 3\n", &options).unwrap();
        assert_eq!(
            c.trace_csv(),
            "id,arrival,workload,mem_gb,deadline,weight,gpus,runtimes\n\
             j1,1.5,5,0,16.5,5,1,5;5.5;6;6.5;7\n"
        );
        let bad = Options {
            tick_seconds: -1.0,
            ..Options::default()
        };
        assert_eq!(
            convert_text(JOBS, &bad).unwrap_err(),
            "--tick-seconds: expected a number > 0, got -1"
        );
    }

    #[test]
    fn bad_lines_are_named() {
        let first = "87 73 170 16 109 190 43 102 9 65 114 0\n";
        let cases = [
            (
                "5 10 11 12 13 14 6 6 7 7 9 3\n",
                "jobs.txt:2: column alpha_4: expected floor(0.6 × p_4) = 8 (the workload is for α = 0.6), got 9",
            ),
            (
                "5 18446744073709551615 11 12 13 14 0 6 7 7 8 3\n",
                "jobs.txt:2: column alpha_0: expected floor(0.6 × p_0) = 11068046444225730969 (the workload is for α = 0.6), got 0",
            ),
            (
                "5 10 11 x 13 14 6 6 7 7 8 3\n",
                "jobs.txt:2: column p_2: expected an integer >= 1, got \"x\"",
            ),
            (
                "5 0 11 12 13 14 0 6 7 7 8 3\n",
                "jobs.txt:2: column p_0: expected an integer >= 1, got \"0\"",
            ),
            (
                "0 10 11 12 13 14 6 6 7 7 8 3\n",
                "jobs.txt:2: column weight: expected a number > 0, got \"0\"",
            ),
            (
                "5 10 11 12 13 14 6 6 7 7 8 -3\n",
                "jobs.txt:2: column release_tick: expected an integer >= 0, got \"-3\"",
            ),
            (
                "5 10 11 12 13 14 6 6 7 7 8\n",
                "jobs.txt:2: expected 12 fields like line 1, got 11",
            ),
        ];
        for (line, expected) in cases {
            assert_eq!(
                convert_text(&format!("{first}{line}"), &Options::default()).unwrap_err(),
                expected
            );
        }
        assert_eq!(
            convert_text("1 2 3\n", &Options::default()).unwrap_err(),
            "jobs.txt:1: expected a weight, m processing times, m alphas and a release tick \
             (an even number of fields, at least 4), got 3"
        );
    }
}
