//! `gpuctl reload`: the daemon reads its configuration and plugins again.

use anyhow::Result;
use serde::Serialize;

use crate::client::{block_on, BusArgs, Client};
use crate::output::{emit, emit_json};

/// Make the daemon read its configuration file again and re-scan its plugins.
///
/// Newly installed policies become selectable; the active policy keeps
/// running and no task is touched. A file with an error is refused as a whole
/// and changes nothing. Prints the policies now loaded, and the changed
/// settings that only take effect at the next start. Admins only;
/// `systemctl reload gpu-agent` does the same.
#[derive(clap::Args)]
#[command(after_help = "Examples:\n  gpuctl reload\n  gpuctl reload --json")]
pub struct Args {
    #[command(flatten)]
    bus: BusArgs,
    /// Print {"policies": [{"name", "description"}], "pending": [setting]}.
    #[arg(long)]
    json: bool,
}

/// What `gpuctl reload --json` prints.
#[derive(Serialize)]
struct Reloaded<'a> {
    /// The policies now loaded.
    policies: Vec<Policy<'a>>,
    /// The changed settings that take effect at the next start.
    pending: &'a [String],
}

/// One loaded policy.
#[derive(Serialize)]
struct Policy<'a> {
    /// Its name.
    name: &'a str,
    /// What it does, in its own words.
    description: &'a str,
}

/// Reloads the daemon and says what it loaded.
pub fn run(args: Args) -> Result<()> {
    let (pending, policies) = block_on(async {
        let client = Client::connect(&args.bus).await?;
        let pending = client.call(client.agent.reload()).await?;
        Ok((pending, client.call(client.agent.list_policies()).await?))
    })?;
    if args.json {
        emit_json(&Reloaded {
            policies: policies
                .iter()
                .map(|(name, description)| Policy { name, description })
                .collect(),
            pending: &pending,
        })
    } else {
        emit(&reload_text(&pending, &policies))
    }
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

#[cfg(test)]
mod tests {
    use super::*;

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
}
