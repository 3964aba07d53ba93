//! `gpu_agent._native`: the Python package's way into the workspace. Each
//! function calls what gpuctl calls (`gpu_agent_cli::offline`,
//! `gpu_agent_cli::run_captured`, the sim crate's readers), so the package
//! and gpuctl share every rule and every message; `gpu_agent/__init__.py`
//! turns Python objects into the files' text and back.
//!
//! The work runs with the GIL released (`Python::detach`): a policy written
//! in Python (the `python` plugin) takes it from inside a simulation.
//! Errors are raised as `gpu_agent.errors` classes carrying the message
//! gpuctl prints (`{:#}`, the chain of causes); what gpuctl logs as a
//! warning (a policy fault and the FIFO fallback, a plugin file skipped) is
//! a Python warning with the same text.

use std::cell::RefCell;
use std::path::{Path, PathBuf};

use anyhow::Context;
use gpu_agent_cli::offline::{self, Request};
use gpu_agent_core::apps::AppLibrary;
use gpu_agent_core::host::Host;
use gpu_agent_loader::{PluginError, Registry};
use gpu_agent_sim::import::ImportError;
use gpu_agent_sim::input::{self, host::ClusterSpec, trace::Trace, InputError};
use gpu_agent_sim::SimError;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList};

/// Where an input comes from: a file, or its text named by a label (the
/// name errors give it). Host and profile text is JSON of the TOML's
/// tables; trace text is the CSV.
#[derive(FromPyObject)]
enum Source {
    Text(String, String),
    File(PathBuf),
}

impl Source {
    /// The name errors give the input.
    fn name(&self) -> &Path {
        match self {
            Source::Text(label, _) => Path::new(label),
            Source::File(path) => path,
        }
    }

    /// A host or profile file's TOML: the file's, or the JSON's tables
    /// written as TOML.
    fn toml(&self) -> anyhow::Result<String> {
        match self {
            Source::File(path) => Ok(input::read_text(path)?),
            Source::Text(label, json) => {
                let value: toml::Value = serde_json::from_str(json)
                    .with_context(|| format!("{label}: not TOML data"))?;
                toml::to_string(&value).with_context(|| format!("{label}: not TOML data"))
            }
        }
    }
}

/// Reads the host (and its `[cluster]` table) as `gpuctl simulate --host` does.
fn host(source: &Source) -> anyhow::Result<(Host, Option<ClusterSpec>)> {
    Ok(input::host::parse_with_cluster(
        source.name(),
        &source.toml()?,
    )?)
}

/// Reads the profiles as `--apps` does; none: the built-in `default` only.
fn apps(source: Option<&Source>) -> anyhow::Result<AppLibrary> {
    match source {
        Some(source) => Ok(input::apps::parse(source.name(), &source.toml()?)?),
        None => Ok(AppLibrary::default()),
    }
}

/// Reads the trace on `host` as `--trace` does.
fn trace(source: &Source, host: &Host, apps: &AppLibrary) -> Result<Trace, InputError> {
    match source {
        Source::File(path) => Trace::load(path, host, apps),
        Source::Text(label, csv) => Trace::parse(Path::new(label), csv.as_bytes(), host, apps),
    }
}

/// Raises `e` as the `gpu_agent.errors` class its cause calls for, with
/// gpuctl's message.
fn raise(py: Python<'_>, e: anyhow::Error) -> PyErr {
    let class = if e.chain().any(|c| {
        c.is::<InputError>()
            || c.downcast_ref::<ImportError>()
                .is_some_and(|e| !matches!(e, ImportError::Write { .. }))
            || c.is::<clap::Error>()
            || c.is::<serde_json::Error>()
            || c.is::<toml::ser::Error>()
    }) {
        "InputError"
    } else if e
        .chain()
        .any(|c| c.is::<PluginError>() || c.is::<SimError>())
    {
        "PolicyError"
    } else {
        "Error"
    };
    let message = format!("{e:#}");
    match py
        .import("gpu_agent.errors")
        .and_then(|m| m.getattr(class))
        .and_then(|c| c.call1((message,)))
    {
        Ok(instance) => PyErr::from_value(instance),
        Err(e) => e,
    }
}

thread_local! {
    /// The warnings logged on this thread by the call running on it.
    static WARNED: RefCell<Vec<String>> = const { RefCell::new(Vec::new()) };
}

/// The `log` crate's logger in this module: keeps warnings and errors for
/// [`unlocked`] to hand to Python, as gpuctl prints them to stderr.
struct Warnings;

impl log::Log for Warnings {
    fn enabled(&self, metadata: &log::Metadata) -> bool {
        metadata.level() <= log::Level::Warn
    }

    fn log(&self, record: &log::Record) {
        if self.enabled(record.metadata()) {
            WARNED.with(|w| w.borrow_mut().push(record.args().to_string()));
        }
    }

    fn flush(&self) {}
}

/// Runs `work` without the GIL, then warns what it logged and raises its
/// error.
fn unlocked<T: Send>(
    py: Python<'_>,
    work: impl FnOnce() -> anyhow::Result<T> + Send,
) -> PyResult<T> {
    let done = py.detach(|| {
        WARNED.with(|w| w.borrow_mut().clear());
        let done = work();
        (done, WARNED.with(|w| w.take()))
    });
    let (done, warned) = done;
    if !warned.is_empty() {
        let warn = py.import("warnings")?.getattr("warn")?;
        for message in warned {
            warn.call1((message,))?;
        }
    }
    done.map_err(|e| raise(py, e))
}

/// Replays `trace` on `host` under `policy` as `gpuctl simulate --json`
/// does: its JSON, the schedule CSV when asked for, and the trace's
/// warnings.
#[pyfunction]
#[pyo3(signature = (host, trace, apps, policy, params, plugin_dir, schedule, mig_delay_s))]
#[allow(clippy::too_many_arguments)]
fn simulate(
    py: Python<'_>,
    host: Source,
    trace: Source,
    apps: Option<Source>,
    policy: String,
    params: Vec<(String, String)>,
    plugin_dir: PathBuf,
    schedule: bool,
    mig_delay_s: f64,
) -> PyResult<(String, Option<String>, Vec<String>)> {
    unlocked(py, || {
        let library = self::apps(apps.as_ref())?;
        let (loaded, cluster) = self::host(&host)?;
        let read = self::trace(&trace, &loaded, &library)?;
        let done = offline::simulate_one(&Request {
            host_path: host.name(),
            host: &loaded,
            cluster: cluster.as_ref(),
            trace_path: trace.name(),
            trace: &read,
            policy: &policy,
            params: &params,
            plugin_dir: &plugin_dir,
            schedule,
            mig_delay_s,
        })?;
        Ok((done.json, done.schedule, read.warnings))
    })
}

/// The policies of a plugin directory, (name, description) each, and its
/// files that are not plugins, each with why.
type Found = (Vec<(String, String)>, Vec<String>);

/// The plugins in `plugin_dir`.
#[pyfunction]
fn policies(py: Python<'_>, plugin_dir: PathBuf) -> PyResult<Found> {
    unlocked(py, || {
        let registry = Registry::load_dir(&plugin_dir)?;
        let names = registry
            .plugins
            .iter()
            .map(|p| (p.name().to_string(), p.description().to_string()))
            .collect();
        Ok((
            names,
            registry.failures.iter().map(ToString::to_string).collect(),
        ))
    })
}

/// The policy `name` in `plugin_dir` as `gpuctl policy show --json` shows
/// it (JSON).
#[pyfunction]
fn describe(py: Python<'_>, name: String, plugin_dir: PathBuf) -> PyResult<String> {
    unlocked(py, || {
        let registry = Registry::load_dir(&plugin_dir)?;
        Ok(offline::describe(registry.find(&name)?).to_string())
    })
}

/// The tasks of a trace as the simulator reads it on `host`: one dict a
/// row, every column of formats.md §1 (empty lists and `None` where the
/// row gives none; `app` `default` where it names none).
#[pyfunction]
fn read_trace<'py>(
    py: Python<'py>,
    trace: Source,
    host: Source,
    apps: Option<Source>,
) -> PyResult<(Bound<'py, PyList>, Vec<String>)> {
    let read = unlocked(py, || {
        let library = self::apps(apps.as_ref())?;
        let (loaded, _) = self::host(&host)?;
        Ok(self::trace(&trace, &loaded, &library)?)
    })?;
    let rows = PyList::empty(py);
    for task in &read.tasks {
        let s = &task.spec;
        let row = PyDict::new(py);
        row.set_item("id", &s.id)?;
        row.set_item("arrival", s.arrival)?;
        row.set_item("workload", s.workload)?;
        row.set_item("mem_gb", s.mem_gb)?;
        row.set_item("deadline", s.deadline)?;
        row.set_item("weight", s.weight)?;
        row.set_item("gpus", s.gpus)?;
        row.set_item("gpus_alt", &s.alt_gpus)?;
        row.set_item("runtimes", &s.runtimes)?;
        row.set_item("app", s.app.name.as_str())?;
        row.set_item("command", &task.command)?;
        row.set_item("actual", task.actual)?;
        rows.append(row)?;
    }
    Ok((rows, read.warnings))
}

/// Writes `text` to `path` whole or not at all (a temporary file beside
/// it, then a rename), as gpuctl writes every file.
#[pyfunction]
fn write_text(py: Python<'_>, path: PathBuf, text: String) -> PyResult<()> {
    unlocked(py, || {
        let mut file = gpu_agent_sim::atomic::AtomicFile::create(&path)
            .with_context(|| format!("cannot write {}", path.display()))?;
        std::io::Write::write_all(file.file(), text.as_bytes())
            .and_then(|()| file.commit())
            .with_context(|| format!("cannot write {}", path.display()))
    })
}

/// Runs the gpuctl command line `argv` (without `gpuctl`) in-process and
/// returns what it printed.
#[pyfunction]
fn gpuctl(py: Python<'_>, argv: Vec<String>) -> PyResult<String> {
    unlocked(py, || gpu_agent_cli::run_captured(argv))
}

/// The module.
#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    static LOGGER: Warnings = Warnings;
    // Set once per process; a second import finds it set.
    if log::set_logger(&LOGGER).is_ok() {
        log::set_max_level(log::LevelFilter::Warn);
    }
    m.add_function(wrap_pyfunction!(simulate, m)?)?;
    m.add_function(wrap_pyfunction!(policies, m)?)?;
    m.add_function(wrap_pyfunction!(describe, m)?)?;
    m.add_function(wrap_pyfunction!(read_trace, m)?)?;
    m.add_function(wrap_pyfunction!(write_text, m)?)?;
    m.add_function(wrap_pyfunction!(gpuctl, m)?)?;
    Ok(())
}
