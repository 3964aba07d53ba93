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

// abi_stable 0.11's derives put impls inside constants.
#![allow(non_local_definitions)]

use gpu_agent_plugin_api::{
    abi_stable::std_types::ROption, Decision, Event, PolicyImpl, Task, View,
};

/// The greedy earliest-finish-time policy. It keeps no state.
#[derive(Debug, Default)]
pub struct GreedyEft;

impl PolicyImpl for GreedyEft {
    fn on_event(&mut self, view: &View<'_>, _event: &Event) -> Result<Vec<Decision>, String> {
        let mut avail: Vec<f64> = view.devices.iter().map(|d| d.available_at).collect();
        let mut decisions = Vec::new();
        for &key in view.pending.iter() {
            let task = view.task(key);
            let Some((chosen, end)) = choose(view, task, &avail) else {
                // Not enough online devices for it right now: leave it pending.
                continue;
            };
            for &j in &chosen {
                avail[j as usize] = end;
            }
            decisions.push(Decision::Assign {
                task: key,
                devices: chosen.into(),
                position: ROption::RNone,
                clocks: ROption::RNone,
            });
        }
        Ok(decisions)
    }
}

/// The devices for `task` and its completion time, or `None` when too few fit.
fn choose(view: &View<'_>, task: &Task, avail: &[f64]) -> Option<(Vec<u32>, f64)> {
    let devices = view.devices.as_slice();
    let start_on = |j: usize| avail[j].max(view.now);
    if task.gpus == 1 {
        let mut best: Option<(u32, f64)> = None;
        for d in devices.iter().filter(|d| task.fits(d)) {
            let end = start_on(d.index as usize) + task.runtime_on(d);
            if best.is_none_or(|(_, b)| end < b) {
                best = Some((d.index, end));
            }
        }
        return best.map(|(j, end)| (vec![j], end));
    }

    let k = task.gpus as usize;
    let mut valid: Vec<usize> = devices
        .iter()
        .filter(|d| task.fits(d))
        .map(|d| d.index as usize)
        .collect();
    if valid.len() < k {
        return None;
    }
    valid.sort_by(|&a, &b| start_on(a).total_cmp(&start_on(b)));
    // Walk the devices by start, keeping the k fastest seen so far, ordered by
    // (run time, index); evaluate at the end of each run of equal starts.
    let runtime = |j: usize| task.runtime_on(&devices[j]);
    let mut fastest: Vec<(f64, usize)> = Vec::with_capacity(k + 1);
    let mut best: Option<(Vec<u32>, f64)> = None;
    for (n, &j) in valid.iter().enumerate() {
        let entry = (runtime(j), j);
        let at = fastest.partition_point(|&(r, i)| r.total_cmp(&entry.0).then(i.cmp(&j)).is_lt());
        if at < k {
            fastest.insert(at, entry);
            fastest.truncate(k);
        }
        let boundary = valid
            .get(n + 1)
            .is_none_or(|&next| start_on(next) != start_on(j));
        if fastest.len() < k || !boundary {
            continue;
        }
        let start = fastest
            .iter()
            .map(|&(_, i)| start_on(i))
            .fold(view.now, f64::max);
        let end = start + fastest[k - 1].0;
        if best.as_ref().is_none_or(|(_, b)| end < *b) {
            let mut chosen: Vec<u32> = fastest.iter().map(|&(_, i)| i as u32).collect();
            chosen.sort_unstable();
            best = Some((chosen, end));
        }
    }
    best
}

gpu_agent_plugin_api::export_policy! {
    name: "greedy-eft",
    description: "greedy earliest finish time on heterogeneous devices",
    parameters: [],
    new: |_params: &[gpu_agent_plugin_api::Param]| Ok::<_, String>(GreedyEft),
}
