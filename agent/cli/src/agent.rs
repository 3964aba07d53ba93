//! `gpuctl status`, `devices`, `policy` and `metrics`: the daemon itself.

use std::collections::HashMap;

use anyhow::{anyhow, Result};
use gpu_agent_dbus::{
    metrics_from_dict, DeviceStatus, Dict, TaskStatus, AGENT_PATH, BUS_NAME, DEVICE_INTERFACE,
};
use serde::{Serialize, Serializer};
use zbus::zvariant::Value;
use zbus::{fdo::ObjectManagerProxy, proxy::CacheProperties};

use crate::client::{block_on, BusArgs, Client};
use crate::table::{metrics_table, Align, Table};
use crate::units;
use crate::{emit, emit_json};

/// Show the daemon: version, GPU backend, policy, devices and tasks per state.
#[derive(clap::Args)]
#[command(after_help = "Examples:\n  gpuctl status\n  gpuctl status --session --json")]
pub struct StatusArgs {
    #[command(flatten)]
    bus: BusArgs,
    /// Print a JSON object.
    #[arg(long)]
    json: bool,
}

/// List the schedulable devices with their live readings, health and
/// running task; or take a GPU offline or bring it back.
///
/// One row per GPU and per MIG instance. A GPU split into MIG instances
/// (MIG `on`, HEALTH `mig`) runs nothing itself: its instances are devices
/// of their own, indexed after every GPU, their MIG column saying where
/// they lie (`1/mig/3g.20gb@4`: GPU 1, profile 3g.20gb from memory slice 4);
/// a task on one sees it in `CUDA_VISIBLE_DEVICES` as `MIG-…`. `-`: the
/// device does not report that reading. HEALTH is `ok`; `lost` (the GPU fell off
/// the bus) or `xid N: what` (a critical XID error): it went offline, its
/// running task failed (or was queued again with `requeue`), and it takes
/// no work until an admin brings it back with `gpuctl devices online GPU`;
/// or `drained` (an admin's `gpuctl devices offline GPU`).
#[derive(clap::Args)]
#[command(
    args_conflicts_with_subcommands = true,
    after_help = "Examples:\n  gpuctl devices\n  gpuctl devices --json\n  gpuctl devices offline 1\n  gpuctl devices online 1"
)]
pub struct DevicesArgs {
    #[command(subcommand)]
    command: Option<DevicesCommand>,
    #[command(flatten)]
    bus: BusArgs,
    /// Print a JSON array, one object per device (unreported readings are null).
    #[arg(long)]
    json: bool,
}

/// What `gpuctl devices` does besides listing.
#[derive(clap::Subcommand)]
enum DevicesCommand {
    Online(DeviceStateArgs),
    Offline(DeviceStateArgs),
}

/// `gpuctl devices online GPU` brings a GPU that went offline back, once the
/// daemon can reach it again (after a GPU reset, say); `gpuctl devices
/// offline GPU` drains it: its running task ends as it would, its queued
/// tasks go to other GPUs, and nothing else is placed on it. Admins only;
/// the state survives a restart of the daemon.
#[derive(clap::Args)]
struct DeviceStateArgs {
    #[command(flatten)]
    bus: BusArgs,
    /// The GPU's index (`gpuctl devices`).
    gpu: u32,
}

/// List the scheduling policies, or switch to another.
#[derive(clap::Args)]
#[command(after_help = "Examples:\n  gpuctl policy list\n  gpuctl policy use greedy-eft")]
pub struct PolicyArgs {
    #[command(subcommand)]
    command: PolicyCommand,
}

/// What `gpuctl policy` does.
#[derive(clap::Subcommand)]
enum PolicyCommand {
    List(PolicyListArgs),
    Use(PolicyUseArgs),
    Show(PolicyShowArgs),
}

/// List the loaded policies; `*` marks the active one.
#[derive(clap::Args)]
struct PolicyListArgs {
    #[command(flatten)]
    bus: BusArgs,
    /// Print a JSON array of {"name", "description", "active"} objects.
    #[arg(long)]
    json: bool,
}

/// Make NAME the active policy. Queued tasks move to it; none is lost.
///
/// The policy is built with its `[policies.NAME]` table of agent.toml and,
/// over it, the `--param`s given here; the daemon keeps the given ones with
/// the policy's name, so they survive a restart. An unknown key, or a value
/// of the wrong type or out of range, is refused naming the key, and nothing
/// changes. Admins only.
#[derive(clap::Args)]
#[command(
    after_help = "Examples:\n  gpuctl policy use greedy-eft\n  gpuctl policy use sa-greedy --param budget_ms=20 --param seed=7"
)]
struct PolicyUseArgs {
    /// The policy, as `gpuctl policy list` names it.
    name: String,
    /// A parameter, as `gpuctl policy show NAME` lists them (repeatable).
    #[arg(long = "param", value_name = "KEY=VALUE", value_parser = parse_key_value)]
    params: Vec<(String, String)>,
    #[command(flatten)]
    bus: BusArgs,
}

/// Show a policy's parameters: type, default, accepted values and what each
/// does, and for the active policy the values in use.
#[derive(clap::Args)]
#[command(
    after_help = "Examples:\n  gpuctl policy show sa-greedy\n  gpuctl policy show sos --json"
)]
struct PolicyShowArgs {
    /// The policy, as `gpuctl policy list` names it.
    name: String,
    /// Print DescribePolicy's dictionary as a JSON object.
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    bus: BusArgs,
}

/// `KEY=VALUE`.
fn parse_key_value(s: &str) -> Result<(String, String), String> {
    match s.split_once('=') {
        Some((k, v)) if !k.is_empty() => Ok((k.to_string(), v.to_string())),
        _ => Err(format!("expected KEY=VALUE, got {s:?}")),
    }
}

/// Make the daemon read its configuration file again and re-scan its plugins.
///
/// Newly installed policies become selectable; the active policy keeps
/// running and no task is touched. A file with an error is refused as a whole
/// and changes nothing. Prints the policies now loaded, and the changed
/// settings that only take effect at the next start. Admins only;
/// `systemctl reload gpu-agent` does the same.
#[derive(clap::Args)]
#[command(after_help = "Example:\n  gpuctl reload")]
pub struct ReloadArgs {
    #[command(flatten)]
    bus: BusArgs,
}

/// Print the schedule metrics over the tasks finished so far.
///
/// The metrics of formats.md §4, as `gpuctl simulate` prints them for one
/// policy.
#[derive(clap::Args)]
#[command(after_help = "Examples:\n  gpuctl metrics\n  gpuctl metrics --json")]
pub struct MetricsArgs {
    #[command(flatten)]
    bus: BusArgs,
    /// Print the metrics as a JSON object, as `gpuctl simulate --json` does.
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

/// One policy in `gpuctl policy list --json`.
#[derive(Serialize)]
struct PolicyEntry<'a> {
    /// The policy's name.
    name: &'a str,
    /// What it does, in its own words.
    description: &'a str,
    /// Whether it is the active policy.
    active: bool,
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

/// The device objects the daemon manages, by index.
pub(crate) async fn fetch_devices(client: &Client) -> Result<Vec<DeviceStatus>> {
    let manager = ObjectManagerProxy::builder(client.connection())
        .destination(BUS_NAME)?
        .path(AGENT_PATH)?
        .cache_properties(CacheProperties::No)
        .build();
    let manager = client.call(manager).await?;
    let objects = client.call(manager.get_managed_objects()).await?;
    let mut devices = Vec::new();
    for (path, interfaces) in &objects {
        let device = interfaces
            .iter()
            .find(|(name, _)| name.as_str() == DEVICE_INTERFACE);
        if let Some((_, properties)) = device {
            let status = DeviceStatus::from_dict(properties)
                .map_err(|e| anyhow!("the daemon sent a bad device {}: {e}", path.as_str()))?;
            devices.push(status);
        }
    }
    devices.sort_by_key(|d| d.index);
    Ok(devices)
}

/// Prints the daemon's status.
pub fn status(args: StatusArgs) -> Result<()> {
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

/// Prints the devices, or takes one offline or online.
pub fn devices(args: DevicesArgs) -> Result<()> {
    if let Some(command) = args.command {
        let (online, args) = match command {
            DevicesCommand::Online(args) => (true, args),
            DevicesCommand::Offline(args) => (false, args),
        };
        block_on(async {
            let client = Client::connect(&args.bus).await?;
            client
                .call(client.agent.set_device_online(args.gpu, online))
                .await
        })?;
        let what = if online {
            "is back online"
        } else {
            "is drained: it takes no new work"
        };
        return emit(&format!("GPU {} {what}\n", args.gpu));
    }
    let devices = block_on(async {
        let client = Client::connect(&args.bus).await?;
        fetch_devices(&client).await
    })?;
    if args.json {
        emit_json(&devices)?;
    } else {
        emit(&devices_table(&devices))?;
    }
    Ok(())
}

/// What the MIG column says: a GPU's mode, or where an instance lies
/// (`1/mig/3g.20gb@4`: GPU 1, profile 3g.20gb at memory slice 4).
fn mig_column(d: &DeviceStatus) -> String {
    if !d.mig_profile.is_empty() {
        format!("{}/mig/{}@{}", d.parent, d.mig_profile, d.mig_placement.0)
    } else if d.mig_enabled {
        "on".into()
    } else {
        "off".into()
    }
}

/// The devices as a table, one row each.
fn devices_table(devices: &[DeviceStatus]) -> String {
    use Align::{Left, Right};
    let mut table = Table::with_header(&[
        ("INDEX", Right),
        ("NAME", Left),
        ("MEMORY", Right),
        ("SPEED", Right),
        ("CLOCKS", Right),
        ("POWER", Right),
        ("ENERGY", Right),
        ("UTIL", Right),
        ("MIG", Left),
        ("HEALTH", Left),
        ("TASK", Left),
    ]);
    for d in devices {
        let mhz = |m: u32| if m == 0 { "-".into() } else { m.to_string() };
        let clocks = if d.core_clock_mhz == 0 && d.mem_clock_mhz == 0 {
            "-".into()
        } else {
            format!("{}/{} MHz", mhz(d.core_clock_mhz), mhz(d.mem_clock_mhz))
        };
        table.row(vec![
            d.index.to_string(),
            d.name.clone(),
            units::gigabytes(d.memory_gb),
            format!("{:.2}", d.speed),
            clocks,
            units::power(d.power_w),
            units::energy(d.energy_j),
            units::percent(d.utilization),
            mig_column(d),
            d.health.clone(),
            if d.current_task.is_empty() {
                "-".into()
            } else {
                d.current_task.clone()
            },
        ]);
    }
    table.render()
}

/// What `gpuctl policy use` did: `name` with `params` is the active policy,
/// in place of `before`, with `waiting` tasks now its own.
fn policy_used(name: &str, params: &[(String, String)], before: &str, waiting: u64) -> String {
    let with = if params.is_empty() {
        String::new()
    } else {
        let pairs: Vec<String> = params.iter().map(|(k, v)| format!("{k}={v}")).collect();
        format!(" with {}", pairs.join(", "))
    };
    let tasks = if waiting == 1 { "task" } else { "tasks" };
    format!("policy {name}{with} is active (was {before}); {waiting} waiting {tasks} moved to it\n")
}

/// Runs `gpuctl policy list` or `gpuctl policy use`.
pub fn policy(args: PolicyArgs) -> Result<()> {
    match args.command {
        PolicyCommand::List(args) => {
            let (policies, active) = block_on(async {
                let client = Client::connect(&args.bus).await?;
                let policies = client.call(client.agent.list_policies()).await?;
                Ok((policies, client.call(client.agent.policy()).await?))
            })?;
            if args.json {
                let list: Vec<_> = policies
                    .iter()
                    .map(|(name, description)| PolicyEntry {
                        name,
                        description,
                        active: *name == active,
                    })
                    .collect();
                emit_json(&list)?;
            } else {
                emit(&policies_table(&policies, &active))?;
            }
            Ok(())
        }
        PolicyCommand::Use(args) => {
            let (before, waiting) = block_on(async {
                let client = Client::connect(&args.bus).await?;
                let before = client.call(client.agent.policy()).await?;
                if args.params.is_empty() {
                    client.call(client.agent.set_policy(&args.name)).await?;
                } else {
                    // Sent as text: the daemon reads it by the parameter's type.
                    let params: Dict = args
                        .params
                        .iter()
                        .map(|(k, v)| {
                            (
                                k.clone(),
                                Value::from(v.as_str()).try_into().expect("a string"),
                            )
                        })
                        .collect();
                    client
                        .call(client.agent.set_policy_with_parameters(&args.name, params))
                        .await?;
                }
                let counts = client.call(client.agent.count_tasks()).await?;
                let waiting = ["queued", "assigned"]
                    .iter()
                    .filter_map(|s| counts.get(*s))
                    .sum::<u64>();
                Ok((before, waiting))
            })?;
            emit(&policy_used(&args.name, &args.params, &before, waiting))
        }
        PolicyCommand::Show(args) => {
            let described = block_on(async {
                let client = Client::connect(&args.bus).await?;
                client.call(client.agent.describe_policy(&args.name)).await
            })?;
            if args.json {
                let object: serde_json::Map<String, serde_json::Value> = described
                    .iter()
                    .map(|(k, v)| (k.clone(), to_json(v)))
                    .collect();
                emit_json(&object)
            } else {
                emit(&policy_text(&described)?)
            }
        }
    }
}

/// A variant as JSON (the types `DescribePolicy` answers with).
fn to_json(value: &Value<'_>) -> serde_json::Value {
    use serde_json::Value as J;
    match value {
        Value::Value(v) => to_json(v),
        Value::Bool(b) => J::Bool(*b),
        Value::U8(n) => J::from(*n),
        Value::I16(n) => J::from(*n),
        Value::U16(n) => J::from(*n),
        Value::I32(n) => J::from(*n),
        Value::U32(n) => J::from(*n),
        Value::I64(n) => J::from(*n),
        Value::U64(n) => J::from(*n),
        Value::F64(x) => J::from(*x),
        Value::Str(s) => J::String(s.to_string()),
        Value::Array(a) => J::Array(a.iter().map(to_json).collect()),
        Value::Dict(d) => J::Object(
            d.iter()
                .map(|(k, v)| {
                    let key = match k {
                        Value::Str(s) => s.to_string(),
                        other => other.to_string(),
                    };
                    (key, to_json(v))
                })
                .collect(),
        ),
        other => J::String(other.to_string()),
    }
}

/// What `gpuctl policy show` prints.
fn policy_text(described: &Dict) -> Result<String> {
    let text = |d: &Dict, key: &str| -> String {
        d.get(key)
            .map(|v| match to_json(v) {
                serde_json::Value::String(s) => s,
                other => other.to_string(),
            })
            .unwrap_or_default()
    };
    let active = matches!(
        described.get("active").map(|v| to_json(v)),
        Some(serde_json::Value::Bool(true))
    );
    let mut out = format!(
        "{}{}: {}\n",
        text(described, "name"),
        if active { " (active)" } else { "" },
        text(described, "description")
    );
    let parameters: Vec<Dict> = match described.get("parameters") {
        Some(v) => Vec::<Dict>::try_from(v.clone())
            .map_err(|e| anyhow!("DescribePolicy: bad parameters: {e}"))?,
        None => Vec::new(),
    };
    if parameters.is_empty() {
        out.push_str("no parameters\n");
        return Ok(out);
    }
    let mut header = vec!["KEY", "TYPE"];
    if active {
        header.push("VALUE");
    }
    header.extend(["DEFAULT", "ACCEPTS", "DESCRIPTION"]);
    let mut table = Table::new(&vec![Align::Left; header.len()]);
    table.row(header.iter().map(|h| h.to_string()).collect());
    for p in &parameters {
        let mut row = vec![text(p, "key"), text(p, "type")];
        if active {
            row.push(text(p, "value"));
        }
        row.extend([
            text(p, "default"),
            text(p, "expected"),
            text(p, "description"),
        ]);
        table.row(row);
    }
    out.push_str(&table.render());
    Ok(out)
}

/// The policies, one per line, `*` before the active one.
fn policies_table(policies: &[(String, String)], active: &str) -> String {
    let mut table = Table::new(&[Align::Left, Align::Left, Align::Left]);
    for (name, description) in policies {
        let mark = if name == active { "*" } else { "" };
        table.row(vec![mark.into(), name.clone(), description.clone()]);
    }
    table.render()
}

/// Reloads the daemon and says what it loaded.
pub fn reload(args: ReloadArgs) -> Result<()> {
    let (pending, policies) = block_on(async {
        let client = Client::connect(&args.bus).await?;
        let pending = client.call(client.agent.reload()).await?;
        Ok((pending, client.call(client.agent.list_policies()).await?))
    })?;
    emit(&reload_text(&pending, &policies))
}

/// What `gpuctl reload` prints.
fn reload_text(pending: &[String], policies: &[(String, String)]) -> String {
    let names: Vec<&str> = policies.iter().map(|(name, _)| name.as_str()).collect();
    let mut text = format!(
        "reloaded; policies: {}\n",
        if names.is_empty() {
            "none".to_string()
        } else {
            names.join(", ")
        }
    );
    if !pending.is_empty() {
        text.push_str(&format!(
            "changed, taking effect at the next start: {}\n",
            pending.join(", ")
        ));
    }
    text
}

/// Prints the daemon's metrics.
pub fn metrics(args: MetricsArgs) -> Result<()> {
    let dict = block_on(async {
        let client = Client::connect(&args.bus).await?;
        client.call(client.agent.metrics()).await
    })?;
    let metrics =
        metrics_from_dict(&dict).map_err(|e| anyhow!("the daemon sent bad metrics: {e}"))?;
    if args.json {
        emit_json(&metrics)?;
    } else {
        emit(&metrics_table(&[&metrics]).render())?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    #[test]
    fn policy_use_says_what_it_did() {
        assert_eq!(
            super::policy_used("greedy-eft", &[], "fifo", 12),
            "policy greedy-eft is active (was fifo); 12 waiting tasks moved to it\n"
        );
        let params = [("budget_ms".to_string(), "20".to_string())];
        assert_eq!(
            super::policy_used("sa-greedy", &params, "greedy-eft", 1),
            "policy sa-greedy with budget_ms=20 is active (was greedy-eft); 1 waiting task moved to it\n"
        );
    }

    use super::*;

    fn device(index: u32) -> DeviceStatus {
        DeviceStatus {
            index,
            uuid: format!("GPU-{index}"),
            name: "NVIDIA A100-SXM4-40GB".into(),
            memory_gb: 40.0,
            speed: 1.0,
            core_clock_mhz: 1410,
            mem_clock_mhz: 1215,
            power_w: 250.26,
            energy_j: 12_346.0,
            utilization: 0.873,
            memory_used_gb: 12.25,
            temperature_c: 64.0,
            mig_enabled: false,
            current_task: "t42".into(),
            online: true,
            health: "ok".into(),
            schedulable: true,
            parent: index,
            mig_profile: String::new(),
            mig_placement: (0, 0),
        }
    }

    #[test]
    fn devices_table_reads_nan_and_zero_as_dashes() {
        let unread = DeviceStatus {
            name: "T4".into(),
            memory_gb: 15.76,
            speed: 0.25,
            core_clock_mhz: 0,
            mem_clock_mhz: 0,
            power_w: f64::NAN,
            energy_j: f64::NAN,
            utilization: f64::NAN,
            mig_enabled: true,
            current_task: String::new(),
            online: false,
            health: "lost".into(),
            ..device(10)
        };
        let instance = DeviceStatus {
            name: "NVIDIA A100-SXM4-40GB MIG 3g.20gb".into(),
            memory_gb: 19.5,
            speed: 3.0 / 7.0,
            mig_enabled: true,
            parent: 0,
            mig_profile: "3g.20gb".into(),
            mig_placement: (4, 4),
            utilization: f64::NAN,
            ..device(12)
        };
        assert_eq!(
            devices_table(&[instance]),
            "INDEX  NAME                                MEMORY  SPEED         CLOCKS    POWER    ENERGY  UTIL  MIG              HEALTH  TASK\n\
             \x20  12  NVIDIA A100-SXM4-40GB MIG 3g.20gb  19.5 GB   0.43  1410/1215 MHz  250.3 W  12.35 kJ     -  0/mig/3g.20gb@4  ok      t42\n"
        );
        assert_eq!(
            devices_table(&[device(0), unread]),
            "INDEX  NAME                    MEMORY  SPEED         CLOCKS    POWER    ENERGY  UTIL  MIG  HEALTH  TASK\n\
             \x20   0  NVIDIA A100-SXM4-40GB    40 GB   1.00  1410/1215 MHz  250.3 W  12.35 kJ  87 %  off  ok      t42\n\
             \x20  10  T4                     15.8 GB   0.25              -        -         -     -  on   lost    -\n"
        );
    }

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

    #[test]
    fn reload_names_the_policies_and_what_waits_for_a_restart() {
        let policies = vec![
            ("fifo".to_string(), "first in, first out".to_string()),
            ("greedy-eft".to_string(), "earliest finish".to_string()),
        ];
        assert_eq!(
            reload_text(&[], &policies),
            "reloaded; policies: fifo, greedy-eft\n"
        );
        assert_eq!(
            reload_text(&["policy".into(), "apps".into()], &[]),
            "reloaded; policies: none\nchanged, taking effect at the next start: policy, apps\n"
        );
    }

    #[test]
    fn the_active_policy_is_starred() {
        let policies = vec![
            ("fifo".to_string(), "first in, first out".to_string()),
            ("greedy-eft".to_string(), "earliest finish time".to_string()),
        ];
        assert_eq!(
            policies_table(&policies, "greedy-eft"),
            "   fifo        first in, first out\n\
             *  greedy-eft  earliest finish time\n"
        );
    }
}
