//! The group problem of [`crate::milp`] solved by exhaustive search, for
//! groups of at most [`MAX_TASKS`] tasks: the same objective (weighted
//! tardiness plus usage cost plus the completion-time tie-break) over the
//! same plans, in microseconds where the MILP's branch and bound takes
//! milliseconds.
//!
//! The objective only grows as a task ends later, so some optimal plan is
//! semi-active: in the order of their starts, each task starts as soon as its
//! configuration's devices are released and done with the tasks before it on
//! them. The search walks every order of the tasks and every configuration of
//! each, starting each task so, depth first, and cuts a branch as soon as its
//! cost so far plus each remaining task's least penalty alone (at its earliest
//! start) cannot beat the best plan found. It starts from the caller's
//! feasible plan (the greedy rule's) and keeps it unless a plan is better by
//! more than rounding, so, like the MILP, it never returns a worse one.

use crate::config::Candidate;
use crate::greedy::Placement;
use crate::milp::TIE_BREAK;

/// The most tasks [`solve`] takes: at 4 tasks of up to 16 configurations a
/// search visits at most 1.6 million partial plans (far fewer once cut), and
/// the count grows by a factor of 16 times the task count with each task.
pub const MAX_TASKS: usize = 4;

/// The plan of least objective for `tasks` (at most [`MAX_TASKS`]) from
/// `now`, device j being free from `release(j)`, or `start` (one placement
/// per task, none before its devices' release) when none is better.
///
/// # Panics
/// When there are more than [`MAX_TASKS`] tasks.
pub fn solve(
    tasks: &[Candidate],
    now: f64,
    release: impl Fn(u32) -> f64,
    start: &[Placement],
) -> Vec<Placement> {
    assert!(
        tasks.len() <= MAX_TASKS,
        "{} tasks: at most {MAX_TASKS}",
        tasks.len()
    );
    let devices = tasks
        .iter()
        .flat_map(|t| t.configs.iter().flat_map(|c| c.devices.iter()))
        .map(|&j| j as usize + 1)
        .max()
        .unwrap_or(0);
    let avail: Vec<f64> = (0..devices as u32).map(|j| release(j).max(now)).collect();
    let tie_break = TIE_BREAK * tasks.iter().map(|t| t.weight).fold(f64::INFINITY, f64::min);
    let cost = |t: &Candidate, c: usize, start: f64| {
        t.penalty(c, start) + tie_break * (start + t.configs[c].runtime - now)
    };
    // Each task at its best alone, at its earliest start: a lower bound.
    let alone: Vec<f64> = tasks
        .iter()
        .map(|t| {
            (0..t.configs.len())
                .map(|c| cost(t, c, ready(&avail, &t.configs[c].devices, now)))
                .fold(f64::INFINITY, f64::min)
        })
        .collect();
    let incumbent: f64 = tasks
        .iter()
        .zip(start)
        .map(|(t, p)| cost(t, p.config, p.start))
        .sum();
    let mut search = Search {
        tasks,
        now,
        cost: &cost,
        alone: &alone,
        avail,
        undo: Vec::new(),
        current: start.to_vec(),
        best: start.to_vec(),
        // Better only by more than rounding.
        best_cost: incumbent - 1e-9 * (1.0 + incumbent.abs()),
    };
    search.extend(0, alone.iter().sum(), 0.0);
    search.best
}

/// When all of `devices` are free, not before `now`.
fn ready(avail: &[f64], devices: &[u32], now: f64) -> f64 {
    devices
        .iter()
        .map(|&j| avail[j as usize])
        .fold(now, f64::max)
}

/// A depth-first search's state.
struct Search<'a, F> {
    tasks: &'a [Candidate],
    now: f64,
    cost: &'a F,
    /// Each task's least cost alone.
    alone: &'a [f64],
    /// When each device is free in the partial plan.
    avail: Vec<f64>,
    /// The `avail` entries the placements on the path overwrote.
    undo: Vec<f64>,
    /// The partial plan (entries of unplaced tasks are stale).
    current: Vec<Placement>,
    best: Vec<Placement>,
    best_cost: f64,
}

impl<F: Fn(&Candidate, usize, f64) -> f64> Search<'_, F> {
    /// Places each unplaced task (not in the bit set `placed`) next, in each
    /// of its configurations; `rest` is the unplaced tasks' `alone` sum and
    /// `so_far` the placed tasks' cost.
    fn extend(&mut self, placed: u32, rest: f64, so_far: f64) {
        if placed.count_ones() as usize == self.tasks.len() {
            if so_far < self.best_cost {
                self.best_cost = so_far;
                self.best.copy_from_slice(&self.current);
            }
            return;
        }
        for (i, t) in self.tasks.iter().enumerate() {
            if placed & (1 << i) != 0 {
                continue;
            }
            let rest = rest - self.alone[i];
            for (c, config) in t.configs.iter().enumerate() {
                let start = ready(&self.avail, &config.devices, self.now);
                let cost = so_far + (self.cost)(t, c, start);
                if cost + rest >= self.best_cost {
                    continue;
                }
                let end = start + config.runtime;
                let mark = self.undo.len();
                for &j in &config.devices {
                    self.undo
                        .push(std::mem::replace(&mut self.avail[j as usize], end));
                }
                self.current[i] = Placement { config: c, start };
                self.extend(placed | (1 << i), rest, cost);
                for (&j, &a) in config.devices.iter().zip(&self.undo[mark..]) {
                    self.avail[j as usize] = a;
                }
                self.undo.truncate(mark);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Config;
    use crate::greedy;
    use crate::testing::config;
    use crate::timeline::Timeline;

    fn candidate(key: u64, weight: f64, deadline: f64, configs: Vec<Config>) -> Candidate {
        Candidate {
            key,
            weight,
            deadline,
            configs,
        }
    }

    fn greedy_plan(tasks: &[Candidate], release: &[f64], now: f64) -> Vec<Placement> {
        greedy::place(tasks, &mut Timeline::new(now, release), now)
    }

    #[test]
    fn finds_what_the_greedy_rule_misses() {
        // The instance of milp's test of the same name: a 4 s on device 0,
        // 5 s on device 1, 2.5 s on both, due at 9; b 9 s on device 0,
        // 11.25 s on device 1, due at 9.5.
        let tasks = [
            candidate(
                0,
                1.0,
                9.0,
                vec![
                    config(&[0], 4.0, 0.0),
                    config(&[1], 5.0, 0.0),
                    config(&[0, 1], 2.5, 0.0),
                ],
            ),
            candidate(
                1,
                1.0,
                9.5,
                vec![config(&[0], 9.0, 0.0), config(&[1], 11.25, 0.0)],
            ),
        ];
        let release = [0.0, 0.0];
        let warm = greedy_plan(&tasks, &release, 0.0);
        assert_eq!(greedy::objective(&tasks, &warm), 2.0);
        // a alone on the slow device, b on the fast one, both on time.
        let plan = solve(&tasks, 0.0, |j| release[j as usize], &warm);
        assert_eq!(
            plan,
            [
                Placement {
                    config: 1,
                    start: 0.0
                },
                Placement {
                    config: 0,
                    start: 0.0
                }
            ]
        );
    }

    #[test]
    fn releases_order_and_weights() {
        // milp's releases_hold_starts_back, at now = 1: device 0 free from 3,
        // device 1 from 6; a 2 s, b 1 s (weight 3), both due at 5. b first on
        // device 0 (3..4), then a (4..6, 1 s late); device 1 is too late.
        let tasks = [
            candidate(
                0,
                1.0,
                5.0,
                vec![config(&[0], 2.0, 0.0), config(&[1], 2.0, 0.0)],
            ),
            candidate(
                1,
                3.0,
                5.0,
                vec![config(&[0], 1.0, 0.0), config(&[1], 1.0, 0.0)],
            ),
        ];
        let release = [3.0, 6.0];
        let warm = greedy_plan(&tasks, &release, 1.0);
        let plan = solve(&tasks, 1.0, |j| release[j as usize], &warm);
        assert_eq!(
            plan,
            [
                Placement {
                    config: 0,
                    start: 4.0
                },
                Placement {
                    config: 0,
                    start: 3.0
                }
            ]
        );
        assert_eq!(greedy::objective(&tasks, &plan), 1.0);
    }

    #[test]
    fn keeps_the_starting_plan_when_nothing_beats_it() {
        // Two tasks on time wherever they go: the starting plan stays, even
        // where another plan is as good.
        let tasks = [
            candidate(
                0,
                1.0,
                50.0,
                vec![config(&[0], 2.0, 0.0), config(&[1], 2.0, 0.0)],
            ),
            candidate(
                1,
                1.0,
                50.0,
                vec![config(&[0], 2.0, 0.0), config(&[1], 2.0, 0.0)],
            ),
        ];
        let start = [
            Placement {
                config: 1,
                start: 0.0,
            },
            Placement {
                config: 0,
                start: 0.0,
            },
        ];
        assert_eq!(solve(&tasks, 0.0, |_| 0.0, &start), start);
    }

    #[test]
    fn matches_the_milp_on_random_groups() {
        // Random groups of 2 to 4 tasks on 3 devices with mixed run times,
        // costs, releases and gangs: the search's objective is the MILP's
        // (both proved optimal), never above the greedy plan's.
        let mut seed: u64 = 7;
        let mut next = move || {
            seed = seed
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            (seed >> 33) as f64 / (1u64 << 31) as f64
        };
        let sets: [&[u32]; 6] = [&[0], &[1], &[2], &[0, 1], &[1, 2], &[0, 2]];
        for round in 0..40 {
            let n = 2 + round % 3;
            let tasks: Vec<Candidate> = (0..n)
                .map(|k| {
                    let mut configs = Vec::new();
                    for d in sets {
                        if next() < 0.6 {
                            configs.push(config(d, 1.0 + 9.0 * next(), (next() * 3.0).floor()));
                        }
                    }
                    let configs = if configs.is_empty() {
                        vec![config(&[0], 5.0, 0.0)]
                    } else {
                        configs
                    };
                    candidate(
                        k as u64,
                        1.0 + (next() * 4.0).floor(),
                        12.0 * next(),
                        configs,
                    )
                })
                .collect();
            let release = [4.0 * next(), 4.0 * next(), 4.0 * next()];
            let warm = greedy_plan(&tasks, &release, 0.0);
            let searched = solve(&tasks, 0.0, |j| release[j as usize], &warm);
            let decode = |plan: &[Placement]| {
                crate::plan::decode(&tasks, plan, &mut Timeline::new(0.0, &release), 0.0)
            };
            let milp = crate::milp::solve(
                &tasks,
                0.0,
                |j| release[j as usize],
                &warm,
                std::time::Duration::from_secs(10),
            )
            .unwrap();
            assert!(milp.optimal);
            let (s, m) = (
                greedy::objective(&tasks, &decode(&searched)),
                greedy::objective(&tasks, &decode(&milp.placements)),
            );
            assert!(
                (s - m).abs() <= 1e-6 * (1.0 + m.abs()),
                "round {round}: search {s}, MILP {m}"
            );
            assert!(s <= greedy::objective(&tasks, &warm) + 1e-9);
        }
    }
}
