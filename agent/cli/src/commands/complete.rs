//! Words for shell completion from the running daemon: task ids and policy
//! names, one a line, from the hidden `gpuctl complete`, which the bash, zsh
//! and fish scripts of `gpuctl completions` call (without a daemon they offer
//! nothing more than the static words).

use anyhow::Result;
use gpu_agent_dbus::TaskStatus;

use super::tasks::task;
use crate::client::{block_on, BusArgs, Client};
use crate::output::emit;

/// Print task ids or policy names of the running daemon, one a line (for
/// the completion scripts).
#[derive(clap::Args)]
#[command(hide = true)]
pub struct Args {
    /// What to list.
    what: What,
    #[command(flatten)]
    bus: BusArgs,
}

/// What `gpuctl complete` lists.
#[derive(clap::ValueEnum, Clone, Copy)]
enum What {
    /// Every task's id (gpuctl task, logs).
    Tasks,
    /// The ids of the tasks not ended (gpuctl cancel, release).
    LiveTasks,
    /// The loaded policies' names (gpuctl policy use, show).
    Policies,
}

/// Runs `gpuctl complete`.
pub fn run(args: Args) -> Result<()> {
    let words = block_on(async {
        let client = Client::connect(&args.bus).await?;
        let agent = &client.agent;
        let mut words = Vec::new();
        match args.what {
            What::Policies => {
                for (name, _) in client.call(agent.list_policies()).await? {
                    words.push(name);
                }
            }
            What::Tasks | What::LiveTasks => {
                let states: &[&str] = match args.what {
                    What::Tasks => &[""],
                    _ => &[
                        TaskStatus::Running.as_str(),
                        TaskStatus::Assigned.as_str(),
                        TaskStatus::Queued.as_str(),
                    ],
                };
                for state in states {
                    for dict in client.call(agent.all_tasks(state)).await? {
                        words.push(task(&dict)?.id);
                    }
                }
            }
        }
        Ok(words)
    })?;
    let mut text = words.join("\n");
    text.push('\n');
    emit(&text)
}

/// What the bash script adds to clap's: task ids after `task`, `logs`,
/// `cancel` and `release`, policy names after `policy use` and `policy
/// show`, from `gpuctl complete` (with the `--session` or `--system` typed).
pub const BASH: &str = r#"
# Task ids and policy names from the running daemon (gpuctl complete).
_gpuctl_daemon() {
    local cur=${COMP_WORDS[COMP_CWORD]} bus=() words=() w what=
    for w in "${COMP_WORDS[@]:1:COMP_CWORD-1}"; do
        case $w in
            --session|--system) bus+=("$w") ;;
            -*) ;;
            *) words+=("$w") ;;
        esac
    done
    case ${words[0]-}:${#words[@]} in
        task:1|logs:1) what=tasks ;;
        cancel:*|release:1) what=live-tasks ;;
        policy:2) [[ ${words[1]} == use || ${words[1]} == show ]] && what=policies ;;
    esac
    if [[ -n $what && $cur != -* ]]; then
        COMPREPLY=($(compgen -W "$(gpuctl "${bus[@]}" complete "$what" 2>/dev/null)" -- "$cur"))
        return 0
    fi
    _gpuctl "$@"
}
complete -F _gpuctl_daemon -o bashdefault -o default gpuctl
"#;

/// What the fish script adds to clap's (the bus from `GPU_AGENT_BUS`).
pub const FISH: &str = r#"
# Task ids and policy names from the running daemon (gpuctl complete).
complete -c gpuctl -n "__fish_seen_subcommand_from task logs" -f -a "(gpuctl complete tasks 2>/dev/null)"
complete -c gpuctl -n "__fish_seen_subcommand_from cancel release" -f -a "(gpuctl complete live-tasks 2>/dev/null)"
complete -c gpuctl -n "__fish_seen_subcommand_from policy; and __fish_seen_subcommand_from use show" -f -a "(gpuctl complete policies 2>/dev/null)"
"#;

/// The zsh function that offers the daemon's words where they belong and
/// clap's (`_gpuctl_clap`) elsewhere, as the bash script does.
const ZSH: &str = r#"
# Task ids and policy names from the running daemon (gpuctl complete).
_gpuctl() {
    local -a bus typed found
    local w what
    for w in "${(@)words[2,CURRENT-1]}"; do
        case $w in
            --session|--system) bus+=("$w") ;;
            -*) ;;
            *) typed+=("$w") ;;
        esac
    done
    case "${typed[1]-}:${#typed}" in
        task:1|logs:1) what=tasks ;;
        cancel:*|release:1) what=live-tasks ;;
        policy:2) [[ ${typed[2]} == (use|show) ]] && what=policies ;;
    esac
    if [[ -n $what && $PREFIX != -* ]]; then
        found=(${(f)"$(gpuctl "${bus[@]}" complete "$what" 2>/dev/null)"})
        compadd -- "${found[@]}"
        return
    fi
    _gpuctl_clap "$@"
}
"#;

/// clap's zsh script with [`ZSH`]'s `_gpuctl` in front of clap's, which
/// becomes `_gpuctl_clap`; the script's end (autoloaded from `fpath`, or
/// sourced) then runs or registers the new `_gpuctl`.
pub fn zsh(clap: &str) -> Result<String> {
    const CLAP_FUNCTION: &str = "\n_gpuctl() {\n";
    const END: &str = "\nif [ \"$funcstack[1]\" = \"_gpuctl\" ]; then\n";
    let (Some(function), Some(end)) = (clap.find(CLAP_FUNCTION), clap.rfind(END)) else {
        anyhow::bail!("clap's zsh script is not as gpuctl expects: it has no _gpuctl to wrap");
    };
    Ok(format!(
        "{}\n_gpuctl_clap() {{\n{}{ZSH}{}",
        &clap[..function],
        &clap[function + CLAP_FUNCTION.len()..end],
        &clap[end..]
    ))
}

#[cfg(test)]
mod tests {
    use clap::CommandFactory;

    #[test]
    fn the_zsh_script_wraps_clap_s_function() {
        let mut clap = Vec::new();
        clap_complete::generate(
            clap_complete::Shell::Zsh,
            &mut crate::Cli::command(),
            "gpuctl",
            &mut clap,
        );
        let clap = String::from_utf8(clap).unwrap();
        let script = super::zsh(&clap).unwrap();
        assert_eq!(script.matches("\n_gpuctl() {").count(), 1);
        assert_eq!(script.matches("\n_gpuctl_clap() {").count(), 1);
        let wrapper = script.find("\n_gpuctl() {").unwrap();
        assert!(script.find("\n_gpuctl_clap() {").unwrap() < wrapper);
        assert!(
            wrapper
                < script
                    .rfind("\nif [ \"$funcstack[1]\" = \"_gpuctl\" ]")
                    .unwrap()
        );
        assert!(script.starts_with("#compdef gpuctl\n"));
        assert!(super::zsh("#compdef gpuctl\n").is_err());
    }
}
