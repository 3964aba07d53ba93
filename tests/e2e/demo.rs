//! `gpuctl demo`: a real gpu-agentd on a private bus, a small workload
//! submitted through D-Bus, and nothing left running afterwards.

use std::path::Path;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use crate::harness::{artefacts, gpuctl, success, write};

const HOST: &str = "[[gpu]]\nmodel = \"A100-SXM4-40GB\"\ncount = 2\nspeed = 1.0\n\n\
                    [[gpu]]\nmodel = \"T4\"\nspeed = 0.25\n";

/// 20 tasks over 20 model seconds; two of them gangs, two that fit only the A100s.
fn trace() -> String {
    let mut text = String::from("id,arrival,workload,mem_gb,deadline,weight,gpus\n");
    for i in 0..20 {
        let arrival = i as f64;
        let workload = 1.0 + (i % 5) as f64;
        let mem = if i % 7 == 3 { 30.0 } else { 4.0 };
        let gpus = if i % 9 == 4 { 2 } else { 1 };
        let deadline = arrival + 3.0 * workload;
        let weight = 1 + i % 3;
        text.push_str(&format!(
            "t{i:02},{arrival},{workload},{mem},{deadline},{weight},{gpus}\n"
        ));
    }
    text
}

/// A running `gpuctl demo` on the test's host and trace.
struct Demo {
    child: Child,
    _work: tempfile::TempDir,
    /// Every child process seen so far: (pid, command name).
    children: Vec<(u32, String)>,
}

impl Demo {
    fn start(seconds: &str) -> Demo {
        let work = tempfile::tempdir().expect("temp dir");
        let host = write(work.path(), "host.toml", HOST);
        let trace = write(work.path(), "trace.csv", &trace());
        let args = ["--host", &host, "--trace", &trace, "--seconds", seconds];
        Demo::spawn(work, &[&args[..], &["--json"]].concat())
    }

    /// `gpuctl demo ARGS`, keeping `work` until the demo is dropped.
    fn spawn(work: tempfile::TempDir, args: &[&str]) -> Demo {
        let child = Command::new(artefacts().join("gpuctl"))
            .arg("demo")
            .args(args)
            .env("NO_COLOR", "1")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("run gpuctl demo");
        Demo {
            child,
            _work: work,
            children: Vec::new(),
        }
    }

    /// Records the demo's current children.
    fn look(&mut self) {
        for child in children_of(self.child.id()) {
            if !self.children.contains(&child) {
                self.children.push(child);
            }
        }
    }

    fn saw(&self, name: &str) -> bool {
        self.children.iter().any(|(_, n)| n == name)
    }

    /// Watches the children until the demo exits (or `limit` passes).
    fn wait(&mut self, limit: Duration) -> ExitStatus {
        let give_up = Instant::now() + limit;
        loop {
            if let Some(status) = self.child.try_wait().expect("wait for gpuctl") {
                return status;
            }
            self.look();
            if Instant::now() > give_up {
                let _ = self.child.kill();
                let _ = self.child.wait();
                panic!("gpuctl demo still running after {limit:?}");
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    fn output(mut self) -> (String, String) {
        use std::io::Read;
        let (mut out, mut err) = (String::new(), String::new());
        self.child
            .stdout
            .take()
            .expect("piped")
            .read_to_string(&mut out)
            .expect("read stdout");
        self.child
            .stderr
            .take()
            .expect("piped")
            .read_to_string(&mut err)
            .expect("read stderr");
        (out, err)
    }

    /// Asserts that the demo started gpu-agentd and dbus-daemon and that
    /// neither is running any more.
    fn assert_children_gone(&self) {
        assert!(
            self.saw("gpu-agentd") && self.saw("dbus-daemon"),
            "expected gpu-agentd and dbus-daemon among the demo's children, saw {:?}",
            self.children
        );
        for (pid, name) in &self.children {
            let comm = std::fs::read_to_string(format!("/proc/{pid}/comm"));
            assert!(
                comm.map_or(true, |c| c.trim() != name),
                "{name} (pid {pid}) outlived gpuctl demo"
            );
        }
    }
}

impl Drop for Demo {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The live children of `pid`: (pid, command name), from /proc.
fn children_of(parent: u32) -> Vec<(u32, String)> {
    let mut found = Vec::new();
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return found;
    };
    for entry in entries.flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|n| n.parse::<u32>().ok())
        else {
            continue;
        };
        let Ok(stat) =
            std::fs::read_to_string(Path::new("/proc").join(pid.to_string()).join("stat"))
        else {
            continue;
        };
        // pid (comm) state ppid ...; comm may hold spaces and parentheses.
        let (Some(open), Some(close)) = (stat.find('('), stat.rfind(')')) else {
            continue;
        };
        let comm = &stat[open + 1..close];
        let ppid = stat[close + 1..]
            .split_whitespace()
            .nth(1)
            .and_then(|p| p.parse::<u32>().ok());
        if ppid == Some(parent) {
            found.push((pid, comm.to_string()));
        }
    }
    found
}

#[test]
fn demo_runs_the_workload_through_the_daemon_and_leaves_nothing_behind() {
    let mut demo = Demo::start("5");
    let status = demo.wait(Duration::from_secs(120));
    demo.assert_children_gone();
    let (out, err) = demo.output();
    assert!(status.success(), "gpuctl demo failed: {status}\n{err}");
    let metrics: serde_json::Value = serde_json::from_str(&out)
        .unwrap_or_else(|e| panic!("stdout is not JSON ({e}):\n{out}\nstderr:\n{err}"));
    assert_eq!(metrics["policy"], "greedy-eft", "{metrics}");
    assert_eq!(metrics["tasks"], 20, "{metrics}");
    assert_eq!(metrics["rejected"], serde_json::json!([]), "{metrics}");
    let makespan = metrics["makespan"].as_f64().expect("makespan");
    assert!(makespan > 0.0, "{metrics}");
    assert!(err.contains("20 tasks"), "{err}");
}

/// The values of metric `name` in a metrics table (a column per policy).
fn table_row(table: &str, name: &str) -> Vec<String> {
    let line = table
        .lines()
        .find(|l| l.split_whitespace().next() == Some(name))
        .unwrap_or_else(|| panic!("no {name} row in\n{table}"));
    line.split_whitespace()
        .skip(1)
        .map(str::to_string)
        .collect()
}

#[test]
fn demo_simulated_column_has_the_energy_baseline_of_gpuctl_simulate() {
    // The bundled workload, on which edl saves energy.
    let examples = Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples");
    let host = examples.join("host.toml");
    let trace = examples.join("workload.csv");
    let (host, trace) = (host.to_str().unwrap(), trace.to_str().unwrap());
    let work = tempfile::tempdir().expect("temp dir");
    let args = ["--host", host, "--trace", trace, "--seconds", "3"];
    let mut demo = Demo::spawn(work, &[&args[..], &["--policy", "edl"]].concat());
    let status = demo.wait(Duration::from_secs(120));
    let (table, err) = demo.output();
    assert!(status.success(), "gpuctl demo failed: {status}\n{err}");
    let out = gpuctl(&[
        "simulate", "--host", host, "--trace", trace, "--policy", "edl", "--json",
    ]);
    let simulated: serde_json::Value = serde_json::from_str(&success(&out)).expect("JSON");
    let value = |name: &str| simulated[name].as_f64().expect(name);
    assert_eq!(format!("{:.4}", value("energy_saving")), "0.1981");
    // Columns: edl (daemon), edl (simulated); the simulated one is simulate's.
    for (name, decimals) in [
        ("energy_j", 1),
        ("energy_baseline_j", 1),
        ("energy_saving", 4),
    ] {
        assert_eq!(
            table_row(&table, name)[1],
            format!("{:.*}", decimals, value(name)),
            "{name}:\n{table}"
        );
    }
    // The daemon column has the same baseline (one definition: the trace
    // replayed at default clocks), and its saving is its energy against it.
    let row = |name: &str| table_row(&table, name);
    assert_eq!(
        row("energy_baseline_j")[0],
        row("energy_baseline_j")[1],
        "{table}"
    );
    let daemon_energy: f64 = row("energy_j")[0].parse().unwrap();
    let daemon_saving: f64 = row("energy_saving")[0].parse().unwrap();
    let expected = 1.0 - daemon_energy / value("energy_baseline_j");
    assert!(
        (daemon_saving - expected).abs() < 1e-4,
        "{expected}:\n{table}"
    );
    assert!(daemon_saving > 0.05, "{table}");
}

#[test]
fn demo_stops_everything_on_ctrl_c() {
    let mut demo = Demo::start("60");
    // Until the daemon runs and a second more, so that tasks are in flight.
    let give_up = Instant::now() + Duration::from_secs(60);
    while !(demo.saw("gpu-agentd") && demo.saw("dbus-daemon")) {
        assert!(
            demo.child.try_wait().expect("wait").is_none(),
            "gpuctl demo ended before starting its daemon"
        );
        assert!(Instant::now() < give_up, "gpuctl demo started nothing");
        demo.look();
        std::thread::sleep(Duration::from_millis(20));
    }
    std::thread::sleep(Duration::from_secs(1));
    demo.look();
    let kill = Command::new("kill")
        .args(["-INT", &demo.child.id().to_string()])
        .status()
        .expect("run kill");
    assert!(kill.success());
    let status = demo.wait(Duration::from_secs(30));
    demo.assert_children_gone();
    let (out, err) = demo.output();
    assert_eq!(status.code(), Some(130), "{status}\nstderr:\n{err}");
    assert!(out.is_empty(), "an interrupted demo printed metrics: {out}");
    assert!(err.contains("interrupted"), "{err}");
}

/// 150 tasks that all arrive at once: the demo submits them one after
/// another while their `TaskChanged` signals pour in, and finishes. gpuctl
/// read the signals only between `Submit`s, and zbus's reader waits while
/// a stream's queue (64) is full, the replies behind it too: on the old
/// code the demo waited for good on the `Submit` of about the 23rd task
/// (the daemon had answered it, and answered `CountTasks` meanwhile). Under
/// CPU load, the examples' workload hit the same with fewer tasks due at
/// once.
#[test]
fn demo_submits_a_burst_of_tasks_arriving_at_once() {
    let work = tempfile::tempdir().expect("temp dir");
    let host = write(work.path(), "host.toml", HOST);
    let mut trace = String::from("id,arrival,workload,mem_gb,deadline,weight,gpus\n");
    for i in 0..150 {
        trace.push_str(&format!("b{i:03},0,0.5,1,1000,1,1\n"));
    }
    let trace = write(work.path(), "trace.csv", &trace);
    let args = [
        "--host",
        &host,
        "--trace",
        &trace,
        "--seconds",
        "5",
        "--json",
    ];
    let mut demo = Demo::spawn(work, &args);
    let status = demo.wait(Duration::from_secs(120));
    let (out, err) = demo.output();
    assert!(status.success(), "gpuctl demo failed: {status}\n{err}");
    let metrics: serde_json::Value = serde_json::from_str(&out)
        .unwrap_or_else(|e| panic!("stdout is not JSON ({e}):\n{out}\nstderr:\n{err}"));
    assert_eq!(metrics["tasks"], 150, "{metrics}");
    assert_eq!(metrics["rejected"], serde_json::json!([]), "{metrics}");
}
