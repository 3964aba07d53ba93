//! When each device is expected to be free: its running task, then its local
//! queue in order, gang tasks starting when the last of their devices is free
//! (`available_at`, ARCHITECTURE.md, invariant 7).
//!
//! The projection is kept up as queues change (`Core`'s `enqueue`, `vacate`)
//! and walked from scratch only when that cannot be done in O(1): a task
//! taken out of the middle of a queue or inserted into it, queues going back
//! to pending, a run that ends off its expected time on a device with a gang
//! task queued.

use gpu_agent_plugin_api::TaskKey;

use super::table::Table;
use super::Slot;

/// Recomputes every slot's `projected_free` from scratch at `now`.
///
/// Gang tasks only ever join the end of queues, so their relative order agrees
/// on every device they share and the walk below always makes progress.
pub(super) fn recompute(slots: &mut [Slot], tasks: &Table, now: f64) {
    let free = walk(slots, tasks, now, |_, _| false);
    let runtime_of = |key: TaskKey| tasks.placement(key);
    for (slot, f) in slots.iter_mut().zip(free) {
        slot.projected_free = f;
        slot.view_stale = true;
        // Summed afresh: no rounding carried over from the queue's changes.
        slot.queued_work = slot
            .live_queue()
            .iter()
            .map(|&key| runtime_of(key).runtime)
            .sum();
        debug_assert_eq!(
            slot.queued_gangs as usize,
            slot.live_queue()
                .iter()
                .filter(|&&key| runtime_of(key).devices.len() > 1)
                .count(),
            "queued gang tasks miscounted"
        );
    }
}

/// When the current plan starts `key`, a queued task (`None` for one in no
/// local queue).
pub(super) fn start_of(slots: &[Slot], tasks: &Table, now: f64, key: TaskKey) -> Option<f64> {
    let mut start = None;
    walk(slots, tasks, now, |k, at| {
        if k == key {
            start = Some(at);
        }
        start.is_some()
    });
    start
}

/// Walks the queues in the order their tasks start, each run taking its
/// expected time, calling `visit` with each task and its start until it
/// answers true; returns when each device is free of what was walked.
fn walk(
    slots: &[Slot],
    tasks: &Table,
    now: f64,
    mut visit: impl FnMut(TaskKey, f64) -> bool,
) -> Vec<f64> {
    let mut free: Vec<f64> = slots
        .iter()
        .map(|s| {
            if s.running.is_some() {
                s.running_until.max(now)
            } else {
                now
            }
        })
        .collect();
    let mut next: Vec<usize> = slots.iter().map(|s| s.head).collect();
    let runtime_of = |key: TaskKey| tasks.placement(key);
    loop {
        let mut progressed = false;
        for d in 0..slots.len() {
            while let Some(&key) = slots[d].queue.get(next[d]) {
                let placement = runtime_of(key);
                let ready = placement
                    .devices
                    .iter()
                    .all(|&g| slots[g as usize].queue.get(next[g as usize]) == Some(&key));
                if !ready {
                    break;
                }
                let start = placement
                    .devices
                    .iter()
                    .map(|&g| free[g as usize])
                    .fold(now, f64::max);
                if visit(key, start) {
                    return free;
                }
                for &g in &placement.devices {
                    free[g as usize] = start + placement.runtime;
                    next[g as usize] += 1;
                }
                progressed = true;
            }
        }
        if !progressed {
            break;
        }
    }
    debug_assert!(
        slots.iter().zip(&next).all(|(s, &n)| n == s.queue.len()),
        "gang tasks out of order"
    );
    free
}

/// Whether idle `slot`'s projection is what [`recompute`] would make of its
/// queue, which holds no gang task, up to rounding (a debug check).
pub(super) fn agrees(slot: &Slot, tasks: &Table, now: f64) -> bool {
    let free = slot.live_queue().iter().fold(now, |free, &key| {
        free.max(now) + tasks.placement(key).runtime
    });
    (slot.projected_free - free).abs() <= 1e-9 * free.abs().max(1.0)
}
