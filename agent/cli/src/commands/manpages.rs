//! `gpuctl manpages` (hidden): the manual pages, for packaging.

use anyhow::{Context, Result};
use clap::CommandFactory;

use crate::output::emit;
use crate::{Cli, MANUAL};

/// Write the manual pages gpuctl(1) and gpuctl-COMMAND(1) into DIR (for packaging).
#[derive(clap::Args)]
#[command(hide = true)]
pub struct Args {
    /// The directory to write them into (it must exist).
    dir: std::path::PathBuf,
}

/// Writes the manual pages into `args.dir`, printing each file's path.
pub fn run(args: Args) -> Result<()> {
    let written = gpu_agent_manual::write_pages(Cli::command(), "1", MANUAL, &args.dir)
        .with_context(|| format!("cannot write manual pages into {}", args.dir.display()))?;
    for path in written {
        emit(&format!("{}\n", path.display()))?;
    }
    Ok(())
}
