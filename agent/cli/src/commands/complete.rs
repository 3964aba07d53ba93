//! Words for shell completion from the running daemon: task ids and policy
//! names, one a line, from the hidden `gpuctl complete`, which the bash and
//! fish scripts of `gpuctl completions` call (without a daemon they offer
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
