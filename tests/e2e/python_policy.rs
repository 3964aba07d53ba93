//! The `python` policy plugin in `gpuctl simulate`: examples/policies/fifo.py
//! schedules exactly as the Rust `fifo` does, byte for byte, on the example
//! trace (whole GPUs and MIG instances) and on 10,000 tasks; a module's
//! exception is a policy fault whose reason is its traceback; a module that
//! cannot be loaded refuses the policy; docs/policies.md's example policy
//! runs. Skipped, saying so, where the plugin
//! cannot be built (no python3-dev).

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use crate::harness::{
    failure, gpuctl, plugin_dir, python_plugin, success, write, FIFO, GREEDY_EFT, PYTHON,
};

/// A file of the repository, by its path from the root.
fn repo(path: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("workspace root")
        .join(path)
}

/// `path` as a command-line argument.
fn arg(path: &Path) -> &str {
    path.to_str().expect("utf-8 path")
}

/// A trace of `n` tasks for examples/host.toml (2.85 work units per second):
/// arrivals about 2 s apart (load about 0.9, so queues grow and drain),
/// workloads from 0.5 to 24 units, memory that fits every GPU, the V100 and
/// the A100s, or only the A100s, one task in ten a gang of 2 and one in 500
/// too big for every GPU (rejected). Seeded, the same at every run.
fn trace(n: usize) -> String {
    let mut state: u64 = 0x9e37_79b9_7f4a_7c15;
    let mut next = move || {
        // xorshift64*: uniform in [0, 1).
        state ^= state >> 12;
        state ^= state << 25;
        state ^= state >> 27;
        (state.wrapping_mul(0x2545_f491_4f6c_dd1d) >> 11) as f64 / (1u64 << 53) as f64
    };
    let mut text = String::from("id,arrival,workload,mem_gb,deadline,weight,gpus\n");
    let mut arrival = 0.0;
    for i in 0..n {
        arrival += -2.0 * (1.0 - next()).ln();
        let workload = 0.5 + 23.5 * next() * next();
        let mem = match (next() * 3.0) as u32 {
            0 => 1.0 + 15.0 * next(),
            1 => 16.0 + 16.0 * next(),
            _ => 32.0 + 8.0 * next(),
        };
        let mem = if i % 500 == 499 { 64.0 } else { mem };
        let gpus = if next() < 0.1 { 2 } else { 1 };
        let deadline = arrival + workload * (1.5 + 3.0 * next());
        let weight = 1 + (next() * 4.0) as u32;
        writeln!(
            text,
            "t{i},{arrival:.3},{workload:.3},{mem:.1},{deadline:.3},{weight},{gpus}"
        )
        .expect("write to a string");
    }
    text
}

/// The schedule `gpuctl simulate --schedule` writes for `policy` (with
/// `params`) on `host` and `trace`.
fn schedule(plugins: &Path, host: &str, trace: &str, policy: &str, params: &[&str]) -> Vec<u8> {
    let out_dir = tempfile::tempdir().expect("temp dir");
    let out = out_dir.path().join("schedule.csv");
    let mut args = vec![
        "simulate",
        "--host",
        host,
        "--trace",
        trace,
        "--policy",
        policy,
        "--schedule",
        arg(&out),
        "--plugin-dir",
        arg(plugins),
    ];
    for p in params {
        args.extend(["--param", p]);
    }
    success(&gpuctl(&args));
    std::fs::read(&out).expect("the schedule file")
}

#[test]
fn python_fifo_schedules_byte_for_byte_as_the_rust_fifo() {
    if !python_plugin("python_fifo_schedules_byte_for_byte_as_the_rust_fifo") {
        return;
    }
    let plugins = plugin_dir(&[FIFO, PYTHON]);
    let work = tempfile::tempdir().expect("temp dir");
    let big = write(work.path(), "trace.csv", &trace(10_000));
    let module = format!("python:module={}", arg(&repo("examples/policies/fifo.py")));
    let cases = [
        (
            "examples/host.toml",
            arg(&repo("examples/trace.csv")).to_string(),
            23,
        ),
        (
            "examples/host-mig.toml",
            arg(&repo("examples/trace.csv")).to_string(),
            23,
        ),
        ("examples/host.toml", big, 9_980),
    ];
    for (host, trace, started) in cases {
        let host = repo(host);
        let rust = schedule(plugins.path(), arg(&host), &trace, "fifo", &[]);
        let python = schedule(plugins.path(), arg(&host), &trace, "python", &[&module]);
        // A row per device a task ran on: a gang has several.
        let text = String::from_utf8(rust.clone()).expect("a UTF-8 schedule");
        let ids: std::collections::BTreeSet<&str> = text
            .lines()
            .skip(1)
            .filter_map(|row| row.split(',').next())
            .collect();
        assert_eq!(
            ids.len(),
            started,
            "{host:?} {trace}: every task but the rejected ones"
        );
        assert!(
            rust == python,
            "{host:?} {trace}: the Python FIFO's schedule differs from the Rust one's"
        );
    }
}

#[test]
fn python_exception_is_a_policy_fault_with_its_traceback() {
    if !python_plugin("python_exception_is_a_policy_fault_with_its_traceback") {
        return;
    }
    let plugins = plugin_dir(&[FIFO, PYTHON]);
    let work = tempfile::tempdir().expect("temp dir");
    // Python's own extension modules (decimal's _decimal, json's _json)
    // import in the interpreter the plugin starts.
    let module = write(
        work.path(),
        "third.py",
        "import decimal, json\n\
         print('loaded')\n\
         calls = 0\n\
         def on_event(view, event):\n    \
             global calls\n    \
             calls += 1\n    \
             if calls == 3:\n        \
                 raise ValueError(json.dumps(str(decimal.Decimal('1.50') * 2)))\n    \
             return []\n",
    );
    let host = repo("examples/host.toml");
    let trace = repo("examples/trace.csv");
    let param = format!("module={module}");
    let out = gpuctl(&[
        "simulate",
        "--host",
        arg(&host),
        "--trace",
        arg(&trace),
        "--policy",
        "python",
        "--param",
        &param,
        "--plugin-dir",
        arg(plugins.path()),
        "--json",
    ]);
    let metrics: serde_json::Value = serde_json::from_str(&success(&out)).expect("JSON");
    // The built-in FIFO order ran every task after the fault.
    assert_eq!(metrics["tasks"], 24);
    let stderr = String::from_utf8(out.stderr).expect("UTF-8 stderr");
    // print() went to stderr, not into the JSON on stdout.
    let expected = format!(
        "loaded\ngpuctl: warn: policy python failed: {module}: on_event raised Traceback (most recent call last):\n  \
         File \"{module}\", line 8, in on_event\n    \
         raise ValueError(json.dumps(str(decimal.Decimal('1.50') * 2)))\n\
         ValueError: \"3.00\"; continuing with the built-in FIFO order\n"
    );
    assert_eq!(stderr, expected);
}

#[test]
fn python_module_that_cannot_be_loaded_refuses_the_policy() {
    if !python_plugin("python_module_that_cannot_be_loaded_refuses_the_policy") {
        return;
    }
    let plugins = plugin_dir(&[PYTHON]);
    let work = tempfile::tempdir().expect("temp dir");
    let syntax = write(
        work.path(),
        "syntax.py",
        "def on_event(view, event)\n    return []\n",
    );
    let host = repo("examples/host.toml");
    let trace = repo("examples/trace.csv");
    let run = |params: &[&str]| {
        let mut args = vec![
            "simulate",
            "--host",
            arg(&host),
            "--trace",
            arg(&trace),
            "--policy",
            "python",
            "--plugin-dir",
            arg(plugins.path()),
        ];
        for p in params {
            args.extend(["--param", p]);
        }
        failure(&gpuctl(&args))
    };
    assert_eq!(
        run(&[]),
        "gpuctl: error: policy python: module: a Python file is required (--param module=PATH)\n"
    );
    assert_eq!(
        run(&["module=/nonexistent/fifo.py"]),
        "gpuctl: error: policy python: module: cannot read /nonexistent/fifo.py: \
         No such file or directory (os error 2)\n"
    );
    let param = format!("module={syntax}");
    let error = run(&[&param]);
    assert!(
        error.starts_with(&format!(
            "gpuctl: error: policy python: module {syntax}:   File \"{syntax}\", line 1\n    \
             def on_event(view, event)\n"
        )) && error.ends_with("SyntaxError: expected ':'\n"),
        "{error}"
    );
}

#[test]
fn python_policy_of_the_docs_runs() {
    if !python_plugin("python_policy_of_the_docs_runs") {
        return;
    }
    let docs = std::fs::read_to_string(repo("docs/policies.md")).expect("docs/policies.md");
    let (_, python) = docs.split_once("## python").expect("the python section");
    let (_, block) = python.split_once("```python\n").expect("a python block");
    let (source, _) = block.split_once("```").expect("the block's end");
    let plugins = plugin_dir(&[PYTHON]);
    let work = tempfile::tempdir().expect("temp dir");
    let module = format!("module={}", write(work.path(), "shortest.py", source));
    let host = repo("examples/host.toml");
    let trace = repo("examples/workload.csv");
    let out = gpuctl(&[
        "simulate",
        "--host",
        arg(&host),
        "--trace",
        arg(&trace),
        "--policy",
        "python",
        "--param",
        &module,
        "--plugin-dir",
        arg(plugins.path()),
        "--json",
    ]);
    let metrics: serde_json::Value = serde_json::from_str(&success(&out)).expect("JSON");
    assert_eq!(String::from_utf8_lossy(&out.stderr), "", "no fault");
    assert_eq!(metrics["tasks"], 200);
    assert_eq!(metrics["rejected"], serde_json::json!([]));
}

#[test]
fn python_wspt_against_greedy_eft_as_the_docs_say() {
    if !python_plugin("python_wspt_against_greedy_eft_as_the_docs_say") {
        return;
    }
    let plugins = plugin_dir(&[GREEDY_EFT, PYTHON]);
    let work = tempfile::tempdir().expect("temp dir");
    let mut instances = Vec::new();
    for seed in ["1", "2", "3"] {
        let host = work.path().join(format!("h{seed}.toml"));
        let trace = work.path().join(format!("t{seed}.csv"));
        let status = std::process::Command::new("python3")
            .arg(repo("evidence/gen_random.py"))
            .args([seed, arg(&host), arg(&trace)])
            .status()
            .expect("run evidence/gen_random.py");
        assert!(status.success());
        instances.push((host, trace));
    }
    instances.push((repo("examples/host.toml"), repo("examples/workload.csv")));
    let module = format!("module={}", arg(&repo("examples/policies/wspt.py")));
    // (twt, twct, late tasks, makespan) as docs/policies.md's table has them.
    let metrics = |host: &Path, trace: &Path, policy: &[&str]| {
        let mut args = vec![
            "simulate",
            "--host",
            arg(host),
            "--trace",
            arg(trace),
            "--plugin-dir",
            arg(plugins.path()),
            "--json",
        ];
        args.extend(policy);
        let m: serde_json::Value = serde_json::from_str(&success(&gpuctl(&args))).expect("JSON");
        let f = |k: &str| format!("{:.1}", m[k].as_f64().expect("a number"));
        (f("twt"), f("twct"), m["dmc"].to_string(), f("makespan"))
    };
    let got: Vec<_> = instances
        .iter()
        .map(|(h, t)| {
            (
                metrics(h, t, &["--policy", "greedy-eft"]),
                metrics(h, t, &["--policy", "python", "--param", &module]),
            )
        })
        .collect();
    let row = |twt: &str, twct: &str, late: &str, makespan: &str| {
        (
            twt.to_string(),
            twct.to_string(),
            late.to_string(),
            makespan.to_string(),
        )
    };
    assert_eq!(
        got,
        [
            (
                row("1990.8", "14779.2", "97", "1727.4"),
                row("908.9", "13083.5", "50", "1727.0")
            ),
            (
                row("914.9", "12251.6", "63", "1688.2"),
                row("496.7", "11250.8", "41", "1752.5")
            ),
            (
                row("1917.5", "14482.2", "100", "1654.4"),
                row("930.8", "13200.1", "66", "1654.4")
            ),
            (
                row("468.9", "3256.2", "58", "626.1"),
                row("454.4", "3198.8", "51", "626.1")
            ),
        ]
    );
}
