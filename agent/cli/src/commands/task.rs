//! `gpuctl task`: one task in full.

use anyhow::Result;
use gpu_agent_dbus::{TaskInfo, TaskStatus};

use super::tasks::{or_dash, task, task_id, user_name};
use crate::client::{block_on, BusArgs, Client};
use crate::clock::Clock;
use crate::output::{emit, emit_json};
use crate::table::{Align, Table};
use crate::units;

/// Show one task in full: state, times, devices, what was submitted and
/// where its output goes.
#[derive(clap::Args)]
#[command(after_help = "Examples:\n  gpuctl task t42\n  gpuctl task 42")]
pub struct Args {
    /// The task's id (as `gpuctl submit` printed it; the `t` may be left out).
    #[arg(value_parser = task_id)]
    id: String,
    #[command(flatten)]
    bus: BusArgs,
    /// Print the task as a JSON object.
    #[arg(long)]
    json: bool,
}

/// The most environment variables `gpuctl task` lists; beyond, it counts
/// them (a submission exports the caller's whole environment).
const ENV_SHOWN: usize = 8;

/// Prints one task.
pub fn run(args: Args) -> Result<()> {
    let dict = block_on(async {
        let client = Client::connect(&args.bus).await?;
        client.call(client.agent.get_task(&args.id)).await
    })?;
    let task = task(&dict)?;
    if args.json {
        emit_json(&task)?;
    } else {
        emit(&task_text(&task, &Clock::system(), user_name))?;
    }
    Ok(())
}

/// A command line as a shell would read it back.
fn shell_line(argv: &[String]) -> String {
    let word = |w: &String| {
        let plain = !w.is_empty()
            && w.bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"-_./=:,+@%".contains(&b));
        if plain {
            w.clone()
        } else {
            format!("'{}'", w.replace('\'', r"'\''"))
        }
    };
    argv.iter().map(word).collect::<Vec<_>>().join(" ")
}

/// Every field of one task, one per line; `owner` names a uid.
fn task_text(t: &TaskInfo, clock: &Clock, owner: impl Fn(u32) -> String) -> String {
    let s = &t.spec;
    let mut rows: Vec<(&str, String)> = vec![
        ("id", t.id.clone()),
        ("name", or_dash(&s.name)),
        ("state", t.state.to_string()),
        ("reason", t.reason.clone().unwrap_or_else(|| "-".into())),
        (
            "owner",
            format!("{} (uid {})", owner(t.owner_uid), t.owner_uid),
        ),
        (
            "devices",
            or_dash(
                &t.devices
                    .iter()
                    .map(u32::to_string)
                    .collect::<Vec<_>>()
                    .join(", "),
            ),
        ),
        ("submitted", clock.long(t.submitted)),
    ];
    if let Some(w) = &t.waiting {
        rows.push(("waiting", w.reason.clone()));
        rows.push((
            "expected start",
            w.expected_start
                .map_or_else(|| "- (no plan places it yet)".into(), |at| clock.long(at)),
        ));
    }
    let started = t.started.map_or_else(
        || "-".into(),
        |at| {
            format!(
                "{}, queued {}",
                clock.long(at),
                units::duration(at - t.submitted)
            )
        },
    );
    rows.push(("started", started));
    let finished = match (t.finished, t.started) {
        (None, _) => "-".into(),
        (Some(at), Some(start)) => {
            format!("{}, ran {}", clock.long(at), units::duration(at - start))
        }
        (Some(at), None) => clock.long(at),
    };
    rows.push(("finished", finished));
    rows.push((
        "exit code",
        t.exit_code.map_or_else(|| "-".into(), |c| c.to_string()),
    ));
    rows.push((
        "energy",
        t.energy_j.map_or_else(|| "-".into(), units::energy),
    ));
    if let Some(c) = &t.clocks {
        let how = match (&c.class, c.readjusted) {
            (Some(class), Some(true)) => format!(", {class}-prior, readjusted"),
            (Some(class), _) => format!(", {class}-prior"),
            _ => String::new(),
        };
        rows.push((
            "clocks",
            format!(
                "core {} MHz, memory {} MHz (fc {:.3}, fm {:.3}, V {:.3}){how}",
                c.core_mhz, c.mem_mhz, c.fc, c.fm, c.v
            ),
        ));
        rows.push((
            "model",
            format!(
                "{} at {:.1} W; at default clocks {} at {:.1} W",
                units::duration(c.t),
                c.p,
                units::duration(c.default_t),
                c.default_p
            ),
        ));
    }
    let deadline = match s.deadline {
        Some(deadline) => {
            let due = t.submitted + deadline;
            let verdict = match t.finished {
                Some(end) if t.state == TaskStatus::Succeeded && end <= due => ", met".to_string(),
                Some(end) if t.state == TaskStatus::Succeeded => {
                    format!(", missed by {}", units::duration(end - due))
                }
                _ => String::new(),
            };
            format!(
                "{} after submission: {}{verdict}",
                units::duration(deadline),
                clock.long(due)
            )
        }
        None => "- (never late)".into(),
    };
    if !s.external_id.is_empty() {
        // An outside scheduler's job: no workload, command or queue of ours.
        rows.extend([
            (
                "adopted",
                format!(
                    "{} (placed by an outside scheduler; gpuctl release ends it)",
                    s.external_id
                ),
            ),
            ("deadline", deadline),
            ("app", s.app.clone()),
        ]);
        return two_columns(rows);
    }
    rows.extend([
        ("workload", format!("{} work units", s.workload)),
        ("memory", format!("{} GB per device", s.mem_gb)),
        ("deadline", deadline),
        ("weight", s.weight.to_string()),
        (
            "gpus",
            if s.gpus_alt.is_empty() {
                s.gpus.to_string()
            } else {
                let alt: Vec<String> = s.gpus_alt.iter().map(u32::to_string).collect();
                format!("{} (or {})", s.gpus, alt.join(", "))
            },
        ),
        ("app", s.app.clone()),
    ]);
    let runtimes: Vec<String> = s
        .runtimes
        .iter()
        .enumerate()
        .map(|(device, r)| format!("{device}: {}", units::duration(*r)))
        .collect();
    rows.push((
        "runtimes",
        if runtimes.is_empty() {
            "- (workload / speed)".into()
        } else {
            runtimes.join(", ")
        },
    ));
    rows.push((
        "command",
        if s.command.is_empty() {
            "- (simulated)".into()
        } else {
            shell_line(&s.command)
        },
    ));
    if !s.command.is_empty() {
        let home = "- (the owner's home directory)";
        rows.push((
            "workdir",
            if s.workdir.is_empty() {
                home.into()
            } else {
                s.workdir.clone()
            },
        ));
        let log = "- (the daemon's log: the journal, or its state directory's logs/)";
        rows.push((
            "output",
            if s.output.is_empty() {
                log.into()
            } else {
                s.output.clone()
            },
        ));
        if !s.error.is_empty() {
            rows.push(("error", s.error.clone()));
        }
    }
    let env = if s.env.len() > ENV_SHOWN {
        format!("{} variables (--json lists them)", s.env.len())
    } else {
        let env: Vec<String> = s
            .env
            .iter()
            .map(|(k, v)| shell_line(&[format!("{k}={v}")]))
            .collect();
        or_dash(&env.join(" "))
    };
    rows.push(("env", env));
    rows.push(("requeue", if s.requeue { "yes" } else { "no" }.into()));
    two_columns(rows)
}

/// Key-value rows as two aligned columns.
fn two_columns(rows: Vec<(&str, String)>) -> String {
    let mut table = Table::new(&[Align::Left, Align::Left]);
    for (key, value) in rows {
        table.row(vec![key.to_string(), value]);
    }
    table.render()
}

#[cfg(test)]
mod tests {
    use gpu_agent_dbus::SubmitSpec;

    use super::super::tasks::fixtures::*;
    use super::super::tasks::tasks_table;
    use super::*;

    #[test]
    fn an_adopted_job_shows_as_adopted_without_a_workload() {
        let mut t = done();
        t.spec = SubmitSpec::new(600.0, 0.0, 600.0, 1.0);
        t.spec.external_id = "slurm:4242".into();
        t.spec.name = "slurm:4242".into();
        t.spec.app = "BlackScholes".into();
        let text = task_text(&t, &clock(), name);
        assert!(
            text.contains("adopted    slurm:4242 (placed by an outside scheduler"),
            "{text}"
        );
        assert!(text.contains("app        BlackScholes"), "{text}");
        for absent in ["workload", "simulated", "command", "runtimes"] {
            assert!(!text.contains(absent), "{absent} in {text}");
        }
        let table = tasks_table(&[t], &clock(), name);
        assert!(table.contains("succeeded (adopted)"), "{table}");
    }

    #[test]
    fn a_task_shows_every_field() {
        assert_eq!(
            task_text(&done(), &clock(), name),
            "id         t42\n\
             name       train\n\
             state      succeeded\n\
             reason     -\n\
             owner      alice (uid 1000)\n\
             devices    0, 1\n\
             submitted  2024-03-14 09:26:53 (5m ago)\n\
             started    2024-03-14 09:26:54 (4m59s ago), queued 1.5s\n\
             finished   2024-03-14 09:28:54 (2m59s ago), ran 2m\n\
             exit code  0\n\
             energy     12.35 kJ\n\
             workload   12.5 work units\n\
             memory     30 GB per device\n\
             deadline   10m after submission: 2024-03-14 09:36:53 (in 5m), met\n\
             weight     2\n\
             gpus       2 (or 1)\n\
             app        nbody\n\
             runtimes   0: 10s, 1: inf\n\
             command    /bin/sh -c 'echo '\\''hi'\\'' $X'\n\
             workdir    /home/alice/proj\n\
             output     /home/alice/proj/gpu-agent-t3.out\n\
             env        'A=b c' X=1\n\
             requeue    yes\n"
        );
    }

    #[test]
    fn a_queued_task_shows_dashes() {
        let text = task_text(&queued(), &clock(), name);
        for line in [
            "owner      root (uid 0)\n",
            "devices    -\n",
            "started    -\n",
            "finished   -\n",
            "exit code  -\n",
            "deadline   1m30s after submission: 2024-03-13 09:28:23 (1d ago)\n",
            "runtimes   - (workload / speed)\n",
            "command    - (simulated)\n",
            "env        -\n",
        ] {
            assert!(text.contains(line), "{line:?} not in\n{text}");
        }
    }

    #[test]
    fn a_waiting_task_says_why_and_when_it_starts() {
        let behind = TaskInfo {
            state: TaskStatus::Assigned,
            waiting: Some(gpu_agent_dbus::TaskWait {
                reason: "queued on GPU 1 behind t42".into(),
                expected_start: Some(T + 600.0),
            }),
            ..queued()
        };
        let text = task_text(&behind, &clock(), name);
        for line in [
            "waiting         queued on GPU 1 behind t42\n",
            "expected start  2024-03-14 09:36:53 (in 5m)\n",
        ] {
            assert!(text.contains(line), "{line:?} not in\n{text}");
        }
        let unplanned = TaskInfo {
            waiting: Some(gpu_agent_dbus::TaskWait {
                reason: "GPU 0 draining for a MIG change".into(),
                expected_start: None,
            }),
            ..queued()
        };
        let text = task_text(&unplanned, &clock(), name);
        assert!(
            text.contains("expected start  - (no plan places it yet)\n"),
            "{text}"
        );
        assert!(!task_text(&queued(), &clock(), name).contains("waiting"));
    }
}
