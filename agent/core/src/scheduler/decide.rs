//! Checking and applying a policy's decisions.

use gpu_agent_plugin_api::{
    abi_stable::std_types::ROption, Clocks, Decision, DecisionNe, TaskKey, TaskState,
};

use super::{slot_view, Action, Core, Devices, Placement};
use crate::host::Partition;

impl Core {
    /// Applies one decision, or says why it is invalid (nothing changes then).
    pub(super) fn apply(
        &mut self,
        decision: DecisionNe,
        actions: &mut Vec<Action>,
    ) -> Result<(), String> {
        let decision = decision
            .into_enum()
            .map_err(|_| "returned a kind of decision this agent does not know".to_string())?;
        match decision {
            Decision::Assign {
                task,
                devices,
                position,
                clocks,
            } => {
                let placement = self.placement(task, &devices, clocks)?;
                let position = position.into_option();
                if let Some(p) = position {
                    // Gangs only join the end of queues, so no two wait on
                    // each other (ARCHITECTURE.md, invariant 4).
                    if devices.len() > 1 {
                        return Err(format!("assigned gang task {} at position {p}: gang tasks join the end of their queues", self.id(task)));
                    }
                    let len = self.slots[devices[0] as usize].live_queue().len();
                    if p as usize > len {
                        return Err(format!("assigned task {} at position {p} of device {}, whose queue holds {len}", self.id(task), devices[0]));
                    }
                }
                self.take_pending(task);
                self.tasks.set_state(task, TaskState::Queued);
                self.enqueue(task, placement, position.map(|p| p as usize));
                actions.push(Action::Assigned { task });
                Ok(())
            }
            Decision::Start {
                task,
                devices,
                clocks,
            } => {
                let placement = self.placement(task, &devices, clocks)?;
                if let Some(&busy) = devices.iter().find(|&&d| {
                    let slot = &self.slots[d as usize];
                    slot.running.is_some() || !slot.live_queue().is_empty()
                }) {
                    return Err(format!(
                        "started task {} on device {busy}, which is not idle with an empty queue",
                        self.id(task)
                    ));
                }
                self.take_pending(task);
                for &d in &devices {
                    let slot = &mut self.slots[d as usize];
                    slot.projected_free = self.now + placement.runtime;
                }
                self.tasks.rest_mut(task).placement = Some(placement);
                self.start(task, actions);
                Ok(())
            }
            Decision::Reject { task, reason } => {
                self.check_pending(task)?;
                self.take_pending(task);
                self.tasks.set_state(task, TaskState::Rejected);
                self.unfinished -= 1;
                actions.push(Action::Reject {
                    task,
                    reason: reason.into_string(),
                });
                Ok(())
            }
            Decision::WakeAt { time } => {
                if !time.is_finite() {
                    return Err(format!("asked to wake at {time}"));
                }
                actions.push(Action::WakeAt {
                    time: time.max(self.now),
                });
                Ok(())
            }
            Decision::MigLayout { gpu, layout } => self
                .mig_from_policy(gpu, layout.as_str(), actions)
                .map_err(|e| format!("asked for MIG layout {layout:?} on GPU {gpu}: {e}")),
            Decision::Dvfs {
                task,
                class,
                readjusted,
            } => match self.tasks.get(task).map(|t| t.state) {
                Some(TaskState::Queued | TaskState::Running) => {
                    self.tasks.rest_mut(task).dvfs = Some((class, readjusted));
                    Ok(())
                }
                _ => Err(format!(
                    "described the clocks of task key {task}, which is not placed"
                )),
            },
            other => Err(format!(
                "returned a decision this agent cannot apply: {other:?}"
            )),
        }
    }

    fn id(&self, task: TaskKey) -> &str {
        self.tasks.get(task).map_or("<unknown>", |t| t.id.as_str())
    }

    fn check_pending(&self, task: TaskKey) -> Result<(), String> {
        match self.tasks.get(task) {
            None => Err(format!(
                "decided about task key {task}, which does not exist or has ended"
            )),
            Some(t) if t.state != TaskState::Pending => Err(format!(
                "decided about task {}, which is {:?}, not pending",
                t.id, t.state
            )),
            Some(_) => Ok(()),
        }
    }

    /// Checks a placement of pending `task` on `devices` at `clocks`.
    fn placement(
        &self,
        task: TaskKey,
        devices: &[u32],
        clocks: ROption<Clocks>,
    ) -> Result<Placement, String> {
        self.check_pending(task)?;
        let t = self.tasks.task(task);
        let count = devices.len() as u32;
        if !t.gpu_counts().any(|g| g == count) {
            let alternatives = if t.alt_gpus.is_empty() {
                String::new()
            } else {
                let alt: Vec<String> = t.alt_gpus.iter().map(|g| g.to_string()).collect();
                format!(" (or {})", alt.join(", "))
            };
            return Err(format!(
                "placed task {} on {count} device(s); it needs {}{alternatives}",
                t.id, t.gpus
            ));
        }
        let asked = clocks.into_option().unwrap_or(Clocks::DEFAULT);
        let mut clocks = asked;
        let mut runtime: f64 = 0.0;
        for (i, &d) in devices.iter().enumerate() {
            let Some(slot) = self.slots.get(d as usize) else {
                return Err(format!(
                    "placed task {} on device {d}, which does not exist",
                    t.id
                ));
            };
            let view = &slot_view(slot, self.now);
            if devices[..i].contains(&d) {
                return Err(format!("placed task {} twice on device {d}", t.id));
            }
            match slot.spec.partition {
                Partition::Split { .. } => {
                    return Err(format!(
                        "placed task {} on device {d}, a GPU split into MIG instances (its instances are the devices)",
                        t.id
                    ))
                }
                Partition::Retired(_) => {
                    return Err(format!(
                        "placed task {} on device {d} ({}), a MIG instance a layout change removed",
                        t.id,
                        slot.spec.label()
                    ))
                }
                Partition::Whole | Partition::Mig(_) => {}
            }
            if !slot.online {
                return Err(format!(
                    "placed task {} on device {d}, which is offline",
                    t.id
                ));
            }
            if count > 1 && slot.spec.mig().is_some() {
                return Err(format!(
                    "placed gang task {} on MIG device {d} ({}): a gang never spans MIG devices",
                    t.id,
                    slot.spec.label()
                ));
            }
            if !t.fits(view) {
                return Err(format!(
                    "placed task {} on device {d}, which cannot hold it",
                    t.id
                ));
            }
            let r = slot.clock_range;
            let rounded = if r.contains(asked) {
                slot.spec.model.round_up(asked)
            } else {
                None
            };
            let Some(rounded) = rounded else {
                return Err(format!(
                    "asked for clocks core {} mem {} on device {d} ({}), outside core {:.3}..{:.3} mem {:.3}..{:.3}",
                    asked.core, asked.mem, slot.spec.model.name, r.core_min, r.core_max, r.mem_min, r.mem_max
                ));
            };
            // A gang on devices of different models runs at clocks no lower
            // than any of them rounded to.
            clocks.core = if i == 0 {
                rounded.core
            } else {
                clocks.core.max(rounded.core)
            };
            clocks.mem = if i == 0 {
                rounded.mem
            } else {
                clocks.mem.max(rounded.mem)
            };
            runtime = runtime.max(t.runtime_on(view));
        }
        // The run time at the clocks actually set (docs/dvfs.md §6).
        Ok(Placement {
            devices: Devices::new(devices),
            clocks,
            runtime: t.scaled(runtime, count) * t.app.time_factor(clocks),
        })
    }

    fn take_pending(&mut self, task: TaskKey) {
        let taken = self.pending.remove(task);
        assert!(taken, "task {task} is pending");
    }

    fn enqueue(&mut self, task: TaskKey, placement: Placement, position: Option<usize>) {
        let placement = self.tasks.rest_mut(task).placement.insert(placement);
        let devices = &placement.devices;
        match position {
            Some(p) => {
                let slot = &mut self.slots[devices[0] as usize];
                let at = slot.head + p;
                if at < slot.queue.len() {
                    self.projection_stale = true;
                }
                slot.queue.insert(at, task);
                if !self.projection_stale {
                    slot.projected_free = slot.projected_free.max(self.now) + placement.runtime;
                }
            }
            None => {
                if !self.projection_stale {
                    let start = devices
                        .iter()
                        .map(|&d| self.slots[d as usize].projected_free)
                        .fold(self.now, f64::max);
                    for &d in devices {
                        self.slots[d as usize].projected_free = start + placement.runtime;
                    }
                }
                for &d in devices {
                    self.slots[d as usize].queue.push(task);
                }
            }
        }
        let gang = u32::from(devices.len() > 1);
        for &d in devices {
            let slot = &mut self.slots[d as usize];
            slot.queued_work += placement.runtime;
            slot.queued_gangs += gang;
            slot.view_stale = true;
            if !slot.touched {
                slot.touched = true;
                self.touched.push(d);
            }
        }
    }
}
