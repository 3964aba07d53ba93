//! `greedy-eft`: greedy earliest finish time (formats.md §5).
//!
//! Tasks are taken in arrival order (the pending queue's order; ties in trace
//! order). Each goes to the valid device with the earliest completion
//! max(a_i, avail_j) + p_ij, ties to the lowest device index, at the end of that
//! device's local queue (p_ij = L_i / v_j, or the trace's `runtimes`).
//!
//! A gang task of k GPUs runs at the pace of its slowest device and starts when
//! the last of its devices is free. Among the valid devices ordered by
//! (start, index), for each prefix that ends at a distinct start time s the
//! policy takes the k fastest of the prefix (ties to the lower index); it keeps
//! the set with the earliest completion, ties to the earliest s.
//!
//! The rule lives in the `gpu-agent-eft-rule` crate, which `sa-greedy` shares.

// abi_stable 0.11's derives put impls inside constants.
#![allow(non_local_definitions)]

use gpu_agent_eft_rule::Placer;
use gpu_agent_plugin_api::{Decision, Event, PolicyImpl, View};

/// The greedy earliest-finish-time policy. It keeps no state from one event
/// to the next, only buffers.
#[derive(Debug, Default)]
pub struct GreedyEft {
    placer: Placer,
}

impl PolicyImpl for GreedyEft {
    fn on_event(&mut self, view: &View<'_>, _event: &Event) -> Result<Vec<Decision>, String> {
        Ok(self.placer.assign_pending(view))
    }
}

gpu_agent_plugin_api::export_policy! {
    name: "greedy-eft",
    description: "greedy earliest finish time on heterogeneous devices",
    parameters: [],
    new: |_params: &[gpu_agent_plugin_api::Param]| Ok::<_, String>(GreedyEft::default()),
}
