//! `gpuctl tasks`: the daemon's tasks, one row each; and what the task
//! commands share (which tasks, ids, owners, the table).

use std::collections::HashMap;

use anyhow::{anyhow, Result};
use gpu_agent_dbus::{Dict, TaskInfo, TaskStatus};
use nix::unistd::{Uid, User};

use crate::client::{block_on, BusArgs, Client};
use crate::clock::Clock;
use crate::colour;
use crate::output::{emit, emit_json};
use crate::table::{Align, Table};
use crate::units::{self, FromNow};

/// List the daemon's tasks, oldest first.
///
/// Times are local: the time of day for today, the date otherwise. A task
/// that has not started shows why it waits in place of its devices, and in
/// STARTED, after a `~`, when the policy's current plan starts it.
#[derive(clap::Args)]
#[command(
    after_help = "Examples:\n  gpuctl tasks\n  gpuctl tasks --state running,queued --user alice --since 1h\n  gpuctl tasks --state running --json"
)]
pub struct Args {
    #[command(flatten)]
    filter: Filter,
    /// Only tasks submitted since WHEN: a duration ago (90s, 10m, 2h, 1h30m)
    /// or an RFC 3339 time (2026-11-28T06:00:00Z, 2026-11-28T07:00:00+01:00).
    #[arg(long, value_name = "WHEN", value_parser = since)]
    since: Option<f64>,
    #[command(flatten)]
    bus: BusArgs,
    /// Print a JSON array of task objects.
    #[arg(long)]
    json: bool,
}

/// Which tasks a command is about.
#[derive(clap::Args)]
pub(crate) struct Filter {
    /// Only tasks in these states, comma-separated: queued, assigned,
    /// running, succeeded, failed, cancelled, lost, rejected.
    #[arg(
        long,
        value_name = "STATE,...",
        value_delimiter = ',',
        value_parser = TaskStatus::parse
    )]
    pub(crate) state: Vec<TaskStatus>,
    /// Only tasks of this user (login name or uid).
    #[arg(long, value_name = "USER", value_parser = uid_of)]
    pub(crate) user: Option<u32>,
}

impl Filter {
    /// The tasks the daemon holds that pass the filter, oldest first.
    pub(crate) async fn tasks(&self, client: &Client) -> Result<Vec<TaskInfo>> {
        // One state is filtered by the daemon, several here.
        let asked = match self.state.as_slice() {
            [one] => one.as_str(),
            _ => "",
        };
        let tasks = client.call(client.agent.all_tasks(asked)).await?;
        let mut out = Vec::new();
        for dict in &tasks {
            let t = task(dict)?;
            if self.passes(&t) {
                out.push(t);
            }
        }
        Ok(out)
    }

    fn passes(&self, t: &TaskInfo) -> bool {
        (self.state.is_empty() || self.state.contains(&t.state))
            && self.user.is_none_or(|uid| uid == t.owner_uid)
    }
}

/// A uid from a login name or a number.
fn uid_of(text: &str) -> Result<u32, String> {
    if let Ok(uid) = text.parse() {
        return Ok(uid);
    }
    match User::from_name(text) {
        Ok(Some(user)) => Ok(user.uid.as_raw()),
        Ok(None) => Err(format!("no user named {text:?} on this host")),
        Err(e) => Err(format!("cannot look up user {text:?}: {e}")),
    }
}

/// `--since`: unix seconds, from a duration ago or a time.
fn since(text: &str) -> Result<f64, String> {
    units::parse_time(text, Clock::system().now, FromNow::Before)
}

/// A task id as the daemon names it: `42` is `t42`.
pub(crate) fn task_id(text: &str) -> Result<String, String> {
    if text.is_empty() {
        return Err("expected a task id such as t42".into());
    }
    if text.bytes().all(|b| b.is_ascii_digit()) {
        Ok(format!("t{text}"))
    } else {
        Ok(text.to_string())
    }
}

/// Reads the daemon's task dictionary.
pub(crate) fn task(dict: &Dict) -> Result<TaskInfo> {
    TaskInfo::from_dict(dict).map_err(|e| anyhow!("the daemon sent a bad task: {e}"))
}

/// Prints the tasks.
pub fn run(args: Args) -> Result<()> {
    let mut tasks = block_on(async {
        let client = Client::connect(&args.bus).await?;
        args.filter.tasks(&client).await
    })?;
    if let Some(from) = args.since {
        tasks.retain(|t| t.submitted >= from);
    }
    if args.json {
        emit_json(&tasks)?;
    } else {
        let mut names = HashMap::new();
        let owner = |uid| names.entry(uid).or_insert_with(|| user_name(uid)).clone();
        let clock = Clock::system();
        let table = tasks_table(&tasks, &clock, owner);
        if colour::enabled() {
            let tones: Vec<_> = tasks
                .iter()
                .map(|t| colour::of_task(t, clock.now))
                .collect();
            emit(&colour::paint_rows(&table, &tones))?;
        } else {
            emit(&table)?;
        }
    }
    Ok(())
}

/// The login name of `uid`, or the number when it has none.
pub(crate) fn user_name(uid: u32) -> String {
    match User::from_uid(Uid::from_raw(uid)) {
        Ok(Some(user)) => user.name,
        _ => uid.to_string(),
    }
}

/// `-` for an empty text.
pub(crate) fn or_dash(text: &str) -> String {
    if text.is_empty() {
        "-".into()
    } else {
        text.into()
    }
}

/// The tasks as a table, one row each; `owner` names a uid.
pub(crate) fn tasks_table(
    tasks: &[TaskInfo],
    clock: &Clock,
    mut owner: impl FnMut(u32) -> String,
) -> String {
    use Align::{Left, Right};
    let mut table = Table::with_header(&[
        ("ID", Left),
        ("NAME", Left),
        ("STATE", Left),
        ("OWNER", Left),
        ("SUBMITTED", Left),
        ("STARTED", Left),
        ("FINISHED", Left),
        ("EXIT", Right),
        ("ENERGY", Right),
        ("DEVICES (REASON)", Left),
    ]);
    let time = |t: Option<f64>| t.map_or_else(|| "-".into(), |t| clock.short(t));
    for t in tasks {
        let devices: Vec<String> = t.devices.iter().map(u32::to_string).collect();
        // As squeue: a waiting task's reason where its devices would be.
        let (started, devices) = match &t.waiting {
            Some(w) => (
                w.expected_start
                    .map_or_else(|| "-".into(), |at| format!("~{}", clock.short(at))),
                format!("({})", w.reason),
            ),
            None => (time(t.started), or_dash(&devices.join(","))),
        };
        let state = if t.spec.external_id.is_empty() {
            t.state.to_string()
        } else {
            format!("{} (adopted)", t.state)
        };
        table.row(vec![
            t.id.clone(),
            or_dash(&t.spec.name),
            state,
            owner(t.owner_uid),
            time(Some(t.submitted)),
            started,
            time(t.finished),
            t.exit_code.map_or_else(|| "-".into(), |c| c.to_string()),
            t.energy_j.map_or_else(|| "-".into(), units::energy),
            devices,
        ]);
    }
    table.render()
}

/// Tasks and a clock the commands' tests share.
#[cfg(test)]
pub(crate) mod fixtures {
    use super::*;
    use gpu_agent_dbus::SubmitSpec;
    use std::collections::BTreeMap;

    /// 2024-03-14 09:26:53 UTC.
    pub(crate) const T: f64 = 1_710_408_413.0;

    pub(crate) fn clock() -> Clock {
        Clock {
            now: T + 300.0,
            utc_offset: |_| 0,
        }
    }

    pub(crate) fn done() -> TaskInfo {
        TaskInfo {
            id: "t42".into(),
            state: TaskStatus::Succeeded,
            owner_uid: 1000,
            devices: vec![0, 1],
            submitted: T,
            started: Some(T + 1.5),
            finished: Some(T + 121.5),
            exit_code: Some(0),
            energy_j: Some(12_346.0),
            reason: None,
            spec: SubmitSpec {
                workload: 12.5,
                mem_gb: 30.0,
                deadline: Some(600.0),
                weight: 2.0,
                gpus: 2,
                gpus_alt: vec![1],
                app: "nbody".into(),
                runtimes: vec![10.0, f64::INFINITY],
                command: vec!["/bin/sh".into(), "-c".into(), "echo 'hi' $X".into()],
                env: BTreeMap::from([("A".into(), "b c".into()), ("X".into(), "1".into())]),
                name: "train".into(),
                requeue: true,
                client_token: String::new(),
                external_id: String::new(),
                workdir: "/home/alice/proj".into(),
                output: "/home/alice/proj/gpu-agent-t3.out".into(),
                error: String::new(),
                umask: Some(0o022),
            },
            clocks: None,
            waiting: None,
        }
    }

    pub(crate) fn queued() -> TaskInfo {
        TaskInfo {
            id: "t7".into(),
            state: TaskStatus::Queued,
            owner_uid: 0,
            devices: vec![],
            submitted: T - 86_400.0,
            started: None,
            finished: None,
            exit_code: None,
            energy_j: None,
            reason: None,
            spec: SubmitSpec::new(1.0, 0.0, 90.0, 1.0),
            clocks: None,
            waiting: None,
        }
    }

    pub(crate) fn name(uid: u32) -> String {
        match uid {
            0 => "root".into(),
            _ => "alice".into(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::fixtures::*;
    use super::*;

    #[test]
    fn the_table_has_a_row_per_task() {
        let assigned = TaskInfo {
            id: "t8".into(),
            state: TaskStatus::Assigned,
            waiting: Some(gpu_agent_dbus::TaskWait {
                reason: "queued on GPU 1 behind t42".into(),
                expected_start: Some(T + 600.0),
            }),
            ..queued()
        };
        let offline = TaskInfo {
            id: "t9".into(),
            waiting: Some(gpu_agent_dbus::TaskWait {
                reason: "GPU 2 offline (xid 79: GPU has fallen off the bus)".into(),
                expected_start: None,
            }),
            ..queued()
        };
        assert_eq!(
            tasks_table(&[queued(), done(), assigned, offline], &clock(), name),
            "ID   NAME   STATE      OWNER  SUBMITTED   STARTED    FINISHED  EXIT    ENERGY  DEVICES (REASON)\n\
             t7   -      queued     root   2024-03-13  -          -            -         -  -\n\
             t42  train  succeeded  alice  09:26:53    09:26:54   09:28:54     0  12.35 kJ  0,1\n\
             t8   -      assigned   root   2024-03-13  ~09:36:53  -            -         -  (queued on GPU 1 behind t42)\n\
             t9   -      queued     root   2024-03-13  -          -            -         -  (GPU 2 offline (xid 79: GPU has fallen off the bus))\n"
        );
    }

    #[test]
    fn ids_may_leave_out_their_t() {
        assert_eq!(task_id("18"), Ok("t18".into()));
        assert_eq!(task_id("t18"), Ok("t18".into()));
        assert_eq!(task_id("x1"), Ok("x1".into()));
        assert!(task_id("").is_err());
    }
}
