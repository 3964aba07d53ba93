//! The body of a virtual schedule: its entries in WSPT order, in a sorted list
//! cut into chunks of at most [`CHUNK`] entries.
//!
//! Each chunk keeps an index of its entries' ranks beside the running sums of
//! their remaining work (from the front) and weighted remaining fractions
//! (from the back); the list keeps each chunk's last rank and totals in arrays
//! of their own. The sums on
//! either side of any point then take two binary searches and one pass over
//! the chunk totals: O(log n + n / CHUNK) for n entries. An insertion or a
//! removal rebuilds one chunk's sums: O(log n + CHUNK), plus O(n / CHUNK) when
//! a chunk splits or empties.

use gpu_agent_plugin_api::TaskKey;

/// The most entries a chunk holds; a fuller one splits in two halves.
pub(crate) const CHUNK: usize = 32;

/// A task's place in WSPT order: the larger ratio w / p first, then the
/// earlier arrival (the smaller key). Smaller ranks come first.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct Rank(u128);

impl Rank {
    /// The rank of a task of WSPT ratio `ratio` and key `key`. Ratios are
    /// never negative, and non-negative floats order like their bit patterns,
    /// so one integer comparison orders tasks (and binary searches need no
    /// branches).
    pub fn new(ratio: f64, key: TaskKey) -> Rank {
        Rank(u128::from(u64::MAX - ratio.to_bits()) << 64 | u128::from(key))
    }
}

/// A task in a device's virtual schedule.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Entry {
    /// The task.
    pub key: TaskKey,
    /// Weight w_K.
    pub weight: f64,
    /// Run time p_iK on this device.
    pub p: f64,
    /// Its place in the order.
    pub rank: Rank,
    /// Virtual work done so far (at most alpha * p).
    pub done: f64,
    /// Remaining virtual work iota_K * p_iK = p - done.
    pub rem: f64,
    /// w_K * iota_K.
    pub wiota: f64,
}

impl Entry {
    /// A task with `done` units of virtual work done.
    pub fn new(key: TaskKey, weight: f64, p: f64, done: f64) -> Entry {
        let rem = p - done;
        Entry {
            key,
            weight,
            p,
            rank: Rank::new(weight / p, key),
            done,
            rem,
            wiota: weight * (rem / p),
        }
    }
}

/// The sum of `xs`, in four interleaved partial sums (which vectorise).
fn sum(xs: &[f64]) -> f64 {
    let mut acc = [0.0; 4];
    let mut quads = xs.chunks_exact(4);
    for q in &mut quads {
        for k in 0..4 {
            acc[k] += q[k];
        }
    }
    let rest: f64 = quads.remainder().iter().sum();
    (acc[0] + acc[1]) + (acc[2] + acc[3]) + rest
}

/// One point of a chunk's index: the rank of the entry there and the sums on
/// either side of it, together, so a search and its sums share cache lines.
#[derive(Debug, Clone, Copy)]
struct Point {
    rank: Rank,
    /// The sum of `rem` over the entries before this point.
    rem_before: f64,
    /// The sum of `wiota` over the entries from this point on.
    wiota_from: f64,
}

#[derive(Debug, Default)]
struct Chunk {
    entries: Vec<Entry>,
    /// One point per entry, then one past the last (whose rank is the largest
    /// there is).
    index: Vec<Point>,
}

impl Chunk {
    /// Rebuilds the index from the entries (no drift from updates).
    fn reindex(&mut self) {
        let mut ahead = 0.0;
        self.index.clear();
        self.index.extend(self.entries.iter().map(|e| {
            let point = Point {
                rank: e.rank,
                rem_before: ahead,
                wiota_from: 0.0,
            };
            ahead += e.rem;
            point
        }));
        self.index.push(Point {
            rank: Rank(u128::MAX),
            rem_before: ahead,
            wiota_from: 0.0,
        });
        let mut behind = 0.0;
        for (point, e) in self.index.iter_mut().zip(&self.entries).rev() {
            behind += e.wiota;
            point.wiota_from = behind;
        }
    }

    /// The point where a task of rank `rank` goes.
    fn point(&self, rank: Rank) -> (usize, &Point) {
        let j = self.index.partition_point(|p| p.rank < rank);
        (j, &self.index[j])
    }
}

/// Entries in WSPT order, with chunk sums.
#[derive(Debug, Default)]
pub(crate) struct ChunkList {
    chunks: Vec<Chunk>,
    /// The rank of each chunk's last entry.
    last: Vec<Rank>,
    /// Each chunk's sum of `rem`.
    rem: Vec<f64>,
    /// Each chunk's sum of `wiota`.
    wiota: Vec<f64>,
}

impl ChunkList {
    /// Whether it holds no entry.
    #[cfg(test)]
    pub fn is_empty(&self) -> bool {
        self.chunks.is_empty()
    }

    /// The entries, in order.
    #[cfg(test)]
    pub fn iter(&self) -> impl Iterator<Item = &Entry> {
        self.chunks.iter().flat_map(|c| c.entries.iter())
    }

    /// The index of the first chunk that does not lie wholly ahead of `rank`.
    fn chunk_of(&self, rank: Rank) -> usize {
        self.last.partition_point(|&r| r < rank)
    }

    /// Rebuilds chunk `at`'s sums and summary, or drops it when it is empty.
    fn refresh(&mut self, at: usize) {
        let chunk = &mut self.chunks[at];
        let Some(last) = chunk.entries.last() else {
            self.chunks.remove(at);
            self.last.remove(at);
            self.rem.remove(at);
            self.wiota.remove(at);
            return;
        };
        self.last[at] = last.rank;
        chunk.reindex();
        self.rem[at] = chunk.index[chunk.entries.len()].rem_before;
        self.wiota[at] = chunk.index[0].wiota_from;
    }

    /// Adds a chunk of `entries` at `at`.
    fn open(&mut self, at: usize, entries: Vec<Entry>) {
        self.chunks.insert(
            at,
            Chunk {
                entries,
                ..Chunk::default()
            },
        );
        self.last.insert(at, Rank(0));
        self.rem.insert(at, 0.0);
        self.wiota.insert(at, 0.0);
        self.refresh(at);
    }

    /// Inserts `entry` at its place in the order.
    pub fn insert(&mut self, entry: Entry) {
        if self.chunks.is_empty() {
            self.open(0, vec![entry]);
            return;
        }
        let at = self.chunk_of(entry.rank).min(self.chunks.len() - 1);
        let chunk = &mut self.chunks[at];
        let (j, _) = chunk.point(entry.rank);
        chunk.entries.insert(j, entry);
        if chunk.entries.len() > CHUNK {
            let back = chunk.entries.split_off(CHUNK / 2);
            self.open(at + 1, back);
        }
        self.refresh(at);
    }

    /// Removes and returns the first entry.
    pub fn pop_first(&mut self) -> Option<Entry> {
        let chunk = self.chunks.first_mut()?;
        let entry = chunk.entries.remove(0);
        self.refresh(0);
        Some(entry)
    }

    /// Removes the entry of rank `rank`, if there is one.
    pub fn remove(&mut self, rank: Rank) -> Option<Entry> {
        let at = self.chunk_of(rank);
        let chunk = self.chunks.get_mut(at)?;
        let (j, point) = chunk.point(rank);
        if point.rank != rank {
            return None;
        }
        let entry = chunk.entries.remove(j);
        self.refresh(at);
        Some(entry)
    }

    /// (sum of `rem` over the entries ahead of `rank`, sum of `wiota` over
    /// the others).
    pub fn sums_around(&self, rank: Rank) -> (f64, f64) {
        let at = self.chunk_of(rank);
        let mut ahead = sum(&self.rem[..at]);
        let Some(chunk) = self.chunks.get(at) else {
            return (ahead, 0.0);
        };
        let (_, point) = chunk.point(rank);
        ahead += point.rem_before;
        let behind = point.wiota_from + sum(&self.wiota[at + 1..]);
        (ahead, behind)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[derive(Debug, Clone)]
    enum Op {
        Insert { weight: u8, p: u8, done: u8 },
        PopFirst,
        Remove(usize),
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            6 => (1u8..5, 1u8..9, 0u8..4).prop_map(|(weight, p, done)| Op::Insert { weight, p, done }),
            1 => Just(Op::PopFirst),
            2 => (0usize..400).prop_map(Op::Remove),
        ]
    }

    fn close(a: f64, b: f64) -> bool {
        (a - b).abs() <= 1e-9 * a.abs().max(1.0)
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

        /// Against a plain sorted Vec: the same order, the same removals, the
        /// same sums on either side of any point.
        #[test]
        fn behaves_like_a_sorted_vec(ops in prop::collection::vec(op(), 1..400)) {
            let mut list = ChunkList::default();
            let mut plain: Vec<Entry> = Vec::new();
            for (key, op) in ops.into_iter().enumerate() {
                match op {
                    Op::Insert { weight, p, done } => {
                        let e = Entry::new(key as TaskKey, weight.into(), p.into(), f64::from(done.min(p - 1)));
                        let i = plain.partition_point(|x| x.rank < e.rank);
                        plain.insert(i, e);
                        list.insert(e);
                    }
                    Op::PopFirst => {
                        let expected = (!plain.is_empty()).then(|| plain.remove(0));
                        prop_assert_eq!(list.pop_first(), expected);
                    }
                    Op::Remove(n) => {
                        if plain.is_empty() {
                            continue;
                        }
                        let e = plain.remove(n % plain.len());
                        prop_assert_eq!(list.remove(e.rank), Some(e));
                        prop_assert_eq!(list.remove(e.rank), None);
                    }
                }
                prop_assert!(list.chunks.iter().all(|c| !c.entries.is_empty() && c.entries.len() <= CHUNK));
                prop_assert_eq!(
                    (list.last.len(), list.rem.len(), list.wiota.len()),
                    (list.chunks.len(), list.chunks.len(), list.chunks.len())
                );
                let listed: Vec<Entry> = list.iter().copied().collect();
                prop_assert_eq!(&listed, &plain);
                for (ratio, k) in [(0.5, 0), (1.0, key as TaskKey), (2.0, 3), (0.125, 1000)] {
                    let probe = Rank::new(ratio, k);
                    let (ahead, behind) = list.sums_around(probe);
                    let split = plain.partition_point(|x| x.rank < probe);
                    let want_ahead: f64 = plain[..split].iter().map(|e| e.rem).sum();
                    let want_behind: f64 = plain[split..].iter().map(|e| e.wiota).sum();
                    prop_assert!(close(ahead, want_ahead), "{} != {}", ahead, want_ahead);
                    prop_assert!(close(behind, want_behind), "{} != {}", behind, want_behind);
                }
            }
        }
    }

    #[test]
    fn ranks_put_larger_ratios_then_earlier_arrivals_first() {
        assert!(Rank::new(2.0, 9) < Rank::new(1.5, 0));
        assert!(Rank::new(1.0, 1) < Rank::new(1.0, 2));
        assert!(Rank::new(1e-300, 7) < Rank::new(0.0, 0));
        assert!(Rank::new(f64::MAX, TaskKey::MAX) < Rank::new(1.0, 0));
    }

    #[test]
    fn a_full_chunk_splits_in_halves() {
        let mut list = ChunkList::default();
        for key in 0..=CHUNK as TaskKey {
            list.insert(Entry::new(key, 1.0, 1.0, 0.0));
        }
        let sizes: Vec<usize> = list.chunks.iter().map(|c| c.entries.len()).collect();
        assert_eq!(sizes, vec![CHUNK / 2, CHUNK / 2 + 1]);
        // Equal ratios: the keys before 20 are ahead.
        assert_eq!(
            list.sums_around(Rank::new(1.0, 20)),
            (20.0, (CHUNK + 1 - 20) as f64)
        );
    }
}
