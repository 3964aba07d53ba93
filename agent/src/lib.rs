//! gpu-agent: a node-level GPU agent.
//!
//! - [`backend`]: the GPU backend trait, the mock GPU and the NVML backend;
//! - [`model`]: what users write by hand (hosts, traces, DVFS profiles) and the
//!   GPU catalogue;
//! - [`core`]: the sans-IO scheduler core;
//! - [`daemon`]: the daemon's parts (the process executor);
//! - [`plugins`]: loading policy plugins;
//! - [`sim`]: the offline simulator that replays traces through the core.

pub mod backend;
pub mod contract;
pub mod core;
pub mod daemon;
pub mod model;
pub mod plugins;
pub mod sim;
