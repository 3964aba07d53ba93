//! `gpuctl simulate`: replay a trace through the scheduler core.

use std::io::{IsTerminal, Write};
use std::path::PathBuf;

use anyhow::{bail, Context, Result};
use gpu_agent::model::{apps::AppLibrary, host::Host, trace::Trace};
use gpu_agent::plugins::{Plugin, Registry};
use gpu_agent::sim::{self, metrics::Metrics, schedule};
use indicatif::{ProgressBar, ProgressStyle};

/// Traces at least this long get a progress bar (on a terminal).
const PROGRESS_MIN_TASKS: usize = 10_000;

/// Replay a workload trace on a described host under one or more policies and
/// print the metrics (formats.md §4), one column per policy.
///
/// Each task runs exactly its modelled time. Policies are plugins, found next
/// to this program unless --plugin-dir says otherwise.
#[derive(clap::Args)]
#[command(
    after_help = "Example:\n  gpuctl simulate --host examples/host.toml --trace examples/trace.csv --policy fifo --policy greedy-eft"
)]
pub struct Args {
    /// Host description (TOML, formats.md §2).
    #[arg(long, value_name = "FILE")]
    host: PathBuf,
    /// Workload trace (CSV, formats.md §1).
    #[arg(long, value_name = "FILE")]
    trace: PathBuf,
    /// Policy to simulate; repeat to compare several.
    #[arg(long = "policy", value_name = "NAME", required = true)]
    policies: Vec<String>,
    /// Policy parameter, given to every selected policy that takes KEY.
    #[arg(long = "param", value_name = "KEY=VALUE", value_parser = parse_param)]
    params: Vec<(String, String)>,
    /// DVFS application profiles (TOML, formats.md §6) for the trace's `app` column.
    #[arg(long, value_name = "FILE")]
    apps: Option<PathBuf>,
    /// Write the schedule (CSV, formats.md §3) here; needs exactly one --policy.
    #[arg(long, value_name = "FILE")]
    schedule: Option<PathBuf>,
    /// Print the metrics as JSON: an object for one policy, an array for several.
    #[arg(long)]
    json: bool,
    /// Load policy plugins from DIR.
    #[arg(long, value_name = "DIR")]
    plugin_dir: Option<PathBuf>,
}

fn parse_param(s: &str) -> Result<(String, String), String> {
    match s.split_once('=') {
        Some((k, v)) if !k.trim().is_empty() => Ok((k.trim().to_string(), v.trim().to_string())),
        _ => Err(format!("expected KEY=VALUE, got {s:?}")),
    }
}

pub fn run(args: Args) -> Result<()> {
    if args.schedule.is_some() && args.policies.len() != 1 {
        bail!(
            "--schedule needs exactly one --policy (got {})",
            args.policies.len()
        );
    }
    let host = Host::load(&args.host)?;
    let apps = match &args.apps {
        Some(path) => AppLibrary::load(path)?,
        None => AppLibrary::default(),
    };
    let trace = Trace::load(&args.trace, &host, &apps)?;
    for w in &trace.warnings {
        log::warn!("{w}");
    }

    let dir = match args.plugin_dir {
        Some(dir) => dir,
        None => {
            gpu_agent::plugins::default_dir().context("cannot locate the running gpuctl binary")?
        }
    };
    let registry = Registry::load_dir(&dir)?;
    for failure in &registry.failures {
        log::warn!("skipping plugin {failure}");
    }
    let plugins: Vec<&Plugin> = args
        .policies
        .iter()
        .map(|name| registry.find(name))
        .collect::<Result<_, _>>()?;
    if let Some((key, _)) = args.params.iter().find(|(key, _)| {
        !plugins
            .iter()
            .any(|p| p.parameter_names().any(|k| k == key))
    }) {
        bail!("--param {key}: none of the selected policies takes it");
    }
    // Build every policy before running any, so that a bad parameter stops everything.
    let mut instances = Vec::new();
    for plugin in &plugins {
        let params: Vec<_> = args
            .params
            .iter()
            .filter(|(key, _)| plugin.parameter_names().any(|k| k == key))
            .cloned()
            .collect();
        instances.push(plugin.instantiate(&params)?);
    }

    let mut outcomes = Vec::new();
    for policy in instances {
        let bar = progress_bar(trace.tasks.len(), &policy.name);
        let outcome = sim::simulate(&host, &trace, policy, |n| {
            if n % 1024 == 0 {
                bar.set_position(n as u64);
            }
        })?;
        bar.finish_and_clear();
        outcomes.push(outcome);
    }

    if let Some(path) = &args.schedule {
        schedule::write_file(&outcomes[0].schedule, path)
            .with_context(|| format!("cannot write schedule {}", path.display()))?;
    }
    let metrics: Vec<&Metrics> = outcomes.iter().map(|o| &o.metrics).collect();
    let mut out = std::io::stdout().lock();
    if args.json {
        let text = match metrics.as_slice() {
            [one] => serde_json::to_string_pretty(one),
            many => serde_json::to_string_pretty(many),
        }?;
        writeln!(out, "{text}")?;
    } else {
        write!(out, "{}", table(&metrics))?;
    }
    Ok(())
}

fn progress_bar(len: usize, policy: &str) -> ProgressBar {
    if len < PROGRESS_MIN_TASKS || !std::io::stderr().is_terminal() {
        return ProgressBar::hidden();
    }
    let bar = ProgressBar::new(len as u64).with_message(policy.to_string());
    bar.set_style(
        ProgressStyle::with_template("{msg:>12} [{bar:40}] {pos}/{len} tasks ({eta})")
            .expect("valid template")
            .progress_chars("=> "),
    );
    bar
}

/// The metrics as a text table: one row per metric, one column per policy.
pub(crate) fn table(metrics: &[&Metrics]) -> String {
    let rows: Vec<(&str, Vec<String>)> = vec![
        ("policy", metrics.iter().map(|m| m.policy.clone()).collect()),
        (
            "tasks",
            metrics.iter().map(|m| m.tasks.to_string()).collect(),
        ),
        (
            "rejected",
            metrics
                .iter()
                .map(|m| m.rejected.len().to_string())
                .collect(),
        ),
        (
            "twt",
            metrics.iter().map(|m| format!("{:.3}", m.twt)).collect(),
        ),
        (
            "twct",
            metrics.iter().map(|m| format!("{:.3}", m.twct)).collect(),
        ),
        (
            "act",
            metrics.iter().map(|m| format!("{:.3}", m.act)).collect(),
        ),
        ("dmc", metrics.iter().map(|m| m.dmc.to_string()).collect()),
        (
            "dmr",
            metrics.iter().map(|m| format!("{:.4}", m.dmr)).collect(),
        ),
        (
            "utilization",
            metrics
                .iter()
                .map(|m| format!("{:.4}", m.utilization))
                .collect(),
        ),
        (
            "makespan",
            metrics
                .iter()
                .map(|m| format!("{:.3}", m.makespan))
                .collect(),
        ),
        (
            "energy_j",
            metrics
                .iter()
                .map(|m| format!("{:.1}", m.energy_j))
                .collect(),
        ),
    ];
    let label_width = rows.iter().map(|(l, _)| l.len()).max().unwrap_or(0);
    let widths: Vec<usize> = (0..metrics.len())
        .map(|c| rows.iter().map(|(_, v)| v[c].len()).max().unwrap_or(0))
        .collect();
    let mut text = String::new();
    for (label, values) in &rows {
        text.push_str(&format!("{label:<label_width$}"));
        for (v, w) in values.iter().zip(&widths) {
            text.push_str(&format!("  {v:>w$}"));
        }
        text.push('\n');
    }
    text
}
