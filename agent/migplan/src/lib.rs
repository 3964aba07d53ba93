//! MIG planning: the fewest GPUs, and their MIG layouts, that serve every
//! model's demand (docs/mig.md §4–5, Configurable Machine Scheduling).
//!
//! Block types are the chosen MIG profiles of one GPU model; configurations
//! are the multisets of the model's maximal layouts, generated from the
//! placement tree ([`gpu_agent_catalogue::placement`]); jobs are models with a
//! demand and a throughput per profile. A plan gives each GPU a configuration
//! and each instance at most one job so that every job's throughput reaches
//! its demand.
//!
//! - [`input`]: the plan file (TOML, or the CSV job table), errors naming
//!   file, line and key;
//! - [`problem`]: the instance ([`Problem`]) with its configurations;
//! - [`lp`]: the canonical LP (the lower bound every plan reports) and the
//!   exact re-assignment of blocks to jobs;
//! - [`exact`], [`rounding`], [`greedy`]: the three algorithms;
//! - [`plan`]: a plan, its verification and its outputs (assignment CSV,
//!   JSON summary);
//! - [`solve`]: one entry point that runs an algorithm and verifies its plan.

pub mod exact;
pub mod greedy;
pub mod input;
pub mod lp;
pub mod plan;
pub mod problem;
pub mod rounding;
mod solve;

pub use plan::{Outcome, Plan, Status};
pub use problem::{Job, Problem, ProblemError};
pub use solve::{solve, Algorithm, Options, PlanError};
