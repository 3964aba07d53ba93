//! `fifo`: first come, first served (formats.md §5).
//!
//! Tasks are taken in arrival order (the pending queue's order; ties in trace
//! order). Each goes to the valid device with the earliest start
//! max(a_i, avail_j), ties to the lowest device index, at the end of that
//! device's local queue. A gang task of k GPUs takes the k valid devices that
//! come first by (start, index) and starts on all of them when the last is free;
//! a gang never takes a MIG instance.
//!
//! The agent also links this crate as its built-in fallback order.

// abi_stable 0.11's derives put impls inside constants.
#![allow(non_local_definitions)]

use gpu_agent_plugin_api::{abi_stable::std_types::ROption, Decision, Event, PolicyImpl, View};

/// The FIFO policy. It keeps no state: every call places the whole pending queue.
#[derive(Debug, Default)]
pub struct Fifo;

impl PolicyImpl for Fifo {
    fn on_event(&mut self, view: &View<'_>, _event: &Event) -> Result<Vec<Decision>, String> {
        if view.pending.is_empty() {
            return Ok(Vec::new());
        }
        let mut avail: Vec<f64> = view.devices.iter().map(|d| d.available_at).collect();
        let mut decisions = Vec::new();
        for &key in view.pending.iter() {
            let task = view.task(key);
            let start_on = |j: usize| avail[j].max(view.now);
            let k = task.gpus as usize;
            let chosen: Vec<usize> = if k == 1 {
                // The earliest start; `min_by` keeps the first (lowest index) of equals.
                let Some(j) = view
                    .devices
                    .iter()
                    .filter(|d| task.fits(d))
                    .map(|d| d.index as usize)
                    .min_by(|&a, &b| start_on(a).total_cmp(&start_on(b)))
                else {
                    continue; // no online device holds it right now: leave it pending
                };
                vec![j]
            } else {
                let mut valid: Vec<usize> = view
                    .devices
                    .iter()
                    .filter(|d| task.fits_as(d, task.gpus))
                    .map(|d| d.index as usize)
                    .collect();
                if valid.len() < k {
                    continue; // not enough online devices for it right now: leave it pending
                }
                // Stable sort keeps index order among equal starts.
                valid.sort_by(|&a, &b| start_on(a).total_cmp(&start_on(b)));
                valid.truncate(k);
                valid
            };
            let start = chosen.iter().map(|&j| start_on(j)).fold(view.now, f64::max);
            let runtime = chosen
                .iter()
                .map(|&j| task.runtime_on(&view.devices[j]))
                .fold(0.0, f64::max);
            for &j in &chosen {
                avail[j] = start + runtime;
            }
            decisions.push(Decision::Assign {
                task: key,
                devices: chosen.iter().map(|&j| j as u32).collect(),
                position: ROption::RNone,
                clocks: ROption::RNone,
            });
        }
        Ok(decisions)
    }
}

gpu_agent_plugin_api::export_policy! {
    name: "fifo",
    description: "first come, first served on the device that can start it earliest",
    parameters: [],
    new: |_params: &[gpu_agent_plugin_api::Param]| Ok::<_, String>(Fifo),
}
