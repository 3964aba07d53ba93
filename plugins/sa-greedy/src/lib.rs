//! `sa-greedy`: simulated annealing over task orders, greedy earliest-finish
//! assignment.
//!
//! **Planning model.** An order of the pending tasks is evaluated by list
//! scheduling: the tasks in order, each placed by the greedy earliest-finish
//! rule of `greedy-eft` (the `gpu-agent-eft-rule` crate, gangs included) on top
//! of each device's `available_at`, at the end of what is already planned on
//! its devices (no backfilling). Its cost is the total weighted tardiness
//! sum w_i max(0, c_i - d_i) of the planned tasks, ties broken by the total
//! weighted completion time sum w_i c_i. A task too few online devices can
//! hold now is left out of the plan (and pending).
//!
//! **Search.** At each decision the policy anneals from the better of two
//! orders (ties to the second): (a) arrival order, which is greedy-eft's, and
//! (b) the previous decision's best order restricted to the tasks still
//! pending, newcomers appended in arrival order. Iteration k at temperature
//! T(k), T(0) = `t0`, T(k+1) = `alpha` T(k):
//! - the neighbour moves round(rho |tardy|) (at least 1) of the current order's
//!   tardy tasks (planned c_i > d_i; a task at position 0 cannot move and does
//!   not count), drawn uniformly without replacement, each from its position p
//!   to a position drawn uniformly from [0, p) (just before the task that was
//!   there); the other tasks keep their relative order, which starts as
//!   arrival order. rho = min(0.8, max(0.1, (T - T_min) / (T0 - T_min))),
//!   T_min = 10^-3 T0;
//! - a neighbour whose tardiness is not higher is accepted; a worse one by
//!   delta with probability exp(-delta / T);
//! - the search stops after `iterations` neighbours (in overload, while more
//!   than `overload_pending` tasks are pending, at most `overload_iterations`:
//!   [`Params::iterations_for`]), when no task but the first is tardy, or when
//!   `budget_ms` has passed.
//!
//! It returns the best order seen, so the plan is never worse than either
//! start order, greedy-eft's included. Neighbours are evaluated from their
//! first changed position on (checkpoints of the cost at every position and
//! of the devices' availability every 8), and abandoned as soon as their
//! tardiness is past the acceptance limit.
//!
//! **Decisions.** Tasks stay in the core's pending queue until they start (the
//! policy never assigns to local queues), so that every decision re-optimises
//! them: the first `window` (W) of them in arrival order, the others waiting
//! their turn, so that a decision's cost does not grow with the backlog (on an
//! overloaded host, thousands of tasks may be pending). The policy plans on `Activated` and `Timer`; it answers
//! `Arrived`, `Finished` and any other event with `WakeAt { now }` while tasks
//! are pending, so every task arriving or leaving at one instant is planned
//! together, once. After planning it starts, in plan order, each planned task
//! whose planned start is now and whose devices are all idle (nothing running,
//! empty local queue, not just given to another task). A planned task whose
//! devices are all idle but whose start is later asks for a wake-up at that
//! start; every other one waits for a device to finish. With exact run times
//! the realised schedule of at most W tasks that all arrive together is the
//! first plan or better, so never worse than greedy-eft's.
//!
//! **Parameters.** `seed` (1), `iterations` (2000), `t0` (`auto`: 0.3 x the
//! start order's tardiness; else weighted seconds), `alpha` (0.995),
//! `budget_ms` (0: no wall-clock cap; when a cap binds, results depend on the
//! machine's speed, so the default keeps simulations deterministic), `window`
//! (8: with 2,000 iterations a decision takes well under a millisecond),
//! `overload_pending` (256) and `overload_iterations` (500: an overloaded host
//! decides at every arrival and finish, and decisions must keep up; the
//! threshold is far above what evidence/'s random and Alibaba instances reach
//! and far below the SOS workload's thousands, docs/policies.md). One
//! pseudo-random stream (rand's `StdRng` seeded with `seed`) serves every
//! decision, so a run is deterministic for a seed.

// abi_stable 0.11's derives put impls inside constants.
#![allow(non_local_definitions)]

pub mod params;

use std::{
    collections::HashMap,
    time::{Duration, Instant},
};

use gpu_agent_plugin_api::{
    abi_stable::std_types::ROption, Decision, Event, PolicyImpl, TaskKey, View,
};

use gpu_agent_sa_search::{
    anneal::{anneal, Settings},
    plan::Problem,
};
use params::Params;

/// The sa-greedy policy: its parameters, its pseudo-random stream and the
/// previous decision's best order.
#[derive(Debug)]
pub struct SaGreedy {
    params: Params,
    rng: gpu_agent_sa_search::SearchRng,
    /// The last best order, as task keys.
    previous: Vec<TaskKey>,
}

impl SaGreedy {
    /// A policy with `params`.
    pub fn new(params: Params) -> SaGreedy {
        SaGreedy {
            params,
            rng: gpu_agent_sa_search::seeded(params.seed),
            previous: Vec::new(),
        }
    }

    /// Plans the pending tasks and starts those due now.
    fn decide(&mut self, view: &View<'_>) -> Vec<Decision> {
        let pending = view.pending.as_slice();
        let keys = &pending[..pending.len().min(self.params.window)];
        let problem = Problem::from_view(view, keys);
        let start = self.start_order(&problem, keys);
        let settings = Settings {
            iterations: self.params.iterations_for(pending.len()),
            t0: self.params.t0,
            alpha: self.params.alpha,
            deadline: (self.params.budget_ms > 0)
                .then(|| Instant::now() + Duration::from_millis(self.params.budget_ms)),
        };
        let best = anneal(&problem, start, &settings, &mut self.rng);
        self.previous = best.order.iter().map(|&i| keys[i as usize]).collect();

        let devices = view.devices.as_slice();
        let mut claimed = vec![false; devices.len()];
        let mut decisions = Vec::new();
        let mut wake: Option<f64> = None;
        for (&i, placement) in best.order.iter().zip(problem.plan(&best.order)) {
            let Some(p) = placement else { continue };
            let idle = p.devices.iter().all(|&j| {
                let d = &devices[j as usize];
                d.running.is_none() && d.queue.is_empty() && !claimed[j as usize]
            });
            if !idle {
                continue;
            }
            if p.start <= view.now {
                for &j in &p.devices {
                    claimed[j as usize] = true;
                }
                decisions.push(Decision::Start {
                    task: keys[i as usize],
                    devices: p.devices.into(),
                    clocks: ROption::RNone,
                });
            } else {
                wake = Some(wake.map_or(p.start, |w| w.min(p.start)));
            }
        }
        decisions.extend(wake.map(|time| Decision::WakeAt { time }));
        decisions
    }

    /// The better of arrival order and the previous best order (restricted to
    /// `keys`, newcomers appended in arrival order); ties to the latter.
    fn start_order(&self, problem: &Problem, keys: &[TaskKey]) -> Vec<u32> {
        let index: HashMap<TaskKey, u32> = keys
            .iter()
            .enumerate()
            .map(|(i, &k)| (k, i as u32))
            .collect();
        let mut kept = vec![false; keys.len()];
        let mut warm: Vec<u32> = self
            .previous
            .iter()
            .filter_map(|k| index.get(k).copied())
            .inspect(|&i| kept[i as usize] = true)
            .collect();
        warm.extend((0..keys.len() as u32).filter(|&i| !kept[i as usize]));
        let arrival: Vec<u32> = (0..keys.len() as u32).collect();
        if problem
            .cost(&warm)
            .total_cmp(&problem.cost(&arrival))
            .is_le()
        {
            warm
        } else {
            arrival
        }
    }
}

impl PolicyImpl for SaGreedy {
    fn on_event(&mut self, view: &View<'_>, event: &Event) -> Result<Vec<Decision>, String> {
        Ok(match event {
            _ if view.pending.is_empty() => {
                self.previous.clear();
                Vec::new()
            }
            Event::Activated | Event::Timer => self.decide(view),
            _ => vec![Decision::WakeAt { time: view.now }],
        })
    }
}

gpu_agent_plugin_api::export_policy! {
    name: "sa-greedy",
    description: "simulated annealing over task orders, greedy earliest-finish assignment",
    parameters: params::PARAMETERS,
    new: |params: &[gpu_agent_plugin_api::Param]| Params::parse(params).map(SaGreedy::new),
}

#[cfg(test)]
mod tests;
