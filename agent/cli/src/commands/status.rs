//! `gpuctl status`: the daemon's version, backend, policy, devices and task counts.

use std::collections::HashMap;

use anyhow::{anyhow, Result};
use gpu_agent_dbus::TaskStatus;
use serde::{Serialize, Serializer};

use super::devices::fetch_devices;
use crate::client::{block_on, BusArgs, Client};
use crate::output::{emit, emit_json};
use crate::table::{Align, Table};

/// Show the daemon: version, GPU backend, policy, devices and tasks per state.
#[derive(clap::Args)]
#[command(after_help = "Examples:\n  gpuctl status\n  gpuctl status --session --json")]
pub struct Args {
    #[command(flatten)]
    bus: BusArgs,
    /// Print a JSON object.
    #[arg(long)]
    json: bool,
}

/// What `gpuctl status` shows.
#[derive(Serialize)]
struct Status {
    /// The daemon's version.
    version: String,
    /// Its GPU backend.
    backend: String,
    /// The active policy.
    policy: String,
    /// The stored policy fault (`policy NAME failed: REASON`; empty: none):
    /// that policy stays off until an admin chooses it again.
    policy_fault: String,
    /// How many devices it schedules on.
    devices: usize,
    /// The indices of those offline (failed or drained).
    offline: Vec<u32>,
    /// Its tasks per state.
    tasks: Counts,
}

/// Tasks per state, in [`TaskStatus::ALL`] order.
struct Counts([usize; TaskStatus::ALL.len()]);

impl Counts {
    /// The counts `CountTasks` answered, by state name; a state it did not
    /// list counts 0, a name this gpuctl does not know is an error.
    fn of(counts: &HashMap<String, u64>) -> Result<Counts> {
        let mut n = [0; TaskStatus::ALL.len()];
        for (name, &count) in counts {
            let state = TaskStatus::parse(name)
                .map_err(|e| anyhow!("the daemon counted tasks in an unknown state: {e}"))?;
            let i = TaskStatus::ALL.iter().position(|s| *s == state);
            n[i.expect("every state is in ALL")] = count as usize;
        }
        Ok(Counts(n))
    }
}

impl Serialize for Counts {
    /// A map from every state's name to its count, in life order.
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_map(TaskStatus::ALL.iter().map(|s| s.as_str()).zip(self.0))
    }
}

/// Prints the daemon's status.
pub fn run(args: Args) -> Result<()> {
    let status = block_on(async {
        let client = Client::connect(&args.bus).await?;
        let agent = &client.agent;
        let tasks = Counts::of(&client.call(agent.count_tasks()).await?)?;
        let devices = fetch_devices(&client).await?;
        Ok(Status {
            version: client.call(agent.version()).await?,
            backend: client.call(agent.backend()).await?,
            policy: client.call(agent.policy()).await?,
            policy_fault: client.call(agent.last_policy_fault()).await?,
            devices: devices.iter().filter(|d| d.schedulable).count(),
            offline: devices
                .iter()
                .filter(|d| d.schedulable && !d.online)
                .map(|d| d.index)
                .collect(),
            tasks,
        })
    })?;
    if args.json {
        emit_json(&status)?;
    } else {
        emit(&status_text(&status))?;
    }
    Ok(())
}

/// `4`, or `4 (2 offline: 0, 1)`.
fn devices_text(n: usize, offline: &[u32]) -> String {
    if offline.is_empty() {
        return n.to_string();
    }
    let list: Vec<String> = offline.iter().map(u32::to_string).collect();
    format!("{n} ({} offline: {})", offline.len(), list.join(", "))
}

/// The status, one line per item.
fn status_text(s: &Status) -> String {
    let counts: Vec<String> = TaskStatus::ALL
        .iter()
        .zip(s.tasks.0)
        .filter(|(_, n)| *n > 0)
        .map(|(state, n)| format!("{n} {state}"))
        .collect();
    let total: usize = s.tasks.0.iter().sum();
    let tasks = if counts.is_empty() {
        "0".to_string()
    } else {
        format!("{total}: {}", counts.join(", "))
    };
    let mut table = Table::new(&[Align::Left, Align::Left]);
    for (key, value) in [
        ("version", s.version.clone()),
        ("backend", s.backend.clone()),
        ("policy", s.policy.clone()),
        ("policy fault", s.policy_fault.clone()),
        ("devices", devices_text(s.devices, &s.offline)),
        ("tasks", tasks),
    ] {
        if !value.is_empty() {
            table.row(vec![key.into(), value]);
        }
    }
    table.render()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn status_counts_tasks_per_state() {
        let mut n = [0; TaskStatus::ALL.len()];
        n[0] = 2; // queued
        n[3] = 5; // succeeded
        let status = Status {
            version: "0.1.0".into(),
            backend: "mock:examples/host.toml".into(),
            policy: "fifo".into(),
            policy_fault: String::new(),
            devices: 4,
            offline: vec![],
            tasks: Counts(n),
        };
        assert_eq!(
            status_text(&status),
            "version  0.1.0\n\
             backend  mock:examples/host.toml\n\
             policy   fifo\n\
             devices  4\n\
             tasks    7: 2 queued, 5 succeeded\n"
        );
        let faulted = Status {
            version: "0.1.0".into(),
            backend: "mock:examples/host.toml".into(),
            policy: "fifo (built-in fallback)".into(),
            policy_fault: "policy sos failed: panicked: oops".into(),
            devices: 4,
            offline: vec![],
            tasks: Counts(n),
        };
        assert_eq!(
            status_text(&faulted),
            "version       0.1.0\n\
             backend       mock:examples/host.toml\n\
             policy        fifo (built-in fallback)\n\
             policy fault  policy sos failed: panicked: oops\n\
             devices       4\n\
             tasks         7: 2 queued, 5 succeeded\n"
        );
        assert_eq!(devices_text(4, &[0, 3]), "4 (2 offline: 0, 3)");
        let json = serde_json::to_string(&status.tasks).unwrap();
        assert_eq!(
            json,
            r#"{"queued":2,"assigned":0,"running":0,"succeeded":5,"failed":0,"cancelled":0,"lost":0,"rejected":0}"#
        );
    }
}
