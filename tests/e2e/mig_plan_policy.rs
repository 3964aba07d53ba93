//! The mig-plan policy in `gpuctl simulate` (docs/mig.md §6.4, issue 15 item 4):
//! on examples/mig-shift.csv, whose demand shifts at 1800 s from 4 GB tasks
//! to 15 GB ones, it changes the layouts of examples/host-mig-shift.toml's
//! two A100s (drained first: nothing runs on a GPU while it changes, nothing
//! starts there meanwhile), and beats greedy-eft on the fixed layout.

use std::collections::BTreeMap;
use std::path::PathBuf;

use crate::harness::{failure, gpuctl, plugin_dir, success, GREEDY_EFT, MIG_PLAN};

fn example(name: &str) -> String {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("..")
        .join("examples")
        .join(name)
        .to_str()
        .expect("utf-8 path")
        .to_string()
}

/// One schedule row: task id, device index, start, end, device label.
struct Row {
    id: String,
    gpu: u32,
    start: f64,
    end: f64,
    device: String,
}

fn rows(path: &std::path::Path) -> Vec<Row> {
    let text = std::fs::read_to_string(path).unwrap();
    let mut lines = text.lines();
    let header: Vec<&str> = lines.next().unwrap().split(',').collect();
    let col = |name: &str| header.iter().position(|h| *h == name).unwrap();
    let (id, gpu, start, end, device) = (
        col("id"),
        col("gpu"),
        col("start"),
        col("end"),
        col("device"),
    );
    lines
        .map(|l| {
            let f: Vec<&str> = l.split(',').collect();
            Row {
                id: f[id].to_string(),
                gpu: f[gpu].parse().unwrap(),
                start: f[start].parse().unwrap(),
                end: f[end].parse().unwrap(),
                device: f[device].to_string(),
            }
        })
        .collect()
}

#[test]
fn mig_plan_follows_the_shift_and_beats_a_fixed_layout() {
    let plugins = plugin_dir(&[MIG_PLAN, GREEDY_EFT]);
    let work = tempfile::tempdir().unwrap();
    let schedule = work.path().join("schedule.csv");
    let (host, trace, apps) = (
        example("host-mig-shift.toml"),
        example("mig-shift.csv"),
        example("mig-shift-apps.toml"),
    );
    let run = |policy: &str, extra: &[&str]| {
        let mut args = vec![
            "simulate",
            "--host",
            &host,
            "--trace",
            &trace,
            "--apps",
            &apps,
            "--policy",
            policy,
            "--json",
            "--plugin-dir",
            plugins.path().to_str().unwrap(),
        ];
        args.extend_from_slice(extra);
        let m: serde_json::Value = serde_json::from_str(&success(&gpuctl(&args))).unwrap();
        m
    };
    let plan = run("mig-plan", &["--schedule", schedule.to_str().unwrap()]);
    let fixed = run("greedy-eft", &[]);

    // The changes, exactly (the trace, the planner and the replay are
    // deterministic). Before the shift GPU 0 trades its 3g and a 1g for a
    // 4g (the plan serves more than 1.1 times what the host's layout
    // serves); after it, 15 GB tasks get a 3g then a 4g + 3g on GPU 1; GPU 0
    // is made whole once the window holds only the last tasks.
    let changes: Vec<(u64, String, f64, Vec<u64>)> = plan["mig_changes"]
        .as_array()
        .expect("mig-plan changed layouts")
        .iter()
        .map(|c| {
            (
                c["gpu"].as_u64().unwrap(),
                c["layout"].as_str().unwrap().to_string(),
                c["asked_s"].as_f64().unwrap(),
                c["devices"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|d| d.as_u64().unwrap())
                    .collect(),
            )
        })
        .collect();
    let expected: Vec<(u64, &str, f64, Vec<u64>)> = vec![
        (
            0,
            "4g.20gb@0,1g.5gb@4,1g.5gb@5,1g.5gb@6",
            1620.483,
            vec![12, 13, 14, 15],
        ),
        (
            1,
            "2g.10gb@0,1g.5gb@2,1g.5gb@3,3g.20gb@4",
            1920.483,
            vec![16, 17, 18, 19],
        ),
        (1, "4g.20gb@0,3g.20gb@4", 2520.483, vec![20, 21]),
        (0, "", 3660.483, vec![0]),
    ];
    assert_eq!(
        changes
            .iter()
            .map(|(g, l, a, d)| (*g, l.as_str(), *a, d.clone()))
            .collect::<Vec<_>>(),
        expected,
        "{plan}"
    );
    assert!(
        changes.iter().filter(|c| c.2 > 1800.0).count() >= 1,
        "no change after the shift"
    );

    // Metrics beside greedy-eft on the host's fixed layout: no task late
    // against 100, a sixth of the mean completion time.
    for (m, twt, dmc, act) in [
        (&plan, 0.0, 0, 10.5966626679),
        (&fixed, 3847.8373333332, 100, 58.7190562036),
    ] {
        assert!((m["twt"].as_f64().unwrap() - twt).abs() < 1e-6, "{m}");
        assert_eq!(m["dmc"], dmc, "{m}");
        assert!((m["act"].as_f64().unwrap() - act).abs() < 1e-6, "{m}");
        assert_eq!(m["tasks"], 3772);
        assert_eq!(m["rejected"], serde_json::json!([]));
    }
    assert!(fixed.get("mig_changes").is_none(), "{fixed}");

    // Every task ran exactly once, on one device (so no gang ran on a MIG
    // device), never on a split GPU itself (0 and 1 are split until GPU 0
    // is made whole, after the last task).
    let rows = rows(&schedule);
    let mut by_id: BTreeMap<&str, usize> = BTreeMap::new();
    for r in &rows {
        *by_id.entry(r.id.as_str()).or_default() += 1;
        assert!(
            r.gpu > 1 && r.device.contains("/mig/"),
            "{} on {}",
            r.id,
            r.device
        );
    }
    assert_eq!(by_id.len(), 3772);
    assert!(by_id.values().all(|&n| n == 1), "a task ran twice");
    // No device runs two tasks at once.
    let mut per_device: BTreeMap<u32, Vec<(f64, f64)>> = BTreeMap::new();
    for r in &rows {
        per_device.entry(r.gpu).or_default().push((r.start, r.end));
    }
    for (d, spans) in &mut per_device {
        spans.sort_by(|a, b| a.0.total_cmp(&b.0));
        for w in spans.windows(2) {
            assert!(w[0].1 <= w[1].0, "overlap on device {d}: {w:?}");
        }
    }
    // The drain: a GPU's devices take no new task from the request on, run
    // none when the layout changes, and the old ones none after it.
    let mut devices_of: BTreeMap<u64, Vec<u32>> =
        BTreeMap::from([(0, (2..=6).collect()), (1, (7..=11).collect())]);
    for (c, (gpu, _, asked, new)) in plan["mig_changes"].as_array().unwrap().iter().zip(&changes) {
        let applied = c["applied_s"].as_f64().unwrap();
        assert!(applied >= *asked);
        let old = devices_of.insert(*gpu, new.iter().map(|&d| d as u32).collect());
        for r in rows
            .iter()
            .filter(|r| old.as_ref().unwrap().contains(&r.gpu))
        {
            assert!(
                !(r.start > *asked && r.start < applied),
                "{} started on {} while GPU {gpu} drained ({asked}..{applied})",
                r.id,
                r.device
            );
            assert!(
                !(r.start < applied && r.end > applied),
                "{} ran on {} when GPU {gpu} changed at {applied}",
                r.id,
                r.device
            );
            assert!(r.start < applied, "{} on retired {}", r.id, r.device);
        }
    }

    // The text report lists the changes below the metrics.
    let text = success(&gpuctl(&[
        "simulate",
        "--host",
        &host,
        "--trace",
        &trace,
        "--apps",
        &apps,
        "--policy",
        "mig-plan",
        "--mig-delay",
        "30",
        "--plugin-dir",
        plugins.path().to_str().unwrap(),
    ]));
    let table = text
        .split("MIG layout changes\n")
        .nth(1)
        .unwrap_or_else(|| panic!("no changes table: {text}"));
    let first: Vec<&str> = table.lines().take(2).collect();
    assert_eq!(
        first,
        [
            "policy    gpu  asked_s  applied_s  layout",
            "mig-plan    0   1620.5     1670.6  4g.20gb@0,1g.5gb@4,1g.5gb@5,1g.5gb@6",
        ]
    );
}

#[test]
fn a_bad_mig_delay_is_refused() {
    let err = failure(&gpuctl(&[
        "simulate",
        "--host",
        &example("host-mig-shift.toml"),
        "--trace",
        &example("mig-shift.csv"),
        "--policy",
        "mig-plan",
        "--mig-delay=-1",
    ]));
    assert!(
        err.contains("--mig-delay") && err.contains("expected seconds or a duration such as 90s"),
        "{err}"
    );
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig { cases: 24, ..Default::default() })]

    /// mig-plan changing layouts quickly (a 5 s window, a plan every 2 s, a
    /// change per GPU every 4 s, any gain) on random hosts whose A100s may be
    /// split: no fault; every task runs once, on as many devices as it asked
    /// for, or is rejected once; no device runs two tasks at once; each
    /// device holds its task's memory; a gang never runs on a MIG instance;
    /// the old instances of a changed GPU run nothing after the change.
    #[test]
    fn mig_plan_keeps_schedules_valid_while_it_changes_layouts(
        inst in crate::validity::instance_with(true),
    ) {
        use proptest::prelude::*;
        let plugin = crate::validity::registry().find("mig-plan").unwrap();
        let params: Vec<(String, String)> = [
            ("window_s", "5"),
            ("period_s", "2"),
            ("min_interval_s", "4"),
            ("min_gain", "0"),
        ]
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
        let out = gpu_agent_sim::simulate(
            &inst.host,
            &inst.trace(),
            plugin.instantiate(&params).unwrap(),
            |_| {},
        )
        .unwrap();
        prop_assert!(out.faults.is_empty(), "{:?}", out.faults);
        let rejected: Vec<&str> = out.metrics.rejected.iter().map(|r| r.id.as_str()).collect();
        let mut per_device: BTreeMap<u32, Vec<(f64, f64)>> = BTreeMap::new();
        for task in &inst.tasks {
            let rows: Vec<_> = out.schedule.iter().filter(|r| r.id == task.id).collect();
            let refused = rejected.iter().filter(|&&r| r == task.id).count();
            prop_assert!(
                (rows.is_empty() && refused == 1) || (!rows.is_empty() && refused == 0),
                "{}: {} rows, rejected {} times", task.id, rows.len(), refused
            );
            if rows.is_empty() {
                continue;
            }
            let n = rows.len() as u32;
            prop_assert!(n == task.gpus || task.alt_gpus.contains(&n), "{} on {n}", task.id);
            for r in &rows {
                let d = &out.devices[r.gpu as usize];
                prop_assert!(d.memory_gb >= task.mem_gb, "{} on {}", task.id, d.label());
                prop_assert!(n == 1 || d.mig().is_none(), "gang {} on {}", task.id, d.label());
                per_device.entry(r.gpu).or_default().push((r.start, r.end));
            }
        }
        for (d, spans) in &mut per_device {
            spans.sort_by(|a, b| a.0.total_cmp(&b.0));
            for w in spans.windows(2) {
                prop_assert!(w[0].1 <= w[1].0 + 1e-9, "overlap on {d}: {:?}", w);
            }
        }
        // A retired instance (an instance of a GPU whose later change made
        // other devices) ran nothing after that change.
        for c in &out.mig_changes {
            for r in &out.schedule {
                let d = &out.devices[r.gpu as usize];
                let old = d.mig().is_some_and(|m| m.parent == c.gpu)
                    && !c.devices.contains(&r.gpu)
                    && r.gpu < c.devices.iter().copied().min().unwrap_or(u32::MAX);
                prop_assert!(
                    !(old && r.end > c.applied_s + 1e-9),
                    "{} on {} ends at {} after GPU {}'s change at {}",
                    r.id, d.label(), r.end, c.gpu, c.applied_s
                );
            }
        }
    }
}
