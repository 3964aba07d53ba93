//! gpu-agent: a node-level GPU agent.
//!
//! - [`backend`]: the GPU backend trait, the mock GPU and the NVML backend;
//! - [`model`]: what users write by hand (hosts, traces, DVFS profiles) and the
//!   GPU catalogue;
//! - [`import`]: converting public workloads into hosts and traces;
//! - [`core`]: the sans-IO scheduler core;
//! - [`plugins`]: loading policy plugins;
//! - [`sim`]: the offline simulator that replays traces through the core;
//! - [`contract`]: the D-Bus names, errors, wire types and client proxies;
//! - [`daemon`]: `gpu-agentd`, the service;
//! - [`manual`]: the manual pages, generated from the command lines;
//! - [`private_bus`]: a bus of its own, for the demo and tests.

pub mod backend;
pub mod contract;
pub mod core;
pub mod daemon;
pub mod import;
pub mod manual;
pub mod model;
pub mod plugins;
pub mod private_bus;
pub mod sim;
