//! formats.md §5 to the letter: hand-computed instances through `gpuctl`, and
//! random instances checked against an independent reading of the rules.

use std::collections::BTreeMap;

use gpu_agent_core::catalogue;
use gpu_agent_core::TaskSpec;
use gpu_agent_sim::{self as sim, schedule::ScheduleRow};
use proptest::prelude::*;

use crate::harness::{success, Sim, FIFO, GREEDY_EFT};
use crate::validity::{check_valid, instance, registry, runtime, valid_devices, Instance, MODELS};

/// Runs `gpuctl simulate --json --schedule` and returns (metrics, schedule CSV).
fn simulate(host: &str, trace: &str, policy: &str) -> (serde_json::Value, String) {
    let sim = Sim::new(&[FIFO, GREEDY_EFT], host, trace);
    let schedule = sim.path("schedule.csv");
    let out = sim.run(&["--policy", policy, "--json", "--schedule", &schedule]);
    let metrics = serde_json::from_str(&success(&out)).unwrap();
    (metrics, std::fs::read_to_string(schedule).unwrap())
}

fn assert_metrics(m: &serde_json::Value, expected: &[(&str, f64)]) {
    for (key, value) in expected {
        let got = m[key]
            .as_f64()
            .unwrap_or_else(|| panic!("{key} missing in {m}"));
        assert!(
            (got - value).abs() < 1e-9,
            "{key}: expected {value}, got {got}"
        );
    }
}

// A T4 (device 0, speed 1) and an A100-SXM4-40GB (device 1, speed 2).
const TWO_SPEEDS: &str =
    "[[gpu]]\nmodel = \"T4\"\nspeed = 1\n\n[[gpu]]\nmodel = \"A100-SXM4-40GB\"\nspeed = 2\n";
const FOUR_TASKS: &str = "id,arrival,workload,mem_gb,deadline,weight\n\
    a,0,4,8,3,1\n\
    b,1,6,20,6,2\n\
    c,1,2,4,4,1\n\
    d,2,50,50,90,1\n";

#[test]
fn fifo_by_hand() {
    // a: both devices start at 0 → tie → device 0, 0..4.
    // b: 20 GB fits device 1 only: 1..4 (6 / 2).
    // c: both devices free at 4 → tie → device 0, 4..6.
    // d: 50 GB fits nowhere → rejected.
    let (m, schedule) = simulate(TWO_SPEEDS, FOUR_TASKS, "fifo");
    assert_eq!(
        schedule,
        "id,gpu,start,end,core_mhz,mem_mhz,energy_j,v,fc,fm,t,p,default_energy_j,class,readjusted,device\n\
         a,0,0,4,1590,5001,280,1,1,1,4,70,280,,,0\n\
         b,1,1,4,1095,1215,1200,1,1,1,3,400,1200,,,1\n\
         c,0,4,6,1590,5001,140,1,1,1,2,70,140,,,0\n"
    );
    assert_eq!(
        m["rejected"],
        serde_json::json!([{"id": "d", "reason": "needs 50 GB; the largest device has 40 GB"}])
    );
    assert_eq!((m["tasks"].as_u64(), m["dmc"].as_u64()), (Some(4), Some(2)));
    // twt = 1*(4-3) + 0 + 1*(6-4); twct = 4 + 2*3 + 5; act = 12/3;
    // utilization = (4+3+2) / (2*6); energy = T4 70 W * 6 s + A100 400 W * 3 s + A100 idle 55 W * 3 s.
    assert_metrics(
        &m,
        &[
            ("twt", 3.0),
            ("twct", 15.0),
            ("act", 4.0),
            ("dmr", 2.0 / 3.0),
            ("makespan", 6.0),
            ("utilization", 0.75),
            ("energy_j", 1785.0),
        ],
    );
}

#[test]
fn greedy_eft_by_hand() {
    // a: completes at 4 on device 0, at 2 on device 1 → device 1, 0..2.
    // b: device 1 only: 2..5.
    // c: device 0 completes at 3, device 1 at 6 → device 0, 1..3.
    let (m, schedule) = simulate(TWO_SPEEDS, FOUR_TASKS, "greedy-eft");
    assert_eq!(
        schedule,
        "id,gpu,start,end,core_mhz,mem_mhz,energy_j,v,fc,fm,t,p,default_energy_j,class,readjusted,device\n\
         a,1,0,2,1095,1215,800,1,1,1,2,400,800,,,1\n\
         c,0,1,3,1590,5001,140,1,1,1,2,70,140,,,0\n\
         b,1,2,5,1095,1215,1200,1,1,1,3,400,1200,,,1\n"
    );
    // twt = 0; twct = 2 + 2*4 + 2; act = 8/3; utilization = 7 / (2*5);
    // energy = 800 + 1200 + 140 + T4 idle 10 W * 3 s.
    assert_metrics(
        &m,
        &[
            ("twt", 0.0),
            ("twct", 12.0),
            ("act", 8.0 / 3.0),
            ("dmr", 0.0),
            ("makespan", 5.0),
            ("utilization", 0.7),
            ("energy_j", 2170.0),
        ],
    );
}

#[test]
fn gang_tasks_start_together_when_their_last_device_is_free() {
    // Three equal devices. x: device 0, 0..4. y (2 GPUs): devices 1 and 2, 0..6.
    // z (2 GPUs): earliest starts are device 0 (4) and device 1 (6) → 6..8 on 0 and 1,
    // device 0 idles from 4 to 6. u: device 2 is free first (6) → 6..7.
    let host = "[[gpu]]\nmodel = \"A100-SXM4-40GB\"\ncount = 3\nspeed = 1\n";
    let trace = "id,arrival,workload,mem_gb,deadline,weight,gpus\n\
        x,0,4,1,10,1,1\n\
        y,0,6,1,10,1,2\n\
        z,1,2,1,10,1,2\n\
        u,2,1,1,10,1,1\n";
    for policy in ["fifo", "greedy-eft"] {
        let (m, schedule) = simulate(host, trace, policy);
        let rows: Vec<_> = schedule
            .lines()
            .skip(1)
            .map(|l| l.split(',').take(4).collect::<Vec<_>>().join(","))
            .collect();
        assert_eq!(
            rows,
            vec!["x,0,0,4", "y,1,0,6", "y,2,0,6", "z,0,6,8", "z,1,6,8", "u,2,6,7"],
            "{policy}"
        );
        // twct = 4 + 6 + 7 + 5; utilization = (4 + 2*6 + 2*2 + 1) / (3*8).
        assert_metrics(
            &m,
            &[
                ("twt", 0.0),
                ("twct", 22.0),
                ("act", 5.5),
                ("makespan", 8.0),
                ("utilization", 0.875),
            ],
        );
    }
}

#[test]
fn runtimes_column_overrides_speed() {
    // Unrelated machines: a runs 5 s on device 0, 1 s on device 1; b cannot use device 1.
    let trace = "id,arrival,workload,mem_gb,deadline,weight,runtimes\n\
        a,0,100,1,10,1,5;1\n\
        b,0,100,1,10,1,2;inf\n";
    let (_, schedule) = simulate(TWO_SPEEDS, trace, "greedy-eft");
    let rows: Vec<_> = schedule
        .lines()
        .skip(1)
        .map(|l| l.split(',').take(4).collect::<Vec<_>>().join(","))
        .collect();
    assert_eq!(rows, vec!["a,1,0,1", "b,0,0,2"]);
}

/// Checks `rows` against formats.md §5 for `policy`, replaying the rules.
fn check(
    inst: &Instance,
    policy: &str,
    rows: &[ScheduleRow],
    rejected: &[String],
) -> Result<(), TestCaseError> {
    check_valid(inst, rows, rejected)?;
    let host = &inst.host;
    let mut by_id: BTreeMap<&str, Vec<&ScheduleRow>> = BTreeMap::new();
    for r in rows {
        by_id.entry(r.id.as_str()).or_default().push(r);
    }
    let mut order: Vec<&TaskSpec> = inst.tasks.iter().collect();
    order.sort_by(|a, b| a.arrival.total_cmp(&b.arrival));
    let mut avail = vec![0.0f64; host.devices.len()];
    for task in order {
        let valid = valid_devices(task, host);
        let k = task.gpus as usize;
        let Some(rows) = by_id.remove(task.id.as_str()) else {
            continue;
        };
        let (start, end) = (rows[0].start, rows[0].end);
        let mut devices: Vec<usize> = rows.iter().map(|r| r.gpu as usize).collect();
        devices.sort_unstable();
        let start_on = |j: usize| avail[j].max(task.arrival);
        let finish = |set: &[usize]| {
            set.iter()
                .map(|&j| start_on(j))
                .fold(task.arrival, f64::max)
                + set
                    .iter()
                    .map(|&j| runtime(task, host, j))
                    .fold(0.0, f64::max)
        };
        let expected: Vec<usize> = match policy {
            "fifo" => {
                let mut by_start = valid.clone();
                by_start.sort_by(|&a, &b| start_on(a).total_cmp(&start_on(b)).then(a.cmp(&b)));
                let mut chosen = by_start[..k].to_vec();
                chosen.sort_unstable();
                chosen
            }
            "greedy-eft" if k == 1 => {
                let best = valid
                    .iter()
                    .copied()
                    .min_by(|&a, &b| finish(&[a]).total_cmp(&finish(&[b])).then(a.cmp(&b)));
                vec![best.unwrap()]
            }
            _ => {
                // Gang: the completion must be the best over every k-subset.
                let best = subsets(&valid, k)
                    .iter()
                    .map(|s| finish(s))
                    .fold(f64::INFINITY, f64::min);
                prop_assert!(
                    (end - best).abs() <= 1e-9 * best.max(1.0),
                    "{}: ends {end}, best {best}",
                    task.id
                );
                devices.clone()
            }
        };
        prop_assert_eq!(&devices, &expected, "{}: wrong devices", &task.id);
        prop_assert!(
            (start - finish(&expected) + (end - start)).abs() <= 1e-9 * end.max(1.0),
            "{}: start {start}",
            task.id
        );
        prop_assert!(
            (end - finish(&expected)).abs() <= 1e-9 * end.max(1.0),
            "{}: end {end}",
            task.id
        );
        for &j in &expected {
            avail[j] = end;
        }
    }
    Ok(())
}

fn subsets(items: &[usize], k: usize) -> Vec<Vec<usize>> {
    if k == 0 {
        return vec![Vec::new()];
    }
    let mut out = Vec::new();
    for (i, &first) in items.iter().enumerate() {
        for mut rest in subsets(&items[i + 1..], k - 1) {
            rest.insert(0, first);
            out.push(rest);
        }
    }
    out
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 96, ..ProptestConfig::default() })]

    #[test]
    fn schedules_follow_the_baseline_rules(inst in instance()) {
        let trace = inst.trace();
        for policy in ["fifo", "greedy-eft"] {
            let instance = registry().find(policy).unwrap().instantiate(&[]).unwrap();
            let outcome = sim::simulate(&inst.host, &trace, instance, |_| {}).unwrap();
            prop_assert!(outcome.faults.is_empty(), "{:?}", outcome.faults);
            let rejected: Vec<String> = outcome.metrics.rejected.iter().map(|r| r.id.clone()).collect();
            check(&inst, policy, &outcome.schedule, &rejected)?;
            prop_assert_eq!(outcome.metrics.tasks, inst.tasks.len());
        }
    }
}

#[test]
fn catalogue_models_used_here_exist() {
    for m in MODELS {
        assert!(catalogue::lookup(m).is_some(), "{m}");
    }
}
