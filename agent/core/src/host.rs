//! A host's schedulable devices (formats.md §2 describes the file they come from).

use crate::catalogue::GpuModel;

/// One schedulable device after `count` expansion.
#[derive(Debug, Clone, PartialEq)]
pub struct DeviceSpec {
    /// Index, 0.. in file order.
    pub index: u32,
    /// Catalogue entry.
    pub model: &'static GpuModel,
    /// Memory (GB): the catalogue's unless the file overrides it.
    pub memory_gb: f64,
    /// Work units per second at default clocks.
    pub speed: f64,
    /// Usage cost per hour (optional in the file, default 0).
    pub cost_per_hour: f64,
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
            })
            .collect();
        Host { devices }
    }
}
