//! `edl`: energy-aware scheduling with per-task clocks under deadlines — the
//! EDL θ-readjustment of Mei, Wang, Chu et al. and its baselines EDF-BF,
//! EDF-WF, LPT-FF and bin-pack (docs/dvfs.md §3), on one host (§6: one
//! server of the host's GPUs, none ever turned off).
//!
//! At every event the policy places every pending task:
//! 1. Each task's clocks on a device come from Algorithm 1
//!    ([`gpu_agent_dvfs::Options::choose`]) on its application profile scaled
//!    to its run time on that device, within the device's clock range (the
//!    memory clock also within the model's [0.5, 1.2]): the energy-optimal
//!    point t̂, P̂ when it meets d − a, else (deadline-prior) the least-energy
//!    point that does, unless `compat`.
//! 2. Tasks are taken in deadline order (EDF; ties in arrival order), or by
//!    decreasing t̂ for `lpt-ff`.
//! 3. A device's end is when it is free of its running task and local queue;
//!    a task fits device j when d − max(now, end_j) ≥ t̂_j.
//!    - `edl`: the device free first (SPT, lowest index on ties); if the task
//!      does not fit it and the slack exceeds t_θ = max(θ·t̂, t_min), its
//!      clocks are re-chosen for the slack (C(slack), θ-readjustment).
//!    - `edf-bf` / `edf-wf`: among fitting devices the largest / smallest
//!      load (last / first on ties), where a device's load is the largest
//!      τ/d over the tasks placed on it, τ its booked time so far.
//!    - `lpt-ff`: the first fitting device.
//!    - `bin-pack`: `edf-wf` for the first batch it places, first fit in EDF
//!      order after (the paper's BIN).
//!    
//!    Where no device takes it, the task goes to the device free first at
//!    the fastest clocks of the search (Algorithm 1's readjustment grid
//!    within the device's range; a late finish counts as a miss), or at
//!    default clocks with `late = default`: the paper's "new server" does
//!    not exist on one host.
//! 4. The task joins the end of that device's local queue with its clocks;
//!    the agent rounds them up to supported clocks and times the run there.
//!    A [`Decision::Dvfs`] after it tells the agent the task's class and
//!    whether it was readjusted.
//!
//! A gang task (more than one GPU) runs at default clocks on the devices free
//! first. `server_grouping` (how the paper groups pairs into servers) does
//! not apply on one host.

// abi_stable 0.11's derives put impls inside constants.
#![allow(non_local_definitions)]

mod params;

use gpu_agent_dvfs::{Class, Options, Point, Profile, Setting};
use gpu_agent_plugin_api::{
    abi_stable::std_types::ROption, Clocks, Decision, Device, DvfsClass, Event, PolicyImpl, Task,
    TaskKey, View,
};

pub use params::{Params, Rule, PARAMETERS};

/// The policy: its parameters and each device's load (for the baselines).
#[derive(Debug, Default)]
pub struct Edl {
    params: Params,
    /// Per device index: booked time τ and load max τ/d.
    booked: Vec<(f64, f64)>,
    /// Whether it has placed a task yet (bin-pack's first batch).
    placed_any: bool,
}

/// A task's point on one device, from Algorithm 1.
#[derive(Debug, Clone, Copy)]
struct Candidate {
    device: usize,
    profile: Profile,
    options: Options,
    point: Point,
    class: DvfsClass,
}

impl Edl {
    /// A policy with `params`.
    pub fn new(params: Params) -> Edl {
        Edl {
            params,
            ..Edl::default()
        }
    }

    /// Algorithm 1 for `task` on `device`, within its clock range.
    fn candidate(&self, task: &Task, device: &Device<'_>) -> Candidate {
        let r = device.clock_range;
        let options = Options {
            fc_range: (r.core_min, r.core_max),
            fm_range: (r.mem_min.max(0.5), r.mem_max.min(1.2)),
            ..self.params.options
        };
        let profile =
            Profile::of(&task.app, task.app.power_on(device)).scaled_to(task.runtime_on(device));
        let choice = options.choose(&profile, Some(task.deadline - task.arrival));
        Candidate {
            device: device.index as usize,
            profile,
            options,
            point: choice.point,
            class: match choice.class {
                Class::EnergyPrior => DvfsClass::EnergyPrior,
                Class::DeadlinePrior => DvfsClass::DeadlinePrior,
            },
        }
    }
}

/// The clocks of `setting` (`None` for the default ones).
fn clocks_of(setting: Setting) -> ROption<Clocks> {
    if setting.fc == 1.0 && setting.fm == 1.0 {
        ROption::RNone
    } else {
        ROption::RSome(Clocks {
            core: setting.fc,
            mem: setting.fm,
        })
    }
}

impl PolicyImpl for Edl {
    fn on_event(&mut self, view: &View<'_>, _event: &Event) -> Result<Vec<Decision>, String> {
        if view.pending.is_empty() {
            return Ok(Vec::new());
        }
        if self.booked.len() < view.devices.len() {
            self.booked.resize(view.devices.len(), (0.0, 0.0));
        }
        let now = view.now;
        let mut end: Vec<f64> = view.devices.iter().map(|d| d.available_at).collect();
        // Each pending task with its points on the devices that can hold it.
        let mut work: Vec<(TaskKey, Vec<Candidate>)> = view
            .pending
            .iter()
            .map(|&k| {
                let t = view.task(k);
                let cands = if t.gpus == 1 {
                    view.devices
                        .iter()
                        .filter(|d| t.fits(d))
                        .map(|d| self.candidate(t, d))
                        .collect()
                } else {
                    Vec::new()
                };
                (k, cands)
            })
            .collect();
        let rule = self.params.rule;
        if rule == Rule::LptFf {
            let shortest =
                |c: &[Candidate]| c.iter().map(|c| c.point.t).fold(f64::INFINITY, f64::min);
            work.sort_by(|a, b| shortest(&b.1).total_cmp(&shortest(&a.1)));
        } else {
            work.sort_by(|a, b| view.task(a.0).deadline.total_cmp(&view.task(b.0).deadline));
        }
        let first_batch = !self.placed_any;
        let mut decisions = Vec::with_capacity(work.len());
        for (key, cands) in work {
            let task = view.task(key);
            if task.gpus > 1 {
                if let Some(d) = gang(view, task, &mut end) {
                    decisions.push(d);
                    self.placed_any = true;
                }
                continue;
            }
            let Some(spt) = cands
                .iter()
                .min_by(|a, b| end[a.device].total_cmp(&end[b.device]))
            else {
                continue; // no online device can hold it now
            };
            let slack = |c: &Candidate| task.deadline - end[c.device].max(now);
            let fits = |c: &&Candidate| slack(c) >= c.point.t;
            let load = |c: &&Candidate| self.booked[c.device].1;
            let picked: Option<(Candidate, Point, bool)> = match rule {
                Rule::Edl => {
                    let s = slack(spt);
                    if s >= spt.point.t {
                        Some((*spt, spt.point, false))
                    } else {
                        let t_theta =
                            (self.params.theta * spt.point.t).max(spt.options.t_min(&spt.profile));
                        (s > t_theta)
                            .then(|| spt.options.readjust(&spt.profile, spt.point, s))
                            .flatten()
                            .map(|p| (*spt, p, true))
                    }
                }
                Rule::EdfBf => cands
                    .iter()
                    .filter(fits)
                    .max_by(|a, b| load(a).total_cmp(&load(b)))
                    .map(|c| (*c, c.point, false)),
                Rule::EdfWf => cands
                    .iter()
                    .filter(fits)
                    .min_by(|a, b| load(a).total_cmp(&load(b)))
                    .map(|c| (*c, c.point, false)),
                Rule::LptFf => cands.iter().find(fits).map(|c| (*c, c.point, false)),
                Rule::BinPack if first_batch => cands
                    .iter()
                    .filter(fits)
                    .min_by(|a, b| load(a).total_cmp(&load(b)))
                    .map(|c| (*c, c.point, false)),
                Rule::BinPack => cands.iter().find(fits).map(|c| (*c, c.point, false)),
            };
            let (at, point, readjusted) = picked.unwrap_or_else(|| {
                // Nothing takes it in time: the device free first, at the
                // fastest clocks of the search (within the device's range),
                // or at default clocks with `late = default`.
                let point = if self.params.late_fastest {
                    spt.options.fastest(&spt.profile)
                } else {
                    spt.profile.default_point()
                };
                (*spt, point, false)
            });
            let j = at.device;
            end[j] = end[j].max(now) + point.t;
            let booked = &mut self.booked[j];
            booked.0 += point.t;
            booked.1 = booked.1.max(booked.0 / task.deadline);
            self.placed_any = true;
            decisions.push(Decision::Assign {
                task: key,
                devices: vec![j as u32].into(),
                position: ROption::RNone,
                clocks: clocks_of(point.setting),
            });
            decisions.push(Decision::Dvfs {
                task: key,
                class: at.class,
                readjusted,
            });
        }
        Ok(decisions)
    }
}

/// A gang task at default clocks on the `gpus` devices that can hold it and
/// are free first (lowest index on ties); `None` while too few can.
fn gang(view: &View<'_>, task: &Task, end: &mut [f64]) -> Option<Decision> {
    let mut devs: Vec<&Device<'_>> = view
        .devices
        .iter()
        .filter(|d| task.fits_as(d, task.gpus))
        .collect();
    if devs.len() < task.gpus as usize {
        return None;
    }
    devs.sort_by(|a, b| end[a.index as usize].total_cmp(&end[b.index as usize]));
    devs.truncate(task.gpus as usize);
    let start = devs
        .iter()
        .map(|d| end[d.index as usize])
        .fold(view.now, f64::max);
    let runtime = devs.iter().map(|d| task.runtime_on(d)).fold(0.0, f64::max);
    let mut chosen: Vec<u32> = devs.iter().map(|d| d.index).collect();
    chosen.sort_unstable();
    for &j in &chosen {
        end[j as usize] = start + runtime;
    }
    Some(Decision::Assign {
        task: task.key,
        devices: chosen.into(),
        position: ROption::RNone,
        clocks: ROption::RNone,
    })
}

gpu_agent_plugin_api::export_policy! {
    name: "edl",
    description: "energy-aware per-task clocks under deadlines (EDL theta-readjustment; edf-bf, edf-wf, lpt-ff, bin-pack)",
    parameters: params::PARAMETERS,
    new: |params: &[gpu_agent_plugin_api::Param]| Params::parse(params).map(Edl::new),
}

#[cfg(test)]
mod tests;
