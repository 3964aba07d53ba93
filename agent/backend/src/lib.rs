//! GPU backends: one trait in domain units, a mock that behaves like the driver,
//! and the real NVML backend ([`nvml::NvmlBackend`]).
//!
//! Readings return `Ok(None)` where the device cannot give them, never 0; writes
//! return `Err(NotSupported)` there. Every error names the GPU and the driver
//! call. GPUs are addressed by NVML index.

mod error;
mod instances;
pub mod mock;
pub mod nvml;
mod snapshot;
mod types;
pub mod xid;

#[cfg(test)]
mod conformance;

use std::time::Duration;

pub use error::{optional, BackendError, On, Result};
pub use instances::create_instance;
pub use snapshot::Snapshot;
pub use types::*;

/// GPUs that can be shown a modelled run as a process, so that they draw the
/// power its DVFS profile predicts: the mock. Real GPUs run real processes.
pub trait ModelledLoad: Send + Sync {
    /// Shows `process` running on `gpu`.
    fn start_process(&self, gpu: u32, process: mock::MockProcess) -> Result<()>;
    /// Takes process `pid` off `gpu`.
    fn end_process(&self, gpu: u32, pid: u32) -> Result<()>;
}

/// Everything the agent reads from and does to GPUs.
///
/// Methods take `&self`: a backend is shared by the daemon's tasks and
/// serialises what it must itself.
pub trait GpuBackend: Send + Sync {
    /// How many GPUs there are.
    fn device_count(&self) -> Result<u32>;
    /// What identifies GPU `gpu`.
    fn device_info(&self, gpu: u32) -> Result<DeviceInfo>;
    /// Its memory, total and used.
    fn memory(&self, gpu: u32) -> Result<MemoryInfo>;

    /// Current, default, min and max clock of one domain.
    fn clocks(&self, gpu: u32, domain: ClockDomain) -> Result<ClockReadings>;
    /// The supported clock table, memory clocks highest first.
    fn supported_clocks(&self, gpu: u32) -> Result<Vec<SupportedClocks>>;
    /// Locks the core clock into `range` (the driver rounds to supported clocks).
    fn lock_core_clocks(&self, gpu: u32, range: ClockRange) -> Result<()>;
    /// Undoes `lock_core_clocks`.
    fn reset_core_clocks(&self, gpu: u32) -> Result<()>;
    /// Locks the memory clock into `range`.
    fn lock_memory_clocks(&self, gpu: u32, range: ClockRange) -> Result<()>;
    /// Undoes `lock_memory_clocks`.
    fn reset_memory_clocks(&self, gpu: u32) -> Result<()>;
    /// The application clocks now.
    fn applications_clocks(&self, gpu: u32) -> Result<Option<ClockPair>>;
    /// Sets the application clocks; the pair must be in the supported table.
    fn set_applications_clocks(&self, gpu: u32, clocks: ClockPair) -> Result<()>;
    /// Restores the default application clocks.
    fn reset_applications_clocks(&self, gpu: u32) -> Result<()>;

    /// Power drawn now, mW.
    fn power_usage_mw(&self, gpu: u32) -> Result<Option<u32>>;
    /// Power management limit and its constraints.
    fn power_limits(&self, gpu: u32) -> Result<PowerLimits>;
    /// Sets the power limit, clamped to its constraints; returns the limit set.
    fn set_power_limit(&self, gpu: u32, mw: u32) -> Result<u32>;
    /// Energy used since the driver loaded, mJ; never decreases.
    fn energy_mj(&self, gpu: u32) -> Result<Option<u64>>;
    /// Utilisation.
    fn utilization(&self, gpu: u32) -> Result<Option<Utilization>>;
    /// Temperature, °C.
    fn temperature_c(&self, gpu: u32) -> Result<Option<u32>>;
    /// Compute processes running on the GPU (MIG instances included).
    fn processes(&self, gpu: u32) -> Result<Vec<GpuProcess>>;

    /// MIG mode, `None` on GPUs without MIG.
    fn mig_mode(&self, gpu: u32) -> Result<Option<MigMode>>;
    /// Asks for MIG on or off; it takes effect at the next reset.
    fn set_mig_mode(&self, gpu: u32, enabled: bool) -> Result<MigMode>;
    /// Resets the GPU (applies a pending MIG mode); fails while processes run.
    fn reset_gpu(&self, gpu: u32) -> Result<()>;
    /// GPU-instance profiles with their placements, smallest first
    /// ([`GpuInstanceProfile::smallest_first`]).
    fn gpu_instance_profiles(&self, gpu: u32) -> Result<Vec<GpuInstanceProfile>>;
    /// Creates a GPU instance of `profile_id` at memory slice `start`.
    fn create_gpu_instance(&self, gpu: u32, profile_id: u32, start: u32) -> Result<GpuInstance>;
    /// Destroys a GPU instance; fails while it holds compute instances.
    fn destroy_gpu_instance(&self, gpu: u32, instance: u32) -> Result<()>;
    /// The GPU instances, by id (none while MIG is off or unsupported).
    fn gpu_instances(&self, gpu: u32) -> Result<Vec<GpuInstance>>;
    /// Compute-instance profiles of a GPU instance.
    fn compute_instance_profiles(
        &self,
        gpu: u32,
        gpu_instance: u32,
    ) -> Result<Vec<ComputeInstanceProfile>>;
    /// Creates a compute instance in a GPU instance.
    fn create_compute_instance(
        &self,
        gpu: u32,
        gpu_instance: u32,
        profile_id: u32,
    ) -> Result<ComputeInstance>;
    /// Destroys a compute instance; fails while processes run in it.
    fn destroy_compute_instance(&self, gpu: u32, gpu_instance: u32, instance: u32) -> Result<()>;
    /// The compute instances of a GPU instance, by id.
    fn compute_instances(&self, gpu: u32, gpu_instance: u32) -> Result<Vec<ComputeInstance>>;
    /// The MIG devices (one per compute instance) with their UUIDs (none while
    /// MIG is off or unsupported).
    fn mig_devices(&self, gpu: u32) -> Result<Vec<MigDevice>>;

    /// Waits up to `timeout` for the next XID or GPU-lost event on any GPU.
    fn wait_event(&self, timeout: Duration) -> Result<Option<DeviceEvent>>;
}
