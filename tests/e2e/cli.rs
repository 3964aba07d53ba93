//! `gpuctl simulate` as a user meets it: outputs, bad input, the bundled example.

use std::path::Path;

use crate::harness::{failure, gpuctl, success, write, Sim, FIFO, GREEDY_EFT};

const TWO_T4: &str = "[[gpu]]\nmodel = \"T4\"\ncount = 2\nspeed = 1\n";

fn sim(rows: &str) -> Sim {
    Sim::new(
        &[FIFO, GREEDY_EFT],
        TWO_T4,
        &format!("id,arrival,workload,mem_gb,deadline,weight\n{rows}"),
    )
}

#[test]
fn a_bad_trace_row_is_named_and_nothing_is_written() {
    let sim = sim("a,0,1,1,5,1\nb,0,abc,1,5,1\n");
    let schedule = sim.path("out.csv");
    let out = sim.run(&["--policy", "fifo", "--schedule", &schedule]);
    assert_eq!(
        failure(&out),
        format!(
            "gpuctl: error: {}:3: column workload: expected a number > 0, got \"abc\"\n",
            sim.trace
        )
    );
    assert!(!Path::new(&schedule).exists());
}

#[test]
fn a_bad_host_file_is_named_and_nothing_is_written() {
    let mut sim = sim("a,0,1,1,5,1\n");
    sim.host = write(
        sim.work.path(),
        "bad-host.toml",
        "[[gpu]]\nmodel = \"T4\"\nspeed = \"fast\"\n",
    );
    let schedule = sim.path("out.csv");
    let stderr = failure(&sim.run(&["--policy", "fifo", "--schedule", &schedule]));
    let expected = format!(
        "gpuctl: error: {}:3: gpu.speed: invalid type: string \"fast\", expected f64",
        sim.host
    );
    assert!(stderr.starts_with(&expected), "{stderr}");
    assert!(!Path::new(&schedule).exists());
}

#[test]
fn usage_errors_say_what_is_wrong() {
    let sim = sim("a,0,1,1,5,1\n");
    let schedule = sim.path("out.csv");
    let two = sim.run(&[
        "--policy",
        "fifo",
        "--policy",
        "greedy-eft",
        "--schedule",
        &schedule,
    ]);
    assert_eq!(
        failure(&two),
        "gpuctl: error: --schedule needs exactly one --policy (got 2)\n"
    );
    let param = sim.run(&["--policy", "fifo", "--param", "seed=3"]);
    assert_eq!(
        failure(&param),
        "gpuctl: error: --param seed: none of the selected policies takes it\n"
    );
    let gantt = sim.path("g.svg");
    let two = sim.run(&[
        "--policy",
        "fifo",
        "--policy",
        "greedy-eft",
        "--gantt",
        &gantt,
    ]);
    assert_eq!(
        failure(&two),
        "gpuctl: error: --gantt needs exactly one --policy (got 2)\n"
    );
    let scoped = sim.run(&["--policy", "fifo", "--param", "greedy-eft:seed=3"]);
    assert_eq!(
        failure(&scoped),
        "gpuctl: error: --param greedy-eft:seed: greedy-eft is not a selected --policy\n"
    );
    let scoped = sim.run(&["--policy", "fifo", "--param", "fifo:seed=3"]);
    assert_eq!(
        failure(&scoped),
        "gpuctl: error: --param fifo:seed: fifo takes no parameters\n"
    );
    let malformed = sim.run(&["--policy", "fifo", "--param", ":seed=3"]);
    assert!(
        failure(&malformed).contains("expected KEY=VALUE or POLICY:KEY=VALUE, got \":seed=3\""),
        "{}",
        failure(&malformed)
    );
    assert!(!Path::new(&gantt).exists());
    let unknown = sim.run(&["--policy", "fifo", "--policy", "annealing"]);
    assert_eq!(
        failure(&unknown),
        "gpuctl: error: unknown policy \"annealing\"; available: fifo, greedy-eft\n"
    );
    let missing = gpuctl(&[
        "simulate",
        "--host",
        &sim.host,
        "--trace",
        "/nonexistent/trace.csv",
        "--policy",
        "fifo",
    ]);
    assert!(failure(&missing).starts_with("gpuctl: error: /nonexistent/trace.csv: cannot read:"));
}

#[test]
fn json_is_an_object_for_one_policy_and_an_array_in_order_for_several() {
    let sim = sim("a,0,4,1,5,1\n");
    let one: serde_json::Value =
        serde_json::from_str(&success(&sim.run(&["--policy", "fifo", "--json"]))).unwrap();
    assert_eq!(one["policy"], "fifo");
    let keys: Vec<_> = one.as_object().unwrap().keys().cloned().collect();
    let mut expected = vec![
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
        "scheduling",
        "tasks",
        "twct",
        "twt",
        "utilization",
    ];
    expected.sort();
    assert_eq!(keys, expected);
    // One arrival and one finish: two decision points.
    assert_eq!(one["scheduling"]["decision_points"], 2);
    let wall_s = one["scheduling"]["wall_s"].as_f64().unwrap();
    assert!(wall_s > 0.0);
    // The policy's share is part of the core's time.
    let policy_s = one["scheduling"]["policy_s"].as_f64().unwrap();
    assert!((0.0..=wall_s).contains(&policy_s), "{policy_s} of {wall_s}");
    let many = success(&sim.run(&["--policy", "greedy-eft", "--policy", "fifo", "--json"]));
    let many: serde_json::Value = serde_json::from_str(&many).unwrap();
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
    let sim = sim("a,0,4,1,5,1\nb,0,2,1,1,3\n");
    let table = success(&sim.run(&["--policy", "fifo", "--policy", "greedy-eft"]));
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
    let mut sim = sim("");
    sim.host = root
        .join("examples/host.toml")
        .to_str()
        .unwrap()
        .to_string();
    sim.trace = root
        .join("examples/trace.csv")
        .to_str()
        .unwrap()
        .to_string();
    let out = sim.run(&["--policy", "fifo", "--policy", "greedy-eft", "--json"]);
    let metrics: serde_json::Value = serde_json::from_str(&success(&out)).unwrap();
    for m in metrics.as_array().unwrap() {
        assert_eq!(m["tasks"], 24);
        assert_eq!(m["rejected"][0]["id"], "job20");
    }
}

#[test]
fn gantt_chart_and_markdown_show_the_schedule_and_the_comparison() {
    // a (deadline 5) runs 0..4 on GPU 0; b (deadline 1, weight 3) 0..2 on GPU 1, late.
    let sim = sim("a,0,4,1,5,1\nb,0,2,1,1,3\n");
    let (gantt, chart, markdown) = (sim.path("g.svg"), sim.path("c.svg"), sim.path("t.md"));
    success(&sim.run(&["--policy", "fifo", "--gantt", &gantt]));
    let svg = std::fs::read_to_string(&gantt).unwrap();
    assert!(svg.starts_with("<svg"), "{svg}");
    for text in [
        ">\nGPU 0 T4\n<",
        ">\nGPU 1 T4\n<",
        ">\na\n<",
        ">\nb\n<",
        "twt 3.0, 1 late (red)",
    ] {
        assert!(svg.contains(text), "{text} missing from the Gantt chart");
    }
    // One bar in the late colour (b), one in the on-time colour (a).
    assert_eq!(svg.matches("fill=\"#D64541\"").count(), 1);
    assert_eq!(svg.matches("fill=\"#4682B4\"").count(), 1);

    let out = sim.run(&[
        "--policy",
        "fifo",
        "--policy",
        "greedy-eft",
        "--chart",
        &chart,
        "--markdown",
        &markdown,
        "--repeat",
        "3",
    ]);
    let table = success(&out);
    assert!(!String::from_utf8_lossy(&out.stderr).contains("different schedule"));
    let svg = std::fs::read_to_string(&chart).unwrap();
    for text in [
        ">\nfifo\n<",
        ">\ngreedy-eft\n<",
        ">\ntwt\n<",
        ">\nmakespan\n<",
    ] {
        assert!(svg.contains(text), "{text} missing from the chart");
    }
    // The legend (a swatch and a name per policy) is right of every bar.
    let number = |line: &str, attr: &str| -> i64 {
        let at = line.find(&format!(" {attr}=\"")).unwrap() + attr.len() + 3;
        line[at..].split('"').next().unwrap().parse().unwrap()
    };
    let lines: Vec<&str> = svg.lines().collect();
    let rects: Vec<&str> = lines
        .iter()
        .copied()
        .filter(|l| l.starts_with("<rect") && l.contains("fill=\"#1F77B4\""))
        .collect();
    assert_eq!(rects.len(), 6, "five bars and a swatch in fifo's colour");
    let swatch = rects.iter().map(|l| number(l, "x")).max().unwrap();
    for bar in rects.iter().filter(|l| number(l, "x") != swatch) {
        assert!(number(bar, "x") + number(bar, "width") < swatch, "{bar}");
    }
    for name in ["fifo", "greedy-eft"] {
        let at = lines.iter().position(|l| *l == name).unwrap();
        assert!(number(lines[at - 1], "x") > swatch, "{name}'s legend entry");
    }
    let md = std::fs::read_to_string(&markdown).unwrap();
    assert!(
        md.starts_with(
            "| policy | fifo | greedy-eft |\n| --- | ---: | ---: |\n| tasks | 2 | 2 |\n| rejected | 0 | 0 |\n| twt | 3.000 | 3.000 |\n"
        ),
        "{md}"
    );
    assert!(md.contains("\n| sched_ms | "), "{md}");
    assert!(md.contains("\n| policy_ms | "), "{md}");
    assert!(table.contains("\ndecisions/s "), "{table}");
}

/// A large trace (over 1 MiB) is read while the first replay runs: its
/// results are those of the trace read first (two --host files read it
/// first, once each), whether in arrival order or not; a bad row or a
/// duplicate id at its very end is reported as before, with nothing
/// printed, and before an error of the command line's own (an unknown
/// policy).
#[test]
fn a_large_trace_read_beside_its_replay_gives_what_the_trace_read_first_gives() {
    let rows = 50_000;
    let mut text = String::from("id,arrival,workload,mem_gb,deadline,weight\n");
    for i in 0..rows {
        let a = f64::from(i) * 0.6;
        text.push_str(&format!(
            "task-{i:06},{a:.1},{},4,{:.1},{}\n",
            1 + i % 3,
            a + 4.0,
            1 + i % 4
        ));
    }
    assert!(text.len() > 1 << 20);
    let sim = Sim::new(&[FIFO, GREEDY_EFT], TWO_T4, &text);
    let policies = ["--policy", "fifo", "--policy", "greedy-eft", "--json"];
    let metrics = |out: &str| {
        let mut all: Vec<serde_json::Value> = serde_json::from_str(out).unwrap();
        for m in &mut all {
            let m = m.as_object_mut().unwrap();
            m.remove("scheduling");
            m.remove("host");
        }
        all
    };
    let expect_as_read_first = |sim: &Sim| {
        let streamed = metrics(&success(&sim.run(&policies)));
        let mut twice = policies.to_vec();
        twice.extend(["--host", &sim.host]);
        let read_first = metrics(&success(&sim.run(&twice)));
        assert_eq!(streamed.len(), 2);
        assert_eq!(read_first.len(), 4);
        assert_eq!(streamed[..], read_first[..2]);
        assert_eq!(streamed[0]["tasks"], rows);
    };
    expect_as_read_first(&sim);
    // Out of order: the last row arrives first.
    let last = format!("task-{:06},{:.1},", rows - 1, f64::from(rows - 1) * 0.6);
    let shuffled = text.replace(&last, &format!("task-{:06},0.0,", rows - 1));
    let sim = Sim::new(&[FIFO, GREEDY_EFT], TWO_T4, &shuffled);
    expect_as_read_first(&sim);
    for (extra, error) in [
        (
            "x,1e9,abc,4,1e9,1\n",
            "column workload: expected a number > 0, got \"abc\"",
        ),
        (
            "task-000007,1e9,1,4,1e9,1\n",
            "column id: duplicate id \"task-000007\" (first on line 9)",
        ),
    ] {
        let sim = Sim::new(&[FIFO, GREEDY_EFT], TWO_T4, &format!("{text}{extra}"));
        let expected = format!("gpuctl: error: {}:{}: {error}\n", sim.trace, rows + 2);
        assert_eq!(failure(&sim.run(&policies)), expected);
        assert_eq!(failure(&sim.run(&["--policy", "no-such-policy"])), expected);
    }
}
