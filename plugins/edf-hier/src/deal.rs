//! Device groups, the deadline order and the dealing of tasks to groups.

use gpu_agent_plugin_api::{TaskKey, View};

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
