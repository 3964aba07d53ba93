//! The policies' views of the devices, built once and updated in place: at
//! each call only the devices that changed are rewritten, and the idle ones
//! get the new time as their availability (the view is borrowed:
//! ARCHITECTURE.md, invariant 8).

use gpu_agent_plugin_api::{
    abi_stable::std_types::{RSlice, RStr},
    Device,
};

use super::Slot;

/// One [`Device`] per slot.
pub(crate) struct Views {
    /// The `queue` slices point into the slots' queues as of the last
    /// [`Views::refresh`]; the `'static` is never visible outside this type:
    /// they are read only through the borrow `refresh` returns, which cannot
    /// outlive the slots, and every change to a slot's queue marks it
    /// `view_stale`, so the next refresh rewrites the slice before it is read
    /// again. (No `Debug` here: it would read them.)
    devices: Vec<Device<'static>>,
}

impl Views {
    pub fn new(slots: &[Slot]) -> Views {
        let devices = slots
            .iter()
            .map(|s| Device {
                index: s.spec.index,
                model: RStr::from_str(s.spec.model.name),
                memory_gb: s.spec.memory_gb,
                speed: s.spec.speed,
                cost_per_hour: s.spec.cost_per_hour,
                online: s.online,
                running: None.into(),
                queue: RSlice::EMPTY,
                available_at: 0.0,
                clock_range: s.clock_range,
                default_power: s.default_power,
                mig: s.spec.mig_view(),
            })
            .collect();
        Views { devices }
    }

    /// Goes on with a copy of the views, leaking the originals (see
    /// `Table::retire_lent`); the caller marks every slot `view_stale`, since
    /// the copies' queues point into the leaked queues.
    pub fn retire_lent(&mut self) {
        let copy = self.devices.clone();
        std::mem::forget(std::mem::replace(&mut self.devices, copy));
    }

    /// The views of `slots` (the slots this was made from) at `now`, which
    /// never goes back; clears the slots' `view_stale` marks.
    pub fn refresh<'a>(&'a mut self, slots: &'a mut [Slot], now: f64) -> &'a [Device<'a>] {
        debug_assert_eq!(self.devices.len(), slots.len());
        for (device, slot) in self.devices.iter_mut().zip(slots.iter_mut()) {
            if slot.view_stale {
                slot.view_stale = false;
                let queue = slot.live_queue();
                // SAFETY: `queue` is a live slice of `slots`, which stays
                // borrowed (so unchanged) for as long as the returned views
                // can be read; see the field's comment.
                device.queue = unsafe { RSlice::from_raw_parts(queue.as_ptr(), queue.len()) };
                device.running = slot.running.into();
                device.online = slot.online;
                device.available_at = slot.projected_free.max(now);
            } else {
                debug_assert!(
                    device.queue.as_ptr() == slot.live_queue().as_ptr()
                        && device.queue.len() == slot.live_queue().len(),
                    "device {}'s queue changed without being marked",
                    slot.spec.index
                );
                // Unchanged since it was max(projected_free, an earlier
                // now): max(projected_free, now) without reading the slot's
                // projection.
                if device.available_at < now {
                    device.available_at = now;
                }
            }
        }
        &self.devices
    }
}
