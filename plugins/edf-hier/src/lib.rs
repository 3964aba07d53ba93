//! `edf-hier`: deadline-ordered hierarchical distribution for GPU-as-a-service,
//! after Filippini, Lattuada, Jahani, Ciavotta, Ardagna and Amaldi,
//! "Hierarchical Scheduling in on-demand GPU-as-a-Service Systems" (SYNASC 2020).
//!
//! Each plan takes the first `window` (W, 64) pending tasks in deadline
//! order (the others wait their turn, so a plan's cost does not grow with the
//! backlog) and decides their devices and starts:
//!
//! 1. **Groups.** The devices form K = `groups` groups: device j belongs to
//!    group j mod K (host files list devices model by model, so each group gets
//!    a share of every model). K above the device count is a policy error.
//! 2. **Dealing.** The pending tasks, sorted by (deadline, arrival, key)
//!    (`dealing = edf`, the default: EDF1, EDF2, EDF3 for `group_size` 1, 2,
//!    3) or in arrival order (`dealing = rr`, the earlier work's round robin),
//!    are dealt round-robin to the groups `group_size` at a time ([`deal::deal`]).
//!    A task that none of its device counts (`gpus`, then `alt_gpus`) fits in
//!    its group's usable devices (online, enough memory, finite run time) goes
//!    to the first of the following groups, cyclically, where one fits; if no
//!    group can hold it, it is planned on the whole host, before every group's
//!    tasks, by the greedy rule (so such a task may go ahead of tasks with
//!    earlier deadlines).
//! 3. **Configurations.** A task's configurations in a group are device sets of
//!    one of its counts, cut from the usable devices ordered by (release, run
//!    time, cost per hour, index), at most `max_configs` ([`config::candidate`]).
//!    A configuration of g devices runs for the slowest device's run time times
//!    `gpus / g` and costs the sum of its devices' `cost_per_hour` / 3600 times
//!    that run time.
//! 4. **Group plan.** Each group takes its tasks in deadline order. When its
//!    first `milp_max_tasks` tasks are at least two, the greedy rule plans them
//!    with each device free from its release; if that plan's weighted
//!    tardiness plus cost exceeds the sum of each task's least penalty alone
//!    (a lower bound), the group MILP ([`milp`]) improves on it (with
//!    `solver = search`, an exhaustive search of the same problem, [`exact`],
//!    for up to 4 tasks; with `solver = auto`, the default, the search while
//!    more than `overload_pending` (256) tasks are pending, so that plans keep
//!    up with an overloaded host's arrivals, the MILP otherwise:
//!    [`params::Params::solver_for`]). The plan is
//!    then booked in the order of its starts, each task at the earliest gap of
//!    its devices ([`plan::decode`]). The other tasks, a lone task, and the
//!    tasks of a group whose MILP fails are placed by the greedy rule: in
//!    deadline order, each takes the configuration whose earliest gap gives
//!    the least weighted tardiness plus cost, ties to the earliest completion
//!    ([`greedy::place`]). A group plans no further once all its devices are
//!    busy now ([`plan::Scope::Now`]): nothing after could start.
//! 5. **Starts.** Tasks stay in the core's pending queue until they start: a
//!    planned task is started (`Decision::Start`) when its planned start is now
//!    and all its devices are idle with empty local queues, in the order of
//!    their lowest device index. While no device is idle, nothing could start,
//!    so no plan is made.
//!
//! Re-planning: an `Arrived` or `Finished` event asks for a wake-up now
//! (`WakeAt`), so that everything that happens at one instant is planned
//! together on the `Timer` (the simulator delivers timers after the finishes
//! and arrivals of their instant); `Timer`, `Activated` and any other event plan
//! at once. While tasks remain pending after a plan, the policy also asks to be
//! woken `period_s` later, once at a time.
//!
//! Determinism: the MILP, the greedy rule and the order of every choice are
//! deterministic; only a solve that reaches `time_limit_ms` (wall clock) could
//! end differently on another run. `milp_max_tasks` and `max_configs` keep
//! solves far below the default limit (see `docs/policies.md` for measured
//! times), so the limit is a safety net for the daemon.

// abi_stable 0.11's derives put impls inside constants.
#![allow(non_local_definitions)]

pub mod config;
pub mod deal;
pub mod exact;
pub mod greedy;
pub mod milp;
pub mod params;
pub mod plan;
#[cfg(test)]
mod testing;
pub mod timeline;

use gpu_agent_plugin_api::{
    abi_stable::std_types::ROption, Decision, Event, PolicyImpl, TaskState, View,
};

use params::{Params, INFO};

/// The `edf-hier` policy.
#[derive(Debug)]
pub struct EdfHier {
    params: Params,
    /// The instant a batch wake-up was asked for and not yet delivered.
    batch: Option<f64>,
    /// When the periodic wake-up asked for is due.
    periodic: Option<f64>,
    /// The pending tasks in deadline order.
    deadlines: deal::Deadlines,
}

impl EdfHier {
    /// A policy with `params`.
    pub fn new(params: Params) -> EdfHier {
        EdfHier {
            params,
            batch: None,
            periodic: None,
            deadlines: deal::Deadlines::default(),
        }
    }

    /// Plans every pending task and starts those due now on idle devices.
    fn replan(&mut self, view: &View<'_>) -> Result<Vec<Decision>, String> {
        self.batch = None;
        if self.periodic.is_some_and(|t| t <= view.now) {
            self.periodic = None;
        }
        // With no idle device nothing could start: no plan is needed.
        let any_idle = view.devices.iter().any(|d| plan::idle(view, d.index));
        let mut starting: Vec<plan::Planned> = if any_idle {
            plan::plan(view, &self.params, plan::Scope::Now, &mut self.deadlines)?
                .into_iter()
                .filter(|p| p.start <= view.now && p.devices.iter().all(|&j| plan::idle(view, j)))
                .collect()
        } else {
            Vec::new()
        };
        // In device order, as the core starts queue heads.
        starting.sort_by_key(|p| p.devices[0]);
        for p in &starting {
            self.deadlines.started(view, p.task);
        }
        let mut decisions: Vec<Decision> = starting
            .into_iter()
            .map(|p| Decision::Start {
                task: p.task,
                devices: p.devices.into(),
                clocks: ROption::RNone,
            })
            .collect();
        if view.pending.len() > decisions.len() && self.periodic.is_none() {
            let time = view.now + self.params.period_s;
            self.periodic = Some(time);
            decisions.push(Decision::WakeAt { time });
        }
        Ok(decisions)
    }
}

impl PolicyImpl for EdfHier {
    fn on_event(&mut self, view: &View<'_>, event: &Event) -> Result<Vec<Decision>, String> {
        match *event {
            Event::Arrived { task } if view.task(task).state == TaskState::Pending => {
                self.deadlines.arrived(view, task);
            }
            Event::Activated | Event::DeviceChanged { .. } => self.deadlines.invalidate(),
            _ => {}
        }
        match event {
            Event::Arrived { .. } | Event::Finished { .. } => {
                if view.pending.is_empty() || self.batch == Some(view.now) {
                    return Ok(Vec::new());
                }
                self.batch = Some(view.now);
                Ok(vec![Decision::WakeAt { time: view.now }])
            }
            _ => self.replan(view),
        }
    }
}

gpu_agent_plugin_api::export_policy! {
    name: "edf-hier",
    description: "deadline-ordered tasks dealt to device groups, each planned by a small MILP",
    parameters: INFO,
    new: |params: &[gpu_agent_plugin_api::Param]| Params::parse(params).map(EdfHier::new),
}

#[cfg(test)]
mod tests {
    use super::*;
    use gpu_agent_plugin_api::{abi_stable::std_types::RSlice, TaskState};
    use proptest::prelude::Just;
    use testing::{device, task, Fixture};

    fn start(task: u64, devices: &[u32]) -> Decision {
        Decision::Start {
            task,
            devices: devices.to_vec().into(),
            clocks: ROption::RNone,
        }
    }

    #[test]
    fn an_instant_is_planned_once_on_its_timer() {
        let mut f = Fixture::new(2.0);
        f.devices = vec![device(0, 1.0, 0.0)];
        f.tasks = vec![task(0, 1.0, 9.0, 1.0), task(1, 1.0, 8.0, 1.0)];
        let mut p = EdfHier::new(Params::default());
        let view = f.view();
        let wake_now = vec![Decision::WakeAt { time: 2.0 }];
        assert_eq!(p.on_event(&view, &Event::Arrived { task: 0 }), Ok(wake_now));
        assert_eq!(p.on_event(&view, &Event::Arrived { task: 1 }), Ok(vec![]));
        // The earlier deadline starts; the other waits, with a periodic wake-up.
        assert_eq!(
            p.on_event(&view, &Event::Timer),
            Ok(vec![start(1, &[0]), Decision::WakeAt { time: 62.0 }])
        );
        // One periodic wake-up at a time.
        assert_eq!(
            p.on_event(&view, &Event::Activated),
            Ok(vec![start(1, &[0])])
        );
    }

    #[test]
    fn the_periodic_wake_up_is_renewed_only_while_tasks_wait() {
        let mut f = Fixture::new(0.0);
        f.devices = vec![device(0, 1.0, 0.0)];
        f.tasks = vec![task(0, 1.0, 9.0, 1.0), task(1, 1.0, 9.0, 1.0)];
        let mut p = EdfHier::new(Params::parse(&[]).unwrap());
        p.on_event(&f.view(), &Event::Timer).unwrap();
        f.now = 60.0;
        assert_eq!(
            p.on_event(&f.view(), &Event::Timer),
            Ok(vec![start(0, &[0]), Decision::WakeAt { time: 120.0 }])
        );
        // Only one task pending and it starts: no wake-up.
        f.tasks[0].state = TaskState::Running;
        f.now = 120.0;
        assert_eq!(
            p.on_event(&f.view(), &Event::Timer),
            Ok(vec![start(1, &[0])])
        );
        // A finish with nothing pending asks for nothing.
        f.tasks[1].state = TaskState::Running;
        let finished = Event::Finished { task: 0, ok: true };
        assert_eq!(p.on_event(&f.view(), &finished), Ok(vec![]));
    }

    #[test]
    fn a_task_starts_only_on_idle_devices_with_empty_queues() {
        // Device 0 runs task 2 past its expected end (available now), device 1
        // has a queued task 3 (available at 4): task 0 (2 GPUs) is planned
        // now on both but cannot start.
        let mut f = Fixture::new(1.0);
        f.devices = vec![
            device(0, 1.0, 0.0),
            device(1, 1.0, 0.0),
            device(2, 1.0, 0.0),
        ];
        f.devices[0].running = ROption::RSome(2);
        f.devices[0].available_at = 1.0;
        f.devices[1].queue = RSlice::from_slice(&[3]);
        f.devices[1].available_at = 4.0;
        let mut wide = task(0, 1.0, 1.5, 1.0);
        wide.gpus = 2;
        let mut t2 = task(2, 1.0, 9.0, 1.0);
        t2.state = TaskState::Running;
        let mut t3 = task(3, 1.0, 9.0, 1.0);
        t3.state = TaskState::Queued;
        f.tasks = vec![wide, task(1, 1.0, 9.0, 1.0), t2, t3];
        let mut p = EdfHier::new(Params::default());
        // wide: devices 0 and 2 from 1 (its best set); task 1 after it on
        // device 0 or 2 → it waits too. Nothing starts.
        assert_eq!(
            p.on_event(&f.view(), &Event::Timer),
            Ok(vec![Decision::WakeAt { time: 61.0 }])
        );
    }

    #[test]
    fn runs_too_short_to_move_the_clock_never_start_together() {
        // Device 0 runs task 2 until 1005; device 1 is idle. Tasks 0 and 1
        // run for 1e-300 s, which now + run time rounds away: planned at
        // now on device 1 both, only the earlier deadline may start (the
        // core refuses a start on a device that is not idle).
        let mut f = Fixture::new(1000.0);
        f.devices = vec![device(0, 1.0, 0.0), device(1, 1.0, 0.0)];
        f.devices[0].running = ROption::RSome(2);
        f.devices[0].available_at = 1005.0;
        let mut t2 = task(2, 1.0, 9.0, 1.0);
        t2.state = TaskState::Running;
        f.tasks = vec![
            task(0, 1e-300, 2000.0, 1.0),
            task(1, 1e-300, 1900.0, 1.0),
            t2,
        ];
        let mut p = EdfHier::new(Params::default());
        assert_eq!(
            p.on_event(&f.view(), &Event::Timer),
            Ok(vec![start(1, &[1]), Decision::WakeAt { time: 1060.0 }])
        );
    }

    /// One task of [`run_with_overruns`]: work units (1e-300 stands for a
    /// run too short to move the clock), device count, deadline slack, and
    /// how many times its estimate it really runs (1: on time).
    type Shape = (f64, u32, f64, f64);

    /// A run as the core follows it: task, start, expected end, true end.
    type Run = (u64, f64, f64, f64);

    /// Drives the policy as the core does, with a `Timer` at every arrival,
    /// end and expected end, and runs lasting `overrun` times their
    /// estimate. A run still going at its expected end is told to the core
    /// (`Input::Overran`), whose expected end moves out by as long as it has
    /// run (the device stays busy). Returns the first start the core would
    /// refuse (on a device that is not idle, or twice on one device), if any.
    fn run_with_overruns(shapes: &[Shape], devices: u32, params: Params) -> Option<String> {
        let mut f = Fixture::new(0.0);
        f.devices = (0..devices)
            .map(|j| device(j, 1.0 + f64::from(j % 2), 0.0))
            .collect();
        f.tasks = shapes
            .iter()
            .enumerate()
            .map(|(k, &(work, gpus, slack, _))| {
                let mut t = task(k as u64, work, 0.0, 1.0);
                t.arrival = k as f64 * 0.5;
                t.deadline = t.arrival + slack;
                t.gpus = gpus.min(devices);
                // Not arrived yet: in no state the policy plans.
                t.state = TaskState::Done;
                t
            })
            .collect();
        let mut arrived = 0;
        let mut runs: Vec<Option<Run>> = vec![None; devices as usize];
        let mut p = EdfHier::new(params);
        loop {
            let now = f.now;
            while arrived < f.tasks.len() && f.tasks[arrived].arrival <= now {
                f.tasks[arrived].state = TaskState::Pending;
                arrived += 1;
            }
            for (j, slot) in runs.iter_mut().enumerate() {
                if let Some((k, since, expected, end)) = *slot {
                    if end <= now {
                        *slot = None;
                        f.tasks[k as usize].state = TaskState::Done;
                    } else if expected <= now {
                        *slot = Some((k, since, now + (now - since).max(1e-3), end));
                    }
                }
                let d = &mut f.devices[j];
                d.running = slot.map(|r| r.0).into();
                d.available_at = slot.map_or(now, |r| r.2.max(now));
            }
            let decisions = p.on_event(&f.view(), &Event::Timer).ok()?;
            for decision in decisions {
                let Decision::Start { task, devices, .. } = decision else {
                    continue;
                };
                if let Some(j) = devices.iter().find(|&&j| runs[j as usize].is_some()) {
                    return Some(format!(
                        "started task t{task} on device {j}, which is not idle"
                    ));
                }
                let t = &mut f.tasks[task as usize];
                t.state = TaskState::Running;
                let slowest = devices
                    .iter()
                    .map(|&j| t.runtime_on(&f.devices[j as usize]))
                    .fold(0.0, f64::max);
                let runtime = t.scaled(slowest, devices.len() as u32);
                let end = now + runtime * shapes[task as usize].3;
                for &j in devices.iter() {
                    runs[j as usize] = Some((task, now, now + runtime, end));
                }
            }
            let next = f.tasks[arrived..]
                .iter()
                .map(|t| t.arrival)
                .chain(runs.iter().flatten().flat_map(|r| [r.2, r.3]))
                .filter(|&t| t > now)
                .fold(f64::INFINITY, f64::min);
            if !next.is_finite() {
                return None;
            }
            f.now = next;
        }
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(300))]

        /// Whatever the runs' overruns and lengths, every start the policy
        /// makes is on idle devices, one task per device.
        #[test]
        fn overruns_never_make_the_policy_start_on_a_busy_device(
            shapes in proptest::collection::vec(
                (
                    proptest::prop_oneof![Just(1e-300), 0.1f64..20.0],
                    1u32..3,
                    0.5f64..40.0,
                    proptest::prop_oneof![Just(1.0), 1.0f64..6.0],
                ),
                1..14,
            ),
            devices in 1u32..5,
            groups in 1usize..3,
            group_size in 1usize..4,
        ) {
            let params = Params {
                groups: groups.min(devices as usize),
                group_size,
                ..Params::default()
            };
            proptest::prop_assert_eq!(run_with_overruns(&shapes, devices, params), None);
        }
    }

    #[test]
    fn too_many_groups_is_a_policy_error() {
        let mut f = Fixture::new(0.0);
        f.devices = vec![device(0, 1.0, 0.0)];
        f.tasks = vec![task(0, 1.0, 9.0, 1.0)];
        let params = Params {
            groups: 2,
            ..Params::default()
        };
        assert_eq!(
            EdfHier::new(params).on_event(&f.view(), &Event::Activated),
            Err("groups = 2 exceeds the host's 1 device(s)".to_string())
        );
    }

    #[test]
    fn the_module_lists_its_parameters_and_refuses_bad_ones() {
        let module = policy_module();
        assert_eq!(module.name().as_str(), "edf-hier");
        let keys: Vec<&str> = module.parameters().iter().map(|p| p.key.as_str()).collect();
        assert_eq!(
            keys,
            [
                "dealing",
                "groups",
                "group_size",
                "period_s",
                "time_limit_ms",
                "milp_max_tasks",
                "max_configs",
                "window",
                "solver",
                "overload_pending"
            ]
        );
        let bad = [gpu_agent_plugin_api::Param {
            key: "group_size".into(),
            value: "5".into(),
        }];
        let refused = (module.new())(RSlice::from_slice(&bad)).into_result().err();
        assert_eq!(
            refused.map(|e| e.into_string()),
            Some("group_size: expected an integer from 1 to 3, got \"5\"".to_string())
        );
    }
}
