//! Simulated annealing over task orders: the neighbour, the cooling schedule
//! and the search loop.

use rand::RngExt;
use std::time::Instant;

use crate::plan::{Cost, Evaluator, Problem};

/// T_min as a share of T0: the temperature at which rho reaches its floor.
pub const T_MIN_SHARE: f64 = 1e-3;

/// `t0 = auto`: T0 as a share of the start order's total weighted tardiness.
pub const AUTO_T0_SHARE: f64 = 0.3;

/// The cooling schedule: T(0) = T0, T(k+1) = alpha T(k), and the share rho of
/// the tardy tasks a neighbour moves at each temperature.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Cooling {
    t0: f64,
    t_min: f64,
    alpha: f64,
    t: f64,
}

impl Cooling {
    /// Starts at `t0` (> 0) with factor `alpha`; T_min = [`T_MIN_SHARE`] T0.
    pub fn new(t0: f64, alpha: f64) -> Cooling {
        Cooling {
            t0,
            t_min: T_MIN_SHARE * t0,
            alpha,
            t: t0,
        }
    }

    /// The current temperature T.
    pub fn temperature(&self) -> f64 {
        self.t
    }

    /// rho = min(0.8, max(0.1, (T - T_min) / (T0 - T_min))).
    pub fn rho(&self) -> f64 {
        0.8f64.min(0.1f64.max((self.t - self.t_min) / (self.t0 - self.t_min)))
    }

    /// T becomes alpha T.
    pub fn cool(&mut self) {
        self.t *= self.alpha;
    }
}

/// Reusable buffers for drawing neighbours.
#[derive(Debug, Default)]
pub struct Neighbourhood {
    /// (new position, old position) of each moved task.
    moves: Vec<(usize, usize)>,
    /// Old positions of the moved tasks, ascending.
    moved: Vec<usize>,
}

impl Neighbourhood {
    /// Writes into `out` a random neighbour of `order`: `count` of the
    /// positions `tardy` (each > 0), drawn uniformly without replacement, each
    /// move from their position p to a position q drawn uniformly from [0, p),
    /// as [`Neighbourhood::apply`] says. Returns the first position where `out`
    /// differs from `order`. `tardy` is left reordered.
    ///
    /// # Panics
    /// When `count` is 0 or more than `tardy.len()`, or a position is 0.
    pub fn draw(
        &mut self,
        order: &[u32],
        tardy: &mut [usize],
        count: usize,
        rng: &mut crate::SearchRng,
        out: &mut Vec<u32>,
    ) -> usize {
        assert!(
            (1..=tardy.len()).contains(&count),
            "move 1..={} tasks, not {count}",
            tardy.len()
        );
        let mut moves = std::mem::take(&mut self.moves);
        moves.clear();
        for k in 0..count {
            tardy.swap(k, rng.random_range::<usize, _>(k..tardy.len()));
            let p = tardy[k];
            assert!(p > 0, "the task at position 0 cannot move forward");
            moves.push((rng.random_range::<usize, _>(0..p), p));
        }
        let from = self.apply(order, &mut moves, out);
        self.moves = moves;
        from
    }

    /// Writes into `out` the order `order` with each move (q, p) (q < p,
    /// distinct p) applied: the task at position p goes just before the task
    /// that was at position q; tasks moved to the same q keep their relative
    /// order, and so do all the others. Returns the first position where `out`
    /// differs from `order`, the smallest q. `moves` is left sorted.
    ///
    /// # Panics
    /// When `moves` is empty.
    pub fn apply(
        &mut self,
        order: &[u32],
        moves: &mut [(usize, usize)],
        out: &mut Vec<u32>,
    ) -> usize {
        moves.sort_unstable();
        self.moved.clear();
        self.moved.extend(moves.iter().map(|&(_, p)| p));
        self.moved.sort_unstable();
        out.clear();
        let (mut next_move, mut next_skip) = (0, 0);
        for (i, &task) in order.iter().enumerate() {
            while let Some(&(_, p)) = moves.get(next_move).filter(|&&(q, _)| q <= i) {
                out.push(order[p]);
                next_move += 1;
            }
            if self.moved.get(next_skip) == Some(&i) {
                next_skip += 1;
            } else {
                out.push(task);
            }
        }
        moves[0].0
    }
}

/// The search's settings.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Settings {
    /// Neighbours to try.
    pub iterations: u64,
    /// Initial temperature in cost units (weighted seconds of tardiness);
    /// `None`: [`AUTO_T0_SHARE`] of the start order's tardiness.
    pub t0: Option<f64>,
    /// Cooling factor: T(k+1) = alpha T(k).
    pub alpha: f64,
    /// Wall-clock time after which the search stops, if any.
    pub deadline: Option<Instant>,
}

/// What a search found.
#[derive(Debug, Clone, PartialEq)]
pub struct Outcome {
    /// The best order seen.
    pub order: Vec<u32>,
    /// Its cost.
    pub cost: Cost,
    /// Neighbours tried.
    pub iterations: u64,
    /// Neighbours accepted.
    pub accepted: u64,
}

/// Anneals from `start` (a permutation of `problem`'s tasks) and returns the
/// best order seen, so never one worse than `start`.
///
/// Each iteration moves a share rho(T) of the current order's tardy tasks
/// forward (at least one; tasks at position 0 cannot move, and the search
/// ends early when no other task is tardy), and accepts the neighbour when
/// its tardiness is at most the current one's plus -T ln u, u uniform in
/// (0, 1]: a worse neighbour by delta is accepted with probability
/// exp(-delta / T). Then T becomes alpha T.
pub fn anneal(
    problem: &Problem,
    start: Vec<u32>,
    settings: &Settings,
    rng: &mut crate::SearchRng,
) -> Outcome {
    let mut evaluator = Evaluator::new(problem, start);
    let mut best = Outcome {
        order: evaluator.order().to_vec(),
        cost: evaluator.cost(),
        iterations: 0,
        accepted: 0,
    };
    let mut cooling = Cooling::new(
        settings.t0.unwrap_or(AUTO_T0_SHARE * best.cost.twt),
        settings.alpha,
    );
    let mut neighbourhood = Neighbourhood::default();
    let (mut tardy, mut candidate) = (Vec::new(), Vec::with_capacity(problem.len()));
    while best.iterations < settings.iterations {
        if settings.deadline.is_some_and(|d| Instant::now() >= d) {
            break;
        }
        evaluator.tardy_positions(&mut tardy);
        tardy.retain(|&p| p > 0);
        if tardy.is_empty() {
            break;
        }
        let count = ((cooling.rho() * tardy.len() as f64).round() as usize).clamp(1, tardy.len());
        let from = neighbourhood.draw(evaluator.order(), &mut tardy, count, rng, &mut candidate);
        let u = 1.0 - rng.random::<f64>();
        let limit = evaluator.cost().twt - cooling.temperature() * u.ln();
        best.iterations += 1;
        cooling.cool();
        let Some(cost) = evaluator.evaluate(&candidate, from, limit) else {
            continue;
        };
        evaluator.accept(&mut candidate, from);
        best.accepted += 1;
        if cost.total_cmp(&best.cost).is_lt() {
            best.cost = cost;
            best.order.copy_from_slice(evaluator.order());
        }
    }
    best
}

#[cfg(test)]
mod tests;
