//! Schedule output (formats.md §3).

use std::{io::Write, path::Path};

use gpu_agent_dvfs::voltage;
use gpu_agent_plugin_api::{Clocks, DvfsClass};

use crate::atomic::AtomicFile;

/// One task on one device.
#[derive(Debug, Clone, PartialEq)]
pub struct ScheduleRow {
    /// Task id.
    pub id: String,
    /// Device index.
    pub gpu: u32,
    /// The device's name: its index, or for a MIG instance
    /// `GPU/mig/PROFILE@START` (`DeviceSpec::label`).
    pub device: String,
    /// Start, seconds.
    pub start: f64,
    /// End, seconds.
    pub end: f64,
    /// Core clock it ran at, MHz.
    pub core_mhz: u32,
    /// Memory clock it ran at, MHz.
    pub mem_mhz: u32,
    /// Energy it drew on this device, J.
    pub energy_j: f64,
    /// The clocks set, normalised to the device's default ones (fĉ, fm̂).
    pub clocks: Clocks,
    /// Its modelled run time at those clocks, seconds (t̂).
    pub runtime: f64,
    /// Its modelled power at those clocks on this device, W (P̂).
    pub power_w: f64,
    /// The energy it would have drawn at default clocks, J (E*).
    pub default_energy_j: f64,
    /// How the policy chose its clocks, where it said (`Decision::Dvfs`):
    /// its class and whether it was readjusted.
    pub dvfs: Option<(DvfsClass, bool)>,
}

/// The schedule's columns (formats.md §3).
pub const COLUMNS: [&str; 16] = [
    "id",
    "gpu",
    "start",
    "end",
    "core_mhz",
    "mem_mhz",
    "energy_j",
    "v",
    "fc",
    "fm",
    "t",
    "p",
    "default_energy_j",
    "class",
    "readjusted",
    "device",
];

/// Writes `rows` as CSV to `out`.
pub fn write_csv(rows: &[ScheduleRow], out: impl Write) -> std::io::Result<()> {
    let mut w = csv::Writer::from_writer(out);
    w.write_record(COLUMNS)?;
    for r in rows {
        let (class, readjusted) = match r.dvfs {
            Some((class, readjusted)) => (class.name().to_string(), readjusted.to_string()),
            None => (String::new(), String::new()),
        };
        w.write_record([
            r.id.clone(),
            r.gpu.to_string(),
            r.start.to_string(),
            r.end.to_string(),
            r.core_mhz.to_string(),
            r.mem_mhz.to_string(),
            r.energy_j.to_string(),
            voltage(r.clocks.core).to_string(),
            r.clocks.core.to_string(),
            r.clocks.mem.to_string(),
            r.runtime.to_string(),
            r.power_w.to_string(),
            r.default_energy_j.to_string(),
            class,
            readjusted,
            r.device.clone(),
        ])?;
    }
    w.flush()
}

/// Writes `rows` to `path` atomically: a temporary file beside it, then a rename.
pub fn write_file(rows: &[ScheduleRow], path: &Path) -> std::io::Result<()> {
    let mut file = AtomicFile::create(path)?;
    write_csv(rows, std::io::BufWriter::new(file.file()))?;
    file.commit()
}
