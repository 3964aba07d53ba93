//! The body of a virtual schedule: its entries in WSPT order, in a sorted list
//! cut into chunks of at most [`CHUNK`] entries. Each chunk carries the sums of
//! its entries' remaining work and weighted remaining fractions, so the sums on
//! either side of any point take one pass over the chunk sums and one chunk:
//! O(n / CHUNK + CHUNK) for n entries, as do insertions and removals.

use gpu_agent_plugin_api::TaskKey;

/// The most entries a chunk holds; a fuller one splits in two halves.
pub(crate) const CHUNK: usize = 64;

/// A task in a device's virtual schedule.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Entry {
    /// The task.
    pub key: TaskKey,
    /// Weight w_K.
    pub weight: f64,
    /// Run time p_iK on this device.
    pub p: f64,
    /// WSPT ratio w_K / p_iK.
    pub ratio: f64,
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
            ratio: weight / p,
            done,
            rem,
            wiota: weight * (rem / p),
        }
    }

    /// Whether this entry comes before a task of `ratio` and `key`: a larger
    /// ratio, or an equal ratio and an earlier arrival (smaller key).
    pub fn ahead_of(&self, ratio: f64, key: TaskKey) -> bool {
        self.ratio > ratio || (self.ratio == ratio && self.key < key)
    }
}

#[derive(Debug, Default)]
struct Chunk {
    entries: Vec<Entry>,
    rem: f64,
    wiota: f64,
}

impl Chunk {
    fn with(entries: Vec<Entry>) -> Chunk {
        let mut chunk = Chunk {
            entries,
            ..Chunk::default()
        };
        chunk.resum();
        chunk
    }

    /// Recomputes the sums from the entries (no drift from updates).
    fn resum(&mut self) {
        self.rem = self.entries.iter().map(|e| e.rem).sum();
        self.wiota = self.entries.iter().map(|e| e.wiota).sum();
    }

    fn last(&self) -> &Entry {
        self.entries.last().expect("chunks are never empty")
    }
}

/// Entries in WSPT order (see [`Entry::ahead_of`]), with chunk sums.
#[derive(Debug, Default)]
pub(crate) struct ChunkList {
    chunks: Vec<Chunk>,
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

    /// The index of the first chunk that does not lie wholly ahead of (`ratio`, `key`).
    fn chunk_of(&self, ratio: f64, key: TaskKey) -> usize {
        self.chunks
            .partition_point(|c| c.last().ahead_of(ratio, key))
    }

    /// Inserts `entry` at its place in the order.
    pub fn insert(&mut self, entry: Entry) {
        let at = self
            .chunk_of(entry.ratio, entry.key)
            .min(self.chunks.len().saturating_sub(1));
        let Some(chunk) = self.chunks.get_mut(at) else {
            self.chunks.push(Chunk::with(vec![entry]));
            return;
        };
        let i = chunk
            .entries
            .partition_point(|e| e.ahead_of(entry.ratio, entry.key));
        chunk.entries.insert(i, entry);
        if chunk.entries.len() > CHUNK {
            let back = chunk.entries.split_off(CHUNK / 2);
            chunk.resum();
            self.chunks.insert(at + 1, Chunk::with(back));
        } else {
            chunk.resum();
        }
    }

    /// Removes and returns the first entry.
    pub fn pop_first(&mut self) -> Option<Entry> {
        let chunk = self.chunks.first_mut()?;
        let entry = chunk.entries.remove(0);
        self.settle(0);
        Some(entry)
    }

    /// Removes the entry of `key` whose ratio is `ratio`, if there is one.
    pub fn remove(&mut self, ratio: f64, key: TaskKey) -> Option<Entry> {
        let at = self.chunk_of(ratio, key);
        let chunk = self.chunks.get_mut(at)?;
        let i = chunk.entries.partition_point(|e| e.ahead_of(ratio, key));
        if chunk.entries.get(i).is_none_or(|e| e.key != key) {
            return None;
        }
        let entry = chunk.entries.remove(i);
        self.settle(at);
        Some(entry)
    }

    /// Drops chunk `at` if it is empty, else refreshes its sums.
    fn settle(&mut self, at: usize) {
        if self.chunks[at].entries.is_empty() {
            self.chunks.remove(at);
        } else {
            self.chunks[at].resum();
        }
    }

    /// (sum of `rem` over the entries ahead of (`ratio`, `key`), sum of
    /// `wiota` over the others).
    pub fn sums_around(&self, ratio: f64, key: TaskKey) -> (f64, f64) {
        let at = self.chunk_of(ratio, key);
        let mut ahead: f64 = self.chunks[..at].iter().map(|c| c.rem).sum();
        let mut behind = 0.0;
        if let Some(chunk) = self.chunks.get(at) {
            let i = chunk.entries.partition_point(|e| e.ahead_of(ratio, key));
            ahead += chunk.entries[..i].iter().map(|e| e.rem).sum::<f64>();
            behind += chunk.entries[i..].iter().map(|e| e.wiota).sum::<f64>();
            behind += self.chunks[at + 1..].iter().map(|c| c.wiota).sum::<f64>();
        }
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
                        let i = plain.partition_point(|x| x.ahead_of(e.ratio, e.key));
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
                        prop_assert_eq!(list.remove(e.ratio, e.key), Some(e));
                        prop_assert_eq!(list.remove(e.ratio, e.key), None);
                    }
                }
                prop_assert!(list.chunks.iter().all(|c| !c.entries.is_empty() && c.entries.len() <= CHUNK));
                let listed: Vec<Entry> = list.iter().copied().collect();
                prop_assert_eq!(&listed, &plain);
                for probe in [(0.5, 0), (1.0, key as TaskKey), (2.0, 3), (0.125, 1000)] {
                    let (ahead, behind) = list.sums_around(probe.0, probe.1);
                    let split = plain.partition_point(|x| x.ahead_of(probe.0, probe.1));
                    let want_ahead: f64 = plain[..split].iter().map(|e| e.rem).sum();
                    let want_behind: f64 = plain[split..].iter().map(|e| e.wiota).sum();
                    prop_assert!(close(ahead, want_ahead), "{} != {}", ahead, want_ahead);
                    prop_assert!(close(behind, want_behind), "{} != {}", behind, want_behind);
                }
            }
        }
    }

    #[test]
    fn a_full_chunk_splits_in_halves() {
        let mut list = ChunkList::default();
        for key in 0..=CHUNK as TaskKey {
            list.insert(Entry::new(key, 1.0, 1.0, 0.0));
        }
        let sizes: Vec<usize> = list.chunks.iter().map(|c| c.entries.len()).collect();
        assert_eq!(sizes, vec![CHUNK / 2, CHUNK / 2 + 1]);
        assert_eq!(list.sums_around(1.0, 40), (40.0, 25.0));
    }
}
