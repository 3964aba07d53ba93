//! `gpuctl trace import` on the shared public data, and `gpuctl simulate` on
//! what it writes.

use std::path::{Path, PathBuf};

use gpu_agent_core::apps::AppLibrary;
use gpu_agent_sim::input::{self, trace::Trace};

use crate::harness::{failure, gpuctl, plugin_dir, success, GREEDY_EFT};

const PODS: &str = "traces/alibaba-gpu-v2023/openb_pod_list_default.csv";
const NODES: &str = "traces/alibaba-gpu-v2023/openb_node_list_gpu_node.csv";
const SOS: &str = "sos/sim_5_machines.txt";

/// `rel` under the shared data directory (`../shared/data` beside the
/// workspace), or `None`, said on stderr, when this checkout has none.
pub fn shared(rel: &str) -> Option<String> {
    let path: PathBuf = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../shared/data")
        .join(rel);
    if let Ok(path) = path.canonicalize() {
        Some(path.to_str().expect("utf-8 path").to_string())
    } else {
        eprintln!("skipped: the shared data file {} is absent", path.display());
        None
    }
}

/// A scratch directory and the paths of the host and trace to write in it.
fn outputs() -> (tempfile::TempDir, String, String) {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = |name: &str| dir.path().join(name).to_str().unwrap().to_string();
    let (host, trace) = (path("host.toml"), path("trace.csv"));
    (dir, host, trace)
}

/// Loads what the import wrote with the project's readers; returns
/// (devices, tasks).
fn load(host: &str, trace: &str) -> (usize, usize) {
    let host = input::host::load(Path::new(host)).expect("the host loads");
    let trace =
        Trace::load(Path::new(trace), &host, &AppLibrary::default()).expect("the trace loads");
    assert!(trace.warnings.is_empty(), "{:?}", trace.warnings);
    (host.devices.len(), trace.tasks.len())
}

/// `gpuctl simulate --json` under greedy-eft: the metrics.
fn simulate(host: &str, trace: &str) -> serde_json::Value {
    let plugins = plugin_dir(&[GREEDY_EFT]);
    let out = gpuctl(&[
        "simulate",
        "--host",
        host,
        "--trace",
        trace,
        "--policy",
        "greedy-eft",
        "--json",
        "--plugin-dir",
        plugins.path().to_str().unwrap(),
    ]);
    serde_json::from_str(&success(&out)).expect("metrics JSON")
}

#[test]
fn alibaba_slice_counts_every_pod_and_simulates() {
    let (Some(pods), Some(nodes)) = (shared(PODS), shared(NODES)) else {
        return;
    };
    let (_dir, host, trace) = outputs();
    let args = [
        "trace",
        "import",
        "alibaba-v2023",
        &pods,
        "--nodes",
        &nodes,
        "--gpus",
        "32",
        "--from",
        "11600000",
        "--limit",
        "1000",
        "--out-host",
        &host,
        "--out-trace",
        &trace,
    ];
    let mut json_args = args.to_vec();
    json_args.push("--json");
    let summary: serde_json::Value =
        serde_json::from_str(&success(&gpuctl(&json_args))).expect("summary JSON");
    assert_eq!(
        summary,
        serde_json::json!({
            "format": "alibaba-v2023",
            "pods": 8152,
            "kept": 1000,
            "fractional": 392,
            "skipped": {"no_gpu": 165, "no_time": 116, "non_positive_run_time": 0, "too_many_gpus": 0},
            "before_from": 4285,
            "after_limit": 2586,
            "devices": 32,
            "host": host,
            "trace": trace,
        })
    );
    assert_eq!(load(&host, &trace), (32, 1000));
    let metrics = simulate(&host, &trace);
    assert_eq!(metrics["tasks"], 1000);
    assert_eq!(metrics["rejected"], serde_json::json!([]));

    let out = gpuctl(&args);
    assert!(success(&out).is_empty());
    let stderr = String::from_utf8(out.stderr).unwrap();
    let expected = format!(
        "8152 pods in {pods}: 1000 tasks (392 fractional-GPU pods made whole-GPU tasks)\n\
         \x20 skipped 281: 165 without GPUs, 116 never scheduled (a time missing), \
         0 with a run time <= 0, 0 needing more GPUs than the host's 32\n\
         \x20 outside the slice: 4285 created before --from, 2586 after --limit\n\
         wrote {host} (32 devices) and {trace} (1000 tasks)\n"
    );
    assert!(stderr.starts_with(&expected), "{stderr}");
}

#[test]
fn alibaba_whole_file_skips_pods_without_gpus_or_times() {
    let (Some(pods), Some(nodes)) = (shared(PODS), shared(NODES)) else {
        return;
    };
    let (_dir, host, trace) = outputs();
    let out = gpuctl(&[
        "trace",
        "import",
        "alibaba-v2023",
        &pods,
        "--nodes",
        &nodes,
        "--out-host",
        &host,
        "--out-trace",
        &trace,
        "--json",
    ]);
    let summary: serde_json::Value = serde_json::from_str(&success(&out)).unwrap();
    let counts = [
        "pods",
        "kept",
        "fractional",
        "before_from",
        "after_limit",
        "devices",
    ]
    .map(|k| summary[k].as_u64().unwrap());
    assert_eq!(counts, [8152, 6203, 2573, 0, 0, 6212]);
    assert_eq!(
        summary["skipped"],
        serde_json::json!({"no_gpu": 1088, "no_time": 861, "non_positive_run_time": 0, "too_many_gpus": 0})
    );
    assert_eq!(load(&host, &trace), (6212, 6203));
}

#[test]
fn alibaba_bad_input_is_named_and_nothing_is_written() {
    let (Some(pods), Some(nodes)) = (shared(PODS), shared(NODES)) else {
        return;
    };
    let (dir, host, trace) = outputs();
    // The multi-GPU sample has no time columns.
    let multigpu = pods.replace("default", "multigpu50");
    let import = |pods: &str| {
        gpuctl(&[
            "trace",
            "import",
            "alibaba-v2023",
            pods,
            "--nodes",
            &nodes,
            "--out-host",
            &host,
            "--out-trace",
            &trace,
        ])
    };
    assert_eq!(
        failure(&import(&multigpu)),
        format!("gpuctl: error: {multigpu}:1: missing required columns \"qos\", \"creation_time\", \"deletion_time\", \"scheduled_time\"\n")
    );
    // A copy of the default pod list with line 5000's creation_time broken.
    let text = std::fs::read_to_string(&pods).unwrap();
    let mut lines: Vec<String> = text.lines().map(str::to_string).collect();
    let mut fields: Vec<&str> = lines[4999].split(',').collect();
    fields[8] = "12x";
    lines[4999] = fields.join(",");
    let copy = dir.path().join("pods.csv");
    std::fs::write(&copy, lines.join("\n")).unwrap();
    let copy = copy.to_str().unwrap();
    assert_eq!(
        failure(&import(copy)),
        format!(
            "gpuctl: error: {copy}:5000: column creation_time: expected an integer >= 0, got \"12x\"\n"
        )
    );
    assert!(!Path::new(&host).exists() && !Path::new(&trace).exists());
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 1);
}

#[test]
fn sos_workload_becomes_ten_thousand_tasks_on_five_devices_and_simulates() {
    let Some(jobs) = shared(SOS) else {
        return;
    };
    let (_dir, host, trace) = outputs();
    let out = gpuctl(&[
        "trace",
        "import",
        "sos",
        &jobs,
        "--out-host",
        &host,
        "--out-trace",
        &trace,
        "--json",
    ]);
    let summary: serde_json::Value = serde_json::from_str(&success(&out)).unwrap();
    assert_eq!(
        summary,
        serde_json::json!({"format": "sos", "jobs": 10000, "machines": 5, "host": host, "trace": trace})
    );
    assert_eq!(load(&host, &trace), (5, 10000));
    let first = std::fs::read_to_string(&trace).unwrap();
    assert!(first.starts_with(
        "id,arrival,workload,mem_gb,deadline,weight,gpus,runtimes\nj1,0,16,0,32,87,1,73;170;16;109;190\n"
    ));
    let metrics = simulate(&host, &trace);
    assert_eq!(metrics["tasks"], 10000);
    assert_eq!(metrics["rejected"], serde_json::json!([]));
}

/// `gpuctl simulate --gantt` under greedy-eft: the SVG, and the number of
/// rows of the schedule (a task's row per device it ran on).
fn gantt(host: &str, trace: &str) -> (String, usize) {
    let plugins = plugin_dir(&[GREEDY_EFT]);
    let dir = tempfile::tempdir().expect("temp dir");
    let at = |name: &str| dir.path().join(name).to_str().unwrap().to_string();
    let (svg, schedule) = (at("gantt.svg"), at("schedule.csv"));
    success(&gpuctl(&[
        "simulate",
        "--host",
        host,
        "--trace",
        trace,
        "--policy",
        "greedy-eft",
        "--gantt",
        &svg,
        "--schedule",
        &schedule,
        "--plugin-dir",
        plugins.path().to_str().unwrap(),
    ]));
    let rows = std::fs::read_to_string(&schedule).unwrap().lines().count() - 1;
    (std::fs::read_to_string(&svg).unwrap(), rows)
}

/// The Gantt's task bars (in the on-time or the late colour) wider than 0.
fn visible_bars(svg: &str) -> usize {
    svg.lines()
        .filter(|l| {
            l.starts_with("<rect")
                && (l.contains("fill=\"#4682B4\"") || l.contains("fill=\"#D64541\""))
        })
        .filter(|l| {
            let width = l
                .split(" width=\"")
                .nth(1)
                .and_then(|w| w.split('"').next());
            width.and_then(|w| w.parse::<f64>().ok()).expect("a width") > 0.0
        })
        .count()
}

#[test]
fn gantt_of_the_sos_workload_has_a_visible_bar_per_task() {
    let Some(jobs) = shared(SOS) else {
        return;
    };
    let (_dir, host, trace) = outputs();
    success(&gpuctl(&[
        "trace",
        "import",
        "sos",
        &jobs,
        "--out-host",
        &host,
        "--out-trace",
        &trace,
    ]));
    let (svg, rows) = gantt(&host, &trace);
    assert_eq!(rows, 10_000);
    assert_eq!(visible_bars(&svg), 10_000);
    // 34.3 hours of model time read in hours, with whole-number labels.
    assert!(svg.contains(">\ntime (h)\n<"), "{svg}");
    assert!(svg.contains(">\n30\n<") && !svg.contains(">\n30.0\n<"));
    assert!(svg.contains("makespan 34.31 h"));
    assert!(svg.contains(">\nEvery task has a bar: 9509 bars shorter than 1 px drawn 1 px wide; 5 lanes split into up to 11 rows where bars would touch at this scale.\n<"));
}

#[test]
fn gantt_of_a_thousand_alibaba_tasks_has_a_visible_bar_per_task_and_device() {
    let (Some(pods), Some(nodes)) = (shared(PODS), shared(NODES)) else {
        return;
    };
    let (_dir, host, trace) = outputs();
    success(&gpuctl(&[
        "trace",
        "import",
        "alibaba-v2023",
        &pods,
        "--nodes",
        &nodes,
        "--gpus",
        "32",
        "--from",
        "11600000",
        "--limit",
        "1000",
        "--out-host",
        &host,
        "--out-trace",
        &trace,
    ]));
    let (svg, rows) = gantt(&host, &trace);
    // 1000 tasks, some of them on several GPUs: a bar per task and device.
    let gpus: usize = std::fs::read_to_string(&trace)
        .unwrap()
        .lines()
        .skip(1)
        .map(|l| l.split(',').nth(6).unwrap().parse::<usize>().unwrap())
        .sum();
    assert_eq!((rows, gpus), (1062, 1062));
    assert_eq!(visible_bars(&svg), 1062);
    assert!(svg.contains(">\ntime (h)\n<"), "{svg}");
}
