//! `gpuctl`: the gpu-agent command line. See the `gpu_agent_cli` library.

use std::io::Write;
use std::process::ExitCode;

use clap::Parser;
use gpu_agent_cli::Cli;

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
    match gpu_agent_cli::run(Cli::parse()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("gpuctl: error: {e:#}");
            ExitCode::from(gpu_agent_cli::exit_status(&e))
        }
    }
}
