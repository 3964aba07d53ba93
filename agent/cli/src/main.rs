//! `gpuctl`: the gpu-agent command line.

mod adopt;
mod agent;
mod client;
mod clock;
mod colour;
mod complete;
mod demo;
mod dvfs;
mod dvfs_paper;
mod inspect;
mod mig;
mod mig_plan;
mod mock;
mod plot;
mod simulate;
mod submit;
mod table;
mod tasks;
mod top;
mod trace;
mod trace_gen;
mod units;

use std::io::{ErrorKind, Write};
use std::process::ExitCode;

use anyhow::Context;
use clap::{CommandFactory, Parser, Subcommand};
use gpu_agent_manual::Section;
use serde::Serialize;

/// Control and study the gpu-agent GPU scheduler.
#[derive(Parser)]
#[command(name = "gpuctl", version, long_about = None)]
struct Cli {
    /// The bus, for every command that talks to gpu-agentd (also accepted after it).
    #[command(flatten)]
    bus: client::BusArgs,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    Status(agent::StatusArgs),
    Devices(agent::DevicesArgs),
    Top(top::TopArgs),
    Submit(submit::Args),
    Tasks(tasks::ListArgs),
    Task(tasks::ShowArgs),
    Cancel(tasks::CancelArgs),
    Logs(tasks::LogsArgs),
    Adopt(adopt::AdoptArgs),
    Release(adopt::ReleaseArgs),
    Watch(tasks::WatchArgs),
    Policy(agent::PolicyArgs),
    Reload(agent::ReloadArgs),
    Metrics(agent::MetricsArgs),
    Mig(mig::Args),
    Mock(mock::Args),
    Simulate(simulate::Args),
    Inspect(inspect::Args),
    Demo(demo::Args),
    Trace(trace::Args),
    Dvfs(dvfs::Args),
    Completions(CompletionsArgs),
    Complete(complete::CompleteArgs),
    Manpages(ManpagesArgs),
}

/// Print a shell completion script for gpuctl.
///
/// The packages install them; to use one by hand, source it
/// (bash: `source <(gpuctl completions bash)`). In bash and fish, task ids
/// and policy names come from the running daemon.
#[derive(clap::Args)]
#[command(
    after_help = "Examples:\n  gpuctl completions bash > ~/.local/share/bash-completion/completions/gpuctl\n  gpuctl completions zsh > ~/.zfunc/_gpuctl\n  gpuctl completions fish > ~/.config/fish/completions/gpuctl.fish"
)]
struct CompletionsArgs {
    /// The shell.
    shell: clap_complete::Shell,
}

/// Write the manual pages gpuctl(1) and gpuctl-COMMAND(1) into DIR (for packaging).
#[derive(clap::Args)]
#[command(hide = true)]
struct ManpagesArgs {
    /// The directory to write them into (it must exist).
    dir: std::path::PathBuf,
}

/// The manual's sections that clap has no place for.
const MANUAL: &[Section] = &[
    Section {
        title: "ENVIRONMENT",
        intro: "",
        entries: &[
            (
                "GPU_AGENT_BUS",
                "The bus to reach gpu-agentd on when no --session or --system says: session, \
                 system (the default) or a D-Bus address such as unix:path=/run/dbus/other.",
            ),
            (
                "DBUS_SYSTEM_BUS_ADDRESS, DBUS_SESSION_BUS_ADDRESS",
                "Where the system and the session bus are.",
            ),
            (
                "RUST_LOG",
                "How much gpuctl logs to stderr (default: warn).",
            ),
        ],
    },
    Section {
        title: "FILES",
        intro: "",
        entries: &[(
            "/usr/lib/gpu-agent/plugins/",
            "The policy plugins gpuctl simulate loads unless --plugin-dir says otherwise (a \
             build without the packaged layout looks next to the gpuctl binary).",
        )],
    },
    Section {
        title: "EXIT STATUS",
        intro: "",
        entries: &[
            (
                "0",
                "Success (also when a reader of the output, such as head, stops reading early).",
            ),
            (
                "1",
                "A negative answer: mig assert found the GPUs differ, a MIG change or a task \
                 waited for did not end well; also a failure of gpuctl's own work (an input \
                 file that cannot be read or is malformed). stderr says why.",
            ),
            ("2", "A bad command line (or GPU_AGENT_BUS)."),
            (
                "3",
                "gpu-agentd cannot be reached (no bus, the daemon is not running or died \
                 before answering), or it refused the caller (AccessDenied).",
            ),
            (
                "4",
                "gpu-agentd answered an error other than AccessDenied: stderr shows its name \
                 and message (for example org.gpuagent.Agent1.Error.NoSuchTask). gpuctl cancel \
                 of several tasks: some were not cancelled (each is named).",
            ),
        ],
    },
    Section {
        title: "SEE ALSO",
        intro: "gpu-agentd(8), busctl(1); the D-Bus API in /usr/share/doc/gpu-agent/dbus.md, \
                the file formats in /usr/share/doc/gpu-agent/formats.md.",
        entries: &[],
    },
];

fn main() -> ExitCode {
    env_logger::Builder::from_env(env_logger::Env::default().default_filter_or("warn"))
        .format(|buf, record| {
            writeln!(
                buf,
                "gpuctl: {}: {}",
                record.level().as_str().to_lowercase(),
                record.args()
            )
        })
        .init();
    let cli = Cli::parse();
    client::set_bus_before_command(cli.bus);
    let result = match cli.command {
        Command::Status(args) => agent::status(args),
        Command::Devices(args) => agent::devices(args),
        Command::Top(args) => top::top(args),
        Command::Submit(args) => submit::run(args),
        Command::Tasks(args) => tasks::list(args),
        Command::Task(args) => tasks::show(args),
        Command::Cancel(args) => tasks::cancel(args),
        Command::Logs(args) => tasks::logs(args),
        Command::Adopt(args) => adopt::adopt(args),
        Command::Release(args) => adopt::release(args),
        Command::Watch(args) => tasks::watch(args),
        Command::Policy(args) => agent::policy(args),
        Command::Reload(args) => agent::reload(args),
        Command::Metrics(args) => agent::metrics(args),
        Command::Mock(args) => mock::run(args),
        Command::Mig(args) => mig::run(args),
        Command::Simulate(args) => simulate::run(args),
        Command::Inspect(args) => inspect::run(args),
        Command::Demo(args) => demo::run(args),
        Command::Trace(args) => trace::run(args),
        Command::Dvfs(args) => dvfs::run(args),
        Command::Completions(args) => completions(args),
        Command::Complete(args) => complete::complete(args),
        Command::Manpages(args) => manpages(args),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) if e.downcast_ref::<StdoutClosed>().is_some() => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("gpuctl: error: {e:#}");
            ExitCode::from(client::exit_status(&e))
        }
    }
}

/// Prints the completion script for `args.shell`.
fn completions(args: CompletionsArgs) -> anyhow::Result<()> {
    let mut script = Vec::new();
    clap_complete::generate(args.shell, &mut Cli::command(), "gpuctl", &mut script);
    let mut script = String::from_utf8(script).context("the completion script is not UTF-8")?;
    script.push_str(match args.shell {
        clap_complete::Shell::Bash => complete::BASH,
        clap_complete::Shell::Fish => complete::FISH,
        _ => "",
    });
    emit(&script)
}

/// Writes the manual pages into `args.dir`, printing each file's path.
fn manpages(args: ManpagesArgs) -> anyhow::Result<()> {
    let written = gpu_agent_manual::write_pages(Cli::command(), "1", MANUAL, &args.dir)
        .with_context(|| format!("cannot write manual pages into {}", args.dir.display()))?;
    for path in written {
        emit(&format!("{}\n", path.display()))?;
    }
    Ok(())
}

/// Standard output's reader went away: a pipeline saying it has read enough
/// (`gpuctl tasks | head`). gpuctl then ends quietly, with success.
#[derive(Debug, thiserror::Error)]
#[error("standard output is closed")]
struct StdoutClosed;

/// Writes `text` to standard output.
fn emit(text: &str) -> anyhow::Result<()> {
    emit_bytes(text.as_bytes())
}

/// Writes `bytes` to standard output as they are, and flushes them.
fn emit_bytes(bytes: &[u8]) -> anyhow::Result<()> {
    let mut out = std::io::stdout().lock();
    match out.write_all(bytes).and_then(|()| out.flush()) {
        Err(e) if e.kind() == ErrorKind::BrokenPipe => Err(StdoutClosed.into()),
        other => Ok(other.context("cannot write to standard output")?),
    }
}

/// Writes `value` to standard output as pretty JSON and a newline.
fn emit_json(value: &impl Serialize) -> anyhow::Result<()> {
    emit(&format!("{}\n", serde_json::to_string_pretty(value)?))
}
