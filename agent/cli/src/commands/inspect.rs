//! `gpuctl inspect`: read GPUs directly, through NVML or a mock host.

use std::fmt::Display;
use std::path::PathBuf;
use std::sync::Arc;

use anyhow::{bail, Context, Result};
use gpu_agent_backend::mock::{MockBackend, SystemClock};
use gpu_agent_backend::nvml::NvmlBackend;
use gpu_agent_backend::{ClockReadings, GpuBackend, Snapshot};

use crate::output::{emit, emit_json};

/// Read what the GPUs report (inventory, clocks, power, energy, MIG) straight
/// from the driver, without the daemon. Reads only: changes nothing.
#[derive(clap::Args)]
pub struct Args {
    /// Read a mock host described by this file (/usr/share/doc/gpu-agent/formats.md §2) instead of NVML.
    #[arg(long, value_name = "HOST.toml")]
    mock: Option<PathBuf>,
    /// Only this GPU (NVML index).
    #[arg(long, value_name = "INDEX")]
    gpu: Option<u32>,
    /// Print a JSON array, one object per GPU, instead of text.
    #[arg(long)]
    json: bool,
}

pub fn run(args: Args) -> Result<()> {
    let backend: Box<dyn GpuBackend> = match &args.mock {
        Some(path) => {
            let host = gpu_agent_sim::input::host::load(path)?;
            Box::new(MockBackend::new(&host, Arc::new(SystemClock::new())))
        }
        None => Box::new(NvmlBackend::new()?),
    };
    let count = backend.device_count()?;
    let gpus = match args.gpu {
        Some(g) if g >= count => bail!("--gpu {g}: the host has {count} GPU(s), 0..{count}"),
        Some(g) => g..g + 1,
        None => 0..count,
    };
    let snapshots = gpus
        .map(|g| Snapshot::read(backend.as_ref(), g).with_context(|| format!("reading GPU {g}")))
        .collect::<Result<Vec<_>>>()?;
    if args.json {
        emit_json(&snapshots)?;
    } else {
        for s in &snapshots {
            emit(&text(s))?;
        }
    }
    Ok(())
}

fn or_na<T: Display>(v: Option<T>) -> String {
    v.map_or_else(|| "n/a".to_string(), |v| v.to_string())
}

fn clock_line(c: &ClockReadings) -> String {
    format!(
        "{} MHz now; default {}, range {}-{} MHz",
        or_na(c.current),
        or_na(c.default),
        or_na(c.min),
        or_na(c.max)
    )
}

fn watts(mw: u32) -> String {
    format!("{:.1} W", f64::from(mw) / 1000.0)
}

/// The human-readable block for one GPU.
fn text(s: &Snapshot) -> String {
    let i = &s.info;
    let mut out = format!(
        "GPU {}  {}  ({})\n",
        i.index,
        i.name,
        i.architecture.as_deref().unwrap_or("architecture n/a")
    );
    let mut row = |k: &str, v: String| out.push_str(&format!("  {k:<13} {v}\n"));
    row("uuid", i.uuid.clone());
    row("pci", i.pci_bus_id.clone());
    row(
        "memory",
        format!(
            "{} MiB total, {} MiB used",
            s.memory.total_bytes >> 20,
            s.memory.used_bytes >> 20
        ),
    );
    row("core clock", clock_line(&s.core_clock));
    row("memory clock", clock_line(&s.memory_clock));
    row(
        "clock table",
        match &s.supported_clocks {
            Some(t) => format!(
                "{} memory clock(s), {} (memory, core) pairs",
                t.len(),
                t.iter().map(|m| m.core_mhz.len()).sum::<usize>()
            ),
            None => "n/a".to_string(),
        },
    );
    row(
        "power",
        format!(
            "{} now; {}",
            s.power_mw.map_or("n/a".to_string(), watts),
            match s.power_limits {
                Some(l) => format!(
                    "limit {} (settable {} to {}, default {})",
                    watts(l.current_mw),
                    watts(l.min_mw),
                    watts(l.max_mw),
                    l.default_mw.map_or("n/a".to_string(), watts)
                ),
                None => "limit n/a".to_string(),
            }
        ),
    );
    row(
        "energy",
        format!("{} mJ since the driver loaded", or_na(s.energy_mj)),
    );
    row(
        "utilisation",
        s.utilization.map_or("n/a".to_string(), |u| {
            format!("{} % gpu, {} % memory", u.gpu_pct, u.memory_pct)
        }),
    );
    row("temperature", format!("{} °C", or_na(s.temperature_c)));
    row(
        "processes",
        if s.processes.is_empty() {
            "none".to_string()
        } else {
            let pids: Vec<String> = s.processes.iter().map(|p| p.pid.to_string()).collect();
            format!("pid {}", pids.join(", "))
        },
    );
    let mig = match s.mig_mode {
        None => "not supported".to_string(),
        Some(m) => format!(
            "{} (after reset: {}), {} GPU instance(s), {} MIG device(s)",
            if m.current { "on" } else { "off" },
            if m.pending { "on" } else { "off" },
            s.gpu_instances.len(),
            s.mig_devices.len()
        ),
    };
    row("MIG", mig);
    for p in &s.gpu_instance_profiles {
        out.push_str(&format!("    {p}\n"));
    }
    out
}
