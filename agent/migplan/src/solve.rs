//! One entry point: bound, run an algorithm, verify, report.

use std::fmt;
use std::str::FromStr;
use std::time::{Duration, Instant};

use serde::Serialize;

use crate::exact::exact;
use crate::greedy::greedy;
use crate::lp::{relaxation, LpError};
use crate::plan::{Outcome, Plan, Status, VerifyError};
use crate::problem::Problem;
use crate::rounding::rounding;

/// The planning algorithms (docs/mig.md §4.3–4.5).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Algorithm {
    /// The integer canonical program over all configurations, time-limited.
    Exact,
    /// Algorithm A: grid enumeration, vertex LP, cycle breaking, rounding.
    Rounding,
    /// Algorithm B: LP bound plus multiset-multicover greedy.
    Greedy,
}

impl Algorithm {
    /// Every algorithm, in the order reports list them.
    pub const ALL: [Algorithm; 3] = [Algorithm::Exact, Algorithm::Rounding, Algorithm::Greedy];

    /// Its name in files and on the command line.
    pub fn name(self) -> &'static str {
        match self {
            Algorithm::Exact => "exact",
            Algorithm::Rounding => "rounding",
            Algorithm::Greedy => "greedy",
        }
    }
}

impl fmt::Display for Algorithm {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Algorithm {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Algorithm::ALL
            .into_iter()
            .find(|a| a.name() == s)
            .ok_or_else(|| format!("unknown algorithm {s:?}; expected exact, rounding or greedy"))
    }
}

/// How to plan.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Options {
    /// The algorithm.
    pub algorithm: Algorithm,
    /// Rounding's grid ratio ε > 0.
    pub epsilon: f64,
    /// Exact's time limit.
    pub time_limit: Duration,
}

impl Default for Options {
    /// Exact, ε = 0.1, 10 s (docs/mig.md §5.1's example).
    fn default() -> Self {
        Options {
            algorithm: Algorithm::Exact,
            epsilon: 0.1,
            time_limit: Duration::from_secs(10),
        }
    }
}

/// Why no plan came out.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum PlanError {
    /// No plan meets every demand (within `max_gpus`).
    #[error("infeasible: {0}")]
    Infeasible(String),
    /// The LP solver failed.
    #[error("LP solver: {0}")]
    Solver(String),
    /// An algorithm's plan failed verification (a bug; nothing is written).
    #[error("{algorithm}'s plan failed verification: {error}")]
    Unverified {
        /// The algorithm.
        algorithm: Algorithm,
        /// What was wrong.
        error: VerifyError,
    },
}

impl From<LpError> for PlanError {
    fn from(e: LpError) -> Self {
        match e {
            LpError::Infeasible => PlanError::Infeasible("the LP has no solution".into()),
            other => PlanError::Solver(other.to_string()),
        }
    }
}

/// Plans `p` with `options`, reporting stages through `progress`; the plan is
/// verified (every demand met, every layout valid, no fewer GPUs than the LP
/// bound) before it is returned.
pub fn solve(
    p: &Problem,
    options: &Options,
    progress: &mut dyn FnMut(&str),
) -> Result<Outcome, PlanError> {
    let began = Instant::now();
    if let Some(job) = p.unservable() {
        return Err(PlanError::Infeasible(format!(
            "job {}: no profile planned with serves it",
            job.name
        )));
    }
    progress(&format!(
        "LP bound over {} configurations of {}",
        p.configurations.len(),
        p.model.name
    ));
    let lp = relaxation(p)?;
    let lower_bound = lp.bound();
    if let Some(max) = p.max_gpus {
        if lower_bound > max {
            return Err(PlanError::Infeasible(format!(
                "at least {lower_bound} GPUs are needed (LP bound), max_gpus is {max}"
            )));
        }
    }
    let mut note = None;
    let mut check = None;
    let (gpus, x, status) = match options.algorithm {
        Algorithm::Greedy => {
            progress("greedy");
            let g =
                greedy(p).ok_or_else(|| PlanError::Infeasible("greedy found no gain".into()))?;
            let status = optimal_if(g.gpus.len(), lower_bound);
            (g.gpus, g.x, status)
        }
        Algorithm::Exact => {
            progress("greedy start");
            let g =
                greedy(p).ok_or_else(|| PlanError::Infeasible("greedy found no gain".into()))?;
            progress(&format!(
                "integer program from {} GPUs, bound {lower_bound}, limit {:.0} s",
                g.gpus.len(),
                options.time_limit.as_secs_f64()
            ));
            let e = exact(p, lower_bound, &g, options.time_limit).map_err(|e| match e {
                LpError::Infeasible => PlanError::Infeasible(format!(
                    "no plan within max_gpus = {}",
                    p.max_gpus.unwrap_or(0)
                )),
                other => other.into(),
            })?;
            if !e.optimal {
                note = Some(format!(
                    "time limit of {} s reached: best plan found, not proven optimal",
                    options.time_limit.as_secs_f64()
                ));
            }
            let status = if e.optimal {
                Status::Optimal
            } else {
                Status::Feasible
            };
            (e.gpus, e.x, status)
        }
        Algorithm::Rounding => {
            let r = rounding(p, &lp, options.epsilon, progress)?;
            check = Some(r.check.clone());
            let status = optimal_if(r.gpus.len(), lower_bound);
            (r.gpus, r.x, status)
        }
    };
    let plan = Plan::build(p, &gpus, &x);
    plan.verify(p, lower_bound)
        .map_err(|error| PlanError::Unverified {
            algorithm: options.algorithm,
            error,
        })?;
    if let Some(max) = p.max_gpus {
        if plan.gpus.len() as u32 > max {
            return Err(PlanError::Infeasible(format!(
                "{} found a plan of {} GPUs, max_gpus is {max}",
                options.algorithm,
                plan.gpus.len()
            )));
        }
    }
    if let Some(c) = &mut check {
        c.within = plan.gpus.len() as u32 <= c.bound;
    }
    Ok(Outcome {
        algorithm: options.algorithm,
        plan,
        lower_bound,
        lp_value: lp.gpus,
        status,
        note,
        rounding: check,
        solve_s: began.elapsed().as_secs_f64(),
    })
}

/// Optimal when the plan meets the LP bound, else only feasible.
fn optimal_if(gpus: usize, bound: u32) -> Status {
    if gpus as u32 <= bound {
        Status::Optimal
    } else {
        Status::Feasible
    }
}
