//! `gpuctl completions`: shell completion scripts.

use anyhow::{Context, Result};
use clap::CommandFactory;

use super::complete;
use crate::output::emit;
use crate::Cli;

/// Print a shell completion script for gpuctl.
///
/// The packages install them; to use one by hand, source it
/// (bash: `source <(gpuctl completions bash)`). In bash, zsh and fish, task
/// ids and policy names come from the running daemon.
#[derive(clap::Args)]
#[command(
    after_help = "Examples:\n  gpuctl completions bash > ~/.local/share/bash-completion/completions/gpuctl\n  gpuctl completions zsh > ~/.zfunc/_gpuctl\n  gpuctl completions fish > ~/.config/fish/completions/gpuctl.fish"
)]
pub struct Args {
    /// The shell.
    shell: clap_complete::Shell,
}

/// Prints the completion script for `args.shell`.
pub fn run(args: Args) -> Result<()> {
    let mut script = Vec::new();
    clap_complete::generate(args.shell, &mut Cli::command(), "gpuctl", &mut script);
    let mut script = String::from_utf8(script).context("the completion script is not UTF-8")?;
    match args.shell {
        clap_complete::Shell::Bash => script.push_str(complete::BASH),
        clap_complete::Shell::Fish => script.push_str(complete::FISH),
        clap_complete::Shell::Zsh => script = complete::zsh(&script)?,
        _ => {}
    }
    emit(&script)
}
