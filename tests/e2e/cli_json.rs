//! `--json` on every gpuctl command that prints data: through the real
//! binaries, each one's standard output parses as JSON (one object a line
//! where the command streams) and says what the command is about.
//!
//! The commands without `--json` are listed, with why, in gpuctl's
//! `commands::tests::WITHOUT_JSON`; `demo` and `trace import` are checked in
//! `demo.rs` and `import.rs`, which run them on their own inputs.

use std::io::{BufRead, BufReader};
use std::process::{Command, Output, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use serde_json::Value;

use crate::daemon::{gpuctl, Daemon, Settings};
use crate::harness::{self, artefacts, success, Sim};

const LIMIT: Duration = Duration::from_secs(20);

/// Standard output of a successful run, as one JSON value.
fn json(out: &Output) -> Value {
    let text = success(out);
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("not JSON ({e}):\n{text}"))
}

/// The repository's `examples/NAME`.
fn example(name: &str) -> String {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    root.join("examples")
        .join(name)
        .to_str()
        .expect("utf-8 path")
        .to_string()
}

#[test]
fn every_daemon_command_prints_json() {
    let d = Daemon::start_with(Settings {
        time_scale: 1.0,
        ..Settings::default()
    });
    let work = tempfile::tempdir().unwrap();

    let adopted = json(&gpuctl(
        &d,
        &[
            "adopt",
            "--devices",
            "3",
            "--external-id",
            "slurm:7",
            "--owner-uid",
            "0",
            "--deadline",
            "2h",
            "--json",
        ],
    ));
    let adopted = adopted["id"].as_str().expect("adopt: id").to_string();
    // Three GPUs are free: three tasks run, the fourth waits.
    let ids: Vec<String> = (0..4)
        .map(|_| {
            let out = json(&gpuctl(&d, &["submit", "--time", "1h", "--json"]));
            out["id"].as_str().expect("submit: id").to_string()
        })
        .collect();

    let status = json(&gpuctl(&d, &["status", "--json"]));
    assert_eq!(status["policy"], "fifo", "{status}");
    assert_eq!(status["devices"], 4, "{status}");
    let devices = json(&gpuctl(&d, &["devices", "--json"]));
    assert_eq!(devices.as_array().map(Vec::len), Some(4), "{devices}");
    let top = json(&gpuctl(&d, &["top", "--json"]));
    assert_eq!(top["policy"], "fifo", "{top}");
    assert_eq!(top["devices"].as_array().map(Vec::len), Some(4), "{top}");
    assert_eq!(top["tasks"].as_array().map(Vec::len), Some(5), "{top}");
    assert!(top["time"].as_f64().is_some(), "{top}");
    let tasks = json(&gpuctl(&d, &["tasks", "--json"]));
    assert_eq!(tasks.as_array().map(Vec::len), Some(5), "{tasks}");
    let task = json(&gpuctl(&d, &["task", &ids[0], "--json"]));
    assert_eq!(task["id"], ids[0].as_str(), "{task}");
    let metrics = json(&gpuctl(&d, &["metrics", "--json"]));
    assert!(metrics.is_object(), "{metrics}");

    let list = json(&gpuctl(&d, &["policy", "list", "--json"]));
    assert!(
        list.as_array()
            .expect("policy list: an array")
            .iter()
            .any(|p| p["name"] == "fifo" && p["active"] == true),
        "{list}"
    );
    let shown = json(&gpuctl(&d, &["policy", "show", "fifo", "--json"]));
    assert_eq!(shown["name"], "fifo", "{shown}");
    let used = json(&gpuctl(&d, &["policy", "use", "fifo", "--json"]));
    assert_eq!(
        used,
        serde_json::json!({"policy": "fifo", "params": {}, "was": "fifo", "moved": 1})
    );
    let reloaded = json(&gpuctl(&d, &["reload", "--json"]));
    assert!(
        reloaded["policies"]
            .as_array()
            .expect("reload: policies")
            .iter()
            .any(|p| p["name"] == "fifo"),
        "{reloaded}"
    );
    assert_eq!(reloaded["pending"], serde_json::json!([]), "{reloaded}");

    let layouts = json(&gpuctl(&d, &["mig", "show", "--json"]));
    assert_eq!(layouts.as_array().map(Vec::len), Some(4), "{layouts}");
    let exported = json(&gpuctl(&d, &["mig", "export", "--json"]));
    assert!(exported.is_object(), "{exported}");
    let yaml = success(&gpuctl(&d, &["mig", "export"]));
    let file = harness::write(work.path(), "current.yaml", &yaml);
    let valid = json(&gpuctl(
        &d,
        &["mig", "assert", "-f", &file, "--valid-config", "--json"],
    ));
    assert_eq!(
        valid,
        serde_json::json!({"config": "current", "valid": true})
    );
    let asserted = json(&gpuctl(&d, &["mig", "assert", "-f", &file, "--json"]));
    assert_eq!(
        asserted,
        serde_json::json!({"config": "current", "matches": true, "differences": []})
    );
    // Nothing to change: no step, so no line (the note goes to stderr).
    let applied = gpuctl(&d, &["mig", "apply", "-f", &file, "--json"]);
    assert_eq!(success(&applied), "");
    assert!(
        String::from_utf8_lossy(&applied.stderr).contains("already as configuration current"),
        "{}",
        String::from_utf8_lossy(&applied.stderr)
    );

    // One task cancelled, one unknown: both in the array, exit status 4.
    let cancelled = gpuctl(&d, &["cancel", &ids[3], "t999", "--json"]);
    assert_eq!(cancelled.status.code(), Some(4));
    let outcomes: Value = serde_json::from_slice(&cancelled.stdout).expect("cancel: JSON");
    assert_eq!(outcomes[0]["id"], ids[3].as_str(), "{outcomes}");
    assert_eq!(outcomes[0]["cancelled"], true, "{outcomes}");
    assert_eq!(outcomes[0]["error"], Value::Null, "{outcomes}");
    assert_eq!(outcomes[1]["id"], "t999", "{outcomes}");
    assert_eq!(outcomes[1]["cancelled"], false, "{outcomes}");
    assert!(
        outcomes[1]["error"]
            .as_str()
            .is_some_and(|e| e.contains("NoSuchTask")),
        "{outcomes}"
    );

    let released = json(&gpuctl(&d, &["release", &adopted, "--json"]));
    assert_eq!(released["external_id"], "slurm:7", "{released}");

    // watch: one object a line. It may subscribe after a submission, so
    // submit until a line comes.
    let mut watch = Command::new(artefacts().join("gpuctl"))
        .args(["watch", "--json", "--session"])
        .env("DBUS_SESSION_BUS_ADDRESS", d.address())
        .stdout(Stdio::piped())
        .spawn()
        .expect("run gpuctl watch");
    let stdout = watch.stdout.take().expect("piped stdout");
    let (lines, got) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            if lines.send(line).is_err() {
                break;
            }
        }
    });
    let line = crate::daemon::wait_for("a line from gpuctl watch --json", LIMIT, || {
        json(&gpuctl(&d, &["submit", "--time", "1h", "--json"]));
        got.recv_timeout(Duration::from_millis(200)).ok()
    });
    watch.kill().expect("stop gpuctl watch");
    watch.wait().expect("reap gpuctl watch");
    let change: Value = serde_json::from_str(&line).expect("watch: a JSON line");
    assert!(change["id"].as_str().is_some_and(|id| id.starts_with('t')));
    assert!(change["state"].as_str().is_some(), "{change}");
    assert!(change["time"].as_f64().is_some(), "{change}");
}

#[test]
fn every_offline_command_prints_json() {
    let work = tempfile::tempdir().unwrap();
    let path = |name: &str| work.path().join(name).to_str().unwrap().to_string();

    let sim = Sim::new(
        &[harness::FIFO],
        &std::fs::read_to_string(example("host.toml")).unwrap(),
        &std::fs::read_to_string(example("trace.csv")).unwrap(),
    );
    let metrics = json(&sim.run(&["--policy", "fifo", "--json"]));
    assert!(metrics.is_object(), "{metrics}");
    let inspected = json(&harness::gpuctl(&[
        "inspect",
        "--mock",
        &example("host.toml"),
        "--json",
    ]));
    assert!(inspected.is_array() || inspected.is_object(), "{inspected}");
    let fitted = json(&harness::gpuctl(&[
        "dvfs",
        "fit",
        &example("dvfs/gtx1080ti-dvfs-measurements.csv"),
        "--base-core",
        "1800",
        "--base-mem",
        "5000",
        "--out",
        &path("apps.toml"),
        "--json",
    ]));
    assert!(fitted["apps"].is_array(), "{fitted}");
    let shown = json(&harness::gpuctl(&[
        "dvfs",
        "show",
        "matrixMulGlobal",
        "--apps",
        &example("dvfs/gtx1080ti-apps.toml"),
        "--json",
    ]));
    assert!(shown["optimum"].is_object(), "{shown}");
    let paper = json(&harness::gpuctl(&[
        "dvfs",
        "paper",
        "--gpus-per-server",
        "4",
        "--util",
        "0.4",
        "--sets",
        "1",
        "--json",
    ]));
    assert!(paper["saving"].as_f64().is_some(), "{paper}");
    let generated = json(&harness::gpuctl(&[
        "trace",
        "gen",
        "dvfs-paper",
        "--mode",
        "offline",
        "--util",
        "0.4",
        "--seed",
        "1",
        "--gpus-per-server",
        "4",
        "--out-host",
        &path("h.toml"),
        "--out-trace",
        &path("t.csv"),
        "--out-apps",
        &path("a.toml"),
        "--json",
    ]));
    assert!(generated["servers"].as_u64().is_some(), "{generated}");
    let plan = json(&harness::gpuctl(&[
        "mig",
        "plan",
        &example("mig-plan.toml"),
        "--json",
    ]));
    assert_eq!(plan["status"], "optimal", "{plan}");
}
