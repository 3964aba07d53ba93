//! When each device is expected to be free: its running task, then its local
//! queue in order, gang tasks starting when the last of their devices is free.

use gpu_agent_plugin_api::TaskKey;

use super::{Placement, Slot};

/// Recomputes every slot's `projected_free` from scratch at `now`.
///
/// Gang tasks only ever join the end of queues, so their relative order agrees
/// on every device they share and the walk below always makes progress.
pub(super) fn recompute(slots: &mut [Slot], placements: &[Option<Placement>], now: f64) {
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
    let runtime_of = |key: TaskKey| {
        placements[key as usize]
            .as_ref()
            .expect("queued task has a placement")
    };
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
    for (slot, f) in slots.iter_mut().zip(free) {
        slot.projected_free = f;
        slot.view_stale = true;
    }
}
