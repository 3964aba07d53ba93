//! Benchmark (not a timed test): one call of examples/policies/fifo.py
//! through the `python` plugin against one call of the Rust `fifo` rule, on
//! the same hand-built views, for the daemon's time budget
//! (`policy_budget_ms`, 3 s by default).
//!
//! Each view has P pending tasks (one in ten a gang of 2, memory that fits
//! every device or only half of them) and D devices, each with Q/D tasks
//! already queued and one running; FIFO places every pending task. A
//! `first` call is a fresh policy's first (every task is new to it: the
//! daemon's first call after `gpuctl policy use python` over a backlog); a
//! `next` call is the same view again (each task's object kept, the case of
//! every later call). The table shows medians of `RUNS` calls, in ms.
//!
//!     cargo bench --manifest-path plugins/python/Cargo.toml --target-dir target

use std::time::Instant;

use gpu_agent_fifo_rule::Fifo;
use gpu_agent_plugin_api::{
    abi_stable::std_types::{ROption, RSlice, RStr, RVec},
    AppModel, ClockRange, Decision, Device, Event, Param, PolicyImpl, PowerModel, Task, TaskState,
    View,
};
use gpu_agent_policy_python::PythonPolicy;

const RUNS: usize = 7;

fn task(key: u64, state: TaskState) -> Task {
    Task {
        key,
        id: format!("t{key}").into(),
        arrival: key as f64,
        workload: 10.0 + (key % 7) as f64,
        mem_gb: if key.is_multiple_of(3) { 30.0 } else { 8.0 },
        deadline: 1e6,
        weight: 1.0 + (key % 4) as f64,
        gpus: if key % 10 == 9 { 2 } else { 1 },
        alt_gpus: RVec::new(),
        runtimes: RVec::new(),
        app: AppModel::builtin_default(),
        state,
    }
}

/// The tasks (queued and running first, then pending), the pending keys
/// and each device's queue, for `pending` pending and `queued` queued tasks
/// on `devices` devices.
fn tasks(pending: usize, queued: usize, devices: usize) -> (Vec<Task>, Vec<u64>, Vec<Vec<u64>>) {
    let placed = (queued + devices) as u64;
    let mut held: Vec<Task> = (0..placed)
        .map(|k| {
            task(
                k,
                if k < devices as u64 {
                    TaskState::Running
                } else {
                    TaskState::Queued
                },
            )
        })
        .collect();
    let queues: Vec<Vec<u64>> = (0..devices)
        .map(|d| {
            (devices as u64..placed)
                .filter(|k| k % devices as u64 == d as u64)
                .collect()
        })
        .collect();
    held.extend((placed..placed + pending as u64).map(|k| task(k, TaskState::Pending)));
    (held, (placed..placed + pending as u64).collect(), queues)
}

fn devices<'a>(queues: &'a [Vec<u64>]) -> Vec<Device<'a>> {
    queues
        .iter()
        .enumerate()
        .map(|(i, queue)| Device {
            index: i as u32,
            model: RStr::from_str(if i % 2 == 0 { "A100-SXM4-40GB" } else { "T4" }),
            memory_gb: if i % 2 == 0 { 40.0 } else { 16.0 },
            speed: if i % 2 == 0 { 1.0 } else { 0.25 },
            cost_per_hour: 0.0,
            online: true,
            running: ROption::RSome(i as u64),
            queue: RSlice::from_slice(queue),
            available_at: 10.0 * (queue.len() + 1) as f64 + i as f64,
            clock_range: ClockRange::DEFAULT_ONLY,
            default_power: PowerModel {
                p0: 10.0,
                gamma: 12.0,
                c: 48.0,
            },
            mig: ROption::RNone,
        })
        .collect()
}

/// The median of `samples`, in ms.
fn median(mut samples: Vec<f64>) -> f64 {
    samples.sort_by(f64::total_cmp);
    samples[samples.len() / 2] * 1e3
}

fn main() {
    let module = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../examples/policies/fifo.py"
    );
    let params = [Param {
        key: "module".into(),
        value: module.into(),
    }];
    println!(
        "{:>7} {:>7} {:>4} {:>9} {:>12} {:>11} {:>9}",
        "pending", "queued", "D", "rust ms", "py first ms", "py next ms", "py/rust"
    );
    for (pending, queued, d) in [
        (1, 100, 8),
        (10, 1_000, 8),
        (100, 1_000, 8),
        (1_000, 1_000, 8),
        (1_000, 10_000, 64),
        (10_000, 0, 8),
        (10_000, 10_000, 64),
    ] {
        let (held, keys, queues) = tasks(pending, queued, d);
        let devices = devices(&queues);
        let view = View {
            now: 0.0,
            held: RSlice::from_slice(&held),
            pending: RSlice::from_slice(&keys),
            devices: RSlice::from_slice(&devices),
        };
        let event = Event::Arrived {
            task: *keys.last().expect("a pending task"),
        };
        let time = |policy: &mut dyn PolicyImpl| {
            let start = Instant::now();
            let decisions = policy.on_event(&view, &event).expect("decides");
            let elapsed = start.elapsed().as_secs_f64();
            (elapsed, decisions)
        };
        let (mut rust, mut first, mut next) = (Vec::new(), Vec::new(), Vec::new());
        let mut placed: Option<Vec<Decision>> = None;
        for _ in 0..RUNS {
            let (t, decisions) = time(&mut Fifo::default());
            rust.push(t);
            let mut python = PythonPolicy::new(&params).expect("loads fifo.py");
            let (t, got) = time(&mut python);
            first.push(t);
            assert_eq!(got, decisions, "the Python FIFO decides as the Rust one");
            next.push(time(&mut python).0);
            placed = Some(decisions);
        }
        assert_eq!(placed.map(|p| p.len()), Some(pending));
        let (rust, first, next) = (median(rust), median(first), median(next));
        println!(
            "{pending:>7} {queued:>7} {d:>4} {rust:>9.3} {first:>12.3} {next:>11.3} {:>8.0}x",
            next / rust
        );
    }
}
