//! Reading a host and its DVFS profiles (formats.md §1, §6), as the daemon
//! and the simulator both take them: [`host`] (`host.toml`: devices, MIG
//! layouts, and the simulator's `[cluster]`) and [`apps`] (`apps.toml`).
//!
//! Every reader names the file, line and field of a bad value
//! ([`gpu_agent_input::InputError`]) and returns nothing partial.

pub mod apps;
pub mod host;
