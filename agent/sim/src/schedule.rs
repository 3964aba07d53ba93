//! Schedule output (formats.md §3).

use std::{io::Write, path::Path, sync::Arc};

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
    /// `GPU/mig/PROFILE@START` (`DeviceSpec::label`), shared by the rows of
    /// the device.
    pub device: Arc<str>,
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

/// Writes `rows` as CSV to `out`, each field formatted into a buffer kept
/// from row to row.
pub fn write_csv(rows: &[ScheduleRow], out: impl Write) -> std::io::Result<()> {
    use std::fmt::Write as _;
    let mut w = csv::Writer::from_writer(out);
    w.write_record(COLUMNS)?;
    let mut fields: [String; COLUMNS.len()] = Default::default();
    for r in rows {
        for f in &mut fields {
            f.clear();
        }
        let [id, gpu, start, end, core_mhz, mem_mhz, energy_j, v, fc, fm, t, p, default_energy_j, class, readjusted, device] =
            &mut fields;
        (|| -> std::fmt::Result {
            id.push_str(&r.id);
            write!(gpu, "{}", r.gpu)?;
            write!(start, "{}", r.start)?;
            write!(end, "{}", r.end)?;
            write!(core_mhz, "{}", r.core_mhz)?;
            write!(mem_mhz, "{}", r.mem_mhz)?;
            write!(energy_j, "{}", r.energy_j)?;
            write!(v, "{}", voltage(r.clocks.core))?;
            write!(fc, "{}", r.clocks.core)?;
            write!(fm, "{}", r.clocks.mem)?;
            write!(t, "{}", r.runtime)?;
            write!(p, "{}", r.power_w)?;
            write!(default_energy_j, "{}", r.default_energy_j)?;
            if let Some((c, readjust)) = r.dvfs {
                class.push_str(c.name());
                write!(readjusted, "{readjust}")?;
            }
            device.push_str(&r.device);
            Ok(())
        })()
        .expect("formatting into a String cannot fail");
        w.write_record(&fields)?;
    }
    w.flush()
}

/// Writes `rows` to `path` atomically: a temporary file beside it, then a rename.
pub fn write_file(rows: &[ScheduleRow], path: &Path) -> std::io::Result<()> {
    let mut file = AtomicFile::create(path)?;
    write_csv(rows, std::io::BufWriter::new(file.file()))?;
    file.commit()
}
