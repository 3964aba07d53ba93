//! `gpuctl release`: end an adopted job, recording how it ended.

use anyhow::Result;
use gpu_agent_dbus::TaskInfo;

use crate::client::{block_on, BusArgs, Client};
use crate::output::emit;

/// End an adopted job (admins): its GPUs' clocks are restored and they take
/// work again. Prints its GPU energy.
///
/// --end records how the job ended: completed (the task shows succeeded,
/// the default), cancelled, timeout (failed, with the reason timeout) or
/// failed.
#[derive(clap::Args)]
#[command(
    after_help = "Examples (a Slurm epilog):\n  gpuctl release t42 --json\n  gpuctl release t42 --end cancelled"
)]
pub struct Args {
    /// The id `gpuctl adopt` printed.
    id: String,
    /// How the job ended.
    #[arg(long, value_name = "END", value_parser = ["completed", "cancelled", "timeout", "failed"])]
    end: Option<String>,
    #[command(flatten)]
    bus: BusArgs,
    /// Print {"id": ..., "external_id": ..., "energy_j": ...}.
    #[arg(long)]
    json: bool,
}

/// `gpuctl release`.
pub fn run(args: Args) -> Result<()> {
    let task = block_on(async {
        let client = Client::connect(&args.bus).await?;
        match &args.end {
            Some(end) => {
                client
                    .call(client.agent.release_with_end(&args.id, end))
                    .await?
            }
            None => client.call(client.agent.release(&args.id)).await?,
        }
        let dict = client.call(client.agent.get_task(&args.id)).await?;
        TaskInfo::from_dict(&dict).map_err(|e| anyhow::anyhow!("the daemon sent a bad task: {e}"))
    })?;
    if args.json {
        let value = serde_json::json!({
            "id": task.id,
            "external_id": task.spec.external_id,
            "state": task.state.as_str(),
            "energy_j": task.energy_j,
        });
        emit(&format!("{value}\n"))
    } else {
        let energy = task
            .energy_j
            .map_or("unknown".to_string(), |j| format!("{j:.1} J"));
        emit(&format!(
            "released {} ({}) as {}: GPU energy {energy}\n",
            task.id, task.spec.external_id, task.state
        ))
    }
}
