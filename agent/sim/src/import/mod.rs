//! Converting public workloads into a host description (formats.md §2) and a
//! trace (formats.md §1): [`alibaba`] for Alibaba's GPU cluster trace v2023,
//! [`sos`] for the stochastic online scheduling workload. The rules are in
//! docs/import.md.

pub mod alibaba;
pub mod sos;

use std::io::Write;
use std::path::{Path, PathBuf};

use gpu_agent_core::TaskSpec;

use crate::atomic::AtomicFile;

use crate::input::trace::Trace;
use crate::input::InputError;
use gpu_agent_core::apps::AppLibrary;
use gpu_agent_core::catalogue::GpuModel;
use gpu_agent_core::host::Host;

/// The most devices one `[[gpu]]` entry may expand to (the host reader's limit);
/// larger counts are written as several entries.
const MAX_COUNT: u32 = 4096;

/// One `[[gpu]]` entry of the host to write.
#[derive(Debug, Clone, PartialEq)]
pub struct HostEntry {
    /// What the entry stands for, written as a comment above it.
    pub note: String,
    /// Catalogue model.
    pub model: &'static GpuModel,
    /// Devices.
    pub count: u32,
    /// Work units per second at default clocks.
    pub speed: f64,
    /// Memory override (GB), when it differs from the catalogue's.
    pub mem_gb: Option<f64>,
}

/// A converted workload: a host and the tasks of a trace.
#[derive(Debug, Clone, PartialEq)]
pub struct Conversion {
    /// First comment lines of the host file.
    pub host_header: String,
    /// The host's entries, in device order.
    pub host: Vec<HostEntry>,
    /// The trace's tasks, in input order (written without `app`: each runs
    /// the built-in `default` profile).
    pub tasks: Vec<TaskSpec>,
}

/// Why a conversion failed.
#[derive(Debug, thiserror::Error)]
pub enum ImportError {
    /// A bad value in an input file.
    #[error(transparent)]
    Input(#[from] InputError),
    /// An option out of range.
    #[error("{option}: {message}")]
    Option {
        /// The option, as the command line spells it.
        option: &'static str,
        /// What was wrong and what was expected.
        message: String,
    },
    /// Every record was skipped or outside the slice.
    #[error("nothing to write: {0}")]
    Empty(String),
    /// An output file could not be written.
    #[error("cannot write {}: {cause}", path.display())]
    Write {
        /// The file.
        path: PathBuf,
        /// Why.
        cause: std::io::Error,
    },
}

impl Conversion {
    /// Devices in the host.
    pub fn devices(&self) -> u32 {
        self.host.iter().map(|e| e.count).sum()
    }

    /// The host description (TOML).
    pub fn host_toml(&self) -> String {
        let mut out = self.host_header.clone();
        for entry in &self.host {
            let mut left = entry.count;
            while left > 0 {
                let count = left.min(MAX_COUNT);
                left -= count;
                out += &format!(
                    "\n# {}\n[[gpu]]\nmodel = \"{}\"\ncount = {count}\nspeed = {:?}\n",
                    entry.note, entry.model.name, entry.speed
                );
                if let Some(mem) = entry.mem_gb {
                    out += &format!("mem_gb = {mem:?}\n");
                }
            }
        }
        out
    }

    /// Writes the trace (CSV) to `out`: `gpus` always, `runtimes` when any
    /// task has them.
    pub fn write_trace(&self, out: impl Write) -> std::io::Result<()> {
        let with_runtimes = self.tasks.iter().any(|t| !t.runtimes.is_empty());
        let mut w = csv::Writer::from_writer(out);
        let mut header = vec![
            "id", "arrival", "workload", "mem_gb", "deadline", "weight", "gpus",
        ];
        if with_runtimes {
            header.push("runtimes");
        }
        w.write_record(&header)?;
        for t in &self.tasks {
            let mut row = vec![
                t.id.clone(),
                decimal(t.arrival),
                decimal(t.workload),
                decimal(t.mem_gb),
                decimal(t.deadline),
                decimal(t.weight),
                t.gpus.to_string(),
            ];
            if with_runtimes {
                let runtimes: Vec<String> = t.runtimes.iter().map(|&r| decimal(r)).collect();
                row.push(runtimes.join(";"));
            }
            w.write_record(&row)?;
        }
        w.flush()
    }

    /// The trace (CSV) as text.
    pub fn trace_csv(&self) -> String {
        let mut out = Vec::new();
        self.write_trace(&mut out)
            .expect("writing to memory cannot fail");
        String::from_utf8(out).expect("the CSV writer writes UTF-8")
    }

    /// The host and the trace as the project's readers read the written files
    /// (`converted.toml` and `converted.csv` in errors), for replaying a
    /// conversion in-process.
    pub fn read_back(&self, apps: &AppLibrary) -> Result<(Host, Trace), InputError> {
        let host = crate::input::host::parse(Path::new("converted.toml"), &self.host_toml())?;
        let trace = Trace::parse(
            Path::new("converted.csv"),
            self.trace_csv().as_bytes(),
            &host,
            apps,
        )?;
        Ok((host, trace))
    }

    /// Writes the host to `host` and the trace to `trace`, each through a
    /// temporary file beside it and a rename, so that neither is ever half
    /// written.
    pub fn write_files(&self, host: &Path, trace: &Path) -> Result<(), ImportError> {
        if host == trace {
            return Err(ImportError::Option {
                option: "--out-trace",
                message: "must differ from --out-host".into(),
            });
        }
        let write_error = |path: &Path| {
            let path = path.to_path_buf();
            move |cause| ImportError::Write { path, cause }
        };
        let mut host_file = AtomicFile::create(host).map_err(write_error(host))?;
        std::io::Write::write_all(host_file.file(), self.host_toml().as_bytes())
            .map_err(write_error(host))?;
        let mut trace_file = AtomicFile::create(trace).map_err(write_error(trace))?;
        self.write_trace(std::io::BufWriter::new(trace_file.file()))
            .map_err(write_error(trace))?;
        host_file.commit().map_err(write_error(host))?;
        trace_file.commit().map_err(write_error(trace))?;
        Ok(())
    }
}

/// `x` to the millisecond (or the thousandth), without trailing zeros.
fn decimal(x: f64) -> String {
    let text = format!("{x:.3}");
    let text = text.trim_end_matches('0').trim_end_matches('.');
    match text {
        "-0" => "0".into(),
        t => t.into(),
    }
}

/// The error at `line` of `path` about `column`.
fn column_error(path: &Path, line: u64, column: &str, message: String) -> ImportError {
    InputError::at(path, Some(line), Some(format!("column {column}")), message).into()
}

/// A CSV-level error (bad UTF-8, a row of the wrong length) at its line.
fn csv_error(path: &Path, e: csv::Error) -> ImportError {
    let line = e.position().map(|p| p.line());
    let message = match e.kind() {
        csv::ErrorKind::UnequalLengths {
            expected_len, len, ..
        } => format!("expected {expected_len} fields like the header, got {len}"),
        _ => e.to_string(),
    };
    InputError::at(path, line, None, message).into()
}

/// A file that cannot be opened.
fn unreadable(path: &Path, e: std::io::Error) -> ImportError {
    InputError::at(path, None, None, format!("cannot read: {e}")).into()
}

#[cfg(test)]
mod tests {
    use super::*;
    use gpu_agent_core::catalogue;
    use gpu_agent_plugin_api::AppModel;

    #[test]
    fn decimals_are_rounded_to_thousandths_without_trailing_zeros() {
        let cases = [
            (0.0, "0"),
            (12.0, "12"),
            (567.64, "567.64"),
            (1135.28 + 1e9, "1000001135.28"),
            (0.1 + 0.2, "0.3"),
            (2.0 / 3.0, "0.667"),
            (-0.0001, "0"),
        ];
        for (x, text) in cases {
            assert_eq!(decimal(x), text, "{x}");
        }
    }

    fn conversion(count: u32) -> Conversion {
        Conversion {
            host_header: "# test\n".into(),
            host: vec![HostEntry {
                note: "many".into(),
                model: catalogue::lookup("T4").unwrap(),
                count,
                speed: 0.5,
                mem_gb: Some(8.0),
            }],
            tasks: vec![TaskSpec {
                id: "a,b".into(),
                arrival: 1.0,
                workload: 2.5,
                mem_gb: 0.0,
                deadline: 6.0,
                weight: 1.5,
                gpus: 2,
                alt_gpus: Vec::new(),
                runtimes: vec![],
                app: AppModel::builtin_default(),
            }],
        }
    }

    #[test]
    fn counts_above_the_readers_limit_become_several_entries() {
        let c = conversion(MAX_COUNT + 3);
        assert_eq!(
            c.host_toml(),
            "# test\n\n# many\n[[gpu]]\nmodel = \"T4\"\ncount = 4096\nspeed = 0.5\nmem_gb = 8.0\n\
             \n# many\n[[gpu]]\nmodel = \"T4\"\ncount = 3\nspeed = 0.5\nmem_gb = 8.0\n"
        );
        let host = crate::input::host::parse(Path::new("host.toml"), &c.host_toml()).unwrap();
        assert_eq!(host.devices.len(), 4099);
        assert_eq!(c.devices(), 4099);
    }

    #[test]
    fn trace_has_runtimes_only_when_a_task_has_them() {
        let mut c = conversion(1);
        let mut out = Vec::new();
        c.write_trace(&mut out).unwrap();
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "id,arrival,workload,mem_gb,deadline,weight,gpus\n\"a,b\",1,2.5,0,6,1.5,2\n"
        );
        c.tasks[0].runtimes = vec![3.0, 0.25];
        let mut out = Vec::new();
        c.write_trace(&mut out).unwrap();
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "id,arrival,workload,mem_gb,deadline,weight,gpus,runtimes\n\"a,b\",1,2.5,0,6,1.5,2,3;0.25\n"
        );
    }

    #[test]
    fn files_are_written_whole_and_nothing_else_is_left() {
        let dir = tempfile::tempdir().unwrap();
        let (host, trace) = (dir.path().join("h.toml"), dir.path().join("t.csv"));
        let c = conversion(2);
        c.write_files(&host, &trace).unwrap();
        assert_eq!(std::fs::read_to_string(&host).unwrap(), c.host_toml());
        assert!(std::fs::read_to_string(&trace)
            .unwrap()
            .starts_with("id,arrival"));
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 2);

        let same = c.write_files(&host, &host).unwrap_err();
        assert_eq!(same.to_string(), "--out-trace: must differ from --out-host");
        let missing = dir.path().join("no/such/dir/t.csv");
        let err = c.write_files(&dir.path().join("h2.toml"), &missing);
        assert!(err
            .unwrap_err()
            .to_string()
            .starts_with(&format!("cannot write {}:", missing.display())));
        assert!(!dir.path().join("h2.toml").exists());
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 2);
    }
}
