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

use gpu_agent_plugin_api::{
    abi_stable::{
        rvec,
        std_types::{ROption, RVec},
    },
    Decision, Event, PolicyImpl, View,
};

/// The FIFO policy. It keeps no state from one call to the next, only
/// buffers: every call places the whole pending queue.
#[derive(Debug, Default)]
pub struct Fifo {
    /// When each device is free, as this call's placements leave it.
    avail: Vec<f64>,
    /// The devices a gang task fits, by (start, index).
    valid: Vec<usize>,
}

impl PolicyImpl for Fifo {
    fn on_event(&mut self, view: &View<'_>, _event: &Event) -> Result<Vec<Decision>, String> {
        if view.pending.is_empty() {
            return Ok(Vec::new());
        }
        let Fifo { avail, valid } = self;
        avail.clear();
        avail.extend(view.devices.iter().map(|d| d.available_at));
        let mut decisions = Vec::with_capacity(view.pending.len());
        for &key in view.pending.iter() {
            let task = view.task(key);
            let start_on = |j: usize| avail[j].max(view.now);
            let k = task.gpus as usize;
            let chosen: RVec<u32> = if k == 1 {
                // The earliest start, the first (lowest index) of equals.
                let mut best: Option<(f64, usize)> = None;
                for d in view.devices.iter().filter(|d| task.fits(d)) {
                    let j = d.index as usize;
                    let start = start_on(j);
                    if best.is_none_or(|(s, _)| start.total_cmp(&s).is_lt()) {
                        best = Some((start, j));
                    }
                }
                let Some((_, j)) = best else {
                    continue; // no online device holds it right now: leave it pending
                };
                rvec![j as u32]
            } else {
                valid.clear();
                valid.extend(
                    view.devices
                        .iter()
                        .filter(|d| task.fits_as(d, task.gpus))
                        .map(|d| d.index as usize),
                );
                if valid.len() < k {
                    continue; // not enough online devices for it right now: leave it pending
                }
                // Stable sort keeps index order among equal starts.
                valid.sort_by(|&a, &b| start_on(a).total_cmp(&start_on(b)));
                valid[..k].iter().map(|&j| j as u32).collect()
            };
            let start = chosen
                .iter()
                .map(|&j| start_on(j as usize))
                .fold(view.now, f64::max);
            let runtime = chosen
                .iter()
                .map(|&j| task.runtime_on(&view.devices[j as usize]))
                .fold(0.0, f64::max);
            for &j in &chosen {
                avail[j as usize] = start + runtime;
            }
            decisions.push(Decision::Assign {
                task: key,
                devices: chosen,
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
    new: |_params: &[gpu_agent_plugin_api::Param]| Ok::<_, String>(Fifo::default()),
}
