//! MIG layout changes through the real binaries (docs/mig.md §6.2, §6.3):
//! `ApplyMigConfig` on the mock host (GPUs 0 and 1 A100-SXM4-40GB, 2 a V100,
//! 3 a T4) drains a GPU while tasks run and gives it its new layout, or
//! refuses with a named error and changes nothing; `CancelMigChange` and a
//! drain's timeout leave the layout as it was.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use gpu_agent_dbus::{Dict, MigLayout, TaskStatus};
use zbus::zvariant::{OwnedValue, Value};

use crate::daemon::{dbus_error, gpuctl, spec, wait_for, Daemon};
use crate::harness::write;

const LIMIT: Duration = Duration::from_secs(60);

fn options(pairs: &[(&str, Value<'_>)]) -> Dict {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), OwnedValue::try_from(v.clone()).unwrap()))
        .collect::<HashMap<_, _>>()
}

/// A v1 file with one configuration `a` of `entries` (YAML list items).
fn config(entries: &str) -> String {
    format!("version: v1\nmig-configs:\n  a:\n{entries}")
}

const SPLIT_0: &str =
    "    - devices: [0]\n      mig-enabled: true\n      mig-devices: {\"3g.20gb\": 2}\n";

pub(crate) fn apply(d: &Daemon, yaml: &str, opts: Dict) -> zbus::Result<Vec<u32>> {
    let proxy = d.proxy();
    let yaml = yaml.to_string();
    d.block_on(async move { proxy.apply_mig_config(&yaml, "", opts).await })
}

fn export(d: &Daemon) -> String {
    let proxy = d.proxy();
    d.block_on(async move { proxy.export_mig_config("").await })
        .expect("ExportMigConfig")
}

pub(crate) fn instances(l: &MigLayout) -> Vec<String> {
    l.instances
        .iter()
        .map(|i| format!("{}@{}", i.profile, i.start))
        .collect()
}

/// Waits until GPU `gpu`'s change settles; returns its layout.
pub(crate) fn settled(d: &Daemon, gpu: u32) -> MigLayout {
    wait_for(&format!("GPU {gpu}'s MIG change to settle"), LIMIT, || {
        let l = d.mig_layout(gpu);
        (l.state != "draining" && l.state != "applying").then_some(l)
    })
}

#[test]
fn daemon_mig_apply_waits_for_running_tasks_and_new_instances_take_work() {
    let d = Daemon::start();
    // Four long tasks occupy every device, two more wait.
    let ids: Vec<String> = (0..6)
        .map(|_| d.submit(&spec(150.0, 1.0, 1e6, 1.0)).unwrap())
        .collect();
    let first = d.wait_state(&ids[0], TaskStatus::Running, LIMIT);
    assert_eq!(first.devices, vec![0]);
    let began = Instant::now();
    assert_eq!(apply(&d, &config(SPLIT_0), Dict::new()), Ok(vec![0]));
    let draining = d.mig_layout(0);
    assert_eq!(draining.state, "draining");
    assert!(
        draining
            .message
            .contains(&format!("waiting for task(s) {}", ids[0])),
        "{}",
        draining.message
    );
    // A second change while this one drains: Busy.
    let (name, message) = dbus_error(apply(&d, &config(SPLIT_0), Dict::new()));
    assert_eq!(name, "org.gpuagent.Agent1.Error.Busy");
    assert!(
        message.starts_with("GPU 0's MIG layout is already changing (draining)"),
        "{message}"
    );
    let done = settled(&d, 0);
    let took = began.elapsed();
    assert_eq!(done.state, "stable", "{}", done.message);
    assert!(done.enabled);
    assert_eq!(instances(&done), ["3g.20gb@0", "3g.20gb@4"]);
    println!(
        "drain + apply of GPU 0 took {:.3} s on the wall (task of 1.5 s at time scale 100); the daemon says: {}",
        took.as_secs_f64(),
        done.message
    );
    // The task on GPU 0 ran to its end: nothing was interrupted or lost.
    let ended = d.wait_all_ended(LIMIT);
    assert_eq!(ended.len(), 6);
    for t in &ended {
        assert_eq!(t.state, TaskStatus::Succeeded, "{} {:?}", t.id, t.reason);
    }
    // The new instances (flat indices 4 and 5) take tasks: four of 17 GB
    // take GPUs 1 and 2 and both instances (not the T4's 16 GB).
    let ids: Vec<String> = (0..4)
        .map(|_| d.submit(&spec(100.0, 17.0, 1e6, 1.0)).unwrap())
        .collect();
    let mut used: Vec<u32> = ids
        .iter()
        .flat_map(|id| d.wait_state(id, TaskStatus::Succeeded, LIMIT).devices)
        .collect();
    used.sort_unstable();
    used.dedup();
    assert!(used.contains(&4) && used.contains(&5), "{used:?}");
    assert!(!used.contains(&0), "{used:?}");
    // The same configuration again: nothing to change.
    assert_eq!(apply(&d, &config(SPLIT_0), Dict::new()), Ok(vec![]));
}

#[test]
fn daemon_mig_apply_refusals_are_named_and_change_nothing() {
    let d = Daemon::start();
    let before = export(&d);
    let id = d.submit(&spec(1e5, 1.0, 1e6, 1.0)).unwrap();
    let running = d.wait_state(&id, TaskStatus::Running, LIMIT);
    assert_eq!(running.devices, vec![0]);
    let refuse = || options(&[("on_busy", Value::from("refuse"))]);
    let busy = format!("GPU 0 runs task {id} (on_busy = refuse)");
    let cases: Vec<(String, Dict, &str, &str)> = vec![
        (config(SPLIT_0), refuse(), "Busy", &busy),
        (
            config("    - devices: [1]\n      mig-enabled: true\n      mig-devices: {\"3g.40gb\": 1}\n"),
            Dict::new(),
            "InvalidArgument",
            "line 6, column 32: mig-configs.a[0].mig-devices: 3g.40gb is not a profile of A100-SXM4-40GB (GPU 1)",
        ),
        (
            config("    - devices: [1]\n      mig-enabled: true\n      mig-devices: {\"3g.20gb\": 3}\n"),
            Dict::new(),
            "InvalidArgument",
            "mig-devices",
        ),
        (
            config("    - devices: [2]\n      mig-enabled: true\n      mig-devices: {\"1g.5gb\": 1}\n"),
            Dict::new(),
            "NotSupported",
            "line 5, column 20: mig-configs.a[0].mig-enabled: GPU 2 (V100-SXM2-32GB) is not MIG-capable",
        ),
        (
            config("    - devices: [1]\n      mig-enabled: true\n      mig-devices: {}\n"),
            Dict::new(),
            "NotSupported",
            "GPU 1: MIG on with no instance",
        ),
        (
            config("    - devices: [7]\n      mig-enabled: false\n"),
            Dict::new(),
            "NoSuchDevice",
            "GPU 7: no such GPU on this host",
        ),
        (
            "version: v1\nmig-configs:\n  a:\n    - devices: all\n      mig-enabled: tru\n".into(),
            Dict::new(),
            "InvalidArgument",
            "line 5, column 20: mig-configs.a[0].mig-enabled: ",
        ),
        (
            config(SPLIT_0),
            options(&[("on_busy", Value::from("later"))]),
            "InvalidArgument",
            "option on_busy: expected \"wait\" or \"refuse\"",
        ),
        (
            config(SPLIT_0),
            options(&[("retries", Value::from(3u32))]),
            "InvalidArgument",
            "unknown option \"retries\"; ApplyMigConfig takes on_busy, timeout_s, reject_stranded and enable_without_instances",
        ),
    ];
    for (yaml, opts, name, wanted) in cases {
        let (got, message) = dbus_error(apply(&d, &yaml, opts));
        assert_eq!(
            got,
            format!("org.gpuagent.Agent1.Error.{name}"),
            "{message}"
        );
        assert!(message.contains(wanted), "{message}\nwanted {wanted}");
    }
    // Nothing changed: the layouts, the task, the devices.
    assert_eq!(export(&d), before);
    for gpu in [0, 1] {
        assert_eq!(d.mig_layout(gpu).state, "stable");
    }
    assert_eq!(d.task(&id).state, TaskStatus::Running);
    let proxy = d.proxy();
    let (name, message) = dbus_error(d.block_on(async move { proxy.cancel_mig_change(0).await }));
    assert_eq!(name, "org.gpuagent.Agent1.Error.InvalidArgument");
    assert_eq!(message, "GPU 0 has no MIG layout change under way");
}

#[test]
fn daemon_mig_apply_cancel_and_timeout_leave_the_layout() {
    let d = Daemon::start();
    let before = export(&d);
    let id = d.submit(&spec(1e5, 1.0, 1e6, 1.0)).unwrap();
    assert_eq!(
        d.wait_state(&id, TaskStatus::Running, LIMIT).devices,
        vec![0]
    );
    assert_eq!(apply(&d, &config(SPLIT_0), Dict::new()), Ok(vec![0]));
    assert_eq!(d.mig_layout(0).state, "draining");
    let online = |d: &Daemon| {
        d.busctl_json(&[
            "get-property",
            crate::daemon::AGENT[0],
            "/org/gpuagent/Agent1/gpu/0",
            "org.gpuagent.Device1",
            "Online",
        ])["data"]
            .as_bool()
            .unwrap()
    };
    wait_for("GPU 0's object to say it is offline", LIMIT, || {
        (!online(&d)).then_some(())
    });
    // GPU 0 takes no new task while it drains.
    let other = d.submit(&spec(10.0, 1.0, 1e6, 1.0)).unwrap();
    assert_ne!(
        d.wait_state(&other, TaskStatus::Succeeded, LIMIT).devices,
        vec![0]
    );
    let out = gpuctl(&d, &["mig", "cancel", "0"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "GPU 0: change cancelled; the layout is unchanged and its devices take tasks again\n"
    );
    // Nothing left to cancel: a named error, exit 4 (the daemon's error).
    let again = gpuctl(&d, &["mig", "cancel", "0"]);
    assert_eq!(again.status.code(), Some(4));
    assert!(
        String::from_utf8_lossy(&again.stderr)
            .contains("GPU 0: org.gpuagent.Agent1.Error.InvalidArgument: GPU 0 has no MIG layout change under way"),
        "{}",
        String::from_utf8_lossy(&again.stderr)
    );
    let l = d.mig_layout(0);
    assert_eq!(
        (l.state.as_str(), l.message.as_str()),
        ("stable", "cancelled; the layout is unchanged")
    );
    assert_eq!(export(&d), before);
    wait_for("GPU 0's object to say it is online", LIMIT, || {
        online(&d).then_some(())
    });

    // A drain limited to 0.5 s with the task still running: failed, named.
    let opts = options(&[("timeout_s", Value::from(0.5))]);
    assert_eq!(apply(&d, &config(SPLIT_0), opts), Ok(vec![0]));
    let l = settled(&d, 0);
    assert_eq!(l.state, "failed");
    assert_eq!(
        l.message,
        format!("the drain timed out with task(s) {id} still running; the layout is unchanged")
    );
    assert_eq!(export(&d), before);
    // GPU 0 takes work again: the next task queues behind the running one.
    assert_eq!(d.task(&id).state, TaskStatus::Running);
}

#[test]
fn daemon_mig_apply_through_gpuctl_follows_the_change() {
    let d = Daemon::start();
    let work = tempfile::tempdir().unwrap();
    let file = write(work.path(), "mig.yaml", &config(SPLIT_0));
    let out = gpuctl(&d, &["mig", "apply", "-f", &file, "-c", "a", "--json"]);
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{}{stdout}",
        String::from_utf8_lossy(&out.stderr)
    );
    let steps: Vec<serde_json::Value> = stdout
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let states: Vec<&str> = steps.iter().map(|s| s["state"].as_str().unwrap()).collect();
    assert_eq!(states, ["draining", "applying", "stable"], "{stdout}");
    assert!(steps.iter().all(|s| s["gpu"] == 0));
    assert!(
        steps[2]["message"]
            .as_str()
            .unwrap()
            .starts_with("3g.20gb@0, 3g.20gb@4 (drain "),
        "{stdout}"
    );
    // Again: nothing to do.
    let out = gpuctl(&d, &["mig", "apply", "-f", &file]);
    assert!(out.status.success());
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "the GPUs are already as configuration a asks\n"
    );
    // MIG off again while the instances run tasks, with refuse: exit 1,
    // the error named, the layout kept. Tasks of 17 GB fit GPUs 1 and 2 and
    // the instances 4 and 5, not the T4: four of them take all four.
    let ids: Vec<String> = (0..4)
        .map(|_| d.submit(&spec(1e5, 17.0, 1e6, 1.0)).unwrap())
        .collect();
    let mut used: Vec<u32> = ids
        .iter()
        .flat_map(|id| d.wait_state(id, TaskStatus::Running, LIMIT).devices)
        .collect();
    used.sort_unstable();
    assert_eq!(used, [1, 2, 4, 5]);
    let off = write(
        work.path(),
        "off.yaml",
        &config("    - devices: [0]\n      mig-enabled: false\n"),
    );
    let out = gpuctl(&d, &["mig", "apply", "-f", &off, "--on-busy", "refuse"]);
    assert_eq!(out.status.code(), Some(4));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("org.gpuagent.Agent1.Error.Busy"), "{err}");
    assert_eq!(instances(&d.mig_layout(0)), ["3g.20gb@0", "3g.20gb@4"]);
    // A file written for several models (NVIDIA's config-default.yaml is):
    // the entries that select no GPU of this host are named, on stderr.
    let multi = write(
        work.path(),
        "multi.yaml",
        "version: v1\nmig-configs:\n  mixed:\n    - device-filter: \"0x20B010DE\"\n      devices: [0]\n      mig-enabled: true\n      mig-devices: {\"3g.20gb\": 2}\n    - device-filter: [\"0x20B710DE\", \"0x233510DE\"]\n      devices: all\n      mig-enabled: true\n      mig-devices: {\"1g.6gb+me\": 1, \"1g.18gb\": 6}\n  a30:\n    - device-filter: \"0x20B710DE\"\n      devices: all\n      mig-enabled: true\n      mig-devices: {\"1g.6gb\": 4}\n",
    );
    let out = gpuctl(&d, &["mig", "apply", "-f", &multi, "-c", "mixed"]);
    assert!(out.status.success());
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "the GPUs are already as configuration mixed asks\n"
    );
    assert_eq!(
        String::from_utf8_lossy(&out.stderr),
        "1 of the 2 entries of configuration mixed match no GPU of this host:\n  \
         entry 1 (line 8: device-filter 0x20B710DE, 0x233510DE, devices all)\n"
    );
    let out = gpuctl(&d, &["mig", "apply", "-f", &multi, "-c", "a30"]);
    assert!(out.status.success());
    assert_eq!(String::from_utf8_lossy(&out.stdout), "nothing changed\n");
    let none = "configuration a30 selects no GPU of this host; no entry matches:\n  \
                entry 0 (line 13: device-filter 0x20B710DE, devices all)\n";
    assert_eq!(String::from_utf8_lossy(&out.stderr), none);
    let out = gpuctl(&d, &["mig", "assert", "-f", &multi, "-c", "a30"]);
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.starts_with(none), "{err}");
    assert!(err.contains("GPU 0: selected by no entry"), "{err}");
}

/// Every task id once, and each of `ids` among them.
fn each_once(d: &Daemon, ids: &[String]) {
    let mut all: Vec<String> = d.tasks().into_iter().map(|t| t.id).collect();
    let n = all.len();
    all.sort();
    all.dedup();
    assert_eq!(all.len(), n, "a task listed twice: {all:?}");
    for id in ids {
        assert!(all.contains(id), "task {id} lost: {all:?}");
    }
}

#[test]
fn daemon_mig_apply_resumes_after_kill9_during_drain_or_apply() {
    // During the drain: the stored change begins again at the next start.
    let mut d = Daemon::start();
    let ids: Vec<String> = (0..3)
        .map(|_| d.submit(&spec(300.0, 1.0, 1e6, 1.0)).unwrap())
        .collect();
    assert_eq!(
        d.wait_state(&ids[0], TaskStatus::Running, LIMIT).devices,
        vec![0]
    );
    assert_eq!(apply(&d, &config(SPLIT_0), Dict::new()), Ok(vec![0]));
    assert_eq!(d.mig_layout(0).state, "draining");
    d.kill9();
    d.restart();
    each_once(&d, &ids);
    let l = settled(&d, 0);
    assert_eq!(
        (l.state.as_str(), instances(&l)),
        (
            "stable",
            vec!["3g.20gb@0".to_string(), "3g.20gb@4".to_string()]
        )
    );
    each_once(&d, &ids);

    // During the apply (the instances made, the change not yet stored as
    // made): the same.
    let work = tempfile::tempdir().unwrap();
    let marker = work.path().join("killed");
    let mut d = Daemon::start_with(crate::daemon::Settings {
        env: vec![(
            "GPU_AGENT_TEST_KILL_IN_MIG_APPLY".into(),
            marker.to_str().unwrap().into(),
        )],
        ..Default::default()
    });
    let ids: Vec<String> = (0..2)
        .map(|_| d.submit(&spec(300.0, 1.0, 1e6, 1.0)).unwrap())
        .collect();
    d.wait_state(&ids[0], TaskStatus::Running, LIMIT);
    let one = config(
        "    - devices: [1]\n      mig-enabled: true\n      mig-devices: {\"7g.40gb\": 1}\n",
    );
    // GPU 1 runs ids[1]: the apply comes once it ends, or at once.
    let _ = apply(&d, &one, Dict::new());
    d.wait_exit();
    assert!(marker.exists(), "the hook killed the daemon");
    d.restart();
    each_once(&d, &ids);
    let l = settled(&d, 1);
    assert_eq!(
        (l.state.as_str(), instances(&l)),
        ("stable", vec!["7g.40gb@0".to_string()])
    );
}

#[test]
fn daemon_mig_apply_refuses_to_strand_waiting_tasks_unless_asked() {
    let d = Daemon::start();
    // 35 GB: only the A100s (40 GB) hold it, and no 3g.20gb (19.5 GB).
    let ids: Vec<String> = (0..3)
        .map(|_| d.submit(&spec(100.0, 35.0, 1e6, 1.0)).unwrap())
        .collect();
    d.wait_state(&ids[0], TaskStatus::Running, LIMIT);
    d.wait_state(&ids[1], TaskStatus::Running, LIMIT);
    let both = config(
        "    - devices: [0, 1]\n      mig-enabled: true\n      mig-devices: {\"3g.20gb\": 2}\n",
    );
    let before = export(&d);
    let (name, message) = dbus_error(apply(&d, &both, Dict::new()));
    assert_eq!(name, "org.gpuagent.Agent1.Error.Unschedulable", "{message}");
    assert!(
        message.contains(&format!(
            "task {} (1 GPU(s) of 35 GB) would fit no device with GPU 0 as 3g.20gb@0, 3g.20gb@4 and GPU 1 as 3g.20gb@0, 3g.20gb@4",
            ids[2]
        )),
        "{message}"
    );
    assert_eq!(export(&d), before);
    assert_eq!(d.mig_layout(0).state, "stable");
    // Asked to: the change goes ahead, the waiting task is rejected naming
    // it, the running ones finish.
    let opts = options(&[("reject_stranded", Value::from(true))]);
    assert_eq!(apply(&d, &both, opts), Ok(vec![0, 1]));
    for gpu in [0, 1] {
        assert_eq!(settled(&d, gpu).state, "stable");
    }
    let ended = d.wait_all_ended(LIMIT);
    for t in &ended {
        let want = if t.id == ids[2] {
            TaskStatus::Rejected
        } else {
            TaskStatus::Succeeded
        };
        assert_eq!(t.state, want, "{} {:?}", t.id, t.reason);
    }
    let reason = d.task(&ids[2]).reason.unwrap_or_default();
    assert!(
        reason.contains("MIG layout changed to 3g.20gb@0, 3g.20gb@4"),
        "{reason}"
    );
}

/// A layout change whose instances' UUIDs cannot be read back (the mock's
/// `mig_devices` fails) leaves them offline with health `no-uuid`, shown by
/// `gpuctl devices` and their `Device1`; `gpuctl devices online` refuses
/// them, naming why.
#[test]
fn daemon_mig_apply_instances_without_a_uuid_stay_offline() {
    let d = Daemon::start();
    let out = gpuctl(&d, &["mock", "inject", "0", "fail", "mig_devices"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let work = tempfile::tempdir().unwrap();
    let file = write(work.path(), "mig.yaml", &config(SPLIT_0));
    let out = gpuctl(&d, &["mig", "apply", "-f", &file, "-c", "a"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = gpuctl(&d, &["devices"]);
    let listing = String::from_utf8_lossy(&out.stdout).into_owned();
    assert_eq!(
        listing.lines().filter(|l| l.contains("no-uuid")).count(),
        2,
        "{listing}"
    );
    for start in [0, 4] {
        let path = format!("/org/gpuagent/Agent1/gpu/0/mig/{start}");
        let health = d.busctl_json(&[
            "get-property",
            "org.gpuagent.Agent1",
            &path,
            "org.gpuagent.Device1",
            "Health",
        ]);
        assert_eq!(health["data"], "no-uuid", "{path}");
    }
    let out = gpuctl(&d, &["devices", "online", "4"]);
    assert_eq!(out.status.code(), Some(4));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("no-uuid"), "{err}");
}

/// mig-parted's `all-enabled` through gpuctl: refused, naming the flag that
/// asks for it; with `--enable-without-instances` the GPU has MIG on with no
/// instance and takes no task (health `mig`), and says so.
#[test]
fn daemon_mig_apply_mig_on_without_instances_only_when_asked() {
    let d = Daemon::start();
    let work = tempfile::tempdir().unwrap();
    let file = write(
        work.path(),
        "enabled.yaml",
        &config("    - devices: [1]\n      mig-enabled: true\n      mig-devices: {}\n"),
    );
    let out = gpuctl(&d, &["mig", "apply", "-f", &file]);
    assert_eq!(out.status.code(), Some(4));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("NotSupported") && err.contains("--enable-without-instances"),
        "{err}"
    );
    assert!(!d.mig_layout(1).enabled);
    let out = gpuctl(
        &d,
        &["mig", "apply", "-f", &file, "--enable-without-instances"],
    );
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let last = stdout.lines().last().unwrap();
    assert!(
        last.starts_with("GPU 1: stable MIG on, no instance (drain ")
            && last.ends_with(": the GPU takes no task until a layout with instances is made"),
        "{stdout}"
    );
    let l = d.mig_layout(1);
    assert!(l.enabled && l.instances.is_empty());
    let out = gpuctl(&d, &["devices"]);
    let listing = String::from_utf8_lossy(&out.stdout).into_owned();
    let gpu1 = listing
        .lines()
        .find(|l| l.trim_start().starts_with("1 "))
        .unwrap();
    assert!(gpu1.contains(" mig "), "{listing}");
}
