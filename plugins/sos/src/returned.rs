//! Tasks the core sent back: a placed task returns to the pending queue when
//! its device goes offline or the task running there overran, and either
//! reading of SOS then offers it again, as if it had just arrived.

use gpu_agent_plugin_api::{Decision, TaskKey, TaskState, View};

/// The tasks this policy assigned that have not finished: a flag per task
/// key (keys are dense, from 0), and how many are set.
#[derive(Debug, Default)]
pub struct Placed {
    flags: Vec<bool>,
    count: usize,
}

impl Placed {
    /// Notes the tasks `decisions` assign.
    pub fn note(&mut self, decisions: &[Decision]) {
        for d in decisions {
            if let Decision::Assign { task, .. } = d {
                let k = *task as usize;
                if k >= self.flags.len() {
                    self.flags.resize(k + 1, false);
                }
                self.count += usize::from(!std::mem::replace(&mut self.flags[k], true));
            }
        }
    }

    /// Forgets a task that finished (or was cancelled).
    pub fn finished(&mut self, key: TaskKey) {
        self.forget(key);
    }

    /// Clears `key`'s flag; whether it was set.
    fn forget(&mut self, key: TaskKey) -> bool {
        let was = self
            .flags
            .get_mut(key as usize)
            .is_some_and(|f| std::mem::replace(f, false));
        self.count -= usize::from(was);
        was
    }

    /// The placed tasks that are pending again, in arrival order; forgets
    /// them.
    pub fn returned(&mut self, view: &View<'_>) -> Vec<TaskKey> {
        if self.count == 0 {
            return Vec::new();
        }
        view.pending
            .iter()
            .copied()
            .filter(|&k| view.task(k).state == TaskState::Pending && self.forget(k))
            .collect()
    }
}
