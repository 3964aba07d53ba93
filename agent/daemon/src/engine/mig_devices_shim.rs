//! Stand-in for the engine side of MIG instances as devices (being built
//! beside this, in `mig_devices.rs`): after a layout change the engine's
//! per-device state follows the core's devices, without bus objects.

use gpu_agent_core::scheduler::Repartition;

use super::{health, lifecycle::IdleLock, Engine, Round};

impl Engine {
    /// The engine's per-device state follows the core's devices after GPU
    /// `gpu`'s layout changed.
    pub(super) fn layout_applied(&mut self, _gpu: u32, _change: &Repartition, _round: &mut Round) {
        self.devices = self.core.devices().cloned().collect();
        self.health.resize(self.devices.len(), health::OK.into());
        self.idle.resize(self.devices.len(), IdleLock::default());
    }

    /// `devices` take work (the core already has them online).
    pub(super) fn devices_online(&mut self, devices: &[u32], round: &mut Round) {
        for &device in devices {
            round.notice(super::Notice::DeviceHealth {
                device,
                online: true,
                health: health::OK.into(),
            });
        }
    }
}
