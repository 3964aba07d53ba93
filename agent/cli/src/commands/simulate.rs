//! `gpuctl simulate`: replay a trace through the scheduler core.

use std::collections::HashMap;
use std::io::IsTerminal;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use gpu_agent_core::apps::AppLibrary;
use gpu_agent_core::host::Host;
use gpu_agent_core::metrics::Metrics;
use gpu_agent_core::policy::PolicyInstance;
use gpu_agent_dvfs::cluster::Algo;
use gpu_agent_loader::{Plugin, Registry};
use gpu_agent_sim::input::{self, host::ClusterSpec, trace::Trace};
use gpu_agent_sim::paper_cluster::{self, Rule};
use gpu_agent_sim::{self as sim, schedule, MigChange, Outcome, SchedulingTime};
use indicatif::{ProgressBar, ProgressStyle};
use serde::Serialize;

use crate::output::{emit, emit_json};
use crate::plot;
use crate::table::{metrics_table, Table};

/// Traces of at least this many bytes are read while the first replay runs
/// (`read_and_replay`; about 25,000 rows). A smaller one is read in a few
/// milliseconds, and read first its replay runs (and its scheduling time is
/// measured) without the reader's thread beside it on the cores.
const STREAM_MIN_BYTES: u64 = 1 << 20;

/// Traces at least this long get a progress bar (on a terminal).
const PROGRESS_MIN_TASKS: usize = 10_000;

/// Replay a workload trace on a described host under one or more policies and
/// print the metrics (/usr/share/doc/gpu-agent/formats.md §4), one column per
/// policy, with the wall time the scheduler took (the only figure that changes
/// from run to run).
///
/// Each task runs exactly its modelled time. Policies are plugins, found next
/// to this program unless --plugin-dir says otherwise.
///
/// Energy is split into run, idle and overhead (0 on one host). A policy that
/// ran any task at other than default clocks (DVFS, such as edl) is replayed a
/// second time with every GPU limited to its default clocks; that run's energy
/// is energy_baseline_j and energy_saving = 1 - energy_j / energy_baseline_j.
///
/// Several --host files replay the same trace on each host under each policy,
/// side by side (a column per host and policy): for instance the same GPUs
/// whole and split into MIG instances (`mig = [...]` per [[gpu]],
/// /usr/share/doc/gpu-agent/formats.md §2), to see a layout's effect on a
/// workload before it is applied.
///
/// A policy may change MIG layouts (Decision::MigLayout, such as mig-plan's):
/// the simulator allows it, as the daemon does with [mig] allow_policy = true.
/// The core drains the GPU (its queues go back to pending, running tasks
/// finish); the layout is made --mig-delay seconds after the GPU is idle (at
/// once by default) and its new devices take tasks. The changes are listed
/// below the metrics (a "mig_changes" array in --json: gpu, layout, asked_s,
/// applied_s, devices; layout "" is the whole GPU).
///
/// A host with a [cluster] table (servers, idle power, sleep, turn-on energy;
/// /usr/share/doc/gpu-agent/formats.md §2, written by `gpuctl trace gen
/// dvfs-paper`) runs the DVFS paper's cluster model instead: --policy edl only,
/// its --param rule, theta, search and compat; energy_overhead_j counts the
/// servers' turn-ons.
#[derive(clap::Args)]
#[command(after_help = "Examples:
  gpuctl simulate --host examples/host.toml --trace examples/trace.csv --policy fifo --policy greedy-eft
  gpuctl simulate --host h.toml --trace t.csv --policy sa-greedy --param seed=7 --gantt schedule.svg
  gpuctl simulate --host whole.toml --host mig.toml --trace t.csv --policy greedy-eft
  gpuctl simulate --host examples/host-mig-shift.toml --trace examples/mig-shift.csv \\
      --apps examples/mig-shift-apps.toml --policy mig-plan --policy greedy-eft
  gpuctl simulate --host h.toml --trace t.csv --policy fifo --policy sos --param sos:alpha=0.6 \\
      --markdown table.md --chart chart.svg")]
pub struct Args {
    /// Host description (TOML, /usr/share/doc/gpu-agent/formats.md §2); repeat to compare hosts.
    #[arg(long = "host", value_name = "FILE", required = true)]
    hosts: Vec<PathBuf>,
    /// Workload trace (CSV, /usr/share/doc/gpu-agent/formats.md §1).
    #[arg(long, value_name = "FILE")]
    trace: PathBuf,
    /// Policy to simulate; repeat to compare several.
    #[arg(long = "policy", value_name = "NAME", required = true)]
    policies: Vec<String>,
    /// Policy parameter: KEY=VALUE goes to every selected policy that takes KEY,
    /// POLICY:KEY=VALUE to that policy only.
    #[arg(long = "param", value_name = "[POLICY:]KEY=VALUE", value_parser = parse_param)]
    params: Vec<Param>,
    /// DVFS application profiles (TOML, /usr/share/doc/gpu-agent/formats.md §6) for the trace's `app` column.
    #[arg(long, value_name = "FILE")]
    apps: Option<PathBuf>,
    /// Write the schedule (CSV, /usr/share/doc/gpu-agent/formats.md §3) here; needs exactly one --policy.
    #[arg(long, value_name = "FILE")]
    schedule: Option<PathBuf>,
    /// Draw the schedule as a Gantt chart (SVG) here; needs exactly one --policy.
    #[arg(long, value_name = "FILE.svg")]
    gantt: Option<PathBuf>,
    /// Draw the policies' metrics side by side (SVG) here.
    #[arg(long, value_name = "FILE.svg")]
    chart: Option<PathBuf>,
    /// Write the metrics table in markdown here.
    #[arg(long, value_name = "FILE.md")]
    markdown: Option<PathBuf>,
    /// Replay each policy N times and report the median scheduling time (the
    /// schedule is the first replay's; a policy that decides differently on a
    /// later replay is named in a warning).
    #[arg(long, value_name = "N", default_value_t = 1, value_parser = clap::value_parser!(u16).range(1..))]
    repeat: u16,
    /// Print the metrics as JSON: an object for one policy, an array for several;
    /// each has a "scheduling" object (wall_s, policy_s, decision_points).
    #[arg(long)]
    json: bool,
    /// Load policy plugins from DIR.
    #[arg(long, value_name = "DIR")]
    plugin_dir: Option<PathBuf>,
    /// How long a MIG layout change a policy asked for takes once its GPU is
    /// drained (0: made at once): seconds or a duration such as 90s, 2m.
    #[arg(long, value_name = "DURATION", default_value = "0", value_parser = crate::units::parse_duration)]
    mig_delay: f64,
    /// Keep the schedule's rows for the caller ([`simulate_one`]'s `schedule`).
    #[arg(skip)]
    rows: bool,
}

/// A `--param`: for one policy or for every policy that takes the key.
#[derive(Clone, Debug, PartialEq)]
struct Param {
    policy: Option<String>,
    key: String,
    value: String,
}

fn parse_param(s: &str) -> Result<Param, String> {
    let bad = || format!("expected KEY=VALUE or POLICY:KEY=VALUE, got {s:?}");
    let (name, value) = s.split_once('=').ok_or_else(bad)?;
    let (policy, key) = match name.split_once(':') {
        Some((policy, key)) => (Some(policy.trim().to_string()), key.trim()),
        None => (None, name.trim()),
    };
    if key.is_empty() || policy.as_ref().is_some_and(|p| p.is_empty()) {
        return Err(bad());
    }
    Ok(Param {
        policy,
        key: key.to_string(),
        value: value.trim().to_string(),
    })
}

/// One policy's metrics with its scheduling time, as `--json` prints them.
#[derive(Serialize)]
struct Report<'a> {
    /// The host file, when several are compared.
    #[serde(skip_serializing_if = "Option::is_none")]
    host: Option<String>,
    #[serde(flatten)]
    metrics: &'a Metrics,
    scheduling: SchedulingTime,
    /// The MIG layout changes the policy made, when it made any.
    #[serde(skip_serializing_if = "<[_]>::is_empty")]
    mig_changes: &'a [MigChange],
}

pub fn run(args: Args) -> Result<()> {
    for (flag, given) in [
        ("--schedule", args.schedule.is_some()),
        ("--gantt", args.gantt.is_some()),
    ] {
        for (option, count) in [
            ("--policy", args.policies.len()),
            ("--host", args.hosts.len()),
        ] {
            if given && count != 1 {
                bail!("{flag} needs exactly one {option} (got {count})");
            }
        }
    }
    let apps = match &args.apps {
        Some(path) => input::apps::load(path)?,
        None => AppLibrary::default(),
    };
    // Every input is read before anything runs that the user sees: with
    // one host and a large trace the first replay runs as the trace is
    // read, and is dropped if the trace is bad (`read_and_replay`).
    let single = args.hosts.len() == 1;
    // One host and a large trace: read as the first replay runs.
    let stream =
        single && std::fs::metadata(&args.trace).is_ok_and(|m| m.len() >= STREAM_MIN_BYTES);
    let mut runs = Vec::new();
    let mut streamed = None;
    for path in &args.hosts {
        let (host, cluster) = input::host::load_with_cluster(path)?;
        if let (Some(spec), false) = (&cluster, single) {
            bail!(
                "{}:{}: [cluster]: the cluster model runs alone (one --host)",
                path.display(),
                spec.line
            );
        }
        let trace = if stream && cluster.is_none() {
            let (trace, outcomes) = read_and_replay(&args, &host, &apps)?;
            streamed = Some(outcomes);
            trace
        } else {
            Trace::load(&args.trace, &host, &apps)?
        };
        runs.push((path, host, cluster, trace));
    }
    if streamed.is_none() {
        // The trace's warnings (its columns) are the same on every host.
        for w in &runs[0].3.warnings {
            log::warn!("{w}");
        }
    }
    // Loaded once, unless only the cluster model runs or it was loaded
    // for the replays of a trace as it was read.
    let registry = if streamed.is_none() && runs.iter().any(|(_, _, cluster, _)| cluster.is_none())
    {
        Some(registry(&args)?)
    } else {
        None
    };
    let mut outcomes = Vec::new();
    let mut labels = Vec::new();
    for (path, host, cluster, trace) in &runs {
        let done = match (cluster, &registry, streamed.take()) {
            (Some(spec), _, _) => vec![cluster_run(&args, path, host, spec, trace)?],
            (None, _, Some(done)) => done,
            (None, Some(registry), None) => {
                replay(&args, host, trace, prepare(&args, registry)?, None)?
            }
            (None, None, None) => unreachable!("loaded when a host has no [cluster]"),
        };
        labels.extend(std::iter::repeat_n(path.display().to_string(), done.len()));
        outcomes.extend(done);
    }
    let labels = (args.hosts.len() > 1).then_some(labels);
    let trace = &runs[0].3;
    if let Some(path) = &args.schedule {
        schedule::write_file(&outcomes[0].schedule, path)
            .with_context(|| format!("cannot write schedule {}", path.display()))?;
    }
    if let Some(path) = &args.gantt {
        let deadlines: HashMap<&str, f64> = trace
            .tasks
            .iter()
            .map(|t| (t.spec.id.as_str(), t.spec.deadline))
            .collect();
        let outcome = &outcomes[0];
        // The devices at the end: those layout changes made included.
        let devices = Host {
            devices: outcome.devices.clone(),
        };
        plot::gantt(
            path,
            &outcome.metrics,
            &devices,
            &outcome.schedule,
            &deadlines,
        )?;
    }
    if let Some(path) = &args.chart {
        let hosts: Vec<String> = args.hosts.iter().map(|h| file_name(h)).collect();
        let title = format!(
            "{} tasks from {} on {}",
            trace.tasks.len(),
            file_name(&args.trace),
            hosts.join(" and ")
        );
        // Several hosts: each column names its host beside its policy.
        let named: Vec<Metrics> = outcomes
            .iter()
            .zip(0..)
            .map(|(o, i)| {
                let mut m = o.metrics.clone();
                if let Some(labels) = &labels {
                    m.policy = format!("{} @ {}", m.policy, file_name(Path::new(&labels[i])));
                }
                m
            })
            .collect();
        plot::comparison(path, &title, &named.iter().collect::<Vec<_>>())?;
    }
    let table = table(&outcomes, labels.as_deref());
    if let Some(path) = &args.markdown {
        std::fs::write(path, table.render_markdown())
            .with_context(|| format!("cannot write {}", path.display()))?;
    }
    let printed = if args.json {
        let reports: Vec<Report> = outcomes
            .iter()
            .zip(0..)
            .map(|(o, i)| Report {
                host: labels.as_ref().map(|l: &Vec<String>| l[i].clone()),
                metrics: &o.metrics,
                scheduling: o.scheduling,
                mig_changes: &o.mig_changes,
            })
            .collect();
        match reports.as_slice() {
            [one] => emit_json(one),
            many => emit_json(&many),
        }
    } else {
        let mut text = table.render();
        if let Some(changes) = mig_changes_table(&outcomes, labels.as_deref()) {
            text.push_str("\nMIG layout changes\n");
            text.push_str(&changes.render());
        }
        emit(&text)
    };
    // gpuctl ends here: the traces and schedules (a few allocations per
    // task) go back with the process instead of being freed one by one.
    std::mem::forget((runs, outcomes));
    printed
}

/// One policy on one host, its inputs already read: what the Python package
/// (python/, `gpu_agent.simulate`) runs, through the very steps of
/// [`run`].
pub struct Request<'a> {
    /// Names the host in errors, as a --host file does.
    pub host_path: &'a Path,
    /// The host.
    pub host: &'a Host,
    /// Its `[cluster]` table: the DVFS paper's cluster model runs instead.
    pub cluster: Option<&'a ClusterSpec>,
    /// Names the trace in errors, as --trace does.
    pub trace_path: &'a Path,
    /// The trace, read on `host`.
    pub trace: &'a Trace,
    /// The policy, as --policy names it.
    pub policy: &'a str,
    /// Its parameters, as `--param KEY=VALUE` gives them.
    pub params: &'a [(String, String)],
    /// Where its plugin is, as --plugin-dir says.
    pub plugin_dir: &'a Path,
    /// Whether to hand back the schedule.
    pub schedule: bool,
    /// --mig-delay, seconds.
    pub mig_delay_s: f64,
}

/// What [`simulate_one`] hands back.
#[derive(Debug)]
pub struct Simulated {
    /// What `gpuctl simulate --json` prints for the policy.
    pub json: String,
    /// The schedule as --schedule writes it (CSV, formats.md §3), when asked for.
    pub schedule: Option<String>,
}

/// Replays `request` as `gpuctl simulate --json` does for one --host and
/// one --policy, with gpuctl's checks and messages.
pub fn simulate_one(request: &Request) -> Result<Simulated> {
    let args = Args {
        hosts: vec![request.host_path.to_path_buf()],
        trace: request.trace_path.to_path_buf(),
        policies: vec![request.policy.to_string()],
        params: request
            .params
            .iter()
            .map(|(key, value)| Param {
                policy: None,
                key: key.clone(),
                value: value.clone(),
            })
            .collect(),
        apps: None,
        schedule: None,
        gantt: None,
        chart: None,
        markdown: None,
        repeat: 1,
        json: true,
        plugin_dir: Some(request.plugin_dir.to_path_buf()),
        mig_delay: request.mig_delay_s,
        rows: request.schedule,
    };
    let outcome = match request.cluster {
        Some(spec) => cluster_run(&args, request.host_path, request.host, spec, request.trace)?,
        None => {
            let registry = registry(&args)?;
            let mut done = replay(
                &args,
                request.host,
                request.trace,
                prepare(&args, &registry)?,
                None,
            )?;
            done.swap_remove(0)
        }
    };
    let json = serde_json::to_string_pretty(&Report {
        host: None,
        metrics: &outcome.metrics,
        scheduling: outcome.scheduling,
        mig_changes: &outcome.mig_changes,
    })?;
    let schedule = if request.schedule {
        let mut csv = Vec::new();
        schedule::write_csv(&outcome.schedule, &mut csv).context("cannot write the schedule")?;
        Some(String::from_utf8(csv).context("the schedule is not UTF-8")?)
    } else {
        None
    };
    Ok(Simulated { json, schedule })
}

/// The MIG layout changes of every outcome, one row each (`None` when no
/// policy made any): the policy (and host, with several), the GPU, when it
/// was asked for and made, and the layout (`whole` for MIG off).
fn mig_changes_table(outcomes: &[Outcome], hosts: Option<&[String]>) -> Option<Table> {
    if outcomes.iter().all(|o| o.mig_changes.is_empty()) {
        return None;
    }
    use crate::table::Align::{Left, Right};
    let mut columns = vec![("policy", Left)];
    if hosts.is_some() {
        columns.push(("host", Left));
    }
    columns.extend([
        ("gpu", Right),
        ("asked_s", Right),
        ("applied_s", Right),
        ("layout", Left),
    ]);
    let mut table = Table::with_header(&columns);
    for (i, o) in outcomes.iter().enumerate() {
        for c in &o.mig_changes {
            let mut row = vec![o.metrics.policy.clone()];
            if let Some(hosts) = hosts {
                row.push(file_name(Path::new(&hosts[i])));
            }
            row.extend([
                c.gpu.to_string(),
                format!("{:.1}", c.asked_s),
                format!("{:.1}", c.applied_s),
                if c.layout.is_empty() {
                    "whole".to_string()
                } else {
                    c.layout.clone()
                },
            ]);
            table.row(row);
        }
    }
    Some(table)
}

/// The policy plugins, from --plugin-dir or beside gpuctl; files that fail
/// are named in warnings.
fn registry(args: &Args) -> Result<Registry> {
    let dir = match args.plugin_dir.clone() {
        Some(dir) => dir,
        None => {
            gpu_agent_loader::default_dir().context("cannot locate the running gpuctl binary")?
        }
    };
    let registry = Registry::load_dir(&dir)?;
    for failure in &registry.failures {
        log::warn!("skipping plugin {failure}");
    }
    Ok(registry)
}

/// Reads the trace on `host` in a second thread while the first policy
/// replays it (`sim::stream`), then replays it under the others as
/// [`replay`] does. What goes wrong is reported as if the trace had been
/// read first: its error (the reader's) before any other.
fn read_and_replay(args: &Args, host: &Host, apps: &AppLibrary) -> Result<(Trace, Vec<Outcome>)> {
    std::thread::scope(|scope| {
        let (mut stream, reader) = sim::stream::read(scope, &args.trace, host, apps);
        // `None`: the header is bad (the reader says why).
        let loaded = stream.warnings().map(|warnings| {
            for w in warnings {
                log::warn!("{w}");
            }
            registry(args)
        });
        let (loaded, unloaded) = match loaded {
            Some(Ok(registry)) => (Some(registry), None),
            Some(Err(e)) => (None, Some(e)),
            None => (None, None),
        };
        let prepared = loaded.as_ref().map(|registry| prepare(args, registry));
        let first = match prepared {
            Some(Ok(mut policies)) => {
                let rows = stream.rows().unwrap_or(0);
                let first = &mut policies[0];
                let policy = first.first.take().expect("instantiated");
                let bar = progress_bar(rows * usize::from(args.repeat), first.plugin.name());
                let outcome = sim::simulate_stream(host, stream, policy, &options(args), |n| {
                    if n % 1024 == 0 {
                        bar.set_position(n as u64);
                    }
                });
                Some(Ok((policies, outcome)))
            }
            Some(Err(e)) => {
                drop(stream);
                Some(Err(e))
            }
            None => {
                drop(stream);
                None
            }
        };
        // The reader's result, once the stream is dropped (else it could
        // wait on a full channel).
        let trace = reader
            .join()
            .unwrap_or_else(|panic| std::panic::resume_unwind(panic))?;
        if let Some(e) = unloaded {
            return Err(e);
        }
        let (policies, first) = first.expect("the header of a good trace was read")?;
        let outcomes = match first? {
            Some(first) => replay(args, host, &trace, policies, Some(first))?,
            // Not in arrival order: replayed from the trace in its order.
            None => replay(args, host, &trace, policies, None)?,
        };
        Ok((trace, outcomes))
    })
}

/// A selected policy: its plugin, its parameters, and an instance made
/// ahead (so that a bad parameter stops everything before anything runs).
struct Prepared<'r> {
    plugin: &'r Plugin,
    params: Vec<(String, String)>,
    first: Option<PolicyInstance>,
}

/// Finds the selected policies and makes one instance of each.
fn prepare<'r>(args: &Args, registry: &'r Registry) -> Result<Vec<Prepared<'r>>> {
    let plugins: Vec<&Plugin> = args
        .policies
        .iter()
        .map(|name| registry.find(name))
        .collect::<Result<_, _>>()?;
    check_params(&args.params, &plugins)?;
    let mut policies = Vec::new();
    for plugin in plugins {
        let params: Vec<_> = args
            .params
            .iter()
            .filter(|p| {
                p.policy.as_ref().is_none_or(|name| name == plugin.name())
                    && plugin.parameter_names().any(|k| k == p.key)
            })
            .map(|p| (p.key.clone(), p.value.clone()))
            .collect();
        let first = plugin.instantiate(&params)?;
        policies.push(Prepared {
            plugin,
            params,
            first: Some(first),
        });
    }
    Ok(policies)
}

/// The replay options `args` ask for.
fn options(args: &Args) -> sim::Options {
    sim::Options {
        mig_delay_s: args.mig_delay,
        // Rows only where they are written, drawn, compared or handed back.
        schedule: args.schedule.is_some() || args.gantt.is_some() || args.repeat > 1 || args.rows,
    }
}

/// Replays the trace under each policy (and, for a policy that used DVFS,
/// once more at default clocks for the baseline); `streamed` is the first
/// policy's first replay when it ran as the trace was read.
fn replay(
    args: &Args,
    host: &Host,
    trace: &Trace,
    policies: Vec<Prepared<'_>>,
    mut streamed: Option<Outcome>,
) -> Result<Vec<Outcome>> {
    let options = options(args);
    let mut outcomes = Vec::new();
    for Prepared {
        plugin,
        params,
        mut first,
    } in policies
    {
        let repeat = usize::from(args.repeat);
        let bar = progress_bar(trace.tasks.len() * repeat, plugin.name());
        let mut runs: Vec<Outcome> = streamed.take().into_iter().collect();
        for run in runs.len()..repeat {
            let done = trace.tasks.len() * run;
            let policy = match first.take() {
                Some(policy) => policy,
                None => plugin.instantiate(&params)?,
            };
            let outcome = sim::simulate_with(host, trace, policy, &options, |n| {
                if n % 1024 == 0 {
                    bar.set_position((done + n) as u64);
                }
            })?;
            if runs.first().is_some_and(|first| {
                first.metrics != outcome.metrics || first.schedule != outcome.schedule
            }) {
                log::warn!(
                    "{}: replay {} gave a different schedule than the first",
                    plugin.name(),
                    run + 1
                );
            }
            runs.push(outcome);
        }
        bar.finish_and_clear();
        let mut outcome = median_run(runs);
        let faults = sim::set_dvfs_baseline(
            host,
            trace,
            &mut outcome,
            || plugin.instantiate(&params).map_err(anyhow::Error::from),
            &options,
        )?;
        for fault in &faults {
            log::warn!(
                "{}: its run without DVFS had a policy fault: {fault}",
                plugin.name()
            );
        }
        outcomes.push(outcome);
    }

    Ok(outcomes)
}

/// The parameters the cluster model takes from `--param` (edl's, with its defaults).
const CLUSTER_PARAMS: &str = "rule (edl, edf-bf, edf-wf, lpt-ff, bin-pack), theta, search, compat";

/// Runs the DVFS paper's cluster model (a host with a `[cluster]` table):
/// policy `edl` only, its parameters from `--param`.
fn cluster_run(
    args: &Args,
    path: &Path,
    host: &Host,
    spec: &ClusterSpec,
    trace: &Trace,
) -> Result<Outcome> {
    let refuse = |what: &str| {
        anyhow::anyhow!(
            "{}:{}: [cluster]: the host is the DVFS paper's cluster model, which runs \
             exactly one --policy edl and no {what}",
            path.display(),
            spec.line
        )
    };
    if args.policies != ["edl"] {
        return Err(refuse(&format!(
            "other policy (got {})",
            args.policies.join(", ")
        )));
    }
    for (flag, given) in [
        ("--schedule", args.schedule.is_some() || args.rows),
        ("--gantt", args.gantt.is_some()),
        ("--repeat", args.repeat > 1),
    ] {
        if given {
            return Err(refuse(flag));
        }
    }
    let (mut rule, mut theta, mut options) = (
        Rule::Algo(Algo::Edl),
        0.9,
        gpu_agent_dvfs::Options::default(),
    );
    for p in &args.params {
        if p.policy.as_deref().is_some_and(|name| name != "edl") {
            continue;
        }
        let bad =
            |expected: &str| anyhow::anyhow!("--param {}={}: expected {expected}", p.key, p.value);
        match p.key.as_str() {
            "rule" => {
                rule = match p.value.as_str() {
                    "bin-pack" => Rule::BinPack,
                    v => Rule::Algo(
                        Algo::parse(v)
                            .ok_or_else(|| bad("edl, edf-bf, edf-wf, lpt-ff or bin-pack"))?,
                    ),
                }
            }
            "theta" => {
                theta = p
                    .value
                    .parse()
                    .ok()
                    .filter(|t: &f64| *t > 0.0 && *t <= 1.0)
                    .ok_or_else(|| bad("a number in (0, 1]"))?
            }
            "search" => {
                options.search =
                    gpu_agent_dvfs::Search::parse(&p.value).ok_or_else(|| bad("code or paper"))?
            }
            "compat" => options.compat = p.value.parse().map_err(|_| bad("true or false"))?,
            key => bail!(
                "--param {key}: the cluster model ({}:{}) takes {CLUSTER_PARAMS}",
                path.display(),
                spec.line
            ),
        }
    }
    let tasks = paper_cluster::tasks(host, trace, &args.trace)?;
    let started = std::time::Instant::now();
    let weights: Vec<f64> = trace.tasks.iter().map(|t| t.spec.weight).collect();
    let run = paper_cluster::run(host, spec, &tasks, &weights, rule, theta, options)
        .map_err(|why| anyhow::anyhow!("{}: {why}", args.trace.display()))?;
    let wall_s = started.elapsed().as_secs_f64();
    Ok(Outcome {
        metrics: run.metrics,
        schedule: Vec::new(),
        faults: Vec::new(),
        scheduling: SchedulingTime {
            wall_s,
            policy_s: wall_s,
            decision_points: 0,
        },
        dvfs: true,
        mig_changes: Vec::new(),
        devices: host.devices.clone(),
    })
}

/// The first replay, with the median scheduling times of all of them.
fn median_run(mut runs: Vec<Outcome>) -> Outcome {
    let median = |time: fn(&Outcome) -> f64| {
        let mut times: Vec<f64> = runs.iter().map(time).collect();
        times.sort_by(f64::total_cmp);
        times[times.len() / 2]
    };
    let (wall_s, policy_s) = (
        median(|o| o.scheduling.wall_s),
        median(|o| o.scheduling.policy_s),
    );
    let mut first = runs.swap_remove(0);
    first.scheduling.wall_s = wall_s;
    first.scheduling.policy_s = policy_s;
    first
}

/// Refuses a `--param` that no selected policy (or not the one it names) takes.
fn check_params(params: &[Param], plugins: &[&Plugin]) -> Result<()> {
    for p in params {
        match &p.policy {
            None => {
                if !plugins
                    .iter()
                    .any(|pl| pl.parameter_names().any(|k| k == p.key))
                {
                    bail!("--param {}: none of the selected policies takes it", p.key);
                }
            }
            Some(name) => {
                let Some(plugin) = plugins.iter().find(|pl| pl.name() == name) else {
                    bail!(
                        "--param {name}:{}: {name} is not a selected --policy",
                        p.key
                    );
                };
                if !plugin.parameter_names().any(|k| k == p.key) {
                    let takes: Vec<_> = plugin.parameter_names().collect();
                    bail!(
                        "--param {name}:{}: {name} takes {}",
                        p.key,
                        if takes.is_empty() {
                            "no parameters".to_string()
                        } else {
                            takes.join(", ")
                        }
                    );
                }
            }
        }
    }
    Ok(())
}

/// The metrics table with the scheduling time below it, and with several
/// hosts, a first row naming each column's host (`hosts`, one per outcome).
fn table(outcomes: &[Outcome], hosts: Option<&[String]>) -> Table {
    let metrics: Vec<&Metrics> = outcomes.iter().map(|o| &o.metrics).collect();
    let mut table = metrics_table(&metrics);
    if let Some(hosts) = hosts {
        let mut row = vec!["host".to_string()];
        row.extend(hosts.iter().cloned());
        table.insert_row(0, row);
    }
    let mut wall = vec!["sched_ms".to_string()];
    let mut policy = vec!["policy_ms".to_string()];
    let mut rate = vec!["decisions/s".to_string()];
    for o in outcomes {
        wall.push(format!("{:.3}", o.scheduling.wall_s * 1e3));
        policy.push(format!("{:.3}", o.scheduling.policy_s * 1e3));
        rate.push(format!("{:.0}", o.scheduling.decisions_per_s()));
    }
    table.row(wall);
    table.row(policy);
    table.row(rate);
    table
}

fn file_name(path: &std::path::Path) -> String {
    path.file_name().map_or_else(
        || path.display().to_string(),
        |n| n.to_string_lossy().into_owned(),
    )
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
