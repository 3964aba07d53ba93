//! One device's virtual schedule: preemptive WSPT on a virtual single machine.
//!
//! Only the head (the first task in WSPT order) does virtual work, one unit per
//! second. A newcomer ahead of the head in the order becomes the head; the
//! former head goes back to the body with the work it has done. The head leaves
//! at its alpha-point, once it has done `alpha * p` units. Time advances lazily:
//! [`VirtualSchedule::advance`] covers any span at once, head after head.

use gpu_agent_plugin_api::TaskKey;

use crate::chunks::{ChunkList, Entry, Rank};

/// The task doing virtual work.
#[derive(Debug, Clone, Copy)]
struct Head {
    /// Its entry as of `since`.
    entry: Entry,
    /// When it last became the head.
    since: f64,
    /// When it reaches its alpha-point if nothing overtakes it.
    alpha_at: f64,
}

impl Head {
    fn start(entry: Entry, at: f64, alpha: f64) -> Head {
        Head {
            entry,
            since: at,
            alpha_at: at + (alpha * entry.p - entry.done),
        }
    }

    /// The virtual work it has done by `now` (before its alpha-point).
    fn done_at(&self, now: f64) -> f64 {
        self.entry.done + (now - self.since)
    }

    /// Its entry as of `now` (before its alpha-point).
    fn at(&self, now: f64) -> Entry {
        let e = self.entry;
        Entry::new(e.key, e.weight, e.p, self.done_at(now))
    }
}

/// A device's virtual schedule.
#[derive(Debug)]
pub(crate) struct VirtualSchedule {
    alpha: f64,
    head: Option<Head>,
    body: ChunkList,
}

impl VirtualSchedule {
    /// An empty schedule whose tasks leave at their `alpha`-points.
    pub fn new(alpha: f64) -> VirtualSchedule {
        VirtualSchedule {
            alpha,
            head: None,
            body: ChunkList::default(),
        }
    }

    /// When the head reaches its alpha-point, if there is a head.
    pub fn next_alpha_point(&self) -> Option<f64> {
        self.head.map(|h| h.alpha_at)
    }

    /// Runs virtual time up to `now`: every head whose alpha-point is at or
    /// before `now` leaves, in order, and the next starts at that alpha-point.
    /// Tells `leave` each leaver's alpha-point and key.
    pub fn advance(&mut self, now: f64, mut leave: impl FnMut(f64, TaskKey)) {
        while let Some(head) = self.head.filter(|h| h.alpha_at <= now) {
            leave(head.alpha_at, head.entry.key);
            self.promote(head.alpha_at);
        }
    }

    /// Makes the first task of the body the head at `at`.
    fn promote(&mut self, at: f64) {
        let alpha = self.alpha;
        self.head = self.body.pop_first().map(|e| Head::start(e, at, alpha));
    }

    /// Adds a task with no virtual work done at `now` (after
    /// [`advance`](Self::advance) to `now`).
    pub fn insert(&mut self, key: TaskKey, weight: f64, p: f64, now: f64) {
        let entry = Entry::new(key, weight, p, 0.0);
        match self.head {
            Some(head) if head.entry.rank < entry.rank => self.body.insert(entry),
            Some(head) => {
                self.body.insert(head.at(now));
                self.head = Some(Head::start(entry, now, self.alpha));
            }
            None => self.head = Some(Head::start(entry, now, self.alpha)),
        }
    }

    /// Withdraws the task of rank `rank` at `now`, after
    /// [`advance`](Self::advance) to `now`; false when it is not here.
    pub fn remove(&mut self, rank: Rank, now: f64) -> bool {
        if self.head.is_some_and(|h| h.entry.rank == rank) {
            self.promote(now);
            return true;
        }
        self.body.remove(rank).is_some()
    }

    /// SOS's cost at `now` of adding a task of weight `weight`, run time `p`
    /// and key `key`: w (p + sum of iota_K p_K over the tasks K ahead of it)
    /// + p * (sum of w_K iota_K over the tasks behind it).
    pub fn cost(&self, key: TaskKey, weight: f64, p: f64, now: f64) -> f64 {
        let rank = Rank::new(weight / p, key);
        let (mut ahead, mut behind) = self.body.sums_around(rank);
        if let Some(head) = &self.head {
            let h = &head.entry;
            let rem = h.p - head.done_at(now);
            if h.rank < rank {
                ahead += rem;
            } else {
                behind += h.weight * (rem / h.p);
            }
        }
        weight * (p + ahead) + p * behind
    }

    /// Whether no task is in it.
    #[cfg(test)]
    pub fn is_empty(&self) -> bool {
        self.head.is_none() && self.body.is_empty()
    }

    /// (key, virtual work done) of every task, head first, as of `now`.
    #[cfg(test)]
    pub fn tasks(&self, now: f64) -> Vec<(TaskKey, f64)> {
        self.head
            .map(|h| h.at(now))
            .iter()
            .chain(self.body.iter())
            .map(|e| (e.key, e.done))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn advance(s: &mut VirtualSchedule, now: f64) -> Vec<(f64, TaskKey)> {
        let mut left = Vec::new();
        s.advance(now, |at, key| left.push((at, key)));
        left
    }

    #[test]
    fn cost_sums_remaining_work_ahead_and_weighted_fractions_behind() {
        // At 0: task 0 (w 4, p 2, ratio 2) is the head; task 1 (w 1, p 4,
        // ratio 0.25) and task 2 (w 3, p 3, ratio 1) wait behind it.
        let mut s = VirtualSchedule::new(0.5);
        s.insert(0, 4.0, 2.0, 0.0);
        s.insert(1, 1.0, 4.0, 0.0);
        s.insert(2, 3.0, 3.0, 0.0);
        assert_eq!(s.tasks(0.0), vec![(0, 0.0), (2, 0.0), (1, 0.0)]);
        // At 0.5 the head has done 0.5 of 2: iota_0 = 0.75, iota_0 p_0 = 1.5.
        // A newcomer J (w 2, p 4, ratio 0.5) comes after tasks 0 and 2, before 1:
        // cost = 2 (4 + 1.5 + 3) + 4 (1 * 1) = 21.
        assert_eq!(s.cost(9, 2.0, 4.0, 0.5), 21.0);
        // J (w 6, p 2, ratio 3) would come first: cost = 6 * 2 + 2 (4 * 0.75 + 3 + 1) = 26.
        assert_eq!(s.cost(9, 6.0, 2.0, 0.5), 26.0);
        // J (w 1, p 1, ratio 1) ties with task 2, which arrived earlier:
        // cost = 1 (1 + 1.5 + 3) + 1 (1) = 6.5.
        assert_eq!(s.cost(9, 1.0, 1.0, 0.5), 6.5);
        // An empty schedule costs w p.
        assert_eq!(VirtualSchedule::new(0.5).cost(0, 3.0, 5.0, 7.0), 15.0);
    }

    #[test]
    fn a_preempted_head_keeps_its_progress() {
        let mut s = VirtualSchedule::new(0.5);
        s.insert(0, 1.0, 8.0, 0.0); // alpha-point at 4
        assert_eq!(s.next_alpha_point(), Some(4.0));
        assert!(advance(&mut s, 3.0).is_empty());
        // Task 1 (ratio 1 > 1/8) overtakes at 3, when task 0 has done 3 of its 4.
        s.insert(1, 2.0, 2.0, 3.0);
        assert_eq!(s.tasks(3.0), vec![(1, 0.0), (0, 3.0)]);
        // Task 1 reaches 1 unit at 4; task 0 resumes and needs 1 more: at 5.
        assert_eq!(s.next_alpha_point(), Some(4.0));
        assert_eq!(advance(&mut s, 4.0), vec![(4.0, 1)]);
        assert_eq!(s.next_alpha_point(), Some(5.0));
        assert_eq!(s.tasks(4.5), vec![(0, 3.5)]);
        // iota_0 = (8 - 3.5) / 8 at 4.5.
        assert_eq!(s.cost(9, 1.0, 16.0, 4.5), 16.0 + 4.5);
        assert_eq!(advance(&mut s, 5.0), vec![(5.0, 0)]);
        assert!(s.is_empty());
    }

    #[test]
    fn several_heads_reach_their_alpha_points_in_one_span() {
        let mut s = VirtualSchedule::new(0.5);
        s.insert(0, 4.0, 2.0, 0.0); // ratio 2, alpha-point after 1 unit
        s.insert(1, 3.0, 6.0, 0.0); // ratio 0.5, 3 units
        s.insert(2, 1.0, 4.0, 0.0); // ratio 0.25, 2 units
        s.insert(3, 2.0, 2.0, 0.0); // ratio 1, 1 unit: ahead of 1 and 2
                                    // Virtual work: 0 in 0..1, 3 in 1..2, 1 in 2..5, 2 in 5..7.
                                    // One span from 0 to 6 releases three of them, in order.
        assert_eq!(advance(&mut s, 6.0), vec![(1.0, 0), (2.0, 3), (5.0, 1)]);
        assert_eq!(s.tasks(6.0), vec![(2, 1.0)]);
        assert_eq!(s.next_alpha_point(), Some(7.0));
        // An alpha-point exactly at `now` is reached.
        assert_eq!(advance(&mut s, 7.0), vec![(7.0, 2)]);
        assert_eq!(s.next_alpha_point(), None);
    }

    #[test]
    fn alpha_one_runs_the_whole_expected_time() {
        let mut s = VirtualSchedule::new(1.0);
        s.insert(0, 1.0, 3.0, 2.0);
        assert_eq!(s.next_alpha_point(), Some(5.0));
    }

    #[test]
    fn removing_the_head_starts_the_next_at_once() {
        let mut s = VirtualSchedule::new(0.5);
        s.insert(0, 2.0, 2.0, 0.0);
        s.insert(1, 1.0, 4.0, 0.0);
        assert!(advance(&mut s, 0.5).is_empty());
        assert!(!s.remove(Rank::new(1.0, 7), 0.5));
        assert!(s.remove(Rank::new(1.0, 0), 0.5));
        // Task 1 needs 2 units from 0.5.
        assert_eq!(s.next_alpha_point(), Some(2.5));
        assert!(s.remove(Rank::new(0.25, 1), 0.5));
        assert!(s.is_empty());
    }
}
