//! The offline side of gpu-agent: reading hosts, traces and DVFS profiles,
//! replaying a trace through the scheduler core on a virtual clock, writing
//! schedules, and converting published workloads.
//!
//! - [`input`]: the file readers (formats.md §1, §2, §6), errors naming
//!   file, line and field (the host and profile readers re-exported from
//!   `gpu-agent-hostspec`);
//! - [`replay`]: the simulator ([`simulate`], [`simulate_with`] its [`Options`],
//!   and [`set_dvfs_baseline`] for the no-DVFS baseline; [`MigChange`]s a
//!   policy made);
//! - [`schedule`]: the schedule CSV (formats.md §3);
//! - [`import`]: Alibaba's GPU trace and the SOS workload as a host and a trace;
//! - [`dvfs_paper`], [`paper_cluster`]: the DVFS paper's generator, its
//!   files, and its cluster model run on them;
//! - [`atomic`]: files written whole or not at all (re-exported from
//!   `gpu-agent-input`).

pub mod dvfs_paper;
pub mod import;
pub mod input;
pub mod paper_cluster;
pub mod replay;
pub mod schedule;
mod stopwatch;
pub mod stream;

pub use gpu_agent_input::atomic;

pub use replay::{
    set_dvfs_baseline, simulate, simulate_stream, simulate_with, MigChange, Options, Outcome,
    SchedulingTime, SimError,
};
