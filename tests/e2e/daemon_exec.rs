//! Tasks with a `command`: the process executor through the daemon.

use std::time::Duration;

use gpu_agent_dbus::TaskStatus;

use crate::daemon::{processes_with_env, spec, unique, wait_for, Daemon, Reap, Settings, AGENT};

const LIMIT: Duration = Duration::from_secs(15);

fn uuid_of(d: &Daemon, device: u32) -> String {
    let v = d.busctl_json(&[
        "get-property",
        AGENT[0],
        &format!("/org/gpuagent/Agent1/gpu/{device}"),
        "org.gpuagent.Device1",
        "Uuid",
    ]);
    v["data"].as_str().expect("a UUID").to_string()
}

fn log_of(d: &Daemon, id: &str) -> String {
    let path = d.state_dir().join("logs").join(format!("{id}.log"));
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// Prints what the task sees; fails unless it was given GPUs.
const REPORT: &str = r#"test -n "$CUDA_VISIBLE_DEVICES" || exit 9
echo "cvd=$CUDA_VISIBLE_DEVICES uid=$(id -u) task=$GPU_AGENT_TASK_ID"
echo "to stderr" >&2"#;

#[test]
fn daemon_command_runs_as_the_submitter_with_its_gpus_visible() {
    let d = Daemon::start();
    let me = nix::unistd::getuid().as_raw();

    let mut one = spec(10.0, 1.0, 60.0, 1.0);
    one.command = vec!["/bin/sh".into(), "-c".into(), REPORT.into()];
    let id = d.submit(&one).expect("Submit");
    let task = d.wait_state(&id, TaskStatus::Succeeded, LIMIT);
    assert_eq!(task.exit_code, Some(0));
    assert_eq!(task.owner_uid, me);
    assert_eq!(task.devices.len(), 1);
    assert_eq!(
        log_of(&d, &id),
        format!(
            "cvd={} uid={me} task={id}\nto stderr\n",
            uuid_of(&d, task.devices[0])
        )
    );

    // The task's own environment cannot widen its GPUs or change its id,
    // and nothing of the daemon's environment reaches it.
    let mut sneaky = one.clone();
    sneaky
        .env
        .insert("CUDA_VISIBLE_DEVICES".into(), "all".into());
    sneaky.env.insert("GPU_AGENT_TASK_ID".into(), "t999".into());
    sneaky.env.insert("E2E_OWN".into(), "kept".into());
    sneaky.command[2] = format!(
        "{REPORT}\necho \"own=$E2E_OWN bus=${{DBUS_SESSION_BUS_ADDRESS-unset}} path=$PATH\""
    );
    let id = d.submit(&sneaky).expect("Submit");
    let task = d.wait_state(&id, TaskStatus::Succeeded, LIMIT);
    assert_eq!(
        log_of(&d, &id),
        format!(
            "cvd={} uid={me} task={id}\nto stderr\nown=kept bus=unset path=/usr/local/bin:/usr/bin:/bin\n",
            uuid_of(&d, task.devices[0])
        )
    );

    // A gang of two that only the A100s (40 GB) can hold: both UUIDs, in
    // device order.
    let mut gang = spec(10.0, 35.0, 60.0, 1.0);
    gang.gpus = 2;
    gang.command = one.command.clone();
    let id = d.submit(&gang).expect("Submit");
    let task = d.wait_state(&id, TaskStatus::Succeeded, LIMIT);
    assert_eq!(task.devices, vec![0, 1]);
    assert_eq!(
        log_of(&d, &id),
        format!(
            "cvd={},{} uid={me} task={id}\nto stderr\n",
            uuid_of(&d, 0),
            uuid_of(&d, 1)
        )
    );
}

#[test]
fn daemon_failing_command_ends_failed_with_its_exit_code() {
    let d = Daemon::start();
    let mut s = spec(10.0, 1.0, 60.0, 1.0);
    s.command = vec!["/bin/sh".into(), "-c".into(), "echo bye; exit 3".into()];
    let id = d.submit(&s).expect("Submit");
    let task = d.wait_state(&id, TaskStatus::Failed, LIMIT);
    assert_eq!(task.exit_code, Some(3));
    assert_eq!(task.reason.as_deref(), Some("exited with status 3"));
    assert!(
        task.started.is_some() && task.finished.is_some(),
        "{task:?}"
    );
    assert_eq!(log_of(&d, &id), "bye\n");

    // Killed by a signal: 128 + its number.
    let mut killed = spec(10.0, 1.0, 60.0, 1.0);
    killed.command = vec!["/bin/sh".into(), "-c".into(), "kill -KILL $$".into()];
    let id = d.submit(&killed).expect("Submit");
    let task = d.wait_state(&id, TaskStatus::Failed, LIMIT);
    assert_eq!(task.exit_code, Some(137));
    assert_eq!(task.reason.as_deref(), Some("exited with status 137"));

    // A program that does not exist fails too, and says why.
    let mut missing = spec(10.0, 1.0, 60.0, 1.0);
    missing.command = vec!["/nonexistent/program".into()];
    let id = d.submit(&missing).expect("Submit");
    let task = d.wait_state(&id, TaskStatus::Failed, LIMIT);
    let reason = task.reason.clone().unwrap_or_default();
    assert!(
        reason.contains("/nonexistent/program"),
        "the reason names the program: {task:?}"
    );
}

#[test]
fn daemon_cancel_kills_a_running_command_and_its_children() {
    let d = Daemon::start();
    let mark = unique("cancel");
    let mut s = spec(10.0, 1.0, 60.0, 1.0);
    // `; true` keeps the shell around as the parent of `sleep`.
    s.command = vec!["/bin/sh".into(), "-c".into(), "sleep 100; true".into()];
    s.env.insert("E2E_MARK".into(), mark.clone());
    let id = d.submit(&s).expect("Submit");
    d.wait_state(&id, TaskStatus::Running, LIMIT);
    wait_for("the shell and its sleep to run", LIMIT, || {
        (processes_with_env("E2E_MARK", &mark).len() == 2).then_some(())
    });

    let proxy = d.proxy();
    let asked = std::time::Instant::now();
    d.block_on(proxy.cancel(&id)).expect("Cancel");
    let task = d.wait_state(&id, TaskStatus::Cancelled, Duration::from_secs(5));
    let took = asked.elapsed();
    // SIGTERM to the group: the shell dies of it (128 + 15).
    assert_eq!(task.exit_code, Some(143), "{task:?}");
    assert!(took < Duration::from_secs(5), "cancel took {took:?}");
    wait_for("every process of the task to be gone", LIMIT, || {
        processes_with_env("E2E_MARK", &mark)
            .is_empty()
            .then_some(())
    });
    // Cancelling it again is refused.
    let (name, message) = crate::daemon::dbus_error(d.block_on(proxy.cancel(&id)));
    assert_eq!(name, "org.gpuagent.Agent1.Error.NotCancellable");
    assert_eq!(message, format!("task {id} already cancelled"));
}

/// A command that ignores SIGTERM (and so does its `sleep`: an ignored
/// signal stays ignored across exec); "ready" once the trap is in place.
pub const STUBBORN: &str = "trap '' TERM; echo ready; sleep 100; true";

/// A daemon that waits half a second between SIGTERM and SIGKILL.
pub fn short_grace() -> Daemon {
    Daemon::start_with(Settings {
        config: Some("cancel_grace_s = 0.5\n".into()),
        ..Settings::default()
    })
}

/// Submits [`STUBBORN`] marked with `mark`; returns its id once it is ready.
pub fn submit_stubborn(d: &Daemon, mark: &str) -> String {
    let mut s = spec(10.0, 1.0, 60.0, 1.0);
    s.command = vec!["/bin/sh".into(), "-c".into(), STUBBORN.into()];
    s.env.insert("E2E_MARK".into(), mark.into());
    let id = d.submit(&s).expect("Submit");
    d.wait_state(&id, TaskStatus::Running, LIMIT);
    let log = d.state_dir().join("logs").join(format!("{id}.log"));
    wait_for("the task to trap SIGTERM", LIMIT, || {
        (std::fs::read_to_string(&log).unwrap_or_default() == "ready\n"
            && processes_with_env("E2E_MARK", mark).len() == 2)
            .then_some(())
    });
    id
}

#[test]
fn daemon_cancel_kills_a_command_that_ignores_sigterm_after_the_grace() {
    let d = short_grace();
    let mark = unique("stubborn");
    let _reap = Reap(mark.clone());
    let id = submit_stubborn(&d, &mark);
    let asked = std::time::Instant::now();
    d.block_on(d.proxy().cancel(&id)).expect("Cancel");
    let task = d.wait_state(&id, TaskStatus::Cancelled, LIMIT);
    let took = asked.elapsed();
    assert_eq!(task.exit_code, Some(137), "SIGKILL ended it: {task:?}");
    assert!(
        took >= Duration::from_millis(500),
        "it ended {took:?} after the cancel, before the grace was over"
    );
    wait_for("every process of the task to be gone", LIMIT, || {
        processes_with_env("E2E_MARK", &mark)
            .is_empty()
            .then_some(())
    });
}
