//! The tasks the core holds, by key: every task that has not ended, and the
//! ended ones until the next compaction, so that the core's memory follows
//! the live tasks rather than every task it ever saw.
//!
//! Keys are handed out densely from 0 in submission order and never reused,
//! and entries stay in key order. A key is found through a dense index, one
//! entry number per key from the first held one (policies find theirs in the
//! view with [`gpu_agent_plugin_api::View::get`]: at its offset from the
//! first entry while nothing before it has been dropped, by binary search
//! otherwise). A task that ends stays readable (by the policy that hears of it and
//! by the driver carrying out the actions of the same call) until
//! [`Table::compact`] runs at the start of a later call; compacting only once
//! the ended entries are as many as the live ones keeps its cost O(1) per
//! task, amortised.

use gpu_agent_plugin_api::{task_index, DvfsClass, Task, TaskKey, TaskState};

use super::Placement;

/// What the core keeps of a task besides what the policies see.
#[derive(Debug, Default)]
pub(super) struct Rest {
    /// Where it is queued or running.
    pub placement: Option<Placement>,
    /// How its policy said it chose its clocks ([`gpu_agent_plugin_api::Decision::Dvfs`]).
    pub dvfs: Option<(DvfsClass, bool)>,
}

/// Fewest ended entries worth a compaction.
const COMPACT_AT_LEAST: usize = 64;

/// The core's tasks. See the module documentation.
#[derive(Debug, Default)]
pub(super) struct Table {
    /// In key order (what [`gpu_agent_plugin_api::View::held`] shows).
    tasks: Vec<Task>,
    /// Beside `tasks`, entry for entry.
    rest: Vec<Rest>,
    /// The entry of each key from `base` to `next_key` ([`NOT_HELD`] for a
    /// dropped one): keys are dense, so a key is found with one read however
    /// many entries before it were dropped.
    at: Vec<u32>,
    /// The key `at[0]` is for.
    base: TaskKey,
    /// The key the next task gets.
    next_key: TaskKey,
}

/// `Table::at` of a key whose entry was dropped.
const NOT_HELD: u32 = u32::MAX;

impl Table {
    /// The key [`Table::push`] gives the next task.
    pub fn next_key(&self) -> TaskKey {
        self.next_key
    }

    /// Adds `task`, whose key must be [`Table::next_key`].
    pub fn push(&mut self, task: Task) {
        debug_assert_eq!(task.key, self.next_key, "keys are handed out in order");
        self.next_key += 1;
        self.at.push(self.tasks.len() as u32);
        self.tasks.push(task);
        self.rest.push(Rest::default());
    }

    /// Goes on with a copy of the entries, leaking the originals (which a
    /// view lent to a call still running shows: `Core::retire_lent`).
    pub fn retire_lent(&mut self) {
        let copy = self.tasks.clone();
        std::mem::forget(std::mem::replace(&mut self.tasks, copy));
    }

    /// Every entry, in key order.
    pub fn as_slice(&self) -> &[Task] {
        &self.tasks
    }

    fn index(&self, key: TaskKey) -> Option<usize> {
        let at = *self.at.get(key.checked_sub(self.base)? as usize)?;
        let i = (at != NOT_HELD).then_some(at as usize);
        debug_assert_eq!(i, task_index(&self.tasks, key), "key {key} misplaced");
        i
    }

    /// The task with `key`, if the table still holds it.
    pub fn get(&self, key: TaskKey) -> Option<&Task> {
        self.index(key).map(|i| &self.tasks[i])
    }

    /// The task with `key`.
    ///
    /// # Panics
    /// When the table does not hold it (the core only asks for tasks it
    /// holds: live ones, and those that ended in the current call).
    pub fn task(&self, key: TaskKey) -> &Task {
        self.get(key)
            .unwrap_or_else(|| panic!("task key {key} is not held"))
    }

    /// Sets the state of the task with `key` (see [`Table::task`]).
    pub fn set_state(&mut self, key: TaskKey, state: TaskState) {
        let i = self.held(key);
        self.tasks[i].state = state;
    }

    /// The rest of the task with `key`, if the table still holds it.
    pub fn rest(&self, key: TaskKey) -> Option<&Rest> {
        self.index(key).map(|i| &self.rest[i])
    }

    /// The rest of the task with `key`, to change (see [`Table::task`]).
    pub fn rest_mut(&mut self, key: TaskKey) -> &mut Rest {
        let i = self.held(key);
        &mut self.rest[i]
    }

    /// The placement of a queued or running task.
    ///
    /// # Panics
    /// When the task is not held or has no placement.
    pub fn placement(&self, key: TaskKey) -> &Placement {
        self.rest(key)
            .and_then(|r| r.placement.as_ref())
            .unwrap_or_else(|| panic!("task key {key} has no placement"))
    }

    fn held(&self, key: TaskKey) -> usize {
        self.index(key)
            .unwrap_or_else(|| panic!("task key {key} is not held"))
    }

    /// Drops the ended entries (done or rejected) once they are at least as
    /// many as `live` (the tasks not ended) and at least a few.
    pub fn compact(&mut self, live: usize) {
        let ended = self.tasks.len() - live;
        if ended < COMPACT_AT_LEAST || ended < live {
            return;
        }
        let ended = |t: &Task| matches!(t.state, TaskState::Done | TaskState::Rejected);
        for t in self.tasks.iter().filter(|t| ended(t)) {
            self.at[(t.key - self.base) as usize] = NOT_HELD;
        }
        let mut keep = self.tasks.iter().map(|t| !ended(t));
        self.rest.retain(|_| keep.next().unwrap_or(false));
        self.tasks.retain(|t| !ended(t));
        debug_assert_eq!(self.tasks.len(), live, "live tasks miscounted");
        for (i, t) in self.tasks.iter().enumerate() {
            self.at[(t.key - self.base) as usize] = i as u32;
        }
        // Keys below the first held one are never asked for again.
        let base = self.tasks.first().map_or(self.next_key, |t| t.key);
        self.at.drain(..(base - self.base) as usize);
        self.base = base;
        // After a backlog has drained, its room goes too.
        if self.tasks.capacity() > 4 * live.max(COMPACT_AT_LEAST) {
            self.tasks.shrink_to(2 * live);
            self.rest.shrink_to(2 * live);
        }
        if self.at.capacity() > 4 * self.at.len().max(COMPACT_AT_LEAST) {
            self.at.shrink_to(2 * self.at.len());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use gpu_agent_plugin_api::abi_stable::std_types::{RString, RVec};
    use gpu_agent_plugin_api::AppModel;

    fn task(key: TaskKey) -> Task {
        Task {
            key,
            id: RString::from(format!("t{key}")),
            arrival: 0.0,
            workload: 1.0,
            mem_gb: 1.0,
            deadline: 1.0,
            weight: 1.0,
            gpus: 1,
            alt_gpus: RVec::new(),
            runtimes: RVec::new(),
            app: AppModel::builtin_default(),
            state: TaskState::Pending,
        }
    }

    fn table(n: TaskKey) -> Table {
        let mut table = Table::default();
        for key in 0..n {
            assert_eq!(table.next_key(), key);
            table.push(task(key));
        }
        table
    }

    /// One task that stays live while thousands after it end: every key is
    /// still found (the index keeps its place), and the index does not
    /// outgrow the keys since that task.
    #[test]
    fn a_long_lived_task_keeps_its_key_while_later_ones_come_and_go() {
        let mut t = table(1);
        for key in 1..5000 {
            t.push(task(key));
            t.set_state(key, TaskState::Done);
            t.compact(1);
            assert_eq!(t.task(0).key, 0);
            for k in key.saturating_sub(70)..=key + 1 {
                let held = t.as_slice().iter().any(|t| t.key == k);
                assert_eq!(t.get(k).map(|t| t.key), held.then_some(k), "key {k}");
            }
            // Compactions keep the table small; the index spans the keys
            // since the live one.
            assert!(t.as_slice().len() <= 2 * COMPACT_AT_LEAST);
            assert_eq!(t.at.len(), key as usize + 1);
        }
        // The long-lived one ends with enough others to compact: the index
        // starts at the one live key left.
        t.set_state(0, TaskState::Done);
        for key in 5000..5100 {
            t.push(task(key));
            t.set_state(key, TaskState::Done);
        }
        t.push(task(5100));
        t.compact(1);
        assert_eq!(t.as_slice().len(), 1);
        assert_eq!(t.task(5100).key, 5100);
        assert!(t.get(0).is_none() && t.get(5099).is_none() && t.get(5101).is_none());
        assert_eq!((t.base, t.at.len()), (5100, 1));
    }

    #[test]
    fn keys_are_found_before_and_after_compaction() {
        let mut t = table(200);
        // Every third task ends; the rest stay live.
        for key in (0..200).step_by(3) {
            t.set_state(key, TaskState::Done);
        }
        t.rest_mut(1).dvfs = Some((DvfsClass::EnergyPrior, true));
        let live = 200 - 67;
        // Fewer ended than live: nothing dropped, every key still found.
        t.compact(live);
        assert_eq!(t.as_slice().len(), 200);
        assert_eq!(t.task(3).state, TaskState::Done);
        // A dozen more end: 79 ended of 200, still fewer than the 121 live.
        for key in (1..36).step_by(3) {
            t.set_state(key, TaskState::Rejected);
        }
        t.compact(200 - 79);
        assert_eq!(t.as_slice().len(), 200);
        // Half end: dropped, and the live keep their rest.
        for key in (2..66).step_by(3) {
            t.set_state(key, TaskState::Done);
        }
        let live = 200 - 79 - 22;
        t.compact(live);
        assert_eq!(t.as_slice().len(), live);
        for key in 0..200 {
            let ended = key % 3 == 0 || (key % 3 == 1 && key < 36) || (key % 3 == 2 && key < 66);
            assert_eq!(t.get(key).is_none(), ended, "key {key}");
            if let Some(task) = t.get(key) {
                assert_eq!(task.key, key);
                assert_eq!(task.id.as_str(), format!("t{key}"));
            }
        }
        assert_eq!(t.rest(37).unwrap().dvfs, None);
        assert!(t.get(200).is_none());
        // New keys go on after the dropped ones.
        assert_eq!(t.next_key(), 200);
        t.push(task(200));
        assert_eq!(t.task(200).key, 200);
    }

    #[test]
    fn a_live_task_keeps_its_rest_through_compaction() {
        let mut t = table(100);
        t.rest_mut(99).dvfs = Some((DvfsClass::DeadlinePrior, false));
        for key in 0..99 {
            t.set_state(key, TaskState::Done);
        }
        t.compact(1);
        assert_eq!(t.as_slice().len(), 1);
        // The room of the dropped ones went with them.
        assert!(t.tasks.capacity() <= 4 * COMPACT_AT_LEAST);
        assert_eq!(
            t.rest(99).unwrap().dvfs,
            Some((DvfsClass::DeadlinePrior, false))
        );
    }
}
