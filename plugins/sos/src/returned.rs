//! Tasks the core sent back: a placed task returns to the pending queue when
//! its device goes offline or the task running there overran, and either
//! reading of SOS then offers it again, as if it had just arrived.

use std::collections::HashSet;

use gpu_agent_plugin_api::{Decision, TaskKey, TaskState, View};

/// The tasks this policy assigned that have not finished.
#[derive(Debug, Default)]
pub struct Placed(HashSet<TaskKey>);

impl Placed {
    /// Notes the tasks `decisions` assign.
    pub fn note(&mut self, decisions: &[Decision]) {
        for d in decisions {
            if let Decision::Assign { task, .. } = d {
                self.0.insert(*task);
            }
        }
    }

    /// Forgets a task that finished (or was cancelled).
    pub fn finished(&mut self, key: TaskKey) {
        self.0.remove(&key);
    }

    /// The placed tasks that are pending again, in arrival order; forgets
    /// them.
    pub fn returned(&mut self, view: &View<'_>) -> Vec<TaskKey> {
        if self.0.is_empty() {
            return Vec::new();
        }
        view.pending
            .iter()
            .copied()
            .filter(|k| view.task(*k).state == TaskState::Pending && self.0.remove(k))
            .collect()
    }
}
