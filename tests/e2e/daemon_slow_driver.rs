//! A slow driver call costs its GPU, not the daemon: a MIG mode change whose
//! GPU reset takes a minute, or a clock lock that takes an hour, runs off
//! the engine thread, which keeps answering (and starting tasks on the
//! other GPUs) meanwhile, and a stop does not wait for it.

use std::collections::HashMap;
use std::time::Duration;

use gpu_agent_dbus::TaskStatus;

use crate::daemon::{gpuctl, spec, wait_for, Daemon};
use crate::harness::{artefacts, success, EDL};

const LIMIT: Duration = Duration::from_secs(30);

/// GPU 0 (an A100, MIG off) split in two: a mode change, so a GPU reset.
const SPLIT_0: &str = "version: v1\nmig-configs:\n  a:\n    - devices: [0]\n      \
                       mig-enabled: true\n      mig-devices: {\"3g.20gb\": 2}\n";

#[test]
fn daemon_slow_gpu_reset_runs_off_the_engine_thread() {
    let mut d = Daemon::start();
    let inject = gpuctl(&d, &["mock", "inject", "0", "slow", "reset_gpu", "60"]);
    assert!(inject.status.success(), "{inject:?}");
    let proxy = d.proxy();
    let changing = d
        .block_on(proxy.apply_mig_config(SPLIT_0, "", HashMap::new()))
        .expect("ApplyMigConfig");
    assert_eq!(changing, [0]);
    wait_for("GPU 0 applying", LIMIT, || {
        (d.mig_layout(0).state == "applying").then_some(())
    });

    // During the reset, the engine answers and runs tasks on GPUs 1 to 3.
    let ids: Vec<String> = (0..6)
        .map(|_| d.submit(&spec(1.0, 1.0, 1e6, 1.0)).expect("Submit"))
        .collect();
    for id in &ids {
        let task = d.wait_state(id, TaskStatus::Succeeded, LIMIT);
        assert!(!task.devices.contains(&0), "{id} ran on {:?}", task.devices);
    }
    let counts = d.block_on(proxy.count_tasks()).expect("CountTasks");
    assert_eq!(counts.get("succeeded"), Some(&6), "{counts:?}");
    let l = d.mig_layout(0);
    assert_eq!(
        (l.state.as_str(), l.enabled),
        ("applying", false),
        "the reset is still under way: {}",
        l.message
    );

    // A stop does not wait for the reset (the harness allows 10 s): the
    // change is stored as applying, for the next start to make.
    assert!(d.terminate().success(), "{}", d.stderr());
}

#[test]
fn daemon_slow_clock_lock_runs_off_the_engine_thread() {
    let mut d = Daemon::start();
    std::fs::copy(artefacts().join(EDL), d.plugin_dir().join(EDL)).expect("copy edl");
    success(&gpuctl(&d, &["reload"]));
    success(&gpuctl(&d, &["policy", "use", "edl"]));
    let inject = gpuctl(
        &d,
        &["mock", "inject", "0", "slow", "lock_core_clocks", "3600"],
    );
    assert!(inject.status.success(), "{inject:?}");

    // edl runs it on GPU 0 at clocks of its own: its lock takes an hour,
    // and its run starts only once its clocks are locked. Its Submit is
    // answered all the same (busctl waits 25 s; an engine that locked the
    // clocks itself would answer an hour later).
    let reply = d.call(
        "Submit",
        &[
            "a{sv}", "4", "workload", "d", "1e6", "mem_gb", "d", "1", "deadline", "d", "1e7",
            "weight", "d", "1",
        ],
    );
    let slow = reply[0].as_str().expect("a task id").to_string();
    let task = d.wait_state(&slow, TaskStatus::Running, LIMIT);
    assert_eq!(task.devices, [0]);
    assert!(task.clocks.is_some(), "{task:?}");

    // Meanwhile the engine answers, and runs tasks on GPUs 1 to 3.
    let other = spec(1.0, 1.0, 1e6, 1.0);
    let ids: Vec<String> = (0..3).map(|_| d.submit(&other).expect("Submit")).collect();
    for id in &ids {
        let task = d.wait_state(id, TaskStatus::Succeeded, LIMIT);
        assert!(!task.devices.contains(&0), "{id} ran on {:?}", task.devices);
    }
    let proxy = d.proxy();
    let counts = d.block_on(proxy.count_tasks()).expect("CountTasks");
    assert_eq!(
        (counts.get("succeeded"), counts.get("running")),
        (Some(&3), Some(&1)),
        "{counts:?}"
    );
    assert_eq!(d.task(&slow).state, TaskStatus::Running);

    // A stop does not wait for the lock (the harness allows 10 s); GPU 0's
    // clocks stay recorded, and the next start restores them.
    assert!(d.terminate().success(), "{}", d.stderr());
    assert!(
        d.stderr()
            .contains("GPU 0: a clock call has not returned 5 s into the stop"),
        "{}",
        d.stderr()
    );
    let before = d.stderr().len();
    d.restart();
    wait_for("the restore in the log", LIMIT, || {
        d.stderr()[before..]
            .contains("restoring GPU 0 locked_core_clocks")
            .then_some(())
    });
    assert!(d.terminate().success(), "{}", d.stderr());
}
