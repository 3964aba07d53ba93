//! Benchmark of `edf-hier`'s group MILP (not a timed test): solve times on
//! random group instances by group size and task count, how often the solver
//! proved its plan optimal within the limit, and the mean relative gain of the
//! decoded MILP plan over the greedy rule's (weighted tardiness plus cost).
//!
//! Devices: speed 0.5, 1 or 2, cost 0, 1 or 3 an hour, some busy until 5 or
//! 20. Tasks: 1 or 2 GPUs, some with an alternative count, deadlines from half
//! to four times their work, weights 1 to 4; up to 8 configurations each.
//!
//! Run with `cargo bench -p gpu-agent-tests --bench edf_hier`.

use std::time::{Duration, Instant};

use gpu_agent_plugin_api::{
    abi_stable::std_types::{ROption, RSlice, RStr, RVec},
    AppModel, Device, Task, TaskState, View,
};
use gpu_agent_policy_edf_hier::{
    config::{candidate, usable, Candidate},
    greedy::{objective, place},
    milp,
    plan::decode,
    timeline::Timeline,
};

const INSTANCES: usize = 30;
/// The solver's wall-clock limit here (the policy's default is 500 ms).
const LIMIT: Duration = Duration::from_secs(2);
const MAX_CONFIGS: usize = 8;

/// A small deterministic generator (xorshift64*).
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
    fn pick<T: Copy>(&mut self, xs: &[T]) -> T {
        xs[self.below(xs.len() as u64) as usize]
    }
}

fn device(rng: &mut Rng, index: u32) -> Device<'static> {
    Device {
        index,
        model: RStr::from_str("A100-SXM4-80GB"),
        memory_gb: 80.0,
        speed: rng.pick(&[0.5, 1.0, 2.0]),
        cost_per_hour: rng.pick(&[0.0, 1.0, 3.0]),
        online: true,
        running: ROption::RNone,
        queue: RSlice::from_slice(&[]),
        available_at: rng.pick(&[0.0, 0.0, 5.0, 20.0]),
        clock_range: gpu_agent_plugin_api::ClockRange::DEFAULT_ONLY,
        default_power: gpu_agent_plugin_api::PowerModel {
            p0: 0.0,
            gamma: 0.0,
            c: 0.0,
        },
        mig: ROption::RNone,
    }
}

fn task(rng: &mut Rng, key: u64) -> Task {
    let gpus = rng.pick(&[1, 1, 2]);
    let alt: Vec<u32> = match rng.below(3) {
        0 => vec![if gpus == 1 { 2 } else { 1 }],
        1 => vec![4],
        _ => Vec::new(),
    };
    let workload = 1.0 + rng.below(40) as f64;
    Task {
        key,
        id: format!("t{key}").into(),
        arrival: 0.0,
        workload,
        mem_gb: 1.0,
        deadline: workload * rng.pick(&[0.5, 1.0, 2.0, 4.0]),
        weight: 1.0 + rng.below(4) as f64,
        gpus,
        alt_gpus: alt.into(),
        runtimes: RVec::new(),
        app: AppModel::builtin_default(),
        state: TaskState::Pending,
    }
}

struct Row {
    devices: usize,
    tasks: usize,
    configs: f64,
    millis: Vec<f64>,
    optimal: usize,
    gain: f64,
}

fn run(rng: &mut Rng, devices: usize, tasks: usize) -> Row {
    let mut millis = Vec::new();
    let (mut optimal, mut gain, mut configs) = (0, 0.0, 0.0);
    for _ in 0..INSTANCES {
        let devs: Vec<Device<'static>> = (0..devices as u32).map(|j| device(rng, j)).collect();
        let ts: Vec<Task> = (0..tasks as u64).map(|k| task(rng, k)).collect();
        let pending: Vec<u64> = (0..tasks as u64).collect();
        let view = View {
            now: 0.0,
            held: RSlice::from_slice(&ts),
            pending: RSlice::from_slice(&pending),
            devices: RSlice::from_slice(&devs),
        };
        let all: Vec<u32> = (0..devices as u32).collect();
        let release: Vec<f64> = devs.iter().map(|d| d.available_at).collect();
        let cands: Vec<Candidate> = ts
            .iter()
            .map(|t| {
                let u = usable(&view, t, &all);
                candidate(&view, t, &u, |j| release[j as usize], MAX_CONFIGS)
            })
            .collect();
        configs += cands.iter().map(|c| c.configs.len()).sum::<usize>() as f64 / tasks as f64;
        let greedy = place(&cands, &mut Timeline::new(0.0, &release), 0.0);
        let began = Instant::now();
        let solved = milp::solve(&cands, 0.0, |j| release[j as usize], &greedy, LIMIT)
            .expect("the MILP solves");
        millis.push(began.elapsed().as_secs_f64() * 1e3);
        optimal += usize::from(solved.optimal);
        let plan = decode(
            &cands,
            &solved.placements,
            &mut Timeline::new(0.0, &release),
            0.0,
        );
        let (g, m) = (objective(&cands, &greedy), objective(&cands, &plan));
        if g > 0.0 {
            gain += (g - m) / g;
        }
    }
    millis.sort_by(f64::total_cmp);
    Row {
        devices,
        tasks,
        configs: configs / INSTANCES as f64,
        millis,
        optimal,
        gain: gain / INSTANCES as f64,
    }
}

fn main() {
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    println!(
        "{:>7} {:>5} {:>11} {:>8} {:>8} {:>8} {:>8} {:>9} {:>13}",
        "devices",
        "tasks",
        "configs/task",
        "solves",
        "p50 ms",
        "p90 ms",
        "max ms",
        "optimal",
        "gain vs greedy"
    );
    for devices in [2, 4, 8] {
        for tasks in [2, 3, 4, 6, 8] {
            let r = run(&mut rng, devices, tasks);
            let pct = |p: f64| r.millis[((r.millis.len() - 1) as f64 * p).round() as usize];
            println!(
                "{:>7} {:>5} {:>11.1} {:>8} {:>8.2} {:>8.2} {:>8.2} {:>8}% {:>13.1}%",
                r.devices,
                r.tasks,
                r.configs,
                r.millis.len(),
                pct(0.5),
                pct(0.9),
                pct(1.0),
                100 * r.optimal / r.millis.len(),
                100.0 * r.gain,
            );
        }
    }
}
