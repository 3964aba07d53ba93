//! `gpuctl dvfs` through the real binary: a fit written and read back, bad
//! measurements refused with file:line and nothing written, `show`, and the
//! paper's experiment with the agent's rule (no deadline misses).

use std::path::Path;

use serde_json::Value;

use crate::harness::{failure, gpuctl, success, write};

/// Three clock points of one application whose time and power follow the
/// model exactly (t0 1, D 10, δ 0.5; p0 100, γ 20, c 80), at base 1000/1000 MHz.
const EXACT: &str = "appName,coreF,memF,time/s,power/W\n\
    a,1000,1000,11,200\n\
    a,800,1000,12.25,149.5936\n\
    a,1000,800,12.25,196\n\
    a,800,800,13.5,145.5936\n";

#[test]
fn a_fit_is_written_and_reads_back() {
    let dir = tempfile::tempdir().unwrap();
    let csv = write(dir.path(), "m.csv", EXACT);
    let out_path = dir.path().join("apps.toml");
    let out = gpuctl(&[
        "dvfs",
        "fit",
        &csv,
        "--base-core",
        "1000",
        "--base-mem",
        "1000",
        "--out",
        out_path.to_str().unwrap(),
        "--json",
    ]);
    let report: Value = serde_json::from_str(&success(&out)).unwrap();
    let app = &report["apps"][0];
    for (key, want) in [
        ("t0", 1.0),
        ("d", 10.0),
        ("delta", 0.5),
        ("p0", 100.0),
        ("gamma", 20.0),
        ("c", 80.0),
    ] {
        let got = app[key].as_f64().unwrap();
        assert!((got - want).abs() < 1e-3, "{key}: {got}");
    }
    assert!(report["mean_mape_time"].as_f64().unwrap() < 1e-9);
    assert_eq!(report["time_unit"], "s");
    // The written file is a profile library `show` reads.
    let shown: Value = serde_json::from_str(&success(&gpuctl(&[
        "dvfs",
        "show",
        "a",
        "--apps",
        out_path.to_str().unwrap(),
        "--json",
    ])))
    .unwrap();
    assert!(shown["saving"].as_f64().unwrap() > 0.0);
    assert!(shown["optimum"]["energy_rel"].as_f64().unwrap() < 1.0);
}

#[test]
fn bad_measurements_are_refused_with_their_line_and_nothing_is_written() {
    let dir = tempfile::tempdir().unwrap();
    let out_path = dir.path().join("apps.toml");
    let out_arg = out_path.to_str().unwrap().to_string();
    let cases = [
        (
            EXACT.replace("12.25,149.5936", "-1,149.5936"),
            ":3: column time/s: expected a number > 0, got \"-1\"",
        ),
        (
            EXACT.replace(",power/W", ",watts"),
            ":1: missing column \"power/W\"",
        ),
        (
            EXACT.replace("a,800,800", "b,800,800"),
            ":5: application \"b\": 1 distinct clock points; the fit needs at least 3",
        ),
        (
            EXACT.replace("a,800,1000", "a,3000,1000"),
            ":3: column coreF: 3000 MHz is outside the GPU's range for base 1000 MHz (500 … 1500 MHz)",
        ),
    ];
    for (text, want) in cases {
        let csv = write(dir.path(), "m.csv", &text);
        let err = failure(&gpuctl(&[
            "dvfs",
            "fit",
            &csv,
            "--base-core",
            "1000",
            "--base-mem",
            "1000",
            "--out",
            &out_arg,
        ]));
        assert_eq!(err, format!("gpuctl: error: {csv}{want}\n"));
        assert!(!Path::new(&out_path).exists());
    }
}

#[test]
fn the_agent_rule_misses_no_deadline_in_the_paper_experiment() {
    let out = success(&gpuctl(&[
        "dvfs",
        "paper",
        "--gpus-per-server",
        "4",
        "--util",
        "0.4",
        "--sets",
        "2",
        "--json",
    ]));
    let r: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(r["dvfs"]["misses"].as_f64(), Some(0.0));
    assert_eq!(r["tasks"].as_u64(), Some(819));
    let saving = r["saving"].as_f64().unwrap();
    assert!(saving > 0.2 && saving < 0.4, "{saving}");
    let usage = failure(&gpuctl(&["dvfs", "paper", "--algo", "bin"]));
    assert_eq!(usage, "gpuctl: error: --algo bin: online only\n");
}
