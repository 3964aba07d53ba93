//! The ABI-stable boundary between gpu-agent and its scheduling-policy plugins.
//!
//! A policy plugin is a `cdylib` that exports one root module, [`PolicyModRef`].
//! The agent hands the policy a borrowed [`View`] of its queues and devices plus
//! an [`Event`], and the policy answers with [`Decision`]s. Nothing here does I/O,
//! reads a clock or allocates per task: the view borrows the scheduler core's own
//! tables.
//!
//! Plugin authors implement [`PolicyImpl`], a plain Rust trait, and export it with
//! [`export_policy!`]; [`guard`] turns any panic inside the policy into an error
//! at the boundary so that the agent can fall back to FIFO order. On the
//! agent's side, [`instance::PolicyInstance`] is a policy object with the name
//! it was selected by, as the loader makes it and the core runs it.
//!
//! Evolution: [`Event`] and [`Decision`] are non-exhaustive across the ABI, so new
//! kinds of events and decisions can be added without breaking old plugins (an
//! unknown event is ignored by [`guard`]; an unknown decision is reported by the
//! agent as a policy fault). Anything else that changes the layout bumps the
//! crate's minor version, which abi_stable refuses at load time.

// abi_stable 0.11's derives put impls inside constants.
#![allow(non_local_definitions)]

use std::panic::{catch_unwind, AssertUnwindSafe};

use abi_stable::{
    declare_root_module_statics,
    library::RootModule,
    nonexhaustive_enum::NonExhaustive,
    package_version_strings, sabi_trait,
    sabi_types::VersionStrings,
    std_types::{RBox, RErr, ROk, ROption, RResult, RSlice, RStr, RString, RVec},
    StableAbi,
};

pub use abi_stable;

pub mod instance;

/// The boundary's own version, checked by the agent at load time in addition to
/// abi_stable's layout and crate-version checks (only this crate crosses the
/// boundary: ARCHITECTURE.md, invariant 9).
pub const ABI_VERSION: &str = "gpu-agent-policy-abi/6";

/// A task key: handed out densely from 0 in submission order and never
/// reused, stable for the life of the core; [`View::task`] finds a task by it.
pub type TaskKey = u64;

/// Clocks normalised to the device's default clocks (1.0 = default; formats.md §6).
#[repr(C)]
#[derive(StableAbi, Clone, Copy, Debug, PartialEq)]
pub struct Clocks {
    /// Core clock, fc.
    pub core: f64,
    /// Memory clock, fm.
    pub mem: f64,
}

impl Clocks {
    /// The device's default clocks.
    pub const DEFAULT: Clocks = Clocks {
        core: 1.0,
        mem: 1.0,
    };

    /// The voltage the DVFS model implies for the core clock, normalised:
    /// V = 2(fc - 0.5)^2 + 0.5 (formats.md §6).
    pub fn voltage(&self) -> f64 {
        2.0 * (self.core - 0.5).powi(2) + 0.5
    }
}

/// The normalised clocks a device accepts (1.0 = its default clocks): the
/// lowest and highest supported core and memory clocks over its clock table.
/// The agent rounds a clock within the range up to the next supported one and
/// refuses one outside it as a policy fault.
#[repr(C)]
#[derive(StableAbi, Clone, Copy, Debug, PartialEq)]
pub struct ClockRange {
    /// Lowest core clock.
    pub core_min: f64,
    /// Highest core clock.
    pub core_max: f64,
    /// Lowest memory clock.
    pub mem_min: f64,
    /// Highest memory clock.
    pub mem_max: f64,
}

impl ClockRange {
    /// Only the default clocks.
    pub const DEFAULT_ONLY: ClockRange = ClockRange {
        core_min: 1.0,
        core_max: 1.0,
        mem_min: 1.0,
        mem_max: 1.0,
    };

    /// Whether `clocks` lie within the range.
    pub fn contains(&self, clocks: Clocks) -> bool {
        (self.core_min..=self.core_max).contains(&clocks.core)
            && (self.mem_min..=self.mem_max).contains(&clocks.mem)
    }
}

/// Power coefficients of the DVFS model: P = p0 + gamma*fm + c*V^2*fc (watts).
#[repr(C)]
#[derive(StableAbi, Clone, Copy, Debug, PartialEq)]
pub struct PowerModel {
    /// Frequency-independent power (W).
    pub p0: f64,
    /// W per unit of normalised memory clock.
    pub gamma: f64,
    /// W coefficient of V^2 * fc.
    pub c: f64,
}

impl PowerModel {
    /// Power (W) at `clocks`, the voltage implied by the core clock
    /// (V = 2(fc - 0.5)^2 + 0.5).
    pub fn power_w(&self, clocks: Clocks) -> f64 {
        let v = clocks.voltage();
        self.p0 + self.gamma * clocks.mem + self.c * v * v * clocks.core
    }
}

/// A task's DVFS application profile (formats.md §6).
#[repr(C)]
#[derive(StableAbi, Clone, Debug, PartialEq)]
pub struct AppModel {
    /// Profile name (`default` is built in).
    pub name: RString,
    /// Share of the scalable time that follows the core clock.
    pub delta: f64,
    /// Scalable part of the time.
    pub d: f64,
    /// Clock-independent part of the time.
    pub t0: f64,
    /// Measured power coefficients; `None` derives them from the device (`default`).
    pub power: ROption<PowerModel>,
}

impl AppModel {
    /// The built-in `default` profile (formats.md §6): delta 0.5, d 1, t0 0, so
    /// frequency-insensitive in time, with power derived from the device.
    pub fn builtin_default() -> AppModel {
        AppModel {
            name: "default".into(),
            delta: 0.5,
            d: 1.0,
            t0: 0.0,
            power: ROption::RNone,
        }
    }

    /// Its power coefficients on `device`: its own, or the device's `default` ones.
    pub fn power_on(&self, device: &Device<'_>) -> PowerModel {
        self.power.into_option().unwrap_or(device.default_power)
    }

    /// Run time at `clocks` as a multiple of the run time at default clocks.
    pub fn time_factor(&self, clocks: Clocks) -> f64 {
        let scalable = self.d * (self.delta / clocks.core + (1.0 - self.delta) / clocks.mem);
        (scalable + self.t0) / (self.d + self.t0)
    }
}

/// Where a task is in its life, as far as policies are concerned.
#[repr(u8)]
#[derive(StableAbi, Clone, Copy, Debug, PartialEq, Eq)]
pub enum TaskState {
    /// In the central pending queue, waiting for a decision.
    Pending,
    /// In one or more devices' local queues.
    Queued,
    /// Running on its devices.
    Running,
    /// Finished, failed or cancelled: gone from every queue.
    Done,
    /// Refused: no device could ever hold it.
    Rejected,
}

/// One task as the scheduler core holds it.
#[repr(C)]
#[derive(StableAbi, Clone, Debug)]
pub struct Task {
    /// This task's key ([`TaskKey`]).
    pub key: TaskKey,
    /// The id the user gave it.
    pub id: RString,
    /// Earliest start, seconds.
    pub arrival: f64,
    /// Work units; a device of speed v runs it in workload / v seconds.
    pub workload: f64,
    /// Memory needed on each of its devices (GB).
    pub mem_gb: f64,
    /// Absolute deadline, seconds.
    pub deadline: f64,
    /// Priority weight.
    pub weight: f64,
    /// Devices it needs at once (gang).
    pub gpus: u32,
    /// Other device counts it can also run on (malleable tasks; empty for most).
    /// On g devices it runs [`Task::scaled`] times its gang run time.
    pub alt_gpus: RVec<u32>,
    /// Run time per device at default clocks (unrelated machines); empty when the
    /// run time is workload / speed. `f64::INFINITY` marks a device it cannot use.
    pub runtimes: RVec<f64>,
    /// DVFS application profile.
    pub app: AppModel,
    /// Where it is now.
    pub state: TaskState,
}

impl Task {
    /// Run time on `device` at default clocks (`INFINITY` where it cannot run).
    pub fn runtime_on(&self, device: &Device<'_>) -> f64 {
        match self.runtimes.get(device.index as usize) {
            Some(&r) => r,
            None => self.workload / device.speed,
        }
    }

    /// The device counts it can run on: `gpus` first, then `alt_gpus`.
    pub fn gpu_counts(&self) -> impl Iterator<Item = u32> + '_ {
        std::iter::once(self.gpus).chain(self.alt_gpus.iter().copied())
    }

    /// Its run time on `g` devices given its run time `on_gpus` on `gpus` of
    /// them: the work divides evenly, so `on_gpus * gpus / g`.
    pub fn scaled(&self, on_gpus: f64, g: u32) -> f64 {
        if g == self.gpus {
            on_gpus
        } else {
            on_gpus * f64::from(self.gpus) / f64::from(g)
        }
    }

    /// Whether `device` is online and could run this task alone (memory
    /// fits, finite run time).
    pub fn fits(&self, device: &Device<'_>) -> bool {
        device.online && device.memory_gb >= self.mem_gb && self.runtime_on(device).is_finite()
    }

    /// Whether `device` could be one of the `g` devices this task runs on at
    /// once: it [`fits`](Task::fits), and it is no MIG instance unless `g`
    /// is 1 (a gang never spans MIG devices, [`Device::takes_gang_of`]).
    pub fn fits_as(&self, device: &Device<'_>, g: u32) -> bool {
        self.fits(device) && device.takes_gang_of(g)
    }
}

/// Where a MIG instance lies on its GPU (docs/mig.md §6.1).
#[repr(C)]
#[derive(StableAbi, Clone, Copy, Debug, PartialEq)]
pub struct MigInstance<'a> {
    /// The index of the physical GPU it is part of. That GPU is in the view
    /// too, `online: false` while it is split (it takes no placement itself).
    pub parent: u32,
    /// The GPU-instance profile's name, e.g. `3g.20gb`.
    pub profile: RStr<'a>,
    /// Its placement start: the first memory slice it occupies (0..8).
    pub start: u32,
    /// Compute slices it holds (of 7): its share of the parent's speed.
    pub compute_slices: u32,
}

/// One schedulable device (a GPU or a MIG instance) and its local queue.
#[repr(C)]
#[derive(StableAbi, Clone, Copy, Debug)]
pub struct Device<'a> {
    /// Device index: the physical GPUs first (host description order), then
    /// MIG instances (by GPU, then start). Indices are never reused.
    pub index: u32,
    /// Catalogue model name.
    pub model: RStr<'a>,
    /// Memory (GB).
    pub memory_gb: f64,
    /// Work units per second at default clocks.
    pub speed: f64,
    /// Usage cost per hour (0 when the host file gives none).
    pub cost_per_hour: f64,
    /// False while the device is lost or being reconfigured.
    pub online: bool,
    /// The task running on it.
    pub running: ROption<TaskKey>,
    /// Local queue, head first.
    pub queue: RSlice<'a, TaskKey>,
    /// When the device is expected to be free of its running task and its whole
    /// local queue (never before `now`).
    pub available_at: f64,
    /// The clocks it accepts, normalised to its default clocks.
    pub clock_range: ClockRange,
    /// The power coefficients of the built-in `default` profile on it (a task
    /// whose [`AppModel::power`] is `None` draws these).
    pub default_power: PowerModel,
    /// `Some` for a MIG instance. A MIG instance runs single-device tasks
    /// only: a placement on several devices never names one (the agent
    /// refuses that as a policy fault), and its clocks are its GPU's, so its
    /// `clock_range` is the default point.
    pub mig: ROption<MigInstance<'a>>,
}

impl Device<'_> {
    /// Whether it may be one of `g` devices of one placement: any device
    /// alone, only whole GPUs in a gang (a CUDA process uses one MIG device).
    pub fn takes_gang_of(&self, g: u32) -> bool {
        g <= 1 || self.mig.is_none()
    }
}

/// A borrowed view of the scheduler core.
#[repr(C)]
#[derive(StableAbi, Clone, Copy, Debug)]
pub struct View<'a> {
    /// Current time, seconds.
    pub now: f64,
    /// The tasks the core holds, in key order: every task that has not
    /// ended, and some that ended lately (the core drops ended tasks as it
    /// goes, so that its cost follows the live tasks). Find one by key with
    /// [`View::task`] or [`View::get`], never by position (ABI 5 called a
    /// slice indexed by key `tasks`; the new name keeps old code from
    /// compiling into a wrong lookup).
    pub held: RSlice<'a, Task>,
    /// The central pending queue, in arrival order.
    pub pending: RSlice<'a, TaskKey>,
    /// The devices, indexed by device index. The list may grow between
    /// calls (MIG instances made at run time take new indices, never reused;
    /// docs/mig.md §6.1), so per-device state is sized from it at each call.
    pub devices: RSlice<'a, Device<'a>>,
}

impl<'a> View<'a> {
    /// The task with `key`: any task in `pending`, in a device's queue or
    /// running, and one this call's event names.
    ///
    /// # Panics
    /// When the view does not hold `key` (a task that ended in an earlier
    /// call may be gone: look such keys up with [`View::get`]).
    pub fn task(&self, key: TaskKey) -> &'a Task {
        self.get(key)
            .unwrap_or_else(|| panic!("task key {key} is not in the view"))
    }

    /// The task with `key`, if the view holds it.
    pub fn get(&self, key: TaskKey) -> Option<&'a Task> {
        let held = self.held.as_slice();
        task_index(held, key).map(|i| &held[i])
    }
}

/// Where the task with `key` is in `tasks` (in key order, as
/// [`View::held`]), if there: at its offset from the first key while no
/// task before it has been dropped, by binary search below that offset
/// otherwise.
pub fn task_index(tasks: &[Task], key: TaskKey) -> Option<usize> {
    let offset = key.checked_sub(tasks.first()?.key)? as usize;
    if tasks.get(offset).is_some_and(|t| t.key == key) {
        return Some(offset);
    }
    tasks[..offset.min(tasks.len())]
        .binary_search_by_key(&key, |t| t.key)
        .ok()
}

/// What happened, as told to the policy.
#[repr(u8)]
#[derive(StableAbi, Clone, Debug, PartialEq)]
#[sabi(kind(WithNonExhaustive(size = [usize; 4], traits(Debug, Clone, PartialEq))))]
#[non_exhaustive]
pub enum Event {
    /// The policy was just installed; every task in `pending` needs a decision.
    Activated,
    /// A task arrived and is in the pending queue.
    Arrived {
        /// The new task.
        task: TaskKey,
    },
    /// A task left its devices (finished, failed or cancelled).
    Finished {
        /// The task.
        task: TaskKey,
        /// Whether it succeeded.
        ok: bool,
    },
    /// A wake-up the policy asked for with [`Decision::WakeAt`].
    Timer,
    /// A device changed: its running task ran past its expected end (its
    /// local queue went back to the pending queue, and `available_at` moved
    /// out), or it went online or offline.
    DeviceChanged {
        /// The device.
        device: u32,
    },
}

/// [`Event`] as it crosses the ABI.
pub type EventNe = Event_NE;

/// What the policy wants done. Decisions apply in order.
#[repr(u8)]
#[derive(StableAbi, Clone, Debug, PartialEq)]
#[sabi(kind(WithNonExhaustive(size = [usize; 16], traits(Debug, Clone, PartialEq))))]
#[non_exhaustive]
pub enum Decision {
    /// Move a pending task into the local queue of each of `devices`.
    /// `position` is the index in a single device's queue (`None`: at the end);
    /// gang tasks (several devices) always join the end of every queue.
    Assign {
        /// The task.
        task: TaskKey,
        /// One device per GPU the task needs.
        devices: RVec<u32>,
        /// Where in the queue (single-device tasks only).
        position: ROption<u32>,
        /// Clocks to run it at (`None`: default clocks).
        clocks: ROption<Clocks>,
    },
    /// Start a pending task now on `devices`, which must be idle with empty queues.
    Start {
        /// The task.
        task: TaskKey,
        /// One device per GPU the task needs.
        devices: RVec<u32>,
        /// Clocks to run it at (`None`: default clocks).
        clocks: ROption<Clocks>,
    },
    /// Refuse a pending task.
    Reject {
        /// The task.
        task: TaskKey,
        /// Why, for the user.
        reason: RString,
    },
    /// Call the policy again with [`Event::Timer`] at `time` (seconds).
    WakeAt {
        /// Absolute time.
        time: f64,
    },
    /// Re-partition a MIG-capable GPU into `layout` (mig-parted profile list,
    /// e.g. `"3g.20gb,3g.20gb"`). The agent applies it once the GPU is idle.
    MigLayout {
        /// Physical GPU index.
        gpu: u32,
        /// The layout.
        layout: RString,
    },
    /// Say how a DVFS policy chose a placed task's clocks (docs/dvfs.md §6),
    /// for the schedule and the task's record; it changes nothing else. The
    /// task must be placed (queued or running) by then.
    Dvfs {
        /// The task.
        task: TaskKey,
        /// Whether its energy-optimal clocks meet its deadline.
        class: DvfsClass,
        /// Whether its clocks were re-chosen to fit a device's slack
        /// (θ-readjustment).
        readjusted: bool,
    },
}

/// Whether a task's energy-optimal clocks meet its deadline (docs/dvfs.md §1.3).
#[repr(u8)]
#[derive(StableAbi, Clone, Copy, Debug, PartialEq, Eq)]
pub enum DvfsClass {
    /// They do: t̂ ≤ d − a.
    EnergyPrior,
    /// They do not: t̂ > d − a.
    DeadlinePrior,
}

impl DvfsClass {
    /// `energy` or `deadline`, as schedules write it.
    pub fn name(self) -> &'static str {
        match self {
            DvfsClass::EnergyPrior => "energy",
            DvfsClass::DeadlinePrior => "deadline",
        }
    }
}

/// [`Decision`] as it crosses the ABI.
pub type DecisionNe = Decision_NE;

/// A key=value policy parameter.
#[repr(C)]
#[derive(StableAbi, Clone, Debug, PartialEq)]
pub struct Param {
    /// Name.
    pub key: RString,
    /// Value, as the user wrote it.
    pub value: RString,
}

/// The type of a parameter's value.
#[repr(u8)]
#[derive(StableAbi, Clone, Copy, Debug, PartialEq, Eq)]
pub enum ParamType {
    /// `true` or `false`.
    Bool,
    /// A whole number (64-bit, signed).
    Integer,
    /// A finite real number.
    Number,
    /// One of [`ParamInfo::words`].
    Choice,
    /// Free text.
    Text,
}

impl ParamType {
    /// The type's name as users see it (`bool`, `integer`, `number`, `choice`, `text`).
    pub fn name(self) -> &'static str {
        match self {
            ParamType::Bool => "bool",
            ParamType::Integer => "integer",
            ParamType::Number => "number",
            ParamType::Choice => "choice",
            ParamType::Text => "text",
        }
    }
}

/// One end of a numeric parameter's range.
#[repr(C)]
#[derive(StableAbi, Clone, Copy, Debug, PartialEq)]
pub struct Bound {
    /// The end.
    pub value: f64,
    /// Whether `value` itself is allowed.
    pub inclusive: bool,
}

/// A parameter a policy accepts: its name, type, default, range and help.
///
/// Built with the `const` constructors ([`ParamInfo::integer`], ...) and
/// narrowed with [`ParamInfo::at_least`], [`ParamInfo::above`],
/// [`ParamInfo::at_most`], [`ParamInfo::below`] and [`ParamInfo::or_words`];
/// [`ParamInfo::check`] is the one check of a value against it.
#[repr(C)]
#[derive(StableAbi, Clone, Copy, Debug)]
pub struct ParamInfo {
    /// Name.
    pub key: RStr<'static>,
    /// Type of its value.
    pub kind: ParamType,
    /// Default value, as a user would write it.
    pub default: RStr<'static>,
    /// Lower end of the range (integer and number parameters).
    pub min: ROption<Bound>,
    /// Upper end of the range (integer and number parameters).
    pub max: ROption<Bound>,
    /// A choice's values; for an integer or number, words it accepts besides
    /// numbers (such as `auto`).
    pub words: RSlice<'static, RStr<'static>>,
    /// What it does.
    pub help: RStr<'static>,
}

impl ParamInfo {
    const fn new(
        key: &'static str,
        kind: ParamType,
        default: &'static str,
        help: &'static str,
    ) -> ParamInfo {
        ParamInfo {
            key: RStr::from_str(key),
            kind,
            default: RStr::from_str(default),
            min: ROption::RNone,
            max: ROption::RNone,
            words: RSlice::from_slice(&[]),
            help: RStr::from_str(help),
        }
    }

    /// A `true`/`false` parameter.
    pub const fn bool(key: &'static str, default: &'static str, help: &'static str) -> ParamInfo {
        ParamInfo::new(key, ParamType::Bool, default, help)
    }

    /// A whole-number parameter.
    pub const fn integer(
        key: &'static str,
        default: &'static str,
        help: &'static str,
    ) -> ParamInfo {
        ParamInfo::new(key, ParamType::Integer, default, help)
    }

    /// A real-number parameter.
    pub const fn number(key: &'static str, default: &'static str, help: &'static str) -> ParamInfo {
        ParamInfo::new(key, ParamType::Number, default, help)
    }

    /// A parameter taking one of `words`.
    pub const fn choice(
        key: &'static str,
        default: &'static str,
        words: &'static [RStr<'static>],
        help: &'static str,
    ) -> ParamInfo {
        ParamInfo::new(key, ParamType::Choice, default, help).or_words(words)
    }

    /// A free-text parameter.
    pub const fn text(key: &'static str, default: &'static str, help: &'static str) -> ParamInfo {
        ParamInfo::new(key, ParamType::Text, default, help)
    }

    /// Values from `min` up.
    pub const fn at_least(mut self, min: f64) -> ParamInfo {
        self.min = ROption::RSome(Bound {
            value: min,
            inclusive: true,
        });
        self
    }

    /// Values above `min`.
    pub const fn above(mut self, min: f64) -> ParamInfo {
        self.min = ROption::RSome(Bound {
            value: min,
            inclusive: false,
        });
        self
    }

    /// Values up to `max`.
    pub const fn at_most(mut self, max: f64) -> ParamInfo {
        self.max = ROption::RSome(Bound {
            value: max,
            inclusive: true,
        });
        self
    }

    /// Values below `max`.
    pub const fn below(mut self, max: f64) -> ParamInfo {
        self.max = ROption::RSome(Bound {
            value: max,
            inclusive: false,
        });
        self
    }

    /// Words accepted besides numbers (for a choice: its values).
    pub const fn or_words(mut self, words: &'static [RStr<'static>]) -> ParamInfo {
        self.words = RSlice::from_slice(words);
        self
    }

    /// What a value must be, in words: `an integer from 0 to 8`,
    /// `auto or a number > 0`, `one of rr, edf`.
    pub fn expected(&self) -> String {
        let words: Vec<&str> = self.words.iter().map(|w| w.as_str()).collect();
        let range = |what: &str| {
            let num = |b: &Bound| format!("{}", b.value);
            match (
                self.min.as_ref().into_option(),
                self.max.as_ref().into_option(),
            ) {
                (Some(lo), Some(hi)) if lo.inclusive && hi.inclusive => {
                    format!("{what} from {} to {}", num(lo), num(hi))
                }
                (Some(lo), Some(hi)) => format!(
                    "{what} in {}{}, {}{}",
                    if lo.inclusive { "[" } else { "(" },
                    num(lo),
                    num(hi),
                    if hi.inclusive { "]" } else { ")" }
                ),
                (Some(lo), None) => {
                    format!(
                        "{what} {} {}",
                        if lo.inclusive { ">=" } else { ">" },
                        num(lo)
                    )
                }
                (None, Some(hi)) => {
                    format!(
                        "{what} {} {}",
                        if hi.inclusive { "<=" } else { "<" },
                        num(hi)
                    )
                }
                (None, None) => what.to_string(),
            }
        };
        let numeric = |what: &str| match words.as_slice() {
            [] => range(what),
            w => format!("{} or {}", w.join(", "), range(what)),
        };
        match self.kind {
            ParamType::Bool => "true or false".into(),
            ParamType::Integer => numeric("an integer"),
            ParamType::Number => numeric("a number"),
            ParamType::Choice => format!("one of {}", words.join(", ")),
            ParamType::Text => "text".into(),
        }
    }

    /// Whether `value` is numerically within the range.
    fn in_range(&self, value: f64) -> bool {
        let above = self.min.as_ref().into_option().is_none_or(|b| {
            if b.inclusive {
                value >= b.value
            } else {
                value > b.value
            }
        });
        let below = self.max.as_ref().into_option().is_none_or(|b| {
            if b.inclusive {
                value <= b.value
            } else {
                value < b.value
            }
        });
        above && below
    }

    /// Checks `value` (as a user writes it) against the type, range and words;
    /// the error names the key, what it expects and what it got.
    pub fn check(&self, value: &str) -> Result<(), String> {
        let word = self.words.iter().any(|w| w.as_str() == value);
        let ok = match self.kind {
            ParamType::Bool => matches!(value, "true" | "false"),
            ParamType::Integer => {
                word || value.parse::<i64>().is_ok_and(|n| self.in_range(n as f64))
            }
            ParamType::Number => {
                word || value
                    .parse::<f64>()
                    .is_ok_and(|x| x.is_finite() && self.in_range(x))
            }
            ParamType::Choice => word,
            ParamType::Text => true,
        };
        if ok {
            Ok(())
        } else {
            Err(format!(
                "{}: expected {}, got {value:?}",
                self.key,
                self.expected()
            ))
        }
    }
}

/// Checks every parameter in `params` against `infos`: an unknown key or a bad
/// value is an error naming the key.
pub fn check_params<'a>(
    infos: &[ParamInfo],
    params: impl IntoIterator<Item = (&'a str, &'a str)>,
) -> Result<(), String> {
    for (key, value) in params {
        match infos.iter().find(|i| i.key.as_str() == key) {
            Some(info) => info.check(value)?,
            None => {
                let takes: Vec<&str> = infos.iter().map(|i| i.key.as_str()).collect();
                let takes = if takes.is_empty() {
                    "none".to_string()
                } else {
                    takes.join(", ")
                };
                return Err(format!("unknown parameter {key:?} (it takes: {takes})"));
            }
        }
    }
    Ok(())
}

/// A policy object as it crosses the ABI.
#[sabi_trait]
pub trait Policy: Send {
    /// React to `event`; an `Err` is a policy fault (the agent falls back to FIFO).
    #[sabi(last_prefix_field)]
    fn on_event(&mut self, view: &View<'_>, event: &EventNe) -> RResult<RVec<DecisionNe>, RString>;
}

/// An owned policy object.
pub type PolicyBox = Policy_TO<'static, RBox<()>>;

/// The root module every policy plugin exports.
#[repr(C)]
#[derive(StableAbi)]
#[sabi(kind(Prefix(prefix_ref = PolicyModRef)))]
#[sabi(missing_field(panic))]
pub struct PolicyMod {
    /// Must equal [`ABI_VERSION`].
    pub abi_version: RStr<'static>,
    /// Policy name, as users select it (`fifo`, `greedy-eft`, ...).
    pub name: RStr<'static>,
    /// One-line description.
    pub description: RStr<'static>,
    /// Parameters it accepts.
    pub parameters: RSlice<'static, ParamInfo>,
    /// Build a policy from parameters (each key is one of `parameters`).
    #[sabi(last_prefix_field)]
    pub new: extern "C" fn(params: RSlice<'_, Param>) -> RResult<PolicyBox, RString>,
}

impl RootModule for PolicyModRef {
    declare_root_module_statics! {PolicyModRef}
    const BASE_NAME: &'static str = "gpu_agent_policy";
    const NAME: &'static str = "gpu_agent_policy";
    const VERSION_STRINGS: VersionStrings = package_version_strings!();
}

/// The Rust-side trait plugin authors implement; [`guard`] adapts it to [`Policy`].
pub trait PolicyImpl: Send + 'static {
    /// React to `event`. An `Err` (or a panic) is a policy fault.
    fn on_event(&mut self, view: &View<'_>, event: &Event) -> Result<Vec<Decision>, String>;
}

/// Wraps a [`PolicyImpl`] so that panics become errors at the boundary.
struct Guarded<P>(P);

impl<P: PolicyImpl> Policy for Guarded<P> {
    fn on_event(&mut self, view: &View<'_>, event: &EventNe) -> RResult<RVec<DecisionNe>, RString> {
        // An event kind newer than this plugin is not for it.
        let Ok(event) = event.as_enum() else {
            return ROk(RVec::new());
        };
        match catch_panic(|| self.0.on_event(view, event)) {
            Ok(decisions) => {
                let mut out = RVec::with_capacity(decisions.len());
                out.extend(decisions.into_iter().map(NonExhaustive::new));
                ROk(out)
            }
            Err(e) => RErr(e.into()),
        }
    }
}

/// Turns a [`PolicyImpl`] into a [`PolicyBox`] whose calls never unwind.
pub fn guard<P: PolicyImpl>(policy: P) -> PolicyBox {
    Policy_TO::from_value(Guarded(policy), abi_stable::sabi_trait::TD_Opaque)
}

/// Runs `f`, turning a panic into `Err("panicked: <message>")`.
pub fn catch_panic<T>(f: impl FnOnce() -> Result<T, String>) -> Result<T, String> {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(r) => r,
        Err(payload) => {
            let msg = payload
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| payload.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "non-string panic payload".to_string());
            Err(format!("panicked: {msg}"))
        }
    }
}

/// The value of `key` among the parameters a plugin was given (the last one wins).
pub fn param<'a>(params: &'a [Param], key: &str) -> Option<&'a str> {
    params
        .iter()
        .rev()
        .find(|p| p.key == key)
        .map(|p| p.value.as_str())
}

/// A plugin's parameter values, read through its table: each the value given
/// for its key (the last one), else the table's default, as the type the
/// table declares.
///
/// [`ParamReader::new`] checks every given value against the table, as the
/// agent's loader does before it builds a policy, so the readers cannot meet
/// a bad value. Reading a key the table does not declare, or as a type it
/// does not declare, panics (a plugin bug, which [`export_policy!`] and
/// [`guard`] turn into an error): a plugin reads only what it declares, as
/// declared.
#[derive(Debug, Clone, Copy)]
pub struct ParamReader<'a> {
    table: &'a [ParamInfo],
    given: &'a [Param],
}

impl<'a> ParamReader<'a> {
    /// Reads `given` through `table`; an unknown key or a bad value is an
    /// error naming the key ([`check_params`]).
    pub fn new(table: &'a [ParamInfo], given: &'a [Param]) -> Result<ParamReader<'a>, String> {
        check_params(
            table,
            given.iter().map(|p| (p.key.as_str(), p.value.as_str())),
        )?;
        Ok(ParamReader { table, given })
    }

    /// The value of `key` as written, after checking its kind is `kind`.
    fn value(&self, key: &str, kind: ParamType) -> &'a str {
        let info = self
            .table
            .iter()
            .find(|p| p.key.as_str() == key)
            .unwrap_or_else(|| panic!("{key}: not a declared parameter"));
        assert!(
            info.kind == kind,
            "{key}: declared {:?}, read as {kind:?}",
            info.kind
        );
        let value = param(self.given, key).unwrap_or(info.default.as_str());
        if let Err(e) = info.check(value) {
            panic!("the default of {e}");
        }
        value
    }

    /// A `true`/`false` parameter.
    pub fn bool(&self, key: &str) -> bool {
        self.value(key, ParamType::Bool) == "true"
    }

    /// An integer parameter, as `T` (whose range the table's must lie in).
    pub fn integer<T: TryFrom<i64>>(&self, key: &str) -> T {
        let value = self.value(key, ParamType::Integer);
        let n: i64 = value.parse().expect("checked as an integer");
        T::try_from(n).unwrap_or_else(|_| panic!("{key}: {n} is out of the plugin's range"))
    }

    /// A number parameter.
    pub fn number(&self, key: &str) -> f64 {
        self.number_or_word(key)
            .unwrap_or_else(|| panic!("{key}: a word where a number was read"))
    }

    /// A number parameter that also takes words ([`ParamInfo::or_words`]):
    /// `None` when its value is one of them.
    pub fn number_or_word(&self, key: &str) -> Option<f64> {
        self.value(key, ParamType::Number).parse().ok()
    }

    /// A free-text parameter.
    pub fn text(&self, key: &str) -> &'a str {
        self.value(key, ParamType::Text)
    }

    /// A choice parameter, as `parse` reads its word (it must read each of
    /// the table's words).
    pub fn choice<T>(&self, key: &str, parse: impl FnOnce(&str) -> Option<T>) -> T {
        let value = self.value(key, ParamType::Choice);
        parse(value).unwrap_or_else(|| panic!("{key}: the plugin does not read {value:?}"))
    }
}

/// Exports a policy plugin's root module.
///
/// `parameters` is the plugin's whole table of [`ParamInfo`]s, an array (or
/// a constant one) that the plugin also reads its values with
/// ([`ParamReader`]), so that every parameter it reads is declared.
///
/// ```ignore
/// gpu_agent_plugin_api::export_policy! {
///     name: "fifo",
///     description: "first come, first served on the earliest-free device",
///     parameters: [],
///     new: |params| Ok(Fifo::default()),
/// }
/// ```
/// The generated `pub fn policy_module() -> PolicyModRef` also serves in-process use.
#[macro_export]
macro_rules! export_policy {
    (
        name: $name:expr,
        description: $description:expr,
        parameters: $parameters:expr,
        new: $new:expr $(,)?
    ) => {
        /// This plugin's root module (also exported for the agent's loader).
        #[$crate::abi_stable::export_root_module]
        pub fn policy_module() -> $crate::PolicyModRef {
            use $crate::abi_stable::prefix_type::PrefixTypeTrait;
            const PARAMETERS: &[$crate::ParamInfo] = &$parameters;
            $crate::PolicyMod {
                abi_version: $crate::abi_stable::std_types::RStr::from_str($crate::ABI_VERSION),
                name: $crate::abi_stable::std_types::RStr::from_str($name),
                description: $crate::abi_stable::std_types::RStr::from_str($description),
                parameters: $crate::abi_stable::std_types::RSlice::from_slice(PARAMETERS),
                new: __gpu_agent_policy_new,
            }
            .leak_into_prefix()
        }

        #[$crate::abi_stable::sabi_extern_fn]
        fn __gpu_agent_policy_new(
            params: $crate::abi_stable::std_types::RSlice<'_, $crate::Param>,
        ) -> $crate::abi_stable::std_types::RResult<
            $crate::PolicyBox,
            $crate::abi_stable::std_types::RString,
        > {
            let new = $new;
            match $crate::catch_panic(|| new(params.as_slice())) {
                Ok(policy) => $crate::abi_stable::std_types::ROk($crate::guard(policy)),
                Err(e) => $crate::abi_stable::std_types::RErr(e.into()),
            }
        }
    };
}

#[cfg(test)]
mod tests {
    use super::*;

    fn device(index: u32, speed: f64, memory_gb: f64) -> Device<'static> {
        Device {
            index,
            model: RStr::from_str("T4"),
            memory_gb,
            speed,
            cost_per_hour: 0.0,
            online: true,
            running: ROption::RNone,
            queue: RSlice::from_slice(&[]),
            available_at: 0.0,
            clock_range: ClockRange::DEFAULT_ONLY,
            default_power: PowerModel {
                p0: 10.0,
                gamma: 12.0,
                c: 48.0,
            },
            mig: ROption::RNone,
        }
    }

    fn task(runtimes: Vec<f64>) -> Task {
        Task {
            key: 0,
            id: "t".into(),
            arrival: 0.0,
            workload: 10.0,
            mem_gb: 16.0,
            deadline: 100.0,
            weight: 1.0,
            gpus: 1,
            alt_gpus: RVec::new(),
            runtimes: runtimes.into(),
            app: AppModel::builtin_default(),
            state: TaskState::Pending,
        }
    }

    #[test]
    fn runtime_uses_speed_or_runtimes_column() {
        assert_eq!(task(vec![]).runtime_on(&device(1, 2.0, 40.0)), 5.0);
        assert_eq!(task(vec![7.0, 3.0]).runtime_on(&device(1, 2.0, 40.0)), 3.0);
        assert!(!task(vec![7.0, f64::INFINITY]).fits(&device(1, 2.0, 40.0)));
        assert!(!task(vec![]).fits(&device(0, 1.0, 15.0)));
        assert!(task(vec![]).fits(&device(0, 1.0, 16.0)));
    }

    #[test]
    fn a_mig_instance_runs_alone_never_in_a_gang() {
        let whole = device(0, 1.0, 40.0);
        let mig = Device {
            mig: ROption::RSome(MigInstance {
                parent: 0,
                profile: RStr::from_str("3g.20gb"),
                start: 4,
                compute_slices: 3,
            }),
            ..device(1, 3.0 / 7.0, 19.5)
        };
        let t = task(vec![]);
        assert!(t.fits_as(&mig, 1) && t.fits_as(&whole, 1));
        assert!(!t.fits_as(&mig, 2) && t.fits_as(&whole, 2));
        assert!(mig.takes_gang_of(1) && !mig.takes_gang_of(2) && whole.takes_gang_of(8));
    }

    #[test]
    fn alternative_counts_divide_the_work() {
        let mut t = task(vec![]);
        t.gpus = 2;
        t.alt_gpus = vec![1, 4].into();
        assert_eq!(t.gpu_counts().collect::<Vec<_>>(), [2, 1, 4]);
        assert_eq!(t.scaled(6.0, 2), 6.0);
        assert_eq!(t.scaled(6.0, 1), 12.0);
        assert_eq!(t.scaled(6.0, 4), 3.0);
    }

    #[test]
    fn time_factor_follows_the_dvfs_model() {
        let app = task(vec![]).app;
        assert_eq!(app.time_factor(Clocks::DEFAULT), 1.0);
        // delta 0.5, t0 0: halving the core clock → 0.5*2 + 0.5*1 = 1.5.
        assert_eq!(
            app.time_factor(Clocks {
                core: 0.5,
                mem: 1.0
            }),
            1.5
        );
    }

    #[test]
    fn parameters_are_checked_against_type_range_and_words() {
        const AUTO: &[RStr<'static>] = &[RStr::from_str("auto")];
        const DEALING: &[RStr<'static>] = &[RStr::from_str("rr"), RStr::from_str("edf")];
        let size = ParamInfo::integer("group_size", "1", "")
            .at_least(1.0)
            .at_most(3.0);
        assert_eq!(size.check("3"), Ok(()));
        assert_eq!(
            size.check("4"),
            Err("group_size: expected an integer from 1 to 3, got \"4\"".into())
        );
        assert!(size.check("2.0").is_err());
        let alpha = ParamInfo::number("alpha", "0.5", "")
            .above(0.0)
            .at_most(1.0);
        assert_eq!(alpha.check("1"), Ok(()));
        assert_eq!(
            alpha.check("0"),
            Err("alpha: expected a number in (0, 1], got \"0\"".into())
        );
        assert!(alpha.check("NaN").is_err());
        let t0 = ParamInfo::number("t0", "auto", "")
            .above(0.0)
            .or_words(AUTO);
        assert_eq!(t0.check("auto"), Ok(()));
        assert_eq!(t0.check("2.5"), Ok(()));
        assert_eq!(
            t0.check("-1"),
            Err("t0: expected auto or a number > 0, got \"-1\"".into())
        );
        let dealing = ParamInfo::choice("dealing", "edf", DEALING, "");
        assert_eq!(dealing.check("rr"), Ok(()));
        assert_eq!(
            dealing.check("fifo"),
            Err("dealing: expected one of rr, edf, got \"fifo\"".into())
        );
        assert_eq!(
            ParamInfo::bool("b", "false", "").check("yes"),
            Err("b: expected true or false, got \"yes\"".into())
        );
        let infos = [size, alpha];
        assert_eq!(check_params(&infos, [("alpha", "0.6")]), Ok(()));
        assert_eq!(
            check_params(&infos, [("beta", "1")]),
            Err("unknown parameter \"beta\" (it takes: group_size, alpha)".into())
        );
    }

    #[test]
    fn the_reader_gives_each_value_as_its_declared_type() {
        const AUTO: &[RStr<'static>] = &[RStr::from_str("auto")];
        const DEALING: &[RStr<'static>] = &[RStr::from_str("rr"), RStr::from_str("edf")];
        const TABLE: [ParamInfo; 6] = [
            ParamInfo::integer("window", "8", "").at_least(1.0),
            ParamInfo::number("alpha", "0.5", "").above(0.0).below(1.0),
            ParamInfo::number("t0", "auto", "")
                .above(0.0)
                .or_words(AUTO),
            ParamInfo::choice("dealing", "edf", DEALING, ""),
            ParamInfo::bool("repartition", "true", ""),
            ParamInfo::text("module", "", ""),
        ];
        let p = |key: &str, value: &str| Param {
            key: key.into(),
            value: value.into(),
        };
        let rr = |w: &str| Some(w == "rr");
        let defaults = ParamReader::new(&TABLE, &[]).unwrap();
        assert_eq!(defaults.integer::<usize>("window"), 8);
        assert_eq!(defaults.number("alpha"), 0.5);
        assert_eq!(defaults.number_or_word("t0"), None);
        assert!(!defaults.choice("dealing", rr));
        assert!(defaults.bool("repartition"));
        assert_eq!(defaults.text("module"), "");
        // The last value of a key wins.
        let values = [
            p("window", "2"),
            p("window", "3"),
            p("alpha", "0.9"),
            p("t0", "12.5"),
            p("dealing", "rr"),
            p("repartition", "false"),
            p("module", "policy.py"),
        ];
        let read = ParamReader::new(&TABLE, &values).unwrap();
        assert_eq!(read.integer::<u64>("window"), 3);
        assert_eq!(read.number("alpha"), 0.9);
        assert_eq!(read.number_or_word("t0"), Some(12.5));
        assert!(read.choice("dealing", rr));
        assert!(!read.bool("repartition"));
        assert_eq!(read.text("module"), "policy.py");
        // A bad value or key is refused at once, as the loader refuses it.
        assert_eq!(
            ParamReader::new(&TABLE, &[p("window", "0")]).unwrap_err(),
            "window: expected an integer >= 1, got \"0\""
        );
        assert_eq!(
            ParamReader::new(&TABLE, &[p("seed", "1")]).unwrap_err(),
            "unknown parameter \"seed\" (it takes: window, alpha, t0, dealing, repartition, module)"
        );
        // Reading what the table does not declare, or as another type, is the
        // plugin's bug.
        let undeclared = catch_panic(|| Ok(defaults.number("seed")));
        assert_eq!(
            undeclared,
            Err("panicked: seed: not a declared parameter".into())
        );
        let retyped = catch_panic(|| Ok(defaults.number("window")));
        assert_eq!(
            retyped,
            Err("panicked: window: declared Integer, read as Number".into())
        );
    }

    #[test]
    fn guard_turns_panics_into_errors() {
        struct Boom;
        impl PolicyImpl for Boom {
            fn on_event(&mut self, _: &View<'_>, _: &Event) -> Result<Vec<Decision>, String> {
                panic!("boom")
            }
        }
        let mut p = guard(Boom);
        let view = View {
            now: 0.0,
            held: RSlice::from_slice(&[]),
            pending: RSlice::from_slice(&[]),
            devices: RSlice::from_slice(&[]),
        };
        let r = p.on_event(&view, &NonExhaustive::new(Event::Timer));
        assert_eq!(r.into_result().unwrap_err().as_str(), "panicked: boom");
    }
}
