//! `gpuctl tasks`, `task`, `cancel` and `watch`: the daemon's tasks.

use std::collections::HashMap;

use anyhow::{anyhow, Context, Result};
use futures_util::StreamExt;
use gpu_agent_dbus::{Dict, TaskInfo, TaskStatus, OUTPUT_READ_MAX};
use nix::unistd::{Uid, User};
use serde::Serialize;

use crate::client::{block_on, exit_status, BusArgs, Client, Failure, DAEMON_ERROR};
use crate::clock::Clock;
use crate::colour;
use crate::table::{Align, Table};
use crate::units;
use crate::{emit, emit_bytes, emit_json};

/// List the daemon's tasks, oldest first.
///
/// Times are local: the time of day for today, the date otherwise. A task
/// that has not started shows why it waits in place of its devices, and in
/// STARTED, after a `~`, when the policy's current plan starts it.
#[derive(clap::Args)]
#[command(
    after_help = "Examples:\n  gpuctl tasks\n  gpuctl tasks --state running,queued --user alice --since 1h\n  gpuctl tasks --state running --json"
)]
pub struct ListArgs {
    #[command(flatten)]
    filter: Filter,
    /// Only tasks submitted in the last DURATION (90s, 10m, 2h, 1h30m).
    #[arg(long, value_name = "DURATION", value_parser = units::parse_duration)]
    since: Option<f64>,
    #[command(flatten)]
    bus: BusArgs,
    /// Print a JSON array of task objects.
    #[arg(long)]
    json: bool,
}

/// Show one task in full: state, times, devices, what was submitted and
/// where its output goes.
#[derive(clap::Args)]
#[command(after_help = "Examples:\n  gpuctl task t42\n  gpuctl task 42")]
pub struct ShowArgs {
    /// The task's id (as `gpuctl submit` printed it; the `t` may be left out).
    #[arg(value_parser = task_id)]
    id: String,
    #[command(flatten)]
    bus: BusArgs,
    /// Print the task as a JSON object.
    #[arg(long)]
    json: bool,
}

/// Cancel queued or running tasks (a running one's processes are killed).
///
/// The tasks are named, or chosen with --state and --user (as scancel:
/// without --state, every task of theirs that has not ended). Each task is
/// cancelled on its own: one that cannot be (ended already, another's,
/// unknown) is named on stderr with the daemon's reason, the others are
/// cancelled, and the exit status is not 0.
#[derive(clap::Args)]
#[command(
    after_help = "Examples:\n  gpuctl cancel t42\n  gpuctl cancel t42 t43 44\n  gpuctl cancel --state queued --user alice"
)]
pub struct CancelArgs {
    /// The tasks' ids (the `t` may be left out).
    #[arg(required_unless_present_any = ["state", "user"], value_parser = task_id)]
    ids: Vec<String>,
    #[command(flatten)]
    filter: Filter,
    #[command(flatten)]
    bus: BusArgs,
}

/// Print a task's output: what its command wrote to stdout and stderr.
///
/// For its owner and admins only. The output is read by the daemon (as the
/// task's owner, from the task's output file, or from the journal or the
/// daemon's log for a task submitted without one); with --error, stderr is
/// in its own file, which `gpuctl task` names.
#[derive(clap::Args)]
#[command(
    after_help = "Examples:\n  gpuctl logs t42\n  gpuctl logs -f 42\n  gpuctl logs --tail 20 t42"
)]
pub struct LogsArgs {
    /// The task's id (the `t` may be left out).
    #[arg(value_parser = task_id)]
    id: String,
    /// Follow the output while the task runs (or waits), until it ends.
    #[arg(long, short = 'f')]
    follow: bool,
    /// Only the last N lines (then new ones, with --follow).
    #[arg(long, short = 'n', value_name = "N")]
    tail: Option<usize>,
    #[command(flatten)]
    bus: BusArgs,
}

/// Which tasks a command is about.
#[derive(clap::Args)]
struct Filter {
    /// Only tasks in these states, comma-separated: queued, assigned,
    /// running, succeeded, failed, cancelled, lost, rejected.
    #[arg(
        long,
        value_name = "STATE,...",
        value_delimiter = ',',
        value_parser = TaskStatus::parse
    )]
    state: Vec<TaskStatus>,
    /// Only tasks of this user (login name or uid).
    #[arg(long, value_name = "USER", value_parser = uid_of)]
    user: Option<u32>,
}

impl Filter {
    /// The tasks the daemon holds that pass the filter, oldest first.
    async fn tasks(&self, client: &Client) -> Result<Vec<TaskInfo>> {
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

/// A task id as the daemon names it: `42` is `t42`.
fn task_id(text: &str) -> Result<String, String> {
    if text.is_empty() {
        return Err("expected a task id such as t42".into());
    }
    if text.bytes().all(|b| b.is_ascii_digit()) {
        Ok(format!("t{text}"))
    } else {
        Ok(text.to_string())
    }
}

/// Follow task changes live: one line per change, `TIME ID STATE`, until
/// Ctrl-C.
#[derive(clap::Args)]
#[command(after_help = "Examples:\n  gpuctl watch\n  gpuctl watch --json | jq .")]
pub struct WatchArgs {
    #[command(flatten)]
    bus: BusArgs,
    /// Print one JSON object per line: {"time": unix seconds, "id": ..., "state": ...}.
    #[arg(long)]
    json: bool,
}

/// The most environment variables `gpuctl task` lists; beyond, it counts
/// them (a submission exports the caller's whole environment).
const ENV_SHOWN: usize = 8;

/// Reads the daemon's task dictionary.
pub(crate) fn task(dict: &Dict) -> Result<TaskInfo> {
    TaskInfo::from_dict(dict).map_err(|e| anyhow!("the daemon sent a bad task: {e}"))
}

/// Prints the tasks.
pub fn list(args: ListArgs) -> Result<()> {
    let mut tasks = block_on(async {
        let client = Client::connect(&args.bus).await?;
        args.filter.tasks(&client).await
    })?;
    if let Some(since) = args.since {
        let from = Clock::system().now - since;
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

/// Prints one task.
pub fn show(args: ShowArgs) -> Result<()> {
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

/// Cancels each task, naming on stderr each one that was not.
pub fn cancel(args: CancelArgs) -> Result<()> {
    let CancelArgs {
        ids,
        mut filter,
        bus,
    } = args;
    let chosen = !filter.state.is_empty() || filter.user.is_some();
    let (ids, refused) = block_on(async {
        let client = Client::connect(&bus).await?;
        let ids = if chosen {
            if filter.state.is_empty() {
                filter.state = vec![
                    TaskStatus::Queued,
                    TaskStatus::Assigned,
                    TaskStatus::Running,
                ];
            }
            // Named ones too, when both are given: those that pass the filter.
            let chosen: Vec<String> = filter
                .tasks(&client)
                .await?
                .into_iter()
                .map(|t| t.id)
                .filter(|id| ids.is_empty() || ids.contains(id))
                .collect();
            for id in &chosen {
                println!("cancelling {id}");
            }
            chosen
        } else {
            ids
        };
        let mut refused = Vec::new();
        for id in &ids {
            if let Err(e) = client.call(client.agent.cancel(id)).await {
                if ids.len() > 1 || chosen {
                    eprintln!("gpuctl: {id} not cancelled: {e:#}");
                }
                refused.push((id.clone(), e));
            }
        }
        Ok((ids, refused))
    })?;
    match refused.len() {
        0 => Ok(()),
        // One task named: its own error, and its exit status.
        1 if ids.len() == 1 && !chosen => Err(refused.into_iter().next().expect("one").1),
        n => {
            let names: Vec<&str> = refused.iter().map(|(id, _)| id.as_str()).collect();
            // Their own status when they agree (all refused the caller, say).
            let statuses: Vec<u8> = refused.iter().map(|(_, e)| exit_status(e)).collect();
            let status = if statuses.iter().all(|&s| s == statuses[0]) {
                statuses[0]
            } else {
                DAEMON_ERROR
            };
            Err(Failure::with_status(
                status,
                format!(
                    "{n} of {} tasks not cancelled: {}",
                    ids.len(),
                    names.join(", ")
                ),
            ))
        }
    }
}

/// Prints a task's output, following it with `--follow` until the task ends.
pub fn logs(args: LogsArgs) -> Result<()> {
    /// How long to wait before asking again for output that is not there yet.
    const POLL: std::time::Duration = std::time::Duration::from_millis(500);
    block_on(async {
        let client = Client::connect(&args.bus).await?;
        let read =
            |offset| client.call(client.agent.read_output(&args.id, offset, OUTPUT_READ_MAX));
        let mut offset = 0;
        let mut ended;
        // What there is now (all of it, to find the last lines for --tail).
        let mut now = Vec::new();
        loop {
            let (data, next, end) = read(offset).await?;
            ended = end;
            offset = next;
            if data.is_empty() {
                break;
            }
            if args.tail.is_none() {
                emit_bytes(&data)?;
            } else {
                now.extend_from_slice(&data);
            }
        }
        if let Some(n) = args.tail {
            emit_bytes(last_lines(&now, n))?;
        }
        while args.follow && !ended {
            tokio::time::sleep(POLL).await;
            loop {
                let (data, next, end) = read(offset).await?;
                ended = end;
                offset = next;
                if data.is_empty() {
                    break;
                }
                emit_bytes(&data)?;
            }
        }
        Ok(())
    })
}

/// The last `n` lines of `text` (a last line without its newline counts).
fn last_lines(text: &[u8], n: usize) -> &[u8] {
    if n == 0 {
        return &[];
    }
    let body = text.strip_suffix(b"\n").unwrap_or(text);
    let start = body
        .iter()
        .enumerate()
        .rev()
        .filter(|(_, &b)| b == b'\n')
        .nth(n - 1)
        .map_or(0, |(i, _)| i + 1);
    &text[start..]
}

/// Prints task changes as they come, until Ctrl-C (or a closed pipe).
pub fn watch(args: WatchArgs) -> Result<()> {
    block_on(async {
        let client = Client::connect(&args.bus).await?;
        // Subscribe first, then check the daemon is there: no change is missed.
        let mut changes = client.call(client.agent.receive_task_changed()).await?;
        client.call(client.agent.version()).await?;
        let ctrl_c = tokio::signal::ctrl_c();
        tokio::pin!(ctrl_c);
        loop {
            let change = tokio::select! {
                _ = &mut ctrl_c => return Ok(()),
                change = changes.next() => change.context("the bus connection closed")?,
            };
            let change = change
                .args()
                .map_err(|e| anyhow!("the daemon sent a bad TaskChanged signal: {e}"))?;
            let clock = Clock::system();
            let line = if args.json {
                serde_json::to_string(&Change {
                    time: clock.now,
                    id: change.id,
                    state: change.state,
                })?
            } else {
                format!("{} {} {}", clock.short(clock.now), change.id, change.state)
            };
            emit(&format!("{line}\n"))?;
        }
    })
}

/// One line of `gpuctl watch --json`.
#[derive(Serialize)]
struct Change<'a> {
    /// When gpuctl saw the change, unix seconds.
    time: f64,
    /// The task.
    id: &'a str,
    /// Its new state.
    state: &'a str,
}

/// The login name of `uid`, or the number when it has none.
pub(crate) fn user_name(uid: u32) -> String {
    match User::from_uid(Uid::from_raw(uid)) {
        Ok(Some(user)) => user.name,
        _ => uid.to_string(),
    }
}

/// `-` for an empty text.
fn or_dash(text: &str) -> String {
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
    use super::*;
    use gpu_agent_dbus::SubmitSpec;
    use std::collections::BTreeMap;

    /// 2024-03-14 09:26:53 UTC.
    const T: f64 = 1_710_408_413.0;

    fn clock() -> Clock {
        Clock {
            now: T + 300.0,
            utc_offset: |_| 0,
        }
    }

    fn done() -> TaskInfo {
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

    fn queued() -> TaskInfo {
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

    fn name(uid: u32) -> String {
        match uid {
            0 => "root".into(),
            _ => "alice".into(),
        }
    }

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
    fn ids_may_leave_out_their_t() {
        assert_eq!(task_id("18"), Ok("t18".into()));
        assert_eq!(task_id("t18"), Ok("t18".into()));
        assert_eq!(task_id("x1"), Ok("x1".into()));
        assert!(task_id("").is_err());
    }

    #[test]
    fn the_last_lines_are_counted_from_the_end() {
        assert_eq!(last_lines(b"a\nb\nc\n", 2), b"b\nc\n");
        assert_eq!(last_lines(b"a\nb\nc", 2), b"b\nc");
        assert_eq!(last_lines(b"a\nb\n", 5), b"a\nb\n");
        assert_eq!(last_lines(b"a\nb\n", 0), b"");
        assert_eq!(last_lines(b"", 3), b"");
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
