//! `gpuctl adopt` and `gpuctl release`: work the agent did not place (a
//! Slurm job), held on its GPUs at the active DVFS policy's clocks.

use anyhow::Result;
use gpu_agent_dbus::{AdoptSpec, TaskInfo};

use crate::client::{block_on, BusArgs, Client};
use crate::emit;

/// Adopt a job the agent did not place (admins): its GPUs take nothing else
/// and run at the clocks the active DVFS policy picks for its app and
/// deadline until `gpuctl release`. Prints the task id it shows under.
///
/// Without --app, or under a policy that sets no clocks, the GPUs keep their
/// default clocks. Adopting the same external id on the same GPUs again
/// prints the same id.
#[derive(clap::Args)]
#[command(
    after_help = "Example (a Slurm prolog):\n  gpuctl adopt --devices 0,1 --external-id slurm:$SLURM_JOB_ID --owner-uid $SLURM_JOB_UID --app resnet --deadline $(date -d '+2 hours' +%s)"
)]
pub struct AdoptArgs {
    /// The GPU indices the job holds, comma-separated.
    #[arg(long, value_name = "INDICES", value_delimiter = ',', required = true)]
    devices: Vec<u32>,
    /// The outside scheduler's id of the job (e.g. slurm:4242).
    #[arg(long, value_name = "ID")]
    external_id: String,
    /// The job owner's uid.
    #[arg(long, value_name = "UID")]
    owner_uid: u32,
    /// The job's DVFS application profile.
    #[arg(long, value_name = "NAME", default_value = "default")]
    app: String,
    /// When the job must end, unix seconds (its time limit's end).
    #[arg(long, value_name = "UNIX_TIME")]
    deadline: f64,
    #[command(flatten)]
    bus: BusArgs,
    /// Print {"id": ...} instead of the bare id.
    #[arg(long)]
    json: bool,
}

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
pub struct ReleaseArgs {
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

/// `gpuctl adopt`.
pub fn adopt(args: AdoptArgs) -> Result<()> {
    let spec = AdoptSpec {
        devices: args.devices,
        external_id: args.external_id,
        owner_uid: args.owner_uid,
        app: args.app,
        deadline: args.deadline,
    };
    let id = block_on(async {
        let client = Client::connect(&args.bus).await?;
        client.call(client.agent.adopt(spec.to_dict())).await
    })?;
    if args.json {
        emit(&format!("{}\n", serde_json::json!({ "id": id })))
    } else {
        emit(&format!("{id}\n"))
    }
}

/// `gpuctl release`.
pub fn release(args: ReleaseArgs) -> Result<()> {
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
