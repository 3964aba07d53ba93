//! A host's schedulable devices (formats.md §2 describes the file they come from).

use gpu_agent_plugin_api::{
    abi_stable::std_types::{ROption, RStr},
    MigInstance,
};

use crate::catalogue::GpuModel;
use crate::mig::MigProfile;
use crate::placement::{Instance, Layout};

/// One device after `count` expansion: a physical GPU or a MIG instance.
#[derive(Debug, Clone, PartialEq)]
pub struct DeviceSpec {
    /// Index: physical GPUs 0.. in file order, then MIG instances (by GPU,
    /// then start; docs/mig.md §6.1).
    pub index: u32,
    /// Catalogue entry (a MIG instance's is its GPU's).
    pub model: &'static GpuModel,
    /// Memory (GB): the catalogue's unless the file overrides it; a MIG
    /// instance's is its profile's.
    pub memory_gb: f64,
    /// Work units per second at default clocks.
    pub speed: f64,
    /// Usage cost per hour (optional in the file, default 0).
    pub cost_per_hour: f64,
    /// Whether it is a whole GPU, a GPU split into MIG instances, or one of
    /// those instances.
    pub partition: Partition,
}

/// What a device is with respect to MIG.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Partition {
    /// A whole GPU: schedulable.
    Whole,
    /// A GPU split into MIG instances: it keeps its index but takes no
    /// placement itself (the core holds it offline); its instances do.
    Split {
        /// Compute slices no instance holds (their share of the GPU's idle
        /// power is the split GPU's own).
        free_slices: u32,
    },
    /// A MIG instance.
    Mig(MigSlot),
    /// A MIG instance a later layout removed: it keeps its index (indices
    /// are never reused, docs/mig.md §6.1) but takes no placement and holds no
    /// share of its GPU.
    Retired(MigSlot),
}

/// Where a MIG instance lies.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct MigSlot {
    /// Index of its GPU (a [`Partition::Split`] device).
    pub parent: u32,
    /// Its GPU-instance profile.
    pub profile: &'static MigProfile,
    /// Its placement start (first memory slice).
    pub start: u32,
}

impl DeviceSpec {
    /// MIG instance `index` of GPU `parent` with `profile` at `start`: the
    /// profile's memory, the GPU's speed and cost times the instance's share
    /// of compute slices (docs/mig.md §6.1).
    pub fn mig_instance(
        index: u32,
        parent: &DeviceSpec,
        profile: &'static MigProfile,
        start: u32,
    ) -> DeviceSpec {
        let mut instance = DeviceSpec {
            index,
            model: parent.model,
            memory_gb: profile.memory_mib as f64 / 1024.0,
            speed: parent.speed,
            cost_per_hour: parent.cost_per_hour,
            partition: Partition::Mig(MigSlot {
                parent: parent.index,
                profile,
                start,
            }),
        };
        let share = instance.power_share();
        instance.speed *= share;
        instance.cost_per_hour *= share;
        instance
    }

    /// Splits this whole GPU as `layout` (of its model's table): it becomes
    /// [`Partition::Split`] and returns its instances, indexed from `first`
    /// in start order.
    pub fn split(&mut self, layout: &[Instance], first: u32) -> Vec<DeviceSpec> {
        let table = self.model.mig.expect("a split GPU's model has MIG");
        let held: u32 = layout.iter().map(|i| i.profile.compute_slices).sum();
        self.partition = Partition::Split {
            free_slices: table.compute_slices - held,
        };
        let mut layout = layout.to_vec();
        layout.sort();
        layout
            .into_iter()
            .zip(first..)
            .map(|(instance, index)| {
                DeviceSpec::mig_instance(index, self, instance.profile, instance.start)
            })
            .collect()
    }

    /// Whether it can take a placement (a split GPU and a retired MIG
    /// instance cannot; a whole GPU and a current instance can).
    pub fn schedulable(&self) -> bool {
        matches!(self.partition, Partition::Whole | Partition::Mig(_))
    }

    /// Its MIG slot, if it is (or was, retired) a MIG instance.
    pub fn mig(&self) -> Option<&MigSlot> {
        match &self.partition {
            Partition::Mig(slot) | Partition::Retired(slot) => Some(slot),
            _ => None,
        }
    }

    /// The share of its GPU's compute, and so of its speed and power, that
    /// it holds: 1 for a whole GPU, compute slices / 7 for a MIG instance,
    /// and for a split GPU the share no instance holds (idle for good). The
    /// shares of a split GPU and its instances add up to 1, so a host draws
    /// the mock's power: the GPU's idle power, plus each busy instance's
    /// share of its task's power above idle. A retired instance holds none.
    pub fn power_share(&self) -> f64 {
        let slices = match &self.partition {
            Partition::Whole => return 1.0,
            Partition::Retired(_) => return 0.0,
            Partition::Split { free_slices } => *free_slices,
            Partition::Mig(slot) => slot.profile.compute_slices,
        };
        let table = self.model.mig.expect("a split GPU's model has MIG");
        f64::from(slices) / f64::from(table.compute_slices)
    }

    /// How reports name it: its index, or for a MIG instance
    /// `GPU/mig/PROFILE@START` (e.g. `0/mig/3g.20gb@4`).
    pub fn label(&self) -> String {
        match self.mig() {
            Some(slot) => format!("{}/mig/{}@{}", slot.parent, slot.profile.name, slot.start),
            None => self.index.to_string(),
        }
    }

    /// What policies see of its MIG slot.
    pub fn mig_view(&self) -> ROption<MigInstance<'static>> {
        self.mig()
            .map(|slot| MigInstance {
                parent: slot.parent,
                profile: RStr::from_str(slot.profile.name),
                start: slot.start,
                compute_slices: slot.profile.compute_slices,
            })
            .into()
    }
}

/// A host: its devices in index order.
#[derive(Debug, Clone, PartialEq)]
pub struct Host {
    /// Devices, indexed by `DeviceSpec::index`.
    pub devices: Vec<DeviceSpec>,
}

impl Host {
    /// One device per model, in order, at speed 1 with the catalogue's memory
    /// and no cost.
    pub fn of_models(models: impl IntoIterator<Item = &'static GpuModel>) -> Host {
        let devices = models
            .into_iter()
            .zip(0..)
            .map(|(model, index)| DeviceSpec {
                index,
                model,
                memory_gb: model.memory_gb,
                speed: 1.0,
                cost_per_hour: 0.0,
                partition: Partition::Whole,
            })
            .collect();
        Host { devices }
    }

    /// The host of whole GPUs `gpus` (indexed 0.. in order) with GPU `g`
    /// split as `layout` for each `(g, layout)` of `layouts` (at most one per
    /// GPU, of its model's table): a split GPU keeps its index, and the MIG
    /// instances take the next indices, by GPU, then start (docs/mig.md §6.1).
    pub fn partitioned(mut gpus: Vec<DeviceSpec>, layouts: &[(u32, Layout)]) -> Host {
        let mut layouts: Vec<&(u32, Layout)> = layouts.iter().collect();
        layouts.sort_by_key(|(g, _)| *g);
        let mut next = gpus.len() as u32;
        let mut instances = Vec::new();
        for (g, layout) in layouts {
            let split = gpus[*g as usize].split(layout, next);
            next += split.len() as u32;
            instances.extend(split);
        }
        gpus.extend(instances);
        Host { devices: gpus }
    }
}
