//! The daemon on its NVML backend, the code that runs on real GPUs, through
//! the stand-in driver library (tests/nvml-stand-in) instead of `--mock`:
//! the GPUs are the example host's, and what the stand-in keeps for the next
//! process ([`Daemon::nvml_state`]) is what a driver would still hold.

use std::time::Duration;

use gpu_agent_dbus::{Dict, TaskStatus};

use crate::daemon::{spec, wait_for, Daemon, Settings};
use crate::daemon_dvfs::{core_clock, edl_daemon_with, running};
use crate::daemon_health::{requeued, wait_health};
use crate::daemon_mig_apply::{apply, instances, settled};

const LIMIT: Duration = Duration::from_secs(30);

/// A daemon on the NVML backend and the example host.
fn nvml() -> Settings {
    Settings {
        nvml: true,
        ..Settings::default()
    }
}

/// Whether the stand-in holds a core clock lock on `gpu`.
fn core_locked(d: &Daemon, gpu: u32) -> bool {
    d.nvml_state()
        .lines()
        .any(|l| l.starts_with(&format!("{gpu} core ")))
}

#[test]
fn daemon_nvml_edl_locks_a_tasks_clocks_and_resets_them_at_its_end_at_stop_and_after_a_kill_9() {
    let mut d = edl_daemon_with(nvml());
    let idle = core_clock(&d, 0);
    assert!(!core_locked(&d, 0), "{}", d.nvml_state());

    // Locked while it runs (read back through nvmlDeviceGetClockInfo), reset
    // at its end.
    let id = d.submit(&spec(300.0, 1.0, 3600.0, 1.0)).expect("Submit");
    let clocks = running(&d, &id).clocks.expect("the clocks it runs at");
    assert!(clocks.core_mhz < 1095, "{clocks:?}");
    wait_for("the locked core clock", LIMIT, || {
        (core_clock(&d, 0) == u64::from(clocks.core_mhz)).then_some(())
    });
    assert!(
        d.nvml_state()
            .contains(&format!("0 core {0} {0}\n", clocks.core_mhz)),
        "{}",
        d.nvml_state()
    );
    d.wait_state(&id, TaskStatus::Succeeded, LIMIT);
    wait_for("the lock undone", LIMIT, || {
        (core_clock(&d, 0) == idle && !core_locked(&d, 0)).then_some(())
    });

    // Reset at a stop.
    let id = d.submit(&spec(1e6, 1.0, 1e7, 1.0)).expect("Submit");
    running(&d, &id);
    wait_for("the lock", LIMIT, || core_locked(&d, 0).then_some(()));
    assert!(d.terminate().success(), "{}", d.stderr());
    assert!(!core_locked(&d, 0), "{}", d.nvml_state());

    // After a kill -9 the driver still holds the lock: the next start
    // undoes it.
    d.restart();
    let id = d.submit(&spec(1e6, 1.0, 1e7, 1.0)).expect("Submit");
    running(&d, &id);
    wait_for("the lock", LIMIT, || core_locked(&d, 0).then_some(()));
    d.kill9();
    assert!(core_locked(&d, 0), "kept: {}", d.nvml_state());
    d.restart();
    wait_for("the lock undone by the next start", LIMIT, || {
        (!core_locked(&d, 0) && core_clock(&d, 0) == idle).then_some(())
    });
}

#[test]
fn daemon_nvml_idle_clocks_min_locks_idle_gpus_and_a_stop_unlocks_them() {
    let mut d = edl_daemon_with(Settings {
        config: Some("idle_clocks = \"min\"\n".into()),
        ..nvml()
    });
    // The A100s lock core and memory at their lowest, the V100 and T4 their
    // core only (NVML refuses them memory locks).
    wait_for("every idle GPU locked", LIMIT, || {
        let state = d.nvml_state();
        [
            "0 core 210 210",
            "0 memory 1215 1215",
            "1 core 210 210",
            "2 core",
            "3 core",
        ]
        .iter()
        .all(|l| state.contains(l))
        .then_some(())
    });
    let state = d.nvml_state();
    assert!(
        !state.contains("2 memory") && !state.contains("3 memory"),
        "{state}"
    );
    assert_eq!(core_clock(&d, 0), 210);
    assert!(d.terminate().success(), "{}", d.stderr());
    let state = d.nvml_state();
    assert!(
        !state.contains("core") && !state.contains("memory"),
        "{state}"
    );
}

#[test]
fn daemon_nvml_a_clock_lock_refused_leaves_the_task_at_default_clocks_with_one_log_line() {
    let d = edl_daemon_with(nvml());
    d.nvml_control("fail nvmlDeviceSetGpuLockedClocks 4 always");
    let id = d.submit(&spec(1e6, 1.0, 1e7, 1.0)).expect("Submit");
    let task = running(&d, &id);
    assert_eq!(task.devices, [0]);
    let refused = "cannot lock GPU 0's core clock";
    wait_for("the refusal logged", LIMIT, || {
        d.stderr().contains(refused).then_some(())
    });
    assert_eq!(d.stderr().matches(refused).count(), 1, "{}", d.stderr());
    assert!(
        d.stderr()
            .contains("nvmlDeviceSetGpuLockedClocks: permission denied"),
        "{}",
        d.stderr()
    );
    assert!(!core_locked(&d, 0), "{}", d.nvml_state());
    assert_eq!(d.task(&id).state, TaskStatus::Running);
}

/// An A100-40GB alone, MIG off.
const A100: &str = "[[gpu]]\nmodel = \"A100-SXM4-40GB\"\nspeed = 7\n";

/// A v1 file whose configuration `plan` puts `devices` (mig-devices' text)
/// on GPU 0.
fn plan(devices: &str) -> String {
    format!(
        "version: v1\nmig-configs:\n  plan:\n    - devices: [0]\n      mig-enabled: true\n      \
         mig-devices: {{{devices}}}\n"
    )
}

/// Every maximal A100-40GB configuration over profiles 19, 14, 9, 5, 0 (the
/// 14 of the daemon's `every_maximal_a100_layout_places_on_the_mock_and_asserts`)
/// applies through `ApplyMigConfig` on the NVML path, one after another, and
/// asserts true; a task then runs on an instance with its `MIG-` UUID; a GPU
/// instance create refused mid-layout rolls the GPU back to the layout before.
#[test]
fn daemon_nvml_every_maximal_a100_configuration_applies_and_a_failed_create_rolls_back() {
    use gpu_agent_core::mig::A100_40GB;
    use gpu_agent_core::placement::Tree;
    let d = Daemon::start_with(Settings {
        host: Some(A100.into()),
        ..nvml()
    });
    let profiles: Vec<_> = [19, 14, 9, 5, 0]
        .iter()
        .map(|&id| A100_40GB.profile(id).unwrap())
        .collect();
    let configurations = Tree::new(&A100_40GB, &profiles).configurations();
    assert_eq!(configurations.len(), 14);
    for c in &configurations {
        let mut counts: std::collections::BTreeMap<&str, u32> = Default::default();
        for p in c.profiles() {
            *counts.entry(p.name).or_default() += 1;
        }
        let devices: Vec<String> = counts
            .iter()
            .map(|(p, n)| format!("\"{p}\": {n}"))
            .collect();
        let yaml = plan(&devices.join(", "));
        assert_eq!(apply(&d, &yaml, Dict::new()).expect("ApplyMigConfig"), [0]);
        let l = settled(&d, 0);
        assert_eq!(l.state, "stable", "{yaml}{}", l.message);
        let proxy = d.proxy();
        let asserted = d
            .block_on(async move { proxy.assert_mig_config(&yaml, "plan").await })
            .expect("AssertMigConfig");
        assert_eq!(asserted, (true, vec![]), "{counts:?}");
    }

    // One 3g.20gb (no maximal layout): a task runs on it, with its MIG- UUID.
    assert_eq!(
        apply(&d, &plan("\"3g.20gb\": 1"), Dict::new()).unwrap(),
        [0]
    );
    let before = settled(&d, 0);
    assert_eq!(instances(&before), ["3g.20gb@0"]);
    let mut s = spec(6.0, 1.0, 600.0, 1.0);
    s.command = vec![
        "/bin/sh".into(),
        "-c".into(),
        "echo \"cvd=$CUDA_VISIBLE_DEVICES\"".into(),
    ];
    let id = d.submit(&s).expect("Submit");
    d.wait_state(&id, TaskStatus::Succeeded, LIMIT);
    let log = std::fs::read_to_string(d.state_dir().join("logs").join(format!("{id}.log")))
        .expect("the task's log");
    assert!(log.starts_with("cvd=MIG-"), "{log}");

    // The third of seven 1g.5gb is refused: the GPU goes back to its 3g.20gb.
    d.nvml_control("fail nvmlDeviceCreateGpuInstanceWithPlacement 23 after 2");
    assert_eq!(apply(&d, &plan("\"1g.5gb\": 7"), Dict::new()).unwrap(), [0]);
    let after = settled(&d, 0);
    assert_eq!(after.state, "failed", "{}", after.message);
    assert!(
        after.message.contains("NVML_ERROR_INSUFFICIENT_RESOURCES"),
        "{}",
        after.message
    );
    assert_eq!(instances(&after), instances(&before));
}

/// A lost GPU fails its task (no requeue asked) and goes offline; an XID 79
/// takes its GPU offline and its task (requeue asked) runs again elsewhere;
/// an application's XID leaves its GPU online.
#[test]
fn daemon_nvml_a_lost_gpu_and_xid_79_take_their_gpus_offline() {
    let d = Daemon::start_with(nvml());
    let a = d.submit(&spec(1e5, 1.0, 1e7, 1.0)).expect("Submit a");
    let b = d.submit(&requeued(400.0)).expect("Submit b");
    for id in [&a, &b] {
        d.wait_state(id, TaskStatus::Running, LIMIT);
    }
    assert_eq!(d.task(&a).devices, [0]);
    assert_eq!(d.task(&b).devices, [1]);

    d.nvml_control("lost 0");
    let failed = d.wait_state(&a, TaskStatus::Failed, LIMIT);
    assert_eq!(failed.reason.as_deref(), Some("GPU 0 went offline (lost)"));
    wait_health(&d, 0, false, "lost");

    d.nvml_control("xid 1 79");
    wait_health(&d, 1, false, "xid 79: GPU has fallen off the bus");
    let done = d.wait_state(&b, TaskStatus::Succeeded, LIMIT);
    assert!(done.devices.iter().all(|&g| g >= 2), "{:?}", done.devices);

    d.nvml_control("xid 2 13");
    wait_for("xid 13 logged", LIMIT, || {
        d.stderr().contains("GPU 2: xid 13").then_some(())
    });
    wait_health(&d, 2, true, "ok");
}

/// A MIG mode change whose NVML call takes a minute runs off the engine
/// thread: the daemon answers and runs tasks on the other GPUs meanwhile,
/// and a stop does not wait for it.
#[test]
fn daemon_nvml_a_mig_call_taking_a_minute_does_not_stop_the_daemon() {
    let mut d = Daemon::start_with(nvml());
    d.nvml_control("delay nvmlDeviceSetMigMode 60");
    assert_eq!(
        apply(&d, &plan("\"3g.20gb\": 2"), Dict::new()).unwrap(),
        [0]
    );
    wait_for("GPU 0 applying", LIMIT, || {
        (d.mig_layout(0).state == "applying").then_some(())
    });
    let ids: Vec<String> = (0..6)
        .map(|_| d.submit(&spec(1.0, 1.0, 1e6, 1.0)).expect("Submit"))
        .collect();
    for id in &ids {
        let task = d.wait_state(id, TaskStatus::Succeeded, LIMIT);
        assert!(!task.devices.contains(&0), "{id} ran on {:?}", task.devices);
    }
    let l = d.mig_layout(0);
    assert_eq!(
        (l.state.as_str(), l.enabled),
        ("applying", false),
        "{}",
        l.message
    );
    assert!(d.terminate().success(), "{}", d.stderr());
}

/// A clock reset taking a minute (`nvmlDeviceResetGpuLockedClocks`) runs on
/// its GPU's clock worker: the daemon answers meanwhile, a stop does not wait
/// for it, and the lock it left is undone by the next start.
#[test]
fn daemon_nvml_a_clock_reset_taking_a_minute_does_not_stop_the_daemon() {
    let mut d = edl_daemon_with(nvml());
    d.nvml_control("delay nvmlDeviceResetGpuLockedClocks 60");
    let id = d.submit(&spec(300.0, 1.0, 3600.0, 1.0)).expect("Submit");
    running(&d, &id);
    wait_for("the lock", LIMIT, || core_locked(&d, 0).then_some(()));
    // Its end sends the reset, which hangs in the driver.
    d.wait_state(&id, TaskStatus::Succeeded, LIMIT);
    let other = d.submit(&spec(1.0, 1.0, 1e6, 1.0)).expect("Submit");
    assert_eq!(d.task(&other).id, other);
    assert!(d.terminate().success(), "{}", d.stderr());
    assert!(
        core_locked(&d, 0),
        "the reset never returned: {}",
        d.nvml_state()
    );
    d.nvml_control("clear");
    d.restart();
    wait_for("the lock undone by the next start", LIMIT, || {
        (!core_locked(&d, 0)).then_some(())
    });
}

/// A caller without the capability the driver checks (`deny-writes`: every
/// write NO_PERMISSION): a MIG change fails naming the refusal, and the GPU
/// keeps its layout.
#[test]
fn daemon_nvml_a_mig_change_refused_permission_fails_and_changes_nothing() {
    let d = Daemon::start_with(Settings {
        host: Some(A100.into()),
        ..nvml()
    });
    d.nvml_control("deny-writes");
    assert_eq!(
        apply(&d, &plan("\"3g.20gb\": 2"), Dict::new()).unwrap(),
        [0]
    );
    let l = settled(&d, 0);
    assert_eq!(l.state, "failed", "{}", l.message);
    assert!(
        l.message
            .contains("nvmlDeviceSetMigMode: permission denied"),
        "{}",
        l.message
    );
    assert!(!l.enabled && l.instances.is_empty(), "{l:?}");
}

/// While GPU 0's MIG mode change hangs in the driver for a minute, another
/// GPU's MIG layout reads at once: the backend serialises MIG calls per GPU,
/// not across the host.
#[test]
fn daemon_nvml_a_hung_mig_call_on_one_gpu_leaves_another_gpus_layout_readable() {
    let d = Daemon::start_with(Settings {
        host: Some(format!(
            "{A100}[[gpu]]\nmodel = \"A100-SXM4-40GB\"\nspeed = 7\n\
             mig = [\"3g.20gb@0\", \"3g.20gb@4\"]\n"
        )),
        ..nvml()
    });
    d.nvml_control("delay nvmlDeviceSetMigMode 60");
    assert_eq!(
        apply(&d, &plan("\"3g.20gb\": 2"), Dict::new()).unwrap(),
        [0]
    );
    wait_for("GPU 0 applying", LIMIT, || {
        (d.mig_layout(0).state == "applying").then_some(())
    });
    let l = d.mig_layout(1);
    assert_eq!(instances(&l), ["3g.20gb@0", "3g.20gb@4"]);
    // Read before the hung call returned: GPU 0's mode is still off.
    let l = d.mig_layout(0);
    assert_eq!((l.state.as_str(), l.enabled), ("applying", false), "{l:?}");
}
