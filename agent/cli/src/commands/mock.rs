//! `gpuctl mock`: faults on the mock GPUs of a running daemon.

use anyhow::Result;
use gpu_agent_dbus::Mock1Proxy;

use crate::client::{block_on, BusArgs, Client};
use crate::output::emit;

/// Inject faults into the mock GPUs of a daemon started with `--mock`.
///
/// For trying out and testing how the daemon handles failing GPUs without
/// failing a real one. A daemon on NVML has no such controls (the call is
/// refused as an unknown interface). Admins only.
#[derive(clap::Args)]
#[command(
    after_help = "Examples:\n  gpuctl mock inject 1 lost      # GPU 1 falls off the bus\n  gpuctl mock inject 0 xid 48    # GPU 0 reports a double-bit ECC error\n  gpuctl mock repair 1           # GPU 1 answers again\n  gpuctl devices online 1        # and takes work again"
)]
pub struct Args {
    #[command(subcommand)]
    command: Command,
}

#[derive(clap::Subcommand)]
enum Command {
    Inject(InjectArgs),
    Repair(RepairArgs),
}

/// Make mock GPU GPU fail: `lost` (it falls off the bus: every call on it
/// fails until `gpuctl mock repair`), `xid N` (the driver reports XID
/// error N), `fail METHOD` (calls of that backend method, e.g.
/// `mig_devices`, fail as not supported while the daemon runs), or `slow
/// METHOD SECONDS` (they take that long, e.g. `slow reset_gpu 60`). The daemon
/// takes the GPU offline on `lost` and on the critical XIDs (48, 63, 64,
/// 74, 79, 92, 94, 95); it only logs the others.
#[derive(clap::Args)]
struct InjectArgs {
    #[command(flatten)]
    bus: BusArgs,
    /// The GPU's index.
    gpu: u32,
    /// `lost`, `xid N`, `fail METHOD` or `slow METHOD SECONDS`.
    #[arg(required = true, num_args = 1..=3, value_name = "FAULT")]
    fault: Vec<String>,
}

/// Put lost mock GPU GPU back on the bus, as a GPU reset would. The daemon
/// keeps it offline until `gpuctl devices online GPU`.
#[derive(clap::Args)]
struct RepairArgs {
    #[command(flatten)]
    bus: BusArgs,
    /// The GPU's index.
    gpu: u32,
}

/// Runs `gpuctl mock`.
pub fn run(args: Args) -> Result<()> {
    match args.command {
        Command::Inject(args) => {
            let fault = args.fault.join(" ");
            block_on(async {
                let client = Client::connect(&args.bus).await?;
                let mock = client.call(Mock1Proxy::new(client.connection())).await?;
                client.call(mock.inject_fault(args.gpu, &fault)).await
            })?;
            emit(&format!("injected {fault} on mock GPU {}\n", args.gpu))
        }
        Command::Repair(args) => {
            block_on(async {
                let client = Client::connect(&args.bus).await?;
                let mock = client.call(Mock1Proxy::new(client.connection())).await?;
                client.call(mock.repair(args.gpu)).await
            })?;
            emit(&format!("mock GPU {} is back on the bus\n", args.gpu))
        }
    }
}
