//! `gpuctl`: the gpu-agent command line.

mod demo;
mod inspect;
mod simulate;

use std::io::Write;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

/// Control and study the gpu-agent GPU scheduler.
#[derive(Parser)]
#[command(name = "gpuctl", version, about, long_about = None)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
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
        Command::Simulate(args) => simulate::run(args),
        Command::Inspect(args) => inspect::run(args),
        Command::Demo(args) => demo::run(args),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("gpuctl: error: {e:#}");
            ExitCode::FAILURE
        }
    }
}
