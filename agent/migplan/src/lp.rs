//! The canonical program of docs/mig.md §4.2 on the microlp solver (through good_lp):
//! its LP relaxation (the lower bound), the LP with the GPU counts fixed
//! (rounding's vertex), the integer program (exact), and the exact
//! re-assignment of given blocks to jobs.
//!
//! Throughputs are capped at the demand (docs/mig.md §4.1) everywhere: a block
//! never usefully gives a job more than its demand.

use std::time::Duration;

use good_lp::{
    microlp, variable, Expression, ProblemVariables, ResolutionError, Solution, SolutionStatus,
    SolverModel, Variable, WithInitialSolution, WithTimeLimit,
};

use crate::problem::Problem;

/// Tolerance on LP values: an LP optimum of 2.0000000001 is a bound of 2.
pub const TOLERANCE: f64 = 1e-6;

/// An LP or integer solution: x_ij per block type and job, y_σ per
/// configuration.
#[derive(Debug, Clone, PartialEq)]
pub struct Solved {
    /// x[i][j]: blocks of type i for job j.
    pub x: Vec<Vec<f64>>,
    /// y[σ]: GPUs of configuration σ.
    pub y: Vec<f64>,
    /// Σ y.
    pub gpus: f64,
    /// Whether the solver proved it optimal (false: a time limit stopped it).
    pub optimal: bool,
}

impl Solved {
    /// ⌈Σ y⌉, ignoring floating-point noise: the lower bound of every plan.
    pub fn bound(&self) -> u32 {
        (self.gpus - TOLERANCE).ceil().max(0.0) as u32
    }
}

/// What the solver said instead of a solution.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum LpError {
    /// No solution exists.
    #[error("infeasible")]
    Infeasible,
    /// The time limit ran out before any solution was found.
    #[error("no solution found within the time limit")]
    NoSolution,
    /// The solver failed.
    #[error("solver: {0}")]
    Solver(String),
}

impl From<ResolutionError> for LpError {
    fn from(e: ResolutionError) -> Self {
        match e {
            ResolutionError::Infeasible => LpError::Infeasible,
            ResolutionError::Other(m) if m.contains("Time limit") => LpError::NoSolution,
            other => LpError::Solver(other.to_string()),
        }
    }
}

/// How the y variables enter the program.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Counts<'a> {
    /// Free, continuous: the LP relaxation.
    Relaxed,
    /// Fixed to these values.
    Fixed(&'a [u32]),
    /// Free integers, at most `max` in all, starting from `start` (x, y).
    Integer {
        max: Option<u32>,
        min_total: u32,
        start: Option<(&'a [Vec<u32>], &'a [u32])>,
        limit: Duration,
    },
}

/// The LP relaxation of the canonical program: its optimum, ⌈·⌉, bounds
/// every plan from below.
pub fn relaxation(p: &Problem) -> Result<Solved, LpError> {
    program(p, Counts::Relaxed)
}

/// The LP with y fixed to `m` (GPUs per configuration): a vertex x, or
/// `Infeasible` if those GPUs cannot meet the demands even fractionally.
pub fn fixed(p: &Problem, m: &[u32]) -> Result<Solved, LpError> {
    program(p, Counts::Fixed(m))
}

/// The integer canonical program: at most `max` GPUs, at least `min_total`
/// (a known lower bound, which lets the search stop as soon as it meets it),
/// from the feasible plan `start` if given, within `limit`.
pub fn integer(
    p: &Problem,
    max: Option<u32>,
    min_total: u32,
    start: Option<(&[Vec<u32>], &[u32])>,
    limit: Duration,
) -> Result<Solved, LpError> {
    program(
        p,
        Counts::Integer {
            max,
            min_total,
            start,
            limit,
        },
    )
}

fn program(p: &Problem, counts: Counts) -> Result<Solved, LpError> {
    let (nb, nj, nc) = (p.profiles.len(), p.jobs.len(), p.configurations.len());
    let integer = matches!(counts, Counts::Integer { .. });
    let mut vars = ProblemVariables::new();
    let mut initial: Vec<(Variable, f64)> = Vec::new();
    // x_ij only where block i serves job j.
    let mut x: Vec<Vec<Option<Variable>>> = vec![vec![None; nj]; nb];
    for (i, row) in x.iter_mut().enumerate() {
        for (j, cell) in row.iter_mut().enumerate() {
            if p.capped(j, i) > 0.0 {
                let v = vars.add(variable().min(0.0).integer_if(integer));
                if let Counts::Integer {
                    start: Some((x0, _)),
                    ..
                } = counts
                {
                    initial.push((v, f64::from(x0[i][j])));
                }
                *cell = Some(v);
            }
        }
    }
    let y: Vec<Variable> = (0..nc)
        .map(|c| {
            let def = match counts {
                Counts::Fixed(m) => variable().min(m[c]).max(m[c]),
                _ => variable().min(0.0).integer_if(integer),
            };
            let v = vars.add(def);
            if let Counts::Integer {
                start: Some((_, y0)),
                ..
            } = counts
            {
                initial.push((v, f64::from(y0[c])));
            }
            v
        })
        .collect();
    let total: Expression = y.iter().copied().sum();
    let mut model = vars.minimise(total.clone()).using(microlp);
    if let Counts::Integer { limit, .. } = counts {
        model = model.with_time_limit(limit.as_secs_f64());
        if !initial.is_empty() {
            model = model.with_initial_solution(initial);
        }
    }
    for (i, row) in x.iter().enumerate() {
        let used: Expression = row.iter().flatten().copied().sum();
        let supply: Expression = (0..nc)
            .filter(|&c| p.counts[c][i] > 0)
            .map(|c| f64::from(p.counts[c][i]) * y[c])
            .sum();
        model.add_constraint((used - supply).leq(0.0));
    }
    for (j, job) in p.jobs.iter().enumerate() {
        model.add_constraint(served(p, &x, j).geq(job.demand));
    }
    if let Counts::Integer { max, min_total, .. } = counts {
        if let Some(max) = max {
            model.add_constraint(total.clone().leq(f64::from(max)));
        }
        model.add_constraint(total.geq(f64::from(min_total)));
    }
    let solution = model.solve()?;
    let value = |v: Variable| {
        let s = solution.value(v);
        if integer {
            s.round()
        } else {
            s
        }
    };
    let xs: Vec<Vec<f64>> = x
        .iter()
        .map(|row| row.iter().map(|v| v.map_or(0.0, value)).collect())
        .collect();
    let ys: Vec<f64> = y.iter().map(|&v| value(v)).collect();
    Ok(Solved {
        gpus: ys.iter().sum(),
        x: xs,
        y: ys,
        optimal: matches!(solution.status(), SolutionStatus::Optimal),
    })
}

/// The throughput job `j` gets from the blocks `x[i][j]` handed to it (capped
/// at its demand per block type, as every program here counts it).
fn served(p: &Problem, x: &[Vec<Option<Variable>>], j: usize) -> Expression {
    x.iter()
        .enumerate()
        .filter_map(|(i, row)| row[j].map(|v| p.capped(j, i) * v))
        .sum()
}

/// How long [`reassign`] searches before it answers `None`.
pub const REASSIGN_LIMIT: Duration = Duration::from_secs(2);

/// Gives `supply[i]` blocks of each type to jobs so that every demand is met,
/// as integers: `x[i][j]` blocks of type i for job j, or `None` if no way
/// exists. Exact (a small integer program); `None` too when no way is found
/// within [`REASSIGN_LIMIT`], so callers only ever lose a GPU they could
/// have dropped.
pub fn reassign(p: &Problem, supply: &[u32]) -> Option<Vec<Vec<u32>>> {
    match assign(p, supply) {
        Assignment::Found(x) => Some(x),
        Assignment::Impossible | Assignment::Unknown => None,
    }
}

/// Drops GPUs, last first, while the others still meet every demand:
/// `gpus` (configuration indices) and `x` (the blocks handed out) are
/// updated together; a GPU whose removal [`reassign`] cannot prove harmless
/// stays.
pub fn drop_spare(p: &Problem, gpus: &mut Vec<usize>, x: &mut Vec<Vec<u32>>) {
    let mut g = gpus.len();
    while g > 0 {
        g -= 1;
        let mut fewer = gpus.clone();
        fewer.remove(g);
        if let Some(x2) = reassign(p, &p.supply(&fewer)) {
            *gpus = fewer;
            *x = x2;
        }
    }
}

/// What [`assign`] found out.
#[derive(Debug, Clone, PartialEq)]
pub enum Assignment {
    /// Blocks of each type per job that meet every demand.
    Found(Vec<Vec<u32>>),
    /// Proven: no hand-out of these blocks meets every demand.
    Impossible,
    /// [`REASSIGN_LIMIT`] struck first.
    Unknown,
}

/// [`reassign`], telling a proof of impossibility from a timeout.
pub fn assign(p: &Problem, supply: &[u32]) -> Assignment {
    let (nb, nj) = (p.profiles.len(), p.jobs.len());
    // Quick refusal: even all blocks of every type that serves a job cannot.
    for j in 0..nj {
        let most: f64 = (0..nb).map(|i| f64::from(supply[i]) * p.capped(j, i)).sum();
        if !crate::problem::meets(most, p.jobs[j].demand) {
            return Assignment::Impossible;
        }
    }
    let mut vars = ProblemVariables::new();
    let mut x: Vec<Vec<Option<Variable>>> = vec![vec![None; nj]; nb];
    for (i, row) in x.iter_mut().enumerate() {
        for (j, cell) in row.iter_mut().enumerate() {
            if p.capped(j, i) > 0.0 && supply[i] > 0 {
                *cell = Some(vars.add(variable().integer().min(0).max(supply[i])));
            }
        }
    }
    let mut model = vars
        .minimise(Expression::from(0.0))
        .using(microlp)
        .with_time_limit(REASSIGN_LIMIT.as_secs_f64());
    for (i, row) in x.iter().enumerate() {
        let used: Expression = row.iter().flatten().copied().sum();
        model.add_constraint(used.leq(f64::from(supply[i])));
    }
    for (j, job) in p.jobs.iter().enumerate() {
        model.add_constraint(served(p, &x, j).geq(job.demand));
    }
    let solution = match model.solve() {
        Ok(s) => s,
        Err(ResolutionError::Infeasible) => return Assignment::Impossible,
        Err(_) => return Assignment::Unknown,
    };
    Assignment::Found(
        x.iter()
            .map(|row| {
                row.iter()
                    .map(|v| v.map_or(0, |v| solution.value(v).round() as u32))
                    .collect()
            })
            .collect(),
    )
}

/// `variable().integer()` when `yes`.
trait IntegerIf {
    fn integer_if(self, yes: bool) -> Self;
}

impl IntegerIf for good_lp::VariableDefinition {
    fn integer_if(self, yes: bool) -> Self {
        if yes {
            self.integer()
        } else {
            self
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::problem::testing::worked_example;

    #[test]
    fn the_worked_examples_bound_is_two() {
        let p = worked_example();
        let lp = relaxation(&p).unwrap();
        assert!(
            lp.gpus > 10.0 / 7.0 && lp.gpus <= 2.0 + TOLERANCE,
            "{}",
            lp.gpus
        );
        assert_eq!(lp.bound(), 2);
    }

    #[test]
    fn one_gpu_is_not_enough_and_two_are() {
        let p = worked_example();
        assert_eq!(reassign(&p, &p.supply(&[0])), None);
        let c = |s: &str| {
            p.configurations
                .iter()
                .position(|c| c.to_string() == s)
                .unwrap()
        };
        let two = [c("4g.20gb + 3g.20gb"), c("3g.20gb + 1g.5gb x4")];
        let x = reassign(&p, &p.supply(&two)).expect("two GPUs suffice");
        // resnet50 takes the four 1g, llm-7b the 4g, bert-large both 3g.
        assert_eq!(x[0][0], 4);
        assert_eq!(x[2][1], 2);
        assert_eq!(x[3][2], 1);
    }
}
