//! `gpuctl demo`: the whole product in half a minute. A private D-Bus, a real
//! `gpu-agentd` on mock GPUs, a workload submitted through D-Bus at its
//! arrival times, and the daemon's metrics beside the simulator's.

use std::collections::{HashMap, HashSet};
use std::fs::File;
use std::io::{IsTerminal, Write};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::Duration;

use anyhow::{bail, Context, Result};
use gpu_agent_core::apps::AppLibrary;
use gpu_agent_core::metrics::Metrics;
use gpu_agent_dbus::private_bus::PrivateBus;
use gpu_agent_dbus::{
    describe_error, metrics_from_dict, Agent1Proxy, SubmitSpec, TaskInfo, TaskStatus, BUS_NAME,
};
use gpu_agent_sim as sim;
use gpu_agent_sim::input::{self, trace::Trace, trace::TraceTask};
use indicatif::{ProgressBar, ProgressFinish, ProgressStyle};
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use tokio::time::Instant;
use zbus::export::futures_core::Stream;

/// The exit status after Ctrl-C (128 + SIGINT), as shells report it.
const INTERRUPTED_STATUS: i32 = 130;
/// How long gpu-agentd may take to appear on the bus.
const START_TIMEOUT: Duration = Duration::from_secs(20);
/// How long gpu-agentd may take to stop after SIGTERM before it is killed.
const STOP_TIMEOUT: Duration = Duration::from_secs(10);
/// Lines of the daemon's log shown when something goes wrong.
const LOG_TAIL_LINES: usize = 25;

/// Run a workload through gpu-agentd on mock GPUs and a private bus (about 30 s).
///
/// Starts a private dbus-daemon and gpu-agentd on it (the mock GPUs of
/// --host, state in a temporary directory, policy --policy), submits every task
/// of --trace through D-Bus at its arrival time, shows a progress bar, and
/// prints the daemon's metrics (/usr/share/doc/gpu-agent/formats.md §4) next to
/// what the offline simulator predicts for the same trace and policy (`gpuctl
/// simulate`'s numbers, its energy_baseline_j and energy_saving included: the
/// no-DVFS baseline is a replay at default clocks,
/// /usr/share/doc/gpu-agent/formats.md §4).
///
/// Model time runs faster than the wall clock, at the rate that fits the
/// simulated makespan into --seconds: the bundled workload (200 tasks, about
/// ten minutes of model time) takes about 30 s, plus a second or two to start
/// and stop. The daemon and the bus are stopped at the end, on error and on
/// Ctrl-C (exit status 130); nothing is left running or on disk.
///
/// gpu-agentd and the policy plugins are taken from the directory of this
/// gpuctl (build them with `cargo build --release`).
#[derive(clap::Args)]
#[command(after_help = "Example, from the source directory:\n  \
    cargo build --release && target/release/gpuctl demo")]
pub struct Args {
    /// Host description (TOML, /usr/share/doc/gpu-agent/formats.md §2) for the mock GPUs.
    #[arg(long, value_name = "FILE", default_value = "examples/host.toml")]
    host: PathBuf,
    /// Workload trace (CSV, /usr/share/doc/gpu-agent/formats.md §1) to submit.
    #[arg(long, value_name = "FILE", default_value = "examples/workload.csv")]
    trace: PathBuf,
    /// Policy the daemon schedules with.
    #[arg(long, value_name = "NAME", default_value = "greedy-eft")]
    policy: String,
    /// Wall-clock time the workload should take (sets the time scale):
    /// seconds or a duration such as 90s, 2m.
    #[arg(long, value_name = "DURATION", default_value = "30", value_parser = parse_seconds)]
    seconds: f64,
    /// Print the daemon's metrics as JSON (/usr/share/doc/gpu-agent/formats.md
    /// §4) instead of the table, with the baseline of the trace replayed at
    /// default clocks, as the table.
    #[arg(long)]
    json: bool,
}

/// A duration (`crate::units::parse_duration`) above zero.
fn parse_seconds(s: &str) -> Result<f64, String> {
    match crate::units::parse_duration(s)? {
        x if x > 0.0 => Ok(x),
        _ => Err(format!("expected a duration > 0, got {s:?}")),
    }
}

/// Ctrl-C or SIGTERM arrived; everything was stopped.
#[derive(Debug, thiserror::Error)]
#[error("interrupted")]
struct Interrupted;

/// What the demo runs, worked out before anything starts.
struct Plan {
    host: PathBuf,
    /// The tasks in arrival order (ties: trace order), as the simulator takes them.
    tasks: Vec<TraceTask>,
    policy: String,
    daemon: PathBuf,
    plugin_dir: PathBuf,
    /// Model seconds per wall second.
    scale: f64,
    seconds: f64,
    /// `gpuctl simulate`'s metrics of the trace, its no-DVFS baseline set.
    simulated: Metrics,
    /// Whether a simulated task ran at other than default clocks.
    dvfs: bool,
}

pub fn run(args: Args) -> Result<()> {
    let plan = plan(&args)?;
    let wall = std::time::Instant::now();
    let ran = {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .context("cannot start the async runtime")?;
        runtime.block_on(interruptible(&plan))
    };
    let mut daemon = match ran {
        Ok(metrics) => metrics,
        Err(e) if e.is::<Interrupted>() => {
            eprintln!("gpuctl: demo interrupted; gpu-agentd and the bus are stopped");
            std::process::exit(INTERRUPTED_STATUS);
        }
        Err(e) => return Err(e),
    };
    eprintln!(
        "gpuctl: demo: done in {:.1} s; gpu-agentd and the bus are stopped",
        wall.elapsed().as_secs_f64()
    );
    // One baseline in both columns (formats.md §4): the trace replayed at
    // default clocks, which the daemon, having no trace, can only estimate.
    if plan.dvfs {
        daemon.set_baseline(plan.simulated.energy_baseline_j);
    }
    let mut out = std::io::stdout().lock();
    if args.json {
        writeln!(out, "{}", serde_json::to_string_pretty(&daemon)?)?;
    } else {
        daemon.policy = format!("{} (daemon)", daemon.policy);
        let mut simulated = plan.simulated.clone();
        simulated.policy = format!("{} (simulated)", simulated.policy);
        write!(
            out,
            "{}",
            crate::table::metrics_table(&[&daemon, &simulated]).render()
        )?;
    }
    Ok(())
}

/// Reads the inputs, finds the daemon and the plugins, and simulates the
/// trace to choose the time scale.
fn plan(args: &Args) -> Result<Plan> {
    for (path, option) in [(&args.host, "--host"), (&args.trace, "--trace")] {
        if !path.is_file() {
            bail!(
                "{}: no such file (run gpuctl demo from the gpu-agent source directory, \
                 or name the file with {option})",
                path.display()
            );
        }
    }
    let host = input::host::load(&args.host)?;
    let trace = Trace::load(&args.trace, &host, &AppLibrary::default())?;
    for w in &trace.warnings {
        log::warn!("{w}");
    }
    if trace.tasks.is_empty() {
        bail!("{}: the trace has no tasks", args.trace.display());
    }

    let exe = std::env::current_exe().context("cannot locate the running gpuctl binary")?;
    let daemon = exe.with_file_name("gpu-agentd");
    if !daemon.is_file() {
        bail!(
            "{} not found: gpuctl demo runs the gpu-agentd built next to gpuctl; \
             build both (and the policy plugins) with `cargo build --release`",
            daemon.display()
        );
    }
    let plugin_dir =
        gpu_agent_loader::default_dir().context("cannot locate the running gpuctl binary")?;
    let registry = gpu_agent_loader::Registry::load_dir(&plugin_dir)?;
    for failure in &registry.failures {
        log::warn!("skipping plugin {failure}");
    }
    let plugin = registry.find(&args.policy)?;
    let mut simulated = sim::simulate(&host, &trace, plugin.instantiate(&[])?, |_| {})?;
    let faults = sim::set_dvfs_baseline(
        &host,
        &trace,
        &mut simulated,
        || plugin.instantiate(&[]).map_err(anyhow::Error::from),
        &sim::Options::default(),
    )?;
    for fault in &faults {
        log::warn!(
            "{}: its simulated run without DVFS had a policy fault: {fault}",
            args.policy
        );
    }
    let dvfs = simulated.dvfs;
    let simulated = simulated.metrics;
    let scale = if simulated.makespan > 0.0 {
        simulated.makespan / args.seconds
    } else {
        1.0
    };

    let mut tasks = trace.tasks;
    tasks.sort_by(|a, b| a.spec.arrival.total_cmp(&b.spec.arrival));
    eprintln!(
        "gpuctl: demo: {} tasks from {} on the {} mock GPUs of {}, policy {}",
        tasks.len(),
        args.trace.display(),
        host.devices.len(),
        args.host.display(),
        args.policy
    );
    eprintln!(
        "gpuctl: demo: simulated makespan {:.1} s of model time; running {:.1}x faster \
         than real time, about {:.0} s",
        simulated.makespan, scale, args.seconds
    );
    Ok(Plan {
        host: std::path::absolute(&args.host)?,
        tasks,
        policy: args.policy.clone(),
        daemon,
        plugin_dir,
        scale,
        seconds: args.seconds,
        simulated,
        dvfs,
    })
}

/// Runs the demo until it ends or SIGINT/SIGTERM arrives. Either way, what
/// it started is stopped before this returns: on a signal, dropping the
/// demo's future drops its guards.
async fn interruptible(plan: &Plan) -> Result<Metrics> {
    use tokio::signal::unix::{signal, SignalKind};
    let mut int = signal(SignalKind::interrupt()).context("cannot handle SIGINT")?;
    let mut term = signal(SignalKind::terminate()).context("cannot handle SIGTERM")?;
    tokio::select! {
        result = demo(plan) => result,
        _ = int.recv() => Err(Interrupted.into()),
        _ = term.recv() => Err(Interrupted.into()),
    }
}

async fn demo(plan: &Plan) -> Result<Metrics> {
    let work = tempfile::Builder::new()
        .prefix("gpuctl-demo.")
        .tempdir()
        .context("cannot create a temporary directory")?;
    let bus = PrivateBus::start()?;
    let mut daemon = Daemon::start(plan, &bus, work.path())?;
    match drive(plan, &bus, &mut daemon).await {
        Ok(metrics) => {
            daemon.stop()?;
            drop(bus);
            Ok(metrics)
        }
        Err(e) => {
            daemon.stop_quietly();
            daemon.print_log_tail();
            Err(e)
        }
    }
}

/// Waits for the daemon, submits the trace, follows it to the end and
/// returns the daemon's metrics.
async fn drive(plan: &Plan, bus: &PrivateBus, daemon: &mut Daemon) -> Result<Metrics> {
    let conn = zbus::connection::Builder::address(bus.address())?
        .build()
        .await
        .context("cannot connect to the private bus")?;
    daemon.wait_for_name(&conn).await?;
    let agent = Agent1Proxy::new(&conn).await?;
    // Subscribe before the first Submit, so that no change is missed.
    let mut changes = follow_changes(&agent).await?;

    let total = plan.tasks.len();
    let bar = progress_bar(total);
    let mut progress = Progress::default();
    let start = Instant::now();
    let give_up = start + Duration::from_secs_f64(plan.seconds * 3.0 + 60.0);
    let due = |task: &TraceTask| start + Duration::from_secs_f64(task.spec.arrival / plan.scale);
    let mut next = 0;
    let mut tick = tokio::time::interval(Duration::from_millis(500));
    while !(next == total && progress.ended() + progress.refused.len() >= total) {
        let next_at = plan.tasks.get(next).map(due);
        tokio::select! {
            _ = tokio::time::sleep_until(next_at.unwrap_or(give_up)), if next_at.is_some() => {
                let now = Instant::now();
                while next < total && due(&plan.tasks[next]) <= now {
                    submit(&agent, &plan.tasks[next], &mut progress, &bar).await?;
                    next += 1;
                }
            }
            change = changes.recv() => {
                let Some(change) = change else {
                    bail!("the bus connection closed");
                };
                let (id, state) = change?;
                progress.changed(&id, &state);
            }
            _ = tick.tick() => {
                if let Some(status) = daemon.exited()? {
                    bail!("gpu-agentd stopped unexpectedly ({status})");
                }
                if next == total {
                    // Signals are the fast path; the list is the safety net.
                    progress.listed(&agent.all_tasks("").await.map_err(dbus_error)?)?;
                }
                if Instant::now() > give_up {
                    bail!(
                        "gpu-agentd has not finished the workload after {:.0} s: \
                         {} of {total} tasks ended",
                        (give_up - start).as_secs_f64(),
                        progress.ended()
                    );
                }
            }
        }
        bar.set_position(progress.ended() as u64);
        bar.set_message(format!("{next} submitted, {} running", progress.running()));
    }
    bar.finish_and_clear();
    if !progress.refused.is_empty() {
        eprintln!(
            "gpuctl: demo: gpu-agentd refused {} of {total} tasks (see above)",
            progress.refused.len()
        );
    }
    let dict = agent.metrics().await.map_err(dbus_error)?;
    metrics_from_dict(&dict).map_err(anyhow::Error::msg)
}

/// The daemon's `TaskChanged` signals as (id, state), read as they arrive
/// by a task of their own. zbus's socket reader hands each signal to the
/// stream through a queue of 64 and waits while that is full, method
/// replies included: read only between `Submit`s, a burst of due tasks
/// whose changes outnumber it (about 22 tasks, or fewer under CPU load)
/// left gpuctl waiting for good on a `Submit` the daemon had answered.
async fn follow_changes(
    agent: &Agent1Proxy<'static>,
) -> Result<tokio::sync::mpsc::UnboundedReceiver<zbus::Result<(String, String)>>> {
    let mut signals = agent.receive_task_changed().await?;
    let (tx, changes) = tokio::sync::mpsc::unbounded_channel();
    tokio::spawn(async move {
        while let Some(signal) = next_item(&mut signals).await {
            let change = signal
                .args()
                .map(|args| (args.id().to_string(), args.state().to_string()));
            if tx.send(change).is_err() {
                return;
            }
        }
    });
    Ok(changes)
}

/// The next item of a stream (the one combinator needed here).
async fn next_item<S: Stream + Unpin>(stream: &mut S) -> Option<S::Item> {
    std::future::poll_fn(|cx| Pin::new(&mut *stream).poll_next(cx)).await
}

fn dbus_error(e: zbus::Error) -> anyhow::Error {
    anyhow::anyhow!("gpu-agentd: {}", describe_error(&e))
}

/// Submits one trace task now; a refusal is noted, not fatal.
async fn submit(
    agent: &Agent1Proxy<'_>,
    task: &TraceTask,
    progress: &mut Progress,
    bar: &ProgressBar,
) -> Result<()> {
    let t = &task.spec;
    let mut spec = SubmitSpec::new(
        t.workload,
        t.mem_gb,
        (t.deadline - t.arrival).max(0.0),
        t.weight,
    );
    spec.gpus = t.gpus;
    spec.gpus_alt = t.alt_gpus.clone();
    spec.app = t.app.name.to_string();
    spec.runtimes = t.runtimes.clone();
    spec.name = t.id.clone();
    match agent.submit(spec.to_dict()).await {
        Ok(_) => Ok(()),
        Err(e @ zbus::Error::MethodError(..)) => {
            let why = describe_error(&e);
            bar.suspend(|| eprintln!("gpuctl: demo: task {} refused: {why}", t.id));
            progress.refused.push((t.id.clone(), why));
            Ok(())
        }
        Err(e) => Err(dbus_error(e)).with_context(|| format!("cannot submit task {}", t.id)),
    }
}

/// What is known of the submitted tasks.
#[derive(Default)]
struct Progress {
    /// The last state signalled for each task id (the daemon's ids).
    states: HashMap<String, TaskStatus>,
    /// Ids of tasks that have ended (by signal or by listing).
    ended: HashSet<String>,
    /// Trace ids of tasks the daemon refused, with its answer.
    refused: Vec<(String, String)>,
}

impl Progress {
    fn changed(&mut self, id: &str, state: &str) {
        if let Ok(state) = TaskStatus::parse(state) {
            if state.is_terminal() {
                self.ended.insert(id.to_string());
            }
            self.states.insert(id.to_string(), state);
        }
    }

    fn listed(&mut self, tasks: &[gpu_agent_dbus::Dict]) -> Result<()> {
        for dict in tasks {
            let task = TaskInfo::from_dict(dict).map_err(anyhow::Error::msg)?;
            self.changed(&task.id, task.state.as_str());
        }
        Ok(())
    }

    fn ended(&self) -> usize {
        self.ended.len()
    }

    fn running(&self) -> usize {
        self.states
            .values()
            .filter(|&&s| s == TaskStatus::Running)
            .count()
    }
}

fn progress_bar(len: usize) -> ProgressBar {
    if !std::io::stderr().is_terminal() {
        return ProgressBar::hidden();
    }
    // Cleared when dropped too, so that an error or Ctrl-C leaves no half bar.
    let bar = ProgressBar::new(len as u64).with_finish(ProgressFinish::AndClear);
    bar.set_style(
        ProgressStyle::with_template("{elapsed:>4} [{bar:40}] {pos}/{len} tasks ended ({msg})")
            .expect("valid template")
            .progress_chars("=> "),
    );
    bar.set_message("0 submitted, 0 running");
    bar.enable_steady_tick(Duration::from_millis(200));
    bar
}

/// The running gpu-agentd, stopped (SIGTERM, then SIGKILL) when dropped.
struct Daemon {
    child: Option<Child>,
    log: PathBuf,
}

impl Daemon {
    /// Starts gpu-agentd on `bus`, its state and log under `work`.
    fn start(plan: &Plan, bus: &PrivateBus, work: &Path) -> Result<Daemon> {
        let log = work.join("gpu-agentd.log");
        let config = work.join("agent.toml");
        // Only the command line counts, whatever /etc/gpu-agent/agent.toml says.
        std::fs::write(
            &config,
            "# gpuctl demo: every setting from the command line\n",
        )?;
        let out = File::create(&log).context("cannot create the daemon's log file")?;
        let mut cmd = Command::new(&plan.daemon);
        cmd.arg("--config")
            .arg(&config)
            .arg("--session")
            .arg("--mock")
            .arg(&plan.host)
            .arg("--time-scale")
            .arg(plan.scale.to_string())
            .arg("--state-dir")
            .arg(work.join("state"))
            .arg("--plugin-dir")
            .arg(&plan.plugin_dir)
            .arg("--policy")
            .arg(&plan.policy)
            .env("DBUS_SESSION_BUS_ADDRESS", bus.address())
            // Not the journal nor our supervisor's: the log file.
            .env_remove("JOURNAL_STREAM")
            .env_remove("NOTIFY_SOCKET")
            .env_remove("WATCHDOG_USEC")
            .env_remove("WATCHDOG_PID")
            .stdin(Stdio::null())
            .stdout(out.try_clone()?)
            .stderr(out)
            // Ctrl-C at the terminal reaches gpuctl only, which stops the
            // daemon in order.
            .process_group(0);
        // SAFETY: prctl is async-signal-safe and touches no memory of ours.
        unsafe {
            // If gpuctl dies without stopping it (SIGKILL), the daemon stops too.
            cmd.pre_exec(|| {
                nix::sys::prctl::set_pdeathsig(Signal::SIGTERM).map_err(std::io::Error::from)
            });
        }
        let child = cmd
            .spawn()
            .with_context(|| format!("cannot start {}", plan.daemon.display()))?;
        Ok(Daemon {
            child: Some(child),
            log,
        })
    }

    /// Waits until the daemon owns its bus name.
    async fn wait_for_name(&mut self, conn: &zbus::Connection) -> Result<()> {
        let dbus = zbus::fdo::DBusProxy::new(conn).await?;
        let name: zbus::names::BusName = BUS_NAME.try_into()?;
        let give_up = Instant::now() + START_TIMEOUT;
        loop {
            if dbus.name_has_owner(name.clone()).await? {
                return Ok(());
            }
            if let Some(status) = self.exited()? {
                bail!("gpu-agentd exited before serving {BUS_NAME} ({status})");
            }
            if Instant::now() > give_up {
                bail!(
                    "gpu-agentd did not serve {BUS_NAME} within {} s",
                    START_TIMEOUT.as_secs()
                );
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// The daemon's exit status, if it has exited.
    fn exited(&mut self) -> Result<Option<ExitStatus>> {
        match &mut self.child {
            Some(child) => Ok(child.try_wait()?),
            None => Ok(None),
        }
    }

    /// Stops the daemon with SIGTERM and checks it stopped cleanly.
    fn stop(&mut self) -> Result<()> {
        let Some(child) = self.child.take() else {
            return Ok(());
        };
        let status = terminate(child)?;
        if !status.success() {
            self.print_log_tail();
            bail!("gpu-agentd did not stop cleanly ({status})");
        }
        Ok(())
    }

    /// Stops the daemon, whatever it takes.
    fn stop_quietly(&mut self) {
        if let Some(child) = self.child.take() {
            if let Err(e) = terminate(child) {
                eprintln!("gpuctl: demo: cannot stop gpu-agentd: {e}");
            }
        }
    }

    fn print_log_tail(&self) {
        let Ok(text) = std::fs::read_to_string(&self.log) else {
            return;
        };
        let lines: Vec<&str> = text.lines().collect();
        if lines.is_empty() {
            return;
        }
        eprintln!("gpuctl: demo: the last lines of gpu-agentd's log:");
        for line in &lines[lines.len().saturating_sub(LOG_TAIL_LINES)..] {
            eprintln!("  {line}");
        }
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        self.stop_quietly();
    }
}

/// SIGTERM, a wait of up to [`STOP_TIMEOUT`], then SIGKILL; always reaps.
fn terminate(mut child: Child) -> Result<ExitStatus> {
    if let Some(status) = child.try_wait()? {
        return Ok(status);
    }
    let pid = Pid::from_raw(child.id() as i32);
    let _ = kill(pid, Signal::SIGTERM);
    let give_up = std::time::Instant::now() + STOP_TIMEOUT;
    while std::time::Instant::now() < give_up {
        if let Some(status) = child.try_wait()? {
            return Ok(status);
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let _ = child.kill();
    let status = child.wait()?;
    bail!(
        "gpu-agentd did not stop within {} s of SIGTERM and was killed ({status})",
        STOP_TIMEOUT.as_secs()
    )
}
