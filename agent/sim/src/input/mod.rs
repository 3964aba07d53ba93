//! Reading the files users write by hand: hosts, traces, DVFS profiles and
//! the DVFS measurements they are fitted to.
//!
//! Every reader names the file, line and field of a bad value
//! ([`InputError`]) and returns nothing partial. The host and profile
//! readers and the TOML helpers live below the simulator, in
//! `gpu-agent-hostspec` and `gpu-agent-input`, which the daemon uses without
//! it; they are re-exported here.

pub mod measurements;
pub mod trace;

pub use gpu_agent_hostspec::{apps, host};
pub use gpu_agent_input::{line_of, parse_toml, read_text, InputError};
