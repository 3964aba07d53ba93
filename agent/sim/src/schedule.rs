//! Schedule output (formats.md §3).

use std::{io::Write, path::Path};

use crate::atomic::AtomicFile;

/// One task on one device.
#[derive(Debug, Clone, PartialEq)]
pub struct ScheduleRow {
    /// Task id.
    pub id: String,
    /// Device index.
    pub gpu: u32,
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
}

/// Writes `rows` as CSV to `out`.
pub fn write_csv(rows: &[ScheduleRow], out: impl Write) -> std::io::Result<()> {
    let mut w = csv::Writer::from_writer(out);
    w.write_record([
        "id", "gpu", "start", "end", "core_mhz", "mem_mhz", "energy_j",
    ])?;
    for r in rows {
        w.write_record([
            r.id.clone(),
            r.gpu.to_string(),
            r.start.to_string(),
            r.end.to_string(),
            r.core_mhz.to_string(),
            r.mem_mhz.to_string(),
            r.energy_j.to_string(),
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
