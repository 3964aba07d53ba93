//! `edl` on the daemon (issue 13 item 6): a modelled task runs at the clocks
//! Algorithm 1 chose, locked through the mock backend; the clocks go back to
//! default when it ends; the energy the mock measures matches the DVFS model
//! (the simulator's prediction) within 2%; a kill -9 while a task runs at
//! non-default clocks leaves a record that the next start restores. (The
//! mock lives in the daemon's process, so a restarted daemon's GPUs start
//! unlocked anyway; the log shows that the restore ran, as it must on real
//! GPUs, which keep their locks.)

use std::time::Duration;

use gpu_agent_dbus::{TaskInfo, TaskStatus};

use crate::daemon::{gpuctl, spec, wait_for, Daemon};
use crate::harness::{artefacts, success, EDL};

const LIMIT: Duration = Duration::from_secs(30);

/// A daemon on the example host (two A100s, a V100, a T4) running `edl`,
/// installed after the start and selected as an admin.
fn edl_daemon() -> Daemon {
    let d = Daemon::start();
    std::fs::copy(artefacts().join(EDL), d.plugin_dir().join(EDL)).expect("copy edl");
    success(&gpuctl(&d, &["reload"]));
    success(&gpuctl(&d, &["policy", "use", "edl"]));
    d
}

/// GPU `gpu`'s core clock as `gpuctl devices --json` shows it.
fn core_clock(d: &Daemon, gpu: usize) -> u64 {
    let out = success(&gpuctl(d, &["devices", "--json"]));
    let devices: serde_json::Value = serde_json::from_str(&out).expect("devices JSON");
    devices[gpu]["core_clock_mhz"]
        .as_u64()
        .expect("core_clock_mhz")
}

fn running(d: &Daemon, id: &str) -> TaskInfo {
    d.wait_state(id, TaskStatus::Running, LIMIT)
}

#[test]
fn daemon_edl_runs_a_task_at_its_clocks_and_measures_the_modelled_energy() {
    let d = edl_daemon();
    // An idle, unlocked A100 shows its lowest clock.
    let idle = core_clock(&d, 0);
    // 300 work units on an A100 (speed 1): 300 s at default clocks, 3 s of
    // wall time at the fixture's 100x.
    let id = d.submit(&spec(300.0, 1.0, 3600.0, 1.0)).expect("Submit");
    let task = running(&d, &id);
    assert_eq!(task.devices, [0]);
    let clocks = task.clocks.clone().expect("the clocks it runs at");
    assert!(clocks.core_mhz < 1095, "{clocks:?}");
    assert_eq!(clocks.mem_mhz, 1215);
    assert_eq!(clocks.class.as_deref(), Some("energy"));
    // The A100 shows the locked clock while the task runs.
    wait_for("the locked core clock", LIMIT, || {
        (core_clock(&d, 0) == u64::from(clocks.core_mhz)).then_some(())
    });
    let done = d.wait_state(&id, TaskStatus::Succeeded, LIMIT);
    // Unlocked once it ended: idle again at its lowest clock.
    wait_for("the lock undone", LIMIT, || {
        (core_clock(&d, 0) == idle).then_some(())
    });
    // The mock integrates the app's power at the clocks set over the run:
    // the model's P̂·t̂ within 2% (the run's wall-clock end is late by the
    // daemon's reaction time only).
    let predicted = clocks.p * clocks.t;
    let measured = done.energy_j.expect("measured energy");
    assert!(
        (measured / predicted - 1.0).abs() < 0.02,
        "measured {measured} J, predicted {predicted} J"
    );
    // Metrics: the run at default clocks would have cost more.
    let out = success(&gpuctl(&d, &["metrics", "--json"]));
    let m: serde_json::Value = serde_json::from_str(&out).expect("metrics JSON");
    let f = |k: &str| m[k].as_f64().unwrap_or_else(|| panic!("{k} in {m}"));
    assert!(f("energy_baseline_j") > f("energy_j"), "{m}");
    assert!(f("energy_saving") > 0.0, "{m}");
    assert!((f("energy_run_j") + f("energy_idle_j") - f("energy_j")).abs() < 1e-6 * f("energy_j"));
}

#[test]
fn daemon_edl_clocks_set_before_a_kill_9_are_restored_at_the_next_start() {
    let mut d = edl_daemon();
    let idle = core_clock(&d, 0);
    // Hours of work: it runs through the kill.
    let id = d.submit(&spec(1e6, 1.0, 1e7, 1.0)).expect("Submit");
    let clocks = running(&d, &id).clocks.expect("clocks");
    assert!(clocks.core_mhz < 1095, "{clocks:?}");
    wait_for("the locked core clock", LIMIT, || {
        (core_clock(&d, 0) == u64::from(clocks.core_mhz)).then_some(())
    });
    d.kill9();
    d.restart();
    // The record of the lock made before the kill is restored first.
    wait_for("the restore in the log", LIMIT, || {
        d.stderr()
            .contains("restoring GPU 0 locked_core_clocks")
            .then_some(())
    });
    // The A100 has one memory clock: only the core clock was locked, and
    // only what was changed is restored.
    assert!(
        !d.stderr().contains("locked_memory_clocks"),
        "{}",
        d.stderr()
    );
    // The task came back lost (no requeue) and the GPU is idle, unlocked.
    assert_eq!(
        d.wait_state(&id, TaskStatus::Lost, LIMIT).state,
        TaskStatus::Lost
    );
    wait_for("an idle, unlocked GPU", LIMIT, || {
        (core_clock(&d, 0) == idle).then_some(())
    });
}
