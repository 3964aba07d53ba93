//! A wrong run-time estimate does not strand a GPU's local queue: a command
//! that runs far past its modelled time gives its queued tasks back to the
//! policy, which runs them on the other GPUs meanwhile.

use std::time::Duration;

use gpu_agent_dbus::TaskStatus;

use crate::daemon::{spec, Daemon};

#[test]
fn daemon_overrun_returns_the_queue_to_other_gpus() {
    // The bundled host: A100 (speed 1), A100 (1), V100 (0.6), T4 (0.25);
    // time scale 100 (a modelled second is 10 ms), fifo (earliest start).
    let d = Daemon::start();
    // a: modelled at 100 s (1 s of wall time), really runs 20 s, on GPU 0.
    let mut a = spec(100.0, 1.0, 1e4, 1.0);
    a.command = vec!["/bin/sleep".into(), "20".into()];
    let a = d.submit(&a).expect("Submit a");
    // GPUs 1..3 busy for 300 modelled s (3 s).
    for workload in [300.0, 180.0, 75.0] {
        d.submit(&spec(workload, 1.0, 1e4, 1.0)).expect("Submit x");
    }
    d.wait_state(&a, TaskStatus::Running, Duration::from_secs(10));
    // Three short tasks: GPU 0 is expected free first, so they queue there.
    let waiting: Vec<String> = (0..3)
        .map(|_| d.submit(&spec(10.0, 1.0, 1e4, 1.0)).expect("Submit"))
        .collect();
    assert!(
        waiting
            .iter()
            .all(|id| d.task(id).state == TaskStatus::Assigned),
        "{:?}",
        d.tasks()
    );
    // a overruns; they run on the other GPUs while it still runs.
    for id in &waiting {
        let done = d.wait_state(id, TaskStatus::Succeeded, Duration::from_secs(15));
        assert_ne!(done.devices, vec![0], "{id} waited for the overrunning GPU");
    }
    assert_eq!(d.task(&a).state, TaskStatus::Running);
    // Said once, though the core checks a again at 2, 4, 8 ... times its
    // estimate (the line came once per check).
    let said = format!("task {a} runs past its expected end");
    assert_eq!(d.stderr().matches(&said).count(), 1, "{}", d.stderr());
    d.block_on(d.proxy().cancel(&a)).expect("Cancel a");
}
