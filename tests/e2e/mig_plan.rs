//! `gpuctl mig plan`: the spec's worked example through the real binary, the
//! files it writes, and plans it refuses.

use std::path::Path;

use crate::harness::{failure, gpuctl, success, write};

fn example() -> String {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap();
    root.join("examples/mig-plan.toml")
        .to_str()
        .unwrap()
        .to_string()
}

#[test]
fn mig_plan_solves_the_worked_example_and_writes_both_files() {
    let dir = tempfile::tempdir().unwrap();
    let yaml = dir.path().join("plan.yaml");
    let csv = dir.path().join("plan.csv");
    let out = gpuctl(&[
        "mig",
        "plan",
        &example(),
        "--out-config",
        yaml.to_str().unwrap(),
        "--out-assignment",
        csv.to_str().unwrap(),
        "--json",
    ]);
    let summary: serde_json::Value = serde_json::from_str(&success(&out)).unwrap();
    assert_eq!(summary["gpus"], 2);
    assert_eq!(summary["lower_bound"], 2);
    assert_eq!(summary["status"], "optimal");
    assert_eq!(summary["algorithm"], "exact");
    assert!(summary["solve_s"].as_f64().unwrap() >= 0.0);
    assert_eq!(
        summary["supply"],
        serde_json::json!({"resnet50": 400.0, "bert-large": 480.0, "llm-7b": 80.0})
    );
    assert_eq!(
        std::fs::read_to_string(&yaml).unwrap(),
        "version: v1\nmig-configs:\n  plan:\n  - devices: [0]\n    mig-enabled: true\n    mig-devices: {4g.20gb: 1, 3g.20gb: 1}\n  - devices: [1]\n    mig-enabled: true\n    mig-devices: {1g.5gb: 4, 3g.20gb: 1}\n"
    );
    let rows = std::fs::read_to_string(&csv).unwrap();
    assert!(
        rows.starts_with(
            "gpu,device,profile,start,job,throughput\n0,gpu/0/mig/0,4g.20gb,0,llm-7b,80\n"
        ),
        "{rows}"
    );
    assert_eq!(rows.lines().count(), 8);
}

#[test]
fn mig_plan_runs_every_algorithm_within_the_bound() {
    for algorithm in ["exact", "rounding", "greedy"] {
        let out = gpuctl(&[
            "mig",
            "plan",
            &example(),
            "--algorithm",
            algorithm,
            "--json",
        ]);
        let summary: serde_json::Value = serde_json::from_str(&success(&out)).unwrap();
        assert_eq!(summary["algorithm"], algorithm);
        let gpus = summary["gpus"].as_u64().unwrap();
        assert!(gpus >= summary["lower_bound"].as_u64().unwrap());
        if algorithm == "rounding" {
            assert_eq!(summary["rounding"]["within"], true);
        }
    }
}

#[test]
fn mig_plan_names_a_malformed_plan_and_writes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let text = std::fs::read_to_string(example()).unwrap();
    let bad = write(
        dir.path(),
        "bad.toml",
        &text.replace("demand = 480", "demand = -480"),
    );
    let yaml = dir.path().join("plan.yaml");
    let err = failure(&gpuctl(&[
        "mig",
        "plan",
        &bad,
        "--out-config",
        yaml.to_str().unwrap(),
    ]));
    assert!(
        err.contains("bad.toml:19: job[1].demand: expected a number > 0, got -480"),
        "{err}"
    );
    assert!(!yaml.exists());
}

#[test]
fn mig_plan_reports_an_infeasible_plan() {
    let dir = tempfile::tempdir().unwrap();
    let text = std::fs::read_to_string(example()).unwrap();
    let capped = write(
        dir.path(),
        "one.toml",
        &text.replace("max_gpus = 8", "max_gpus = 1"),
    );
    let out = gpuctl(&["mig", "plan", &capped, "--json"]);
    assert!(!out.status.success());
    let summary: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(summary["status"], "infeasible");
    assert!(
        summary["reason"]
            .as_str()
            .unwrap()
            .contains("max_gpus is 1"),
        "{summary}"
    );
}
