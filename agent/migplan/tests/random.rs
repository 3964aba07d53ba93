//! The algorithms on seeded random instances: exact equals a brute force on
//! tiny ones, rounding keeps its bound, greedy is feasible and never below the
//! LP bound, and every plan verifies.

use std::collections::HashSet;
use std::time::Duration;

use gpu_agent_catalogue::catalogue;
use gpu_agent_catalogue::mig::MigProfile;
use gpu_agent_migplan::{solve, Algorithm, Job, Options, PlanError, Problem, Status};
use rand::rngs::SmallRng;
use rand::{RngExt, SeedableRng};

fn options(algorithm: Algorithm) -> Options {
    Options {
        algorithm,
        epsilon: 0.1,
        time_limit: Duration::from_secs(30),
    }
}

/// A random instance on `model`: each job has a rate per compute slice, a
/// memory need that rules out the smaller profiles, and a demand worth up to
/// `max_slices` compute slices.
fn instance(
    rng: &mut SmallRng,
    model: &str,
    names: Option<&[&str]>,
    jobs: usize,
    max_slices: f64,
) -> Problem {
    let model = catalogue::lookup(model).unwrap();
    let table = model.mig.unwrap();
    let profiles: Vec<&'static MigProfile> = match names {
        Some(names) => names
            .iter()
            .map(|n| table.profiles.iter().find(|p| p.name == *n).unwrap())
            .collect(),
        None => table
            .profiles
            .iter()
            .filter(|p| !p.name.ends_with("+me"))
            .collect(),
    };
    let jobs = (0..jobs)
        .map(|k| {
            let rate = rng.random_range(20.0..200.0_f64).round();
            let min_memory = [0, 0, 1, 2, 4][rng.random_range(0..5usize)];
            let throughput = profiles
                .iter()
                .map(|p| {
                    if p.placement_size < min_memory {
                        0.0
                    } else {
                        let slices = f64::from(p.compute_slices);
                        // Larger instances scale a little worse or better.
                        (rate * slices * rng.random_range(0.75..1.1_f64)).round()
                    }
                })
                .collect();
            Job {
                name: format!("m{k}"),
                demand: (rate * rng.random_range(0.5..max_slices)).round().max(1.0),
                throughput,
            }
        })
        .collect();
    Problem::new(model, profiles, jobs, None).unwrap()
}

/// The fewest GPUs (at most `max`) that meet every demand, by brute force
/// over multisets of configurations and every handing of blocks to jobs
/// (supplies tracked capped at the demands); `None` if more are needed.
/// Throughputs and demands must be integers.
fn brute_force(p: &Problem, max: usize) -> Option<usize> {
    let nc = p.configurations.len();
    for k in 1..=max {
        let mut pick = vec![0usize; k];
        loop {
            if feasible(p, &pick) {
                return Some(k);
            }
            // Next multiset (non-decreasing indices).
            let mut t = k;
            while t > 0 && pick[t - 1] == nc - 1 {
                t -= 1;
            }
            if t == 0 {
                break;
            }
            pick[t - 1] += 1;
            for s in t..k {
                pick[s] = pick[t - 1];
            }
        }
    }
    None
}

fn feasible(p: &Problem, gpus: &[usize]) -> bool {
    let demand: Vec<u32> = p.jobs.iter().map(|j| j.demand as u32).collect();
    let mut states: HashSet<Vec<u32>> = HashSet::from([vec![0; p.jobs.len()]]);
    for &c in gpus {
        for (i, &n) in p.counts[c].iter().enumerate() {
            for _ in 0..n {
                let mut next = HashSet::new();
                for s in &states {
                    next.insert(s.clone());
                    for (j, job) in p.jobs.iter().enumerate() {
                        let f = job.throughput[i] as u32;
                        if f > 0 && s[j] < demand[j] {
                            let mut t = s.clone();
                            t[j] = (t[j] + f).min(demand[j]);
                            next.insert(t);
                        }
                    }
                }
                states = next;
            }
        }
    }
    states.contains(&demand)
}

#[test]
fn exact_equals_brute_force_on_tiny_instances() {
    let mut rng = SmallRng::seed_from_u64(15);
    let subsets: &[&[&str]] = &[
        &["1g.5gb", "3g.20gb", "7g.40gb"],
        &["1g.5gb", "2g.10gb", "4g.20gb"],
        &["2g.10gb", "3g.20gb"],
        &["1g.5gb", "2g.10gb", "3g.20gb", "4g.20gb", "7g.40gb"],
    ];
    let mut checked = 0;
    for n in 0..40 {
        let subset = subsets[n % subsets.len()];
        let jobs = rng.random_range(1..=3);
        let p = instance(&mut rng, "A100-SXM4-40GB", Some(subset), jobs, 6.0);
        // Small integers keep the brute force's state space small.
        let mut p = p;
        for j in &mut p.jobs {
            for f in &mut j.throughput {
                *f = (*f / 20.0).round();
            }
            j.demand = (j.demand / 20.0).round().max(1.0);
        }
        if p.unservable().is_some() {
            continue;
        }
        let exact = solve(&p, &options(Algorithm::Exact), &mut |_| {}).unwrap();
        assert_eq!(exact.status, Status::Optimal);
        let brute = brute_force(&p, 3);
        match brute {
            Some(k) => assert_eq!(exact.plan.gpus.len(), k, "instance {n}: {p:?}"),
            None => assert!(exact.plan.gpus.len() > 3, "instance {n}"),
        }
        checked += usize::from(brute.is_some());
    }
    assert!(checked >= 25, "only {checked} instances fit in 3 GPUs");
}

#[test]
fn rounding_keeps_its_bound_on_200_instances() {
    let mut rng = SmallRng::seed_from_u64(4_3);
    for n in 0..200 {
        let (model, jobs) = if n % 2 == 0 {
            ("A100-SXM4-40GB", rng.random_range(2..=4))
        } else {
            ("H100-SXM5-80GB", rng.random_range(2..=4))
        };
        let names: Option<&[&str]> = if n % 2 == 0 {
            Some(&["1g.5gb", "2g.10gb", "3g.20gb", "4g.20gb", "7g.40gb"])
        } else {
            None
        };
        let p = instance(&mut rng, model, names, jobs, 8.0);
        let r = match solve(&p, &options(Algorithm::Rounding), &mut |_| {}) {
            Ok(r) => r,
            Err(PlanError::Infeasible(_)) => {
                assert!(p.unservable().is_some(), "instance {n}");
                continue;
            }
            Err(e) => panic!("instance {n}: {e}"),
        };
        let check = r.rounding.as_ref().expect("rounding reports its bound");
        assert!(check.within, "instance {n}: {check:?}");
        assert!(r.plan.gpus.len() as u32 <= check.bound);
        assert!(r.plan.gpus.len() as u32 >= r.lower_bound);
        // Σm of the first feasible grid vector is at least the LP optimum.
        assert!(
            f64::from(check.grid_gpus) >= r.lp_value - 1e-6,
            "instance {n}"
        );
    }
}

#[test]
fn greedy_is_feasible_and_never_below_the_bound_nor_exact() {
    let mut rng = SmallRng::seed_from_u64(44);
    for n in 0..30 {
        let model = ["A100-SXM4-40GB", "H100-SXM5-80GB"][n % 2];
        let jobs = rng.random_range(2..=8);
        let p = instance(&mut rng, model, None, jobs, 6.0);
        let g = match solve(&p, &options(Algorithm::Greedy), &mut |_| {}) {
            Ok(g) => g,
            Err(PlanError::Infeasible(_)) => {
                assert!(p.unservable().is_some(), "instance {n}");
                continue;
            }
            Err(e) => panic!("instance {n}: {e}"),
        };
        // solve() verified the plan: demands met, layouts valid, >= bound.
        assert!(g.plan.gpus.len() as u32 >= g.lower_bound);
        // Exact starts from greedy's plan: never worse, even when its short
        // limit strikes first.
        let quick = Options {
            time_limit: Duration::from_secs(1),
            ..options(Algorithm::Exact)
        };
        let e = solve(&p, &quick, &mut |_| {}).unwrap();
        assert!(e.plan.gpus.len() <= g.plan.gpus.len(), "instance {n}");
        assert_eq!(
            e.status == Status::Optimal,
            e.note.is_none(),
            "instance {n}"
        );
        assert!(e.plan.gpus.len() as u32 >= e.lower_bound);
    }
}

#[test]
fn a_gpu_cap_below_the_bound_is_infeasible() {
    let mut rng = SmallRng::seed_from_u64(7);
    let mut p = instance(&mut rng, "A100-SXM4-40GB", None, 4, 8.0);
    p.jobs[0].throughput.iter_mut().for_each(|f| *f = 1.0);
    p.jobs[0].demand = 1000.0;
    p.max_gpus = Some(2);
    for a in Algorithm::ALL {
        let err = solve(&p, &options(a), &mut |_| {}).unwrap_err();
        assert!(
            matches!(err, PlanError::Infeasible(ref m) if m.contains("max_gpus is 2")),
            "{a}: {err}"
        );
    }
}
