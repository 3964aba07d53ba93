//! The NVML backend: the NVIDIA driver through `nvml-wrapper`, with raw NVML
//! symbols where the wrapper has no call (MIG instances, event registration).

mod errors;
mod events;
mod mig;

use std::path::Path;
use std::sync::{Mutex, MutexGuard, OnceLock, PoisonError};
use std::time::Duration;

use nvml_wrapper::enum_wrappers::device::{Clock, TemperatureSensor};
use nvml_wrapper::enums::device::{DeviceArchitecture, GpuLockedClocksSetting, UsedGpuMemory};
use nvml_wrapper::error::nvml_try;
use nvml_wrapper::error::NvmlError;
use nvml_wrapper::{Device, Nvml};
use nvml_wrapper_sys::bindings::{
    nvmlReturn_enum_NVML_ERROR_INSUFFICIENT_SIZE as INSUFFICIENT_SIZE, NVML_DEVICE_MIG_ENABLE,
};

use self::errors::{on_gpu, on_host};
use self::events::Events;
use self::mig::Mig;
use super::{
    optional, BackendError, ClockDomain, ClockPair, ClockRange, ClockReadings, ComputeInstance,
    ComputeInstanceProfile, DeviceEvent, DeviceInfo, GpuBackend, GpuInstance, GpuInstanceProfile,
    GpuProcess, MemoryInfo, MigDevice, MigMode, PowerLimits, Result, SupportedClocks, Utilization,
};

/// The process's NVML handle.
///
/// `Device` and `EventSet` borrow the `Nvml` they come from, and the backend
/// keeps an `EventSet` between `wait_event` calls. Keeping the `Nvml` in a
/// process-wide static gives those borrows the `'static` lifetime, without a
/// self-referential struct or a leaked handle per backend. NVML is one per
/// process anyway (`nvmlInit` is reference-counted), so every backend shares
/// the first library loaded; the handle is never shut down, which the driver
/// tolerates at exit.
static NVML: OnceLock<Nvml> = OnceLock::new();

/// The real GPUs, through the NVIDIA driver's NVML library.
///
/// Each call takes a fresh device handle by index (a cheap lookup), since the
/// wrapper's setters want `&mut Device` and the trait gives `&self`.
pub struct NvmlBackend {
    nvml: &'static Nvml,
    /// The event set `wait_event` keeps, made on its first call.
    events: Mutex<Events>,
    /// One per GPU, held by calls that use its MIG instance handles, so that
    /// one call cannot destroy an instance another is using; per GPU, so that
    /// a call that hangs in the driver holds up no other GPU's.
    mig: Vec<Mutex<()>>,
    /// The lock of a GPU index past the count (whose calls then fail).
    mig_spare: Mutex<()>,
}

impl NvmlBackend {
    /// Loads NVML from the default library (`libnvidia-ml.so.1`).
    pub fn new() -> Result<NvmlBackend> {
        NvmlBackend::load(Nvml::init())
    }

    /// Loads NVML from `path`. The library is loaded and checked even when
    /// another backend already has one; the process then shares the first.
    pub fn with_library(path: &Path) -> Result<NvmlBackend> {
        NvmlBackend::load(Nvml::builder().lib_path(path.as_os_str()).init())
    }

    fn load(loaded: std::result::Result<Nvml, NvmlError>) -> Result<NvmlBackend> {
        let loaded = loaded.map_err(errors::load)?;
        // Where a handle is already stored, `loaded` drops here, releasing its
        // reference to NVML.
        let nvml = NVML.get_or_init(|| loaded);
        let count = nvml
            .device_count()
            .map_err(on_host("nvmlDeviceGetCount_v2"))?;
        Ok(NvmlBackend {
            nvml,
            events: Mutex::new(Events::default()),
            mig: (0..count).map(|_| Mutex::new(())).collect(),
            mig_spare: Mutex::new(()),
        })
    }

    fn device(&self, gpu: u32) -> Result<Device<'static>> {
        self.nvml
            .device_by_index(gpu)
            .map_err(on_gpu(gpu, "nvmlDeviceGetHandleByIndex_v2"))
    }

    fn mig_lock(&self, gpu: u32) -> MutexGuard<'_, ()> {
        self.mig
            .get(gpu as usize)
            .unwrap_or(&self.mig_spare)
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }
}

/// The NVML clock type of a domain.
fn clock(domain: ClockDomain) -> Clock {
    match domain {
        ClockDomain::Core => Clock::Graphics,
        ClockDomain::Memory => Clock::Memory,
    }
}

/// `clocks`, highest first, without repeats.
fn highest_first(mut clocks: Vec<u32>) -> Vec<u32> {
    clocks.sort_unstable_by(|a, b| b.cmp(a));
    clocks.dedup();
    clocks
}

/// The lowest core clock of a supported-clock table.
fn lowest_core(table: &[SupportedClocks]) -> Option<u32> {
    table.iter().flat_map(|t| t.core_mhz.iter().copied()).min()
}

/// The lowest supported clock of `domain`; `None` where there is no table.
fn min_clock(device: &Device<'static>, gpu: u32, domain: ClockDomain) -> Result<Option<u32>> {
    Ok(match domain {
        ClockDomain::Core => optional(clock_table(device, gpu))?.and_then(|t| lowest_core(&t)),
        ClockDomain::Memory => optional(
            device
                .supported_memory_clocks()
                .map_err(on_gpu(gpu, "nvmlDeviceGetSupportedMemoryClocks")),
        )?
        .and_then(|clocks| clocks.into_iter().min()),
    })
}

fn clock_table(device: &Device<'static>, gpu: u32) -> Result<Vec<SupportedClocks>> {
    let mems = device
        .supported_memory_clocks()
        .map_err(on_gpu(gpu, "nvmlDeviceGetSupportedMemoryClocks"))?;
    highest_first(mems)
        .into_iter()
        .map(|mem_mhz| {
            let cores = graphics_clocks(device, gpu, mem_mhz)?;
            Ok(SupportedClocks {
                mem_mhz,
                core_mhz: highest_first(cores),
            })
        })
        .collect()
}

/// The core clocks supported at memory clock `mem_mhz`.
///
/// The raw call: the wrapper's `supported_graphics_clocks` reads into 128
/// slots and takes NVML's `INSUFFICIENT_SIZE` for success, so that a GPU with
/// more core clocks than that (a V100 has 187) read as 128 zeros.
fn graphics_clocks(device: &Device<'static>, gpu: u32, mem_mhz: u32) -> Result<Vec<u32>> {
    const CALL: &str = "nvmlDeviceGetSupportedGraphicsClocks";
    let get = errors::symbol(
        gpu,
        CALL,
        &device.nvml().lib().nvmlDeviceGetSupportedGraphicsClocks,
    )?;
    // SAFETY: the handle is only passed to NVML, never freed.
    let handle = unsafe { device.handle() };
    let mut clocks = vec![0; 256];
    loop {
        let mut count = clocks.len() as u32;
        // SAFETY: `clocks` holds `count` slots, as `count` tells NVML.
        let status = unsafe { get(handle, mem_mhz, &mut count, clocks.as_mut_ptr()) };
        if status == INSUFFICIENT_SIZE && count as usize > clocks.len() {
            // NVML says how many it has: ask again with room for them.
            clocks.resize(count as usize, 0);
            continue;
        }
        nvml_try(status).map_err(on_gpu(gpu, CALL))?;
        clocks.truncate(count as usize);
        return Ok(clocks);
    }
}

fn power_limits_of(device: &Device<'static>, gpu: u32) -> Result<PowerLimits> {
    let current_mw = device
        .power_management_limit()
        .map_err(on_gpu(gpu, "nvmlDeviceGetPowerManagementLimit"))?;
    let default_mw = optional(
        device
            .power_management_limit_default()
            .map_err(on_gpu(gpu, "nvmlDeviceGetPowerManagementDefaultLimit")),
    )?;
    let constraints = device
        .power_management_limit_constraints()
        .map_err(on_gpu(gpu, "nvmlDeviceGetPowerManagementLimitConstraints"))?;
    Ok(PowerLimits {
        current_mw,
        default_mw,
        min_mw: constraints.min_limit,
        max_mw: constraints.max_limit,
    })
}

fn mig_mode_of(device: &Device<'static>, gpu: u32) -> Result<MigMode> {
    let mode = device
        .mig_mode()
        .map_err(on_gpu(gpu, "nvmlDeviceGetMigMode"))?;
    Ok(MigMode {
        current: mode.current == NVML_DEVICE_MIG_ENABLE,
        pending: mode.pending == NVML_DEVICE_MIG_ENABLE,
    })
}

/// Whether MIG is on now (GPUs without MIG have it off); with it off there
/// are no GPU instances or MIG devices to list.
fn mig_enabled(device: &Device<'static>, gpu: u32) -> Result<bool> {
    Ok(optional(mig_mode_of(device, gpu))?.is_some_and(|mode| mode.current))
}

fn architecture(device: &Device<'static>, gpu: u32) -> Result<Option<String>> {
    match device.architecture() {
        Ok(DeviceArchitecture::Unknown) => Ok(None),
        // NVIDIA's name, the catalogue's (the wrapper says "Ada").
        Ok(DeviceArchitecture::Ada) => Ok(Some("Ada Lovelace".into())),
        Ok(arch) => Ok(Some(arch.to_string())),
        // An architecture newer than the wrapper knows: the driver names it,
        // but not in words we have.
        Err(NvmlError::UnexpectedVariant(_)) => Ok(None),
        Err(err) => optional(Err(on_gpu(gpu, "nvmlDeviceGetArchitecture")(err))),
    }
}

impl GpuBackend for NvmlBackend {
    fn device_count(&self) -> Result<u32> {
        self.nvml
            .device_count()
            .map_err(on_host("nvmlDeviceGetCount_v2"))
    }

    fn device_info(&self, gpu: u32) -> Result<DeviceInfo> {
        let device = self.device(gpu)?;
        let pci = device
            .pci_info()
            .map_err(on_gpu(gpu, "nvmlDeviceGetPciInfo_v3"))?;
        Ok(DeviceInfo {
            index: gpu,
            uuid: device.uuid().map_err(on_gpu(gpu, "nvmlDeviceGetUUID"))?,
            name: device.name().map_err(on_gpu(gpu, "nvmlDeviceGetName"))?,
            pci_bus_id: pci.bus_id,
            pci_device_id: pci.pci_device_id,
            // 0 is no subsystem id: the driver has none to report.
            pci_subsystem_id: pci.pci_sub_system_id.filter(|&id| id != 0),
            architecture: architecture(&device, gpu)?,
            mig_capable: optional(mig_mode_of(&device, gpu))?.is_some(),
        })
    }

    fn memory(&self, gpu: u32) -> Result<MemoryInfo> {
        let memory = self
            .device(gpu)?
            .memory_info()
            .map_err(on_gpu(gpu, "nvmlDeviceGetMemoryInfo_v2"))?;
        Ok(MemoryInfo {
            total_bytes: memory.total,
            used_bytes: memory.used,
        })
    }

    fn clocks(&self, gpu: u32, domain: ClockDomain) -> Result<ClockReadings> {
        let device = self.device(gpu)?;
        let clock = clock(domain);
        Ok(ClockReadings {
            current: optional(
                device
                    .clock_info(clock)
                    .map_err(on_gpu(gpu, "nvmlDeviceGetClockInfo")),
            )?,
            default: optional(
                device
                    .default_applications_clock(clock)
                    .map_err(on_gpu(gpu, "nvmlDeviceGetDefaultApplicationsClock")),
            )?,
            min: min_clock(&device, gpu, domain)?,
            max: optional(
                device
                    .max_clock_info(clock)
                    .map_err(on_gpu(gpu, "nvmlDeviceGetMaxClockInfo")),
            )?,
        })
    }

    fn supported_clocks(&self, gpu: u32) -> Result<Vec<SupportedClocks>> {
        clock_table(&self.device(gpu)?, gpu)
    }

    fn lock_core_clocks(&self, gpu: u32, range: ClockRange) -> Result<()> {
        const CALL: &str = "nvmlDeviceSetGpuLockedClocks";
        range.check(gpu, CALL)?;
        self.device(gpu)?
            .set_gpu_locked_clocks(GpuLockedClocksSetting::Numeric {
                min_clock_mhz: range.min_mhz,
                max_clock_mhz: range.max_mhz,
            })
            .map_err(on_gpu(gpu, CALL))
    }

    fn reset_core_clocks(&self, gpu: u32) -> Result<()> {
        self.device(gpu)?
            .reset_gpu_locked_clocks()
            .map_err(on_gpu(gpu, "nvmlDeviceResetGpuLockedClocks"))
    }

    fn lock_memory_clocks(&self, gpu: u32, range: ClockRange) -> Result<()> {
        const CALL: &str = "nvmlDeviceSetMemoryLockedClocks";
        range.check(gpu, CALL)?;
        self.device(gpu)?
            .set_mem_locked_clocks(range.min_mhz, range.max_mhz)
            .map_err(on_gpu(gpu, CALL))
    }

    fn reset_memory_clocks(&self, gpu: u32) -> Result<()> {
        self.device(gpu)?
            .reset_mem_locked_clocks()
            .map_err(on_gpu(gpu, "nvmlDeviceResetMemoryLockedClocks"))
    }

    fn applications_clocks(&self, gpu: u32) -> Result<Option<ClockPair>> {
        const CALL: &str = "nvmlDeviceGetApplicationsClock";
        let device = self.device(gpu)?;
        let core = optional(
            device
                .applications_clock(Clock::Graphics)
                .map_err(on_gpu(gpu, CALL)),
        )?;
        let mem = optional(
            device
                .applications_clock(Clock::Memory)
                .map_err(on_gpu(gpu, CALL)),
        )?;
        Ok(core
            .zip(mem)
            .map(|(core_mhz, mem_mhz)| ClockPair { core_mhz, mem_mhz }))
    }

    fn set_applications_clocks(&self, gpu: u32, clocks: ClockPair) -> Result<()> {
        self.device(gpu)?
            .set_applications_clocks(clocks.mem_mhz, clocks.core_mhz)
            .map_err(on_gpu(gpu, "nvmlDeviceSetApplicationsClocks"))
    }

    fn reset_applications_clocks(&self, gpu: u32) -> Result<()> {
        self.device(gpu)?
            .reset_applications_clocks()
            .map_err(on_gpu(gpu, "nvmlDeviceResetApplicationsClocks"))
    }

    fn power_usage_mw(&self, gpu: u32) -> Result<Option<u32>> {
        optional(
            self.device(gpu)?
                .power_usage()
                .map_err(on_gpu(gpu, "nvmlDeviceGetPowerUsage")),
        )
    }

    fn power_limits(&self, gpu: u32) -> Result<PowerLimits> {
        power_limits_of(&self.device(gpu)?, gpu)
    }

    fn set_power_limit(&self, gpu: u32, mw: u32) -> Result<u32> {
        let mut device = self.device(gpu)?;
        let mw = power_limits_of(&device, gpu)?.clamp(mw);
        device
            .set_power_management_limit(mw)
            .map_err(on_gpu(gpu, "nvmlDeviceSetPowerManagementLimit"))?;
        Ok(mw)
    }

    fn energy_mj(&self, gpu: u32) -> Result<Option<u64>> {
        optional(
            self.device(gpu)?
                .total_energy_consumption()
                .map_err(on_gpu(gpu, "nvmlDeviceGetTotalEnergyConsumption")),
        )
    }

    fn utilization(&self, gpu: u32) -> Result<Option<Utilization>> {
        let rates = optional(
            self.device(gpu)?
                .utilization_rates()
                .map_err(on_gpu(gpu, "nvmlDeviceGetUtilizationRates")),
        )?;
        Ok(rates.map(|u| Utilization {
            gpu_pct: u.gpu,
            memory_pct: u.memory,
        }))
    }

    fn temperature_c(&self, gpu: u32) -> Result<Option<u32>> {
        optional(
            self.device(gpu)?
                .temperature(TemperatureSensor::Gpu)
                .map_err(on_gpu(gpu, "nvmlDeviceGetTemperature")),
        )
    }

    fn processes(&self, gpu: u32) -> Result<Vec<GpuProcess>> {
        let processes = self
            .device(gpu)?
            .running_compute_processes()
            .map_err(on_gpu(gpu, "nvmlDeviceGetComputeRunningProcesses_v3"))?;
        Ok(processes
            .into_iter()
            .map(|p| GpuProcess {
                pid: p.pid,
                used_bytes: match p.used_gpu_memory {
                    UsedGpuMemory::Used(bytes) => Some(bytes),
                    UsedGpuMemory::Unavailable => None,
                },
                gpu_instance: p.gpu_instance_id,
                compute_instance: p.compute_instance_id,
            })
            .collect())
    }

    fn mig_mode(&self, gpu: u32) -> Result<Option<MigMode>> {
        optional(mig_mode_of(&self.device(gpu)?, gpu))
    }

    fn set_mig_mode(&self, gpu: u32, enabled: bool) -> Result<MigMode> {
        let _mig = self.mig_lock(gpu);
        // The activation status says whether the mode took effect at once or
        // waits for a reset; the modes read back below say the same.
        let status = self
            .device(gpu)?
            .set_mig_mode(enabled)
            .map_err(on_gpu(gpu, "nvmlDeviceSetMigMode"))?;
        log::debug!("GPU {gpu}: nvmlDeviceSetMigMode activation status {status}");
        // Setting the mode may rebind the GPU: read back through a fresh handle.
        mig_mode_of(&self.device(gpu)?, gpu)
    }

    fn reset_gpu(&self, gpu: u32) -> Result<()> {
        // NVML has no public GPU reset (nvidia-smi resets through the driver's
        // private interface).
        Err(BackendError::not_supported(
            gpu,
            "nvmlDeviceResetGpu (not in NVML; use nvidia-smi --gpu-reset)",
        ))
    }

    fn gpu_instance_profiles(&self, gpu: u32) -> Result<Vec<GpuInstanceProfile>> {
        Mig::new(&self.device(gpu)?, gpu).gpu_instance_profiles()
    }

    fn create_gpu_instance(&self, gpu: u32, profile_id: u32, start: u32) -> Result<GpuInstance> {
        let _mig = self.mig_lock(gpu);
        Mig::new(&self.device(gpu)?, gpu).create_gpu_instance(profile_id, start)
    }

    fn destroy_gpu_instance(&self, gpu: u32, instance: u32) -> Result<()> {
        let _mig = self.mig_lock(gpu);
        Mig::new(&self.device(gpu)?, gpu).destroy_gpu_instance(instance)
    }

    fn gpu_instances(&self, gpu: u32) -> Result<Vec<GpuInstance>> {
        let _mig = self.mig_lock(gpu);
        let device = self.device(gpu)?;
        if !mig_enabled(&device, gpu)? {
            return Ok(Vec::new());
        }
        Mig::new(&device, gpu).gpu_instances()
    }

    fn compute_instance_profiles(
        &self,
        gpu: u32,
        gpu_instance: u32,
    ) -> Result<Vec<ComputeInstanceProfile>> {
        let _mig = self.mig_lock(gpu);
        Mig::new(&self.device(gpu)?, gpu).compute_instance_profiles(gpu_instance)
    }

    fn create_compute_instance(
        &self,
        gpu: u32,
        gpu_instance: u32,
        profile_id: u32,
    ) -> Result<ComputeInstance> {
        let _mig = self.mig_lock(gpu);
        Mig::new(&self.device(gpu)?, gpu).create_compute_instance(gpu_instance, profile_id)
    }

    fn destroy_compute_instance(&self, gpu: u32, gpu_instance: u32, instance: u32) -> Result<()> {
        let _mig = self.mig_lock(gpu);
        Mig::new(&self.device(gpu)?, gpu).destroy_compute_instance(gpu_instance, instance)
    }

    fn compute_instances(&self, gpu: u32, gpu_instance: u32) -> Result<Vec<ComputeInstance>> {
        let _mig = self.mig_lock(gpu);
        Mig::new(&self.device(gpu)?, gpu).compute_instances(gpu_instance)
    }

    fn mig_devices(&self, gpu: u32) -> Result<Vec<MigDevice>> {
        const BY_INDEX: &str = "nvmlDeviceGetMigDeviceHandleByIndex";
        let _mig = self.mig_lock(gpu);
        let device = self.device(gpu)?;
        if !mig_enabled(&device, gpu)? {
            return Ok(Vec::new());
        }
        let slots = device
            .mig_device_count()
            .map_err(on_gpu(gpu, "nvmlDeviceGetMaxMigDeviceCount"))?;
        let mut migs = Vec::new();
        for index in 0..slots {
            let mig = match device.mig_device_by_index(index) {
                Ok(mig) => mig,
                // An empty slot.
                Err(NvmlError::NotFound) => continue,
                Err(err) => return Err(on_gpu(gpu, BY_INDEX)(err)),
            };
            let (gpu_instance, compute_instance) = mig::mig_device_ids(&mig, gpu)?;
            migs.push(MigDevice {
                uuid: mig.uuid().map_err(on_gpu(gpu, "nvmlDeviceGetUUID"))?,
                gpu_instance,
                compute_instance,
                memory_bytes: mig
                    .memory_info()
                    .map_err(on_gpu(gpu, "nvmlDeviceGetMemoryInfo_v2"))?
                    .total,
            });
        }
        Ok(migs)
    }

    fn wait_event(&self, timeout: Duration) -> Result<Option<DeviceEvent>> {
        self.events
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .wait(self.nvml, timeout)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_library_is_library_not_found() {
        let err = NvmlBackend::with_library(Path::new("/nonexistent/libnvidia-ml.so.1")).err();
        assert_eq!(err, Some(BackendError::LibraryNotFound));
        assert_eq!(
            BackendError::LibraryNotFound.to_string(),
            "NVML library not found: install the NVIDIA driver, or run with --mock HOST.toml"
        );
    }

    #[test]
    fn a_library_that_is_not_nvml_is_library_not_found() {
        // libc loads, but has no nvmlInit_v2.
        let err = NvmlBackend::with_library(Path::new("libc.so.6")).err();
        assert_eq!(err, Some(BackendError::LibraryNotFound));
    }

    #[test]
    fn the_backend_is_a_shareable_gpu_backend() {
        fn shareable<T: GpuBackend + Send + Sync + 'static>() {}
        shareable::<NvmlBackend>();
    }

    #[test]
    fn clock_tables_run_highest_first() {
        assert_eq!(
            highest_first(vec![210, 1410, 705, 1410]),
            vec![1410, 705, 210]
        );
        let table = [
            SupportedClocks {
                mem_mhz: 1215,
                core_mhz: vec![1410, 210],
            },
            SupportedClocks {
                mem_mhz: 405,
                core_mhz: vec![405, 300],
            },
        ];
        assert_eq!(lowest_core(&table), Some(210));
        assert_eq!(lowest_core(&[]), None);
    }
}
