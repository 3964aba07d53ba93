//! `edf-hier` through the real plugin file: a hand-solved instance with usage
//! costs and alternative device counts through `gpuctl simulate`, and random
//! instances under random group settings and either solver, checked for
//! validity and determinism.

use gpu_agent_sim as sim;
use proptest::prelude::*;

use crate::harness::{success, Sim, EDF_HIER};
use crate::validity::{check_valid, instance, registry};

// Devices 0 and 1: speed 1, free of charge. Device 2: speed 0.5, device 3:
// speed 1, both 36 an hour (0.01 a second). Two groups: group 0 = {0, 2},
// group 1 = {1, 3}.
const HOST: &str = "[[gpu]]\nmodel = \"A100-SXM4-40GB\"\ncount = 2\nspeed = 1\n\n\
    [[gpu]]\nmodel = \"A100-SXM4-40GB\"\nspeed = 0.5\ncost_per_hour = 36\n\n\
    [[gpu]]\nmodel = \"A100-SXM4-40GB\"\nspeed = 1\ncost_per_hour = 36\n";
const TRACE: &str = "id,arrival,workload,mem_gb,deadline,weight,gpus,gpus_alt\n\
    a,0,4,1,9,1,1,2\n\
    b,0,9,1,9.5,1,1,\n\
    c,0,12,1,9.2,1,1,2\n\
    d,1,2,1,20,1,1,\n";

#[test]
fn tasks_are_dealt_by_deadline_and_planned_for_deadline_and_cost() {
    // t = 0: deadline order a, c, b, dealt one at a time: a and b to group 0,
    //   c to group 1.
    //   Group 0: the greedy rule would put a on the fast device 0 (0..4, on
    //   time) and b after it (4..13, 3.5 s late). The MILP puts a on the
    //   slow, dear device 2 (0..8, cost 0.08, on time) and b on device 0 (0..9,
    //   on time). (a on both devices runs 4 s: the slow one sets the pace.)
    //   Group 1: c on one device ends at 12, 2.8 s late; on both it takes
    //   6 s (cost 0.06) and is on time.
    // t = 1: d arrives: group 0, whose devices are busy until 9 and 8. d is on
    //   time on either; device 0 (9..11) is free of charge, device 2 (8..12)
    //   is not, so it waits for device 0, and still does at 8.
    let (rows, metrics) = simulate(&["groups=2"]);
    assert_eq!(
        rows,
        ["b,0,0,9", "c,1,0,6", "c,3,0,6", "a,2,0,8", "d,0,9,11"]
    );
    // Every task on time; twct = 8 + 9 + 6 + (11 - 1).
    assert_eq!(metrics["twt"].as_f64(), Some(0.0));
    assert_eq!(metrics["twct"].as_f64(), Some(33.0));
}

#[test]
fn the_exhaustive_search_plans_as_the_milp_does() {
    // solver = search, and solver = auto (the default) in overload from the
    // first task pending: the same optimal group plans, so the same schedule.
    for params in [
        ["groups=2", "solver=search"],
        ["groups=2", "overload_pending=0"],
    ] {
        let (rows, metrics) = simulate(&params);
        assert_eq!(
            rows,
            ["b,0,0,9", "c,1,0,6", "c,3,0,6", "a,2,0,8", "d,0,9,11"],
            "{params:?}"
        );
        assert_eq!(metrics["twt"].as_f64(), Some(0.0));
        assert_eq!(metrics["twct"].as_f64(), Some(33.0));
    }
}

#[test]
fn without_the_milp_the_greedy_rule_plans() {
    // milp_max_tasks = 0: group 0 as the greedy rule has it, a on device 0
    // (0..4), b after it (4..13, 3.5 s late); d avoids the idle but dear
    // device 2 and waits for device 0 (13..15, on time). c as before.
    let (rows, metrics) = simulate(&["groups=2", "milp_max_tasks=0"]);
    assert_eq!(
        rows,
        ["a,0,0,4", "c,1,0,6", "c,3,0,6", "b,0,4,13", "d,0,13,15"]
    );
    assert_eq!(metrics["twt"].as_f64(), Some(3.5));
    assert_eq!(metrics["twct"].as_f64(), Some(37.0));
}

/// Runs HOST and TRACE under edf-hier with `params`; returns the schedule's
/// (id, gpu, start, end) rows and the metrics.
fn simulate(params: &[&str]) -> (Vec<String>, serde_json::Value) {
    let sim = Sim::new(&[EDF_HIER], HOST, TRACE);
    let schedule = sim.path("schedule.csv");
    let mut args = vec!["--policy", "edf-hier", "--json", "--schedule", &schedule];
    for p in params {
        args.extend(["--param", p]);
    }
    let metrics = serde_json::from_str(&success(&sim.run(&args))).unwrap();
    let rows = std::fs::read_to_string(&schedule)
        .unwrap()
        .lines()
        .skip(1)
        .map(|l| l.split(',').take(4).collect::<Vec<_>>().join(","))
        .collect();
    (rows, metrics)
}

/// What a user sees of a bad value: the loader's refusal naming the
/// parameter, what it takes and what it got.
#[test]
fn bad_parameters_are_refused_by_name() {
    let sim = Sim::new(&[EDF_HIER], HOST, TRACE);
    for (param, expected) in [
        (
            "dealing=fifo",
            "dealing: expected one of rr, edf, got \"fifo\"",
        ),
        ("groups=0", "groups: expected an integer >= 1, got \"0\""),
        (
            "groups=two",
            "groups: expected an integer >= 1, got \"two\"",
        ),
        (
            "group_size=4",
            "group_size: expected an integer from 1 to 3, got \"4\"",
        ),
        (
            "group_size=0",
            "group_size: expected an integer from 1 to 3, got \"0\"",
        ),
        ("period_s=0", "period_s: expected a number > 0, got \"0\""),
        (
            "period_s=inf",
            "period_s: expected a number > 0, got \"inf\"",
        ),
        (
            "time_limit_ms=0",
            "time_limit_ms: expected an integer >= 1, got \"0\"",
        ),
        (
            "milp_max_tasks=9",
            "milp_max_tasks: expected an integer from 0 to 8, got \"9\"",
        ),
        (
            "max_configs=0",
            "max_configs: expected an integer from 1 to 16, got \"0\"",
        ),
        ("window=0", "window: expected an integer >= 1, got \"0\""),
        (
            "solver=simplex",
            "solver: expected one of auto, milp, search, got \"simplex\"",
        ),
        (
            "overload_pending=-1",
            "overload_pending: expected an integer >= 0, got \"-1\"",
        ),
    ] {
        let out = sim.run(&["--policy", "edf-hier", "--param", param]);
        let err = crate::harness::failure(&out);
        assert!(
            err.contains(&format!("policy edf-hier: {expected}")),
            "{param}: {err}"
        );
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 32, ..ProptestConfig::default() })]

    #[test]
    fn any_grouping_schedules_validly_and_deterministically(
        inst in instance(),
        groups in 1usize..=5,
        group_size in 1usize..=3,
        milp_max_tasks in 0usize..=4,
        max_configs in 1usize..=8,
        period_s in prop::sample::select(vec!["0.5", "7", "60"]),
        solver in prop::sample::select(vec!["auto", "milp", "search"]),
        overload_pending in prop::sample::select(vec![0usize, 3, 256]),
    ) {
        let groups = groups.min(inst.host.devices.len());
        let params: Vec<(String, String)> = [
            ("groups", groups.to_string()),
            ("group_size", group_size.to_string()),
            ("milp_max_tasks", milp_max_tasks.to_string()),
            ("max_configs", max_configs.to_string()),
            ("period_s", period_s.to_string()),
            ("solver", solver.to_string()),
            ("overload_pending", overload_pending.to_string()),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v))
        .collect();
        let plugin = registry().find("edf-hier").unwrap();
        let trace = inst.trace();
        let run = || sim::simulate(&inst.host, &trace, plugin.instantiate(&params).unwrap(), |_| {}).unwrap();
        let outcome = run();
        prop_assert!(outcome.faults.is_empty(), "{:?}", outcome.faults);
        let rejected: Vec<String> = outcome.metrics.rejected.iter().map(|r| r.id.clone()).collect();
        check_valid(&inst, &outcome.schedule, &rejected)?;
        prop_assert_eq!(outcome.schedule, run().schedule);
    }
}
