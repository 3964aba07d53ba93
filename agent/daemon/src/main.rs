//! `gpu-agentd`: the gpu-agent service. See the `gpu_agent_daemon` library.

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{Context, Result};
use clap::{CommandFactory, Parser};
use gpu_agent_daemon::config::{Overrides, Source};
use gpu_agent_manual::Section;

/// The gpu-agent service: owns this host's GPUs, queues and schedules tasks
/// on them under a policy plugin, and serves org.gpuagent.Agent1 on D-Bus.
///
/// Settings come from /etc/gpu-agent/agent.toml (or --config; with --session,
/// only from --config); the options below override them. SIGTERM or SIGINT stops it cleanly: it refuses new
/// tasks, ends the running ones (unless keep_tasks_on_stop is set), restores
/// the GPU clocks it changed, records its state and exits 0.
#[derive(Parser)]
#[command(
    name = "gpu-agentd",
    version,
    after_help = "Example (mock GPUs, session bus, 60x time):\n  gpu-agentd --mock examples/host.toml --session --time-scale 60 --state-dir /tmp/gpu-agent"
)]
struct Args {
    /// Configuration file [default: /etc/gpu-agent/agent.toml, if present and
    /// not --session].
    #[arg(long, value_name = "FILE")]
    config: Option<PathBuf>,
    /// Run on the mock GPUs of this host description instead of NVML.
    #[arg(long, value_name = "HOST.toml")]
    mock: Option<PathBuf>,
    /// Serve on the session bus (DBUS_SESSION_BUS_ADDRESS) instead of the system
    /// bus; then /etc/gpu-agent/agent.toml is not read (only --config is).
    #[arg(long)]
    session: bool,
    /// Simulated tasks run X times faster than their modelled time.
    #[arg(long, value_name = "X")]
    time_scale: Option<f64>,
    /// Keep the state database and task logs here [default: /var/lib/gpu-agent].
    #[arg(long, value_name = "DIR")]
    state_dir: Option<PathBuf>,
    /// Load policy plugins from DIR [default: next to this binary].
    #[arg(long, value_name = "DIR")]
    plugin_dir: Option<PathBuf>,
    /// Start with this policy (otherwise: the last one set, the configured one, fifo).
    #[arg(long, value_name = "NAME")]
    policy: Option<String>,
    /// Start even when the state database lacks tasks that were acknowledged
    /// (it was emptied, replaced or cut short): they are given up, named in
    /// the log, and their ids never issued again. Without it such a start is
    /// refused, naming what is missing.
    #[arg(long)]
    accept_state_loss: bool,
    /// Print the manual page gpu-agentd(8) and exit (for packaging).
    #[arg(long, hide = true, exclusive = true)]
    manpage: bool,
}

/// The manual's sections that clap has no place for.
const MANUAL: &[Section] = &[
    Section {
        title: "FILES",
        intro: "",
        entries: &[
            (
                "/etc/gpu-agent/agent.toml",
                "Settings, every key optional (the package installs a commented default). \
                 Read at start and by Reload, unless --config names another file or \
                 --session is given (a daemon on a session bus reads only --config).",
            ),
            (
                "/var/lib/gpu-agent/",
                "State: state.db (SQLite, WAL) holds every task, the chosen policy and the GPU \
                 controls to restore; lock keeps a second daemon away. The output of a task \
                 submitted without an output file (gpuctl always names one) goes to logs/ID.log \
                 here outside systemd; under systemd every task's output goes to the journal, \
                 with the field TASK_ID. acknowledged holds the highest task id stored, so that \
                 a database found behind it (emptied, replaced, its last writes lost) is refused \
                 at start, unless --accept-state-loss.",
            ),
            (
                "/usr/lib/gpu-agent/plugins/",
                "Policy plugins (*.so), loaded at start and by Reload. A build without the \
                 packaged layout loads them from the directory of the gpu-agentd binary.",
            ),
            (
                "/usr/share/dbus-1/system.d/org.gpuagent.Agent1.conf",
                "Who may own org.gpuagent.Agent1 on the system bus (root) and call which method.",
            ),
            (
                "/usr/lib/systemd/system/gpu-agent.service",
                "The unit: sandboxing, watchdog, reload; its comments give the reasons.",
            ),
        ],
    },
    Section {
        title: "SIGNALS",
        intro: "",
        entries: &[
            (
                "SIGTERM, SIGINT",
                "Stop cleanly: refuse new tasks; end the running task processes (SIGTERM to \
                 each task's process group, SIGKILL after cancel_grace_s) unless \
                 keep_tasks_on_stop is set; restore the GPU clocks it changed; store the state; \
                 exit 0.",
            ),
            (
                "SIGHUP",
                "Reload, as the D-Bus method Reload does (gpuctl reload, systemctl reload \
                 gpu-agent), with the outcome in the log only. Signals are handled from the \
                 first instruction: a SIGHUP while starting reloads once it is ready, a SIGTERM \
                 stops it as soon as it can.",
            ),
        ],
    },
    Section {
        title: "EXIT STATUS",
        intro: "",
        entries: &[
            ("0", "Stopped cleanly."),
            (
                "1",
                "Could not start or failed; the log says why (a file, line and key for a bad \
                 setting, host or profile file).",
            ),
            ("2", "A bad command line."),
            (
                "70",
                "Its engine thread panicked (a bug; the log says where): it exits so that \
                 systemd starts it again from what it stored.",
            ),
        ],
    },
    Section {
        title: "SEE ALSO",
        intro: "gpuctl(1), busctl(1), systemctl(1), journalctl(1); the D-Bus API in \
                /usr/share/doc/gpu-agent/dbus.md.",
        entries: &[],
    },
];

/// Whether the signals were held before `main` ([`hold_first`]).
static HELD: std::sync::OnceLock<nix::Result<()>> = std::sync::OnceLock::new();

/// The first code of the daemon's own: from here on, no handled signal kills
/// it while it starts (a SIGHUP waits for ready, a SIGTERM stops it once it
/// can). An ELF constructor, which the dynamic loader runs as soon as it has
/// relocated the binary, before the Rust runtime's start-up and `main`;
/// only the loader's own work comes before it.
extern "C" fn hold_first() {
    let _ = HELD.set(gpu_agent_daemon::early_signals::hold());
}

#[used]
#[link_section = ".init_array"]
static HOLD_FIRST: extern "C" fn() = hold_first;

fn main() -> ExitCode {
    let held = HELD
        .get()
        .cloned()
        .unwrap_or_else(gpu_agent_daemon::early_signals::hold);
    gpu_agent_daemon::heap::configure();
    let args = Args::parse();
    if args.manpage {
        return match print_manpage() {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("gpu-agentd: error: {e:#}");
                ExitCode::FAILURE
            }
        };
    }
    let journal = init_logging();
    if let Err(e) = held {
        log::warn!("cannot hold signals during start-up: {e}");
    }
    match run(args, journal) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            log::error!("{}", describe(&e));
            ExitCode::FAILURE
        }
    }
}

/// `e` and its causes, each said once: a cause whose words the message
/// already holds (an OS error quoted by the error that wraps it) is left out.
fn describe(e: &anyhow::Error) -> String {
    let mut text = e.to_string();
    for cause in e.chain().skip(1) {
        let cause = cause.to_string();
        if !text.contains(&cause) {
            text.push_str(": ");
            text.push_str(&cause);
        }
    }
    text
}

/// Writes gpu-agentd(8) to standard output.
fn print_manpage() -> Result<()> {
    let page = gpu_agent_manual::render(Args::command(), "8", MANUAL)?;
    std::io::stdout()
        .write_all(&page)
        .context("cannot write to standard output")
}

/// Logs to the journal when systemd connected stderr to it, else to stderr.
/// Returns whether it is the journal.
fn init_logging() -> bool {
    let level = std::env::var("GPU_AGENT_LOG")
        .ok()
        .and_then(|l| l.parse().ok())
        .unwrap_or(log::LevelFilter::Info);
    if systemd_journal_logger::connected_to_journal() {
        if let Ok(logger) = systemd_journal_logger::JournalLog::new() {
            if logger.install().is_ok() {
                log::set_max_level(level);
                return true;
            }
        }
    }
    env_logger::Builder::new()
        .filter_level(level)
        .format(|buf, record| {
            writeln!(
                buf,
                "gpu-agentd: {}: {}",
                record.level().as_str().to_lowercase(),
                record.args()
            )
        })
        .init();
    false
}

fn run(args: Args, journal: bool) -> Result<()> {
    if let Some(x) = args.time_scale {
        gpu_agent_daemon::config::time_scale(x)
            .map_err(|e| anyhow::anyhow!("--time-scale: {e}"))?;
    }
    let source = Source {
        file: args.config,
        overrides: Overrides {
            mock: args.mock,
            session: args.session,
            time_scale: args.time_scale,
            state_dir: args.state_dir,
            plugin_dir: args.plugin_dir,
        },
        default_plugin_dir: gpu_agent_loader::default_dir()
            .context("cannot locate the plugin directory")?,
    };
    let (config, plugin_dir) = source.read()?;
    let options = gpu_agent_daemon::Options {
        source,
        config,
        policy: args.policy,
        plugin_dir,
        journal,
        accept_state_loss: args.accept_state_loss,
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
    runtime.block_on(async {
        use tokio::signal::unix::{signal, SignalKind};
        // Handlers first, so that a SIGTERM during start-up is a clean stop too.
        let mut term = signal(SignalKind::terminate()).context("cannot handle SIGTERM")?;
        let mut int = signal(SignalKind::interrupt()).context("cannot handle SIGINT")?;
        let stop = async move {
            if gpu_agent_daemon::early_signals::stop_requested() {
                return;
            }
            tokio::select! {
                _ = term.recv() => {}
                _ = int.recv() => {}
            }
        };
        gpu_agent_daemon::run(options, stop)
            .await
            .map_err(anyhow::Error::from)
    })?;
    Ok(())
}
