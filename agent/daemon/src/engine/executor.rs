//! Carrying out the runs the core starts, through one trait: a task with a
//! command runs as a process ([`super::process::Processes`]), one without is
//! modelled ([`super::modelled::Modelled`]).
//!
//! The engine keeps the order: a run's start is stored before
//! [`Executor::start`], and its end is recorded in the same round as
//! [`Executor::release`]. An executor never calls back into the engine: a
//! process reports its end as [`super::Request::Exited`], a modelled run's end
//! is due at a time the engine asks for.

use std::sync::Arc;
use std::time::Duration;

use gpu_agent_backend::mock::MockProcess;
use gpu_agent_backend::ModelledLoad;
use gpu_agent_dbus::TaskInfo;
use gpu_agent_plugin_api::{AppModel, TaskKey};

use crate::layout::{self as targets, Targets};
use crate::store::Op;

/// What starting a run needs.
pub(super) struct Start<'a> {
    /// The task's core key.
    pub key: TaskKey,
    /// The task, stored running on its devices.
    pub task: &'a TaskInfo,
    /// Its DVFS profile.
    pub app: &'a AppModel,
    /// The run time the core expects, model seconds.
    pub runtime: f64,
}

/// What a cancellation did to a run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Cancelled {
    /// The run is over (or never began): the task ends now.
    Ended,
    /// The run was asked to end; its end is reported later.
    Signalled,
}

/// What a stop does to a run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum AtStop {
    /// It goes on after the daemon; the next start finds it.
    Keep,
    /// It ends with the daemon: this process group, if any, is ended once
    /// the stop is stored.
    End(Option<u32>),
}

/// Why a run did not start.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct NotStarted {
    /// Why, for people.
    pub reason: String,
    /// For want of file descriptors (`EMFILE`, `ENFILE`): the run may start
    /// once some are free, so its task waits again rather than fail.
    pub short_of_descriptors: bool,
}

impl NotStarted {
    /// A run that cannot start as it is.
    pub fn failed(reason: String) -> NotStarted {
        NotStarted {
            reason,
            short_of_descriptors: false,
        }
    }
}

/// An executor's handle on a run it started, kept in the task's record
/// (`table::Started`): the executors keep no table of their own.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) enum Handle {
    /// A process group, by its id ([`super::process::Processes`]).
    Process(u32),
    /// A modelled run ending at this model time
    /// ([`super::modelled::Modelled`]): an end due at another time is an
    /// earlier run's of the same task.
    Modelled(f64),
}

/// One way of running tasks. A run is started at most once and released
/// at most once; a run that never began (no [`Handle`]) is the engine's
/// alone: it ends at once when cancelled, with nothing to release, and a
/// stop ends it.
pub(super) trait Executor {
    /// Starts a run; its handle. `Err`: why it could not start (nothing
    /// runs, nothing is held). Changes to store right after this round go
    /// to `unsaved`.
    fn start(&mut self, start: Start<'_>, unsaved: &mut Vec<Op>) -> Result<Handle, NotStarted>;

    /// Asks run `handle` to end early, with `grace` between the polite
    /// and the forced end.
    fn cancel(&mut self, handle: Handle, grace: Duration) -> Cancelled;

    /// Run `handle` of `task` (key `key`) has ended: lets go of what it
    /// held. Changes to store go to `ops`.
    fn release(&mut self, key: TaskKey, handle: Handle, task: &TaskInfo, ops: &mut Vec<Op>);

    /// What a stop does to run `handle`; `keep`: `keep_tasks_on_stop`.
    fn at_stop(&self, handle: Handle, keep: bool) -> AtStop;
}

/// The load runs put on GPUs that model it (the mock), so that those draw the
/// power the task would; nothing on real GPUs. A run on a MIG instance is a
/// process in its compute instance on its GPU.
#[derive(Clone)]
pub(super) struct MockLoad(pub Option<Arc<dyn ModelledLoad>>, pub Targets);

impl MockLoad {
    /// Shows process `pid` of `task` on each of its devices.
    pub fn start(&self, pid: u32, task: &TaskInfo, app: &AppModel) {
        let Some(mock) = &self.0 else { return };
        for &d in &task.devices {
            let Some(target) = targets::get(&self.1, d) else {
                continue;
            };
            let process = MockProcess {
                pid,
                used_bytes: (task.spec.mem_gb * 1e9) as u64,
                app: app.clone(),
                mig: target.mig.map(|m| (m.gpu_instance, m.compute_instance)),
            };
            if let Err(e) = mock.start_process(target.gpu, process) {
                log::warn!("mock GPU {} (device {d}): {e}", target.gpu);
            }
        }
    }

    /// Takes process `pid` off `devices`.
    pub fn end(&self, pid: u32, devices: &[u32]) {
        let Some(mock) = &self.0 else { return };
        for &d in devices {
            let Some(target) = targets::get(&self.1, d) else {
                continue;
            };
            if let Err(e) = mock.end_process(target.gpu, pid) {
                log::warn!("mock GPU {} (device {d}): {e}", target.gpu);
            }
        }
    }
}
