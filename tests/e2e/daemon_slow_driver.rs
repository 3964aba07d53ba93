//! A slow driver call costs its GPU, not the daemon: a MIG mode change whose
//! GPU reset takes a minute runs off the engine thread, which keeps
//! answering (and starting tasks on the other GPUs) meanwhile, and a stop
//! does not wait for it.

use std::collections::HashMap;
use std::time::Duration;

use gpu_agent_dbus::TaskStatus;

use crate::daemon::{gpuctl, spec, wait_for, Daemon};

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
