//! The engine's task table: the tasks that have not ended, by id and by
//! core key. Ended tasks live in the store only ([`TaskTable::retire`]
//! drops them once their last record is written), so the table's size, like
//! the core's, follows the live tasks, not every task ever submitted.
//!
//! Invariants, kept by construction (tasks come in only through
//! [`TaskTable::insert`] and [`TaskTable::admit`], and leave only through
//! [`TaskTable::retire`]):
//! - an id names one task (the store issues ids and never reuses them);
//! - keys are handed out by `admit` only, densely from 0 in admission order,
//!   which is the order the core numbers the tasks it is given; a task has a
//!   key for life or never has one.

use std::collections::HashMap;

use gpu_agent_dbus::TaskInfo;
use gpu_agent_plugin_api::TaskKey;

/// A task the engine holds, and its core key if the core holds it too.
struct Held {
    info: TaskInfo,
    key: Option<TaskKey>,
}

/// The tasks that have not ended. See the module documentation.
#[derive(Default)]
pub(super) struct TaskTable {
    /// Boxed: a map keeps its values in its slots, and up to half of its
    /// slots are empty after it grows; a task is about 500 bytes.
    by_id: HashMap<String, Box<Held>>,
    /// Core key → id.
    by_key: HashMap<TaskKey, String>,
    /// The key [`TaskTable::admit`] hands out next.
    next_key: TaskKey,
    /// The most tasks held since the table last gave back its room.
    peak: usize,
}

/// Fewest tasks held at a peak worth giving room back for.
const SHRINK_FROM: usize = 1024;

impl TaskTable {
    /// Adds a task the core never holds (adopted, or taken while stopping);
    /// one that has ended already is not kept (it is in the store).
    pub(super) fn insert(&mut self, info: TaskInfo) {
        if !info.state.is_terminal() {
            self.by_id
                .insert(info.id.clone(), Box::new(Held { info, key: None }));
        }
    }

    /// Gives back the room of a backlog that has drained: once the tasks
    /// held are a quarter of their peak or fewer (a peak of at least a
    /// thousand), the maps shrink to fit them; returns whether they did (the
    /// caller may then hand the freed memory back to the system).
    pub(super) fn shrink(&mut self) -> bool {
        let held = self.by_id.len();
        self.peak = self.peak.max(held);
        if self.peak < SHRINK_FROM || held * 4 > self.peak {
            return false;
        }
        self.by_id.shrink_to_fit();
        self.by_key.shrink_to_fit();
        self.peak = held;
        true
    }

    /// Adds a task the core is given next; returns the key the core gives it.
    pub(super) fn admit(&mut self, info: TaskInfo) -> TaskKey {
        let key = self.next_key;
        self.next_key += 1;
        self.by_key.insert(key, info.id.clone());
        self.by_id.insert(
            info.id.clone(),
            Box::new(Held {
                info,
                key: Some(key),
            }),
        );
        key
    }

    /// Drops task `id` if it has ended (its last record is written), and
    /// returns it.
    pub(super) fn retire(&mut self, id: &str) -> Option<TaskInfo> {
        if !self.by_id.get(id)?.info.state.is_terminal() {
            return None;
        }
        let held = self.by_id.remove(id)?;
        if let Some(key) = held.key {
            self.by_key.remove(&key);
        }
        Some(held.info)
    }

    /// The task with id `id`, and its core key if the core holds it.
    pub(super) fn find(&self, id: &str) -> Option<(&TaskInfo, Option<TaskKey>)> {
        self.by_id.get(id).map(|held| (&held.info, held.key))
    }

    /// The task with id `id`, to change (its id stays as it is).
    pub(super) fn find_mut(&mut self, id: &str) -> Option<&mut TaskInfo> {
        self.by_id.get_mut(id).map(|held| &mut held.info)
    }

    /// The task with core key `key`.
    pub(super) fn get(&self, key: TaskKey) -> Option<&TaskInfo> {
        self.find(self.by_key.get(&key)?).map(|(info, _)| info)
    }

    /// The task with core key `key`, to change.
    pub(super) fn get_mut(&mut self, key: TaskKey) -> Option<&mut TaskInfo> {
        let id = self.by_key.get(&key)?;
        self.by_id.get_mut(id).map(|held| &mut held.info)
    }

    /// Every task held, in no particular order, with its core key if it has one.
    pub(super) fn iter(&self) -> impl Iterator<Item = (&TaskInfo, Option<TaskKey>)> {
        self.by_id.values().map(|held| (&held.info, held.key))
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
            waiting: None,
        }
    }

    #[test]
    fn keys_are_dense_in_admission_order_and_skip_inserted_tasks() {
        let mut table = TaskTable::default();
        table.insert(task("t1"));
        assert_eq!(table.admit(task("t2")), 0);
        table.insert(task("t3"));
        assert_eq!(table.admit(task("t4")), 1);
        let mut ids: Vec<(String, Option<TaskKey>)> =
            table.iter().map(|(t, k)| (t.id.clone(), k)).collect();
        ids.sort();
        assert_eq!(
            ids,
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
    fn ended_tasks_are_retired_and_not_kept() {
        let mut table = TaskTable::default();
        let (k1, k2) = (table.admit(task("t1")), table.admit(task("t2")));
        // Not ended: retiring keeps it.
        assert!(table.retire("t1").is_none());
        assert_eq!(table.iter().count(), 2);
        table.get_mut(k1).unwrap().state = TaskStatus::Succeeded;
        assert_eq!(table.retire("t1").unwrap().state, TaskStatus::Succeeded);
        assert!(table.find("t1").is_none() && table.get(k1).is_none());
        assert_eq!(table.get(k2).unwrap().id, "t2");
        // A task that ended before it came in is not kept at all.
        table.insert(TaskInfo {
            state: TaskStatus::Failed,
            ..task("t3")
        });
        assert_eq!(table.iter().count(), 1);
        // Keys go on from where they were.
        assert_eq!(table.admit(task("t4")), 2);
    }

    #[test]
    fn a_drained_backlog_gives_its_room_back() {
        let mut table = TaskTable::default();
        let ids: Vec<String> = (1..=2000).map(|i| format!("t{i}")).collect();
        for id in &ids {
            table.admit(task(id));
        }
        assert!(!table.shrink());
        let end = |table: &mut TaskTable, id: &str| {
            table.find_mut(id).unwrap().state = TaskStatus::Succeeded;
            table.retire(id);
        };
        // Half gone: not yet.
        for id in &ids[..1000] {
            end(&mut table, id);
        }
        assert!(!table.shrink());
        // Three quarters gone: the maps shrink, once.
        for id in &ids[1000..1500] {
            end(&mut table, id);
        }
        let room = table.by_id.capacity();
        assert!(table.shrink());
        assert!(table.by_id.capacity() < room / 2);
        assert!(!table.shrink());
        assert_eq!(table.find("t2000").unwrap().0.id, "t2000");
    }
}
