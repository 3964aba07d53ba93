//! `gpuctl adopt`: work the agent did not place (a Slurm job), held on its
//! GPUs at the active DVFS policy's clocks until `gpuctl release`.

use anyhow::Result;
use gpu_agent_dbus::AdoptSpec;

use crate::client::{block_on, BusArgs, Client};
use crate::clock::Clock;
use crate::output::emit;
use crate::units::{self, FromNow};

/// Adopt a job the agent did not place (admins): its GPUs take nothing else
/// and run at the clocks the active DVFS policy picks for its app and
/// deadline until `gpuctl release`. Prints the task id it shows under.
///
/// Without --app, or under a policy that sets no clocks, the GPUs keep their
/// default clocks. Adopting the same external id on the same GPUs again
/// prints the same id.
#[derive(clap::Args)]
#[command(
    after_help = "Example (a Slurm prolog):\n  gpuctl adopt --devices 0,1 --external-id slurm:$SLURM_JOB_ID --owner-uid $SLURM_JOB_UID --app resnet --deadline $(date -d '+2 hours' +%s)\n  gpuctl adopt --devices 0 --external-id slurm:42 --owner-uid 1000 --deadline 2h"
)]
pub struct Args {
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
    /// When the job must end (its time limit's end): unix seconds
    /// (1764300000), a duration from now (2h, 90m, 1h30m) or an RFC 3339
    /// time in UTC (2026-11-28T06:00:00Z). One already past is refused.
    #[arg(long, value_name = "WHEN", value_parser = parse_deadline)]
    deadline: f64,
    #[command(flatten)]
    bus: BusArgs,
    /// Print {"id": ...} instead of the bare id.
    #[arg(long)]
    json: bool,
}

/// `--deadline`: plain seconds are unix time (what a Slurm prolog passes);
/// otherwise a duration from now or a time, as [`units::parse_time`] reads
/// them.
fn parse_deadline(text: &str) -> Result<f64, String> {
    if let Ok(unix) = text.trim().parse::<f64>() {
        return Ok(unix);
    }
    units::parse_time(text, Clock::system().now, FromNow::After)
}

/// `gpuctl adopt`.
pub fn run(args: Args) -> Result<()> {
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

#[cfg(test)]
mod tests {
    use std::time::{SystemTime, UNIX_EPOCH};

    use super::parse_deadline;

    #[test]
    fn a_deadline_is_unix_seconds_a_duration_from_now_or_an_rfc_3339_time() {
        assert_eq!(parse_deadline("1764300000"), Ok(1_764_300_000.0));
        assert_eq!(parse_deadline("2026-11-28T06:00:00Z"), Ok(1_795_845_600.0));
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap()
            .as_secs_f64();
        let in_90m = parse_deadline("90m").unwrap();
        assert!((in_90m - now - 5400.0).abs() < 60.0, "{in_90m} vs {now}");
        let e = parse_deadline("tomorrow").unwrap_err();
        assert!(e.contains("got \"tomorrow\""), "{e}");
        assert!(parse_deadline("2h30").is_err());
    }
}
