//! kill -9 in the middle of a workload: whatever the daemon acknowledged is
//! there after a restart, exactly once.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use gpu_agent_dbus::{TaskInfo, TaskStatus};

use crate::daemon::{processes_with_env, spec, unique, wait_for, Daemon, Settings};

/// Tasks in the workload.
const TASKS: usize = 500;
/// Concurrent clients, each on its own connection.
const CLIENTS: usize = 4;
/// Kill -9 once this many submissions were acknowledged (in total).
const KILL_AT: [usize; 3] = [60, 220, 380];

/// What the clients saw.
#[derive(Default)]
struct Seen {
    /// Ids `Submit` returned, in the order the replies came.
    acked: Mutex<Vec<String>>,
    /// Calls that failed without a named answer from the daemon: each may or
    /// may not have been stored.
    unknown: AtomicUsize,
    /// Tasks still to be acknowledged.
    left: AtomicUsize,
}

#[test]
fn daemon_kill_9_mid_workload_loses_and_duplicates_nothing() {
    let started = Instant::now();
    let mut d = Daemon::start_with(Settings {
        time_scale: 500.0,
        ..Settings::default()
    });
    let seen = Arc::new(Seen {
        left: AtomicUsize::new(TASKS),
        ..Seen::default()
    });
    let clients: Vec<_> = (0..CLIENTS)
        .map(|c| {
            let proxy = d.new_client();
            let seen = seen.clone();
            d.spawn(async move {
                let mut n = 0u64;
                // Claim one task of the workload, then submit it until acknowledged.
                while seen
                    .left
                    .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |l| l.checked_sub(1))
                    .is_ok()
                {
                    n += 1;
                    // 5 to 9 work units: 10-18 ms on an A100, 40-72 ms on the T4.
                    let mut s = spec(5.0 + (n % 5) as f64, 1.0, 600.0, 1.0);
                    s.requeue = n % 3 == 1;
                    s.name = format!("c{c}-{n}");
                    loop {
                        match proxy.submit(s.to_dict()).await {
                            Ok(id) => {
                                seen.acked.lock().unwrap().push(id);
                                break;
                            }
                            Err(zbus::Error::MethodError(name, msg, _))
                                if name.starts_with("org.gpuagent.") =>
                            {
                                panic!("the daemon refused a valid task: {name}: {msg:?}")
                            }
                            Err(_) => {
                                // The daemon is dead or restarting; this call
                                // may or may not have been stored.
                                seen.unknown.fetch_add(1, Ordering::SeqCst);
                                tokio::time::sleep(Duration::from_millis(20)).await;
                            }
                        }
                    }
                }
            })
        })
        .collect();

    for kill_at in KILL_AT {
        wait_for(
            &format!("{kill_at} acknowledged submissions"),
            Duration::from_secs(30),
            || (seen.acked.lock().unwrap().len() >= kill_at).then_some(()),
        );
        d.kill9();
        let before: Vec<String> = seen.acked.lock().unwrap().clone();
        d.restart();
        // Every task acknowledged before the kill is back, exactly once.
        let tasks = d.tasks();
        check_once(&tasks, &before);
        for t in &tasks {
            assert!(
                t.state != TaskStatus::Running || t.started.is_some(),
                "{t:?}"
            );
        }
    }
    for c in clients {
        d.block_on(c).expect("a client finished");
    }

    let acked = seen.acked.lock().unwrap().clone();
    assert_eq!(acked.len(), TASKS);
    let tasks = d.wait_all_ended(Duration::from_secs(30));
    check_once(&tasks, &acked);
    let unknown = seen.unknown.load(Ordering::SeqCst);
    assert!(
        tasks.len() <= TASKS + unknown,
        "{} tasks stored, {TASKS} acknowledged, {unknown} calls of unknown outcome",
        tasks.len()
    );

    let mut states: HashMap<TaskStatus, usize> = HashMap::new();
    for t in &tasks {
        *states.entry(t.state).or_default() += 1;
        match t.state {
            TaskStatus::Succeeded => {
                assert!(t.started.is_some() && t.finished.is_some(), "{t:?}");
            }
            // Running when the daemon died, and not to be run again.
            TaskStatus::Lost => {
                assert!(!t.spec.requeue, "a requeue task was lost: {t:?}");
                assert!(t.started.is_some() && t.finished.is_some(), "{t:?}");
                assert_eq!(
                    t.reason.as_deref(),
                    Some("gpu-agentd stopped while it ran"),
                    "{t:?}"
                );
            }
            other => panic!("task {} ended {other}: {t:?}", t.id),
        }
    }
    assert!(
        states.get(&TaskStatus::Lost).copied().unwrap_or(0) > 0,
        "no task was running at any of the kills: the test did not test: {states:?}"
    );
    eprintln!(
        "kill -9 ×{}: {} tasks ({unknown} calls of unknown outcome), {states:?}, in {:?}",
        KILL_AT.len(),
        tasks.len(),
        started.elapsed()
    );
}

/// Every id in `acked` is in `tasks` exactly once, and no id is there twice.
fn check_once(tasks: &[TaskInfo], acked: &[String]) {
    let mut count: HashMap<&str, usize> = HashMap::new();
    for t in tasks {
        *count.entry(t.id.as_str()).or_default() += 1;
    }
    let twice: Vec<_> = count.iter().filter(|(_, &n)| n > 1).collect();
    assert!(twice.is_empty(), "ids listed more than once: {twice:?}");
    let distinct: HashSet<&String> = acked.iter().collect();
    assert_eq!(distinct.len(), acked.len(), "Submit returned an id twice");
    let missing: Vec<_> = acked
        .iter()
        .filter(|id| !count.contains_key(id.as_str()))
        .collect();
    assert!(
        missing.is_empty(),
        "{} acknowledged task(s) missing after the restart: {missing:?}",
        missing.len()
    );
}

#[test]
fn daemon_sigterm_ends_running_tasks_and_a_restart_restores_the_rest() {
    let mut d = Daemon::start();
    let mark = unique("sigterm");
    let command = |requeue: bool| {
        let mut s = spec(10.0, 1.0, 600.0, 1.0);
        s.command = vec!["/bin/sh".into(), "-c".into(), "sleep 100; true".into()];
        s.env.insert("E2E_MARK".into(), mark.clone());
        s.requeue = requeue;
        s
    };
    let simulated = |requeue: bool| {
        let mut s = spec(1e6, 1.0, 600.0, 1.0);
        s.requeue = requeue;
        s
    };
    // Four running (fifo fills the four devices in order), one waiting.
    let ids: Vec<String> = [
        command(false),
        command(true),
        simulated(false),
        simulated(true),
        spec(10.0, 1.0, 600.0, 1.0),
    ]
    .iter()
    .map(|s| d.submit(s).expect("Submit"))
    .collect();
    assert_eq!(ids, ["t1", "t2", "t3", "t4", "t5"]);
    for id in &ids[..4] {
        d.wait_state(id, TaskStatus::Running, Duration::from_secs(10));
    }
    wait_for(
        "both commands' shells and sleeps",
        Duration::from_secs(10),
        || (processes_with_env("E2E_MARK", &mark).len() == 4).then_some(()),
    );

    let asked = Instant::now();
    let status = d.terminate();
    let took = asked.elapsed();
    assert!(status.success(), "exit {status}; stderr:\n{}", d.stderr());
    eprintln!("gpu-agentd stopped {took:?} after SIGTERM");
    wait_for("the commands to be gone", Duration::from_secs(5), || {
        processes_with_env("E2E_MARK", &mark)
            .is_empty()
            .then_some(())
    });

    d.restart();
    let stopped = "gpu-agentd stopped while it ran";
    for id in ["t1", "t3"] {
        let t = d.task(id);
        assert_eq!(
            (t.state, t.reason.as_deref()),
            (TaskStatus::Failed, Some(stopped)),
            "{t:?}"
        );
    }
    // The requeue tasks run again, from the start; the waiting one runs.
    d.wait_state("t5", TaskStatus::Succeeded, Duration::from_secs(10));
    for id in ["t2", "t4"] {
        let t = d.wait_state(id, TaskStatus::Running, Duration::from_secs(10));
        assert_eq!(
            (t.reason, t.exit_code, t.finished),
            (None, None, None),
            "{id}"
        );
    }
    wait_for(
        "the requeued command to run again",
        Duration::from_secs(10),
        || (processes_with_env("E2E_MARK", &mark).len() == 2).then_some(()),
    );
}

/// SIGTERM must not leave a task's processes running (unless
/// `keep_tasks_on_stop` says so), even those that ignore SIGTERM: the daemon
/// marks the task failed, so nothing would ever end them.
#[test]
fn daemon_sigterm_leaves_no_task_process_behind() {
    let mut d = crate::daemon_exec::short_grace();
    let mark = unique("stop-stubborn");
    let _reap = crate::daemon::Reap(mark.clone());
    let id = crate::daemon_exec::submit_stubborn(&d, &mark);
    let status = d.terminate();
    assert!(status.success(), "exit {status}; stderr:\n{}", d.stderr());
    wait_for(
        "the task's processes to be gone once the daemon has stopped",
        Duration::from_secs(5),
        || {
            processes_with_env("E2E_MARK", &mark)
                .is_empty()
                .then_some(())
        },
    );
    d.restart();
    let t = d.task(&id);
    assert_eq!(
        (t.state, t.reason.as_deref()),
        (TaskStatus::Failed, Some("gpu-agentd stopped while it ran")),
        "{t:?}"
    );
}

/// After a kill -9 the task's processes live on (they lead their own process
/// groups). A restarted daemon must not run a `requeue` task a second time
/// while its first run still holds the GPU, nor count the GPU of a `lost`
/// one as free: the old processes must be gone.
#[test]
fn daemon_kill_9_then_restart_never_runs_a_command_twice() {
    let mut d = Daemon::start();
    let mark = unique("k9-command");
    let _reap = crate::daemon::Reap(mark.clone());
    let mut s = spec(10.0, 1.0, 600.0, 1.0);
    s.command = vec!["/bin/sh".into(), "-c".into(), "sleep 100; true".into()];
    s.env.insert("E2E_MARK".into(), mark.clone());
    s.requeue = true;
    let id = d.submit(&s).expect("Submit");
    d.wait_state(&id, TaskStatus::Running, Duration::from_secs(10));
    let first = wait_for(
        "the first run's shell and sleep",
        Duration::from_secs(10),
        || {
            let pids = processes_with_env("E2E_MARK", &mark);
            (pids.len() == 2).then_some(pids)
        },
    );

    d.kill9();
    d.restart();
    let t = d.wait_state(&id, TaskStatus::Running, Duration::from_secs(10));
    assert_eq!(t.state, TaskStatus::Running);
    wait_for(
        "the first run to be gone and the second to run alone",
        Duration::from_secs(5),
        || {
            let pids = processes_with_env("E2E_MARK", &mark);
            (pids.len() == 2 && pids.iter().all(|p| !first.contains(p))).then_some(())
        },
    );
}

/// A `Submit` whose reply is lost (kill -9 after the store, before the
/// reply) is retried with the same client token: the same id, one task.
#[test]
fn daemon_retried_submit_with_a_client_token_is_one_task() {
    use std::os::unix::process::ExitStatusExt;
    let mut d = Daemon::start_with(Settings {
        env: vec![("GPU_AGENT_TEST_KILL_AFTER_STORE".into(), "crash-me".into())],
        ..Settings::default()
    });
    let mut first = spec(1e6, 1.0, 60.0, 1.0);
    first.name = "crash-me".into();
    first.client_token = "retry-7".into();
    let lost = d.submit(&first);
    assert!(lost.is_err(), "the reply was lost: {lost:?}");
    assert_eq!(d.wait_exit().signal(), Some(9), "killed by the hook");
    d.restart();
    let stored: Vec<TaskInfo> = d.tasks();
    assert_eq!(stored.len(), 1, "the task was stored before the crash");
    // The retry (the hook does not fire: nothing new is stored) answers
    // the stored task's id.
    let id = d.submit(&first).expect("the retry is answered");
    assert_eq!(id, stored[0].id);
    assert_eq!(d.submit(&first).expect("and again"), id);
    assert_eq!(d.tasks().len(), 1, "one task");
    // The same token with another spec is refused; another token is a new task.
    let mut other = first.clone();
    other.workload = 2e6;
    let (name, message) = crate::daemon::dbus_error(d.block_on(d.proxy().submit(other.to_dict())));
    assert_eq!(name, "org.gpuagent.Agent1.Error.InvalidArgument");
    assert_eq!(
        message,
        format!(
            "key \"client_token\": already used for task {id} with another spec; \
             a new task needs a new token"
        )
    );
    let mut second = spec(1.0, 1.0, 60.0, 1.0);
    second.client_token = "retry-8".into();
    assert_ne!(d.submit(&second).expect("a new token"), id);
    assert_eq!(d.tasks().len(), 2);
}

/// `gpuctl submit` sends a token of its own and retries a lost reply while
/// the daemon restarts: it prints the one stored task's id.
#[test]
fn daemon_gpuctl_submit_retries_a_lost_reply() {
    use std::os::unix::process::ExitStatusExt;
    let mut d = Daemon::start_with(Settings {
        env: vec![("GPU_AGENT_TEST_KILL_AFTER_STORE".into(), "crash-me".into())],
        ..Settings::default()
    });
    let client = std::process::Command::new(crate::harness::artefacts().join("gpuctl"))
        .args(["submit", "--session", "--workload", "1e6", "--mem", "1"])
        .args(["--deadline", "60", "--weight", "1", "--name", "crash-me"])
        .env("DBUS_SESSION_BUS_ADDRESS", d.address())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("gpuctl starts");
    assert_eq!(d.wait_exit().signal(), Some(9), "killed by the hook");
    d.restart();
    let out = client.wait_with_output().expect("gpuctl ends");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(
        stderr.contains("the reply to Submit was lost") && stderr.contains("same client token"),
        "{stderr}"
    );
    let tasks = d.tasks();
    assert_eq!(tasks.len(), 1, "one task");
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), tasks[0].id);
    assert_eq!(tasks[0].spec.client_token.len(), 32);
}

/// A panic in the engine thread ends the daemon with status 70, saying why,
/// so that systemd (`Restart=on-failure`) starts it again from the store;
/// before, it lived on answering every call "stopping".
#[test]
fn daemon_engine_panic_exits_non_zero_and_a_restart_serves_again() {
    let mut d = Daemon::start_with(Settings {
        env: vec![("GPU_AGENT_TEST_PANIC_ON".into(), "boom".into())],
        ..Settings::default()
    });
    let kept = d.submit(&spec(1e6, 1.0, 1e9, 1.0)).expect("Submit");
    let mut boom = spec(1.0, 1.0, 60.0, 1.0);
    boom.name = "boom".into();
    assert!(d.submit(&boom).is_err(), "no answer from a panicked engine");
    assert_eq!(d.wait_exit().code(), Some(70));
    let stderr = d.stderr();
    assert!(
        stderr
            .contains("the engine thread panicked (test hook: the engine panics on task \"boom\")"),
        "{stderr}"
    );
    d.restart();
    assert_eq!(d.task(&kept).id, kept);
    let id = d
        .submit(&spec(1.0, 1.0, 60.0, 1.0))
        .expect("a Submit is served again");
    d.wait_state(&id, TaskStatus::Succeeded, Duration::from_secs(30));
}
