//! End-to-end tests: the real `gpuctl` and `gpu-agentd` binaries, real plugin
//! files and a real dbus-daemon.
//!
//! The harness builds the binaries, the plugins and the fixture plugins with
//! cargo before the first test that needs them, into this test's own target
//! directory, so a plain `cargo test` from a fresh clone is enough. The
//! daemon tests (`daemon_*`) each run their own private bus and state
//! directory, so they run in parallel.

mod baseline_rules;
mod cli;
mod cli_json;
mod daemon;
mod daemon_access;
mod daemon_adopt;
mod daemon_bus;
mod daemon_completions;
mod daemon_crash;
mod daemon_descriptors;
mod daemon_dvfs;
mod daemon_errors;
mod daemon_exec;
mod daemon_full_disk;
mod daemon_fuzz;
mod daemon_health;
mod daemon_hung_policy;
mod daemon_metrics;
mod daemon_mig;
mod daemon_mig_apply;
mod daemon_mig_devices;
mod daemon_mig_policy;
mod daemon_modules;
mod daemon_nvml;
mod daemon_overrun;
mod daemon_params;
mod daemon_policy;
mod daemon_python;
mod daemon_reload;
mod daemon_slow_driver;
mod daemon_startup;
mod daemon_state_loss;
mod daemon_submit;
mod daemon_top;
mod daemon_waiting;
mod demo;
mod dvfs;
mod edf_hier;
mod edl;
mod harness;
mod import;
mod inspect;
mod layers;
mod mig_plan;
mod mig_plan_policy;
mod mig_repartition;
mod mig_sim;
mod nvml;
mod plugin_loading;
mod python_policy;
mod readme;
mod sa_greedy;
mod slurm;
mod sos;
mod tidy;
mod validity;
