//! GPU health: devices going offline on the backend's events or an admin's
//! drain, and coming back when an admin says so.
//!
//! A GPU-lost event or a critical XID (`gpu_agent_backend::xid`) takes a
//! device offline: the core returns its local queue to the pending queue
//! and answers `Interrupt` for its running task, which then ends `failed`
//! (or is queued again with `requeue`). An admin's `SetDeviceOnline(gpu,
//! false)` drains it instead: its running task runs to its end.
//!
//! Health is stored (meta `health.<index>`) before anything acts on it, so a
//! restarted daemon keeps an offline device offline: a GPU with an
//! uncorrectable error must not take work again because the daemon was
//! restarted. It comes back only with `SetDeviceOnline(gpu, true)`, which
//! first probes the GPU through the backend and is refused while the GPU
//! does not answer (a GPU that fell off the bus needs a reset, often a
//! reboot, before NVML reaches it again): ARCHITECTURE.md, invariant 20.

use gpu_agent_backend::xid::{self, Verdict};
use gpu_agent_backend::DeviceEvent;
use gpu_agent_core::host::{DeviceSpec, Partition};
use gpu_agent_core::Input;
use gpu_agent_dbus::AgentError;

use super::{Engine, Notice, Round};
use crate::layout::Target;
use crate::states::Health;
use crate::store::{Op, Store, StoreError};

/// Where a device's health is stored.
fn meta_key(gpu: u32) -> String {
    format!("health.{gpu}")
}

/// The health a device takes no placement for by its partition (not
/// stored: it follows the layout): `mig` for a split GPU, `retired` for a
/// retired MIG instance, else `ok`.
pub fn of_partition(spec: &DeviceSpec) -> Health {
    match spec.partition {
        Partition::Split { .. } => Health::Split,
        Partition::Retired(_) => Health::Retired,
        Partition::Whole | Partition::Mig(_) => Health::Ok,
    }
}

/// Each device's health: for a schedulable one, what was stored unless
/// `ok`, else `no-uuid` when `targets` has no UUID for it, else `ok`; its
/// partition's for the others.
pub(super) fn stored(
    store: &Store,
    devices: &[DeviceSpec],
    targets: &[Target],
) -> Result<Vec<Health>, StoreError> {
    devices
        .iter()
        .map(|d| match of_partition(d) {
            Health::Ok => Ok(store
                .meta(&meta_key(d.index))?
                .map(|h| Health::parse(&h))
                .filter(|h| !h.is_ok())
                .unwrap_or_else(|| of_target(targets.get(d.index as usize)))),
            other => Ok(other),
        })
        .collect()
}

/// The health a schedulable device's target gives it: `no-uuid` without a
/// UUID, else `ok`.
pub fn of_target(target: Option<&Target>) -> Health {
    match target {
        Some(t) if !t.uuid.is_empty() => Health::Ok,
        _ => Health::NoUuid,
    }
}

impl Engine {
    /// Takes the devices whose stored health is not `ok` offline before any
    /// task is restored, and tells the bus objects.
    pub(super) fn restore_health(&mut self, health: Vec<Health>, round: &mut Round) {
        let now = self.time.model_now();
        for (gpu, h) in health.iter().enumerate() {
            let gpu = gpu as u32;
            if ![Health::Ok, Health::Split, Health::Retired].contains(h) {
                if *h == Health::NoUuid {
                    log::error!(
                        "device {gpu} takes no task: its UUID could not be read from the GPU driver (health {h})"
                    );
                } else {
                    log::warn!(
                        "GPU {gpu} stays offline ({h}), as before the restart; `gpuctl devices online {gpu}` brings it back"
                    );
                }
                let offline = Input::Offline {
                    device: gpu,
                    interrupt: false,
                };
                // Nothing is placed or running yet: no action follows.
                let actions = self.core.handle(now, offline);
                self.apply(actions, round);
                round.notice(Notice::DeviceHealth {
                    device: gpu,
                    online: false,
                    health: h.clone(),
                });
            }
        }
        self.health = health;
    }

    /// Acts on one event from the backend.
    pub(super) fn device_event(&mut self, event: DeviceEvent, round: &mut Round) {
        match xid::verdict(event.kind) {
            Verdict::Online(why) => log::warn!("GPU {}: {why}", event.gpu),
            Verdict::Offline(failure) => {
                let health = Health::Failed(failure);
                // A split GPU's failure is its instances'.
                let instances: Vec<u32> = self
                    .devices
                    .iter()
                    .filter(|d| d.schedulable() && d.mig().is_some_and(|m| m.parent == event.gpu))
                    .map(|d| d.index)
                    .collect();
                for d in instances {
                    self.take_offline(d, health.clone(), true, round);
                }
                if self
                    .health
                    .get(event.gpu as usize)
                    .is_some_and(|h| *h != Health::Split)
                {
                    self.take_offline(event.gpu, health, true, round)
                }
            }
        }
    }

    /// `SetDeviceOnline`: brings `gpu` back (after probing it) or drains it.
    pub(super) fn set_device_online(
        &mut self,
        gpu: u32,
        online: bool,
        round: &mut Round,
    ) -> Result<(), AgentError> {
        let Some(health) = self.health.get(gpu as usize) else {
            return Err(AgentError::NoSuchDevice(format!(
                "no GPU {gpu}; this host has {}",
                self.health.len()
            )));
        };
        if [Health::Split, Health::Retired].contains(health) {
            return Err(AgentError::NotSupported(format!(
                "device {gpu} takes no work ({}); {}",
                if *health == Health::Split {
                    "its GPU is split into MIG instances"
                } else {
                    "a MIG layout change retired it"
                },
                "its GPU's MIG devices do (gpuctl devices)"
            )));
        }
        if !online {
            self.take_offline(gpu, Health::Drained, false, round);
            return Ok(());
        }
        if of_target(self.target(gpu).as_ref()) == Health::NoUuid {
            return Err(AgentError::Failed(format!(
                "device {gpu} stays offline ({}): its UUID could not be read from the GPU driver, \
                 so no task could be shown it in CUDA_VISIBLE_DEVICES; restarting the daemon, \
                 or applying its GPU's MIG layout again, reads it again",
                Health::NoUuid
            )));
        }
        if health.is_ok() {
            return Ok(());
        }
        let was = health.clone();
        let probe = self.target(gpu).map_or(gpu, |t| t.gpu);
        self.backend.device_info(probe).map_err(|e| {
            AgentError::Failed(format!(
                "GPU {gpu} stays offline ({was}): it does not answer: {e}"
            ))
        })?;
        log::info!("GPU {gpu} is back online (was {was})");
        self.set_health(gpu, Health::Ok, round);
        if self.is_adopted(gpu) {
            log::info!("GPU {gpu} stays occupied by its adopted task until `Release`");
            return Ok(());
        }
        let now = self.time.model_now();
        let actions = self.decide(|core| core.handle(now, Input::Online { device: gpu }));
        self.apply(actions, round);
        Ok(())
    }

    /// Takes `gpu` offline with `health`; `interrupt`: its running task is
    /// stopped (it failed), else it drains.
    fn take_offline(&mut self, gpu: u32, health: Health, interrupt: bool, round: &mut Round) {
        let Some(was) = self.health.get(gpu as usize).cloned() else {
            log::warn!("an event names GPU {gpu}, which this daemon does not schedule");
            return;
        };
        // The same report again, or a drain of a device already offline.
        if was == health || (!interrupt && !was.is_ok()) {
            return;
        }
        if interrupt {
            log::error!("GPU {gpu} goes offline: {health}; its running task is stopped and nothing is placed on it until `gpuctl devices online {gpu}`");
        } else {
            log::warn!("GPU {gpu} is drained: its running task ends as it would, and nothing else is placed on it until `gpuctl devices online {gpu}`");
        }
        self.set_health(gpu, health, round);
        if !self.stopping {
            let now = self.time.model_now();
            let offline = Input::Offline {
                device: gpu,
                interrupt,
            };
            let actions = self.decide(|core| core.handle(now, offline));
            self.apply(actions, round);
        }
    }

    /// Records, stores and shows `gpu`'s new health.
    fn set_health(&mut self, gpu: u32, health: Health, round: &mut Round) {
        round
            .ops
            .push(Op::SetMeta(meta_key(gpu), health.to_string()));
        round.notice(Notice::DeviceHealth {
            device: gpu,
            online: health.is_ok(),
            health: health.clone(),
        });
        self.health[gpu as usize] = health;
    }

    /// Why a task on `gpu` was stopped.
    pub(super) fn interrupt_reason(&self, gpu: u32) -> String {
        match self.health.get(gpu as usize) {
            Some(health) => format!("GPU {gpu} went offline ({health})"),
            None => format!("GPU {gpu} went offline (?)"),
        }
    }
}
