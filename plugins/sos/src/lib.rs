//! `sos`: stochastic online scheduling on unrelated devices by alpha-point
//! WSPT virtual schedules (Megow, Uetz, Vredeveld, "Models and algorithms for
//! stochastic online scheduling", Mathematics of Operations Research 31(3),
//! 2006), in two readings, as parameter `model` picks:
//!
//! - `baseline` (the default): as the published SOS software scheduler
//!   (achieve-lab/TRETS_Software_SOS_Implementation, `c_scheduler`) decides,
//!   tick by tick in its integer arithmetic, with its capacity of 10 tasks per
//!   virtual schedule, its tie rules and its batches ([`Baseline`]; the state
//!   machine is `ticks`). On the published workload it sends every job where
//!   that program does.
//! - `paper`: the paper's rule in real time, described below ([`Sos`]).
//!
//! docs/policies.md lists where the two differ.
//!
//! p_iK is task K's run time on device i at default clocks (the trace's
//! `runtimes`, else workload / speed) and ratio_K = w_K / p_iK there. Each
//! device keeps a virtual schedule of the tasks assigned to it, ordered by
//! ratio, largest first; equal ratios in arrival order (task key).
//!
//! - **Assignment.** A task J offered at time t goes to the device, among those
//!   that can hold it ([`Task::fits`](gpu_agent_plugin_api::Task::fits):
//!   memory, finite run time, online), with the least
//!   cost_i = w_J (p_iJ + Σ_{K ahead of J} iota_K p_iK) + p_iJ Σ_{K behind J} w_K iota_K,
//!   ties to the lowest index, where iota_K = (p_iK − done_K) / p_iK is the
//!   share of K's virtual work still to do at t. K is ahead of J when
//!   ratio_K > ratio_J, or ratio_K = ratio_J and K arrived first: for a task
//!   that just arrived, exactly the K with ratio_K >= ratio_J.
//! - **Virtual work.** Only the head of a virtual schedule (its first task)
//!   does virtual work, one unit per second: preemptive WSPT on a virtual
//!   single machine. A newcomer ahead of the head becomes the head; the former
//!   head keeps the work it has done.
//! - **Release.** Once the head K has done `alpha` · p_iK, it leaves the virtual
//!   schedule and is assigned to the end of device i's local queue, which the
//!   core runs in order. The policy asks to be woken at the next alpha-point,
//!   so a task reaches its queue at its alpha-point exactly; releases are
//!   decided in time order, ties in device order.
//! - **Gangs** (gpus = k > 1; SOS itself is single-machine). A gang is placed
//!   as k copies, one in the virtual schedule of each of the k candidate
//!   devices with the least cost_i (as above, with that device's p_iJ), ties to
//!   the lower index. Each copy does virtual work in its own schedule and
//!   leaves it at its own alpha-point; when the last copy has left, the gang is
//!   assigned to the end of the local queues of its k devices (the core starts
//!   it once it heads all k and they are idle).
//! - **No candidate.** A task that too few devices can hold when it is
//!   offered, or one of whose devices is offline when it leaves its virtual
//!   schedules, waits and is offered again, as if it had just arrived, at
//!   every later event.
//! - **Cancellation.** A task cancelled while in virtual schedules leaves them;
//!   a removed head's successor starts at once.
//!
//! At each event the policy first advances every virtual schedule to the
//! current time (lazily: one step per alpha-point reached, no per-tick loop),
//! then offers the waiting tasks again, then handles the event: `Arrived`
//! offers the task, `Activated` offers every pending task in arrival order,
//! `Finished` with `ok: false` withdraws the task. Last, it asks for a wake-up
//! at the earliest alpha-point, unless it already asked for that time.
//!
//! Parameter `alpha` in (0, 1], default 0.5.
//!
//! Cost: each virtual schedule keeps its head apart and the rest in a sorted
//! list cut into chunks of at most 32 tasks (`chunks`); a chunk indexes its
//! tasks' ranks (ratio, then key, as one integer) beside running sums, and the
//! list keeps the chunks' last ranks and totals. Placing a task takes, per
//! device, two binary searches and one pass over the chunk totals:
//! O(m (log n + n / 32)) for m devices and n tasks in a virtual schedule. A
//! release or an insertion rebuilds one chunk: O(log n + 32), plus O(n / 32)
//! when a chunk splits or empties. An event with no alpha-point due and no
//! task to place costs O(m).

// abi_stable 0.11's derives put impls inside constants.
#![allow(non_local_definitions)]

mod baseline;
mod chunks;
mod returned;
mod schedule;
mod ticks;

use std::collections::BTreeMap;

use gpu_agent_plugin_api::{
    abi_stable::std_types::{ROption, RStr},
    Decision, Event, Param, ParamInfo, ParamReader, PolicyImpl, TaskKey, TaskState, View,
};

pub use baseline::Baseline;
use chunks::Rank;
use schedule::VirtualSchedule;

/// The SOS policy. See the crate documentation for its rules.
#[derive(Debug)]
pub struct Sos {
    alpha: f64,
    /// One virtual schedule per device, by device index.
    schedules: Vec<VirtualSchedule>,
    /// Gangs with copies in virtual schedules.
    gangs: BTreeMap<TaskKey, Gang>,
    /// Tasks to offer again at the next event.
    waiting: Vec<TaskKey>,
    /// The earliest alpha-point, as of the last call.
    next: Option<f64>,
    /// The last wake-up asked for.
    asked: Option<f64>,
    /// Tasks it assigned, to offer again if the core sends them back.
    placed: returned::Placed,
    /// Scratch: the candidate devices for one task.
    costs: Vec<Candidate>,
    /// Scratch: (alpha-point, device, task) of the tasks leaving virtual schedules.
    leaving: Vec<(f64, u32, TaskKey)>,
}

/// A device that can hold the task being placed, and its cost there.
#[derive(Debug, Clone, Copy)]
struct Candidate {
    cost: f64,
    device: u32,
    /// The task's run time there.
    p: f64,
}

/// A gang's devices and how many of its copies are still in virtual schedules.
#[derive(Debug)]
struct Gang {
    devices: Vec<u32>,
    copies_left: usize,
}

impl Sos {
    /// A policy with parameter `alpha`, which must lie in (0, 1].
    pub fn new(alpha: f64) -> Result<Sos, String> {
        if !(alpha > 0.0 && alpha <= 1.0) {
            return Err(bad_alpha(alpha));
        }
        Ok(Sos {
            alpha,
            schedules: Vec::new(),
            gangs: BTreeMap::new(),
            waiting: Vec::new(),
            next: None,
            asked: None,
            placed: returned::Placed::default(),
            costs: Vec::new(),
            leaving: Vec::new(),
        })
    }

    /// Moves every task whose alpha-point is due out of its virtual schedule.
    fn release_due(&mut self, view: &View<'_>, out: &mut Vec<Decision>) {
        let mut leaving = std::mem::take(&mut self.leaving);
        for (i, schedule) in self.schedules.iter_mut().enumerate() {
            schedule.advance(view.now, |at, key| leaving.push((at, i as u32, key)));
        }
        // Each device's leavers are already in time order; the sort is stable.
        leaving.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
        for &(_, device, key) in &leaving {
            let Some(gang) = self.gangs.get_mut(&key) else {
                self.assign(view, key, vec![device], out);
                continue;
            };
            gang.copies_left -= 1;
            if gang.copies_left == 0 {
                let gang = self.gangs.remove(&key).expect("just seen");
                self.assign(view, key, gang.devices, out);
            }
        }
        leaving.clear();
        self.leaving = leaving;
    }

    /// Assigns `key` to the end of the local queues of `devices`, or makes it
    /// wait when one of them went offline. (A task's memory and run times and
    /// a device's memory do not change, so the devices it was placed on can
    /// still hold it unless they are offline.)
    fn assign(
        &mut self,
        view: &View<'_>,
        key: TaskKey,
        devices: Vec<u32>,
        out: &mut Vec<Decision>,
    ) {
        if devices.iter().all(|&d| view.devices[d as usize].online) {
            out.push(Decision::Assign {
                task: key,
                devices: devices.into(),
                position: ROption::RNone,
                clocks: ROption::RNone,
            });
        } else {
            self.waiting.push(key);
        }
    }

    /// Places task `key` in the virtual schedule(s) of least cost, or makes it
    /// wait when too few devices can hold it.
    fn offer(&mut self, view: &View<'_>, key: TaskKey) {
        let task = view.task(key);
        let now = view.now;
        self.costs.clear();
        for d in view.devices.iter().filter(|d| task.fits_as(d, task.gpus)) {
            let p = task.runtime_on(d);
            let cost = self.schedules[d.index as usize].cost(key, task.weight, p, now);
            self.costs.push(Candidate {
                cost,
                device: d.index,
                p,
            });
        }
        let k = task.gpus as usize;
        let by_cost =
            |a: &Candidate, b: &Candidate| a.cost.total_cmp(&b.cost).then(a.device.cmp(&b.device));
        if k == 1 {
            let Some(&best) = self.costs.iter().min_by(|a, b| by_cost(a, b)) else {
                self.waiting.push(key);
                return;
            };
            self.schedules[best.device as usize].insert(key, task.weight, best.p, now);
            return;
        }
        if self.costs.len() < k {
            self.waiting.push(key);
            return;
        }
        self.costs.sort_by(by_cost);
        for c in &self.costs[..k] {
            self.schedules[c.device as usize].insert(key, task.weight, c.p, now);
        }
        let mut devices: Vec<u32> = self.costs[..k].iter().map(|c| c.device).collect();
        devices.sort_unstable();
        self.gangs.insert(
            key,
            Gang {
                devices,
                copies_left: k,
            },
        );
    }

    /// Takes a cancelled task out of the virtual schedules holding it.
    fn withdraw(&mut self, view: &View<'_>, key: TaskKey) {
        let task = view.task(key);
        let remove = |s: &mut VirtualSchedule, d: u32| {
            let p = task.runtime_on(&view.devices[d as usize]);
            p.is_finite() && s.remove(Rank::new(task.weight / p, key), view.now)
        };
        if let Some(gang) = self.gangs.remove(&key) {
            for d in gang.devices {
                remove(&mut self.schedules[d as usize], d);
            }
        } else {
            for (d, schedule) in self.schedules.iter_mut().enumerate() {
                if remove(schedule, d as u32) {
                    break;
                }
            }
        }
    }

    /// Offers again every waiting task that is still pending.
    fn retry_waiting(&mut self, view: &View<'_>) {
        for key in std::mem::take(&mut self.waiting) {
            if view.task(key).state == TaskState::Pending {
                self.offer(view, key);
            }
        }
    }
}

/// The refusal of an `alpha` shown as `shown`.
fn bad_alpha(shown: impl std::fmt::Display) -> String {
    format!("alpha: expected a number in (0, 1], got {shown}")
}

impl PolicyImpl for Sos {
    fn on_event(&mut self, view: &View<'_>, event: &Event) -> Result<Vec<Decision>, String> {
        let alpha = self.alpha;
        self.schedules
            .resize_with(view.devices.len(), || VirtualSchedule::new(alpha));
        let mut out = Vec::new();
        if self.next.is_some_and(|t| t <= view.now) {
            self.release_due(view, &mut out);
        }
        if !self.waiting.is_empty() {
            self.retry_waiting(view);
        }
        match *event {
            Event::Arrived { task } => self.offer(view, task),
            Event::Activated => {
                for &key in view.pending.iter() {
                    self.offer(view, key);
                }
            }
            Event::Finished { task, ok } => {
                self.placed.finished(task);
                if !ok {
                    self.withdraw(view, task);
                }
            }
            // Tasks the core sent back are offered again.
            Event::DeviceChanged { .. } => {
                for key in self.placed.returned(view) {
                    self.offer(view, key);
                }
            }
            _ => {}
        }
        self.next = self
            .schedules
            .iter()
            .filter_map(VirtualSchedule::next_alpha_point)
            .min_by(f64::total_cmp);
        if let Some(time) = self.next.filter(|&t| self.asked != Some(t)) {
            out.push(Decision::WakeAt { time });
            self.asked = Some(time);
        }
        self.placed.note(&out);
        Ok(out)
    }
}

/// Either reading of SOS, as parameter `model` picks.
#[derive(Debug)]
pub enum SosPolicy {
    /// The published software scheduler, tick by tick ([`Baseline`]; boxed,
    /// being the larger).
    Baseline(Box<Baseline>),
    /// The paper's rule in real time ([`Sos`]).
    Paper(Sos),
}

const MODELS: &[RStr<'static>] = &[RStr::from_str("baseline"), RStr::from_str("paper")];

/// The parameters `sos` takes.
pub const INFO: [ParamInfo; 4] = [
    ParamInfo::number(
        "alpha",
        "0.5",
        "share of its expected run time a task does in its device's virtual schedule before it joins the device's local queue",
    )
    .above(0.0)
    .at_most(1.0),
    ParamInfo::choice(
        "model",
        "baseline",
        MODELS,
        "baseline: as the published SOS software decides, in whole ticks; paper: the paper's rule in real time (/usr/share/doc/gpu-agent/policies.md)",
    ),
    ParamInfo::number("tick_s", "1", "seconds per tick (model=baseline)").above(0.0),
    ParamInfo::integer(
        "batch",
        "100",
        "tasks admitted per batch, the next batch once the last has left the virtual schedules; 0 = no batches (model=baseline)",
    )
    .at_least(0.0),
];

impl SosPolicy {
    /// A policy from plugin parameters (see [`INFO`]).
    pub fn from_params(params: &[Param]) -> Result<SosPolicy, String> {
        let read = ParamReader::new(&INFO, params)?;
        let paper = Sos::new(read.number("alpha"))?;
        Ok(match read.choice("model", |w| Some(w == "paper")) {
            true => SosPolicy::Paper(paper),
            false => SosPolicy::Baseline(Box::new(Baseline::new(
                paper.alpha,
                read.number("tick_s"),
                read.integer("batch"),
            ))),
        })
    }
}

impl PolicyImpl for SosPolicy {
    fn on_event(&mut self, view: &View<'_>, event: &Event) -> Result<Vec<Decision>, String> {
        match self {
            SosPolicy::Baseline(p) => p.on_event(view, event),
            SosPolicy::Paper(p) => p.on_event(view, event),
        }
    }
}

gpu_agent_plugin_api::export_policy! {
    name: "sos",
    description: "stochastic online scheduling: alpha-point WSPT virtual schedules on unrelated devices",
    parameters: INFO,
    new: |params: &[Param]| SosPolicy::from_params(params),
}

#[cfg(test)]
mod tests;
