//! GPU models and their MIG tables, as plain data and pure functions: the
//! core re-exports them (`gpu_agent_core::{catalogue, mig, placement}`), and
//! the plain libraries plugins link (the MIG planner) use them without the
//! core.
//!
//! - [`catalogue`]: GPU models with clock tables and power limits;
//! - [`mig`]: NVIDIA's MIG profile tables;
//! - [`placement`]: the MIG placement tree: every valid layout and
//!   configuration of a table, and first-fit-decreasing placement.

pub mod catalogue;
pub mod mig;
pub mod placement;
