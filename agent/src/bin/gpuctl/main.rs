//! `gpuctl`: the gpu-agent command line.

mod agent;
mod client;
mod clock;
mod demo;
mod inspect;
mod simulate;
mod submit;
mod table;
mod tasks;
mod units;

use std::io::{ErrorKind, Write};
use std::process::ExitCode;

use anyhow::Context;
use clap::{Parser, Subcommand};
use serde::Serialize;

/// Control and study the gpu-agent GPU scheduler.
#[derive(Parser)]
#[command(name = "gpuctl", version, about, long_about = None)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    Status(agent::StatusArgs),
    Devices(agent::DevicesArgs),
    Submit(submit::Args),
    Tasks(tasks::ListArgs),
    Task(tasks::ShowArgs),
    Cancel(tasks::CancelArgs),
    Watch(tasks::WatchArgs),
    Policy(agent::PolicyArgs),
    Reload(agent::ReloadArgs),
    Metrics(agent::MetricsArgs),
    Simulate(simulate::Args),
    Inspect(inspect::Args),
    Demo(demo::Args),
}

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
    let result = match cli.command {
        Command::Status(args) => agent::status(args),
        Command::Devices(args) => agent::devices(args),
        Command::Submit(args) => submit::run(args),
        Command::Tasks(args) => tasks::list(args),
        Command::Task(args) => tasks::show(args),
        Command::Cancel(args) => tasks::cancel(args),
        Command::Watch(args) => tasks::watch(args),
        Command::Policy(args) => agent::policy(args),
        Command::Reload(args) => agent::reload(args),
        Command::Metrics(args) => agent::metrics(args),
        Command::Simulate(args) => simulate::run(args),
        Command::Inspect(args) => inspect::run(args),
        Command::Demo(args) => demo::run(args),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) if e.downcast_ref::<StdoutClosed>().is_some() => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("gpuctl: error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

/// Standard output's reader went away: a pipeline saying it has read enough
/// (`gpuctl tasks | head`). gpuctl then ends quietly, with success.
#[derive(Debug, thiserror::Error)]
#[error("standard output is closed")]
struct StdoutClosed;

/// Writes `text` to standard output.
fn emit(text: &str) -> anyhow::Result<()> {
    match std::io::stdout().lock().write_all(text.as_bytes()) {
        Err(e) if e.kind() == ErrorKind::BrokenPipe => Err(StdoutClosed.into()),
        other => Ok(other.context("cannot write to standard output")?),
    }
}

/// Writes `value` to standard output as pretty JSON and a newline.
fn emit_json(value: &impl Serialize) -> anyhow::Result<()> {
    emit(&format!("{}\n", serde_json::to_string_pretty(value)?))
}
