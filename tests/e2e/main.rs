//! End-to-end tests: the real `gpuctl` binary and real plugin files.
//!
//! The harness builds the binary, the plugins and the fixture plugins with
//! cargo before the first test that needs them, into this test's own target
//! directory, so a plain `cargo test` from a fresh clone is enough.

mod baseline_rules;
mod cli;
mod demo;
mod harness;
mod inspect;
mod plugin_loading;
