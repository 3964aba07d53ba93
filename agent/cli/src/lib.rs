//! `gpuctl`, the gpu-agent command line, as a library: the `gpuctl` binary
//! parses its command line into [`Cli`] and hands it to [`run`].
//!
//! Each command is a module of `commands` (its arguments, what it does, its
//! tests). Below them: `client` (the D-Bus connection to gpu-agentd and how
//! failures are worded and numbered), `output` (standard output), `table`,
//! `units`, `clock` and `colour` (how values are written) and `plot` (SVG
//! charts).

mod client;
mod clock;
mod colour;
mod commands;
mod output;
mod plot;
mod table;
mod units;

use clap::Parser;
use gpu_agent_manual::Section;

/// Control and study the gpu-agent GPU scheduler.
#[derive(Parser)]
#[command(name = "gpuctl", version, long_about = None)]
pub struct Cli {
    /// The bus, for every command that talks to gpu-agentd (also accepted after it).
    #[command(flatten)]
    bus: client::BusArgs,
    #[command(subcommand)]
    command: commands::Command,
}

/// The manual's sections that clap has no place for.
pub(crate) const MANUAL: &[Section] = &[
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

/// Runs the command `cli` names. A closed standard output (its reader
/// stopped early) is success.
pub fn run(cli: Cli) -> anyhow::Result<()> {
    client::set_bus_before_command(cli.bus);
    match cli.command.run() {
        Err(e) if e.downcast_ref::<output::StdoutClosed>().is_some() => Ok(()),
        other => other,
    }
}

/// Runs the gpuctl command line `argv` (without the program's name) in
/// this process and returns what it wrote to standard output: how the
/// Python package (python/) runs `trace gen` and `trace import`, with
/// gpuctl's checks and messages. A bad command line is clap's error.
pub fn run_captured<I, T>(argv: I) -> anyhow::Result<String>
where
    I: IntoIterator<Item = T>,
    T: Into<std::ffi::OsString> + Clone,
{
    let cli = Cli::try_parse_from(
        std::iter::once("gpuctl".into()).chain(argv.into_iter().map(Into::into)),
    )?;
    let (done, written) = output::captured(|| run(cli));
    done?;
    Ok(String::from_utf8(written)?)
}

/// What the Python package (python/) calls besides [`run_captured`]: the
/// functions behind `gpuctl simulate` and `gpuctl policy show`.
pub mod offline {
    pub use crate::commands::policy::describe;
    pub use crate::commands::simulate::{simulate_one, Request, Simulated};
}

/// The exit status gpuctl(1) documents for the error `e`.
pub fn exit_status(e: &anyhow::Error) -> u8 {
    client::exit_status(e)
}
