//! `gpuctl simulate` as a user meets it: outputs, bad input, the bundled example.

use std::path::Path;

use crate::harness::{self, failure, gpuctl, success, write, FIFO, GREEDY_EFT};

const TRACE_HEAD: &str = "id,arrival,workload,mem_gb,deadline,weight\n";

struct Case {
    dir: tempfile::TempDir,
    plugins: tempfile::TempDir,
    host: String,
}

impl Case {
    fn new() -> Case {
        let dir = tempfile::tempdir().unwrap();
        let host = write(
            dir.path(),
            "host.toml",
            "[[gpu]]\nmodel = \"T4\"\ncount = 2\nspeed = 1\n",
        );
        Case {
            plugins: harness::plugin_dir(&[FIFO, GREEDY_EFT]),
            dir,
            host,
        }
    }

    fn trace(&self, rows: &str) -> String {
        write(self.dir.path(), "trace.csv", &format!("{TRACE_HEAD}{rows}"))
    }

    fn schedule(&self) -> String {
        self.dir
            .path()
            .join("out.csv")
            .to_str()
            .unwrap()
            .to_string()
    }

    fn simulate(&self, trace: &str, extra: &[&str]) -> std::process::Output {
        let mut args = vec!["simulate", "--host", &self.host, "--trace", trace];
        args.extend_from_slice(extra);
        args.extend_from_slice(&["--plugin-dir", self.plugins.path().to_str().unwrap()]);
        gpuctl(&args)
    }
}

#[test]
fn a_bad_trace_row_is_named_and_nothing_is_written() {
    let case = Case::new();
    let trace = case.trace("a,0,1,1,5,1\nb,0,abc,1,5,1\n");
    let out = case.simulate(
        &trace,
        &["--policy", "fifo", "--schedule", &case.schedule()],
    );
    assert_eq!(
        failure(&out),
        format!("gpuctl: error: {trace}:3: column workload: expected a number > 0, got \"abc\"\n")
    );
    assert!(!Path::new(&case.schedule()).exists());
}

#[test]
fn a_bad_host_file_is_named_and_nothing_is_written() {
    let case = Case::new();
    let host = write(
        case.dir.path(),
        "bad-host.toml",
        "[[gpu]]\nmodel = \"T4\"\nspeed = \"fast\"\n",
    );
    let trace = case.trace("a,0,1,1,5,1\n");
    let schedule = case.schedule();
    let out = gpuctl(&[
        "simulate",
        "--host",
        &host,
        "--trace",
        &trace,
        "--policy",
        "fifo",
        "--schedule",
        &schedule,
    ]);
    let stderr = failure(&out);
    assert!(
        stderr.starts_with(&format!(
            "gpuctl: error: {host}:3: invalid type: string \"fast\", expected f64"
        )),
        "{stderr}"
    );
    assert!(!Path::new(&schedule).exists());
}

#[test]
fn usage_errors_say_what_is_wrong() {
    let case = Case::new();
    let trace = case.trace("a,0,1,1,5,1\n");
    let two = case.simulate(
        &trace,
        &[
            "--policy",
            "fifo",
            "--policy",
            "greedy-eft",
            "--schedule",
            &case.schedule(),
        ],
    );
    assert_eq!(
        failure(&two),
        "gpuctl: error: --schedule needs exactly one --policy (got 2)\n"
    );
    let param = case.simulate(&trace, &["--policy", "fifo", "--param", "seed=3"]);
    assert_eq!(
        failure(&param),
        "gpuctl: error: --param seed: none of the selected policies takes it\n"
    );
    let unknown = case.simulate(&trace, &["--policy", "fifo", "--policy", "annealing"]);
    assert_eq!(
        failure(&unknown),
        "gpuctl: error: unknown policy \"annealing\"; available: fifo, greedy-eft\n"
    );
    let missing = gpuctl(&[
        "simulate",
        "--host",
        &case.host,
        "--trace",
        "/nonexistent/trace.csv",
        "--policy",
        "fifo",
    ]);
    assert!(failure(&missing).starts_with("gpuctl: error: /nonexistent/trace.csv: cannot read:"));
}

#[test]
fn json_is_an_object_for_one_policy_and_an_array_in_order_for_several() {
    let case = Case::new();
    let trace = case.trace("a,0,4,1,5,1\n");
    let one: serde_json::Value = serde_json::from_str(&success(
        &case.simulate(&trace, &["--policy", "fifo", "--json"]),
    ))
    .unwrap();
    assert_eq!(one["policy"], "fifo");
    let keys: Vec<_> = one.as_object().unwrap().keys().cloned().collect();
    let mut expected = vec![
        "act",
        "dmc",
        "dmr",
        "energy_j",
        "makespan",
        "policy",
        "rejected",
        "tasks",
        "twct",
        "twt",
        "utilization",
    ];
    expected.sort();
    assert_eq!(keys, expected);
    let many: serde_json::Value = serde_json::from_str(&success(&case.simulate(
        &trace,
        &["--policy", "greedy-eft", "--policy", "fifo", "--json"],
    )))
    .unwrap();
    let order: Vec<_> = many
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["policy"].as_str().unwrap())
        .collect();
    assert_eq!(order, vec!["greedy-eft", "fifo"]);
}

#[test]
fn the_table_has_one_column_per_policy() {
    let case = Case::new();
    let trace = case.trace("a,0,4,1,5,1\nb,0,2,1,1,3\n");
    let table = success(&case.simulate(&trace, &["--policy", "fifo", "--policy", "greedy-eft"]));
    let lines: Vec<_> = table.lines().collect();
    assert_eq!(
        lines[0].split_whitespace().collect::<Vec<_>>(),
        vec!["policy", "fifo", "greedy-eft"]
    );
    // b (w=3) finishes at 2 against a deadline of 1 under both: twt = 3.
    assert_eq!(
        lines[3].split_whitespace().collect::<Vec<_>>(),
        vec!["twt", "3.000", "3.000"]
    );
}

#[test]
fn the_bundled_example_runs_as_the_readme_says() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap();
    let host = root.join("examples/host.toml");
    let trace = root.join("examples/trace.csv");
    let case = Case::new();
    let out = gpuctl(&[
        "simulate",
        "--host",
        host.to_str().unwrap(),
        "--trace",
        trace.to_str().unwrap(),
        "--policy",
        "fifo",
        "--policy",
        "greedy-eft",
        "--json",
        "--plugin-dir",
        case.plugins.path().to_str().unwrap(),
    ]);
    let metrics: serde_json::Value = serde_json::from_str(&success(&out)).unwrap();
    for m in metrics.as_array().unwrap() {
        assert_eq!(m["tasks"], 24);
        assert_eq!(m["rejected"][0]["id"], "job20");
    }
}
