//! The engine's task table: one record per task that has not ended, with
//! everything the engine holds of it (ARCHITECTURE.md, invariant 23): the
//! task as stored, its core key, and while it runs on its devices its
//! [`Run`] (the energy and clocks to settle at its end, and for a run the
//! core started, its executor's handle and how its run stands). Ended tasks
//! live in the store only ([`TaskTable::retire`] drops them once their last
//! record is written), so the table's size, like the core's, follows the
//! live tasks, not every task ever submitted.
//!
//! The core keeps its own table of the same tasks (queues, placements,
//! states): that is the scheduling state, the same in the simulator,
//! sans-IO and lent to policies; this one is the execution side, which only
//! the daemon has. The engine reads the core's (a placed task shows
//! `assigned`, `Engine::view`) and keeps no copy of it.
//!
//! Invariants, kept by construction (tasks come in only through
//! [`TaskTable::insert`], [`TaskTable::admit`] and [`TaskTable::adopt`], and
//! leave only through [`TaskTable::retire`], with everything they hold):
//! - an id names one task (the store issues ids and never reuses them);
//! - keys are handed out by `admit` only, densely from 0 in admission order,
//!   which is the order the core numbers the tasks it is given; a task has a
//!   key for life or never has one;
//! - a run belongs to a held task: one the core started to a task with a
//!   key ([`TaskTable::start`]), an adoption to one without
//!   ([`TaskTable::adopt`]); the index of the tasks with a run is the
//!   table's own, so no run outlives its task or is missing from it.

use std::collections::{HashMap, HashSet};

use gpu_agent_dbus::TaskInfo;
use gpu_agent_plugin_api::TaskKey;

use super::executor::Handle;

/// What the engine holds of one task.
struct Record {
    /// The task as it is stored and shown.
    info: TaskInfo,
    /// Its core key, if the core holds it.
    key: Option<TaskKey>,
    /// What it holds on its devices while it runs there.
    run: Option<Run>,
}

/// What a task holds on its devices while it runs there.
enum Run {
    /// A run the core started, carried out by an executor.
    Started(Started),
    /// An adopted job (`adopt.rs`): it runs without the agent, which only
    /// holds its devices.
    Adopted(Holding),
}

/// What a run holds on its devices, settled at its end
/// (`Engine::free_devices`).
#[derive(Debug, Clone, Default, PartialEq)]
pub(super) struct Holding {
    /// Each device's energy counter when the run began there, mJ.
    pub energy_at_start: Vec<Option<u64>>,
    /// Whether the daemon locked its clocks.
    pub clocks_set: bool,
}

/// Which executor runs a task.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum How {
    /// Its command, as a process.
    Process,
    /// No command: a modelled run.
    Modelled,
}

/// A run the core started.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct Started {
    /// Which executor runs it.
    pub how: How,
    /// What it holds on its devices.
    pub holding: Holding,
    /// The executor's handle on the run once it began (`Engine::launch`):
    /// none while its clocks are being locked, or if it never began.
    pub handle: Option<Handle>,
    /// While its clocks are being locked: how many of its GPUs are yet to
    /// report (`Request::ClocksLocked`), and the run time to launch it with.
    pub awaiting_locks: Option<(usize, f64)>,
    /// Whether it was cancelled.
    pub cancelled: bool,
    /// Why it was stopped, if a device of it went offline.
    pub interrupted: Option<String>,
    /// Whether it ran past its expected end (said once in the log; the
    /// core checks it again and again, each time twice as far out).
    pub overran: bool,
}

/// The tasks that have not ended. See the module documentation.
#[derive(Default)]
pub(super) struct TaskTable {
    /// The records. Boxed: a map keeps its values in its slots, and up to
    /// half of its slots are empty after it grows; a task is about 500 bytes.
    by_id: HashMap<String, Box<Record>>,
    /// Core key → id.
    by_key: HashMap<TaskKey, String>,
    /// The ids of the tasks with a run: what runs or is adopted, found
    /// without a walk over the waiting tasks.
    on_devices: HashSet<String>,
    /// The key [`TaskTable::admit`] hands out next.
    next_key: TaskKey,
    /// The most tasks held since the table last gave back its room.
    peak: usize,
}

/// Fewest tasks held at a peak worth giving room back for.
const SHRINK_FROM: usize = 1024;

impl TaskTable {
    /// Adds a task the core does not hold (one taken while a stop is under
    /// way waits for the next start); one that has ended already is not
    /// kept (it is in the store).
    pub(super) fn insert(&mut self, info: TaskInfo) {
        if !info.state.is_terminal() {
            let record = Record {
                info,
                key: None,
                run: None,
            };
            self.by_id.insert(record.info.id.clone(), Box::new(record));
        }
    }

    /// Adds a running adopted task, which holds `holding` on its devices.
    pub(super) fn adopt(&mut self, info: TaskInfo, holding: Holding) {
        self.on_devices.insert(info.id.clone());
        let record = Record {
            info,
            key: None,
            run: Some(Run::Adopted(holding)),
        };
        self.by_id.insert(record.info.id.clone(), Box::new(record));
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
        self.on_devices.shrink_to_fit();
        self.peak = held;
        true
    }

    /// Adds a task the core is given next; returns the key the core gives it.
    pub(super) fn admit(&mut self, info: TaskInfo) -> TaskKey {
        let key = self.next_key;
        self.next_key += 1;
        self.by_key.insert(key, info.id.clone());
        let record = Record {
            info,
            key: Some(key),
            run: None,
        };
        self.by_id.insert(record.info.id.clone(), Box::new(record));
        key
    }

    /// Drops task `id` if it has ended (its last record is written), with
    /// everything held of it, and returns it.
    pub(super) fn retire(&mut self, id: &str) -> Option<TaskInfo> {
        if !self.by_id.get(id)?.info.state.is_terminal() {
            return None;
        }
        let record = self.by_id.remove(id)?;
        if let Some(key) = record.key {
            self.by_key.remove(&key);
        }
        self.on_devices.remove(id);
        Some(record.info)
    }

    /// The task with id `id`, and its core key if the core holds it.
    pub(super) fn find(&self, id: &str) -> Option<(&TaskInfo, Option<TaskKey>)> {
        self.by_id.get(id).map(|r| (&r.info, r.key))
    }

    /// The task with id `id`, to change (its id stays as it is).
    pub(super) fn find_mut(&mut self, id: &str) -> Option<&mut TaskInfo> {
        self.by_id.get_mut(id).map(|r| &mut r.info)
    }

    /// The task with core key `key`.
    pub(super) fn get(&self, key: TaskKey) -> Option<&TaskInfo> {
        self.record(key).map(|r| &r.info)
    }

    /// The task with core key `key`, to change.
    pub(super) fn get_mut(&mut self, key: TaskKey) -> Option<&mut TaskInfo> {
        self.record_mut(key).map(|r| &mut r.info)
    }

    /// Every task held, in no particular order, with its core key if it has one.
    pub(super) fn iter(&self) -> impl Iterator<Item = (&TaskInfo, Option<TaskKey>)> {
        self.by_id.values().map(|r| (&r.info, r.key))
    }

    /// Gives task `key` the run the core started; `false` (nothing changed)
    /// when no task has that key.
    pub(super) fn start(&mut self, key: TaskKey, started: Started) -> bool {
        let Some(record) = self.record_mut(key) else {
            return false;
        };
        record.run = Some(Run::Started(started));
        let id = record.info.id.clone();
        self.on_devices.insert(id);
        true
    }

    /// The run the core started of task `key`, if it runs.
    pub(super) fn started(&self, key: TaskKey) -> Option<&Started> {
        match self.record(key)?.run.as_ref()? {
            Run::Started(started) => Some(started),
            Run::Adopted(_) => None,
        }
    }

    /// The run the core started of task `key`, to change.
    pub(super) fn started_mut(&mut self, key: TaskKey) -> Option<&mut Started> {
        match self.record_mut(key)?.run.as_mut()? {
            Run::Started(started) => Some(started),
            Run::Adopted(_) => None,
        }
    }

    /// Ends the run the core started of task `key`: takes it off the task.
    pub(super) fn take_started(&mut self, key: TaskKey) -> Option<Started> {
        let id = self.by_key.get(&key)?.clone();
        match self.take_run(&id)? {
            Run::Started(started) => Some(started),
            adopted => self.put_back(&id, adopted),
        }
    }

    /// Ends the adoption of task `id`: takes what it held off the task.
    pub(super) fn take_adopted(&mut self, id: &str) -> Option<Holding> {
        match self.take_run(id)? {
            Run::Adopted(holding) => Some(holding),
            started => self.put_back(id, started),
        }
    }

    /// Takes task `id`'s run off it, whatever it is.
    fn take_run(&mut self, id: &str) -> Option<Run> {
        let run = self.by_id.get_mut(id)?.run.take()?;
        self.on_devices.remove(id);
        Some(run)
    }

    /// Gives task `id` back the run [`TaskTable::take_run`] took, which was
    /// not the one asked for; `None`.
    fn put_back<T>(&mut self, id: &str, run: Run) -> Option<T> {
        if let Some(record) = self.by_id.get_mut(id) {
            record.run = Some(run);
            self.on_devices.insert(id.to_string());
        }
        None
    }

    /// The tasks whose run the core started, with their keys, in no
    /// particular order.
    pub(super) fn running(&self) -> impl Iterator<Item = (TaskKey, &TaskInfo, &Started)> {
        self.with_runs()
            .filter_map(|r| match (r.key, r.run.as_ref()?) {
                (Some(key), Run::Started(started)) => Some((key, &r.info, started)),
                _ => None,
            })
    }

    /// The adopted tasks that run, in no particular order.
    pub(super) fn adopted(&self) -> impl Iterator<Item = &TaskInfo> {
        self.adoptions().map(|(info, _)| info)
    }

    /// The adopted tasks that run, with what they hold, in no particular
    /// order.
    pub(super) fn adoptions(&self) -> impl Iterator<Item = (&TaskInfo, &Holding)> {
        self.with_runs().filter_map(|r| match r.run.as_ref()? {
            Run::Adopted(holding) => Some((&r.info, holding)),
            Run::Started(_) => None,
        })
    }

    /// What adopted task `id` holds, if it is adopted and runs.
    pub(super) fn adoption(&self, id: &str) -> Option<&Holding> {
        match self.by_id.get(id)?.run.as_ref()? {
            Run::Adopted(holding) => Some(holding),
            Run::Started(_) => None,
        }
    }

    /// The tasks with a run, through the index.
    fn with_runs(&self) -> impl Iterator<Item = &Record> {
        self.on_devices
            .iter()
            .filter_map(|id| self.by_id.get(id).map(|r| &**r))
    }

    fn record(&self, key: TaskKey) -> Option<&Record> {
        self.by_id.get(self.by_key.get(&key)?).map(|r| &**r)
    }

    fn record_mut(&mut self, key: TaskKey) -> Option<&mut Record> {
        let id = self.by_key.get(&key)?;
        self.by_id.get_mut(id).map(|r| &mut **r)
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

    fn started(how: How) -> Started {
        Started {
            how,
            holding: Holding::default(),
            handle: None,
            awaiting_locks: None,
            cancelled: false,
            interrupted: None,
            overran: false,
        }
    }

    /// What the table's own indexes say, against its records: every key and
    /// every id with a run names a record that has them, and back.
    fn consistent(table: &TaskTable) {
        for (key, id) in &table.by_key {
            assert_eq!(table.by_id[id].key, Some(*key), "key {key} of {id}");
        }
        for (id, record) in &table.by_id {
            assert_eq!(&record.info.id, id);
            if let Some(key) = record.key {
                assert_eq!(table.by_key.get(&key), Some(id));
            }
            assert_eq!(
                record.run.is_some(),
                table.on_devices.contains(id),
                "run of {id}"
            );
            assert!(
                !matches!(record.run, Some(Run::Started(_))) || record.key.is_some(),
                "{id} runs without a core key"
            );
        }
        assert!(table
            .on_devices
            .iter()
            .all(|id| table.by_id.contains_key(id)));
    }

    #[test]
    fn a_run_belongs_to_its_task_and_leaves_with_it() {
        let mut table = TaskTable::default();
        let (k1, k2) = (table.admit(task("t1")), table.admit(task("t2")));
        table.insert(task("t3"));
        // A run needs a task with that key: none is made for an unknown one.
        assert!(!table.start(99, started(How::Process)));
        assert!(table.start(k1, started(How::Process)));
        let held = Holding {
            energy_at_start: vec![Some(7)],
            clocks_set: true,
        };
        table.adopt(
            TaskInfo {
                state: TaskStatus::Running,
                ..task("t4")
            },
            held.clone(),
        );
        consistent(&table);
        let running: Vec<(TaskKey, &str)> = table
            .running()
            .map(|(k, t, _)| (k, t.id.as_str()))
            .collect();
        assert_eq!(running, [(k1, "t1")]);
        let adopted: Vec<&str> = table.adopted().map(|t| t.id.as_str()).collect();
        assert_eq!(adopted, ["t4"]);
        assert!(table.started(k2).is_none() && table.adoption("t1").is_none());
        // A run the core started is not an adoption, and stays.
        assert!(table.take_adopted("t1").is_none());
        assert_eq!(table.started(k1).map(|s| s.how), Some(How::Process));
        table.started_mut(k1).unwrap().cancelled = true;
        // An ended task leaves with its run, its key and its index entries,
        // at once.
        table.get_mut(k1).unwrap().state = TaskStatus::Cancelled;
        assert_eq!(table.retire("t1").unwrap().id, "t1");
        consistent(&table);
        assert!(table.find("t1").is_none() && table.get(k1).is_none());
        assert!(table.started(k1).is_none() && table.running().next().is_none());
        // An adoption's holding comes off once; its task stays until its
        // end is written.
        assert_eq!(table.take_adopted("t4"), Some(held));
        assert!(table.take_adopted("t4").is_none() && table.adopted().next().is_none());
        assert_eq!(
            table.find("t4").map(|(t, k)| (t.id.as_str(), k)),
            Some(("t4", None))
        );
        // A run taken off its task is gone from every index.
        assert!(table.start(k2, started(How::Modelled)));
        assert_eq!(table.take_started(k2).map(|s| s.how), Some(How::Modelled));
        assert!(table.take_started(k2).is_none());
        consistent(&table);
        assert!(table.on_devices.is_empty());
    }
}
