//! MIG instances as the engine's devices: where each device's work runs
//! (`crate::layout::Target`), what a run on an instance is charged, and
//! [`Engine::layout_applied`], the step that makes a new layout's instances
//! devices everywhere (engine, store, bus objects).
//!
//! Clocks belong to the physical GPU: the engine locks clocks only on whole
//! GPUs (a task's DVFS clocks and the idle lock alike), so a task on one
//! instance never changes its siblings' clocks. The core offers an instance
//! only the default clock point, so no decision asks for more.

use gpu_agent_core::host::{DeviceSpec, Partition};
use gpu_agent_core::scheduler::Repartition;
use gpu_agent_core::Input;

use super::health;
use super::{lifecycle::IdleLock, Engine, Notice, Round};
use crate::layout::{self, Target};
use crate::states::Health;
use crate::store::Op;

impl Engine {
    /// Where device `d`'s work runs.
    pub(super) fn target(&self, d: u32) -> Option<Target> {
        layout::get(&self.targets, d)
    }

    /// Whether device `d` is a whole GPU (not split, not a MIG instance).
    pub(super) fn is_whole(&self, d: u32) -> bool {
        self.devices
            .get(d as usize)
            .is_some_and(|s| s.partition == Partition::Whole)
    }

    /// The energy counter a run on device `d` reads (mJ): its GPU's.
    pub(super) fn energy_counter(&self, d: u32) -> Option<u64> {
        let gpu = self.target(d).map_or(d, |t| t.gpu);
        self.backend.energy_mj(gpu).ok().flatten()
    }

    /// The share of its counter's increase a run on device `d` is charged:
    /// compute slices / 7 on a MIG instance (the GPU's counter split by
    /// compute slices, whatever its siblings run), 1 on a whole GPU.
    pub(super) fn energy_share(&self, d: u32) -> f64 {
        self.devices
            .get(d as usize)
            .map_or(1.0, Target::energy_share)
    }

    /// Makes a layout change of GPU `gpu` seen everywhere, once the backend
    /// has the new instances and `Core::mig_applied` (or
    /// `Core::repartition`) made it in the core (`change`): reads their MIG
    /// devices (UUIDs, GPU- and compute-instance ids), grows the per-device
    /// state, stores the MIG slots (with this round) and tells the bus side,
    /// which serves a `Device1` object for each new instance and withdraws
    /// each retired one's; each device's `Online` follows the core.
    pub(super) fn layout_applied(&mut self, gpu: u32, change: &Repartition, round: &mut Round) {
        self.devices = self.core.devices().cloned().collect();
        let fresh: Vec<Target> = self
            .devices
            .iter()
            .map(|d| {
                let known = self.target(d.index);
                let touched = d.index == gpu
                    || change.devices.contains(&d.index)
                    || change.retired.contains(&d.index);
                match known {
                    Some(t) if !touched => t,
                    _ => Target::read(&*self.backend, d),
                }
            })
            .collect();
        *self.targets.write().unwrap_or_else(|e| e.into_inner()) = fresh.clone();
        self.idle.resize(self.devices.len(), IdleLock::default());
        let added: Vec<(DeviceSpec, Target)> = self
            .devices
            .iter()
            .filter(|d| d.index as usize >= self.health.len())
            .map(|d| (d.clone(), fresh[d.index as usize].clone()))
            .collect();
        self.health.resize(self.devices.len(), Health::Ok);
        for d in change.retired.iter().chain([&gpu]) {
            let health = health::of_partition(&self.devices[*d as usize]);
            // A whole GPU keeps a failure it had; the rest follow the layout.
            if !health.is_ok() || self.health[*d as usize] == Health::Split {
                self.health[*d as usize] = health;
            }
        }
        for &d in &change.devices {
            self.follow_uuid(d, round);
        }
        round.ops.push(Op::SetMeta(
            layout::META_KEY.into(),
            layout::encode(&self.devices),
        ));
        round.notice(Notice::DevicesChanged {
            gpu: self.devices[gpu as usize].clone(),
            added,
            retired: change
                .retired
                .iter()
                .map(|&d| self.devices[d as usize].clone())
                .collect(),
        });
        for &d in change.retired.iter().chain([&gpu]).chain(&change.devices) {
            round.notice(Notice::DeviceHealth {
                device: d,
                online: self.core.online(d),
                health: self.health[d as usize].clone(),
            });
        }
    }

    /// Keeps schedulable device `d`, which a layout change just made or
    /// kept, offline in the core with health `no-uuid` while its UUID is
    /// unknown (no task could be shown it in `CUDA_VISIBLE_DEVICES`), and
    /// lets it take work again once a later change read it.
    fn follow_uuid(&mut self, d: u32, round: &mut Round) {
        let Some(spec) = self.devices.get(d as usize) else {
            return;
        };
        if !spec.schedulable() {
            return;
        }
        let i = d as usize;
        match health::of_target(self.target(d).as_ref()) {
            Health::NoUuid if self.core.online(d) => {
                log::error!(
                    "device {d} takes no task: its UUID could not be read from the GPU driver (health {})",
                    Health::NoUuid
                );
                self.health[i] = Health::NoUuid;
                let now = self.time.model_now();
                let offline = Input::Offline {
                    device: d,
                    interrupt: false,
                };
                let actions = self.decide(|core| core.handle(now, offline));
                self.apply(actions, round);
            }
            Health::Ok if self.health[i] == Health::NoUuid => self.health[i] = Health::Ok,
            _ => {}
        }
    }
}
