//! One plan: a device set and a start for every pending task.

use std::time::Duration;

use gpu_agent_plugin_api::{TaskKey, View};

use crate::config::{candidate, holds, usable, Candidate, Config};
use crate::deal::{deal, device_groups, edf_order, Deadlines};
use crate::greedy::{self, Placement};
use crate::params::{Dealing, Params, Solver};
use crate::timeline::Timeline;
use crate::{exact, milp};

/// How a task's place was chosen.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Method {
    /// Its group's MILP (solved by search with `solver = search`).
    Milp,
    /// The greedy rule: a task planned on the whole host, a group's only MILP
    /// task, a task beyond `milp_max_tasks`, or a group whose MILP failed.
    Greedy,
}

/// How much of the plan to make.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scope {
    /// Every pending task.
    All,
    /// What decides the starts now: in each group, tasks are planned (in the
    /// same way) only until every device of the group is busy now (running,
    /// queued or booked at `now`), after which none of them could start.
    Now,
}

/// A pending task's planned devices and times.
#[derive(Debug, Clone, PartialEq)]
pub struct Planned {
    /// The task.
    pub task: TaskKey,
    /// Its devices, ascending.
    pub devices: Vec<u32>,
    /// Planned start, seconds.
    pub start: f64,
    /// Planned end, seconds.
    pub end: f64,
    /// How its place was chosen.
    pub by: Method,
}

/// Whether device `j` could start a task now: nothing running, nothing queued.
pub fn idle(view: &View<'_>, j: u32) -> bool {
    let d = &view.devices[j as usize];
    d.running.is_none() && d.queue.is_empty()
}

/// Plans the pending tasks of `view` (see the crate documentation): the tasks
/// no group can hold first, on the whole host, then each group's. Tasks that
/// no online devices can hold now are left out.
pub fn plan(
    view: &View<'_>,
    params: &Params,
    scope: Scope,
    deadlines: &mut Deadlines,
) -> Result<Vec<Planned>, String> {
    let m = view.devices.len();
    if params.groups > m {
        return Err(format!(
            "groups = {} exceeds the host's {m} device(s)",
            params.groups
        ));
    }
    let now = view.now;
    let groups = device_groups(m, params.groups);
    // (deadline rank, task) in the order of dealing, for the first `window`
    // tasks in that order; groups sort theirs by deadline rank.
    let pending = view.pending.as_slice();
    let order: Vec<(usize, TaskKey)> = match params.dealing {
        Dealing::Edf => deadlines
            .first(view, params.window)
            .into_iter()
            .enumerate()
            .collect(),
        Dealing::Rr => {
            let first = &pending[..pending.len().min(params.window)];
            let edf = edf_order(view, first, first.len());
            let mut rank = std::collections::HashMap::with_capacity(edf.len());
            for (r, &key) in edf.iter().enumerate() {
                rank.insert(key, r);
            }
            first.iter().map(|k| (rank[k], *k)).collect()
        }
    };
    let mut members: Vec<Vec<(usize, TaskKey)>> = vec![Vec::new(); groups.len()];
    let mut spanning = Vec::new();
    for (g, dealt) in deal(&order, params.groups, params.group_size)
        .into_iter()
        .enumerate()
    {
        for (pos, key) in dealt {
            let task = view.task(key);
            match (0..groups.len())
                .map(|d| (g + d) % groups.len())
                .find(|&h| holds(view, task, &usable(view, task, &groups[h])))
            {
                Some(h) => members[h].push((pos, key)),
                None => spanning.push((pos, key)),
            }
        }
    }
    spanning.sort_unstable();

    // An idle device is free now, even when the core still expects it busy
    // (a task that ended a hair before its expected end).
    let release: Vec<f64> = view
        .devices
        .iter()
        .map(|d| {
            if idle(view, d.index) {
                now
            } else {
                d.available_at.max(now)
            }
        })
        .collect();
    let mut timeline = Timeline::new(now, &release);
    let busy_now = |timeline: &Timeline, devices: &[u32]| {
        scope == Scope::Now
            && devices
                .iter()
                .all(|&j| !idle(view, j) || timeline.busy_at(j, now))
    };
    let mut planned = Vec::new();
    let solver = params.solver_for(pending.len());
    let host: Vec<u32> = (0..m as u32).collect();
    for (_, key) in spanning {
        let task = view.task(key);
        let devices = usable(view, task, &host);
        if busy_now(&timeline, &host) || !holds(view, task, &devices) {
            continue;
        }
        let c = candidate(
            view,
            task,
            &devices,
            |j| timeline.release(j),
            params.max_configs,
        );
        let placed = greedy::place(std::slice::from_ref(&c), &mut timeline, now);
        planned.push(planned_task(&c, placed[0], Method::Greedy));
    }
    for (group, mut tasks) in groups.iter().zip(members) {
        if busy_now(&timeline, group) {
            continue;
        }
        tasks.sort_unstable();
        // Configurations follow the releases before the group's own tasks.
        let release: Vec<f64> = host.iter().map(|&j| timeline.release(j)).collect();
        let candidate_of = |key: TaskKey| {
            let task = view.task(key);
            candidate(
                view,
                task,
                &usable(view, task, group),
                |j| release[j as usize],
                params.max_configs,
            )
        };
        let window = tasks.len().min(params.milp_max_tasks);
        let head: Vec<Candidate> = tasks[..window]
            .iter()
            .map(|&(_, k)| candidate_of(k))
            .collect();
        plan_head(&head, &mut timeline, now, params, solver, &mut planned);
        for &(_, key) in &tasks[window..] {
            if busy_now(&timeline, group) {
                break;
            }
            let c = candidate_of(key);
            let placed = greedy::place(std::slice::from_ref(&c), &mut timeline, now);
            planned.push(planned_task(&c, placed[0], Method::Greedy));
        }
    }
    Ok(planned)
}

/// Plans a group's first `milp_max_tasks` tasks. With at least two of them, the
/// greedy rule first plans them with each device free from the end of what is
/// booked on it; when that plan's objective exceeds the sum of each task's
/// least penalty alone (at its earliest start), the MILP improves on it;
/// either plan is then decoded onto `timeline`. With `solver` search (never
/// auto here: [`Params::solver_for`] resolves it), up to [`exact::MAX_TASKS`]
/// tasks are solved by the exhaustive search instead of the MILP. A lone task,
/// or a group whose MILP fails, is placed by the greedy rule on `timeline`
/// itself.
fn plan_head(
    head: &[Candidate],
    timeline: &mut Timeline,
    now: f64,
    params: &Params,
    solver: Solver,
    planned: &mut Vec<Planned>,
) {
    if head.len() >= 2 {
        let release: Vec<f64> = (0..timeline.devices() as u32)
            .map(|j| timeline.release(j))
            .collect();
        let warm = greedy::place(head, &mut Timeline::new(now, &release), now);
        // No plan beats every task at its best alone, at its earliest start:
        // when the greedy plan does as well, the MILP has nothing to improve.
        let start_of = |c: &Config| {
            c.devices
                .iter()
                .map(|&j| release[j as usize])
                .fold(now, f64::max)
        };
        let bound: f64 = head
            .iter()
            .map(|t| {
                (0..t.configs.len())
                    .map(|c| t.penalty(c, start_of(&t.configs[c])))
                    .fold(f64::INFINITY, f64::min)
            })
            .sum();
        let greedy = greedy::objective(head, &warm);
        if greedy <= bound + 1e-9 * (1.0 + bound.abs()) {
            for (c, p) in head.iter().zip(decode(head, &warm, timeline, now)) {
                planned.push(planned_task(c, p, Method::Greedy));
            }
            return;
        }
        if solver == Solver::Search && head.len() <= exact::MAX_TASKS {
            let best = exact::solve(head, now, |j| release[j as usize], &warm);
            for (c, p) in head.iter().zip(decode(head, &best, timeline, now)) {
                planned.push(planned_task(c, p, Method::Milp));
            }
            return;
        }
        let limit = Duration::from_millis(params.time_limit_ms);
        if let Ok(solved) = milp::solve(head, now, |j| release[j as usize], &warm, limit) {
            for (c, p) in head
                .iter()
                .zip(decode(head, &solved.placements, timeline, now))
            {
                planned.push(planned_task(c, p, Method::Milp));
            }
            return;
        }
    }
    for (c, p) in head.iter().zip(greedy::place(head, timeline, now)) {
        planned.push(planned_task(c, p, Method::Greedy));
    }
}

/// Books a MILP plan on `timeline`: the tasks in the order of their MILP
/// starts (ties: the tasks' order) each take the earliest gap of their
/// configuration's devices. No task starts later than the MILP said, so the
/// plan is no worse; it also fills gaps the MILP's release times hid.
pub fn decode(
    tasks: &[Candidate],
    solved: &[Placement],
    timeline: &mut Timeline,
    now: f64,
) -> Vec<Placement> {
    let mut order: Vec<usize> = (0..tasks.len()).collect();
    order.sort_by(|&a, &b| solved[a].start.total_cmp(&solved[b].start).then(a.cmp(&b)));
    let mut decoded = solved.to_vec();
    for i in order {
        let config = &tasks[i].configs[solved[i].config];
        let start = timeline.earliest(&config.devices, now, config.runtime);
        timeline.book(&config.devices, start, start + config.runtime);
        decoded[i].start = start;
    }
    decoded
}

fn planned_task(c: &Candidate, p: Placement, by: Method) -> Planned {
    let config = &c.configs[p.config];
    Planned {
        task: c.key,
        devices: config.devices.clone(),
        start: p.start,
        end: p.start + config.runtime,
        by,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{device, task, Fixture};
    use gpu_agent_plugin_api::abi_stable::std_types::ROption;

    fn params(groups: usize, group_size: usize, milp_max_tasks: usize) -> Params {
        Params {
            groups,
            group_size,
            milp_max_tasks,
            ..Params::default()
        }
    }

    fn rows(plan: &[Planned]) -> Vec<(u64, Vec<u32>, f64, f64, Method)> {
        plan.iter()
            .map(|p| (p.task, p.devices.clone(), p.start, p.end, p.by))
            .collect()
    }

    /// The instance of `milp::tests::the_milp_sees_what_the_greedy_rule_misses`
    /// plus a lax one-second task c.
    fn three_tasks() -> Fixture {
        let mut f = Fixture::new(0.0);
        f.devices = vec![device(0, 1.0, 0.0), device(1, 0.8, 0.0)];
        let mut a = task(0, 4.0, 9.0, 1.0);
        a.alt_gpus = vec![2].into();
        f.tasks = vec![a, task(1, 9.0, 9.5, 1.0), task(2, 1.0, 100.0, 1.0)];
        f
    }

    #[test]
    fn tasks_beyond_the_cap_are_placed_greedily_after_the_milp() {
        let mut f = three_tasks();
        let plan = plan(
            &f.view(),
            &params(1, 1, 2),
            Scope::All,
            &mut Deadlines::default(),
        )
        .unwrap();
        // a and b by the MILP (a alone on the slow device, b on the fast one);
        // c then takes the earliest end: device 1 at 5 (1.25 s) rather than
        // device 0 at 9.
        assert_eq!(
            rows(&plan),
            [
                (0, vec![1], 0.0, 5.0, Method::Milp),
                (1, vec![0], 0.0, 9.0, Method::Milp),
                (2, vec![1], 5.0, 6.25, Method::Greedy),
            ]
        );
    }

    #[test]
    fn no_milp_below_two_tasks() {
        let mut f = three_tasks();
        // Cap 0 and cap 1: the greedy rule only; a takes both devices, b is late.
        for cap in [0, 1] {
            let plan = plan(
                &f.view(),
                &params(1, 1, cap),
                Scope::All,
                &mut Deadlines::default(),
            )
            .unwrap();
            assert_eq!(
                rows(&plan),
                [
                    (0, vec![0, 1], 0.0, 2.5, Method::Greedy),
                    (1, vec![0], 2.5, 11.5, Method::Greedy),
                    (2, vec![1], 2.5, 3.75, Method::Greedy),
                ],
                "cap {cap}"
            );
        }
    }

    #[test]
    fn groups_plan_their_dealt_tasks_on_their_own_devices() {
        // Four equal devices: group 0 = {0, 2}, group 1 = {1, 3}.
        let mut f = Fixture::new(0.0);
        f.devices = (0..4).map(|j| device(j, 1.0, 0.0)).collect();
        // Deadline order a, b, c, d; dealt two at a time: a, b to group 0, c, d
        // to group 1. Everything is on time at no cost by the greedy rule,
        // which no plan can beat: no MILP.
        f.tasks = (0..4)
            .map(|k| task(k, 2.0 + k as f64, 10.0 + k as f64, 1.0))
            .collect();
        let plan = plan(
            &f.view(),
            &params(2, 2, 6),
            Scope::All,
            &mut Deadlines::default(),
        )
        .unwrap();
        assert_eq!(
            rows(&plan),
            [
                (0, vec![0], 0.0, 2.0, Method::Greedy),
                (1, vec![2], 0.0, 3.0, Method::Greedy),
                (2, vec![1], 0.0, 4.0, Method::Greedy),
                (3, vec![3], 0.0, 5.0, Method::Greedy),
            ]
        );
    }

    #[test]
    fn rr_deals_in_arrival_order_and_edf_in_deadline_order() {
        // Four equal devices: group 0 = {0, 2}, group 1 = {1, 3}. Tasks 0..3
        // arrive in key order with deadlines 13, 12, 11, 10: their deadline
        // order is the reverse.
        let mut f = Fixture::new(0.0);
        f.devices = (0..4).map(|j| device(j, 1.0, 0.0)).collect();
        f.tasks = (0..4).map(|k| task(k, 2.0, 13.0 - k as f64, 1.0)).collect();
        let rr = Params {
            dealing: Dealing::Rr,
            ..params(2, 1, 6)
        };
        // RR, one at a time: 0, 2 to group 0 and 1, 3 to group 1; each group
        // then plans its own in deadline order.
        assert_eq!(
            rows(&plan(&f.view(), &rr, Scope::All, &mut Deadlines::default()).unwrap()),
            [
                (2, vec![0], 0.0, 2.0, Method::Greedy),
                (0, vec![2], 0.0, 2.0, Method::Greedy),
                (3, vec![1], 0.0, 2.0, Method::Greedy),
                (1, vec![3], 0.0, 2.0, Method::Greedy),
            ]
        );
        // EDF1: deadline order 3, 2, 1, 0: 3, 1 to group 0 and 2, 0 to group 1.
        assert_eq!(
            rows(
                &plan(
                    &f.view(),
                    &params(2, 1, 6),
                    Scope::All,
                    &mut Deadlines::default()
                )
                .unwrap()
            ),
            [
                (3, vec![0], 0.0, 2.0, Method::Greedy),
                (1, vec![2], 0.0, 2.0, Method::Greedy),
                (2, vec![1], 0.0, 2.0, Method::Greedy),
                (0, vec![3], 0.0, 2.0, Method::Greedy),
            ]
        );
    }

    #[test]
    fn a_task_its_group_cannot_hold_moves_on_or_spans_the_host() {
        // Four devices; groups {0, 2} and {1, 3}; device 1 alone has 80 GB.
        let mut f = Fixture::new(0.0);
        f.devices = (0..4).map(|j| device(j, 1.0, 0.0)).collect();
        f.devices[1].memory_gb = 80.0;
        // big (60 GB) is dealt to group 0, which cannot hold it: group 1 can.
        let mut big = task(0, 2.0, 10.0, 1.0);
        big.mem_gb = 60.0;
        // wide (3 GPUs) fits no group of two: planned on the whole host first,
        // on the first three devices by (release, run time, cost, index).
        let mut wide = task(1, 3.0, 11.0, 1.0);
        wide.gpus = 3;
        // small is dealt to group 0 and waits there for wide.
        f.tasks = vec![big, wide, task(2, 1.0, 12.0, 1.0)];
        let plan = plan(
            &f.view(),
            &params(2, 1, 6),
            Scope::All,
            &mut Deadlines::default(),
        )
        .unwrap();
        assert_eq!(
            rows(&plan),
            [
                (1, vec![0, 1, 2], 0.0, 3.0, Method::Greedy),
                (2, vec![0], 3.0, 4.0, Method::Greedy),
                (0, vec![1], 3.0, 5.0, Method::Greedy),
            ]
        );
    }

    #[test]
    fn more_groups_than_devices_is_an_error() {
        let mut f = three_tasks();
        assert_eq!(
            plan(
                &f.view(),
                &params(3, 1, 6),
                Scope::All,
                &mut Deadlines::default()
            ),
            Err("groups = 3 exceeds the host's 2 device(s)".to_string())
        );
    }

    #[test]
    fn edf_order_is_deadline_then_arrival_then_key() {
        let mut f = Fixture::new(5.0);
        f.tasks = vec![
            task(0, 1.0, 9.0, 1.0),
            task(1, 1.0, 7.0, 1.0),
            task(2, 1.0, 9.0, 1.0),
            task(3, 1.0, 9.0, 1.0),
        ];
        f.tasks[0].arrival = 2.0;
        f.tasks[2].arrival = 1.0;
        f.tasks[3].arrival = 1.0;
        let view = f.view();
        assert_eq!(edf_order(&view, &[0, 1, 2, 3], 64), [1, 2, 3, 0]);
        assert_eq!(edf_order(&view, &[0, 1, 2, 3], 2), [1, 2]);
        assert_eq!(edf_order(&view, &[0, 3], 2), [3, 0]);
    }

    /// The planned tasks that start now.
    fn starting(plan: &[Planned], now: f64) -> Vec<(u64, Vec<u32>)> {
        plan.iter()
            .filter(|p| p.start == now)
            .map(|p| (p.task, p.devices.clone()))
            .collect()
    }

    #[test]
    fn planning_for_now_stops_when_every_device_is_busy_now() {
        let mut f = three_tasks();
        let p = params(1, 1, 0);
        // a takes both devices at 0: b and c could not start now.
        let now = plan(&f.view(), &p, Scope::Now, &mut Deadlines::default()).unwrap();
        assert_eq!(rows(&now), [(0, vec![0, 1], 0.0, 2.5, Method::Greedy)]);
        let all = plan(&f.view(), &p, Scope::All, &mut Deadlines::default()).unwrap();
        assert_eq!(starting(&now, 0.0), starting(&all, 0.0));
        // With device 1 running something, the group is busy: nothing planned.
        f.devices[1].running = ROption::RSome(9);
        f.devices[1].available_at = 3.0;
        f.devices[0].running = ROption::RSome(8);
        f.devices[0].available_at = 1.0;
        assert_eq!(
            plan(&f.view(), &p, Scope::Now, &mut Deadlines::default()),
            Ok(vec![])
        );
    }

    #[test]
    fn planning_for_now_starts_what_the_whole_plan_starts() {
        let mut fixtures = vec![three_tasks()];
        let mut f = Fixture::new(0.0);
        f.devices = (0..4)
            .map(|j| device(j, 1.0 + j as f64 / 4.0, 0.0))
            .collect();
        f.devices[2].available_at = 6.0;
        f.devices[2].running = ROption::RSome(99);
        f.tasks = (0..9)
            .map(|k| {
                let mut t = task(k, 1.0 + (k * 7 % 5) as f64, 3.0 + (k * 3 % 7) as f64, 1.0);
                t.gpus = 1 + (k % 3) as u32;
                t
            })
            .collect();
        fixtures.push(f);
        for mut f in fixtures {
            for (groups, size, cap) in [(1, 1, 4), (2, 1, 2), (2, 3, 0), (1, 2, 1)] {
                let p = params(groups.min(f.devices.len()), size, cap);
                let now = plan(&f.view(), &p, Scope::Now, &mut Deadlines::default()).unwrap();
                let all = plan(&f.view(), &p, Scope::All, &mut Deadlines::default()).unwrap();
                assert_eq!(starting(&now, 0.0), starting(&all, 0.0), "{p:?}");
                assert!(now.iter().all(|p| all.contains(p)), "{p:?}");
            }
        }
    }

    #[test]
    fn an_idle_device_is_free_now_whatever_the_core_expected() {
        let mut f = Fixture::new(4.0);
        f.devices = vec![device(0, 1.0, 0.0)];
        f.devices[0].available_at = 4.000001;
        f.tasks = vec![task(0, 1.0, 9.0, 1.0)];
        let plan = plan(
            &f.view(),
            &params(1, 1, 4),
            Scope::Now,
            &mut Deadlines::default(),
        )
        .unwrap();
        assert_eq!(rows(&plan), [(0, vec![0], 4.0, 5.0, Method::Greedy)]);
    }
}
