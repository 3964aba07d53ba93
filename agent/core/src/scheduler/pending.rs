//! The central pending queue: task keys in arrival order, shown to policies as
//! one slice.
//!
//! Keys are handed out in submission order and only ever join at the back, so
//! the queue is sorted by key: a task is found by binary search. It leaves by
//! shifting the shorter side of the queue over its slot (the front side moves
//! right past a head offset), so the oldest and the newest tasks, the usual
//! ones to go, leave in O(1), and any other in O(log n) plus one `memmove` of
//! the shorter side.

use gpu_agent_plugin_api::TaskKey;

#[derive(Debug, Default)]
pub(crate) struct Pending {
    keys: Vec<TaskKey>,
    /// `keys[head..]` is live.
    head: usize,
}

impl Pending {
    pub fn as_slice(&self) -> &[TaskKey] {
        &self.keys[self.head..]
    }

    /// Goes on with a copy of the keys, leaking the originals (see
    /// `Table::retire_lent`).
    pub fn retire_lent(&mut self) {
        let copy = self.keys.clone();
        std::mem::forget(std::mem::replace(&mut self.keys, copy));
    }

    pub fn len(&self) -> usize {
        self.keys.len() - self.head
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Appends `key`, newer than every key in the queue.
    pub fn push(&mut self, key: TaskKey) {
        debug_assert!(self.as_slice().last().is_none_or(|&k| k < key));
        if self.head > 0 && self.head * 2 >= self.keys.len() {
            self.keys.drain(..self.head);
            self.head = 0;
        }
        self.keys.push(key);
    }

    /// Puts `key` back in its place by arrival (a queued task returned to
    /// the pending queue); nothing when it is there already.
    pub fn insert(&mut self, key: TaskKey) {
        if let Err(at) = self.as_slice().binary_search(&key) {
            self.keys.insert(self.head + at, key);
        }
    }

    /// Takes `key` out; false when it is not in the queue.
    pub fn remove(&mut self, key: TaskKey) -> bool {
        let Ok(at) = self.as_slice().binary_search(&key) else {
            return false;
        };
        let at = self.head + at;
        if at - self.head < self.keys.len() - at {
            self.keys.copy_within(self.head..at, self.head + 1);
            self.head += 1;
        } else {
            self.keys.remove(at);
        }
        if self.head == self.keys.len() {
            self.keys.clear();
            self.head = 0;
        }
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_arrival_order_whichever_end_or_middle_leaves() {
        let mut q = Pending::default();
        for k in 0..10 {
            q.push(k);
        }
        assert!(q.remove(0) && q.remove(9) && q.remove(3) && q.remove(7));
        assert!(!q.remove(3) && !q.remove(42));
        assert_eq!(q.as_slice(), [1, 2, 4, 5, 6, 8]);
        for k in 10..14 {
            q.push(k);
        }
        assert!(q.remove(2) && q.remove(1) && q.remove(12));
        assert_eq!(q.as_slice(), [4, 5, 6, 8, 10, 11, 13]);
        for k in [4, 5, 6, 8, 10, 11, 13] {
            assert!(q.remove(k));
        }
        assert!(q.is_empty());
        q.push(20);
        assert_eq!((q.as_slice(), q.len()), (&[20][..], 1));
        q.insert(15);
        q.insert(21);
        q.insert(15);
        assert_eq!(q.as_slice(), [15, 20, 21]);
    }
}
