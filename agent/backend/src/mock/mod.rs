//! A mock NVML: GPUs from a host description and the catalogue that behave like
//! the driver, refusals included, on a clock it is handed.
//!
//! Besides the [`GpuBackend`] calls it has a control surface for executors and
//! tests: start and end processes (which set the power drawn), inject faults,
//! and read back the call log and the controls in force.

mod clock;
mod faults;
mod gpu;
mod mig;

use std::collections::VecDeque;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

pub use clock::{Clock, SystemClock, VirtualClock};
pub use faults::{Call, Fault, CALL_LOG_LEN, METHODS};
pub use gpu::{Controls, MockProcess};

use self::faults::{CallLog, Faults};
use self::gpu::{watts_to_mw, MockGpu};
use super::{
    optional, BackendError, ClockDomain, ClockPair, ClockRange, ClockReadings, ComputeInstance,
    ComputeInstanceProfile, DeviceEvent, DeviceEventKind, DeviceInfo, GpuBackend, GpuInstance,
    GpuInstanceProfile, GpuProcess, MemoryInfo, MigDevice, MigMode, ModelledLoad, On, Placement,
    PowerLimits, Result, SupportedClocks, Utilization,
};
use gpu_agent_core::host::{Host, Partition};

/// Bytes per GB of device memory (NVIDIA's "GB" are GiB: an A100 40GB has 40960 MiB).
const BYTES_PER_GB: f64 = (1u64 << 30) as f64;

/// A mock GPU host.
pub struct MockBackend {
    state: Mutex<State>,
    event_ready: Condvar,
    clock: Arc<dyn Clock>,
}

struct State {
    gpus: Vec<MockGpu>,
    faults: Faults,
    events: VecDeque<DeviceEvent>,
    calls: CallLog,
}

impl MockBackend {
    /// One mock GPU per physical GPU of `host`, all idle, controls at
    /// defaults; MIG off, except on a GPU the host splits into MIG instances
    /// (`mig = [...]`, formats.md §2): MIG on there, with those instances
    /// (one full-size compute instance each), as after an admin made them.
    pub fn new(host: &Host, clock: Arc<dyn Clock>) -> MockBackend {
        let now = clock.now();
        let gpus = host
            .devices
            .iter()
            .filter(|d| d.mig().is_none())
            .map(|d| {
                let bytes = (d.memory_gb * BYTES_PER_GB).round() as u64;
                MockGpu::new(d.model, bytes, uuid("GPU", &[u64::from(d.index)]), now)
            })
            .collect();
        let mock = MockBackend {
            state: Mutex::new(State {
                gpus,
                faults: Faults::default(),
                events: VecDeque::new(),
                calls: CallLog::default(),
            }),
            event_ready: Condvar::new(),
            clock,
        };
        for d in &host.devices {
            if let Partition::Split { .. } = d.partition {
                mock.set_mig_mode(d.index, true)
                    .and_then(|_| mock.reset_gpu(d.index))
                    .expect("an idle MIG-capable mock GPU turns MIG on");
            }
            if let Some(slot) = d.mig().filter(|_| d.schedulable()) {
                crate::create_instance(&mock, slot.parent, slot.profile.id, slot.start)
                    .expect("a host file's layout was checked against the placements");
            }
        }
        mock.lock().calls = CallLog::default();
        mock
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Runs one backend call: slow-call delay, device checks and injected
    /// refusals, energy accounting up to now, the call itself, the log entry.
    fn call<T>(
        &self,
        gpu: Option<u32>,
        method: &'static str,
        call: &'static str,
        args: String,
        f: impl FnOnce(&mut State, f64) -> Result<T>,
    ) -> Result<T> {
        let delay = self.lock().faults.delay(gpu, method);
        if let Some(d) = delay {
            std::thread::sleep(d);
        }
        let mut st = self.lock();
        let now = self.clock.now();
        let result = (|| {
            if let Some(g) = gpu {
                let device = gpu_mut(&mut st.gpus, g, call)?;
                if device.lost {
                    return Err(BackendError::GpuLost {
                        on: On(Some(g)),
                        call,
                    });
                }
                device.advance(now);
                if let Some(e) = st.faults.refusal(g, method, call) {
                    return Err(e);
                }
            }
            f(&mut st, now)
        })();
        st.calls.push(Call {
            at: now,
            gpu,
            method,
            args,
            outcome: result.as_ref().map(|_| ()).map_err(Clone::clone),
        });
        result
    }

    /// Like [`call`](Self::call) on one GPU, handing the closure that GPU.
    fn on_gpu<T>(
        &self,
        gpu: u32,
        method: &'static str,
        call: &'static str,
        args: String,
        f: impl FnOnce(&mut MockGpu) -> Result<T>,
    ) -> Result<T> {
        self.call(Some(gpu), method, call, args, |st, _| {
            f(&mut st.gpus[gpu as usize])
        })
    }

    /// A reading: `NotSupported` becomes `None`.
    fn reading<T>(
        &self,
        gpu: u32,
        method: &'static str,
        call: &'static str,
        f: impl FnOnce(&mut MockGpu) -> Result<T>,
    ) -> Result<Option<T>> {
        optional(self.on_gpu(gpu, method, call, String::new(), f))
    }

    /// Starts a process on `gpu` (what an executor does when a task starts).
    /// Under MIG it must name an existing compute instance, and it must fit in
    /// the free memory of its GPU or GPU instance.
    pub fn start_process(&self, gpu: u32, process: MockProcess) -> Result<()> {
        const CALL: &str = "mock: start process";
        let mut st = self.lock();
        let now = self.clock.now();
        let g = gpu_mut(&mut st.gpus, gpu, CALL)?;
        if g.lost {
            return Err(BackendError::GpuLost {
                on: On(Some(gpu)),
                call: CALL,
            });
        }
        if g.processes.iter().any(|p| p.pid == process.pid) {
            return Err(BackendError::invalid(
                gpu,
                CALL,
                format!("pid {} already runs here", process.pid),
            ));
        }
        let (capacity, used) = match (process.mig, g.mig_enabled(), &g.mig) {
            (None, false, _) => (g.memory_bytes, g.used_bytes()),
            (Some((gi, ci)), true, Some(mig)) => {
                mig.has_ci(gpu, gi, ci)?;
                let memory = mig.gi(gpu, gi, CALL)?.profile.memory_mib << 20;
                let used = g
                    .processes
                    .iter()
                    .filter(|p| p.mig.map(|m| m.0) == Some(gi))
                    .map(|p| p.used_bytes)
                    .sum();
                (memory, used)
            }
            (None, true, _) => {
                return Err(BackendError::invalid(
                    gpu,
                    CALL,
                    "MIG is enabled: a process must run in a compute instance",
                ))
            }
            (Some(_), _, _) => {
                return Err(BackendError::invalid(
                    gpu,
                    CALL,
                    "MIG is disabled: a process runs on the whole GPU",
                ))
            }
        };
        if used + process.used_bytes > capacity {
            return Err(BackendError::insufficient(
                gpu,
                CALL,
                format!(
                    "out of memory: {} bytes asked, {} free",
                    process.used_bytes,
                    capacity - used
                ),
            ));
        }
        g.advance(now);
        g.processes.push(process);
        Ok(())
    }

    /// Ends process `pid` on `gpu`.
    pub fn end_process(&self, gpu: u32, pid: u32) -> Result<()> {
        const CALL: &str = "mock: end process";
        let mut st = self.lock();
        let now = self.clock.now();
        let g = gpu_mut(&mut st.gpus, gpu, CALL)?;
        let at = g
            .processes
            .iter()
            .position(|p| p.pid == pid)
            .ok_or_else(|| BackendError::not_found(gpu, CALL, format!("pid {pid}")))?;
        g.advance(now);
        g.processes.remove(at);
        Ok(())
    }

    /// Injects a fault on `gpu`. `GpuLost` and `Xid` happen now and queue an
    /// event; the others stand until [`clear_faults`](Self::clear_faults).
    ///
    /// # Panics
    /// If a fault names something that is not a `GpuBackend` method.
    pub fn inject(&self, gpu: u32, fault: Fault) {
        let mut st = self.lock();
        let now = self.clock.now();
        match fault {
            Fault::GpuLost => {
                if let Some(g) = st.gpus.get_mut(gpu as usize) {
                    g.advance(now);
                    g.lost = true;
                }
                st.events.push_back(DeviceEvent {
                    gpu,
                    kind: DeviceEventKind::GpuLost,
                });
            }
            Fault::Xid(code) => st.events.push_back(DeviceEvent {
                gpu,
                kind: DeviceEventKind::Xid(code),
            }),
            standing => st.faults.add(gpu, standing),
        }
        self.event_ready.notify_all();
    }

    /// Removes every standing fault (a lost GPU stays lost: see
    /// [`repair`](Self::repair)).
    pub fn clear_faults(&self) {
        self.lock().faults.clear();
    }

    /// Brings lost `gpu` back on the bus, as a reset or a re-seat would:
    /// calls on it succeed again, its controls at their defaults and no
    /// energy counted for the time it was gone. Nothing for a GPU that is
    /// not lost; `false` for an unknown index.
    pub fn repair(&self, gpu: u32) -> bool {
        let mut st = self.lock();
        let now = self.clock.now();
        let Some(g) = st.gpus.get_mut(gpu as usize) else {
            return false;
        };
        if g.lost {
            g.repair(now);
        }
        true
    }

    /// The calls received so far, oldest first: the last
    /// [`CALL_LOG_LEN`] of them (a daemon on the mock runs for days).
    pub fn calls(&self) -> Vec<Call> {
        self.lock().calls.to_vec()
    }

    /// The controls in force on `gpu` (`None` for an unknown index).
    pub fn controls(&self, gpu: u32) -> Option<Controls> {
        self.lock().gpus.get(gpu as usize).map(|g| g.controls)
    }
}

/// GPU `gpu` of `gpus`; a bad index is refused as NVML refuses one.
fn gpu_mut<'a>(gpus: &'a mut [MockGpu], gpu: u32, call: &'static str) -> Result<&'a mut MockGpu> {
    let count = gpus.len();
    gpus.get_mut(gpu as usize).ok_or_else(|| {
        BackendError::invalid(gpu, call, format!("no such GPU: the host has {count}"))
    })
}

/// A deterministic UUID, `PREFIX-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx`, from `seed`.
fn uuid(prefix: &str, seed: &[u64]) -> String {
    // The splitmix64 finaliser: every input bit reaches every output bit.
    fn mix(mut z: u64) -> u64 {
        z = z.wrapping_add(0x9e37_79b9_7f4a_7c15);
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    let state = seed
        .iter()
        .fold(mix(prefix.len() as u64), |h, &s| mix(h ^ mix(s)));
    let (hi, lo) = (mix(state), mix(!state));
    format!(
        "{prefix}-{:08x}-{:04x}-{:04x}-{:04x}-{:012x}",
        hi >> 32,
        (hi >> 16) & 0xffff,
        hi & 0xffff,
        lo >> 48,
        lo & 0xffff_ffff_ffff
    )
}

/// The supported clock nearest to `mhz` (ties go to the lower clock), as the
/// driver rounds a locked-clock bound; `clocks` is highest first.
fn nearest(clocks: &[u32], mhz: u32) -> Option<u32> {
    clocks.iter().copied().min_by_key(|&c| (c.abs_diff(mhz), c))
}

/// Rounds a lock request to supported clocks; refuses an inverted range.
fn round_range(
    gpu: u32,
    call: &'static str,
    clocks: &[u32],
    range: ClockRange,
) -> Result<ClockRange> {
    range.check(gpu, call)?;
    match (
        nearest(clocks, range.min_mhz),
        nearest(clocks, range.max_mhz),
    ) {
        (Some(min_mhz), Some(max_mhz)) => Ok(ClockRange { min_mhz, max_mhz }),
        _ => Err(BackendError::not_supported(gpu, call)),
    }
}

impl ModelledLoad for MockBackend {
    fn start_process(&self, gpu: u32, process: MockProcess) -> Result<()> {
        MockBackend::start_process(self, gpu, process)
    }

    fn end_process(&self, gpu: u32, pid: u32) -> Result<()> {
        MockBackend::end_process(self, gpu, pid)
    }
}

impl GpuBackend for MockBackend {
    fn device_count(&self) -> Result<u32> {
        self.call(
            None,
            "device_count",
            "nvmlDeviceGetCount_v2",
            String::new(),
            |st, _| Ok(st.gpus.len() as u32),
        )
    }

    fn device_info(&self, gpu: u32) -> Result<DeviceInfo> {
        self.on_gpu(
            gpu,
            "device_info",
            "nvmlDeviceGetHandleByIndex_v2",
            String::new(),
            |g| {
                Ok(DeviceInfo {
                    index: gpu,
                    uuid: g.uuid.clone(),
                    name: g.model.nvml_name.to_string(),
                    pci_bus_id: format!("00000000:{:02X}:00.0", 0x10 + gpu),
                    pci_device_id: g.model.pci_device_id,
                    pci_subsystem_id: None,
                    architecture: Some(g.model.architecture.to_string()),
                    mig_capable: g.model.mig_capable(),
                })
            },
        )
    }

    fn memory(&self, gpu: u32) -> Result<MemoryInfo> {
        self.on_gpu(
            gpu,
            "memory",
            "nvmlDeviceGetMemoryInfo",
            String::new(),
            |g| {
                Ok(MemoryInfo {
                    total_bytes: g.memory_bytes,
                    used_bytes: g.used_bytes(),
                })
            },
        )
    }

    fn clocks(&self, gpu: u32, domain: ClockDomain) -> Result<ClockReadings> {
        self.on_gpu(
            gpu,
            "clocks",
            "nvmlDeviceGetClockInfo",
            format!("{domain:?}"),
            |g| {
                let m = g.model;
                let now = g.effective();
                Ok(match domain {
                    ClockDomain::Core => ClockReadings {
                        current: Some(now.core_mhz),
                        default: Some(m.core_default_mhz),
                        min: Some(m.core_min_mhz()),
                        max: Some(m.core_max_mhz()),
                    },
                    ClockDomain::Memory => ClockReadings {
                        current: Some(now.mem_mhz),
                        default: Some(m.mem_default_mhz),
                        min: Some(m.mem_min_mhz()),
                        max: Some(m.mem_max_mhz()),
                    },
                })
            },
        )
    }

    fn supported_clocks(&self, gpu: u32) -> Result<Vec<SupportedClocks>> {
        self.on_gpu(
            gpu,
            "supported_clocks",
            "nvmlDeviceGetSupportedGraphicsClocks",
            String::new(),
            |g| {
                Ok(g.model
                    .clock_table
                    .iter()
                    .map(|t| SupportedClocks {
                        mem_mhz: t.mem_mhz,
                        core_mhz: t.core_clocks(),
                    })
                    .collect())
            },
        )
    }

    fn lock_core_clocks(&self, gpu: u32, range: ClockRange) -> Result<()> {
        const CALL: &str = "nvmlDeviceSetGpuLockedClocks";
        self.on_gpu(gpu, "lock_core_clocks", CALL, format!("{range:?}"), |g| {
            let mut clocks: Vec<u32> = g
                .model
                .clock_table
                .iter()
                .flat_map(|t| t.core_clocks())
                .collect();
            clocks.sort_unstable_by(|a, b| b.cmp(a));
            clocks.dedup();
            g.controls.locked_core = Some(round_range(gpu, CALL, &clocks, range)?);
            Ok(())
        })
    }

    fn reset_core_clocks(&self, gpu: u32) -> Result<()> {
        self.on_gpu(
            gpu,
            "reset_core_clocks",
            "nvmlDeviceResetGpuLockedClocks",
            String::new(),
            |g| {
                g.controls.locked_core = None;
                Ok(())
            },
        )
    }

    fn lock_memory_clocks(&self, gpu: u32, range: ClockRange) -> Result<()> {
        const CALL: &str = "nvmlDeviceSetMemoryLockedClocks";
        self.on_gpu(gpu, "lock_memory_clocks", CALL, format!("{range:?}"), |g| {
            // Memory clock locking arrived with Ampere.
            if matches!(g.model.architecture, "Volta" | "Turing") {
                return Err(BackendError::not_supported(gpu, CALL));
            }
            let clocks: Vec<u32> = g.model.clock_table.iter().map(|t| t.mem_mhz).collect();
            g.controls.locked_memory = Some(round_range(gpu, CALL, &clocks, range)?);
            Ok(())
        })
    }

    fn reset_memory_clocks(&self, gpu: u32) -> Result<()> {
        const CALL: &str = "nvmlDeviceResetMemoryLockedClocks";
        self.on_gpu(gpu, "reset_memory_clocks", CALL, String::new(), |g| {
            if matches!(g.model.architecture, "Volta" | "Turing") {
                return Err(BackendError::not_supported(gpu, CALL));
            }
            g.controls.locked_memory = None;
            Ok(())
        })
    }

    fn applications_clocks(&self, gpu: u32) -> Result<Option<ClockPair>> {
        self.reading(
            gpu,
            "applications_clocks",
            "nvmlDeviceGetApplicationsClock",
            |g| {
                Ok(g.controls.applications.unwrap_or(ClockPair {
                    core_mhz: g.model.core_default_mhz,
                    mem_mhz: g.model.mem_default_mhz,
                }))
            },
        )
    }

    fn set_applications_clocks(&self, gpu: u32, clocks: ClockPair) -> Result<()> {
        const CALL: &str = "nvmlDeviceSetApplicationsClocks";
        self.on_gpu(
            gpu,
            "set_applications_clocks",
            CALL,
            format!("{clocks:?}"),
            |g| {
                if !g.core_clocks_at(clocks.mem_mhz).contains(&clocks.core_mhz) {
                    return Err(BackendError::invalid(
                        gpu,
                        CALL,
                        format!(
                            "{} MHz core with {} MHz memory is not a supported pair",
                            clocks.core_mhz, clocks.mem_mhz
                        ),
                    ));
                }
                g.controls.applications = Some(clocks);
                Ok(())
            },
        )
    }

    fn reset_applications_clocks(&self, gpu: u32) -> Result<()> {
        self.on_gpu(
            gpu,
            "reset_applications_clocks",
            "nvmlDeviceResetApplicationsClocks",
            String::new(),
            |g| {
                g.controls.applications = None;
                Ok(())
            },
        )
    }

    fn power_usage_mw(&self, gpu: u32) -> Result<Option<u32>> {
        self.reading(gpu, "power_usage_mw", "nvmlDeviceGetPowerUsage", |g| {
            Ok(watts_to_mw(g.power_w()))
        })
    }

    fn power_limits(&self, gpu: u32) -> Result<PowerLimits> {
        self.on_gpu(
            gpu,
            "power_limits",
            "nvmlDeviceGetPowerManagementLimitConstraints",
            String::new(),
            |g| {
                Ok(PowerLimits {
                    current_mw: g.controls.power_limit_mw,
                    default_mw: Some(watts_to_mw(g.model.power_default_w)),
                    min_mw: watts_to_mw(g.model.power_min_w),
                    max_mw: watts_to_mw(g.model.power_max_w),
                })
            },
        )
    }

    fn set_power_limit(&self, gpu: u32, mw: u32) -> Result<u32> {
        self.on_gpu(
            gpu,
            "set_power_limit",
            "nvmlDeviceSetPowerManagementLimit",
            format!("{mw}"),
            |g| {
                let set = mw.clamp(
                    watts_to_mw(g.model.power_min_w),
                    watts_to_mw(g.model.power_max_w),
                );
                g.controls.power_limit_mw = set;
                Ok(set)
            },
        )
    }

    fn energy_mj(&self, gpu: u32) -> Result<Option<u64>> {
        self.reading(
            gpu,
            "energy_mj",
            "nvmlDeviceGetTotalEnergyConsumption",
            |g| Ok(g.energy_mj()),
        )
    }

    fn utilization(&self, gpu: u32) -> Result<Option<Utilization>> {
        self.reading(gpu, "utilization", "nvmlDeviceGetUtilizationRates", |g| {
            let pct = g.busy_pct();
            Ok(Utilization {
                gpu_pct: pct,
                memory_pct: pct,
            })
        })
    }

    fn temperature_c(&self, gpu: u32) -> Result<Option<u32>> {
        // 30 °C idle in a cool room, up to 80 °C at full power.
        self.reading(gpu, "temperature_c", "nvmlDeviceGetTemperature", |g| {
            Ok((30.0 + 50.0 * g.power_w() / g.model.power_max_w).round() as u32)
        })
    }

    fn processes(&self, gpu: u32) -> Result<Vec<GpuProcess>> {
        self.on_gpu(
            gpu,
            "processes",
            "nvmlDeviceGetComputeRunningProcesses_v3",
            String::new(),
            |g| Ok(g.process_list()),
        )
    }

    fn mig_mode(&self, gpu: u32) -> Result<Option<MigMode>> {
        self.reading(gpu, "mig_mode", "nvmlDeviceGetMigMode", |g| {
            g.mig
                .as_ref()
                .map(|m| m.mode())
                .ok_or_else(|| BackendError::not_supported(gpu, "nvmlDeviceGetMigMode"))
        })
    }

    fn set_mig_mode(&self, gpu: u32, enabled: bool) -> Result<MigMode> {
        const CALL: &str = "nvmlDeviceSetMigMode";
        self.on_gpu(gpu, "set_mig_mode", CALL, format!("{enabled}"), |g| {
            g.mig
                .as_mut()
                .ok_or_else(|| BackendError::not_supported(gpu, CALL))?
                .set_mode(gpu, enabled)
        })
    }

    fn reset_gpu(&self, gpu: u32) -> Result<()> {
        const CALL: &str = "nvmlDeviceResetGpu";
        self.on_gpu(gpu, "reset_gpu", CALL, String::new(), |g| {
            if g.busy() {
                let pids: Vec<String> = g.processes.iter().map(|p| p.pid.to_string()).collect();
                return Err(BackendError::in_use(
                    gpu,
                    CALL,
                    format!("processes are running: pid {}", pids.join(", ")),
                ));
            }
            g.reset();
            Ok(())
        })
    }

    fn gpu_instance_profiles(&self, gpu: u32) -> Result<Vec<GpuInstanceProfile>> {
        const CALL: &str = "nvmlDeviceGetGpuInstanceProfileInfo";
        self.on_gpu(gpu, "gpu_instance_profiles", CALL, String::new(), |g| {
            let table = g
                .model
                .mig
                .ok_or_else(|| BackendError::not_supported(gpu, CALL))?;
            let mut profiles: Vec<GpuInstanceProfile> = table
                .profiles
                .iter()
                .map(|p| GpuInstanceProfile {
                    id: p.id,
                    name: Some(p.name.to_string()),
                    slice_count: p.compute_slices,
                    memory_bytes: p.memory_mib << 20,
                    max_count: p.max_count,
                    placements: p
                        .placement_starts
                        .iter()
                        .map(|&start| Placement {
                            start,
                            size: p.placement_size,
                        })
                        .collect(),
                })
                .collect();
            profiles.sort_by(GpuInstanceProfile::smallest_first);
            Ok(profiles)
        })
    }

    fn create_gpu_instance(&self, gpu: u32, profile_id: u32, start: u32) -> Result<GpuInstance> {
        const CALL: &str = "nvmlDeviceCreateGpuInstanceWithPlacement";
        self.on_gpu(
            gpu,
            "create_gpu_instance",
            CALL,
            format!("{profile_id}, {start}"),
            |g| {
                g.mig
                    .as_mut()
                    .ok_or_else(|| BackendError::not_supported(gpu, CALL))?
                    .create_gi(gpu, profile_id, start)
            },
        )
    }

    fn destroy_gpu_instance(&self, gpu: u32, instance: u32) -> Result<()> {
        const CALL: &str = "nvmlGpuInstanceDestroy";
        self.on_gpu(
            gpu,
            "destroy_gpu_instance",
            CALL,
            format!("{instance}"),
            |g| {
                let busy = g
                    .processes
                    .iter()
                    .any(|p| p.mig.map(|m| m.0) == Some(instance));
                g.mig
                    .as_mut()
                    .ok_or_else(|| BackendError::not_supported(gpu, CALL))?
                    .destroy_gi(gpu, instance, busy)
            },
        )
    }

    fn gpu_instances(&self, gpu: u32) -> Result<Vec<GpuInstance>> {
        self.on_gpu(
            gpu,
            "gpu_instances",
            "nvmlDeviceGetGpuInstances",
            String::new(),
            |g| Ok(g.mig.as_ref().map(|m| m.gis()).unwrap_or_default()),
        )
    }

    fn compute_instance_profiles(
        &self,
        gpu: u32,
        gpu_instance: u32,
    ) -> Result<Vec<ComputeInstanceProfile>> {
        const CALL: &str = "nvmlGpuInstanceGetComputeInstanceProfileInfo";
        self.on_gpu(
            gpu,
            "compute_instance_profiles",
            CALL,
            format!("{gpu_instance}"),
            |g| {
                g.mig
                    .as_ref()
                    .ok_or_else(|| BackendError::not_supported(gpu, CALL))?
                    .ci_profiles(gpu, gpu_instance)
            },
        )
    }

    fn create_compute_instance(
        &self,
        gpu: u32,
        gpu_instance: u32,
        profile_id: u32,
    ) -> Result<ComputeInstance> {
        const CALL: &str = "nvmlGpuInstanceCreateComputeInstance";
        let args = format!("{gpu_instance}, {profile_id}");
        self.on_gpu(gpu, "create_compute_instance", CALL, args, |g| {
            g.mig
                .as_mut()
                .ok_or_else(|| BackendError::not_supported(gpu, CALL))?
                .create_ci(gpu, gpu_instance, profile_id)
        })
    }

    fn destroy_compute_instance(&self, gpu: u32, gpu_instance: u32, instance: u32) -> Result<()> {
        const CALL: &str = "nvmlComputeInstanceDestroy";
        let args = format!("{gpu_instance}, {instance}");
        self.on_gpu(gpu, "destroy_compute_instance", CALL, args, |g| {
            let busy = g
                .processes
                .iter()
                .any(|p| p.mig == Some((gpu_instance, instance)));
            g.mig
                .as_mut()
                .ok_or_else(|| BackendError::not_supported(gpu, CALL))?
                .destroy_ci(gpu, gpu_instance, instance, busy)
        })
    }

    fn compute_instances(&self, gpu: u32, gpu_instance: u32) -> Result<Vec<ComputeInstance>> {
        const CALL: &str = "nvmlGpuInstanceGetComputeInstances";
        self.on_gpu(
            gpu,
            "compute_instances",
            CALL,
            format!("{gpu_instance}"),
            |g| {
                g.mig
                    .as_ref()
                    .ok_or_else(|| BackendError::not_supported(gpu, CALL))?
                    .cis(gpu, gpu_instance)
            },
        )
    }

    fn mig_devices(&self, gpu: u32) -> Result<Vec<MigDevice>> {
        const CALL: &str = "nvmlDeviceGetMigDeviceHandleByIndex";
        self.on_gpu(gpu, "mig_devices", CALL, String::new(), |g| {
            Ok(g.mig.as_ref().map(|m| m.devices()).unwrap_or_default())
        })
    }

    fn wait_event(&self, timeout: Duration) -> Result<Option<DeviceEvent>> {
        let deadline = Instant::now() + timeout;
        let mut st = self.lock();
        let event = loop {
            if let Some(e) = st.events.pop_front() {
                break Some(e);
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                break None;
            }
            st = self
                .event_ready
                .wait_timeout(st, left)
                .unwrap_or_else(|e| e.into_inner())
                .0;
        };
        st.calls.push(Call {
            at: self.clock.now(),
            gpu: None,
            method: "wait_event",
            args: format!("{timeout:?}"),
            outcome: Ok(()),
        });
        Ok(event)
    }
}
