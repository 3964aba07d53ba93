//! Everything readable about one GPU, read at once: what `gpuctl inspect`
//! prints and what the daemon publishes per device.

use serde::Serialize;

use super::{
    optional, ClockDomain, ClockReadings, DeviceInfo, GpuBackend, GpuInstance, GpuInstanceProfile,
    GpuProcess, MemoryInfo, MigDevice, MigMode, PowerLimits, Result, SupportedClocks, Utilization,
};

/// The readings of one GPU. A reading the device does not support is `None`
/// (or empty, for lists).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Snapshot {
    /// Identity.
    pub info: DeviceInfo,
    /// Memory.
    pub memory: MemoryInfo,
    /// Core clock readings.
    pub core_clock: ClockReadings,
    /// Memory clock readings.
    pub memory_clock: ClockReadings,
    /// Supported clock table.
    pub supported_clocks: Option<Vec<SupportedClocks>>,
    /// Power now, mW.
    pub power_mw: Option<u32>,
    /// Power limit and constraints.
    pub power_limits: Option<PowerLimits>,
    /// Energy counter, mJ.
    pub energy_mj: Option<u64>,
    /// Utilisation.
    pub utilization: Option<Utilization>,
    /// Temperature, °C.
    pub temperature_c: Option<u32>,
    /// Compute processes.
    pub processes: Vec<GpuProcess>,
    /// MIG mode (`None` without MIG).
    pub mig_mode: Option<MigMode>,
    /// GPU-instance profiles (empty without MIG).
    pub gpu_instance_profiles: Vec<GpuInstanceProfile>,
    /// GPU instances (empty while MIG is off).
    pub gpu_instances: Vec<GpuInstance>,
    /// MIG devices (empty while MIG is off).
    pub mig_devices: Vec<MigDevice>,
}

impl Snapshot {
    /// Reads GPU `gpu`; changes nothing.
    pub fn read(b: &dyn GpuBackend, gpu: u32) -> Result<Snapshot> {
        let mig_mode = b.mig_mode(gpu)?;
        Ok(Snapshot {
            info: b.device_info(gpu)?,
            memory: b.memory(gpu)?,
            core_clock: b.clocks(gpu, ClockDomain::Core)?,
            memory_clock: b.clocks(gpu, ClockDomain::Memory)?,
            supported_clocks: optional(b.supported_clocks(gpu))?,
            power_mw: b.power_usage_mw(gpu)?,
            power_limits: optional(b.power_limits(gpu))?,
            energy_mj: b.energy_mj(gpu)?,
            utilization: b.utilization(gpu)?,
            temperature_c: b.temperature_c(gpu)?,
            processes: b.processes(gpu)?,
            mig_mode,
            gpu_instance_profiles: match mig_mode {
                Some(_) => optional(b.gpu_instance_profiles(gpu))?.unwrap_or_default(),
                None => Vec::new(),
            },
            gpu_instances: b.gpu_instances(gpu)?,
            mig_devices: b.mig_devices(gpu)?,
        })
    }
}
