//! One group's MILP: a configuration and a start for each task, minimising
//! weighted tardiness plus usage cost.
//!
//! Times are relative to `now`. For task i with configurations c (run time
//! p_ic, cost k_ic, release r_ic = the latest release of its devices), weight
//! w_i and deadline d_i:
//!
//! - y_ic binary, sum_c y_ic = 1 (one configuration);
//! - 0 <= s_i <= H, s_i >= sum_c r_ic y_ic (start after its devices are free);
//! - C_i = s_i + sum_c p_ic y_ic; T_i >= C_i - d_i, T_i >= 0 (tardiness);
//! - for each pair i < k with a device j in configurations of both: u_ij =
//!   sum over i's configurations holding j of y_ic, v_ik in [0, 1] with
//!   v_ik >= u_ij + u_kj - 1 for every such j (they share a device), o_ik binary
//!   (i first), and s_k >= C_i - M(1 - o_ik) - M(1 - v_ik),
//!   s_i >= C_k - M o_ik - M(1 - v_ik);
//! - minimise sum_i w_i T_i + sum_ic k_ic y_ic + e sum_i C_i, where the
//!   tie-break e = [`TIE_BREAK`] times the smallest weight prefers earlier
//!   completions among otherwise equal plans.
//!
//! H = the latest release plus every task's longest run time (no left-justified
//! schedule starts later) and M = H plus the longest run time. The solve starts
//! from a feasible plan given by the caller (the greedy rule's), so it never
//! returns a worse one, and it stops at the wall-clock limit with the best plan
//! found by then.

use std::time::Duration;

use good_lp::{
    microlp, variable, Expression, ProblemVariables, ResolutionError, Solution, SolutionStatus,
    SolverModel, Variable, WithTimeLimit,
};

use crate::config::Candidate;
use crate::greedy::Placement;

/// The completion-time tie-break per second, as a share of the smallest weight.
pub const TIE_BREAK: f64 = 1e-6;

/// A solved group MILP.
#[derive(Debug, Clone, PartialEq)]
pub struct Solved {
    /// Each task's configuration and start, in the tasks' order.
    pub placements: Vec<Placement>,
    /// Whether the solver proved the plan optimal (false: the time limit
    /// stopped it first).
    pub optimal: bool,
}

/// Solves the MILP for `tasks` from `now`, device j being free from
/// `release(j)`, starting from the feasible plan `start` (one placement per
/// task, none before its devices' release).
pub fn solve(
    tasks: &[Candidate],
    now: f64,
    release: impl Fn(u32) -> f64,
    start: &[Placement],
    time_limit: Duration,
) -> Result<Solved, ResolutionError> {
    let rel = |c: &crate::config::Config| {
        c.devices
            .iter()
            .map(|&j| release(j) - now)
            .fold(0.0, f64::max)
    };
    let longest = |t: &Candidate| t.configs.iter().map(|c| c.runtime).fold(0.0, f64::max);
    let shortest = |t: &Candidate| {
        t.configs
            .iter()
            .map(|c| c.runtime)
            .fold(f64::INFINITY, f64::min)
    };
    let latest_release = tasks
        .iter()
        .flat_map(|t| t.configs.iter().map(rel))
        .fold(0.0, f64::max);
    let horizon = latest_release + tasks.iter().map(longest).sum::<f64>();
    let tie_break = TIE_BREAK * tasks.iter().map(|t| t.weight).fold(f64::INFINITY, f64::min);
    let due: Vec<f64> = tasks.iter().map(|t| t.deadline - now).collect();
    let warm_start: Vec<f64> = start.iter().map(|p| p.start - now).collect();
    let warm_end: Vec<f64> = tasks
        .iter()
        .zip(start)
        .map(|(t, p)| p.start - now + t.configs[p.config].runtime)
        .collect();
    // The starting plan's objective bounds every better plan's: w_i T_i <= it,
    // so C_i <= d_i + it / w_i (with a hair of slack for rounding).
    let bound: f64 = tasks
        .iter()
        .zip(start)
        .enumerate()
        .map(|(i, (t, p))| {
            t.weight * (warm_end[i] - due[i]).max(0.0)
                + t.configs[p.config].cost
                + tie_break * warm_end[i]
        })
        .sum();
    let latest_end: Vec<f64> = tasks
        .iter()
        .enumerate()
        .map(|(i, t)| {
            let end = (horizon + longest(t)).min(due[i] + bound / t.weight);
            end + 1e-9 * (1.0 + end.abs())
        })
        .collect();
    let earliest_start: Vec<f64> = tasks
        .iter()
        .map(|t| t.configs.iter().map(rel).fold(f64::INFINITY, f64::min))
        .collect();

    let mut vars = ProblemVariables::new();
    let mut objective = Expression::with_capacity(tasks.len() * 4);
    let mut y: Vec<Vec<Variable>> = Vec::with_capacity(tasks.len());
    let mut s = Vec::with_capacity(tasks.len());
    let mut completion: Vec<Expression> = Vec::with_capacity(tasks.len());
    let mut constraints = Vec::new();
    for (i, t) in tasks.iter().enumerate() {
        let yi: Vec<Variable> = (0..t.configs.len())
            .map(|c| vars.add(variable().binary().initial(u8::from(start[i].config == c))))
            .collect();
        let latest_start = (latest_end[i] - shortest(t)).max(earliest_start[i]);
        let si = vars.add(
            variable()
                .clamp(earliest_start[i], latest_start)
                .initial(warm_start[i]),
        );
        let late = (warm_end[i] - due[i]).max(0.0);
        let ti = vars.add(variable().min(0.0).initial(late));
        let mut ci = Expression::from(si);
        let mut release_i = Expression::with_capacity(t.configs.len());
        for (c, config) in t.configs.iter().enumerate() {
            ci.add_mul(config.runtime, yi[c]);
            release_i.add_mul(rel(config), yi[c]);
            objective.add_mul(config.cost, yi[c]);
        }
        objective.add_mul(t.weight, ti);
        objective.add_mul(tie_break, ci.clone());
        constraints.push(yi.iter().fold(Expression::from(0.0), |e, &v| e + v).eq(1.0));
        constraints.push((si - release_i).geq(0.0));
        constraints.push((ti - ci.clone()).geq(-due[i]));
        constraints.push(ci.clone().leq(latest_end[i]));
        y.push(yi);
        s.push(si);
        completion.push(ci);
    }
    for i in 0..tasks.len() {
        for k in i + 1..tasks.len() {
            let shared = shared_devices(&tasks[i], &tasks[k]);
            // No common device, or one always ends before the other can start.
            if shared.is_empty()
                || latest_end[i] <= earliest_start[k]
                || latest_end[k] <= earliest_start[i]
            {
                continue;
            }
            let (pi, pk) = (&start[i], &start[k]);
            let overlap = tasks[i].configs[pi.config]
                .devices
                .iter()
                .any(|j| tasks[k].configs[pk.config].devices.contains(j));
            let i_first = (pi.start, i) < (pk.start, k);
            let v = vars.add(variable().clamp(0.0, 1.0).initial(u8::from(overlap)));
            let o = vars.add(variable().binary().initial(u8::from(i_first)));
            for j in shared {
                constraints
                    .push((v - uses(&tasks[i], &y[i], j) - uses(&tasks[k], &y[k], j)).geq(-1.0));
            }
            // s_k >= C_i - M(1 - o) - M(1 - v), and the other way round, with
            // M as small as the bounds on starts and ends allow.
            let m_ik = (latest_end[i] - earliest_start[k]).max(0.0);
            let m_ki = (latest_end[k] - earliest_start[i]).max(0.0);
            constraints.push(
                (Expression::from(s[k]) - completion[i].clone() - m_ik * o - m_ik * v)
                    .geq(-2.0 * m_ik),
            );
            constraints.push(
                (Expression::from(s[i]) - completion[k].clone() + m_ki * o - m_ki * v).geq(-m_ki),
            );
        }
    }
    let mut model = vars
        .minimise(objective)
        .using(microlp)
        .with_time_limit(time_limit.as_secs_f64());
    for c in constraints {
        model.add_constraint(c);
    }
    let solution = model.solve()?;
    let placements = tasks
        .iter()
        .enumerate()
        .map(|(i, t)| {
            let config = (0..t.configs.len())
                .max_by(|&a, &b| solution.value(y[i][a]).total_cmp(&solution.value(y[i][b])))
                .expect("a candidate has a configuration");
            Placement {
                config,
                start: now + solution.value(s[i]),
            }
        })
        .collect();
    Ok(Solved {
        placements,
        optimal: matches!(solution.status(), SolutionStatus::Optimal),
    })
}

/// The devices that appear in configurations of both `a` and `b`, ascending.
fn shared_devices(a: &Candidate, b: &Candidate) -> Vec<u32> {
    let mut shared: Vec<u32> = a
        .configs
        .iter()
        .flat_map(|c| c.devices.iter().copied())
        .filter(|j| b.configs.iter().any(|c| c.devices.contains(j)))
        .collect();
    shared.sort_unstable();
    shared.dedup();
    shared
}

/// Whether `task` uses device `j`: the sum of its configurations holding `j`.
fn uses(task: &Candidate, y: &[Variable], j: u32) -> Expression {
    task.configs
        .iter()
        .zip(y)
        .filter(|(c, _)| c.devices.contains(&j))
        .fold(Expression::from(0.0), |e, (_, &v)| e + v)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::candidate;
    use crate::greedy::{self, objective};
    use crate::plan::decode;
    use crate::testing::{device, task, Fixture};
    use crate::timeline::Timeline;

    const LIMIT: Duration = Duration::from_secs(10);

    /// Solves the tasks of `f` on all its devices from the greedy plan; returns
    /// the decoded MILP plan, whether it was proved optimal, and the greedy plan.
    fn solve_all(f: &mut Fixture) -> (Vec<Candidate>, Vec<Placement>, bool, Vec<Placement>) {
        let view = f.view();
        let all: Vec<u32> = (0..view.devices.len() as u32).collect();
        let release: Vec<f64> = view.devices.iter().map(|d| d.available_at).collect();
        let tasks: Vec<Candidate> = view
            .held
            .iter()
            .map(|t| {
                let usable = crate::config::usable(&view, t, &all);
                candidate(&view, t, &usable, |j| release[j as usize], 8)
            })
            .collect();
        let greedy = greedy::place(&tasks, &mut Timeline::new(view.now, &release), view.now);
        let solved = solve(&tasks, view.now, |j| release[j as usize], &greedy, LIMIT).unwrap();
        let decoded = decode(
            &tasks,
            &solved.placements,
            &mut Timeline::new(view.now, &release),
            view.now,
        );
        (tasks, decoded, solved.optimal, greedy)
    }

    fn chosen(tasks: &[Candidate], plan: &[Placement]) -> Vec<(Vec<u32>, f64)> {
        tasks
            .iter()
            .zip(plan)
            .map(|(t, p)| (t.configs[p.config].devices.clone(), p.start))
            .collect()
    }

    #[test]
    fn a_deadline_buys_two_gpus_and_a_lax_task_avoids_the_dear_device() {
        // Devices 0 and 1 are free of charge (device 1 has 20 GB); device 2
        // costs 36 an hour (0.01 a second).
        let mut f = Fixture::new(0.0);
        f.devices = vec![
            device(0, 1.0, 0.0),
            device(1, 1.0, 0.0),
            device(2, 1.0, 36.0),
        ];
        f.devices[1].memory_gb = 20.0;
        // a: 8 s on one GPU, 4 s on two; due at 5.
        let mut a = task(0, 8.0, 5.0, 1.0);
        a.alt_gpus = vec![2].into();
        // b: 3 s, 30 GB (not device 1), due at 6, weight 0.01.
        let mut b = task(1, 3.0, 6.0, 0.01);
        b.mem_gb = 30.0;
        f.tasks = vec![a, b];
        let (tasks, plan, optimal, _) = solve_all(&mut f);
        // a on devices 0 and 1 from 0 to 4, on time; b after it on device 0,
        // 4 to 7, 1 s late (0.01), rather than on device 2 at once (cost 0.03).
        // Any other plan makes a late by at least 2 s.
        assert!(optimal);
        assert_eq!(chosen(&tasks, &plan), [(vec![0, 1], 0.0), (vec![0], 4.0)]);
        assert_eq!(objective(&tasks, &plan), 0.01);
    }

    #[test]
    fn the_milp_sees_what_the_greedy_rule_misses() {
        // Device 0 has speed 1, device 1 speed 0.8.
        let mut f = Fixture::new(0.0);
        f.devices = vec![device(0, 1.0, 0.0), device(1, 0.8, 0.0)];
        // a: 4 s on device 0, 5 s on device 1, 2.5 s on both; due at 9.
        let mut a = task(0, 4.0, 9.0, 1.0);
        a.alt_gpus = vec![2].into();
        // b: 9 s on device 0, 11.25 s on device 1; due at 9.5.
        f.tasks = vec![a, task(1, 9.0, 9.5, 1.0)];
        let (tasks, plan, optimal, greedy) = solve_all(&mut f);
        // Greedy (deadline order, a first): a is on time anywhere and takes
        // both devices (earliest end, 2.5), so b ends at 11.5, 2 s late.
        assert_eq!(chosen(&tasks, &greedy), [(vec![0, 1], 0.0), (vec![0], 2.5)]);
        assert_eq!(objective(&tasks, &greedy), 2.0);
        // MILP: a alone on the slow device, b on the fast one, both on time.
        assert!(optimal);
        assert_eq!(chosen(&tasks, &plan), [(vec![1], 0.0), (vec![0], 0.0)]);
        assert_eq!(objective(&tasks, &plan), 0.0);
    }

    #[test]
    fn releases_hold_starts_back() {
        // Device 0 is busy until 3; device 1 until 6. Two 1-GPU tasks due at 5.
        let mut f = Fixture::new(1.0);
        f.devices = vec![device(0, 1.0, 0.0), device(1, 1.0, 0.0)];
        f.devices[0].available_at = 3.0;
        f.devices[1].available_at = 6.0;
        f.tasks = vec![task(0, 2.0, 5.0, 1.0), task(1, 1.0, 5.0, 3.0)];
        let (tasks, plan, optimal, _) = solve_all(&mut f);
        // Both on device 0: the heavier b first (3..4), then a (4..6, 1 s late);
        // the other way round b would be 2 s late (weight 3), and device 1
        // frees too late for either.
        assert!(optimal);
        assert_eq!(chosen(&tasks, &plan), [(vec![0], 4.0), (vec![0], 3.0)]);
        assert_eq!(objective(&tasks, &plan), 1.0);
    }
}
