//! `gpuctl watch`: task changes as they come.

use anyhow::{anyhow, Context, Result};
use futures_util::StreamExt;
use serde::Serialize;

use crate::client::{block_on, BusArgs, Client};
use crate::clock::Clock;
use crate::output::emit;

/// Follow task changes live: one line per change, `TIME ID STATE`, until
/// Ctrl-C.
#[derive(clap::Args)]
#[command(after_help = "Examples:\n  gpuctl watch\n  gpuctl watch --json | jq .")]
pub struct Args {
    #[command(flatten)]
    bus: BusArgs,
    /// Print one JSON object per line: {"time": unix seconds, "id": ..., "state": ...}.
    #[arg(long)]
    json: bool,
}

/// Prints task changes as they come, until Ctrl-C (or a closed pipe).
pub fn run(args: Args) -> Result<()> {
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
