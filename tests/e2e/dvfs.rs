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

/// `gpuctl trace gen dvfs-paper` and `gpuctl simulate` on its files give
/// exactly `gpuctl dvfs paper`'s energy on the same seed (one slot = 1 s).
#[test]
fn simulate_on_generated_files_agrees_with_dvfs_paper() {
    let dir = tempfile::tempdir().unwrap();
    let path = |name: &str| dir.path().join(name).to_str().unwrap().to_string();
    let (host, trace, apps) = (path("h.toml"), path("t.csv"), path("a.toml"));
    for (mode, util, l, params, paper) in [
        (
            "offline",
            "0.5",
            "4",
            vec!["--param", "theta=1", "--param", "compat=true"],
            vec!["--theta", "1", "--compat"],
        ),
        (
            "online",
            "0.2",
            "16",
            vec!["--param", "rule=bin-pack"],
            vec!["--algo", "bin"],
        ),
    ] {
        let gen = [
            "trace",
            "gen",
            "dvfs-paper",
            "--mode",
            mode,
            "--util",
            util,
            "--seed",
            "3",
            "--gpus-per-server",
            l,
            "--out-host",
            &host,
            "--out-trace",
            &trace,
            "--out-apps",
            &apps,
            "--json",
        ];
        let g: Value = serde_json::from_str(&success(&gpuctl(&gen))).unwrap();
        assert_eq!(
            g["servers"].as_u64(),
            Some(2048 / l.parse::<u64>().unwrap())
        );
        let mut sim = vec![
            "simulate", "--host", &host, "--trace", &trace, "--apps", &apps, "--policy", "edl",
            "--json",
        ];
        sim.extend(&params);
        let m: Value = serde_json::from_str(&success(&gpuctl(&sim))).unwrap();
        let mut run = vec![
            "dvfs",
            "paper",
            "--mode",
            mode,
            "--util",
            util,
            "--seed",
            "3",
            "--sets",
            "1",
            "--gpus-per-server",
            l,
            "--json",
        ];
        run.extend(&paper);
        let p: Value = serde_json::from_str(&success(&gpuctl(&run))).unwrap();
        let (d, n) = (&p["dvfs"], &p["no_dvfs"]);
        assert_eq!(m["tasks"], p["tasks"]);
        assert_eq!(m["energy_run_j"], d["run"], "{mode}");
        assert_eq!(m["energy_idle_j"], d["idle"], "{mode}");
        assert_eq!(m["energy_overhead_j"], d["overhead"], "{mode}");
        assert_eq!(m["energy_j"], d["total"], "{mode}");
        assert_eq!(m["energy_baseline_j"], n["total"], "{mode}");
        assert_eq!(m["energy_saving"], p["saving"], "{mode}");
        assert_eq!(m["dmc"].as_f64(), d["misses"].as_f64(), "{mode}");
        assert!(d["overhead"].as_f64().unwrap() > 0.0);
    }
    // Bad input writes nothing.
    let fresh = path("fresh.toml");
    let err = failure(&gpuctl(&[
        "trace",
        "gen",
        "dvfs-paper",
        "--mode",
        "offline",
        "--util",
        "0",
        "--seed",
        "1",
        "--out-host",
        &fresh,
        "--out-trace",
        &path("f.csv"),
        "--out-apps",
        &path("f2.toml"),
    ]));
    assert_eq!(
        err,
        "gpuctl: error: --util: expected a number in (0, 100], got 0\n"
    );
    assert!(!Path::new(&fresh).exists());
    // The node agent's reader refuses the cluster, naming the table.
    let err = failure(&gpuctl(&["inspect", "--mock", &host]));
    assert!(
        err.contains("h.toml:4: cluster: a cluster of servers is read only by `gpuctl simulate`"),
        "{err}"
    );
    let err = failure(&gpuctl(&[
        "simulate", "--host", &host, "--trace", &trace, "--apps", &apps, "--policy", "fifo",
    ]));
    assert!(err.contains("runs exactly one --policy edl"), "{err}");
}

/// `gpuctl dvfs show APP --apps APPS --search SEARCH ARGS`.
fn show(app: &str, apps: &Path, search: &str, args: &[&str]) -> String {
    let apps = apps.to_str().unwrap();
    let base = ["dvfs", "show", app, "--apps", apps, "--search", search];
    success(&gpuctl(&[&base[..], args].concat()))
}

#[test]
fn show_names_an_optimum_no_row_of_its_table_beats() {
    let examples = Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/dvfs");
    let mut beaten = 0;
    for file in ["gtx1080ti-apps.toml", "rtx2070super-apps.toml"] {
        let apps = examples.join(file);
        let text = std::fs::read_to_string(&apps).unwrap();
        let names = text
            .lines()
            .filter_map(|l| l.strip_prefix("name = \""))
            .map(|n| n.trim_end_matches('"'));
        for app in names {
            for search in ["code", "paper"] {
                let shown: Value =
                    serde_json::from_str(&show(app, &apps, search, &["--json"])).unwrap();
                let energy = |p: &Value| p["energy"].as_f64().unwrap();
                let least = energy(&shown["least_energy"]);
                let rows = shown["trade_off"].as_array().unwrap();
                let lowest = rows.iter().map(energy).fold(f64::INFINITY, f64::min);
                let optimum = energy(&shown["optimum"]);
                assert!(
                    least <= lowest && least <= optimum,
                    "{app} {search}: {shown}"
                );
                if lowest < optimum {
                    beaten += 1;
                    assert_eq!(least, lowest, "{app} {search}: {shown}");
                } else {
                    assert_eq!(shown["least_energy"], shown["optimum"], "{app} {search}");
                }
            }
        }
    }
    // The code search's optimum (V up to 1.10) is beaten by a row (V up to
    // 1.25) for these many applications of the two GPUs.
    assert!(beaten > 0);

    // The text names both, and the chart's legend says which is which.
    let dir = tempfile::tempdir().unwrap();
    let chart = dir.path().join("mm.svg");
    let apps = examples.join("gtx1080ti-apps.toml");
    let text = show(
        "matrixMulGlobal",
        &apps,
        "code",
        &["--chart", chart.to_str().unwrap()],
    );
    assert!(
        text.starts_with(
            "matrixMulGlobal (code search): optimum V 1.1000, fc 1.0477, fm 0.5000 \n  \
             time 35.6898 (-4.0%), power 273.75 W, energy 9770.0412 (6.9% saved against default clocks)\n\
             exact optimum over the settings of the table below (less energy than the search's \
             optimum above, found on a shorter grid): V 1.1500, fc 1.0701, fm 0.5000 \n  \
             time 35.0387 (-5.8%), power 278.43 W, energy 9755.8583 (7.0% saved against default clocks)\n\n"
        ),
        "{text}"
    );
    let svg = std::fs::read_to_string(&chart).unwrap();
    for label in [
        "least energy under a time bound (the table's rows)",
        "the search's optimum",
        "exact optimum over the table's settings",
    ] {
        let label = label.replace('\'', "&apos;");
        assert!(svg.contains(&format!(">\n{label}\n<")), "{label}: {svg}");
    }
}
