//! `fifo`: first come, first served (formats.md §5).
//!
//! Tasks are taken in arrival order (the pending queue's order; ties in trace
//! order). Each goes to the valid device with the earliest start
//! max(a_i, avail_j), ties to the lowest device index, at the end of that
//! device's local queue. A gang task of k GPUs takes the k valid devices that
//! come first by (start, index) and starts on all of them when the last is free;
//! a gang never takes a MIG instance.
//!
//! The rule lives in the `gpu-agent-fifo-rule` crate, which the core also
//! links as its built-in fallback order.

// abi_stable 0.11's derives put impls inside constants.
#![allow(non_local_definitions)]

use gpu_agent_fifo_rule::Fifo;

gpu_agent_plugin_api::export_policy! {
    name: "fifo",
    description: "first come, first served on the device that can start it earliest",
    parameters: [],
    new: |_params: &[gpu_agent_plugin_api::Param]| Ok::<_, String>(Fifo::default()),
}
