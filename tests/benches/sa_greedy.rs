//! sa-greedy's search speed: iterations per second of one decision's
//! annealing, with incremental neighbour evaluation (the policy's) beside the
//! same search re-evaluating every neighbour in full (the baseline), on batch
//! problems of n tasks and m devices.
//!
//! Run: `cargo bench -p gpu-agent-tests --bench sa_greedy` (release build).

use std::time::{Duration, Instant};

use gpu_agent_sa_search::{
    anneal::{anneal, Cooling, Neighbourhood, Settings, AUTO_T0_SHARE},
    plan::{Cost, PlanTask, Problem},
};

const ITERATIONS: u64 = 10_000;
const RUNS: usize = 5;
const ALPHA: f64 = 0.9995;
const SIZES: [(usize, usize); 4] = [(100, 4), (1000, 16), (1000, 64), (5000, 16)];

/// n tasks at time 0 on m free devices of speeds 0.5, 1 and 2: work 1..100,
/// one task in 20 a gang of 2 or 4, weights 1..4, deadlines uniform up to 1.5x
/// the time the host needs for all the work.
fn problem(n: usize, m: usize, seed: u64) -> Problem {
    let mut rng = fastrand::Rng::with_seed(seed);
    let speeds: Vec<f64> = (0..m).map(|_| [0.5, 1.0, 2.0][rng.usize(..3)]).collect();
    let works: Vec<f64> = (0..n).map(|_| f64::from(rng.u32(1..=100))).collect();
    let horizon = 1.5 * works.iter().sum::<f64>() / speeds.iter().sum::<f64>();
    let tasks = works
        .iter()
        .map(|w| PlanTask {
            gpus: if rng.usize(..20) == 0 {
                [2, 4][rng.usize(..2)].min(m as u32)
            } else {
                1
            },
            weight: f64::from(rng.u32(1..=4)),
            deadline: rng.f64() * horizon,
            runtimes: speeds.iter().map(|v| w / v).collect(),
        })
        .collect();
    Problem::new(0.0, vec![0.0; m], tasks)
}

fn settings() -> Settings {
    Settings {
        iterations: ITERATIONS,
        t0: None,
        alpha: ALPHA,
        deadline: None,
    }
}

/// The policy's search: incremental evaluation.
fn incremental(p: &Problem, seed: u64) -> (Duration, Cost, u64) {
    let start = Instant::now();
    let out = anneal(
        p,
        (0..p.len() as u32).collect(),
        &settings(),
        &mut fastrand::Rng::with_seed(seed),
    );
    (start.elapsed(), out.cost, out.iterations)
}

/// The same search, draw for draw, with every neighbour evaluated from
/// scratch (`Problem::cost`) and each accepted one planned again for its tardy
/// tasks.
fn full(p: &Problem, seed: u64) -> (Duration, Cost, u64) {
    let started = Instant::now();
    let mut rng = fastrand::Rng::with_seed(seed);
    let mut order: Vec<u32> = (0..p.len() as u32).collect();
    let mut cost = p.cost(&order);
    let mut best = cost;
    let mut cooling = Cooling::new(AUTO_T0_SHARE * cost.twt, ALPHA);
    let tardy_of = |order: &[u32]| -> Vec<usize> {
        p.plan(order)
            .iter()
            .zip(order)
            .enumerate()
            .filter(|(pos, (pl, &i))| {
                *pos > 0
                    && pl
                        .as_ref()
                        .is_some_and(|pl| pl.end > p.task(i as usize).deadline)
            })
            .map(|(pos, _)| pos)
            .collect()
    };
    let mut tardy = tardy_of(&order);
    let (mut neighbourhood, mut candidate) = (Neighbourhood::default(), Vec::new());
    let mut iterations = 0;
    while iterations < ITERATIONS && !tardy.is_empty() {
        let count = ((cooling.rho() * tardy.len() as f64).round() as usize).clamp(1, tardy.len());
        neighbourhood.draw(&order, &mut tardy, count, &mut rng, &mut candidate);
        let u = 1.0 - rng.f64();
        let limit = cost.twt - cooling.temperature() * u.ln();
        iterations += 1;
        cooling.cool();
        let c = p.cost(&candidate);
        if c.twt <= limit {
            std::mem::swap(&mut order, &mut candidate);
            cost = c;
            if c.total_cmp(&best).is_lt() {
                best = c;
            }
            tardy = tardy_of(&order);
        } else {
            tardy.sort_unstable();
        }
    }
    (started.elapsed(), best, iterations)
}

fn median(mut times: Vec<Duration>) -> f64 {
    times.sort_unstable();
    times[times.len() / 2].as_secs_f64()
}

fn main() {
    println!("sa-greedy search: {ITERATIONS} iterations, alpha {ALPHA}, t0 auto, median of {RUNS} runs (release build)");
    println!(
        "{:>6} {:>7} {:>6} | {:>10} {:>9} | {:>10} {:>9} | {:>7} | {:>12} {:>12}",
        "tasks",
        "devices",
        "iters",
        "incr. s",
        "iter/s",
        "full s",
        "iter/s",
        "speedup",
        "start twt",
        "best twt"
    );
    for (n, m) in SIZES {
        let p = problem(n, m, 42);
        let start_twt = p.cost(&(0..n as u32).collect::<Vec<_>>()).twt;
        let (mut fast, mut slow) = (Vec::new(), Vec::new());
        let mut result = None;
        for _ in 0..RUNS {
            let (t, cost, iters) = incremental(&p, 1);
            let (u, full_cost, full_iters) = full(&p, 1);
            assert_eq!(
                (cost, iters),
                (full_cost, full_iters),
                "the two evaluations disagree"
            );
            fast.push(t);
            slow.push(u);
            result = Some((cost, iters));
        }
        let (cost, iters) = result.expect("ran");
        let (fast, slow) = (median(fast), median(slow));
        println!(
            "{n:>6} {m:>7} {iters:>6} | {fast:>10.4} {:>9.0} | {slow:>10.4} {:>9.0} | {:>6.1}x | {start_twt:>12.0} {:>12.0}",
            iters as f64 / fast,
            iters as f64 / slow,
            slow / fast,
            cost.twt
        );
    }
}
