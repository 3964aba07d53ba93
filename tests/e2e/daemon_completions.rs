//! The bash and zsh completion scripts offer the running daemon's task ids
//! and policy names (through the hidden `gpuctl complete`), and clap's words
//! elsewhere.

use std::process::Command;
use std::time::Duration;

use gpu_agent_dbus::TaskStatus;

use crate::daemon::{spec, Daemon};
use crate::harness::artefacts;

/// What `_gpuctl_daemon` offers for the command line `words` (the last one
/// being completed), in bash with the script of `gpuctl completions bash`.
fn offered(d: &Daemon, words: &[&str]) -> Vec<String> {
    let quoted: Vec<String> = words.iter().map(|w| format!("'{w}'")).collect();
    let script = format!(
        r#"source <(gpuctl completions bash)
COMP_WORDS=({}); COMP_CWORD=$(( ${{#COMP_WORDS[@]}} - 1 ))
_gpuctl_daemon gpuctl "${{COMP_WORDS[-1]}}" "${{COMP_WORDS[-2]}}"
printf '%s\n' "${{COMPREPLY[@]}}""#,
        quoted.join(" ")
    );
    words_printed(d, "bash", &["-c", &script])
}

#[test]
fn daemon_completions_offer_task_ids_and_policy_names() {
    let d = Daemon::start();
    let done = d.submit(&spec(1.0, 1.0, 1e6, 1.0)).unwrap();
    d.wait_state(&done, TaskStatus::Succeeded, Duration::from_secs(20));
    let live = d.submit(&spec(1e6, 1.0, 1e6, 1.0)).unwrap();
    // Every task for task and logs; those not ended for cancel.
    let mut all = vec![done.clone(), live.clone()];
    all.sort();
    assert_eq!(offered(&d, &["gpuctl", "--session", "task", ""]), all);
    assert_eq!(offered(&d, &["gpuctl", "--session", "logs", ""]), all);
    assert_eq!(
        offered(&d, &["gpuctl", "--session", "cancel", &done, ""]),
        [live.as_str()]
    );
    // Policy names after policy use and show, filtered by what is typed.
    assert_eq!(
        offered(&d, &["gpuctl", "--session", "policy", "use", ""]),
        ["fifo", "greedy-eft"]
    );
    assert_eq!(
        offered(&d, &["gpuctl", "--session", "policy", "show", "g"]),
        ["greedy-eft"]
    );
    // Elsewhere clap's words; an option's name is never a task id.
    assert_eq!(offered(&d, &["gpuctl", "ta"]), ["task", "tasks"]);
    assert!(offered(&d, &["gpuctl", "--session", "task", "--"]).contains(&"--json".to_string()));
}

/// What zsh's `_gpuctl` (the script of `gpuctl completions zsh`, loaded
/// through compinit) offers for the command line `words`, the last one
/// being completed: the words it gives `compadd`, or `clap` where it hands
/// over to clap's function. Both stand in for zsh's completion widget,
/// which only an interactive shell has.
fn offered_by_zsh(d: &Daemon, words: &[&str]) -> Vec<String> {
    let quoted: Vec<String> = words.iter().map(|w| format!("'{w}'")).collect();
    let script = format!(
        r#"autoload -U compinit && compinit -D -u
source <(gpuctl completions zsh)
compadd() {{ [[ $1 == -- ]] && shift; print -l -- "$@" }}
_gpuctl_clap() {{ print clap }}
words=({}); CURRENT=${{#words}}; PREFIX=${{words[-1]}}
_gpuctl"#,
        quoted.join(" ")
    );
    words_printed(d, "zsh", &["-f", "-c", &script])
}

#[test]
fn daemon_zsh_completions_offer_task_ids_and_policy_names() {
    if Command::new("zsh").arg("--version").output().is_err() {
        eprintln!("skipped: no zsh (.ci/run installs it)");
        return;
    }
    let d = Daemon::start();
    let done = d.submit(&spec(1.0, 1.0, 1e6, 1.0)).unwrap();
    d.wait_state(&done, TaskStatus::Succeeded, Duration::from_secs(20));
    let live = d.submit(&spec(1e6, 1.0, 1e6, 1.0)).unwrap();
    let mut all = vec![done.clone(), live.clone()];
    all.sort();
    assert_eq!(
        offered_by_zsh(&d, &["gpuctl", "--session", "task", ""]),
        all
    );
    assert_eq!(
        offered_by_zsh(&d, &["gpuctl", "--session", "logs", ""]),
        all
    );
    assert_eq!(
        offered_by_zsh(&d, &["gpuctl", "--session", "cancel", &done, ""]),
        [live.as_str()]
    );
    assert_eq!(
        offered_by_zsh(&d, &["gpuctl", "--session", "release", ""]),
        [live.as_str()]
    );
    assert_eq!(
        offered_by_zsh(&d, &["gpuctl", "--session", "policy", "use", ""]),
        ["fifo", "greedy-eft"]
    );
    // Elsewhere, and for an option, clap's function.
    assert_eq!(offered_by_zsh(&d, &["gpuctl", "ta"]), ["clap"]);
    assert_eq!(
        offered_by_zsh(&d, &["gpuctl", "--session", "task", "--"]),
        ["clap"]
    );
    assert_eq!(
        offered_by_zsh(&d, &["gpuctl", "--session", "policy", "list", ""]),
        ["clap"]
    );
}

/// The lines, sorted, that `shell ARGS` prints with `gpuctl` on its PATH
/// and `d`'s bus as the session bus (the script must succeed).
fn words_printed(d: &Daemon, shell: &str, args: &[&str]) -> Vec<String> {
    let path = format!(
        "{}:{}",
        artefacts().display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let out = Command::new(shell)
        .args(args)
        .env("PATH", path)
        .env("DBUS_SESSION_BUS_ADDRESS", d.address())
        .output()
        .unwrap_or_else(|e| panic!("run {shell}: {e}"));
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let mut words: Vec<String> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter(|l| !l.is_empty())
        .map(str::to_string)
        .collect();
    words.sort();
    words
}
