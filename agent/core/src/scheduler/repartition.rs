//! Run-time MIG layout changes (docs/mig.md §6.3 step 4): a drained GPU takes a
//! new partition, whole again or split into new instances.
//!
//! Indices are never reused (docs/mig.md §6.1): new instances take the next free
//! indices, and the instances a change removes stay as retired slots that take
//! no placement. Nothing comes online here: the GPU was offline (drained) and
//! it, or its new instances, stay offline until the driver sends
//! [`Input::Online`](super::Input::Online) for each, its confirmation that the
//! layout exists on the GPU (the daemon after it read the instances back, the
//! simulator at once). A GPU that failed meanwhile is then simply not brought
//! back.

use std::fmt;

use gpu_agent_plugin_api::{Event, TaskKey, TaskState};

use super::{Action, Core, MigPhase, Slot};
use crate::host::Partition;
use crate::placement::{self, Instance, Layout, Request};

/// What [`Core::repartition`] changed.
#[derive(Debug, Clone, PartialEq)]
pub struct Repartition {
    /// The GPU's devices now, all offline: the GPU itself when whole, else
    /// its instances in start order. Unchanged when the layout already was
    /// the one asked for.
    pub devices: Vec<u32>,
    /// The instances the change retired (empty when it changed nothing).
    pub retired: Vec<u32>,
    /// What the driver must do: rejections of pending tasks no device set
    /// can hold any more, and whatever the policy decided on hearing of the
    /// change.
    pub actions: Vec<Action>,
}

/// Why [`Core::repartition`] or a step of a MIG layout change
/// ([`Core::begin_mig_change`] and the calls after it) refused; it changed
/// nothing.
#[derive(Debug, Clone, PartialEq)]
pub enum RepartitionError {
    /// No physical GPU has this index (it is out of range or a MIG instance).
    NoSuchGpu(u32),
    /// The GPU's model has no MIG.
    NotMigCapable {
        /// The GPU.
        gpu: u32,
        /// Its model.
        model: &'static str,
    },
    /// The layout breaks the model's rules: a profile of another model, a
    /// profile over its count, no disjoint placement.
    Layout {
        /// The GPU.
        gpu: u32,
        /// Why.
        reason: String,
    },
    /// One of the GPU's devices is not drained.
    Busy {
        /// The GPU.
        gpu: u32,
        /// The device (its label, e.g. `0/mig/3g.20gb@4`).
        device: String,
        /// What it still does.
        what: Busy,
    },
    /// The GPU's layout is already changing, in this phase (a second change
    /// waits for the first; a change cannot be cancelled once applying, nor
    /// reported applied while draining).
    ChangeUnderWay {
        /// The GPU.
        gpu: u32,
        /// Where the change stands.
        phase: MigPhase,
    },
    /// No layout change is under way on the GPU.
    NoChange(u32),
    /// The driver holds the GPU's layout ([`Core::hold_layout`]).
    Held(u32),
}

/// What keeps a device from being drained.
#[derive(Debug, Clone, PartialEq)]
pub enum Busy {
    /// It is online (takes placements).
    Online,
    /// It runs this task (by id).
    Running(String),
    /// Its local queue holds this many tasks.
    Queued(usize),
}

impl fmt::Display for RepartitionError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RepartitionError::NoSuchGpu(g) => write!(f, "no GPU {g} (a physical GPU's index)"),
            RepartitionError::NotMigCapable { gpu, model } => {
                write!(f, "GPU {gpu} ({model}) does not support MIG")
            }
            RepartitionError::Layout { gpu, reason } => write!(f, "GPU {gpu}: {reason}"),
            RepartitionError::Busy { gpu, device, what } => {
                write!(f, "GPU {gpu} is not drained: device {device} ")?;
                match what {
                    Busy::Online => write!(f, "is online"),
                    Busy::Running(task) => write!(f, "runs task {task}"),
                    Busy::Queued(n) => write!(f, "has {n} task(s) queued"),
                }
            }
            RepartitionError::ChangeUnderWay { gpu, phase } => {
                write!(f, "GPU {gpu}'s MIG layout is already changing ({phase})")
            }
            RepartitionError::NoChange(gpu) => {
                write!(f, "GPU {gpu} has no MIG layout change under way")
            }
            RepartitionError::Held(gpu) => write!(
                f,
                "GPU {gpu}'s MIG layout is held by work the agent did not place"
            ),
        }
    }
}

impl std::error::Error for RepartitionError {}

/// How messages name a layout: `3g.20gb@0, 2g.10gb@4`, or `MIG off`.
pub(super) fn describe(layout: &[Instance]) -> String {
    if layout.is_empty() {
        return "MIG off".into();
    }
    let names: Vec<String> = layout.iter().map(Instance::to_string).collect();
    names.join(", ")
}

impl Core {
    /// What device `d` still runs or holds queued, if anything.
    pub(super) fn work_on(&self, d: u32) -> Option<Busy> {
        let slot = &self.slots[d as usize];
        if let Some(task) = slot.running {
            Some(Busy::Running(self.tasks.task(task).id.to_string()))
        } else if !slot.live_queue().is_empty() {
            Some(Busy::Queued(slot.live_queue().len()))
        } else {
            None
        }
    }
    /// Gives GPU `gpu` a new partition at `now`: whole again when `layout`
    /// is empty, else split into its instances (placed first-fit decreasing
    /// where a request has no start). See the [module](self) documentation.
    ///
    /// The GPU must be drained: it and each of its current instances offline
    /// ([`Input::Offline`](super::Input::Offline)), idle, with an empty local
    /// queue. A request for the layout the GPU already has changes nothing
    /// and needs no drain.
    ///
    /// Pending tasks that no device set can hold under the new layout are
    /// rejected, with a reason naming the change (the policy hears
    /// [`Event::Finished`] with `ok: false` for each); the policy then hears
    /// [`Event::DeviceChanged`] for the GPU, each retired instance and each
    /// new one.
    pub fn repartition(
        &mut self,
        now: f64,
        gpu: u32,
        layout: &[Request],
    ) -> Result<Repartition, RepartitionError> {
        self.repartition_as(now, gpu, layout, !layout.is_empty())
    }

    /// [`Core::repartition`], with MIG on (`mig_on`) or off; MIG on with an
    /// empty `layout` splits the GPU into no instance: no device of it
    /// takes work.
    pub(super) fn repartition_as(
        &mut self,
        now: f64,
        gpu: u32,
        layout: &[Request],
        mig_on: bool,
    ) -> Result<Repartition, RepartitionError> {
        let target = self.target_of(gpu, layout)?;
        let current = self.instances_of(gpu);
        if self.laid_out_as(gpu, &target, mig_on) {
            return Ok(Repartition {
                devices: if mig_on { current } else { vec![gpu] },
                retired: Vec::new(),
                actions: Vec::new(),
            });
        }
        for &d in std::iter::once(&gpu).chain(&current) {
            let slot = &self.slots[d as usize];
            let what = if slot.online {
                Some(Busy::Online)
            } else {
                self.work_on(d)
            };
            if let Some(what) = what {
                return Err(RepartitionError::Busy {
                    gpu,
                    device: slot.spec.label(),
                    what,
                });
            }
        }

        self.advance(now);
        for &d in &current {
            let slot = &mut self.slots[d as usize];
            let instance = *slot.spec.mig().expect("an instance");
            slot.spec.partition = Partition::Retired(instance);
        }
        let mut spec = self.slots[gpu as usize].spec.clone();
        let added = if mig_on {
            spec.split(&target, self.slots.len() as u32)
        } else {
            spec.partition = Partition::Whole;
            Vec::new()
        };
        let devices: Vec<u32> = if mig_on {
            added.iter().map(|d| d.index).collect()
        } else {
            vec![gpu]
        };
        // Fresh slots: idle, offline, with the power share of their new shape.
        let fresh = |spec| Slot {
            online: false,
            ..Slot::new(spec, self.default_clocks)
        };
        for d in std::iter::once(gpu).chain(current.iter().copied()) {
            let spec = if d == gpu {
                spec.clone()
            } else {
                self.slots[d as usize].spec.clone()
            };
            self.slots[d as usize] = fresh(spec);
        }
        self.slots.extend(added.into_iter().map(fresh));
        self.reshape();
        self.projection_stale = true;

        let mut actions = Vec::new();
        let change = format!("GPU {gpu}'s MIG layout changed to {}", describe(&target));
        let stranded: Vec<(TaskKey, String)> = self
            .pending
            .as_slice()
            .iter()
            .filter_map(|&k| {
                self.unschedulable(self.tasks.task(k))
                    .map(|why| (k, format!("{why} ({change})")))
            })
            .collect();
        for (task, reason) in stranded {
            self.pending.remove(task);
            self.tasks.set_state(task, TaskState::Rejected);
            self.unfinished -= 1;
            actions.push(Action::Reject { task, reason });
            self.consult(Event::Finished { task, ok: false }, &mut actions);
        }
        let changed: Vec<u32> = std::iter::once(gpu)
            .chain(current.iter().copied())
            .chain(devices.iter().copied().filter(|&d| d != gpu))
            .collect();
        for &d in &changed {
            self.touch(d);
        }
        for d in changed {
            self.consult(Event::DeviceChanged { device: d }, &mut actions);
        }
        self.dispatch(&mut actions);
        Ok(Repartition {
            devices,
            retired: current,
            actions,
        })
    }

    /// The layout `layout` asks of physical GPU `gpu`, placed (first fit
    /// decreasing where a request has no start), or why it cannot be.
    pub(super) fn target_of(
        &self,
        gpu: u32,
        layout: &[Request],
    ) -> Result<Layout, RepartitionError> {
        let Some(parent) = self
            .slots
            .get(gpu as usize)
            .map(|s| &s.spec)
            .filter(|spec| spec.mig().is_none())
        else {
            return Err(RepartitionError::NoSuchGpu(gpu));
        };
        match parent.model.mig {
            None if layout.is_empty() => Ok(Vec::new()),
            None => Err(RepartitionError::NotMigCapable {
                gpu,
                model: parent.model.name,
            }),
            Some(table) => {
                if let Some(r) = layout
                    .iter()
                    .find(|r| table.profile_named(r.profile.name) != Some(r.profile))
                {
                    return Err(RepartitionError::Layout {
                        gpu,
                        reason: format!(
                            "{} is not a profile of {}",
                            r.profile.name, parent.model.name
                        ),
                    });
                }
                placement::place_or_explain(table, layout)
                    .map_err(|reason| RepartitionError::Layout { gpu, reason })
            }
        }
    }

    /// Physical GPU `gpu`'s layout now: its instances in start order, empty
    /// when it is whole.
    /// Whether GPU `gpu` already is as asked: MIG on (`mig_on`: split, with
    /// `target`'s instances) or off (whole). A GPU split with no instance
    /// (MIG on and none made, as `nvidia-smi` or mig-parted's `all-enabled`
    /// leave it) is neither MIG off nor any layout with instances.
    pub(super) fn laid_out_as(&self, gpu: u32, target: &[Instance], mig_on: bool) -> bool {
        let split = matches!(
            self.slots[gpu as usize].spec.partition,
            Partition::Split { .. }
        );
        split == mig_on && self.layout_of(gpu) == target
    }

    pub(super) fn layout_of(&self, gpu: u32) -> Layout {
        self.instances_of(gpu)
            .into_iter()
            .map(|d| {
                let slot = self.slots[d as usize].spec.mig().expect("an instance");
                Instance {
                    profile: slot.profile,
                    start: slot.start,
                }
            })
            .collect()
    }

    /// The current (not retired) MIG instances of GPU `gpu`, in index order
    /// (which is start order).
    pub(super) fn instances_of(&self, gpu: u32) -> Vec<u32> {
        self.slots
            .iter()
            .filter(|s| matches!(s.spec.partition, Partition::Mig(m) if m.parent == gpu))
            .map(|s| s.spec.index)
            .collect()
    }
}
