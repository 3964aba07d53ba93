//! `gpuctl metrics`: the schedule metrics over the tasks finished so far.

use anyhow::{anyhow, Result};
use gpu_agent_dbus::metrics_from_dict;

use crate::client::{block_on, BusArgs, Client};
use crate::output::{emit, emit_json};
use crate::table::metrics_table;

/// Print the schedule metrics over the tasks finished so far.
///
/// The metrics of /usr/share/doc/gpu-agent/formats.md §4, as `gpuctl simulate` prints them for one
/// policy.
#[derive(clap::Args)]
#[command(after_help = "Examples:\n  gpuctl metrics\n  gpuctl metrics --json")]
pub struct Args {
    #[command(flatten)]
    bus: BusArgs,
    /// Print the metrics as a JSON object, as `gpuctl simulate --json` does.
    #[arg(long)]
    json: bool,
}

/// Prints the daemon's metrics.
pub fn run(args: Args) -> Result<()> {
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
