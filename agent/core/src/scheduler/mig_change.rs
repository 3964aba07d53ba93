//! MIG layout changes from start to end (docs/mig.md §6.3 steps 2 to 4;
//! §6.4): the core drains a GPU, tells its driver when the GPU is idle, and
//! takes the new devices in when the driver reports the layout made.
//!
//! The sequence is on [`Core::begin_mig_change`].

use std::fmt;

use gpu_agent_plugin_api::{Device, Event, TaskKey};

use super::{slot_view, Action, Core, Repartition, RepartitionError, Slot};
use crate::host::{DeviceSpec, Partition};
use crate::placement::{Layout, Request};

/// What [`Core::begin_mig_change`] does when the GPU runs or holds tasks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum OnBusy {
    /// Drain: the change waits for running tasks to finish.
    Wait,
    /// Refuse the change ([`RepartitionError::Busy`]).
    Refuse,
}

/// Where a MIG layout change stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MigPhase {
    /// The GPU's devices are offline; tasks still run there.
    Draining,
    /// [`Action::ApplyMigLayout`] went out; the driver changes the GPU.
    Applying,
}

impl fmt::Display for MigPhase {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            MigPhase::Draining => "draining",
            MigPhase::Applying => "applying",
        })
    }
}

/// A MIG layout change under way on one GPU.
#[derive(Debug, Clone, PartialEq)]
pub struct MigChange {
    /// The physical GPU.
    pub gpu: u32,
    /// The layout it is to take (empty: MIG off, unless `mig_on`).
    pub target: Layout,
    /// Whether MIG is on once made; with an empty `target`, MIG on and no
    /// instance ([`Core::begin_mig_on_without_instances`]).
    pub mig_on: bool,
    /// Where the change stands.
    pub phase: MigPhase,
    /// Whether a policy asked for it.
    pub by_policy: bool,
    /// The devices the drain took offline, which a cancelled or rolled back
    /// change brings back.
    pub drained: Vec<u32>,
}

impl Core {
    /// Allows (or not, the default) policies to change MIG layouts with
    /// [`Decision::MigLayout`](gpu_agent_plugin_api::Decision::MigLayout)
    /// (agent.toml `[mig] allow_policy`, docs/mig.md §6.4). An allowed request
    /// follows the sequence of [`Core::begin_mig_change`]
    /// with [`OnBusy::Wait`]; a refused or invalid one is a policy fault.
    pub fn allowing_mig_policy(mut self, allow: bool) -> Core {
        self.mig_policy = allow;
        self
    }

    /// Holds physical GPU `gpu`'s layout (`held`), or lets it go: work the
    /// core does not know (the daemon's adopted jobs) uses the GPU or one of
    /// its instances. While held, a policy's layout request for it is
    /// refused with [`Action::MigHeld`], changing nothing, and
    /// [`Core::begin_mig_change`] with [`RepartitionError::Held`]. The
    /// driver holds a GPU only while no change is under way there
    /// ([`Core::mig_change`]).
    pub fn hold_layout(&mut self, gpu: u32, held: bool) {
        self.held_layouts.retain(|&g| g != gpu);
        if held {
            self.held_layouts.push(gpu);
        }
    }

    fn layout_held(&self, gpu: u32) -> bool {
        self.held_layouts.contains(&gpu)
    }

    /// Starts changing physical GPU `gpu`'s layout to `layout` at `now`
    /// (empty: MIG off).
    ///
    /// The sequence, whoever drives it (the daemon's engine, the simulator):
    ///
    /// 1. [`Core::begin_mig_change`] (an operator's request) or a policy's
    ///    [`Decision::MigLayout`](gpu_agent_plugin_api::Decision::MigLayout)
    ///    (with [`Core::allowing_mig_policy`]) checks the layout, changing
    ///    nothing if it is invalid. A valid change takes the GPU's devices (the
    ///    GPU when whole, else its instances) offline without interrupting
    ///    anything: their local queues go back to the pending queue in arrival
    ///    order, running tasks finish as they would. The driver gets
    ///    [`Action::MigDraining`], its cue to record the change.
    /// 2. Once nothing runs on those devices the driver gets
    ///    [`Action::ApplyMigLayout`] (at once if nothing ran): it changes the
    ///    GPU (NVML, or nothing in a simulation). Until then
    ///    [`Core::cancel_mig_change`] abandons the change and brings the drained
    ///    devices back online (a driver's timeout does this too, naming
    ///    [`Core::mig_drain_waits_for`]).
    /// 3. The driver reports [`Core::mig_applied`]: the new devices are made
    ///    ([`Core::repartition`]: new indices, stranded pending tasks rejected)
    ///    and brought online. Or [`Core::mig_failed`]: the drained devices come
    ///    back if the driver restored the old layout, else they stay offline.
    ///
    /// While a change is under way no device of its GPU comes online by
    /// [`Input::Online`](super::Input::Online), and a second change of the GPU
    /// is refused.
    ///
    /// Refused, changing nothing: a GPU that does not exist or has no MIG, a
    /// layout its model cannot hold, a change already under way there, a
    /// GPU whose layout the driver holds ([`Core::hold_layout`]), and with
    /// [`OnBusy::Refuse`] a GPU with a task running or queued. A layout
    /// the GPU already has changes nothing and returns no action; otherwise
    /// the actions start with [`Action::MigDraining`].
    pub fn begin_mig_change(
        &mut self,
        now: f64,
        gpu: u32,
        layout: &[Request],
        on_busy: OnBusy,
    ) -> Result<Vec<Action>, RepartitionError> {
        self.begin_change(now, gpu, layout, !layout.is_empty(), on_busy)
    }

    /// Starts turning GPU `gpu`'s MIG mode on with no instance at `now` (an
    /// admin's explicit request, for another tool to make instances): the
    /// sequence of [`Core::begin_mig_change`], after which the GPU is split
    /// into nothing, so neither it nor anything of it takes work until a
    /// layout is made. Refused as that is, and on a GPU without MIG.
    pub fn begin_mig_on_without_instances(
        &mut self,
        now: f64,
        gpu: u32,
        on_busy: OnBusy,
    ) -> Result<Vec<Action>, RepartitionError> {
        self.begin_change(now, gpu, &[], true, on_busy)
    }

    fn begin_change(
        &mut self,
        now: f64,
        gpu: u32,
        layout: &[Request],
        mig_on: bool,
        on_busy: OnBusy,
    ) -> Result<Vec<Action>, RepartitionError> {
        let target = self.target_of(gpu, layout)?;
        if mig_on {
            let model = self.slots[gpu as usize].spec.model;
            if model.mig.is_none() {
                return Err(RepartitionError::NotMigCapable {
                    gpu,
                    model: model.name,
                });
            }
        }
        if let Some(change) = self.mig_change(gpu) {
            return Err(RepartitionError::ChangeUnderWay {
                gpu,
                phase: change.phase,
            });
        }
        if self.laid_out_as(gpu, &target, mig_on) {
            return Ok(Vec::new());
        }
        if self.layout_held(gpu) {
            return Err(RepartitionError::Held(gpu));
        }
        if on_busy == OnBusy::Refuse {
            for d in self.devices_of_gpu(gpu) {
                if let Some(what) = self.work_on(d) {
                    return Err(RepartitionError::Busy {
                        gpu,
                        device: self.slots[d as usize].spec.label(),
                        what,
                    });
                }
            }
        }
        self.advance(now);
        let mut actions = Vec::new();
        let drained = self.drain_for_change(gpu, target, mig_on, false, &mut actions);
        for device in drained {
            self.consult(Event::DeviceChanged { device }, &mut actions);
        }
        self.dispatch(&mut actions);
        Ok(actions)
    }

    /// The waiting tasks (pending, or queued on a changing GPU's devices,
    /// which a drain sends back to pending) that no device set could hold
    /// once each GPU of `changes` has its layout, in key order, each with
    /// why; empty when the layouts change nothing. What a driver checks
    /// before changes that should strand nothing (docs/mig.md §6.3,
    /// `reject_stranded`); the changes themselves reject them
    /// ([`Core::repartition`]).
    pub fn stranded_by(
        &self,
        changes: &[(u32, Vec<Request>, bool)],
    ) -> Result<Vec<(TaskKey, String)>, RepartitionError> {
        let mut targets = Vec::new();
        for (gpu, layout, mig_on) in changes {
            let target = self.target_of(*gpu, layout)?;
            if !self.laid_out_as(*gpu, &target, *mig_on) {
                targets.push((*gpu, target, *mig_on));
            }
        }
        if targets.is_empty() {
            return Ok(Vec::new());
        }
        let changing: Vec<u32> = targets
            .iter()
            .flat_map(|(gpu, _, _)| self.devices_of_gpu(*gpu))
            .collect();
        let mut specs: Vec<DeviceSpec> = self
            .slots
            .iter()
            .filter(|s| s.spec.schedulable() && !changing.contains(&s.spec.index))
            .map(|s| s.spec.clone())
            .collect();
        let mut next = self.slots.len() as u32;
        for (gpu, target, mig_on) in &targets {
            let mut parent = self.slots[*gpu as usize].spec.clone();
            if *mig_on {
                specs.extend(parent.split(target, next));
                next += target.len() as u32;
            } else {
                parent.partition = Partition::Whole;
                specs.push(parent);
            }
        }
        let after: Vec<Slot> = specs
            .into_iter()
            .map(|spec| Slot::new(spec, self.default_clocks))
            .collect();
        let mut waiting: Vec<TaskKey> = self.pending.as_slice().to_vec();
        for &d in &changing {
            waiting.extend_from_slice(self.slots[d as usize].live_queue());
        }
        waiting.sort_unstable();
        waiting.dedup();
        let described: Vec<String> = targets
            .iter()
            .map(|(gpu, t, mig_on)| {
                if *mig_on && t.is_empty() {
                    format!("GPU {gpu} in MIG mode with no instance")
                } else {
                    format!("GPU {gpu} as {}", super::repartition::describe(t))
                }
            })
            .collect();
        let change = described.join(" and ");
        Ok(waiting
            .into_iter()
            .filter(|&k| {
                let task = self.tasks.task(k);
                !task.gpu_counts().any(|g| {
                    after
                        .iter()
                        .filter(|s| {
                            task.fits_as(
                                &Device {
                                    online: true,
                                    ..slot_view(s, self.now)
                                },
                                g,
                            )
                        })
                        .count()
                        >= g as usize
                })
            })
            .map(|k| {
                let task = self.tasks.task(k);
                let why = format!(
                    "task {} ({} GPU(s) of {} GB) would fit no device with {change}",
                    task.id, task.gpus, task.mem_gb
                );
                (k, why)
            })
            .collect())
    }

    /// The change under way on GPU `gpu`, if any.
    pub fn mig_change(&self, gpu: u32) -> Option<&MigChange> {
        self.mig_changes.iter().find(|c| c.gpu == gpu)
    }

    /// Every change under way, in the order they began.
    pub fn mig_changes(&self) -> &[MigChange] {
        &self.mig_changes
    }

    /// The tasks running on GPU `gpu`'s devices (the GPU when whole, else its
    /// instances), in key order: what a drain there waits for.
    pub fn mig_drain_waits_for(&self, gpu: u32) -> Vec<TaskKey> {
        let mut running: Vec<TaskKey> = self
            .devices_of_gpu(gpu)
            .into_iter()
            .filter_map(|d| self.slots[d as usize].running)
            .collect();
        running.sort_unstable();
        running.dedup();
        running
    }

    /// Abandons GPU `gpu`'s change while it drains: the devices the drain
    /// took offline come back online (the policy hears
    /// [`Event::DeviceChanged`] for each) and tasks may be placed there
    /// again. Refused once the change applies.
    pub fn cancel_mig_change(
        &mut self,
        now: f64,
        gpu: u32,
    ) -> Result<Vec<Action>, RepartitionError> {
        match self.mig_change(gpu).map(|c| c.phase) {
            None => return Err(RepartitionError::NoChange(gpu)),
            Some(MigPhase::Applying) => {
                return Err(RepartitionError::ChangeUnderWay {
                    gpu,
                    phase: MigPhase::Applying,
                })
            }
            Some(MigPhase::Draining) => {}
        }
        self.advance(now);
        let change = self.take_change(gpu);
        let mut actions = Vec::new();
        self.bring_online(&change.drained, &mut actions);
        self.dispatch(&mut actions);
        Ok(actions)
    }

    /// The driver made GPU `gpu`'s new layout (after
    /// [`Action::ApplyMigLayout`], having read it back): the core takes it
    /// as [`Core::repartition`] does and brings the GPU's new devices online.
    /// The answer's `actions` hold both steps' actions.
    pub fn mig_applied(&mut self, now: f64, gpu: u32) -> Result<Repartition, RepartitionError> {
        self.check_applying(gpu)?;
        let change = self.take_change(gpu);
        let requests: Vec<Request> = change
            .target
            .iter()
            .map(|i| Request {
                profile: i.profile,
                start: Some(i.start),
            })
            .collect();
        let mut done = self
            .repartition_as(now, gpu, &requests, change.mig_on)
            .expect("a drained GPU takes the layout checked when its change began");
        self.bring_online(&done.devices, &mut done.actions);
        self.dispatch(&mut done.actions);
        Ok(done)
    }

    /// The driver could not make GPU `gpu`'s new layout. With `restored`
    /// (the GPU has its old layout again) the drained devices come back
    /// online; without, they stay offline (the GPU has failed) and tasks
    /// only they could hold wait.
    pub fn mig_failed(
        &mut self,
        now: f64,
        gpu: u32,
        restored: bool,
    ) -> Result<Vec<Action>, RepartitionError> {
        self.check_applying(gpu)?;
        self.advance(now);
        let change = self.take_change(gpu);
        let mut actions = Vec::new();
        if restored {
            self.bring_online(&change.drained, &mut actions);
        }
        self.dispatch(&mut actions);
        Ok(actions)
    }

    /// A policy's `Decision::MigLayout`: `text` is profiles with optional
    /// `@start`, comma-separated; `""` is MIG off. Asking again for the
    /// target of the change under way, or for the layout the GPU has, is
    /// no fault and changes nothing; so is asking for a GPU whose layout is
    /// held, which the driver hears of ([`Action::MigHeld`]).
    pub(super) fn mig_from_policy(
        &mut self,
        gpu: u32,
        text: &str,
        actions: &mut Vec<Action>,
    ) -> Result<(), String> {
        if !self.mig_policy {
            return Err(
                "policies may not change MIG layouts on this agent (agent.toml [mig] allow_policy = false)"
                    .into(),
            );
        }
        let mut requests = Vec::new();
        if !text.trim().is_empty() {
            let Some(spec) = self
                .slots
                .get(gpu as usize)
                .map(|s| &s.spec)
                .filter(|spec| spec.mig().is_none())
            else {
                return Err(RepartitionError::NoSuchGpu(gpu).to_string());
            };
            let Some(table) = spec.model.mig else {
                return Err(RepartitionError::NotMigCapable {
                    gpu,
                    model: spec.model.name,
                }
                .to_string());
            };
            for part in text.split(',') {
                requests.push(Request::parse(table, part.trim())?);
            }
        }
        let target = self.target_of(gpu, &requests).map_err(|e| e.to_string())?;
        if let Some(change) = self.mig_change(gpu) {
            if change.target == target {
                return Ok(());
            }
            return Err(RepartitionError::ChangeUnderWay {
                gpu,
                phase: change.phase,
            }
            .to_string());
        }
        let mig_on = !target.is_empty();
        if self.laid_out_as(gpu, &target, mig_on) {
            return Ok(());
        }
        if self.layout_held(gpu) {
            actions.push(Action::MigHeld {
                gpu,
                layout: target,
            });
            return Ok(());
        }
        let drained = self.drain_for_change(gpu, target, mig_on, true, actions);
        self.mig_drained.extend(drained);
        Ok(())
    }

    /// Emits [`Action::ApplyMigLayout`] for each draining GPU where nothing
    /// runs any more.
    pub(super) fn ready_mig_changes(&mut self, actions: &mut Vec<Action>) {
        for i in 0..self.mig_changes.len() {
            let change = &self.mig_changes[i];
            if change.phase != MigPhase::Draining
                || !self.mig_drain_waits_for(change.gpu).is_empty()
            {
                continue;
            }
            let change = &mut self.mig_changes[i];
            change.phase = MigPhase::Applying;
            actions.push(Action::ApplyMigLayout {
                gpu: change.gpu,
                layout: change.target.clone(),
            });
        }
    }

    /// Whether `device` belongs to a GPU whose layout is changing (it then
    /// stays offline).
    pub(super) fn changing(&self, device: u32) -> bool {
        if self.mig_changes.is_empty() {
            return false;
        }
        let spec = &self.slots[device as usize].spec;
        let gpu = spec.mig().map_or(device, |m| m.parent);
        self.mig_change(gpu).is_some()
    }

    /// Takes GPU `gpu`'s devices offline for a change to `target` and
    /// records it; returns the devices it took offline, of which the policy
    /// is yet to hear.
    fn drain_for_change(
        &mut self,
        gpu: u32,
        target: Layout,
        mig_on: bool,
        by_policy: bool,
        actions: &mut Vec<Action>,
    ) -> Vec<u32> {
        let drained: Vec<u32> = self
            .devices_of_gpu(gpu)
            .into_iter()
            .filter(|&d| self.slots[d as usize].online)
            .collect();
        for &d in &drained {
            self.slots[d as usize].online = false;
        }
        self.return_queues(&drained);
        actions.push(Action::MigDraining {
            gpu,
            layout: target.clone(),
        });
        self.mig_changes.push(MigChange {
            gpu,
            target,
            mig_on,
            phase: MigPhase::Draining,
            by_policy,
            drained: drained.clone(),
        });
        drained
    }

    fn check_applying(&self, gpu: u32) -> Result<(), RepartitionError> {
        match self.mig_change(gpu).map(|c| c.phase) {
            None => Err(RepartitionError::NoChange(gpu)),
            Some(MigPhase::Draining) => Err(RepartitionError::ChangeUnderWay {
                gpu,
                phase: MigPhase::Draining,
            }),
            Some(MigPhase::Applying) => Ok(()),
        }
    }

    fn take_change(&mut self, gpu: u32) -> MigChange {
        let at = self
            .mig_changes
            .iter()
            .position(|c| c.gpu == gpu)
            .expect("a change under way");
        self.mig_changes.remove(at)
    }

    /// Brings `devices` online (those that can be), telling the policy.
    fn bring_online(&mut self, devices: &[u32], actions: &mut Vec<Action>) {
        for &device in devices {
            let slot = &mut self.slots[device as usize];
            if slot.online || !slot.spec.schedulable() {
                continue;
            }
            slot.online = true;
            self.touch(device);
            self.consult(Event::DeviceChanged { device }, actions);
        }
    }

    /// Physical GPU `gpu`'s devices: itself when whole, else its current
    /// instances (in start order).
    pub fn devices_of_gpu(&self, gpu: u32) -> Vec<u32> {
        let instances = self.instances_of(gpu);
        if instances.is_empty() {
            vec![gpu]
        } else {
            instances
        }
    }
}
