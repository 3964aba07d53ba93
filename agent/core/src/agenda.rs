//! What is due when: the event queue both drivers of the core keep (the
//! simulator's finishes and wake-ups, the daemon's timers and modelled ends).

use std::cmp::{Ordering, Reverse};
use std::collections::BinaryHeap;

/// Items due at times (seconds), taken earliest first; items due at the same
/// time are taken in their keys' order.
#[derive(Debug, Clone)]
pub struct Agenda<K> {
    heap: BinaryHeap<Reverse<Entry<K>>>,
}

#[derive(Debug, Clone)]
struct Entry<K> {
    at: f64,
    key: K,
}

impl<K: Ord> Ord for Entry<K> {
    fn cmp(&self, other: &Self) -> Ordering {
        self.at
            .total_cmp(&other.at)
            .then_with(|| self.key.cmp(&other.key))
    }
}
impl<K: Ord> PartialOrd for Entry<K> {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
impl<K: Ord> PartialEq for Entry<K> {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}
impl<K: Ord> Eq for Entry<K> {}

impl<K: Ord> Default for Agenda<K> {
    fn default() -> Self {
        Agenda {
            heap: BinaryHeap::new(),
        }
    }
}

impl<K: Ord> Agenda<K> {
    /// Nothing due.
    pub fn new() -> Agenda<K> {
        Agenda::default()
    }

    /// `key` is due at `at`.
    pub fn push(&mut self, at: f64, key: K) {
        self.heap.push(Reverse(Entry { at, key }));
    }

    /// The first item: its time and key.
    pub fn peek(&self) -> Option<(f64, &K)> {
        self.heap.peek().map(|Reverse(e)| (e.at, &e.key))
    }

    /// Takes the first item.
    pub fn pop(&mut self) -> Option<(f64, K)> {
        self.heap.pop().map(|Reverse(e)| (e.at, e.key))
    }

    /// Takes the first item if it is due by `now`.
    pub fn pop_due(&mut self, now: f64) -> Option<(f64, K)> {
        match self.peek() {
            Some((at, _)) if at <= now => self.pop(),
            _ => None,
        }
    }

    /// Whether an item is due at exactly `at`.
    pub fn has_time(&self, at: f64) -> bool {
        self.heap.iter().any(|Reverse(e)| e.at == at)
    }

    /// Whether nothing is due.
    pub fn is_empty(&self) -> bool {
        self.heap.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn earliest_first_then_key_order() {
        let mut agenda = Agenda::new();
        for (at, key) in [(2.0, 'b'), (1.0, 'z'), (2.0, 'a'), (0.5, 'q'), (1.0, 'c')] {
            agenda.push(at, key);
        }
        assert_eq!(agenda.peek(), Some((0.5, &'q')));
        assert_eq!(agenda.pop_due(0.4), None);
        assert!(agenda.has_time(1.0) && !agenda.has_time(1.5));
        let mut taken = Vec::new();
        while let Some(item) = agenda.pop_due(2.0) {
            taken.push(item);
        }
        assert_eq!(
            taken,
            [(0.5, 'q'), (1.0, 'c'), (1.0, 'z'), (2.0, 'a'), (2.0, 'b')]
        );
        assert!(agenda.is_empty());
    }
}
