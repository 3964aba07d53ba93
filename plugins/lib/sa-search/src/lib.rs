//! The search behind the `sa-greedy` policy: [`plan`], the planning model (an
//! order of tasks list-scheduled by the greedy earliest-finish rule, its cost,
//! and incremental evaluation of neighbours), and [`anneal`], simulated
//! annealing over orders. The policy's crate documentation states the rules.

pub mod anneal;
pub mod plan;

/// The search's seeded pseudo-random numbers: rand's `StdRng` (ChaCha12), so
/// that a seed gives the same stream on every platform.
pub type SearchRng = rand::rngs::StdRng;

/// A [`SearchRng`] seeded with `seed`.
pub fn seeded(seed: u64) -> SearchRng {
    rand::SeedableRng::seed_from_u64(seed)
}
