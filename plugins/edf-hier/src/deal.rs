//! Device groups, the deadline order and the dealing of tasks to groups.

use std::cmp::Ordering;
use std::collections::BTreeSet;

use gpu_agent_plugin_api::{TaskKey, TaskState, View};

/// The first `window` of `keys` in earliest-deadline order: by (deadline,
/// arrival, key). Linear in the keys, plus the sort of the window.
pub fn edf_order(view: &View<'_>, keys: &[TaskKey], window: usize) -> Vec<TaskKey> {
    let by_deadline = |&a: &TaskKey, &b: &TaskKey| {
        let (ta, tb) = (view.task(a), view.task(b));
        ta.deadline
            .total_cmp(&tb.deadline)
            .then(ta.arrival.total_cmp(&tb.arrival))
            .then(a.cmp(&b))
    };
    let mut order: Vec<TaskKey> = keys.to_vec();
    if order.len() > window {
        order.select_nth_unstable_by(window, by_deadline);
        order.truncate(window);
    }
    order.sort_by(by_deadline);
    order
}

/// A task's place in earliest-deadline order: (deadline, arrival, key).
#[derive(Debug, Clone, Copy)]
struct ByDeadline {
    deadline: f64,
    arrival: f64,
    key: TaskKey,
}

impl ByDeadline {
    fn of(view: &View<'_>, key: TaskKey) -> ByDeadline {
        let task = view.task(key);
        ByDeadline {
            deadline: task.deadline,
            arrival: task.arrival,
            key,
        }
    }
}

impl Ord for ByDeadline {
    fn cmp(&self, other: &Self) -> Ordering {
        self.deadline
            .total_cmp(&other.deadline)
            .then(self.arrival.total_cmp(&other.arrival))
            .then(self.key.cmp(&other.key))
    }
}

impl PartialOrd for ByDeadline {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl PartialEq for ByDeadline {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}

impl Eq for ByDeadline {}

/// The pending tasks in earliest-deadline order, kept up to date from the
/// policy's events, so that a plan reads its window in O(W log p) rather than
/// scanning all p pending tasks ([`edf_order`] gives the same tasks).
///
/// A task joins on [`Deadlines::arrived`] and leaves on
/// [`Deadlines::started`]. One that leaves the pending queue otherwise
/// (cancelled, rejected) is dropped when [`Deadlines::first`] meets it; one
/// that comes back to it (requeued, its device's queue returned) does so with
/// a `DeviceChanged` event, or an `Activated` one for a new policy, after
/// which [`Deadlines::invalidate`] has the index rebuilt from the view, as
/// it is whenever it holds fewer tasks than the pending queue.
#[derive(Debug, Default)]
pub struct Deadlines {
    order: BTreeSet<ByDeadline>,
    /// Whether `order` must be rebuilt from the pending queue.
    stale: bool,
}

impl Deadlines {
    /// Pending task `key` of `view` arrived.
    pub fn arrived(&mut self, view: &View<'_>, key: TaskKey) {
        self.order.insert(ByDeadline::of(view, key));
    }

    /// Task `key` of `view` is started (it leaves the pending queue).
    pub fn started(&mut self, view: &View<'_>, key: TaskKey) {
        self.order.remove(&ByDeadline::of(view, key));
    }

    /// The pending queue may have gained tasks the index has not heard of.
    pub fn invalidate(&mut self) {
        self.stale = true;
    }

    /// The first `window` pending tasks of `view` in earliest-deadline order,
    /// as [`edf_order`] gives them.
    pub fn first(&mut self, view: &View<'_>, window: usize) -> Vec<TaskKey> {
        let pending = view.pending.as_slice();
        if self.stale || self.order.len() < pending.len() {
            self.order = pending.iter().map(|&k| ByDeadline::of(view, k)).collect();
            self.stale = false;
        }
        let mut first = Vec::with_capacity(window.min(pending.len()));
        let mut gone = Vec::new();
        for entry in &self.order {
            if first.len() == window {
                break;
            }
            if view.task(entry.key).state == TaskState::Pending {
                first.push(entry.key);
            } else {
                gone.push(*entry);
            }
        }
        for entry in &gone {
            self.order.remove(entry);
        }
        debug_assert_eq!(first, edf_order(view, pending, window));
        first
    }
}

/// Deals `items` round-robin to `groups` groups, `group_size` at a time: the
/// first `group_size` items to group 0, the next to group 1, ..., wrapping
/// around after group `groups - 1`. Each group keeps the items' order.
pub fn deal<T: Copy>(items: &[T], groups: usize, group_size: usize) -> Vec<Vec<T>> {
    let mut dealt = vec![Vec::new(); groups];
    for (p, &item) in items.iter().enumerate() {
        dealt[(p / group_size) % groups].push(item);
    }
    dealt
}

/// The device groups of a host of `devices` devices: device j belongs to
/// group j mod `groups`, so that each group gets a share of every model when
/// the host file lists its devices model by model.
pub fn device_groups(devices: usize, groups: usize) -> Vec<Vec<u32>> {
    let mut g = vec![Vec::new(); groups];
    for j in 0..devices {
        g[j % groups].push(j as u32);
    }
    g
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{task, Fixture};

    #[test]
    fn deadlines_follow_arrivals_starts_and_what_they_did_not_hear() {
        // Deadlines 9, 5, 7, 5 (keys 0..3): order 1, 3, 2, 0.
        let mut f = Fixture::new(0.0);
        f.tasks = [9.0, 5.0, 7.0, 5.0]
            .iter()
            .enumerate()
            .map(|(k, &d)| task(k as u64, 1.0, d, 1.0))
            .collect();
        let mut index = Deadlines::default();
        // Never told of any task: rebuilt from the pending queue.
        assert_eq!(index.first(&f.view(), 2), [1, 3]);
        // Task 1 starts, task 4 (deadline 6) arrives.
        index.started(&f.view(), 1);
        f.tasks[1].state = TaskState::Running;
        f.tasks.push(task(4, 1.0, 6.0, 1.0));
        index.arrived(&f.view(), 4);
        assert_eq!(index.first(&f.view(), 3), [3, 4, 2]);
        // Task 3 is rejected unheard (a layout change left nothing that can
        // hold it): dropped when met.
        f.tasks[3].state = TaskState::Rejected;
        assert_eq!(index.first(&f.view(), 3), [4, 2, 0]);
        assert_eq!(index.order.len(), 3);
        // Task 1 is requeued (the policy hears DeviceChanged): rebuilt.
        f.tasks[1].state = TaskState::Pending;
        index.invalidate();
        assert_eq!(index.first(&f.view(), 2), [1, 4]);
        // A task unheard of that the queue gained shows as a count mismatch.
        f.tasks.push(task(5, 1.0, 1.0, 1.0));
        assert_eq!(index.first(&f.view(), 2), [5, 1]);
    }

    // Seven tasks a..g already in deadline order.
    const TASKS: [char; 7] = ['a', 'b', 'c', 'd', 'e', 'f', 'g'];

    fn dealt(groups: usize, size: usize) -> Vec<String> {
        deal(&TASKS, groups, size)
            .into_iter()
            .map(|g| g.into_iter().collect())
            .collect()
    }

    #[test]
    fn one_at_a_time() {
        assert_eq!(dealt(2, 1), ["aceg", "bdf"]);
        assert_eq!(dealt(3, 1), ["adg", "be", "cf"]);
    }

    #[test]
    fn two_at_a_time() {
        assert_eq!(dealt(2, 2), ["abef", "cdg"]);
        assert_eq!(dealt(3, 2), ["abg", "cd", "ef"]);
    }

    #[test]
    fn three_at_a_time() {
        assert_eq!(dealt(2, 3), ["abcg", "def"]);
        assert_eq!(dealt(3, 3), ["abc", "def", "g"]);
    }

    #[test]
    fn one_group_takes_everything() {
        assert_eq!(dealt(1, 2), ["abcdefg"]);
    }

    #[test]
    fn devices_are_dealt_by_index() {
        assert_eq!(device_groups(5, 2), [vec![0, 2, 4], vec![1, 3]]);
        assert_eq!(device_groups(3, 3), [vec![0], vec![1], vec![2]]);
        assert_eq!(device_groups(4, 1), [vec![0, 1, 2, 3]]);
    }
}
