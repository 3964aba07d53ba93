//! Round trips through the wire forms.

use std::collections::BTreeMap;

use super::*;

fn full_spec() -> SubmitSpec {
    SubmitSpec {
        workload: 12.5,
        mem_gb: 30.0,
        deadline: Some(600.0),
        weight: 2.0,
        gpus: 2,
        gpus_alt: vec![1, 4],
        app: "nbody".into(),
        runtimes: vec![10.0, f64::INFINITY],
        command: vec!["/bin/sh".into(), "-c".into(), "true".into()],
        env: BTreeMap::from([("A".into(), "b".into())]),
        name: "train".into(),
        requeue: true,
        client_token: "retry-key-1".into(),
        external_id: String::new(),
        workdir: "/home/alice/proj".into(),
        output: "out/%x-%t.log".into(),
        error: "%u-%%.err".into(),
        umask: Some(0o027),
    }
}

#[test]
fn spec_round_trips() {
    let spec = full_spec();
    assert_eq!(SubmitSpec::from_dict(&spec.to_dict()).unwrap(), spec);
    let minimal = SubmitSpec::new(1.0, 0.0, 0.0, 1.0);
    assert_eq!(minimal.to_dict().len(), 4);
    assert_eq!(SubmitSpec::from_dict(&minimal.to_dict()).unwrap(), minimal);
}

#[test]
fn every_key_may_be_left_out() {
    let spec = SubmitSpec::from_dict(&Dict::new()).unwrap();
    assert_eq!(spec, SubmitSpec::default());
    assert_eq!(
        (spec.workload, spec.mem_gb, spec.deadline, spec.weight),
        (DEFAULT_WORKLOAD, 0.0, None, 1.0)
    );
    // A task without a deadline is planned with the farthest one allowed.
    let task = spec.to_task(
        "t1".into(),
        5.0,
        4.0,
        gpu_agent_plugin_api::AppModel::builtin_default(),
    );
    assert_eq!(task.deadline, 4.0 + 1e9);
    // Only the given keys travel: what an older daemon reads as before.
    let command = SubmitSpec {
        command: vec!["true".into()],
        ..SubmitSpec::default()
    };
    let d = command.to_dict();
    let mut keys: Vec<&str> = d.keys().map(String::as_str).collect();
    keys.sort();
    assert_eq!(keys, ["command", "mem_gb", "weight", "workload"]);
}

#[test]
fn output_patterns_expand_from_the_working_directory() {
    let expand = |pattern, workdir| SubmitSpec::expand(pattern, workdir, "t12", "alice", "train");
    assert_eq!(expand("gpu-agent-%t.out", "/p"), "/p/gpu-agent-t12.out");
    assert_eq!(expand("logs/%x-%j.%u", "/p/"), "/p/logs/train-t12.alice");
    assert_eq!(expand("/var/tmp/100%%-%t", "/p"), "/var/tmp/100%-t12");
    let named = |name: &str, command: &[&str]| {
        SubmitSpec {
            name: name.into(),
            command: command.iter().map(|s| s.to_string()).collect(),
            ..SubmitSpec::default()
        }
        .display_name()
        .to_string()
    };
    assert_eq!(named("sweep", &["python3"]), "sweep");
    assert_eq!(named("", &["/usr/bin/python3", "x.py"]), "python3");
    assert_eq!(named("", &[]), "task");
}

#[test]
fn bad_paths_and_masks_are_named() {
    let with = |key: &str, v: OwnedValue| {
        let mut d = SubmitSpec::default().to_dict();
        d.insert("output".into(), task::owned("o"));
        d.insert(key.into(), v);
        SubmitSpec::from_dict(&d).unwrap_err()
    };
    assert_eq!(
        with("workdir", task::owned("proj")),
        "key \"workdir\": expected an absolute directory, got \"proj\""
    );
    assert_eq!(
        with("output", task::owned("%q.out")),
        "key \"output\": unknown escape \"%q\" in \"%q.out\"; the escapes are %t, %j, %u, %x, %%"
    );
    assert_eq!(
        with("error", task::owned("logs/")),
        "key \"error\": expected a file name, got the directory \"logs/\""
    );
    assert_eq!(
        with("output", task::owned("50%")),
        "key \"output\": unknown escape \"%\" in \"50%\"; the escapes are %t, %j, %u, %x, %%"
    );
    assert_eq!(
        with("umask", task::owned(0o1000u32)),
        "key \"umask\": expected a mode mask from 0 to 0777, got 01000"
    );
    let mut d = Dict::new();
    d.insert("error".into(), task::owned("e"));
    assert_eq!(
        SubmitSpec::from_dict(&d).unwrap_err(),
        "key \"error\": given without \"output\""
    );
}

#[test]
fn spec_refusals_name_the_key() {
    let base = SubmitSpec::new(1.0, 1.0, 60.0, 1.0).to_dict();
    let with = |key: &str, v: OwnedValue| {
        let mut d = base.clone();
        d.insert(key.into(), v);
        SubmitSpec::from_dict(&d).unwrap_err()
    };
    assert_eq!(
        with("workload", task::owned("ten")),
        "key \"workload\": expected type d (a number > 0), got s"
    );
    assert_eq!(
        with("gpus", task::owned(2i32)),
        "key \"gpus\": expected type u (an integer >= 1), got i"
    );
    assert_eq!(
        with("workload", task::owned(f64::NAN)),
        "key \"workload\": expected a number > 0, got NaN"
    );
    assert_eq!(
        with("deadline", task::owned(f64::INFINITY)),
        "key \"deadline\": expected a number >= 0, got inf"
    );
    assert_eq!(
        with("workload", task::owned(1e308)),
        "key \"workload\": expected at most 1e9 in magnitude (the cap on task values), got 1e308"
    );
    assert_eq!(
        with("runtimes", task::owned(vec![1.0, 1e300])),
        "key \"runtimes\": expected at most 1e9 in magnitude (the cap on task values), got 1e300"
    );
    assert_eq!(
        with("client_token", task::owned("x".repeat(257))),
        "key \"client_token\": expected at most 256 bytes without NUL, got 257 bytes"
    );
    assert_eq!(
        with("weight", task::owned(0.0)),
        "key \"weight\": expected a number > 0, got 0"
    );
    assert_eq!(
        with("gpus", task::owned(0u32)),
        "key \"gpus\": expected an integer >= 1, got 0"
    );
    assert!(with("colour", task::owned("red"))
        .starts_with("unknown key \"colour\"; the keys are workload, mem_gb,"));
    assert_eq!(
        with("runtimes", task::owned(vec![1.0, -1.0])),
        "key \"runtimes\": expected numbers > 0 or inf, got -1"
    );
}

#[test]
fn task_info_round_trips() {
    let info = TaskInfo {
        id: "t7".into(),
        state: TaskStatus::Succeeded,
        owner_uid: 1000,
        devices: vec![0, 2],
        submitted: 1.7e9,
        started: Some(1.7e9 + 1.0),
        finished: Some(1.7e9 + 5.0),
        exit_code: Some(0),
        energy_j: Some(1234.5),
        reason: None,
        spec: full_spec(),
        clocks: Some(crate::TaskClocks {
            core_mhz: 735,
            mem_mhz: 1215,
            v: 0.56,
            fc: 0.67,
            fm: 1.0,
            t: 1.5,
            p: 180.0,
            default_t: 1.0,
            default_p: 400.0,
            class: Some("deadline".into()),
            readjusted: Some(true),
        }),
        waiting: None,
    };
    assert_eq!(TaskInfo::from_dict(&info.to_dict()).unwrap(), info);
    let queued = TaskInfo {
        state: TaskStatus::Queued,
        devices: vec![],
        started: None,
        finished: None,
        exit_code: None,
        energy_j: None,
        reason: Some("why".into()),
        spec: SubmitSpec::new(1.0, 0.0, 1.0, 1.0),
        clocks: None,
        waiting: Some(crate::TaskWait {
            reason: "queued on GPU 1 behind t6".into(),
            expected_start: Some(1.7e9 + 60.0),
        }),
        ..info
    };
    let d = queued.to_dict();
    assert!(!d.contains_key("started") && d.contains_key("name"));
    assert_eq!(TaskInfo::from_dict(&d).unwrap(), queued);
    let unplanned = TaskInfo {
        waiting: Some(crate::TaskWait {
            reason: "GPU 2 offline (lost)".into(),
            expected_start: None,
        }),
        ..queued.clone()
    };
    let d = unplanned.to_dict();
    assert!(d.contains_key("waiting") && !d.contains_key("expected_start"));
    assert_eq!(TaskInfo::from_dict(&d).unwrap(), unplanned);
    // Its output files as the daemon stored them: no longer patterns.
    let expanded = TaskInfo {
        spec: SubmitSpec {
            output: "/p/100%-t7.out".into(),
            error: "/p/%q".into(),
            ..full_spec()
        },
        ..queued
    };
    assert_eq!(TaskInfo::from_dict(&expanded.to_dict()).unwrap(), expanded);
}

#[test]
fn redaction_keeps_keys_and_the_program_only() {
    let info = TaskInfo {
        id: "t1".into(),
        state: TaskStatus::Running,
        owner_uid: 0,
        devices: vec![0],
        submitted: 1.7e9,
        started: None,
        finished: None,
        exit_code: None,
        energy_j: None,
        reason: None,
        spec: SubmitSpec {
            env: BTreeMap::from([
                ("API_TOKEN".into(), "s3cret".into()),
                ("MODE".into(), "fast".into()),
            ]),
            ..full_spec()
        },
        clocks: None,
        waiting: None,
    };
    let shown = info.clone().redacted();
    assert_eq!(
        shown.spec.env,
        BTreeMap::from([
            ("API_TOKEN".into(), REDACTED.into()),
            ("MODE".into(), REDACTED.into()),
        ])
    );
    assert_eq!(shown.spec.command, ["/bin/sh", REDACTED, REDACTED]);
    // Everything else is as it was.
    let restored = TaskInfo {
        spec: SubmitSpec {
            env: info.spec.env.clone(),
            command: info.spec.command.clone(),
            ..shown.spec.clone()
        },
        ..shown
    };
    assert_eq!(restored, info);
}

#[test]
fn states_parse_by_name() {
    for s in TaskStatus::ALL {
        assert_eq!(TaskStatus::parse(s.as_str()).unwrap(), s);
    }
    assert_eq!(
        TaskStatus::parse("done").unwrap_err(),
        "unknown task state \"done\"; expected one of queued, assigned, running, succeeded, failed, cancelled, lost, rejected"
    );
}

#[test]
fn device_and_metrics_round_trip() {
    let dev = DeviceStatus {
        index: 3,
        uuid: "GPU-x".into(),
        name: "Tesla T4".into(),
        memory_gb: 16.0,
        speed: 0.25,
        core_clock_mhz: 585,
        mem_clock_mhz: 5001,
        power_w: 9.5,
        energy_j: 100.0,
        utilization: 0.0,
        memory_used_gb: 1.5,
        temperature_c: 41.0,
        mig_enabled: false,
        current_task: "".into(),
        online: false,
        health: "xid 79: GPU has fallen off the bus".into(),
        schedulable: true,
        parent: 3,
        mig_profile: "".into(),
        mig_placement: (0, 0),
    };
    assert_eq!(DeviceStatus::from_dict(&dev.to_dict()).unwrap(), dev);
    let mig = DeviceStatus {
        index: 9,
        uuid: "MIG-y".into(),
        parent: 1,
        mig_profile: "3g.20gb".into(),
        mig_placement: (4, 4),
        ..dev
    };
    assert_eq!(DeviceStatus::from_dict(&mig.to_dict()).unwrap(), mig);
    let m = gpu_agent_core::metrics::Metrics {
        policy: "fifo".into(),
        tasks: 3,
        rejected: vec![gpu_agent_core::metrics::Rejection {
            id: "a".into(),
            reason: "b".into(),
        }],
        twt: 1.0,
        twct: 2.0,
        act: 3.0,
        dmc: 1,
        dmr: 0.5,
        utilization: 0.25,
        makespan: 9.0,
        energy_j: 10.0,
        energy_run_j: 7.0,
        energy_idle_j: 3.0,
        energy_overhead_j: 0.0,
        energy_baseline_j: 12.5,
        energy_saving: 0.2,
    };
    assert_eq!(metrics_from_dict(&metrics_to_dict(&m)).unwrap(), m);
}
