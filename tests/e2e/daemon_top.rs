//! `gpuctl top --once`: one frame of the devices' readings and of the tasks
//! not ended, a waiting one with its reason; and colour for task states on
//! a terminal only (a pseudo-terminal through `script`), never in a pipe or
//! under NO_COLOR.

use std::process::{Command, Output};
use std::time::Duration;

use gpu_agent_dbus::TaskStatus;

use crate::daemon::{gpuctl, spec, Daemon, Settings};
use crate::harness::artefacts;

const LIMIT: Duration = Duration::from_secs(20);
/// crossterm's green and red foregrounds.
const GREEN: &str = "\x1b[38;5;10m";
const RED: &str = "\x1b[38;5;9m";

fn text(out: &Output) -> String {
    assert!(
        out.status.success(),
        "gpuctl failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// `gpuctl --session ARGS` on a pseudo-terminal (`script`), with
/// `NO_COLOR` as given.
fn on_terminal(d: &Daemon, args: &str, no_color: Option<&str>) -> String {
    let line = format!("{} --session {args}", artefacts().join("gpuctl").display());
    let mut cmd = Command::new("script");
    cmd.args(["-qec", &line, "/dev/null"])
        .env("DBUS_SESSION_BUS_ADDRESS", d.address())
        .env_remove("NO_COLOR");
    if let Some(v) = no_color {
        cmd.env("NO_COLOR", v);
    }
    text(&cmd.output().expect("run script (util-linux)"))
}

/// The line of `text` that contains `needle`.
fn line<'a>(text: &'a str, needle: &str) -> &'a str {
    text.lines()
        .find(|l| l.contains(needle))
        .unwrap_or_else(|| panic!("no line with {needle:?} in\n{text}"))
}

#[test]
fn daemon_top_once_shows_devices_and_queues_in_colour_on_a_terminal_only() {
    let d = Daemon::start_with(Settings {
        time_scale: 1.0,
        host: Some("[[gpu]]\nmodel = \"A100-SXM4-40GB\"\ncount = 2\nspeed = 1.0\n".into()),
        ..Settings::default()
    });
    let t1 = d.submit(&spec(3600.0, 1.0, 1e6, 1.0)).unwrap();
    let t2 = d.submit(&spec(3600.0, 1.0, 1e6, 1.0)).unwrap();
    d.wait_state(&t1, TaskStatus::Running, LIMIT);
    d.wait_state(&t2, TaskStatus::Running, LIMIT);
    let t3 = d.submit(&spec(60.0, 1.0, 1e6, 1.0)).unwrap();
    d.wait_state(&t3, TaskStatus::Assigned, LIMIT);

    // Piped (gpuctl() pipes and sets NO_COLOR; top takes the pipe alone).
    let piped = Command::new(artefacts().join("gpuctl"))
        .args(["--session", "top", "--once"])
        .env("DBUS_SESSION_BUS_ADDRESS", d.address())
        .env_remove("NO_COLOR")
        .output()
        .expect("run gpuctl");
    let frame = text(&piped);
    assert!(!frame.contains('\x1b'), "escape codes in a pipe:\n{frame}");
    assert!(
        frame.starts_with("gpu-agent  policy fifo  2 running, 1 assigned, 0 queued  "),
        "{frame}"
    );
    let header = line(&frame, "GPU  NAME");
    for column in [
        "CLOCKS", "POWER", "UTIL", "MEMORY", "TEMP", "HEALTH", "TASK",
    ] {
        assert!(header.contains(column), "{header}");
    }
    // The mock reports temperature and memory; each GPU shows its task.
    let gpu0 = line(&frame, "NVIDIA A100-SXM4-40GB");
    assert!(
        gpu0.trim_start().starts_with('0') && gpu0.ends_with(&t1),
        "{frame}"
    );
    assert!(gpu0.contains(" °C") && gpu0.contains("/ 40 GB"), "{frame}");
    let waiting = line(&frame, &format!("{t3} "));
    assert!(
        waiting.contains("assigned")
            && waiting.ends_with(&format!("(queued on GPU 0 behind {t1})")),
        "{frame}"
    );

    // On a terminal: running rows green; a failed task's row red.
    let frame = on_terminal(&d, "top --once", None);
    assert!(line(&frame, &format!("{t1} ")).contains(GREEN), "{frame:?}");
    text(&gpuctl(&d, &["mock", "inject", "1", "xid", "79"]));
    d.wait_state(&t2, TaskStatus::Failed, LIMIT);
    let tasks = on_terminal(&d, "tasks", None);
    assert!(
        line(&tasks, &format!("{t2} ")).starts_with(RED),
        "{tasks:?}"
    );
    assert!(
        line(&tasks, &format!("{t1} ")).starts_with(GREEN),
        "{tasks:?}"
    );
    assert!(!line(&tasks, "ID ").contains('\x1b'), "{tasks:?}");
    // NO_COLOR, any non-empty value: none.
    for args in ["top --once", "tasks"] {
        let plain = on_terminal(&d, args, Some("1"));
        assert!(!plain.contains('\x1b'), "{args}: {plain:?}");
    }

    // The live view needs a terminal, and says so.
    let out = gpuctl(&d, &["top"]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("gpuctl top needs a terminal (--once prints one frame)"),
        "{err}"
    );
}
