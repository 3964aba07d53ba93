//! The sans-IO scheduler core: events in, actions out.
//!
//! The core keeps the central pending queue, one local queue per device and the
//! table of every task. It never reads a clock, spawns a process or touches a
//! GPU: its driver (the simulator or the daemon) tells it the time with each
//! input and carries out the [`Action`]s it returns. Given the same inputs it
//! returns the same actions.
//!
//! Rules it enforces whatever the policy says (ARCHITECTURE.md,
//! invariants 3, 5 and 6):
//! - a device runs one task at a time and is never pre-empted;
//! - a gang task starts on all its devices together, when it is at the head of
//!   every one of their local queues and all of them are idle;
//! - a task no device set could ever hold is rejected before the policy sees it;
//! - every decision is checked before it applies; a policy that errs, panics,
//!   decides something invalid or strands tasks is reported with
//!   [`Action::PolicyFault`] and replaced by the built-in FIFO order, which is
//!   offered every pending task. Applied decisions stay applied, so no task is
//!   lost or placed twice;
//! - an offline device gets no placement: its local queue goes back to the
//!   pending queue when it goes offline, and a decision that names it is
//!   refused, until [`Input::Online`] brings it back;
//! - MIG (docs/mig.md §6.1): a GPU split into MIG instances keeps its index but is
//!   offline for good (its instances are the devices); a MIG instance runs
//!   tasks alone, never as part of a gang. A task whose gang needs more
//!   whole GPUs than the host has is rejected before the policy sees it, so
//!   a correct policy can always avoid naming a MIG device in a gang (the
//!   view's `Device::mig` says which are), and a decision that does is a
//!   policy fault. A drained GPU's layout changes with
//!   [`Core::repartition`]: new instances take the next free indices, old
//!   ones stay as retired slots (indices are never reused), and pending
//!   tasks nothing can hold any more are rejected. [`Core::begin_mig_change`]
//!   (or a policy's `Decision::MigLayout`, where allowed) drains a GPU for a
//!   new layout and asks the driver to apply it once idle (the sequence is
//!   on [`Core::begin_mig_change`]).

mod decide;
mod mig_change;
mod pending;
mod projection;
mod repartition;
mod table;
mod views;
mod waiting;

use gpu_agent_plugin_api::{
    abi_stable::{
        nonexhaustive_enum::NonExhaustive,
        std_types::{RSlice, RStr},
    },
    ClockRange, Clocks, Device, DvfsClass, Event, PowerModel, Task, TaskKey, TaskState, View,
};

pub use mig_change::{MigChange, MigPhase, OnBusy};
use pending::Pending;
pub use repartition::{Busy, Repartition, RepartitionError};
use table::Table;
use views::Views;
pub use waiting::Waiting;

use crate::host::DeviceSpec;
use crate::placement::Layout;
use crate::policy::{builtin_fifo, PolicyInstance};
use crate::task::TaskSpec;

/// What the driver must do.
#[derive(Debug, Clone, PartialEq)]
pub enum Action {
    /// Start `task` now on `devices` at `clocks`; it is expected to run `runtime` s.
    Start {
        /// The task.
        task: TaskKey,
        /// Its devices (all start together).
        devices: Vec<u32>,
        /// Normalised clocks to set before it starts and reset after.
        clocks: Clocks,
        /// Expected run time at those clocks, seconds.
        runtime: f64,
    },
    /// `task` left the pending queue for the local queue of its devices
    /// (a policy's `Decision::Assign`); it starts there with a later
    /// [`Action::Start`], or goes back to pending. Only for drivers that
    /// report placements (the daemon's `assigned`): O(1) per placement.
    Assigned {
        /// The task.
        task: TaskKey,
    },
    /// `task` is refused.
    Reject {
        /// The task.
        task: TaskKey,
        /// Why.
        reason: String,
    },
    /// `task` is running past its expected end: deliver [`Input::Overran`]
    /// for it again at `until`, its new expected end, if it still runs then.
    Overrunning {
        /// The task.
        task: TaskKey,
        /// When to ask again, seconds.
        until: f64,
    },
    /// Stop `task` now: `device`, one of its devices, went offline with
    /// `interrupt` (it failed). Report its end as usual, with
    /// [`Input::Finished`] (`ok: false`), or with [`Input::Requeue`] to queue
    /// it again.
    Interrupt {
        /// The task.
        task: TaskKey,
        /// The device that went offline.
        device: u32,
    },
    /// Deliver [`Input::Timer`] at `time`.
    WakeAt {
        /// Absolute time, seconds.
        time: f64,
    },
    /// The policy failed; the core now runs the built-in FIFO order.
    PolicyFault {
        /// The failed policy's name.
        policy: String,
        /// What went wrong.
        reason: String,
    },
    /// A MIG layout change of physical GPU `gpu` to `layout` began (by
    /// [`Core::begin_mig_change`] or a policy's `Decision::MigLayout`): its
    /// devices are offline and drain. Record it; [`Action::ApplyMigLayout`]
    /// follows when nothing runs there.
    MigDraining {
        /// The GPU.
        gpu: u32,
        /// Its target layout (empty: MIG off).
        layout: Layout,
    },
    /// Physical GPU `gpu` is drained: give it `layout` (empty: MIG off) now,
    /// then report with [`Core::mig_applied`] or [`Core::mig_failed`].
    ApplyMigLayout {
        /// The GPU.
        gpu: u32,
        /// The layout, placed.
        layout: Layout,
    },
    /// A policy asked for `layout` on physical GPU `gpu`, whose layout the
    /// driver holds ([`Core::hold_layout`]): refused, nothing changed, and
    /// no policy fault (the policy cannot see what holds it). The driver
    /// says why.
    MigHeld {
        /// The GPU.
        gpu: u32,
        /// The layout asked for (empty: MIG off).
        layout: Layout,
    },
}

/// What happened, as the driver tells the core.
#[derive(Debug, Clone, PartialEq)]
pub enum Input {
    /// A task left its devices.
    Finished {
        /// The task.
        task: TaskKey,
        /// Whether it succeeded.
        ok: bool,
    },
    /// A running task is still running at its expected end (the run time
    /// its `Start` gave, or the `until` of its last [`Action::Overrunning`]).
    /// Its devices' local queues go back to the pending queue, in arrival
    /// order, so that the policy places them again; its expected end moves
    /// out by as long as it has run so far (the policy hears
    /// [`Event::DeviceChanged`] for each of its devices).
    Overran {
        /// The task.
        task: TaskKey,
    },
    /// A running task left its devices without finishing and waits again
    /// (after [`Action::Interrupt`], for a task that asked to be queued
    /// again): it goes back to the pending queue in its arrival place, and
    /// the policy hears [`Event::DeviceChanged`] for each of its devices.
    Requeue {
        /// The task.
        task: TaskKey,
    },
    /// `device` goes offline: nothing is placed on it until [`Input::Online`];
    /// its local queue goes back to the pending queue in arrival order, and
    /// the policy hears [`Event::DeviceChanged`] (and sees `online: false`).
    ///
    /// With `interrupt` (the device failed) its running task is to be
    /// stopped: the core answers [`Action::Interrupt`]. Without it the
    /// device drains: its running task ends as it would. An admin's drain
    /// uses this, and so does a MIG layout change, which must empty a GPU
    /// (and its instances) before [`Core::repartition`], and then brings
    /// the new devices online with [`Input::Online`]. For a device already
    /// offline only the interrupt happens, if asked for (a drained device
    /// that then fails).
    Offline {
        /// The device.
        device: u32,
        /// Whether its running task is to be stopped.
        interrupt: bool,
    },
    /// `device` is back: placements on it are accepted again, and the
    /// policy hears [`Event::DeviceChanged`]. Nothing happens for a device
    /// already online, for a GPU split into MIG instances (it is never
    /// a device itself), for a retired MIG instance, or for a device of a
    /// GPU whose MIG layout is changing ([`Core::begin_mig_change`]).
    Online {
        /// The device.
        device: u32,
    },
    /// A wake-up asked for with [`Action::WakeAt`] is due.
    Timer,
    /// The driver has nothing left to deliver (no running task, no timer) while
    /// tasks remain pending: the policy stranded them.
    Stalled,
}

/// Where a queued or running task goes and how long it takes there.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Placement {
    pub devices: Devices,
    pub clocks: Clocks,
    pub runtime: f64,
}

/// The devices of a placement: one held in place (most tasks: no
/// allocation, and no pointer to follow when its queue is dispatched), or
/// a gang's.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Devices {
    One(u32),
    Gang(Box<[u32]>),
}

impl Devices {
    pub fn new(devices: &[u32]) -> Devices {
        match devices {
            &[device] => Devices::One(device),
            gang => Devices::Gang(gang.into()),
        }
    }
}

impl std::ops::Deref for Devices {
    type Target = [u32];

    fn deref(&self) -> &[u32] {
        match self {
            Devices::One(device) => std::slice::from_ref(device),
            Devices::Gang(devices) => devices,
        }
    }
}

impl<'a> IntoIterator for &'a Devices {
    type Item = &'a u32;
    type IntoIter = std::slice::Iter<'a, u32>;

    fn into_iter(self) -> Self::IntoIter {
        self.iter()
    }
}

/// A device and its local queue.
#[derive(Debug)]
pub(crate) struct Slot {
    pub spec: DeviceSpec,
    pub running: Option<TaskKey>,
    /// Expected end of the running task.
    pub running_until: f64,
    /// When the running task started.
    pub running_since: f64,
    /// Local queue; `queue[head..]` is live.
    pub queue: Vec<TaskKey>,
    pub head: usize,
    /// When the device is expected to be free of its queue (valid unless the
    /// core's projection is stale).
    pub projected_free: f64,
    /// The runtimes of the live queue added up (valid unless the projection
    /// is stale): with no gang task queued, an idle device is free at
    /// `now + queued_work`.
    pub queued_work: f64,
    /// Gang tasks in the live queue.
    pub queued_gangs: u32,
    /// Marked for a dispatch check.
    pub touched: bool,
    /// Changed since the policies' view of it was last refreshed (its running
    /// task, its queue or its projection).
    pub view_stale: bool,
    /// The normalised clocks the device accepts.
    pub clock_range: ClockRange,
    /// The `default` profile's power coefficients on it.
    pub default_power: PowerModel,
    /// Whether placements on it are accepted ([`Input::Offline`]).
    pub online: bool,
}

impl Slot {
    /// An idle slot for `spec`, online if it is schedulable; with
    /// `default_clocks` it accepts only the default clocks.
    fn new(spec: DeviceSpec, default_clocks: bool) -> Slot {
        Slot {
            // A MIG instance's clocks are its GPU's, shared with the other
            // instances: none of them sets clocks.
            clock_range: if default_clocks || spec.mig().is_some() {
                ClockRange::DEFAULT_ONLY
            } else {
                spec.model.clock_range()
            },
            default_power: {
                let p = crate::apps::power_model(
                    &gpu_agent_plugin_api::AppModel::builtin_default(),
                    spec.model,
                );
                let share = spec.power_share();
                PowerModel {
                    p0: p.p0 * share,
                    gamma: p.gamma * share,
                    c: p.c * share,
                }
            },
            online: spec.schedulable(),
            spec,
            running: None,
            running_until: 0.0,
            running_since: 0.0,
            queue: Vec::new(),
            head: 0,
            projected_free: 0.0,
            queued_work: 0.0,
            queued_gangs: 0,
            touched: false,
            view_stale: true,
        }
    }

    pub fn live_queue(&self) -> &[TaskKey] {
        &self.queue[self.head..]
    }

    /// Counts `placement`'s task out of the live queue it just left.
    fn dequeued(&mut self, placement: &Placement) {
        if self.head == self.queue.len() {
            // Exactly nothing left, whatever the rounding of the sum.
            self.queued_work = 0.0;
        } else {
            self.queued_work -= placement.runtime;
        }
        if placement.devices.len() > 1 {
            self.queued_gangs -= 1;
        }
    }
}

/// The scheduler core. See the module documentation.
pub struct Core {
    slots: Vec<Slot>,
    /// The policies' device views, refreshed in place at each call.
    views: Views,
    /// Schedulable device memories, ascending (to count the devices a task
    /// fits).
    memories: Vec<f64>,
    /// The same for the devices that may be part of a gang (not MIG
    /// instances).
    gang_memories: Vec<f64>,
    /// The slowest schedulable device's speed.
    min_speed: f64,
    /// Every device limited to its default clocks ([`Core::at_default_clocks`]).
    default_clocks: bool,
    /// The tasks not ended, and those that ended lately.
    tasks: Table,
    pending: Pending,
    policy: PolicyInstance,
    /// True once the core runs the built-in fallback.
    fallen_back: bool,
    now: f64,
    projection_stale: bool,
    touched: Vec<u32>,
    unfinished: usize,
    /// Whether policies may change MIG layouts ([`Core::allowing_mig_policy`]).
    mig_policy: bool,
    /// MIG layout changes under way, in the order they began.
    mig_changes: Vec<MigChange>,
    /// Devices a policy's MIG change took offline, of which the policy is
    /// yet to hear.
    mig_drained: Vec<u32>,
    /// The physical GPUs whose layout the driver holds
    /// ([`Core::hold_layout`]).
    held_layouts: Vec<u32>,
    /// How many shapes the host has had ([`Core::reshape`]).
    shape: u64,
}

/// A task [`Core::admit`] judged that some set of the host's devices could
/// hold, on the host's shape of then; [`Core::submit_admitted`] takes it.
/// Only the core makes one, so the judgement cannot be forged or the task
/// changed after it, but for its id ([`Admitted::named`]).
#[derive(Debug, Clone)]
pub struct Admitted {
    task: Task,
    /// The host's shape it was judged on ([`Core::reshape`]'s count).
    shape: u64,
}

impl Admitted {
    /// The task under id `id`, for a driver that issues ids only to the
    /// tasks it accepts.
    pub fn named(mut self, id: &str) -> Admitted {
        self.task.id = id.into();
        self
    }
}

impl Core {
    /// A core over `devices` (indexed 0..) run by `policy`.
    pub fn new(devices: Vec<DeviceSpec>, policy: PolicyInstance) -> Core {
        let slots: Vec<Slot> = devices
            .into_iter()
            .map(|spec| Slot::new(spec, false))
            .collect();
        let mut core = Core {
            views: Views::new(&slots),
            memories: Vec::new(),
            gang_memories: Vec::new(),
            min_speed: f64::INFINITY,
            default_clocks: false,
            slots,
            tasks: Table::default(),
            pending: Pending::default(),
            policy,
            fallen_back: false,
            now: 0.0,
            projection_stale: false,
            touched: Vec::new(),
            unfinished: 0,
            mig_policy: false,
            mig_changes: Vec::new(),
            mig_drained: Vec::new(),
            held_layouts: Vec::new(),
            shape: 0,
        };
        core.reshape();
        core
    }

    /// Recomputes what depends on the host's shape: the memory indexes
    /// [`Core::unschedulable`] reads, the slowest speed and the views (every
    /// slot's is rewritten at the next call); counts the shape as a new one
    /// (an [`Admitted`] task judged on an older one is judged again).
    fn reshape(&mut self) {
        self.shape += 1;
        let memories = |gang: bool| {
            let mut m: Vec<f64> = self
                .slots
                .iter()
                .filter(|s| s.spec.schedulable() && !(gang && s.spec.mig().is_some()))
                .map(|s| s.spec.memory_gb)
                .collect();
            m.sort_by(f64::total_cmp);
            m
        };
        self.memories = memories(false);
        self.gang_memories = memories(true);
        self.min_speed = self
            .slots
            .iter()
            .filter(|s| s.spec.schedulable())
            .map(|s| s.spec.speed)
            .fold(f64::INFINITY, f64::min);
        self.views = Views::new(&self.slots);
        for slot in &mut self.slots {
            slot.view_stale = true;
        }
    }

    /// This core with every device limited to its default clocks: policies
    /// see a [`ClockRange`] of the default point only, so a DVFS policy that
    /// keeps to its devices' ranges makes its decisions without DVFS (the
    /// no-DVFS baseline of the same rules).
    pub fn at_default_clocks(mut self) -> Core {
        self.default_clocks = true;
        for slot in &mut self.slots {
            slot.clock_range = ClockRange::DEFAULT_ONLY;
        }
        self.reshape();
        self
    }

    /// The devices as they are now, in index order (MIG instances made by
    /// [`Core::repartition`] included).
    pub fn devices(&self) -> impl ExactSizeIterator<Item = &DeviceSpec> {
        self.slots.iter().map(|s| &s.spec)
    }

    /// The active policy's name.
    pub fn policy_name(&self) -> &str {
        &self.policy.name
    }

    /// The task with `key`, while the core holds it: until it ends, and
    /// after that at least until the core's next call (the actions of the
    /// call in which it ended may name it); then it is dropped.
    pub fn task(&self, key: TaskKey) -> Option<&Task> {
        self.tasks.get(key)
    }

    /// How the policy said it chose `key`'s clocks: its class and whether it
    /// was readjusted (`None`: it said nothing since the task was last
    /// placed, or the core no longer holds it).
    pub fn dvfs(&self, key: TaskKey) -> Option<(DvfsClass, bool)> {
        self.tasks.rest(key)?.dvfs
    }

    /// Tasks not yet finished, rejected or cancelled.
    pub fn unfinished(&self) -> usize {
        self.unfinished
    }

    /// Tasks in the central pending queue.
    pub fn pending(&self) -> &[TaskKey] {
        self.pending.as_slice()
    }

    /// Whether `device` is online (accepts placements).
    pub fn online(&self, device: u32) -> bool {
        self.slots[device as usize].online
    }

    /// Tasks waiting in `device`'s local queue, in order.
    pub fn local_queue(&self, device: u32) -> Vec<TaskKey> {
        self.slots[device as usize].live_queue().to_vec()
    }

    /// Judges `spec` on this host before it is submitted, recording
    /// nothing: the task, vouched for, when some set of the host's devices
    /// could hold it, else the reason [`Core::submit`] would reject it with
    /// (invariant 6). For a driver that answers the refusal itself (the
    /// daemon's `Submit`, before it stores the task); it then hands the task
    /// to [`Core::submit_admitted`].
    pub fn admit(&self, spec: TaskSpec) -> Result<Admitted, String> {
        let task = task_of(0, spec);
        match self.unschedulable(&task) {
            Some(reason) => Err(reason),
            None => Ok(Admitted {
                task,
                shape: self.shape,
            }),
        }
    }

    /// Accepts a task at `now`; returns its key and what to do (a task no
    /// set of devices could hold is rejected at once).
    pub fn submit(&mut self, now: f64, spec: TaskSpec) -> (TaskKey, Vec<Action>) {
        self.enter(now, task_of(0, spec), false)
    }

    /// Accepts a task [`Core::admit`] vouched for at `now`, without judging
    /// it again, unless the host's shape changed since (a MIG layout
    /// change): then it is judged on the new one, as [`Core::submit`] does.
    pub fn submit_admitted(&mut self, now: f64, task: Admitted) -> (TaskKey, Vec<Action>) {
        let judged = task.shape == self.shape;
        self.enter(now, task.task, judged)
    }

    /// Takes `task` in at `now` under the next key; `judged`: known to fit
    /// the host as it is.
    fn enter(&mut self, now: f64, mut task: Task, judged: bool) -> (TaskKey, Vec<Action>) {
        self.advance(now);
        let key = self.tasks.next_key();
        task.key = key;
        self.tasks.push(task);
        let mut actions = Vec::new();
        let refused = if judged {
            None
        } else {
            self.unschedulable(self.tasks.task(key))
        };
        if let Some(reason) = refused {
            self.tasks.set_state(key, TaskState::Rejected);
            actions.push(Action::Reject { task: key, reason });
            return (key, actions);
        }
        self.unfinished += 1;
        self.pending.push(key);
        self.consult(Event::Arrived { task: key }, &mut actions);
        self.dispatch(&mut actions);
        (key, actions)
    }

    /// Feeds one input at `now`; returns what to do.
    pub fn handle(&mut self, now: f64, input: Input) -> Vec<Action> {
        self.advance(now);
        let mut actions = Vec::new();
        match input {
            Input::Finished { task, ok } => {
                self.finish(task);
                self.consult(Event::Finished { task, ok }, &mut actions);
            }
            Input::Overran { task } => self.overran(task, &mut actions),
            Input::Requeue { task } => {
                let devices = self.vacate(task);
                self.tasks.set_state(task, TaskState::Pending);
                self.tasks.rest_mut(task).dvfs = None;
                self.pending.insert(task);
                for &d in &devices {
                    self.consult(Event::DeviceChanged { device: d }, &mut actions);
                }
            }
            Input::Offline { device, interrupt } => self.offline(device, interrupt, &mut actions),
            Input::Online { device } => {
                let slot = &self.slots[device as usize];
                if !slot.online && slot.spec.schedulable() && !self.changing(device) {
                    self.slots[device as usize].online = true;
                    self.touch(device);
                    self.consult(Event::DeviceChanged { device }, &mut actions);
                }
            }
            Input::Timer => self.consult(Event::Timer, &mut actions),
            Input::Stalled => {
                // The fallback never strands a placeable task; if tasks are
                // still pending under it, the driver reports them. Tasks
                // that need an offline device wait for it: no fault.
                let placeable = if self.pending.is_empty() {
                    0
                } else {
                    self.pending.len() - self.waiting_for_devices()
                };
                if placeable > 0 && !self.fallen_back {
                    let reason = format!(
                        "left {placeable} task(s) pending with nothing running and no wake-up asked for"
                    );
                    self.fall_back(reason, &mut actions);
                }
            }
        }
        self.dispatch(&mut actions);
        actions
    }

    /// Withdraws a task that has not started: from the pending queue, or from
    /// its devices' local queues. The policy hears of it as
    /// [`Event::Finished`] with `ok: false`.
    pub fn cancel(&mut self, now: f64, key: TaskKey) -> Result<Vec<Action>, String> {
        self.advance(now);
        let task = self
            .tasks
            .get(key)
            .ok_or_else(|| format!("no task key {key}"))?;
        match task.state {
            TaskState::Pending => {
                self.pending.remove(key);
            }
            TaskState::Queued => {
                self.unqueue(key);
                self.projection_stale = true;
            }
            state => return Err(format!("task {} is {state:?}, not waiting", task.id)),
        }
        self.tasks.set_state(key, TaskState::Done);
        self.unfinished -= 1;
        let mut actions = Vec::new();
        self.consult(
            Event::Finished {
                task: key,
                ok: false,
            },
            &mut actions,
        );
        self.dispatch(&mut actions);
        Ok(actions)
    }

    /// Replaces the policy; the new one is offered every pending task.
    pub fn set_policy(&mut self, now: f64, policy: PolicyInstance) -> Vec<Action> {
        self.advance(now);
        let mut actions = Vec::new();
        self.install(policy, false, &mut actions);
        self.dispatch(&mut actions);
        actions
    }

    /// Makes `policy` the active one and offers it every pending task.
    fn install(&mut self, policy: PolicyInstance, fallback: bool, actions: &mut Vec<Action>) {
        self.policy = policy;
        self.fallen_back = fallback;
        self.consult(Event::Activated, actions);
    }

    /// Starts a call at `now`: the time moves on, and tasks that ended in
    /// earlier calls may be dropped ([`Table::compact`]).
    fn advance(&mut self, now: f64) {
        debug_assert!(now >= self.now, "time went backwards: {now} < {}", self.now);
        self.now = self.now.max(now);
        self.tasks.compact(self.unfinished);
    }

    /// Why no set of devices could ever hold `task`, if none could.
    fn unschedulable(&self, task: &Task) -> Option<String> {
        let need = task.gpus as usize;
        // A gang never spans MIG instances (docs/mig.md §6.1).
        let memories = if need > 1 {
            &self.gang_memories
        } else {
            &self.memories
        };
        if need > memories.len() {
            let split = if memories.len() < self.memories.len() {
                " not split into MIG instances (a gang never spans MIG devices)"
            } else {
                ""
            };
            return Some(format!(
                "needs {need} GPUs at once; the host has {}{split}",
                memories.len()
            ));
        }
        let largest = memories.last().copied().unwrap_or(0.0);
        if task.mem_gb > largest {
            return Some(format!(
                "needs {} GB; the largest device{} has {largest} GB",
                task.mem_gb,
                if need > 1 { " a gang may use" } else { "" }
            ));
        }
        let fitting = if task.runtimes.is_empty() && (task.workload / self.min_speed).is_finite() {
            // Every device runs it in finite time: those with the memory qualify.
            memories.len() - memories.partition_point(|&m| m < task.mem_gb)
        } else {
            // The host's shape: a device offline now may come back.
            self.slots
                .iter()
                .filter(|s| {
                    s.spec.schedulable()
                        && task.fits_as(
                            &Device {
                                online: true,
                                ..slot_view(s, self.now)
                            },
                            task.gpus,
                        )
                })
                .count()
        };
        if fitting < need {
            return Some(format!(
                "needs {need} GPU(s) with {} GB each and a finite run time; only {fitting} qualify",
                task.mem_gb
            ));
        }
        None
    }

    /// Pending tasks that fit too few online devices to be placed now (they
    /// wait for an offline device to come back).
    fn waiting_for_devices(&self) -> usize {
        if self.slots.iter().all(|s| s.online) {
            return 0;
        }
        let views: Vec<Device<'_>> = self.slots.iter().map(|s| slot_view(s, self.now)).collect();
        self.pending
            .as_slice()
            .iter()
            .filter(|&&k| {
                let task = self.tasks.task(k);
                !task
                    .gpu_counts()
                    .any(|g| views.iter().filter(|d| task.fits_as(d, g)).count() >= g as usize)
            })
            .count()
    }

    /// A finished task: frees its devices and counts it done.
    fn finish(&mut self, key: TaskKey) {
        self.vacate(key);
        self.tasks.set_state(key, TaskState::Done);
        self.unfinished -= 1;
    }

    /// Frees the devices of a task that left them; returns them.
    fn vacate(&mut self, key: TaskKey) -> Devices {
        let Some(placement) = self.tasks.rest_mut(key).placement.take() else {
            panic!("task {key} left devices it was never placed on");
        };
        for &d in &placement.devices {
            let slot = &mut self.slots[d as usize];
            assert_eq!(
                slot.running,
                Some(key),
                "task {key} left device {d} where it was not running"
            );
            slot.running = None;
            // A task that ends earlier or later than expected moves its
            // device's queue: with no gang task in it, the device is free
            // once its queue has run from now (O(1), whatever the backlog);
            // a gang task ties it to other queues, which a recompute walks.
            if (slot.running_until - self.now).abs() > 1e-9 * self.now.abs().max(1.0) {
                if slot.queued_gangs == 0 && !self.projection_stale {
                    slot.projected_free = self.now + slot.queued_work;
                    debug_assert!(
                        projection::agrees(slot, &self.tasks, self.now),
                        "device {d}: queue projection {} drifted",
                        slot.projected_free
                    );
                } else {
                    self.projection_stale = true;
                }
            }
            self.touch(d);
        }
        placement.devices
    }

    /// `task` runs past its expected end: see [`Input::Overran`].
    fn overran(&mut self, task: TaskKey, actions: &mut Vec<Action>) {
        if self.tasks.get(task).map(|t| t.state) != Some(TaskState::Running) {
            return; // it ended meanwhile
        }
        let devices = self.tasks.placement(task).devices.clone();
        if self.now < self.slots[devices[0] as usize].running_until {
            return; // a check due for an earlier run of a task queued again
        }
        let since = self.slots[devices[0] as usize].running_since;
        // As long again as it has run so far (at least a millisecond): the
        // estimate doubles at each check, so checks stay few.
        let until = self.now + (self.now - since).max(1e-3);
        for &d in &devices {
            self.slots[d as usize].running_until = until;
        }
        self.return_queues(&devices);
        actions.push(Action::Overrunning { task, until });
        for &d in &devices {
            self.consult(Event::DeviceChanged { device: d }, actions);
        }
    }

    /// `device` goes offline: see [`Input::Offline`].
    fn offline(&mut self, device: u32, interrupt: bool, actions: &mut Vec<Action>) {
        let slot = &mut self.slots[device as usize];
        let was_online = std::mem::replace(&mut slot.online, false);
        let running = slot.running;
        if was_online {
            self.return_queues(&[device]);
        }
        if let Some(task) = running.filter(|_| interrupt) {
            actions.push(Action::Interrupt { task, device });
        }
        if was_online {
            self.consult(Event::DeviceChanged { device }, actions);
        }
    }

    /// Takes queued task `key` out of the local queue of each of its devices
    /// (a gang task leaves all of them) and forgets its placement.
    fn unqueue(&mut self, key: TaskKey) {
        let placement = self
            .tasks
            .rest_mut(key)
            .placement
            .take()
            .expect("queued task has a placement");
        for &d in &placement.devices {
            let slot = &mut self.slots[d as usize];
            let at = slot
                .live_queue()
                .iter()
                .position(|&k| k == key)
                .expect("queued task is in its devices' queues");
            slot.queue.remove(slot.head + at);
            slot.dequeued(&placement);
            self.touch(d);
        }
    }

    /// Sends every task waiting in the local queues of `devices` back to the
    /// pending queue, in arrival order (a gang task leaves all its queues).
    fn return_queues(&mut self, devices: &[u32]) {
        let mut returned = Vec::new();
        for &d in devices {
            returned.extend_from_slice(self.slots[d as usize].live_queue());
        }
        returned.sort_unstable();
        returned.dedup();
        for &key in &returned {
            self.unqueue(key);
            self.tasks.set_state(key, TaskState::Pending);
            // Placed again later, by whichever policy, with new clocks.
            self.tasks.rest_mut(key).dvfs = None;
        }
        for key in returned {
            self.pending.insert(key);
        }
        for &d in devices {
            self.touch(d);
        }
        self.projection_stale = true;
    }

    fn touch(&mut self, device: u32) {
        let slot = &mut self.slots[device as usize];
        slot.view_stale = true;
        if !slot.touched {
            slot.touched = true;
            self.touched.push(device);
        }
    }

    /// Asks the policy about `event` and applies its decisions.
    fn consult(&mut self, event: Event, actions: &mut Vec<Action>) {
        if self.projection_stale {
            projection::recompute(&mut self.slots, &self.tasks, self.now);
            self.projection_stale = false;
        }
        let view = View {
            now: self.now,
            held: RSlice::from_slice(self.tasks.as_slice()),
            pending: RSlice::from_slice(self.pending.as_slice()),
            devices: RSlice::from_slice(self.views.refresh(&mut self.slots, self.now)),
        };
        let answer = self
            .policy
            .policy
            .on_event(&view, &NonExhaustive::new(event));
        if self.policy.abandoned.is_raised() {
            self.retire_lent();
        }
        let outcome = answer
            .into_result()
            .map_err(|e| e.into_string())
            .and_then(|decisions| {
                decisions
                    .into_iter()
                    .try_for_each(|d| self.apply(d, actions))
            });
        if let Err(reason) = outcome {
            self.fall_back(reason, actions);
        }
        // A MIG change the policy asked for took devices offline: it hears
        // of them once its decisions are all applied.
        for device in std::mem::take(&mut self.mig_drained) {
            self.consult(Event::DeviceChanged { device }, actions);
        }
    }

    /// Leaves what the last view lent to a call that is still running (one
    /// given up, [`crate::policy::Abandoned`]) to that call for good: the
    /// task table, the pending queue, the device views and the local queues
    /// go on as copies, and the originals are leaked, never changed or freed.
    /// O(tasks held), once per abandoned call.
    fn retire_lent(&mut self) {
        self.tasks.retire_lent();
        self.pending.retire_lent();
        self.views.retire_lent();
        for slot in &mut self.slots {
            let copy = slot.queue.clone();
            std::mem::forget(std::mem::replace(&mut slot.queue, copy));
            // Its view points into the leaked queue until rewritten.
            slot.view_stale = true;
        }
    }

    /// Reports the policy's fault and hands every pending task to built-in FIFO.
    fn fall_back(&mut self, reason: String, actions: &mut Vec<Action>) {
        assert!(
            !self.fallen_back,
            "the built-in FIFO order failed: {reason}"
        );
        actions.push(Action::PolicyFault {
            policy: self.policy.name.clone(),
            reason,
        });
        self.install(builtin_fifo(), true, actions);
    }

    /// Starts every queue head whose devices are all idle and agree on it, in
    /// device order.
    fn dispatch(&mut self, actions: &mut Vec<Action>) {
        self.touched.sort_unstable_by(|a, b| b.cmp(a));
        while let Some(d) = self.touched.pop() {
            self.slots[d as usize].touched = false;
            let slot = &self.slots[d as usize];
            let Some(&key) = slot.live_queue().first() else {
                continue;
            };
            if slot.running.is_some() {
                continue;
            }
            let placement = self.tasks.placement(key);
            let ready = placement.devices.iter().all(|&g| {
                let s = &self.slots[g as usize];
                s.running.is_none() && s.live_queue().first() == Some(&key)
            });
            if !ready {
                continue;
            }
            for &g in &placement.devices {
                let slot = &mut self.slots[g as usize];
                slot.view_stale = true;
                slot.head += 1;
                slot.dequeued(placement);
                if slot.head > 64 && slot.head * 2 > slot.queue.len() {
                    slot.queue.drain(..slot.head);
                    slot.head = 0;
                }
            }
            self.start(key, actions);
        }
        if !self.mig_changes.is_empty() {
            self.ready_mig_changes(actions);
        }
    }

    /// Starts `key` on the devices of its (already recorded) placement.
    fn start(&mut self, key: TaskKey, actions: &mut Vec<Action>) {
        let placement = self.tasks.placement(key);
        for &g in &placement.devices {
            let slot = &mut self.slots[g as usize];
            slot.running = Some(key);
            slot.running_until = self.now + placement.runtime;
            slot.view_stale = true;
            slot.running_since = self.now;
        }
        actions.push(Action::Start {
            task: key,
            devices: placement.devices.to_vec(),
            clocks: placement.clocks,
            runtime: placement.runtime,
        });
        self.tasks.set_state(key, TaskState::Running);
    }
}

/// A pending task with `key` made of `spec`.
fn task_of(key: TaskKey, spec: TaskSpec) -> Task {
    Task {
        key,
        id: spec.id.into(),
        arrival: spec.arrival,
        workload: spec.workload,
        mem_gb: spec.mem_gb,
        deadline: spec.deadline,
        weight: spec.weight,
        gpus: spec.gpus,
        alt_gpus: spec.alt_gpus.into(),
        runtimes: spec.runtimes.into(),
        app: spec.app,
        state: TaskState::Pending,
    }
}

/// The policies' view of one device at `now`.
pub(crate) fn slot_view(s: &Slot, now: f64) -> Device<'_> {
    Device {
        index: s.spec.index,
        model: RStr::from_str(s.spec.model.name),
        memory_gb: s.spec.memory_gb,
        speed: s.spec.speed,
        cost_per_hour: s.spec.cost_per_hour,
        online: s.online,
        running: s.running.into(),
        queue: RSlice::from_slice(s.live_queue()),
        available_at: s.projected_free.max(now),
        clock_range: s.clock_range,
        default_power: s.default_power,
        mig: s.spec.mig_view(),
    }
}

#[cfg(test)]
mod tests;
