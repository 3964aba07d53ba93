//! The exact algorithm: the integer canonical program over all of C (spec
//! §4.6), on microlp under a time limit.
//!
//! The search starts from the greedy plan (so a timeout returns a plan no
//! worse than greedy's) and is told the LP bound, so it stops as soon as it
//! meets it. A timeout returns the best plan found, marked not proven optimal.

use std::time::Duration;

use crate::greedy::Greedy;
use crate::lp::{integer, LpError};
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
    let solved = match integer(p, Some(max), bound, warm, limit) {
        Ok(s) => s,
        // The limit struck before the solver took up the start: keep it.
        Err(LpError::NoSolution) if within => {
            return Ok(Exact {
                gpus: start.gpus.clone(),
                x: start.x.clone(),
                optimal: false,
            })
        }
        Err(e) => return Err(e),
    };
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
    Ok(Exact { gpus, x, optimal })
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
}
