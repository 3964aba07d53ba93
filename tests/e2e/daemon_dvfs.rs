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

use crate::daemon::{gpuctl, spec, wait_for, Daemon, Settings};
use crate::harness::{artefacts, success, EDL};

const LIMIT: Duration = Duration::from_secs(30);

/// A daemon on the example host (two A100s, a V100, a T4) running `edl`,
/// installed after the start and selected as an admin.
fn edl_daemon() -> Daemon {
    edl_daemon_with(Settings::default())
}

/// A daemon started with `settings` running `edl`, as [`edl_daemon`]'s.
pub(crate) fn edl_daemon_with(settings: Settings) -> Daemon {
    let d = Daemon::start_with(settings);
    std::fs::copy(artefacts().join(EDL), d.plugin_dir().join(EDL)).expect("copy edl");
    success(&gpuctl(&d, &["reload"]));
    success(&gpuctl(&d, &["policy", "use", "edl"]));
    d
}

/// GPU `gpu`'s core clock as `gpuctl devices --json` shows it.
pub(crate) fn core_clock(d: &Daemon, gpu: usize) -> u64 {
    let out = success(&gpuctl(d, &["devices", "--json"]));
    let devices: serde_json::Value = serde_json::from_str(&out).expect("devices JSON");
    devices[gpu]["core_clock_mhz"]
        .as_u64()
        .expect("core_clock_mhz")
}

pub(crate) fn running(d: &Daemon, id: &str) -> TaskInfo {
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

/// `idle_clocks = "min"` on the example host under `edl`: each idle GPU's
/// clocks are locked at their lowest (core and memory on the A100s, the
/// core only on the V100 and T4, which cannot lock memory clocks); a task's
/// clocks replace the lock while it runs and the lock returns after it; a
/// drained GPU is unlocked; a stop undoes every lock, and a kill -9 leaves records that the next start
/// restores. (An idle mock GPU reads its lowest clock locked or not, so the
/// log shows the locks.)
#[test]
fn daemon_idle_clocks_min_locks_idle_gpus_and_restores_them_on_stop_and_after_a_kill_9() {
    let mut d = Daemon::start_with(Settings {
        config: Some("idle_clocks = \"min\"\n".into()),
        ..Settings::default()
    });
    std::fs::copy(artefacts().join(EDL), d.plugin_dir().join(EDL)).expect("copy edl");
    success(&gpuctl(&d, &["reload"]));
    success(&gpuctl(&d, &["policy", "use", "edl"]));
    let count = |log: &str, what: &str| log.matches(what).count();
    let locked_0 = "GPU 0 is idle: clocks locked at their lowest";
    let unlocked_0 = "GPU 0: undoing its idle clock lock";
    // The A100's lowest clocks: what the idle GPU shows, and what it is locked at.
    let lowest = core_clock(&d, 0);
    let log = d.stderr();
    assert!(
        log.contains(&format!("{locked_0}, core {lowest} MHz, memory 1215 MHz")),
        "{log}"
    );
    assert!(
        log.contains("GPU 1 is idle: clocks locked at their lowest"),
        "{log}"
    );
    for gpu in [2, 3] {
        assert_eq!(
            count(&log, &format!("GPU {gpu} cannot lock its memory clock")),
            1,
            "said once: {log}"
        );
    }
    assert!(!log.contains("cannot lock idle GPU"), "{log}");

    // A task's own clocks replace the lock, and the lock comes back after it.
    let id = d.submit(&spec(300.0, 1.0, 3600.0, 1.0)).expect("Submit");
    let task = running(&d, &id);
    assert_eq!(task.devices, [0]);
    let clocks = task.clocks.clone().expect("the clocks it runs at");
    assert!(u64::from(clocks.core_mhz) > lowest, "{clocks:?}");
    wait_for("the task's core clock", LIMIT, || {
        (core_clock(&d, 0) == u64::from(clocks.core_mhz)).then_some(())
    });
    assert_eq!(count(&d.stderr(), unlocked_0), 1, "{}", d.stderr());
    d.wait_state(&id, TaskStatus::Succeeded, LIMIT);
    wait_for("the idle lock again", LIMIT, || {
        (count(&d.stderr(), locked_0) == 2).then_some(())
    });
    wait_for("the lowest clock again", LIMIT, || {
        (core_clock(&d, 0) == lowest).then_some(())
    });

    // A drained GPU is not locked; back online, it is again.
    let locked_1 = "GPU 1 is idle: clocks locked at their lowest";
    let unlocked_1 = "GPU 1: undoing its idle clock lock";
    success(&gpuctl(&d, &["devices", "offline", "1"]));
    wait_for("GPU 1 unlocked when drained", LIMIT, || {
        (count(&d.stderr(), unlocked_1) == 1).then_some(())
    });
    assert_eq!(count(&d.stderr(), locked_1), 1, "{}", d.stderr());
    success(&gpuctl(&d, &["devices", "online", "1"]));
    wait_for("GPU 1 locked when back online", LIMIT, || {
        (count(&d.stderr(), locked_1) == 2).then_some(())
    });

    // A stop undoes every lock: the next start has nothing to restore.
    assert!(d.terminate().success(), "{}", d.stderr());
    let log = d.stderr();
    assert_eq!(count(&log, unlocked_0), 2, "{log}");
    assert_eq!(count(&log, unlocked_1), 2, "{log}");
    for gpu in 2..4 {
        assert_eq!(
            count(&log, &format!("GPU {gpu}: undoing its idle clock lock")),
            1,
            "{log}"
        );
    }
    let before = d.stderr().len();
    d.restart();
    wait_for("the idle lock after the restart", LIMIT, || {
        d.stderr()[before..].contains(locked_0).then_some(())
    });
    let log = d.stderr()[before..].to_string();
    assert!(!log.contains("restoring GPU"), "{log}");

    // A kill -9 leaves the locks recorded; the next start restores each
    // control, then locks the idle GPUs again.
    d.kill9();
    let before = d.stderr().len();
    d.restart();
    wait_for("the idle lock after the restore", LIMIT, || {
        d.stderr()[before..].contains(locked_0).then_some(())
    });
    let log = d.stderr()[before..].to_string();
    for gpu in 0..4 {
        for control in ["locked_core_clocks", "locked_memory_clocks"] {
            let restored = format!(
                "restoring GPU {gpu} {control} (set by a previous run: lowest clocks while idle)"
            );
            assert!(log.contains(&restored), "{restored}: {log}");
        }
    }
    assert!(
        log.find("restoring GPU 0 locked_core_clocks") < log.find(locked_0),
        "restored before locked again: {log}"
    );

    // A reload to "default" undoes the locks at once.
    let config = d.config_file();
    std::fs::write(&config, "idle_clocks = \"default\"\n").expect("write agent.toml");
    success(&gpuctl(&d, &["reload"]));
    wait_for("the locks undone by the reload", LIMIT, || {
        d.stderr()[before..].contains(unlocked_0).then_some(())
    });
    assert!(
        d.stderr().contains("idle_clocks default;"),
        "{}",
        d.stderr()
    );
}
