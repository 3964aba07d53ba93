//! sa-greedy's search speed: iterations per second of one decision's
//! annealing, with incremental neighbour evaluation (the policy's) beside the
//! same search re-evaluating every neighbour in full (the baseline), on batch
//! problems of n tasks and m devices.
//!
//! Each search is timed in wall time and in this thread's CPU time (steadier
//! on a shared machine); the table gives medians.
//!
//! Run: `cargo bench -p gpu-agent-tests --bench sa_greedy` (release build).

use rand::RngExt;
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
    let mut rng = gpu_agent_sa_search::seeded(seed);
    let speeds: Vec<f64> = (0..m)
        .map(|_| [0.5, 1.0, 2.0][rng.random_range::<usize, _>(0..3)])
        .collect();
    let works: Vec<f64> = (0..n)
        .map(|_| f64::from(rng.random_range::<u32, _>(1..=100)))
        .collect();
    let horizon = 1.5 * works.iter().sum::<f64>() / speeds.iter().sum::<f64>();
    let tasks = works
        .iter()
        .map(|w| PlanTask {
            gpus: if rng.random_range::<usize, _>(0..20) == 0 {
                [2, 4][rng.random_range::<usize, _>(0..2)].min(m as u32)
            } else {
                1
            },
            weight: f64::from(rng.random_range::<u32, _>(1..=4)),
            deadline: rng.random::<f64>() * horizon,
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

/// This thread's CPU time.
fn cpu_time() -> Duration {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid timespec to write into.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    assert_eq!(rc, 0, "clock_gettime(CLOCK_THREAD_CPUTIME_ID)");
    Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
}

/// Wall and CPU time of `f`, and its result.
fn timed<T>(f: impl FnOnce() -> T) -> (Duration, Duration, T) {
    let (wall, cpu) = (Instant::now(), cpu_time());
    let out = f();
    (wall.elapsed(), cpu_time() - cpu, out)
}

/// The policy's search: incremental evaluation.
fn incremental(p: &Problem, seed: u64) -> (Cost, u64) {
    let out = anneal(
        p,
        (0..p.len() as u32).collect(),
        &settings(),
        &mut gpu_agent_sa_search::seeded(seed),
    );
    (out.cost, out.iterations)
}

/// The same search, draw for draw, with every neighbour evaluated from
/// scratch (`Problem::cost`) and each accepted one planned again for its tardy
/// tasks.
fn full(p: &Problem, seed: u64) -> (Cost, u64) {
    let mut rng = gpu_agent_sa_search::seeded(seed);
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
        let u = 1.0 - rng.random::<f64>();
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
    (best, iterations)
}

fn median(mut times: Vec<Duration>) -> f64 {
    times.sort_unstable();
    times[times.len() / 2].as_secs_f64()
}

fn main() {
    println!(
        "sa-greedy search: {ITERATIONS} iterations, alpha {ALPHA}, t0 auto; medians of {RUNS} runs (release build)"
    );
    println!(
        "{:>6} {:>7} {:>6} | {:>8} {:>8} {:>9} | {:>8} {:>8} {:>9} | {:>7} | {:>10} {:>10}",
        "tasks",
        "devices",
        "iters",
        "incr. s",
        "cpu s",
        "iter/s",
        "full s",
        "cpu s",
        "iter/s",
        "speedup",
        "start twt",
        "best twt"
    );
    for (n, m) in SIZES {
        let p = problem(n, m, 42);
        let start_twt = p.cost(&(0..n as u32).collect::<Vec<_>>()).twt;
        let mut times: [Vec<Duration>; 4] = Default::default();
        let mut result = None;
        for _ in 0..RUNS {
            // Interleaved, so that machine noise hits both alike.
            let (wall, cpu, fast) = timed(|| incremental(&p, 1));
            let (full_wall, full_cpu, slow) = timed(|| full(&p, 1));
            assert_eq!(fast, slow, "the two evaluations disagree");
            for (v, t) in times.iter_mut().zip([wall, cpu, full_wall, full_cpu]) {
                v.push(t);
            }
            result = Some(fast);
        }
        let (cost, iters) = result.expect("ran");
        let [wall, cpu, full_wall, full_cpu] = times.map(median);
        println!(
            "{n:>6} {m:>7} {iters:>6} | {wall:>8.3} {cpu:>8.3} {:>9.0} | {full_wall:>8.3} {full_cpu:>8.3} {:>9.0} | {:>6.1}x | {start_twt:>10.0} {:>10.0}",
            iters as f64 / wall,
            iters as f64 / full_wall,
            full_wall / wall,
            cost.twt
        );
    }
}
