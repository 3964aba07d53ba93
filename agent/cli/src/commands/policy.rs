//! `gpuctl policy list`, `use` and `show`: the daemon's scheduling policies.

use anyhow::{anyhow, Result};
use gpu_agent_dbus::Dict;
use serde::Serialize;
use zbus::zvariant::Value;

use crate::client::{block_on, BusArgs, Client};
use crate::output::{emit, emit_json};
use crate::table::{Align, Table};

/// List the scheduling policies, or switch to another.
#[derive(clap::Args)]
#[command(after_help = "Examples:\n  gpuctl policy list\n  gpuctl policy use greedy-eft")]
pub struct Args {
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
    after_help = "Examples:\n  gpuctl policy use greedy-eft\n  gpuctl policy use sa-greedy --param budget_ms=20 --param seed=7\n  gpuctl policy use fifo --json"
)]
struct PolicyUseArgs {
    /// The policy, as `gpuctl policy list` names it.
    name: String,
    /// A parameter, as `gpuctl policy show NAME` lists them (repeatable).
    #[arg(long = "param", value_name = "KEY=VALUE", value_parser = parse_key_value)]
    params: Vec<(String, String)>,
    #[command(flatten)]
    bus: BusArgs,
    /// Print {"policy", "params", "was", "moved"}: the policy now active,
    /// the parameters given, the one before, and how many waiting tasks
    /// moved to it.
    #[arg(long)]
    json: bool,
}

/// What `gpuctl policy use --json` prints.
#[derive(Serialize)]
struct Used<'a> {
    /// The policy now active.
    policy: &'a str,
    /// The parameters given with it, as given.
    params: std::collections::BTreeMap<&'a str, &'a str>,
    /// The policy active before.
    was: &'a str,
    /// The waiting (queued and assigned) tasks that moved to it.
    moved: u64,
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
pub fn run(args: Args) -> Result<()> {
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
            if args.json {
                emit_json(&Used {
                    policy: &args.name,
                    params: args
                        .params
                        .iter()
                        .map(|(k, v)| (k.as_str(), v.as_str()))
                        .collect(),
                    was: &before,
                    moved: waiting,
                })
            } else {
                emit(&policy_used(&args.name, &args.params, &before, waiting))
            }
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

/// `plugin` as `gpuctl policy show --json` prints a policy that is not
/// active, less `active`: what the Python package's `describe` returns.
pub fn describe(plugin: &gpu_agent_loader::Plugin) -> serde_json::Value {
    let described = gpu_agent_dbus::PolicyDescription {
        name: plugin.name().to_string(),
        description: plugin.description().to_string(),
        active: false,
        parameters: plugin
            .parameters()
            .iter()
            .map(|info| (*info, None))
            .collect(),
    }
    .to_dict();
    serde_json::Value::Object(
        described
            .iter()
            .filter(|(k, _)| k.as_str() != "active")
            .map(|(k, v)| (k.clone(), to_json(v)))
            .collect(),
    )
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

#[cfg(test)]
mod tests {
    use super::*;

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
