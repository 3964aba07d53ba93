//! Modelled runs: a task without a command runs for the time the core
//! expects, as a simulated process on the mock GPUs.

use std::time::Duration;

use gpu_agent_dbus::TaskInfo;
use gpu_agent_plugin_api::TaskKey;

use super::executor::{AtStop, Cancelled, Executor, Handle, MockLoad, NotStarted, Start};
use super::Timebase;
use crate::store::Op;
use gpu_agent_core::agenda::Agenda;

/// The pid the mock GPUs show for a modelled run: above Linux's pid range
/// (2^22); unique among the tasks a device could hold at once.
fn simulated_pid(key: TaskKey) -> u32 {
    (1 << 24) | (key & 0xff_ffff) as u32
}

/// When the modelled runs end (which runs go on is the engine's table's:
/// a run's [`Handle::Modelled`] holds its end).
pub(super) struct Modelled {
    time: Timebase,
    gpus: MockLoad,
    /// Modelled ends, earliest first, of runs going on or released since.
    ends: Agenda<TaskKey>,
}

impl Modelled {
    /// No runs yet, on `time`'s clock.
    pub(super) fn new(time: Timebase, gpus: MockLoad) -> Modelled {
        Modelled {
            time,
            gpus,
            ends: Agenda::new(),
        }
    }

    /// When the next run ends, model time (a released run's end only wakes
    /// the engine to find it has nothing to do).
    pub(super) fn next_end(&self) -> Option<f64> {
        self.ends.peek().map(|(at, _)| at)
    }

    /// The ends due by `now`, earliest first, as each run's task and
    /// [`Handle`]: the engine ends the runs whose handle it still holds.
    pub(super) fn due(&mut self, now: f64) -> Vec<(TaskKey, Handle)> {
        let mut due = Vec::new();
        while let Some((at, key)) = self.ends.pop_due(now) {
            due.push((key, Handle::Modelled(at)));
        }
        due
    }
}

impl Executor for Modelled {
    fn start(&mut self, start: Start<'_>, _unsaved: &mut Vec<Op>) -> Result<Handle, NotStarted> {
        let end = self.time.model_now() + start.runtime;
        self.ends.push(end, start.key);
        self.gpus
            .start(simulated_pid(start.key), start.task, start.app);
        Ok(Handle::Modelled(end))
    }

    fn cancel(&mut self, _handle: Handle, _grace: Duration) -> Cancelled {
        Cancelled::Ended
    }

    fn release(&mut self, key: TaskKey, _handle: Handle, task: &TaskInfo, _ops: &mut Vec<Op>) {
        self.gpus.end(simulated_pid(key), &task.devices);
    }

    fn at_stop(&self, _handle: Handle, _keep: bool) -> AtStop {
        AtStop::End(None)
    }
}
