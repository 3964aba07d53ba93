use gpu_agent_plugin_api::{
    abi_stable::std_types::{RSlice, RStr, RVec},
    AppModel, ClockRange, Param, PowerModel, TaskState,
};
use proptest::prelude::*;

use super::*;

/// A wide clock range: the paper's simulated domain fits inside.
const WIDE: ClockRange = ClockRange {
    core_min: 0.1,
    core_max: 1.2,
    mem_min: 0.5,
    mem_max: 1.2,
};

fn device(index: u32, available_at: f64, clock_range: ClockRange) -> Device<'static> {
    Device {
        index,
        model: RStr::from_str("T4"),
        memory_gb: 16.0,
        speed: 1.0,
        cost_per_hour: 0.0,
        online: true,
        running: ROption::RNone,
        queue: RSlice::from_slice(&[]),
        available_at,
        clock_range,
        default_power: PowerModel {
            p0: 10.0,
            gamma: 12.0,
            c: 48.0,
        },
        mig: ROption::RNone,
    }
}

fn task(key: TaskKey, workload: f64, deadline: f64, app: AppModel) -> Task {
    Task {
        key,
        id: format!("t{key}").into(),
        arrival: 0.0,
        workload,
        mem_gb: 1.0,
        deadline,
        weight: 1.0,
        gpus: 1,
        alt_gpus: RVec::new(),
        runtimes: RVec::new(),
        app,
        state: TaskState::Pending,
    }
}

/// Table III's jobs (P0 100, c 200, γ 0, D 25, t0 5) with the worked
/// example's deadlines (docs/dvfs.md §3.2), J1..J5 as keys 0..4.
fn table3() -> Vec<Task> {
    [
        (0.0, 50.0),
        (1.0, 36.0),
        (0.5, 60.0),
        (0.8, 100.0),
        (0.2, 300.0),
    ]
    .iter()
    .enumerate()
    .map(|(k, &(delta, deadline))| {
        let app = AppModel {
            name: "j".into(),
            delta,
            d: 25.0,
            t0: 5.0,
            power: ROption::RSome(PowerModel {
                p0: 100.0,
                gamma: 0.0,
                c: 200.0,
            }),
        };
        task(k as TaskKey, 30.0, deadline, app)
    })
    .collect()
}

fn run(policy: &mut Edl, now: f64, tasks: &[Task], devices: &[Device<'_>]) -> Vec<Decision> {
    let pending: Vec<TaskKey> = tasks.iter().map(|t| t.key).collect();
    let view = View {
        now,
        held: RSlice::from_slice(tasks),
        pending: RSlice::from_slice(&pending),
        devices: RSlice::from_slice(devices),
    };
    policy.on_event(&view, &Event::Activated).unwrap()
}

/// (task, device, clocks) of each decision, in order.
fn placed(decisions: &[Decision]) -> Vec<(TaskKey, u32, Option<Clocks>)> {
    decisions
        .iter()
        .filter(|d| !matches!(d, Decision::Dvfs { .. }))
        .map(|d| match d {
            Decision::Assign {
                task,
                devices,
                clocks,
                ..
            } => (*task, devices[0], clocks.into_option()),
            other => panic!("{other:?}"),
        })
        .collect()
}

/// (task, class, readjusted) of each [`Decision::Dvfs`], in order.
fn notes(decisions: &[Decision]) -> Vec<(TaskKey, DvfsClass, bool)> {
    decisions
        .iter()
        .filter_map(|d| match d {
            Decision::Dvfs {
                task,
                class,
                readjusted,
            } => Some((*task, *class, *readjusted)),
            _ => None,
        })
        .collect()
}

fn edl(theta: f64) -> Edl {
    Edl::new(
        Params::parse(&[
            Param {
                key: "theta".into(),
                value: theta.to_string().into(),
            },
            Param {
                key: "search".into(),
                value: "paper".into(),
            },
        ])
        .unwrap(),
    )
}

#[test]
fn worked_example_theta_0_9_fits_one_host_of_two_gpus() {
    // EDF: J2 (36), J1 (50), J3 (60), J4 (100), J5 (300). J3 does not fit
    // after J1 (slack 60 − 25.83 = 34.17 < 35.44) but its slack exceeds
    // 0.9 × 35.44, so it is readjusted into it (docs/dvfs.md §3.2:
    // S11(J2, J4), S12(J1, J3, J5)).
    let tasks = table3();
    let devices = [device(0, 0.0, WIDE), device(1, 0.0, WIDE)];
    let decisions = run(&mut edl(0.9), 0.0, &tasks, &devices);
    use DvfsClass::{DeadlinePrior as D, EnergyPrior as E};
    assert_eq!(
        notes(&decisions),
        [
            (1, D, false),
            (0, E, false),
            (2, E, true),
            (3, E, false),
            (4, E, false)
        ]
    );
    let got = placed(&decisions);
    let order: Vec<(TaskKey, u32)> = got.iter().map(|&(k, d, _)| (k, d)).collect();
    assert_eq!(order, [(1, 0), (0, 1), (2, 1), (3, 0), (4, 1)]);
    // J1 (δ 0, γ 0): lowest voltage, highest memory clock: t̂ 25.83, P̂ 125.
    assert_eq!(
        got[1].2,
        Some(Clocks {
            core: 0.5,
            mem: 1.2
        })
    );
    let at = |k: usize, c: Clocks| {
        let t = &tasks[k];
        30.0 * t.app.time_factor(c)
    };
    // J2 is deadline-prior and re-solved on its deadline: 36 (the dense
    // grid's best point within it).
    let j2 = at(1, got[0].2.unwrap());
    assert!(j2 <= 36.0 && j2 > 35.99, "{j2}");
    // J3 fills its slack 34.17, faster than its optimum 35.44.
    let j3 = at(2, got[2].2.unwrap());
    assert!(
        j3 <= 60.0 - 25.0 / 1.2 - 5.0 + 1e-9 && j3 > 0.9 * 35.44,
        "{j3}"
    );
}

#[test]
fn worked_example_theta_1_runs_j3_at_the_fastest_clocks() {
    // θ 1: J3's slack 34.17 is below t_θ = 35.44, and the paper's second
    // server does not exist on one host: J3 runs on the GPU free first at
    // the search's fastest clocks (g1(1.2) = 1.0916, 1.2):
    // 5 + 25 (0.5/1.0916 + 0.5/1.2) = 26.87, so it still ends at 52.70 ≤ 60.
    let tasks = table3();
    let devices = [device(0, 0.0, WIDE), device(1, 0.0, WIDE)];
    let got = placed(&run(&mut edl(1.0), 0.0, &tasks, &devices));
    let order: Vec<(TaskKey, u32)> = got.iter().map(|&(k, d, _)| (k, d)).collect();
    assert_eq!(order, [(1, 0), (0, 1), (2, 1), (3, 0), (4, 1)]);
    assert_eq!(
        got[2].2,
        Some(Clocks {
            core: gpu_agent_dvfs::g1(1.2),
            mem: 1.2
        })
    );
}

#[test]
fn with_late_default_a_task_no_gpu_takes_runs_at_default_clocks() {
    let tasks = table3();
    let devices = [device(0, 0.0, WIDE), device(1, 0.0, WIDE)];
    let mut policy = Edl::new(
        Params::parse(&[
            Param {
                key: "theta".into(),
                value: "1".into(),
            },
            Param {
                key: "search".into(),
                value: "paper".into(),
            },
            Param {
                key: "late".into(),
                value: "default".into(),
            },
        ])
        .unwrap(),
    );
    let got = placed(&run(&mut policy, 0.0, &tasks, &devices));
    assert_eq!((got[2].0, got[2].1, got[2].2), (2, 1, None));
}

/// Three `default`-profile tasks on two GPUs without DVFS (the default
/// clocks only): A (4 s, d 10), B (2 s, d 5), C (3 s, d 20), keys 0, 1, 2.
fn abc() -> (Vec<Task>, [Device<'static>; 2]) {
    let app = AppModel::builtin_default;
    let tasks = vec![
        task(0, 4.0, 10.0, app()),
        task(1, 2.0, 5.0, app()),
        task(2, 3.0, 20.0, app()),
    ];
    let only = ClockRange::DEFAULT_ONLY;
    (tasks, [device(0, 0.0, only), device(1, 0.0, only)])
}

fn with_rule(rule: &str) -> Edl {
    Edl::new(
        Params::parse(&[Param {
            key: "rule".into(),
            value: rule.into(),
        }])
        .unwrap(),
    )
}

#[test]
fn baselines_place_by_hand_computed_rules() {
    let (tasks, devices) = abc();
    let rows = |rule: &str| -> Vec<(TaskKey, u32)> {
        placed(&run(&mut with_rule(rule), 0.0, &tasks, &devices))
            .into_iter()
            .map(|(k, d, c)| {
                assert_eq!(c, None, "default clocks only");
                (k, d)
            })
            .collect()
    };
    // EDF order B, A, C. edl: the GPU free first each time.
    assert_eq!(rows("edl"), [(1, 0), (0, 1), (2, 0)]);
    // edf-wf: B to GPU 0 (tie: first), load 2/5; A to GPU 1 (load 0), load
    // 4/10; C: loads tie at 0.4 → GPU 0.
    assert_eq!(rows("edf-wf"), [(1, 0), (0, 1), (2, 0)]);
    // edf-bf: B to GPU 1 (tie: last), load 0.4; A to GPU 1 (largest load),
    // τ 6, load 0.6; C to GPU 1 again.
    assert_eq!(rows("edf-bf"), [(1, 1), (0, 1), (2, 1)]);
    // lpt-ff: A (4), C (3), B (2); A and C on GPU 0 (ends 4, 7), B no longer
    // fits there (5 − 7 < 2): GPU 1.
    assert_eq!(rows("lpt-ff"), [(0, 0), (2, 0), (1, 1)]);
    // bin-pack: edf-wf for its first batch, then first fit: a later task
    // goes to GPU 0, though GPU 1 is free earlier.
    let mut bin = with_rule("bin-pack");
    let first: Vec<(TaskKey, u32)> = placed(&run(&mut bin, 0.0, &tasks, &devices))
        .into_iter()
        .map(|(k, d, _)| (k, d))
        .collect();
    assert_eq!(first, [(1, 0), (0, 1), (2, 0)]);
    let later = [task(0, 1.0, 100.0, AppModel::builtin_default())];
    let busy = [
        device(0, 5.0, ClockRange::DEFAULT_ONLY),
        device(1, 4.0, ClockRange::DEFAULT_ONLY),
    ];
    let got = placed(&run(&mut bin, 1.0, &later, &busy));
    assert_eq!(got, [(0, 0, None)]);
}

#[test]
fn a_gang_task_takes_the_devices_free_first_at_default_clocks() {
    let mut t = task(0, 4.0, 10.0, AppModel::builtin_default());
    t.gpus = 2;
    let devices = [
        device(0, 3.0, WIDE),
        device(1, 1.0, WIDE),
        device(2, 2.0, WIDE),
    ];
    assert_eq!(
        run(&mut with_rule("edl"), 0.0, &[t], &devices),
        [Decision::Assign {
            task: 0,
            devices: vec![1, 2].into(),
            position: ROption::RNone,
            clocks: ROption::RNone,
        }]
    );
}

/// A task of random shape: (workload, deadline slack factor, δ, t0 share, P0 share).
fn arb_task() -> impl Strategy<Value = (f64, f64, f64, f64, f64)> {
    (
        1.0..50.0f64,
        1.0..4.0f64,
        0.05..0.95f64,
        0.0..0.5f64,
        0.2..0.45f64,
    )
}

fn random_tasks(shapes: &[(f64, f64, f64, f64, f64)]) -> Vec<Task> {
    shapes
        .iter()
        .enumerate()
        .map(|(k, &(w, slack, delta, t0, p0))| {
            let app = AppModel {
                name: "r".into(),
                delta,
                d: 1.0 - t0,
                t0,
                power: ROption::RSome(PowerModel {
                    p0: 200.0 * p0,
                    gamma: 30.0,
                    c: 200.0 * (1.0 - p0) - 30.0,
                }),
            };
            task(k as TaskKey, w, w * slack, app)
        })
        .collect()
}

/// Planned (start, end, clocks) per task, replaying the decisions.
fn plan(tasks: &[Task], devices: &[Device<'_>], decisions: &[Decision]) -> Vec<(f64, Clocks)> {
    let mut end: Vec<f64> = devices.iter().map(|d| d.available_at).collect();
    let mut out = vec![(f64::NAN, Clocks::DEFAULT); tasks.len()];
    for (k, d, c) in placed(decisions) {
        let c = c.unwrap_or(Clocks::DEFAULT);
        let t = &tasks[k as usize];
        end[d as usize] += t.workload * t.app.time_factor(c);
        out[k as usize] = (end[d as usize], c);
    }
    out
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]

    /// Every rule places every task once; with compat off, a task planned
    /// to end after its deadline runs at the search's fastest clocks (DVFS
    /// never slowed it into a miss).
    #[test]
    fn every_task_placed_once_and_late_ones_run_flat_out(
        shapes in prop::collection::vec(arb_task(), 1..12),
        gpus in 1usize..4,
        rule in prop::sample::select(vec!["edl", "edf-bf", "edf-wf", "lpt-ff", "bin-pack"]),
    ) {
        let tasks = random_tasks(&shapes);
        let devices: Vec<Device<'_>> = (0..gpus as u32).map(|i| device(i, 0.0, WIDE)).collect();
        let decisions = run(&mut with_rule(rule), 0.0, &tasks, &devices);
        let mut keys: Vec<TaskKey> = placed(&decisions).iter().map(|p| p.0).collect();
        keys.sort_unstable();
        prop_assert_eq!(keys, (0..tasks.len() as TaskKey).collect::<Vec<_>>());
        for (t, (end, clocks)) in tasks.iter().zip(plan(&tasks, &devices, &decisions)) {
            if end > t.deadline * (1.0 + 1e-9) {
                // The code grid's fastest point: V 1.25, fm at the top.
                let fastest = Clocks { core: gpu_agent_dvfs::g1(0.5 + 0.05 * 15.0), mem: 1.2 };
                prop_assert!((clocks.core - fastest.core).abs() < 1e-12 && clocks.mem == fastest.mem,
                    "{} late at {:?}", t.id, clocks);
            }
        }
    }

    /// With a GPU for every task, DVFS (compat off) misses no deadline the
    /// default clocks meet: each task's clocks meet d − a on their own.
    #[test]
    fn no_miss_from_dvfs_when_every_task_has_a_gpu(
        shapes in prop::collection::vec(arb_task(), 1..6),
        rule in prop::sample::select(vec!["edl", "edf-bf", "edf-wf", "lpt-ff", "bin-pack"]),
    ) {
        let tasks = random_tasks(&shapes);
        let n = tasks.len() as u32;
        let wide: Vec<Device<'_>> = (0..n).map(|i| device(i, 0.0, WIDE)).collect();
        let flat: Vec<Device<'_>> =
            (0..n).map(|i| device(i, 0.0, ClockRange::DEFAULT_ONLY)).collect();
        let base = plan(&tasks, &flat, &run(&mut with_rule(rule), 0.0, &tasks, &flat));
        let dvfs = plan(&tasks, &wide, &run(&mut with_rule(rule), 0.0, &tasks, &wide));
        for (t, (b, d)) in tasks.iter().zip(base.iter().zip(&dvfs)) {
            if b.0 <= t.deadline {
                prop_assert!(d.0 <= t.deadline * (1.0 + 1e-9), "{} ends {} > {}", t.id, d.0, t.deadline);
            }
        }
    }
}
