//! `gpu-agentd` as generic D-Bus tools see it: `busctl` introspect, tree,
//! get-property and call; `GetManagedObjects`; `gdbus monitor`.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use serde_json::json;

use crate::daemon::{host_file, json_dict, Daemon, AGENT};

/// The mock host's devices: (name, memory GB, speed).
const DEVICES: [(&str, f64, f64); 4] = [
    ("NVIDIA A100-SXM4-40GB", 40.0, 1.0),
    ("NVIDIA A100-SXM4-40GB", 40.0, 1.0),
    ("Tesla V100-SXM2-32GB", 32.0, 0.6),
    ("Tesla T4", 16.0, 0.25),
];

/// `busctl introspect` rows of one interface: member → (type, signature, value, flags).
fn introspect(
    d: &Daemon,
    path: &str,
    interface: &str,
) -> Vec<(String, String, String, String, String)> {
    let out = d.busctl(&["introspect", "org.gpuagent.Agent1", path, interface]);
    assert!(
        out.status.success(),
        "busctl introspect {path}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).expect("utf-8");
    text.lines()
        .filter(|l| l.starts_with('.'))
        .map(|l| {
            // NAME TYPE SIGNATURE RESULT/VALUE FLAGS; a string value may hold
            // spaces, so the value is everything between signature and flags.
            let fields: Vec<&str> = l.split_whitespace().collect();
            let n = fields.len();
            (
                fields[0].to_string(),
                fields[1].to_string(),
                fields[2].to_string(),
                fields[3..n - 1].join(" "),
                fields[n - 1].to_string(),
            )
        })
        .collect()
}

fn row(
    name: &str,
    kind: &str,
    sig: &str,
    value: &str,
    flags: &str,
) -> (String, String, String, String, String) {
    (
        name.into(),
        kind.into(),
        sig.into(),
        value.into(),
        flags.into(),
    )
}

#[test]
fn daemon_introspection_shows_the_agent_interface_and_four_devices() {
    let d = Daemon::start();
    let backend = format!("\"mock:{}\"", host_file().display());
    let version = format!("\"{}\"", env!("CARGO_PKG_VERSION"));
    let mut agent = introspect(&d, AGENT[1], AGENT[2]);
    agent.sort();
    // Version and Backend never change: their flag may be const or
    // emits-change; Policy changes and must say so.
    for r in agent.iter_mut() {
        if r.0 == ".Version" || r.0 == ".Backend" {
            assert!(r.4 == "const" || r.4 == "emits-change", "{r:?}");
            r.4 = "?".into();
        }
    }
    let mut expected = vec![
        row(".Cancel", "method", "s", "-", "-"),
        row(".GetTask", "method", "s", "a{sv}", "-"),
        row(".ListPolicies", "method", "-", "a(ss)", "-"),
        row(".ListTasks", "method", "s", "aa{sv}", "-"),
        row(".ListTasksPage", "method", "stu", "aa{sv}t", "-"),
        row(".CountTasks", "method", "-", "a{st}", "-"),
        row(".Metrics", "method", "-", "a{sv}", "-"),
        row(".Reload", "method", "-", "as", "-"),
        row(".SetPolicy", "method", "s", "-", "-"),
        row(".SetPolicyWithParameters", "method", "sa{sv}", "-", "-"),
        row(".DescribePolicy", "method", "s", "a{sv}", "-"),
        row(".GetMigLayout", "method", "u", "a{sv}", "-"),
        row(".ExportMigConfig", "method", "s", "s", "-"),
        row(".AssertMigConfig", "method", "ss", "bas", "-"),
        row(".ApplyMigConfig", "method", "ssa{sv}", "au", "-"),
        row(".CancelMigChange", "method", "u", "-", "-"),
        row(".MigChanged", "signal", "uss", "-", "-"),
        row(".SetDeviceOnline", "method", "ub", "-", "-"),
        row(".Adopt", "method", "a{sv}", "s", "-"),
        row(".Release", "method", "s", "-", "-"),
        row(".ReleaseWithEnd", "method", "ss", "-", "-"),
        row(".Submit", "method", "a{sv}", "s", "-"),
        row(".TaskChanged", "signal", "ss", "-", "-"),
        row(".ReadOutput", "method", "stu", "aytb", "-"),
        row(".PolicyFault", "signal", "ss", "-", "-"),
        row(".LastPolicyFault", "property", "s", "\"\"", "emits-change"),
        row(".Policy", "property", "s", "\"fifo\"", "emits-change"),
        row(
            ".PolicyParameters",
            "property",
            "a{sv}",
            "0",
            "emits-change",
        ),
        row(".Version", "property", "s", &version, "?"),
        row(".Backend", "property", "s", &backend, "?"),
    ];
    expected.sort();
    assert_eq!(agent, expected);

    // On mock GPUs, the root object also has the mock's fault controls.
    let mut mock = introspect(&d, AGENT[1], "org.gpuagent.Mock1");
    mock.sort();
    assert_eq!(
        mock,
        vec![
            row(".InjectFault", "method", "us", "-", "-"),
            row(".Repair", "method", "u", "-", "-"),
        ]
    );

    // The root object is also the devices' object manager.
    let all = introspect(&d, AGENT[1], "org.freedesktop.DBus.ObjectManager");
    assert!(
        all.iter()
            .any(|r| r.0 == ".GetManagedObjects" && r.3 == "a{oa{sa{sv}}}"),
        "{all:?}"
    );

    let tree = d.busctl(&["tree", "--list", "org.gpuagent.Agent1"]);
    assert!(tree.status.success());
    let paths: Vec<String> = String::from_utf8(tree.stdout)
        .unwrap()
        .lines()
        .filter(|l| l.starts_with("/org/gpuagent/Agent1/gpu/"))
        .map(str::to_string)
        .collect();
    assert_eq!(
        paths,
        (0..4)
            .map(|i| format!("/org/gpuagent/Agent1/gpu/{i}"))
            .collect::<Vec<_>>()
    );

    for (i, (name, memory, speed)) in DEVICES.iter().enumerate() {
        let path = format!("/org/gpuagent/Agent1/gpu/{i}");
        let rows = introspect(&d, &path, "org.gpuagent.Device1");
        let get = |p: &str| {
            rows.iter()
                .find(|r| r.0 == p)
                .unwrap_or_else(|| panic!("{path}: no property {p}: {rows:?}"))
                .clone()
        };
        let names: Vec<&str> = rows.iter().map(|r| r.0.as_str()).collect();
        assert_eq!(
            names,
            vec![
                ".CoreClockMhz",
                ".CurrentTask",
                ".EnergyJ",
                ".Health",
                ".Index",
                ".MemClockMhz",
                ".MemoryGb",
                ".MemoryUsedGb",
                ".MigEnabled",
                ".MigPlacement",
                ".MigProfile",
                ".Name",
                ".Online",
                ".Parent",
                ".PowerW",
                ".Schedulable",
                ".Speed",
                ".TemperatureC",
                ".Utilization",
                ".Uuid",
            ],
            "{path}"
        );
        assert!(rows.iter().all(|r| r.1 == "property"));
        assert_eq!(
            get(".Index"),
            row(".Index", "property", "u", &i.to_string(), "const")
        );
        assert_eq!(
            get(".Name"),
            row(".Name", "property", "s", &format!("\"{name}\""), "const")
        );
        assert_eq!(
            get(".MemoryGb"),
            row(".MemoryGb", "property", "d", &memory.to_string(), "const")
        );
        assert_eq!(
            get(".Speed"),
            row(".Speed", "property", "d", &speed.to_string(), "const")
        );
        assert_eq!(get(".MigEnabled").3, "false");
        assert_eq!(
            get(".Parent"),
            row(".Parent", "property", "u", &i.to_string(), "const")
        );
        assert_eq!(get(".MigProfile").3, "\"\"");
        // busctl introspect shows no struct value.
        assert_eq!(get(".MigPlacement").2, "(uu)");
        assert_eq!(get(".Schedulable").3, "true");
        assert_eq!(get(".CurrentTask").3, "\"\"");
        assert_eq!(
            get(".Online"),
            row(".Online", "property", "b", "true", "emits-change")
        );
        assert_eq!(
            get(".Health"),
            row(".Health", "property", "s", "\"ok\"", "emits-change")
        );
        let uuid = get(".Uuid");
        assert_eq!((uuid.2.as_str(), uuid.4.as_str()), ("s", "const"));
        assert!(uuid.3.starts_with("\"GPU-"), "{uuid:?}");
        for p in [".CoreClockMhz", ".MemClockMhz"] {
            assert_eq!(get(p).2, "u");
        }
        for p in [
            ".PowerW",
            ".EnergyJ",
            ".Utilization",
            ".MemoryUsedGb",
            ".TemperatureC",
        ] {
            assert_eq!(get(p).2, "d");
        }
    }
}

#[test]
fn daemon_properties_read_with_busctl_get_property() {
    let d = Daemon::start();
    let get = |p: &str| d.busctl_json(&["get-property", AGENT[0], AGENT[1], AGENT[2], p]);
    assert_eq!(get("Policy"), json!({"type": "s", "data": "fifo"}));
    assert_eq!(
        get("Version"),
        json!({"type": "s", "data": env!("CARGO_PKG_VERSION")})
    );
    assert_eq!(
        get("Backend"),
        json!({"type": "s", "data": format!("mock:{}", host_file().display())})
    );
    let uuids: Vec<String> = (0..4)
        .map(|i| {
            let v = d.busctl_json(&[
                "get-property",
                AGENT[0],
                &format!("/org/gpuagent/Agent1/gpu/{i}"),
                "org.gpuagent.Device1",
                "Uuid",
            ]);
            assert_eq!(v["type"], "s");
            v["data"].as_str().unwrap().to_string()
        })
        .collect();
    let mut distinct = uuids.clone();
    distinct.sort();
    distinct.dedup();
    assert_eq!(distinct.len(), 4, "{uuids:?}");
}

#[test]
fn daemon_get_managed_objects_lists_the_four_devices() {
    let d = Daemon::start();
    let reply = d.busctl_json(&[
        "call",
        AGENT[0],
        AGENT[1],
        "org.freedesktop.DBus.ObjectManager",
        "GetManagedObjects",
    ]);
    assert_eq!(reply["type"], "a{oa{sa{sv}}}");
    let objects = reply["data"][0].as_object().expect("a{o...}");
    // zbus also lists the intermediate node /org/gpuagent/Agent1/gpu, with
    // no interface; the objects that have one are the four devices.
    let mut paths: Vec<&String> = objects
        .iter()
        .filter(|(_, ifaces)| !ifaces.as_object().expect("a{sa{sv}}").is_empty())
        .map(|(path, _)| path)
        .collect();
    paths.sort();
    assert_eq!(
        paths,
        vec![
            "/org/gpuagent/Agent1/gpu/0",
            "/org/gpuagent/Agent1/gpu/1",
            "/org/gpuagent/Agent1/gpu/2",
            "/org/gpuagent/Agent1/gpu/3",
        ]
    );
    for (i, (name, memory, speed)) in DEVICES.iter().enumerate() {
        let ifaces = &objects[&format!("/org/gpuagent/Agent1/gpu/{i}")];
        let names: Vec<&String> = ifaces.as_object().unwrap().keys().collect();
        assert_eq!(names, vec!["org.gpuagent.Device1"]);
        let props = json_dict(&ifaces["org.gpuagent.Device1"]);
        assert_eq!(props.len(), 20, "{props:?}");
        // Idle mock GPUs: no memory in use, 30 °C plus 50 °C × power / max.
        assert_eq!(props["MemoryUsedGb"], ("d".into(), json!(0.0)));
        let (kind, temp) = &props["TemperatureC"];
        assert_eq!(kind, "d");
        assert!((30.0..=80.0).contains(&temp.as_f64().unwrap()), "{temp}");
        assert_eq!(props["Schedulable"], ("b".into(), json!(true)));
        assert_eq!(props["Parent"], ("u".into(), json!(i)));
        assert_eq!(props["MigProfile"], ("s".into(), json!("")));
        assert_eq!(props["MigPlacement"], ("(uu)".into(), json!([0, 0])));
        assert_eq!(props["Index"], ("u".into(), json!(i)));
        assert_eq!(props["Name"], ("s".into(), json!(name)));
        assert_eq!(props["MemoryGb"], ("d".into(), json!(memory)));
        assert_eq!(props["Speed"], ("d".into(), json!(speed)));
        assert_eq!(props["MigEnabled"], ("b".into(), json!(false)));
        assert_eq!(props["CurrentTask"], ("s".into(), json!("")));
        assert_eq!(props["Online"], ("b".into(), json!(true)));
        assert_eq!(props["Health"], ("s".into(), json!("ok")));
        let uuid = d.busctl_json(&[
            "get-property",
            AGENT[0],
            &format!("/org/gpuagent/Agent1/gpu/{i}"),
            "org.gpuagent.Device1",
            "Uuid",
        ]);
        assert_eq!(props["Uuid"], ("s".into(), uuid["data"].clone()));
    }
}

#[test]
fn daemon_methods_answer_busctl_calls() {
    let mut d = Daemon::start();
    let submitted = d.call(
        "Submit",
        &[
            "a{sv}", "5", "workload", "d", "10", "mem_gb", "d", "1", "deadline", "d", "60",
            "weight", "d", "2", "name", "s", "first",
        ],
    );
    assert_eq!(submitted, vec![json!("t1")]);

    // Simulated: 10 work units on an A100 (speed 1) at time scale 100: 0.1 s.
    let done = d.wait_state(
        "t1",
        gpu_agent_dbus::TaskStatus::Succeeded,
        Duration::from_secs(10),
    );
    assert_eq!(done.devices, vec![0]);

    let task = json_dict(&d.call("GetTask", &["s", "t1"])[0]);
    let mut keys: Vec<&String> = task.keys().collect();
    keys.sort();
    assert_eq!(
        keys,
        vec![
            "core_mhz",
            "deadline",
            "default_p",
            "default_t",
            "devices",
            "energy_j",
            "fc",
            "finished",
            "fm",
            "id",
            "mem_gb",
            "mem_mhz",
            "name",
            "owner_uid",
            "p",
            "started",
            "state",
            "submitted",
            "t",
            "v",
            "weight",
            "workload",
        ]
    );
    assert_eq!(task["id"], ("s".into(), json!("t1")));
    assert_eq!(task["name"], ("s".into(), json!("first")));
    assert_eq!(task["state"], ("s".into(), json!("succeeded")));
    assert_eq!(
        task["owner_uid"],
        ("u".into(), json!(nix::unistd::getuid().as_raw()))
    );
    assert_eq!(task["devices"], ("au".into(), json!([0])));
    assert_eq!(task["workload"], ("d".into(), json!(10.0)));
    assert_eq!(task["mem_gb"], ("d".into(), json!(1.0)));
    assert_eq!(task["deadline"], ("d".into(), json!(60.0)));
    assert_eq!(task["weight"], ("d".into(), json!(2.0)));
    let time = |k: &str| task[k].1.as_f64().unwrap();
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs_f64();
    assert!(time("submitted") <= time("started"), "{task:?}");
    assert!(time("started") < time("finished"), "{task:?}");
    assert!(
        time("finished") <= now + 1.0 && time("submitted") > now - 60.0,
        "{task:?}"
    );
    assert!(time("energy_j") > 0.0, "{task:?}");

    let all = d.call("ListTasks", &["s", ""]);
    assert_eq!(all[0].as_array().unwrap().len(), 1);
    let listed = json_dict(&all[0][0]);
    assert_eq!(listed, task);
    assert_eq!(
        d.call("ListTasks", &["s", "succeeded"])[0]
            .as_array()
            .unwrap()
            .len(),
        1
    );
    assert_eq!(d.call("ListTasks", &["s", "queued"]), vec![json!([])]);

    assert_eq!(
        d.call("ListPolicies", &[]),
        vec![json!([
            [
                "fifo",
                "first come, first served on the device that can start it earliest"
            ],
            [
                "greedy-eft",
                "greedy earliest finish time on heterogeneous devices"
            ],
        ])]
    );

    let metrics = json_dict(&d.call("Metrics", &[])[0]);
    let mut keys: Vec<&String> = metrics.keys().collect();
    keys.sort();
    assert_eq!(
        keys,
        vec![
            "act",
            "dmc",
            "dmr",
            "energy_baseline_j",
            "energy_idle_j",
            "energy_j",
            "energy_overhead_j",
            "energy_run_j",
            "energy_saving",
            "makespan",
            "policy",
            "rejected",
            "tasks",
            "twct",
            "twt",
            "utilization",
        ]
    );
    assert_eq!(metrics["policy"], ("s".into(), json!("fifo")));
    assert_eq!(metrics["tasks"], ("t".into(), json!(1)));
    assert_eq!(metrics["rejected"], ("a(ss)".into(), json!([])));
    // Finished well inside its deadline.
    assert_eq!(metrics["dmc"], ("t".into(), json!(0)));
    assert_eq!(metrics["dmr"], ("d".into(), json!(0.0)));
    assert_eq!(metrics["twt"], ("d".into(), json!(0.0)));
    for k in ["act", "twct", "makespan", "energy_j", "utilization"] {
        let (ty, v) = &metrics[k];
        assert_eq!(ty, "d");
        assert!(v.as_f64().unwrap() > 0.0, "{k}: {v}");
    }

    // Cancel: under fifo four long tasks fill the four devices, the fifth
    // waits; each ends cancelled, running or waiting.
    let long = [
        "a{sv}", "4", "workload", "d", "1e6", "mem_gb", "d", "1", "deadline", "d", "60", "weight",
        "d", "1",
    ];
    let ids: Vec<String> = (0..5)
        .map(|_| d.call("Submit", &long)[0].as_str().unwrap().to_string())
        .collect();
    assert_eq!(ids, vec!["t2", "t3", "t4", "t5", "t6"]);
    let mut devices: Vec<u32> = ids[..4].iter().flat_map(|id| d.task(id).devices).collect();
    devices.sort();
    assert_eq!(devices, vec![0, 1, 2, 3]);
    let waiting = d.task("t6");
    assert!(
        matches!(
            waiting.state,
            gpu_agent_dbus::TaskStatus::Queued | gpu_agent_dbus::TaskStatus::Assigned
        ),
        "{waiting:?}"
    );
    // Each device names the task running on it.
    for id in &ids[..4] {
        let task = d.task(id);
        assert_eq!(task.state, gpu_agent_dbus::TaskStatus::Running, "{task:?}");
        let path = format!("/org/gpuagent/Agent1/gpu/{}", task.devices[0]);
        crate::daemon::wait_for(
            &format!("{path} to name {id}"),
            Duration::from_secs(10),
            || {
                let v = d.busctl_json(&[
                    "get-property",
                    AGENT[0],
                    &path,
                    "org.gpuagent.Device1",
                    "CurrentTask",
                ]);
                (v["data"] == id.as_str()).then_some(())
            },
        );
    }
    for id in &ids {
        assert_eq!(
            d.call("Cancel", &["s", id]),
            Vec::<serde_json::Value>::new()
        );
        assert_eq!(d.task(id).state, gpu_agent_dbus::TaskStatus::Cancelled);
    }

    assert_eq!(
        d.call("SetPolicy", &["s", "greedy-eft"]),
        Vec::<serde_json::Value>::new()
    );
    let policy =
        |d: &Daemon| d.busctl_json(&["get-property", AGENT[0], AGENT[1], AGENT[2], "Policy"]);
    crate::daemon::wait_for("Policy to read greedy-eft", Duration::from_secs(10), || {
        (policy(&d)["data"] == "greedy-eft").then_some(())
    });
    assert_eq!(
        json_dict(&d.call("Metrics", &[])[0])["policy"],
        ("s".into(), json!("greedy-eft"))
    );
    // The choice is durable: a restart keeps it.
    assert!(d.terminate().success(), "{}", d.stderr());
    d.restart();
    assert_eq!(policy(&d)["data"], "greedy-eft");
    assert_eq!(
        d.call("ListTasks", &["s", ""])[0].as_array().unwrap().len(),
        6
    );
}

#[test]
fn daemon_gdbus_monitor_sees_task_changed() {
    let d = Daemon::start();
    let mut monitor = Command::new("stdbuf")
        .args([
            "-oL",
            "gdbus",
            "monitor",
            "--session",
            "--dest",
            "org.gpuagent.Agent1",
        ])
        .env("DBUS_SESSION_BUS_ADDRESS", d.address())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("gdbus monitor starts");
    struct KillOnDrop(std::process::Child);
    impl Drop for KillOnDrop {
        fn drop(&mut self) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
    let stdout = monitor.stdout.take().unwrap();
    let _monitor = KillOnDrop(monitor);
    let (tx, lines) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    let deadline = Instant::now() + Duration::from_secs(15);
    let next = || {
        lines
            .recv_timeout(deadline.saturating_duration_since(Instant::now()))
            .expect("gdbus monitor printed the next line in time")
    };
    // gdbus subscribes to the daemon's signals only once it has seen who
    // owns the name, and does not say when the subscription is in place:
    // poke the daemon (SetPolicy emits PropertiesChanged for Policy) until
    // a signal of its comes through.
    loop {
        if next().starts_with("The name org.gpuagent.Agent1 is owned by") {
            break;
        }
    }
    let mut subscribed = false;
    while !subscribed {
        d.call("SetPolicy", &["s", "fifo"]);
        let wait = Instant::now() + Duration::from_millis(200);
        while let Ok(line) = lines.recv_timeout(wait.saturating_duration_since(Instant::now())) {
            if line.starts_with("/org/gpuagent/Agent1") {
                subscribed = true;
                break;
            }
        }
        assert!(
            Instant::now() < deadline,
            "gdbus monitor never saw a signal"
        );
    }
    assert_eq!(
        d.call(
            "Submit",
            &[
                "a{sv}", "4", "workload", "d", "10", "mem_gb", "d", "1", "deadline", "d", "60",
                "weight", "d", "1"
            ]
        ),
        vec![json!("t1")]
    );
    // The task's signals and its device's CurrentTask changes, in order;
    // the other property changes (energy, power) are not this test's.
    let task_changed = "/org/gpuagent/Agent1: org.gpuagent.Agent1.TaskChanged ";
    let current_task = "/org/gpuagent/Agent1/gpu/0: org.freedesktop.DBus.Properties.PropertiesChanged ('org.gpuagent.Device1', {'CurrentTask': ";
    let mut seen = Vec::new();
    while seen.len() < 5 {
        let line = next();
        if let Some(rest) = line.strip_prefix(task_changed) {
            seen.push(rest.to_string());
        } else if let Some(rest) = line.strip_prefix(current_task) {
            seen.push(format!("CurrentTask {rest}"));
        } else {
            assert!(
                !line.contains("TaskChanged") && !line.contains("CurrentTask"),
                "an unexpected signal: {line}"
            );
        }
    }
    assert_eq!(
        seen,
        vec![
            "('t1', 'queued')",
            "('t1', 'running')",
            "CurrentTask <'t1'>}, @as [])",
            "CurrentTask <''>}, @as [])",
            "('t1', 'succeeded')",
        ]
    );
}

/// A device property through busctl.
/// `ListTasksPage` through busctl: (the pages' task ids, the next position).
fn page(d: &Daemon, state: &str, from: u64, limit: u32) -> (Vec<String>, u64) {
    let reply = d.call(
        "ListTasksPage",
        &["stu", state, &from.to_string(), &limit.to_string()],
    );
    let ids = reply[0]
        .as_array()
        .expect("aa{sv}")
        .iter()
        .map(|t| json_dict(t)["id"].1.as_str().unwrap().to_string())
        .collect();
    (ids, reply[1].as_u64().expect("t"))
}

#[test]
fn daemon_list_tasks_page_walks_every_task_once_in_submission_order() {
    // More tasks than gpuctl asks for in one page (1,000), so that
    // `gpuctl tasks` needs two.
    const TASKS: usize = 1_005;
    let d = Daemon::start();
    let proxy = d.proxy();
    // In rounds of 100 calls in flight: a bus allows 128 pending replies
    // per connection.
    for start in (0..TASKS).step_by(100) {
        let submits: Vec<_> = (start..TASKS.min(start + 100))
            .map(|_| {
                let proxy = proxy.clone();
                d.spawn(async move {
                    let spec = crate::daemon::spec(1.0, 1.0, 1e9, 1.0);
                    proxy.submit(spec.to_dict()).await
                })
            })
            .collect();
        for s in submits {
            d.block_on(s).unwrap().expect("Submit");
        }
    }
    let all: Vec<String> = d.tasks().into_iter().map(|t| t.id).collect();
    assert_eq!(all.len(), TASKS);

    // Pages of 2 from the start, then from where each one stopped.
    assert_eq!(page(&d, "", 0, 2), (all[..2].to_vec(), 2));
    assert_eq!(page(&d, "", 2, 2), (all[2..4].to_vec(), 4));
    // The last page says nothing is left; a position past the end is empty.
    assert_eq!(page(&d, "", 1_000, 10), (all[1_000..].to_vec(), 0));
    assert_eq!(page(&d, "", 5_000, 10), (Vec::new(), 0));
    let (ids, _) = page(&d, "", 0, 10_000);
    assert_eq!(ids, all);

    // gpuctl reads every task, page by page, in the same order.
    let out = crate::daemon::gpuctl(&d, &["tasks", "--json"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let listed: Vec<serde_json::Value> = serde_json::from_slice(&out.stdout).unwrap();
    let listed: Vec<&str> = listed.iter().map(|t| t["id"].as_str().unwrap()).collect();
    assert_eq!(listed, all);
}

fn device_property(d: &Daemon, device: u32, name: &str) -> serde_json::Value {
    d.busctl_json(&[
        "get-property",
        AGENT[0],
        &format!("/org/gpuagent/Agent1/gpu/{device}"),
        "org.gpuagent.Device1",
        name,
    ])["data"]
        .clone()
}

#[test]
fn daemon_options_reach_the_task_and_its_devices() {
    let d = Daemon::start();
    // Runtimes that only the T4 (device 3) can finish, and every other option.
    let t1 = d.call(
        "Submit",
        &[
            "a{sv}",
            "9",
            "workload",
            "d",
            "1e6",
            "mem_gb",
            "d",
            "1",
            "deadline",
            "d",
            "60",
            "weight",
            "d",
            "1",
            "runtimes",
            "ad",
            "4",
            "inf",
            "inf",
            "inf",
            "1e5",
            "name",
            "s",
            "on the T4",
            "requeue",
            "b",
            "true",
            "env",
            "a{ss}",
            "1",
            "A",
            "b",
            "app",
            "s",
            "default",
        ],
    );
    assert_eq!(t1, vec![json!("t1")]);
    let task = json_dict(&d.call("GetTask", &["s", "t1"])[0]);
    assert_eq!(task["devices"], ("au".into(), json!([3])));
    assert_eq!(task["state"], ("s".into(), json!("running")));
    assert_eq!(task["name"], ("s".into(), json!("on the T4")));
    assert_eq!(task["requeue"], ("b".into(), json!(true)));
    assert_eq!(task["env"], ("a{ss}".into(), json!({"A": "b"})));
    // inf does not survive JSON; the contract reads it back.
    assert_eq!(
        d.task("t1").spec.runtimes,
        vec![f64::INFINITY, f64::INFINITY, f64::INFINITY, 1e5]
    );
    // The default profile is left out, like every option at its default.
    assert!(!task.contains_key("app"), "{task:?}");

    // The T4 shows the task, and (within a sampling period) the load.
    assert_eq!(device_property(&d, 3, "CurrentTask"), json!("t1"));
    crate::daemon::wait_for("the T4 to be busy", Duration::from_secs(5), || {
        (device_property(&d, 3, "Utilization") == json!(1.0)).then_some(())
    });
    assert_eq!(device_property(&d, 0, "Utilization"), json!(0.0));

    // A gang of two that only the A100s can hold runs on both at once.
    let t2 = d.call(
        "Submit",
        &[
            "a{sv}", "5", "workload", "d", "1e6", "mem_gb", "d", "35", "deadline", "d", "60",
            "weight", "d", "1", "gpus", "u", "2",
        ],
    );
    assert_eq!(t2, vec![json!("t2")]);
    let gang = d.task("t2");
    assert_eq!(gang.devices, vec![0, 1]);
    assert_eq!(gang.state, gpu_agent_dbus::TaskStatus::Running);
    for device in [0, 1] {
        crate::daemon::wait_for("the A100s to name the gang", Duration::from_secs(5), || {
            (device_property(&d, device, "CurrentTask") == json!("t2")).then_some(())
        });
    }

    // Cancelled, the devices are free again.
    for id in ["t1", "t2"] {
        d.call("Cancel", &["s", id]);
    }
    for device in [0, 1, 3] {
        crate::daemon::wait_for("the devices to be idle", Duration::from_secs(5), || {
            (device_property(&d, device, "CurrentTask") == json!("")
                && device_property(&d, device, "Utilization") == json!(0.0))
            .then_some(())
        });
    }
}
