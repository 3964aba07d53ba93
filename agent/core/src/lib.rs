//! The sans-IO heart of gpu-agent: the scheduler core and everything it
//! consumes or computes.
//!
//! Nothing here reads a file or a clock, spawns a process, logs or talks to a
//! bus: the simulator and the daemon drive it and carry out its actions
//! (ARCHITECTURE.md, invariant 2).
//!
//! - [`scheduler`]: the core ([`Core`]): queues, dispatch, checking decisions;
//! - [`agenda`]: what is due when, the event queue of the core's drivers;
//! - [`task`]: a task as the core takes it, and its value rules;
//! - [`host`]: a host's devices;
//! - [`catalogue`] and [`mig`]: GPU models with clock tables and power limits,
//!   and NVIDIA's MIG profile tables;
//! - [`placement`]: the MIG placement tree: every valid layout and
//!   configuration of a table, and first-fit-decreasing placement
//!   (these three live in `gpu-agent-catalogue`, which plain libraries use
//!   without the core, and are re-exported here);
//! - [`apps`]: DVFS application profiles and the power model;
//! - [`metrics`]: the metrics of a run (formats.md §4);
//! - [`policy`]: a running policy object, and the built-in FIFO fallback.

pub mod agenda;
pub mod apps;
pub mod host;
pub mod metrics;
pub mod policy;
pub mod scheduler;
pub mod task;

pub use gpu_agent_catalogue::{catalogue, mig, placement};

pub use scheduler::{Action, Core, Input};
pub use task::TaskSpec;
