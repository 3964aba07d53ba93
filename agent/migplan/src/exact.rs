//! The exact algorithm: the integer canonical program over all of C (spec
//! §4.6), on microlp under a time limit.
//!
//! The integer program starts from the greedy plan (so a timeout returns a
//! plan no worse than greedy's) and is told the LP bound, so it stops as soon
//! as it meets it; it has half the time limit. Its search finds good plans
//! but rarely proves them optimal, so then, for k = ⌈LP⌉, ⌈LP⌉+1, … below the
//! best plan's count, a search over the multisets of k undominated
//! configurations (a configuration is dominated when another holds at least
//! as many blocks of every type) decides whether k GPUs suffice: each
//! multiset must pass the LP with its GPUs fixed, then an exact hand-out of
//! its blocks. It finds a plan of k GPUs (optimal), proves k too few, or runs
//! out of time: then the best plan found is returned, marked not proven
//! optimal.

use std::time::{Duration, Instant};

use crate::greedy::Greedy;
use crate::lp::{assign, fixed, integer, Assignment, LpError};
use crate::problem::Problem;

/// An exact (or, after a timeout, best-found) plan.
#[derive(Debug, Clone, PartialEq)]
pub struct Exact {
    /// Configuration of each GPU.
    pub gpus: Vec<usize>,
    /// Blocks of each type per job.
    pub x: Vec<Vec<u32>>,
    /// Whether it is proven to use the fewest GPUs.
    pub optimal: bool,
}

/// Solves the integer program, from `start` (a feasible plan, used if it keeps
/// `max_gpus`), knowing no plan uses fewer than `bound` GPUs. `Infeasible`:
/// no plan keeps `max_gpus`.
pub fn exact(p: &Problem, bound: u32, start: &Greedy, limit: Duration) -> Result<Exact, LpError> {
    let began = Instant::now();
    let n = start.gpus.len() as u32;
    let within = p.max_gpus.is_none_or(|m| n <= m);
    if within && n <= bound {
        return Ok(Exact {
            gpus: start.gpus.clone(),
            x: start.x.clone(),
            optimal: true,
        });
    }
    let mut y0 = vec![0u32; p.configurations.len()];
    for &c in &start.gpus {
        y0[c] += 1;
    }
    let (max, warm) = if within {
        (n, Some((&start.x[..], &y0[..])))
    } else {
        (p.max_gpus.unwrap_or(n), None)
    };
    let best = match integer(p, Some(max), bound, warm, limit / 2) {
        Ok(solved) => {
            let gpus: Vec<usize> = solved
                .y
                .iter()
                .enumerate()
                .flat_map(|(c, &n)| std::iter::repeat_n(c, n as usize))
                .collect();
            let x = solved
                .x
                .iter()
                .map(|row| row.iter().map(|&v| v as u32).collect())
                .collect();
            let optimal = solved.optimal || gpus.len() as u32 <= bound;
            Some(Exact { gpus, x, optimal })
        }
        // The limit struck before the solver took up the start: keep it.
        Err(LpError::NoSolution) if within => Some(Exact {
            gpus: start.gpus.clone(),
            x: start.x.clone(),
            optimal: false,
        }),
        Err(LpError::NoSolution) => None,
        Err(e) => return Err(e),
    };
    if let Some(b) = &best {
        if b.optimal {
            return Ok(b.clone());
        }
    }
    // Settle the GPU counts below the best plan's, fewest first.
    let top = best.as_ref().map_or(max + 1, |b| b.gpus.len() as u32);
    let from = undominated(p);
    let deadline = began + limit;
    let mut k = bound;
    while k < top {
        match suffices(p, &from, k as usize, deadline) {
            Settled::Found(gpus, x) => {
                return Ok(Exact {
                    gpus,
                    x,
                    optimal: true,
                })
            }
            Settled::Impossible => k += 1,
            Settled::Unknown => break,
        }
    }
    match best {
        Some(b) => Ok(Exact {
            optimal: k >= top,
            ..b
        }),
        None if k >= top => Err(LpError::Infeasible),
        None => Err(LpError::NoSolution),
    }
}

/// What [`suffices`] found out.
enum Settled {
    /// A plan of k GPUs: configurations and hand-out.
    Found(Vec<usize>, Vec<Vec<u32>>),
    /// Proven: k GPUs are too few.
    Impossible,
    /// The deadline struck, or a hand-out could not be decided.
    Unknown,
}

/// The configurations no other one contains (indices, in problem order).
fn undominated(p: &Problem) -> Vec<usize> {
    let n = p.configurations.len();
    (0..n)
        .filter(|&c| {
            !(0..n).any(|d| {
                d != c
                    && p.counts[d] != p.counts[c]
                    && p.counts[d].iter().zip(&p.counts[c]).all(|(a, b)| a >= b)
            })
        })
        .collect()
}

/// Whether `k` GPUs of configurations `from` can meet every demand: every
/// multiset of `k` of them, each checked by the LP with its GPUs fixed and
/// then an exact hand-out.
fn suffices(p: &Problem, from: &[usize], k: usize, deadline: Instant) -> Settled {
    let mut pick = vec![0usize; k];
    let mut undecided = false;
    if k == 0 || from.is_empty() {
        return Settled::Impossible;
    }
    loop {
        if Instant::now() >= deadline {
            return Settled::Unknown;
        }
        let gpus: Vec<usize> = pick.iter().map(|&t| from[t]).collect();
        let mut y = vec![0u32; p.configurations.len()];
        for &c in &gpus {
            y[c] += 1;
        }
        if fixed(p, &y).is_ok() {
            match assign(p, &p.supply(&gpus)) {
                Assignment::Found(x) => return Settled::Found(gpus, x),
                Assignment::Impossible => {}
                Assignment::Unknown => undecided = true,
            }
        }
        // The next multiset: non-decreasing indices into `from`.
        let mut t = k;
        while t > 0 && pick[t - 1] == from.len() - 1 {
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
    if undecided {
        Settled::Unknown
    } else {
        Settled::Impossible
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::greedy::greedy;
    use crate::lp::relaxation;
    use crate::plan::Plan;
    use crate::problem::testing::worked_example;

    #[test]
    fn the_worked_example_takes_two_gpus_in_the_spec_layout() {
        let p = worked_example();
        let bound = relaxation(&p).unwrap().bound();
        let g = greedy(&p).unwrap();
        let e = exact(&p, bound, &g, Duration::from_secs(10)).unwrap();
        assert!(e.optimal);
        let plan = Plan::build(&p, &e.gpus, &e.x);
        assert_eq!(plan.verify(&p, bound), Ok(()));
        assert_eq!(
            plan.layouts(),
            [
                "4g.20gb@0,3g.20gb@4",
                "1g.5gb@0,1g.5gb@1,1g.5gb@2,1g.5gb@3,3g.20gb@4"
            ]
        );
        assert_eq!(plan.supply(&p), [400.0, 480.0, 80.0]);
    }

    #[test]
    fn the_spec_tables_12_configurations_are_the_undominated_ones() {
        // The slides' 12-row table lacks {3g,2g,1g} and {3g,1g,1g,1g}.
        let p = worked_example();
        let names: Vec<String> = undominated(&p)
            .iter()
            .map(|&c| p.configurations[c].to_string())
            .collect();
        assert_eq!(names.len(), 12);
        assert!(!names.contains(&"3g.20gb + 2g.10gb + 1g.5gb".to_string()));
        assert!(!names.contains(&"3g.20gb + 1g.5gb x3".to_string()));
    }
}
