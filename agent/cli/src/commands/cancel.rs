//! `gpuctl cancel`: cancel tasks, named or chosen by state and user.

use anyhow::Result;
use gpu_agent_dbus::TaskStatus;
use serde::Serialize;

use super::tasks::{task_id, Filter};
use crate::client::{block_on, exit_status, BusArgs, Client, Failure, DAEMON_ERROR};
use crate::output::emit_json;

/// Cancel queued or running tasks (a running one's processes are killed).
///
/// The tasks are named, or chosen with --state and --user (as scancel:
/// without --state, every task of theirs that has not ended). Each task is
/// cancelled on its own: one that cannot be (ended already, another's,
/// unknown) is named on stderr with the daemon's reason, the others are
/// cancelled, and the exit status is not 0.
#[derive(clap::Args)]
#[command(
    after_help = "Examples:\n  gpuctl cancel t42\n  gpuctl cancel t42 t43 44\n  gpuctl cancel --state queued --user alice\n  gpuctl cancel t42 t43 --json"
)]
pub struct Args {
    /// The tasks' ids (the `t` may be left out).
    #[arg(required_unless_present_any = ["state", "user"], value_parser = task_id)]
    ids: Vec<String>,
    #[command(flatten)]
    filter: Filter,
    #[command(flatten)]
    bus: BusArgs,
    /// Print a JSON array, one {"id", "cancelled", "error"} object per task
    /// (error: the daemon's reason, or null).
    #[arg(long)]
    json: bool,
}

/// One task of `gpuctl cancel --json`.
#[derive(Serialize)]
struct Outcome<'a> {
    /// The task.
    id: &'a str,
    /// Whether it was cancelled.
    cancelled: bool,
    /// Why not (the daemon's error), or null.
    error: Option<String>,
}

/// Cancels each task, naming on stderr each one that was not.
pub fn run(args: Args) -> Result<()> {
    let Args {
        ids,
        mut filter,
        bus,
        json,
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
            if !json {
                for id in &chosen {
                    println!("cancelling {id}");
                }
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
    if json {
        let outcomes: Vec<Outcome> = ids
            .iter()
            .map(|id| {
                let error = refused.iter().find(|(r, _)| r == id);
                Outcome {
                    id,
                    cancelled: error.is_none(),
                    error: error.map(|(_, e)| format!("{e:#}")),
                }
            })
            .collect();
        emit_json(&outcomes)?;
    }
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
