//! What users describe in files: GPU models, hosts, traces and DVFS profiles.

pub mod apps;
pub mod catalogue;
pub mod host;
pub mod input_error;
pub mod mig;
pub mod trace;
