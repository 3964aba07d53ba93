//! Modelled runs: a task without a command runs for the time the core
//! expects, as a simulated process on the mock GPUs.

use std::collections::HashSet;
use std::time::Duration;

use gpu_agent_dbus::TaskInfo;
use gpu_agent_plugin_api::TaskKey;

use super::executor::{AtStop, Cancelled, Executor, MockLoad, NotStarted, Start};
use super::Timebase;
use crate::store::Op;
use gpu_agent_core::agenda::Agenda;

/// The pid the mock GPUs show for a modelled run: above Linux's pid range
/// (2^22); unique among the tasks a device could hold at once.
fn simulated_pid(key: TaskKey) -> u32 {
    (1 << 24) | (key & 0xff_ffff) as u32
}

/// The modelled runs going on, and when each ends.
pub(super) struct Modelled {
    time: Timebase,
    gpus: MockLoad,
    /// Started and not yet released.
    live: HashSet<TaskKey>,
    /// Modelled ends, earliest first; released runs' ends are skipped.
    ends: Agenda<TaskKey>,
}

impl Modelled {
    /// No runs yet, on `time`'s clock.
    pub(super) fn new(time: Timebase, gpus: MockLoad) -> Modelled {
        Modelled {
            time,
            gpus,
            live: HashSet::new(),
            ends: Agenda::new(),
        }
    }

    /// When the next live run ends, model time.
    pub(super) fn next_end(&mut self) -> Option<f64> {
        while let Some((at, key)) = self.ends.peek() {
            if self.live.contains(key) {
                return Some(at);
            }
            self.ends.pop();
        }
        None
    }

    /// The live runs whose end is due by `now`, earliest first (they stay
    /// live until released).
    pub(super) fn due(&mut self, now: f64) -> Vec<TaskKey> {
        let mut due = Vec::new();
        while let Some((_, key)) = self.ends.pop_due(now) {
            if self.live.contains(&key) {
                due.push(key);
            }
        }
        due
    }
}

impl Executor for Modelled {
    fn start(&mut self, start: Start<'_>, _unsaved: &mut Vec<Op>) -> Result<(), NotStarted> {
        self.ends
            .push(self.time.model_now() + start.runtime, start.key);
        self.live.insert(start.key);
        self.gpus
            .start(simulated_pid(start.key), start.task, start.app);
        Ok(())
    }

    fn cancel(&mut self, _key: TaskKey, _grace: Duration) -> Cancelled {
        Cancelled::Ended
    }

    fn release(&mut self, key: TaskKey, task: &TaskInfo, _ops: &mut Vec<Op>) {
        if self.live.remove(&key) {
            self.gpus.end(simulated_pid(key), &task.devices);
        }
    }

    fn at_stop(&self, _key: TaskKey, _keep: bool) -> AtStop {
        AtStop::End(None)
    }
}
