//! MIG instances as the daemon's devices (docs/mig.md §6.1, §6.5), through the
//! real binaries: a mock host whose A100 starts split lists its instances
//! (busctl, `gpuctl devices`), runs tasks on them with their `MIG-` UUIDs,
//! keeps their indices across restarts, makes them again after a "reboot"
//! lost them, adopts a layout changed out of band, and loses or duplicates
//! nothing acknowledged over a kill -9.

use std::time::Duration;

use gpu_agent_dbus::TaskStatus;

use crate::daemon::{dbus_error, gpuctl, spec, wait_for, Daemon, Settings, AGENT};

const LIMIT: Duration = Duration::from_secs(20);

/// GPU 0: an A100 (speed 7) split as `mig`; GPU 1: a T4, whole.
fn host(mig: &str) -> String {
    format!(
        "[[gpu]]\nmodel = \"A100-SXM4-40GB\"\nspeed = 7\nmig = {mig}\n\
         [[gpu]]\nmodel = \"T4\"\nspeed = 1\n"
    )
}

fn start(mig: &str) -> Daemon {
    Daemon::start_with(Settings {
        host: Some(host(mig)),
        ..Settings::default()
    })
}

/// One property of the object at `path` (busctl's JSON `data`).
fn property(d: &Daemon, path: &str, name: &str) -> serde_json::Value {
    let v = d.busctl_json(&["get-property", AGENT[0], path, "org.gpuagent.Device1", name]);
    v["data"].clone()
}

/// `gpuctl devices --json`.
fn devices(d: &Daemon) -> Vec<serde_json::Value> {
    let out = gpuctl(d, &["devices", "--json"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("a JSON array")
}

/// (index, MIG column's fields) of every device `gpuctl devices --json` lists.
fn layout(d: &Daemon) -> Vec<(u64, String, u64, bool)> {
    devices(d)
        .iter()
        .map(|v| {
            (
                v["index"].as_u64().unwrap(),
                v["mig_profile"].as_str().unwrap().to_string(),
                v["mig_placement"][0].as_u64().unwrap(),
                v["schedulable"].as_bool().unwrap(),
            )
        })
        .collect()
}

/// Prints the task's `CUDA_VISIBLE_DEVICES`.
const REPORT: &str = r#"echo "cvd=$CUDA_VISIBLE_DEVICES""#;

fn log_of(d: &Daemon, id: &str) -> String {
    let path = d.state_dir().join("logs").join(format!("{id}.log"));
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// Runs a command task that only an instance can hold (more memory than
/// the T4's 16 GB, less than a 3g.20gb's 19.5); returns (device, what it
/// saw).
fn run_on_instance(d: &Daemon) -> (u32, String) {
    let mut s = spec(6.0, 17.0, 600.0, 1.0);
    s.command = vec!["/bin/sh".into(), "-c".into(), REPORT.into()];
    let id = d.submit(&s).expect("Submit");
    let task = d.wait_state(&id, TaskStatus::Succeeded, LIMIT);
    assert_eq!(task.devices.len(), 1);
    (task.devices[0], log_of(d, &id))
}

/// Stops `d`, gives GPU 0 the MIG instances `mig` (as [`host`] takes them)
/// as a reboot or an out-of-band change would, starts it again and checks
/// that its log says `logged`.
fn restart_as(d: &mut Daemon, mig: &str, logged: &str) {
    d.terminate();
    std::fs::write(d.host_path(), host(mig)).unwrap();
    d.restart();
    assert!(d.stderr().contains(logged), "{}", d.stderr());
}

fn mig_path(start: u32) -> String {
    format!("/org/gpuagent/Agent1/gpu/0/mig/{start}")
}

#[test]
fn daemon_mig_devices_are_listed_run_tasks_and_keep_their_indices() {
    let mut d = Daemon::start_with(Settings {
        host: Some(host(r#"["3g.20gb@0", "3g.20gb@4"]"#)),
        config: Some("idle_clocks = \"min\"\n".into()),
        ..Settings::default()
    });

    // GPU 0 is split: not schedulable; its instances are devices 2 and 3.
    assert_eq!(
        layout(&d),
        [
            (0, "".into(), 0, false),
            (1, "".into(), 0, true),
            (2, "3g.20gb".into(), 0, true),
            (3, "3g.20gb".into(), 4, true),
        ]
    );
    let gpu0 = "/org/gpuagent/Agent1/gpu/0";
    assert_eq!(property(&d, gpu0, "Schedulable"), false);
    assert_eq!(property(&d, gpu0, "Health"), "mig");
    let at4 = mig_path(4);
    assert_eq!(property(&d, &at4, "Index"), 3);
    assert_eq!(property(&d, &at4, "Parent"), 0);
    assert_eq!(property(&d, &at4, "MigProfile"), "3g.20gb");
    assert_eq!(
        property(&d, &at4, "MigPlacement"),
        serde_json::json!([4, 4])
    );
    assert_eq!(property(&d, &at4, "MemoryGb"), 19.5);
    // speed 7 × 3/7.
    assert_eq!(property(&d, &at4, "Speed"), 3.0);
    let uuid4 = property(&d, &at4, "Uuid").as_str().unwrap().to_string();
    let uuid0 = property(&d, &mig_path(0), "Uuid")
        .as_str()
        .unwrap()
        .to_string();
    assert!(uuid4.starts_with("MIG-") && uuid0.starts_with("MIG-") && uuid0 != uuid4);

    // gpuctl devices: the MIG column says where each instance lies.
    let out = gpuctl(&d, &["devices"]);
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let rows: Vec<&str> = text.lines().collect();
    assert_eq!(rows.len(), 5, "{text}");
    assert!(
        rows[1].contains(" on ") && rows[1].contains(" mig "),
        "{text}"
    );
    assert!(rows[3].contains("0/mig/3g.20gb@0"), "{text}");
    assert!(rows[4].contains("0/mig/3g.20gb@4"), "{text}");
    assert_eq!(devices(&d)[3]["uuid"], uuid4.as_str());

    // A task on an instance sees that instance's MIG UUID.
    let (device, seen) = run_on_instance(&d);
    let uuid = if device == 2 { &uuid0 } else { &uuid4 };
    assert!(device == 2 || device == 3, "device {device}");
    assert_eq!(seen, format!("cvd={uuid}\n"));
    // Clocks are the physical GPU's: the idle lock takes the whole T4, never
    // the split A100 (its instances share its clocks) nor an instance.
    let idle_locked = |gpu: u32| {
        d.stderr()
            .lines()
            .filter(|l| l.contains(&format!("GPU {gpu} ")) || l.contains(&format!("GPU {gpu}'s")))
            .any(|l| l.contains("idle"))
    };
    assert!(idle_locked(1), "{}", d.stderr());
    for gpu in [0, 2, 3] {
        assert!(!idle_locked(gpu), "{}", d.stderr());
    }
    // A gang never spans MIG devices: two 17 GB GPUs exist only as instances.
    let mut gang = spec(6.0, 17.0, 600.0, 1.0);
    gang.gpus = 2;
    let (name, _) = dbus_error(d.submit(&gang));
    assert_eq!(name, "org.gpuagent.Agent1.Error.Unschedulable");

    // A restart on the same GPUs: the same devices, indices and UUIDs.
    d.terminate();
    d.restart();
    assert_eq!(property(&d, &at4, "Index"), 3);
    assert_eq!(property(&d, &at4, "Uuid"), uuid4.as_str());
    assert_eq!(layout(&d).len(), 4);

    // A "reboot" loses the instances (MIG stays on): the daemon makes them
    // again at their indices before it takes tasks.
    restart_as(
        &mut d,
        "[]",
        "GPU 0 has MIG on and no instance (a reboot?): making its stored layout 3g.20gb@0, 3g.20gb@4 again",
    );
    assert_eq!(
        layout(&d),
        [
            (0, "".into(), 0, false),
            (1, "".into(), 0, true),
            (2, "3g.20gb".into(), 0, true),
            (3, "3g.20gb".into(), 4, true),
        ]
    );
    let (device, seen) = run_on_instance(&d);
    let uuid = property(&d, &mig_path(if device == 2 { 0 } else { 4 }), "Uuid");
    assert_eq!(seen, format!("cvd={}\n", uuid.as_str().unwrap()));

    // Changed out of band: adopted at a new index, the old ones retired.
    restart_as(
        &mut d,
        r#"["7g.40gb"]"#,
        "GPU 0: stored MIG layout 3g.20gb@0, 3g.20gb@4, found 7g.40gb@0: adopting what the GPU has",
    );
    assert_eq!(
        layout(&d),
        [
            (0, "".into(), 0, false),
            (1, "".into(), 0, true),
            (4, "7g.40gb".into(), 0, true),
        ]
    );
    assert_eq!(property(&d, &mig_path(0), "Index"), 4);
    let out = d.busctl(&[
        "get-property",
        AGENT[0],
        &at4,
        "org.gpuagent.Device1",
        "Index",
    ]);
    assert!(!out.status.success(), "the retired instance has no object");
    let (device, _) = run_on_instance(&d);
    assert_eq!(device, 4);

    // A change through the agent: the new instances' objects come at the
    // next indices, the retired one's object goes.
    apply(&d, "mig-enabled: true\n      mig-devices: {\"3g.20gb\": 2}");
    assert_eq!(
        layout(&d),
        [
            (0, "".into(), 0, false),
            (1, "".into(), 0, true),
            (5, "3g.20gb".into(), 0, true),
            (6, "3g.20gb".into(), 4, true),
        ]
    );
    assert_eq!(property(&d, &mig_path(4), "Index"), 6);
    let (device, seen) = run_on_instance(&d);
    let uuid = property(&d, &mig_path(if device == 5 { 0 } else { 4 }), "Uuid");
    assert_eq!(seen, format!("cvd={}\n", uuid.as_str().unwrap()));
    // MIG off: GPU 0 is whole and schedulable at once, its instances gone;
    // a restart keeps it so, every slot retired.
    apply(&d, "mig-enabled: false");
    assert_eq!(property(&d, gpu0, "Schedulable"), true);
    assert_eq!(property(&d, gpu0, "MigEnabled"), false);
    assert_eq!(
        layout(&d),
        [(0, "".into(), 0, true), (1, "".into(), 0, true)]
    );
    d.terminate();
    // The mock's GPUs do not outlive the daemon: the host file says what
    // GPU 0 is now.
    std::fs::write(
        d.host_path(),
        "[[gpu]]\nmodel = \"A100-SXM4-40GB\"\nspeed = 7\n[[gpu]]\nmodel = \"T4\"\nspeed = 1\n",
    )
    .unwrap();
    d.restart();
    assert_eq!(
        layout(&d),
        [(0, "".into(), 0, true), (1, "".into(), 0, true)]
    );
    assert!(!d.stderr().contains("found MIG off"), "{}", d.stderr());
}

/// `ApplyMigConfig` of GPU 0 as `entry` (the YAML after `devices: [0]`),
/// waiting until the change is made.
fn apply(d: &Daemon, entry: &str) {
    let yaml = format!("version: v1\nmig-configs:\n  a:\n    - devices: [0]\n      {entry}\n");
    let proxy = d.proxy();
    let changing = d
        .block_on(async move { proxy.apply_mig_config(&yaml, "a", Default::default()).await })
        .expect("ApplyMigConfig");
    assert_eq!(changing, [0]);
    wait_for("GPU 0's change to be made", LIMIT, || {
        (d.mig_layout(0).state == "stable").then_some(())
    });
}

#[test]
fn daemon_mig_kill_9_then_restart_keeps_every_acknowledged_task_once() {
    let mut d = start(r#"["3g.20gb@0", "2g.10gb@4", "1g.5gb@6"]"#);
    // 1g.5gb has 4.75 GB: tasks of 4 GB fit every instance and the T4.
    let mut acked = Vec::new();
    for n in 0..24 {
        let mut s = spec(4.0 + (n % 3) as f64, 4.0, 600.0, 1.0);
        s.requeue = n % 2 == 0;
        s.name = format!("mig-{n}");
        acked.push(d.submit(&s).expect("Submit"));
    }
    wait_for("a task running on a MIG device", LIMIT, || {
        d.tasks()
            .iter()
            .any(|t| t.state == TaskStatus::Running && t.devices.iter().any(|&x| x >= 2))
            .then_some(())
    });
    d.kill9();
    d.restart();
    let tasks = d.tasks();
    for id in &acked {
        assert_eq!(
            tasks.iter().filter(|t| &t.id == id).count(),
            1,
            "task {id} after the restart: {tasks:?}"
        );
    }
    assert_eq!(tasks.len(), acked.len());
    let ended = d.wait_all_ended(Duration::from_secs(60));
    for t in &ended {
        match t.state {
            TaskStatus::Succeeded => {}
            TaskStatus::Lost => assert!(!t.spec.requeue, "{t:?}"),
            other => panic!("task {} ended {other}: {t:?}", t.id),
        }
    }
    // Every device index is the T4 (1) or an instance (2, 3, 4), never the
    // split GPU.
    assert!(
        ended
            .iter()
            .all(|t| t.devices.iter().all(|&x| (1..=4).contains(&x))),
        "{ended:?}"
    );
    assert!(ended
        .iter()
        .any(|t| t.state == TaskStatus::Succeeded && t.devices.iter().any(|&x| x >= 2)));
}

/// (Online, Health) of the object at `path`.
fn health(d: &Daemon, path: &str) -> (bool, String) {
    (
        property(d, path, "Online").as_bool().unwrap(),
        property(d, path, "Health").as_str().unwrap().to_string(),
    )
}

#[test]
fn daemon_mig_a_split_gpu_that_fails_takes_its_instances_offline() {
    let d = start(r#"["3g.20gb@0", "3g.20gb@4"]"#);
    let gpu0 = "/org/gpuagent/Agent1/gpu/0";
    // Its instances are the devices an admin brings online, not the GPU.
    let out = gpuctl(&d, &["devices", "online", "0"]);
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr)
            .contains("device 0 takes no work (its GPU is split into MIG instances)"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );

    // A long task on an instance (17 GB: the T4 cannot hold it).
    let mut s = spec(1e6, 17.0, 1e7, 1.0);
    s.command = vec!["/bin/sh".into(), "-c".into(), "sleep 600".into()];
    let id = d.submit(&s).expect("Submit");
    let running = d.wait_state(&id, TaskStatus::Running, LIMIT);
    let device = running.devices[0];
    assert!(device == 2 || device == 3, "{running:?}");

    // GPU 0 falls off the bus: both instances go offline, the task fails.
    let out = gpuctl(&d, &["mock", "inject", "0", "lost"]);
    assert!(out.status.success());
    let failed = d.wait_state(&id, TaskStatus::Failed, LIMIT);
    assert_eq!(
        failed.reason.as_deref(),
        Some(format!("GPU {device} went offline (lost)").as_str())
    );
    for start in [0, 4] {
        wait_for("the instances offline", LIMIT, || {
            (health(&d, &mig_path(start)) == (false, "lost".into())).then_some(())
        });
    }
    assert_eq!(health(&d, gpu0), (false, "mig".into()));
    // An instance comes back only once its GPU answers again.
    let out = gpuctl(&d, &["devices", "online", "2"]);
    assert!(!out.status.success());
    assert!(gpuctl(&d, &["mock", "repair", "0"]).status.success());
    assert!(gpuctl(&d, &["devices", "online", "2"]).status.success());
    assert_eq!(health(&d, &mig_path(0)), (true, "ok".into()));
    assert_eq!(health(&d, &mig_path(4)), (false, "lost".into()));
}
