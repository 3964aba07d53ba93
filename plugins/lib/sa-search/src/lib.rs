//! The search behind the `sa-greedy` policy: [`plan`], the planning model (an
//! order of tasks list-scheduled by the greedy earliest-finish rule, its cost,
//! and incremental evaluation of neighbours), and [`anneal`], simulated
//! annealing over orders. The policy's crate documentation states the rules.

pub mod anneal;
pub mod plan;
