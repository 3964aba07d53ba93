//! `gpuctl devices`: the schedulable devices, and taking a GPU offline or online.

use anyhow::{anyhow, Result};
use gpu_agent_dbus::{DeviceStatus, AGENT_PATH, BUS_NAME, DEVICE_INTERFACE};
use zbus::{fdo::ObjectManagerProxy, proxy::CacheProperties};

use crate::client::{block_on, BusArgs, Client};
use crate::output::{emit, emit_json};
use crate::table::{Align, Table};
use crate::units;

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
pub struct Args {
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

/// Prints the devices, or takes one offline or online.
pub fn run(args: Args) -> Result<()> {
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

#[cfg(test)]
mod tests {
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
}
