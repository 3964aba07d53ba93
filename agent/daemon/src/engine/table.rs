//! The engine's task table: every task it knows, in submission order, by id
//! and by core key.
//!
//! Invariants, kept by construction (tasks come in only through
//! [`TaskTable::insert`] and [`TaskTable::admit`], and are never removed):
//! - tasks stay in insertion (= submission) order, and an id names the task
//!   inserted last under it (the store keeps ids unique);
//! - keys are handed out by `admit` only, densely from 0 in insertion order,
//!   which is the order the core numbers the tasks it is given; a task has a
//!   key for life or never has one;
//! - the unplaced keys are admitted keys, ascending, that [`TaskTable::take_placed`]
//!   has not yet seen leave the core's central queue.

use std::collections::HashMap;

use gpu_agent_dbus::TaskInfo;
use gpu_agent_plugin_api::{TaskKey, TaskState};

/// Every task the engine knows. See the module documentation.
#[derive(Default)]
pub(super) struct TaskTable {
    tasks: Vec<TaskInfo>,
    by_id: HashMap<String, usize>,
    /// Core key → index in `tasks`.
    by_key: Vec<usize>,
    /// Index in `tasks` → core key.
    keys: Vec<Option<TaskKey>>,
    /// Admitted keys the policy has not placed yet.
    unplaced: Vec<TaskKey>,
}

// `by_id` and `by_key` only hold indices of `tasks` (nothing is removed),
// so indexing `tasks` and `keys` with them cannot fail.
impl TaskTable {
    /// Adds a task the core never holds (one that ended before this run).
    pub(super) fn insert(&mut self, info: TaskInfo) {
        self.push(info, None);
    }

    /// Adds a task the core is given next; returns the key the core gives it.
    pub(super) fn admit(&mut self, info: TaskInfo) -> TaskKey {
        let key = self.by_key.len() as TaskKey;
        let idx = self.push(info, Some(key));
        self.by_key.push(idx);
        self.unplaced.push(key);
        key
    }

    fn push(&mut self, info: TaskInfo, key: Option<TaskKey>) -> usize {
        let idx = self.tasks.len();
        self.by_id.insert(info.id.clone(), idx);
        self.tasks.push(info);
        self.keys.push(key);
        idx
    }

    /// The task with id `id`, and its core key if the core holds it.
    pub(super) fn find(&self, id: &str) -> Option<(&TaskInfo, Option<TaskKey>)> {
        let &idx = self.by_id.get(id)?;
        Some((&self.tasks[idx], self.keys[idx]))
    }

    /// The task with id `id`, to change (its id stays as it is).
    pub(super) fn find_mut(&mut self, id: &str) -> Option<&mut TaskInfo> {
        let &idx = self.by_id.get(id)?;
        Some(&mut self.tasks[idx])
    }

    /// The task with core key `key`.
    pub(super) fn get(&self, key: TaskKey) -> Option<&TaskInfo> {
        let &idx = self.by_key.get(key as usize)?;
        Some(&self.tasks[idx])
    }

    /// The task with core key `key`, to change.
    pub(super) fn get_mut(&mut self, key: TaskKey) -> Option<&mut TaskInfo> {
        let &idx = self.by_key.get(key as usize)?;
        Some(&mut self.tasks[idx])
    }

    /// Every task in submission order, with its core key if it has one.
    pub(super) fn iter(&self) -> impl Iterator<Item = (&TaskInfo, Option<TaskKey>)> {
        self.tasks.iter().zip(self.keys.iter().copied())
    }

    /// Up to `limit` tasks that `pick` keeps, looking from position `from`
    /// in submission order; and the position after the last one looked at,
    /// 0 when no task is left past it.
    pub(super) fn page<T>(
        &self,
        from: usize,
        limit: usize,
        mut pick: impl FnMut(&TaskInfo, Option<TaskKey>) -> Option<T>,
    ) -> (Vec<T>, usize) {
        let mut picked = Vec::new();
        let mut at = from;
        while at < self.tasks.len() && picked.len() < limit {
            picked.extend(pick(&self.tasks[at], self.keys[at]));
            at += 1;
        }
        let next = if at < self.tasks.len() { at } else { 0 };
        (picked, next)
    }

    /// `key` waits for the policy again (a task queued again after its run
    /// was stopped): its next placement is reported.
    pub(super) fn unplace(&mut self, key: TaskKey) {
        if let Err(at) = self.unplaced.binary_search(&key) {
            self.unplaced.insert(at, key);
        }
    }

    /// The keys the policy placed in a local queue since the last call, in
    /// key order; `state` is a key's state in the core (`None`: the core no
    /// longer holds it). A task still pending is asked again next time; one
    /// that left the central queue any other way (started, rejected,
    /// cancelled) is forgotten.
    pub(super) fn take_placed(
        &mut self,
        state: impl Fn(TaskKey) -> Option<TaskState>,
    ) -> Vec<TaskKey> {
        let mut placed = Vec::new();
        self.unplaced.retain(|&key| match state(key) {
            Some(TaskState::Pending) => true,
            Some(TaskState::Queued) => {
                placed.push(key);
                false
            }
            _ => false,
        });
        placed
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use gpu_agent_dbus::{SubmitSpec, TaskStatus};

    fn task(id: &str) -> TaskInfo {
        TaskInfo {
            id: id.into(),
            state: TaskStatus::Queued,
            owner_uid: 0,
            devices: Vec::new(),
            submitted: 0.0,
            started: None,
            finished: None,
            exit_code: None,
            energy_j: None,
            reason: None,
            spec: SubmitSpec::new(1.0, 1.0, 1.0, 1.0),
            clocks: None,
        }
    }

    fn ids(table: &TaskTable) -> Vec<(String, Option<TaskKey>)> {
        table.iter().map(|(t, k)| (t.id.clone(), k)).collect()
    }

    #[test]
    fn keys_are_dense_in_admission_order_and_skip_inserted_tasks() {
        let mut table = TaskTable::default();
        table.insert(task("t1"));
        assert_eq!(table.admit(task("t2")), 0);
        table.insert(task("t3"));
        assert_eq!(table.admit(task("t4")), 1);
        assert_eq!(
            ids(&table),
            [
                ("t1".into(), None),
                ("t2".into(), Some(0)),
                ("t3".into(), None),
                ("t4".into(), Some(1)),
            ]
        );
        assert_eq!(table.get(1).unwrap().id, "t4");
        assert_eq!(
            table.find("t2").map(|(t, k)| (t.id.as_str(), k)),
            Some(("t2", Some(0)))
        );
        assert_eq!(table.find("t3").map(|(_, k)| k), Some(None));
        assert!(table.find("t5").is_none());
        assert!(table.get(2).is_none());
        table.get_mut(0).unwrap().state = TaskStatus::Running;
        assert_eq!(table.find("t2").unwrap().0.state, TaskStatus::Running);
    }

    #[test]
    fn pages_resume_where_the_last_one_stopped() {
        let mut table = TaskTable::default();
        for id in ["t1", "t2", "t3", "t4", "t5"] {
            table.admit(task(id));
        }
        let id = |t: &TaskInfo, _| Some(t.id.clone());
        assert_eq!(table.page(0, 2, id), (vec!["t1".into(), "t2".into()], 2));
        assert_eq!(table.page(2, 2, id), (vec!["t3".into(), "t4".into()], 4));
        // The last page says no task is left.
        assert_eq!(table.page(4, 2, id), (vec!["t5".into()], 0));
        assert_eq!(table.page(3, 2, id), (vec!["t4".into(), "t5".into()], 0));
        // Past the end: nothing, and nothing left.
        assert_eq!(table.page(9, 2, id), (Vec::<String>::new(), 0));
        // A filter looks on until the page is full: odd keys only.
        let odd = |t: &TaskInfo, k: Option<TaskKey>| k.filter(|k| k % 2 == 1).map(|_| t.id.clone());
        assert_eq!(table.page(0, 1, odd), (vec!["t2".into()], 2));
        assert_eq!(table.page(2, 1, odd), (vec!["t4".into()], 4));
        assert_eq!(table.page(4, 1, odd), (Vec::<String>::new(), 0));
    }

    #[test]
    fn placements_are_reported_once() {
        let mut table = TaskTable::default();
        for id in ["t1", "t2", "t3", "t4"] {
            table.admit(task(id));
        }
        let states = |s: [TaskState; 4]| move |k: TaskKey| Some(s[k as usize]);
        use TaskState::{Pending, Queued, Running};
        assert_eq!(
            table.take_placed(states([Queued, Pending, Running, Pending])),
            [0]
        );
        // t1 is not reported again; t3 left the queue by starting.
        assert_eq!(
            table.take_placed(states([Queued, Queued, Queued, Pending])),
            [1]
        );
        assert_eq!(
            table.take_placed(states([Queued, Queued, Queued, Queued])),
            [3]
        );
        assert!(table
            .take_placed(states([Queued, Queued, Queued, Queued]))
            .is_empty());
        // t2 ran, its GPU failed and it waits again: its next placement is
        // reported once more.
        table.unplace(1);
        table.unplace(1);
        assert!(table
            .take_placed(states([Queued, Pending, Queued, Queued]))
            .is_empty());
        assert_eq!(
            table.take_placed(states([Queued, Queued, Queued, Queued])),
            [1]
        );
    }
}
