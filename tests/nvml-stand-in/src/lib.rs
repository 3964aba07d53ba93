//! A stand-in `libnvidia-ml.so.1`: the NVML entry points the agent's NVML
//! backend and `nvml-wrapper` call, with nvml.h's signatures (checked at
//! compile time against `nvml-wrapper-sys`'s bindings) and return codes, over
//! the project's mock GPU model ([`MockBackend`](gpu_agent_backend::mock::MockBackend)):
//! one model of a GPU, reached through the mock's Rust door and this C one.
//!
//! Its GPUs come from the host file `NVML_FAKE_HOST` names (the `--mock`
//! format); faults and delays from the control file `NVML_FAKE_CONTROL` names
//! ([`control`]); their clock locks, application clocks and power limits
//! outlive the process in the file `NVML_FAKE_STATE` names, as a driver's do. Where the driver differs from the mock's trait, this layer
//! does what the driver does: `nvmlDeviceSetMigMode` takes effect at once on
//! an idle GPU (the driver resets it), and a power limit outside the
//! constraints is refused rather than clamped.

// nvml.h's names, as bindgen spells them.
#![allow(non_snake_case, non_upper_case_globals)]

mod control;
mod fake;

use std::ffi::{c_char, c_uint, c_ulonglong};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::time::{Duration, Instant};

use gpu_agent_backend::{
    ClockDomain, ClockRange, DeviceEventKind, GpuBackend, GpuInstanceProfile, MigDevice,
};
use nvml_wrapper_sys::bindings::*;

use crate::fake::{code, Fake, Handle};

/// What an entry point's body returns: `Err` is the NVML code to return.
type R = Result<(), nvmlReturn_t>;

/// The driver version the stand-in reports.
const DRIVER_VERSION: &str = "550.54.15";

/// The calls that change a GPU: `deny-writes` refuses them.
const WRITES: &[&str] = &[
    "nvmlDeviceSetGpuLockedClocks",
    "nvmlDeviceResetGpuLockedClocks",
    "nvmlDeviceSetMemoryLockedClocks",
    "nvmlDeviceResetMemoryLockedClocks",
    "nvmlDeviceSetApplicationsClocks",
    "nvmlDeviceResetApplicationsClocks",
    "nvmlDeviceSetPowerManagementLimit",
    "nvmlDeviceSetMigMode",
    "nvmlDeviceCreateGpuInstanceWithPlacement",
    "nvmlGpuInstanceDestroy",
    "nvmlGpuInstanceCreateComputeInstance",
    "nvmlComputeInstanceDestroy",
];

/// How often `nvmlEventSetWait_v2` looks at the control file while it waits.
const CONTROL_POLL: Duration = Duration::from_millis(50);

/// Runs the body of entry point `call`: the control file's events, delay and
/// injected failure first; a panic becomes `NVML_ERROR_UNKNOWN`.
fn run(call: &'static str, body: impl FnOnce() -> R) -> nvmlReturn_t {
    let outcome = catch_unwind(AssertUnwindSafe(|| {
        if let Ok(fake) = Fake::get() {
            fake.poll_control();
            if let Some(delay) = fake.control.delay(call) {
                std::thread::sleep(delay);
            }
            if let Some(code) = fake.control.failure(call, WRITES.contains(&call)) {
                return Err(code);
            }
        }
        let result = body();
        if result.is_ok() && WRITES.contains(&call) {
            if let Ok(fake) = Fake::get() {
                fake.save();
            }
        }
        result
    }));
    match outcome {
        Ok(Ok(())) => nvmlReturn_enum_NVML_SUCCESS,
        Ok(Err(code)) => code,
        Err(_) => nvmlReturn_enum_NVML_ERROR_UNKNOWN,
    }
}

/// A backend result as NVML's.
fn nv<T>(r: gpu_agent_backend::Result<T>) -> Result<T, nvmlReturn_t> {
    r.map_err(code)
}

/// `Some` as a value, `None` as the driver's `NOT_SUPPORTED`.
fn supported<T>(v: Option<T>) -> Result<T, nvmlReturn_t> {
    v.ok_or(nvmlReturn_enum_NVML_ERROR_NOT_SUPPORTED)
}

/// Writes `v` to out-parameter `p`.
unsafe fn out<T>(p: *mut T, v: T) -> R {
    if p.is_null() {
        return Err(nvmlReturn_enum_NVML_ERROR_INVALID_ARGUMENT);
    }
    p.write(v);
    Ok(())
}

/// Writes `values` into the array `items` of `*count` elements, as NVML's
/// list calls do: too small an array gets `INSUFFICIENT_SIZE` and the count
/// needed; with `null_counts`, a null array gets the count and `SUCCESS`.
unsafe fn fill<T: Copy>(items: *mut T, count: *mut c_uint, values: &[T], null_counts: bool) -> R {
    if count.is_null() {
        return Err(nvmlReturn_enum_NVML_ERROR_INVALID_ARGUMENT);
    }
    let needed = values.len() as c_uint;
    if items.is_null() && null_counts {
        *count = needed;
        return Ok(());
    }
    if items.is_null() || *count < needed {
        *count = needed;
        return if needed == 0 {
            Ok(())
        } else {
            Err(nvmlReturn_enum_NVML_ERROR_INSUFFICIENT_SIZE)
        };
    }
    std::ptr::copy_nonoverlapping(values.as_ptr(), items, values.len());
    *count = needed;
    Ok(())
}

/// Writes `s` and its NUL into `buf` of `len` bytes.
unsafe fn text(buf: *mut c_char, len: c_uint, s: &str) -> R {
    if buf.is_null() {
        return Err(nvmlReturn_enum_NVML_ERROR_INVALID_ARGUMENT);
    }
    if s.len() + 1 > len as usize {
        return Err(nvmlReturn_enum_NVML_ERROR_INSUFFICIENT_SIZE);
    }
    std::ptr::copy_nonoverlapping(s.as_ptr().cast::<c_char>(), buf, s.len());
    *buf.add(s.len()) = 0;
    Ok(())
}

/// `s` in a fixed C array, NUL-terminated (cut to fit).
fn c_array<const N: usize>(s: &str) -> [c_char; N] {
    let mut a = [0; N];
    for (slot, b) in a.iter_mut().zip(s.bytes().take(N - 1)) {
        *slot = b as c_char;
    }
    a
}

/// The stand-in, initialised.
fn fake() -> Result<&'static Fake, nvmlReturn_t> {
    Fake::get()
}

/// The physical GPU `device` is.
fn gpu(device: nvmlDevice_t) -> Result<u32, nvmlReturn_t> {
    match fake()?.resolve(device)? {
        Handle::Gpu(gpu) => Ok(gpu),
        _ => Err(nvmlReturn_enum_NVML_ERROR_INVALID_ARGUMENT),
    }
}

/// The MIG device `device` is.
fn mig_device(device: nvmlDevice_t) -> Result<Option<MigDevice>, nvmlReturn_t> {
    let fake = fake()?;
    match fake.resolve(device)? {
        Handle::Mig(gpu, gi, ci) => nv(fake.mock.mig_devices(gpu))?
            .into_iter()
            .find(|m| (m.gpu_instance, m.compute_instance) == (gi, ci))
            .map(Some)
            .ok_or(nvmlReturn_enum_NVML_ERROR_INVALID_ARGUMENT),
        Handle::Gpu(_) => Ok(None),
        _ => Err(nvmlReturn_enum_NVML_ERROR_INVALID_ARGUMENT),
    }
}

/// The (GPU, id) of GPU instance `gi`.
fn gpu_instance(gi: nvmlGpuInstance_t) -> Result<(u32, u32), nvmlReturn_t> {
    match fake()?.resolve(gi)? {
        Handle::Gi(gpu, id) => Ok((gpu, id)),
        _ => Err(nvmlReturn_enum_NVML_ERROR_INVALID_ARGUMENT),
    }
}

/// The (GPU, GPU instance, id) of compute instance `ci`.
fn compute_instance(ci: nvmlComputeInstance_t) -> Result<(u32, u32, u32), nvmlReturn_t> {
    match fake()?.resolve(ci)? {
        Handle::Ci(gpu, gi, id) => Ok((gpu, gi, id)),
        _ => Err(nvmlReturn_enum_NVML_ERROR_INVALID_ARGUMENT),
    }
}

/// The clock domain of an NVML clock type (graphics and SM are the core clock).
fn domain(clock: nvmlClockType_t) -> Result<ClockDomain, nvmlReturn_t> {
    match clock {
        nvmlClockType_enum_NVML_CLOCK_GRAPHICS | nvmlClockType_enum_NVML_CLOCK_SM => {
            Ok(ClockDomain::Core)
        }
        nvmlClockType_enum_NVML_CLOCK_MEM => Ok(ClockDomain::Memory),
        nvmlClockType_enum_NVML_CLOCK_VIDEO => Err(nvmlReturn_enum_NVML_ERROR_NOT_SUPPORTED),
        _ => Err(nvmlReturn_enum_NVML_ERROR_INVALID_ARGUMENT),
    }
}

/// NVML's number for an architecture the catalogue names.
fn architecture(name: Option<&str>) -> nvmlDeviceArchitecture_t {
    match name {
        Some("Kepler") => NVML_DEVICE_ARCH_KEPLER,
        Some("Maxwell") => NVML_DEVICE_ARCH_MAXWELL,
        Some("Pascal") => NVML_DEVICE_ARCH_PASCAL,
        Some("Volta") => NVML_DEVICE_ARCH_VOLTA,
        Some("Turing") => NVML_DEVICE_ARCH_TURING,
        Some("Ampere") => NVML_DEVICE_ARCH_AMPERE,
        Some("Ada Lovelace") => NVML_DEVICE_ARCH_ADA,
        Some("Hopper") => NVML_DEVICE_ARCH_HOPPER,
        Some("Blackwell") => NVML_DEVICE_ARCH_BLACKWELL,
        _ => NVML_DEVICE_ARCH_UNKNOWN,
    }
}

/// NVML's profile index (`NVML_GPU_INSTANCE_PROFILE_*`) of GPU-instance
/// profile `p` among `all`: by compute slices, `+me` the REV1 variant, a
/// one-slice profile with more memory than the smallest the REV2 one.
fn profile_index(p: &GpuInstanceProfile, all: &[GpuInstanceProfile]) -> Option<u32> {
    let me = |q: &GpuInstanceProfile| q.name.as_deref().is_some_and(|n| n.ends_with("+me"));
    let smallest_one_slice = all
        .iter()
        .filter(|q| q.slice_count == 1 && !me(q))
        .map(|q| q.memory_bytes)
        .min();
    Some(match (p.slice_count, me(p)) {
        (1, true) => NVML_GPU_INSTANCE_PROFILE_1_SLICE_REV1,
        (2, true) => NVML_GPU_INSTANCE_PROFILE_2_SLICE_REV1,
        (1, false) if Some(p.memory_bytes) > smallest_one_slice => {
            NVML_GPU_INSTANCE_PROFILE_1_SLICE_REV2
        }
        (1, false) => NVML_GPU_INSTANCE_PROFILE_1_SLICE,
        (2, false) => NVML_GPU_INSTANCE_PROFILE_2_SLICE,
        (3, false) => NVML_GPU_INSTANCE_PROFILE_3_SLICE,
        (4, false) => NVML_GPU_INSTANCE_PROFILE_4_SLICE,
        (6, false) => NVML_GPU_INSTANCE_PROFILE_6_SLICE,
        (7, false) => NVML_GPU_INSTANCE_PROFILE_7_SLICE,
        (8, false) => NVML_GPU_INSTANCE_PROFILE_8_SLICE,
        _ => return None,
    })
}

/// The GPU-instance profile at NVML profile index `index` of `gpu`.
fn profile_at(gpu: u32, index: c_uint) -> Result<GpuInstanceProfile, nvmlReturn_t> {
    if index >= NVML_GPU_INSTANCE_PROFILE_COUNT {
        return Err(nvmlReturn_enum_NVML_ERROR_INVALID_ARGUMENT);
    }
    let all = nv(fake()?.mock.gpu_instance_profiles(gpu))?;
    all.iter()
        .find(|p| profile_index(p, &all) == Some(index))
        .cloned()
        .ok_or(nvmlReturn_enum_NVML_ERROR_NOT_SUPPORTED)
}

/// The GPU-instance profile with id `id` of `gpu`.
fn profile_by_id(gpu: u32, id: c_uint) -> Result<GpuInstanceProfile, nvmlReturn_t> {
    nv(fake()?.mock.gpu_instance_profiles(gpu))?
        .into_iter()
        .find(|p| p.id == id)
        .ok_or(nvmlReturn_enum_NVML_ERROR_INVALID_ARGUMENT)
}

/// Checks a struct's `version` field against nvml.h's for `T`, version `v`.
fn version<T>(found: c_uint, v: u32) -> R {
    let want = std::mem::size_of::<T>() as u32 | (v << 24);
    if found == want {
        Ok(())
    } else {
        Err(nvmlReturn_enum_NVML_ERROR_ARGUMENT_VERSION_MISMATCH)
    }
}

/// Whether `gpu` is lost (the probe every lost GPU fails).
fn alive(gpu: u32) -> R {
    nv(fake()?.mock.device_info(gpu)).map(drop)
}

/// Both types are the same (a compile-time check of a signature).
fn same<T, E>(_: &Result<T, E>, _: T) {}

/// Defines the entry points, [`ENTRY_POINTS`] (their names) and a
/// compile-time check of each signature against `nvml-wrapper-sys`'s
/// bindings of nvml.h.
macro_rules! entry_points {
    ($(
        $(#[doc = $doc:literal])*
        fn $name:ident($($arg:ident: $ty:ty),* $(,)?) $body:block
    )*) => {
        $(
            $(#[doc = $doc])*
            ///
            /// # Safety
            /// As nvml.h says: each pointer valid for what the call reads or writes.
            #[no_mangle]
            pub unsafe extern "C" fn $name($($arg: $ty),*) -> nvmlReturn_t {
                run(stringify!($name), || $body)
            }
        )*

        /// Every NVML function the stand-in exports.
        pub const ENTRY_POINTS: &[&str] = &[$(stringify!($name)),*];

        const _: fn(&NvmlLib) = |lib| {
            $(same(&lib.$name, $name);)*
        };
    };
}

entry_points! {
    /// Reads the host file; later calls share the GPUs it made.
    fn nvmlInit_v2() {
        Fake::init().map(drop)
    }

    /// The GPUs stay as they are, as the driver's do.
    fn nvmlShutdown() {
        fake().map(drop)
    }

    fn nvmlSystemGetDriverVersion(version: *mut c_char, length: c_uint) {
        fake()?;
        text(version, length, DRIVER_VERSION)
    }

    fn nvmlDeviceGetCount_v2(count: *mut c_uint) {
        out(count, nv(fake()?.mock.device_count())?)
    }

    fn nvmlDeviceGetHandleByIndex_v2(index: c_uint, device: *mut nvmlDevice_t) {
        let fake = fake()?;
        if index >= nv(fake.mock.device_count())? {
            return Err(nvmlReturn_enum_NVML_ERROR_INVALID_ARGUMENT);
        }
        alive(index)?;
        out(device, fake.handle(Handle::Gpu(index)))
    }

    fn nvmlDeviceGetIndex(device: nvmlDevice_t, index: *mut c_uint) {
        out(index, gpu(device)?)
    }

    /// A GPU's `GPU-` UUID, or a MIG device's `MIG-` one.
    fn nvmlDeviceGetUUID(device: nvmlDevice_t, uuid: *mut c_char, length: c_uint) {
        let id = match mig_device(device)? {
            Some(mig) => mig.uuid,
            None => nv(fake()?.mock.device_info(gpu(device)?))?.uuid,
        };
        text(uuid, length, &id)
    }

    fn nvmlDeviceGetName(device: nvmlDevice_t, name: *mut c_char, length: c_uint) {
        text(name, length, &nv(fake()?.mock.device_info(gpu(device)?))?.name)
    }

    fn nvmlDeviceGetPciInfo_v3(device: nvmlDevice_t, pci: *mut nvmlPciInfo_t) {
        let info = nv(fake()?.mock.device_info(gpu(device)?))?;
        // domain:bus:device.function, in hex.
        let mut parts = info.pci_bus_id.split([':', '.']).map(|p| u32::from_str_radix(p, 16));
        let mut next = || parts.next().and_then(Result::ok).unwrap_or(0);
        let (domain, bus, dev) = (next(), next(), next());
        out(pci, nvmlPciInfo_t {
            busIdLegacy: c_array(&format!("{:04X}:{bus:02X}:{dev:02X}.0", domain)),
            domain,
            bus,
            device: dev,
            pciDeviceId: info.pci_device_id,
            pciSubSystemId: info.pci_subsystem_id.unwrap_or(0),
            busId: c_array(&info.pci_bus_id),
        })
    }

    fn nvmlDeviceGetArchitecture(device: nvmlDevice_t, arch: *mut nvmlDeviceArchitecture_t) {
        let info = nv(fake()?.mock.device_info(gpu(device)?))?;
        out(arch, architecture(info.architecture.as_deref()))
    }

    /// A GPU's memory, or a MIG device's (its GPU instance's, none used).
    fn nvmlDeviceGetMemoryInfo_v2(device: nvmlDevice_t, memory: *mut nvmlMemory_v2_t) {
        if memory.is_null() {
            return Err(nvmlReturn_enum_NVML_ERROR_INVALID_ARGUMENT);
        }
        version::<nvmlMemory_v2_t>((*memory).version, 2)?;
        let (total, used) = match mig_device(device)? {
            Some(mig) => (mig.memory_bytes, 0),
            None => {
                let m = nv(fake()?.mock.memory(gpu(device)?))?;
                (m.total_bytes, m.used_bytes)
            }
        };
        let memory = &mut *memory;
        memory.total = total;
        memory.reserved = 0;
        memory.used = used;
        memory.free = total - used;
        Ok(())
    }

    fn nvmlDeviceGetClockInfo(device: nvmlDevice_t, kind: nvmlClockType_t, clock: *mut c_uint) {
        let c = nv(fake()?.mock.clocks(gpu(device)?, domain(kind)?))?;
        out(clock, supported(c.current)?)
    }

    fn nvmlDeviceGetDefaultApplicationsClock(
        device: nvmlDevice_t,
        kind: nvmlClockType_t,
        clock: *mut c_uint,
    ) {
        let c = nv(fake()?.mock.clocks(gpu(device)?, domain(kind)?))?;
        out(clock, supported(c.default)?)
    }

    fn nvmlDeviceGetMaxClockInfo(device: nvmlDevice_t, kind: nvmlClockType_t, clock: *mut c_uint) {
        let c = nv(fake()?.mock.clocks(gpu(device)?, domain(kind)?))?;
        out(clock, supported(c.max)?)
    }

    fn nvmlDeviceGetApplicationsClock(
        device: nvmlDevice_t,
        kind: nvmlClockType_t,
        clock: *mut c_uint,
    ) {
        let domain = domain(kind)?;
        let pair = supported(nv(fake()?.mock.applications_clocks(gpu(device)?))?)?;
        out(clock, match domain {
            ClockDomain::Core => pair.core_mhz,
            ClockDomain::Memory => pair.mem_mhz,
        })
    }

    /// Memory clocks, highest first.
    fn nvmlDeviceGetSupportedMemoryClocks(
        device: nvmlDevice_t,
        count: *mut c_uint,
        clocks: *mut c_uint,
    ) {
        let table = nv(fake()?.mock.supported_clocks(gpu(device)?))?;
        let mems: Vec<c_uint> = table.iter().map(|t| t.mem_mhz).collect();
        fill(clocks, count, &mems, false)
    }

    /// Core clocks at one memory clock, highest first; `NOT_FOUND` for a
    /// memory clock the GPU lacks.
    fn nvmlDeviceGetSupportedGraphicsClocks(
        device: nvmlDevice_t,
        memoryClockMHz: c_uint,
        count: *mut c_uint,
        clocks: *mut c_uint,
    ) {
        let table = nv(fake()?.mock.supported_clocks(gpu(device)?))?;
        let row = table
            .iter()
            .find(|t| t.mem_mhz == memoryClockMHz)
            .ok_or(nvmlReturn_enum_NVML_ERROR_NOT_FOUND)?;
        fill(clocks, count, &row.core_mhz, false)
    }

    fn nvmlDeviceSetGpuLockedClocks(
        device: nvmlDevice_t,
        minGpuClockMHz: c_uint,
        maxGpuClockMHz: c_uint,
    ) {
        let range = ClockRange { min_mhz: minGpuClockMHz, max_mhz: maxGpuClockMHz };
        nv(fake()?.mock.lock_core_clocks(gpu(device)?, range))
    }

    fn nvmlDeviceResetGpuLockedClocks(device: nvmlDevice_t) {
        nv(fake()?.mock.reset_core_clocks(gpu(device)?))
    }

    fn nvmlDeviceSetMemoryLockedClocks(
        device: nvmlDevice_t,
        minMemClockMHz: c_uint,
        maxMemClockMHz: c_uint,
    ) {
        let range = ClockRange { min_mhz: minMemClockMHz, max_mhz: maxMemClockMHz };
        nv(fake()?.mock.lock_memory_clocks(gpu(device)?, range))
    }

    fn nvmlDeviceResetMemoryLockedClocks(device: nvmlDevice_t) {
        nv(fake()?.mock.reset_memory_clocks(gpu(device)?))
    }

    fn nvmlDeviceSetApplicationsClocks(
        device: nvmlDevice_t,
        memClockMHz: c_uint,
        graphicsClockMHz: c_uint,
    ) {
        let pair = gpu_agent_backend::ClockPair { core_mhz: graphicsClockMHz, mem_mhz: memClockMHz };
        nv(fake()?.mock.set_applications_clocks(gpu(device)?, pair))
    }

    fn nvmlDeviceResetApplicationsClocks(device: nvmlDevice_t) {
        nv(fake()?.mock.reset_applications_clocks(gpu(device)?))
    }

    fn nvmlDeviceGetPowerUsage(device: nvmlDevice_t, power: *mut c_uint) {
        out(power, supported(nv(fake()?.mock.power_usage_mw(gpu(device)?))?)?)
    }

    fn nvmlDeviceGetPowerManagementLimit(device: nvmlDevice_t, limit: *mut c_uint) {
        out(limit, nv(fake()?.mock.power_limits(gpu(device)?))?.current_mw)
    }

    fn nvmlDeviceGetPowerManagementDefaultLimit(device: nvmlDevice_t, limit: *mut c_uint) {
        out(limit, supported(nv(fake()?.mock.power_limits(gpu(device)?))?.default_mw)?)
    }

    fn nvmlDeviceGetPowerManagementLimitConstraints(
        device: nvmlDevice_t,
        minLimit: *mut c_uint,
        maxLimit: *mut c_uint,
    ) {
        let limits = nv(fake()?.mock.power_limits(gpu(device)?))?;
        out(minLimit, limits.min_mw)?;
        out(maxLimit, limits.max_mw)
    }

    /// A limit outside the constraints is refused, as the driver does (the
    /// mock's trait call clamps).
    fn nvmlDeviceSetPowerManagementLimit(device: nvmlDevice_t, limit: c_uint) {
        let (fake, gpu) = (fake()?, gpu(device)?);
        let limits = nv(fake.mock.power_limits(gpu))?;
        if !(limits.min_mw..=limits.max_mw).contains(&limit) {
            return Err(nvmlReturn_enum_NVML_ERROR_INVALID_ARGUMENT);
        }
        nv(fake.mock.set_power_limit(gpu, limit)).map(drop)
    }

    fn nvmlDeviceGetTotalEnergyConsumption(device: nvmlDevice_t, energy: *mut c_ulonglong) {
        out(energy, supported(nv(fake()?.mock.energy_mj(gpu(device)?))?)?)
    }

    fn nvmlDeviceGetUtilizationRates(device: nvmlDevice_t, utilization: *mut nvmlUtilization_t) {
        let u = supported(nv(fake()?.mock.utilization(gpu(device)?))?)?;
        out(utilization, nvmlUtilization_t { gpu: u.gpu_pct, memory: u.memory_pct })
    }

    fn nvmlDeviceGetTemperature(
        device: nvmlDevice_t,
        sensorType: nvmlTemperatureSensors_t,
        temp: *mut c_uint,
    ) {
        if sensorType != nvmlTemperatureSensors_enum_NVML_TEMPERATURE_GPU {
            return Err(nvmlReturn_enum_NVML_ERROR_INVALID_ARGUMENT);
        }
        out(temp, supported(nv(fake()?.mock.temperature_c(gpu(device)?))?)?)
    }

    /// The processes the mock knows: with the daemon on NVML, none (its
    /// tasks are real processes the stand-in cannot see).
    fn nvmlDeviceGetComputeRunningProcesses_v3(
        device: nvmlDevice_t,
        infoCount: *mut c_uint,
        infos: *mut nvmlProcessInfo_t,
    ) {
        const NONE: c_uint = 0xFFFF_FFFF;
        let processes: Vec<nvmlProcessInfo_t> = nv(fake()?.mock.processes(gpu(device)?))?
            .into_iter()
            .map(|p| nvmlProcessInfo_t {
                pid: p.pid,
                usedGpuMemory: p.used_bytes.unwrap_or(0),
                gpuInstanceId: p.gpu_instance.unwrap_or(NONE),
                computeInstanceId: p.compute_instance.unwrap_or(NONE),
            })
            .collect();
        fill(infos, infoCount, &processes, false)
    }

    fn nvmlDeviceGetMigMode(device: nvmlDevice_t, currentMode: *mut c_uint, pendingMode: *mut c_uint) {
        let mode = supported(nv(fake()?.mock.mig_mode(gpu(device)?))?)?;
        out(currentMode, c_uint::from(mode.current))?;
        out(pendingMode, c_uint::from(mode.pending))
    }

    /// Takes effect at once on an idle GPU, the driver resetting it
    /// (`activationStatus` SUCCESS); on a busy one it stays pending
    /// (`activationStatus` IN_USE).
    fn nvmlDeviceSetMigMode(device: nvmlDevice_t, mode: c_uint, activationStatus: *mut nvmlReturn_t) {
        let enabled = match mode {
            NVML_DEVICE_MIG_DISABLE => false,
            NVML_DEVICE_MIG_ENABLE => true,
            _ => return Err(nvmlReturn_enum_NVML_ERROR_INVALID_ARGUMENT),
        };
        if activationStatus.is_null() {
            return Err(nvmlReturn_enum_NVML_ERROR_INVALID_ARGUMENT);
        }
        let (fake, gpu) = (fake()?, gpu(device)?);
        let mode = nv(fake.mock.set_mig_mode(gpu, enabled))?;
        let status = if mode.current == mode.pending {
            Ok(())
        } else {
            nv(fake.mock.reset_gpu(gpu))
        };
        *activationStatus = status.err().unwrap_or(nvmlReturn_enum_NVML_SUCCESS);
        Ok(())
    }

    fn nvmlDeviceGetGpuInstanceProfileInfo(
        device: nvmlDevice_t,
        profile: c_uint,
        info: *mut nvmlGpuInstanceProfileInfo_t,
    ) {
        let p = profile_at(gpu(device)?, profile)?;
        out(info, nvmlGpuInstanceProfileInfo_t {
            id: p.id,
            isP2pSupported: 0,
            sliceCount: p.slice_count,
            instanceCount: p.max_count,
            multiprocessorCount: 0,
            copyEngineCount: 0,
            decoderCount: 0,
            encoderCount: 0,
            jpegCount: 0,
            ofaCount: 0,
            memorySizeMB: p.memory_bytes >> 20,
        })
    }

    /// As `nvmlDeviceGetGpuInstanceProfileInfo`, with the profile's name.
    fn nvmlDeviceGetGpuInstanceProfileInfoV(
        device: nvmlDevice_t,
        profile: c_uint,
        info: *mut nvmlGpuInstanceProfileInfo_v2_t,
    ) {
        if info.is_null() {
            return Err(nvmlReturn_enum_NVML_ERROR_INVALID_ARGUMENT);
        }
        version::<nvmlGpuInstanceProfileInfo_v2_t>((*info).version, 2)?;
        let p = profile_at(gpu(device)?, profile)?;
        let info = &mut *info;
        info.id = p.id;
        info.sliceCount = p.slice_count;
        info.instanceCount = p.max_count;
        info.memorySizeMB = p.memory_bytes >> 20;
        info.name = c_array(&format!("MIG {}", p.name.unwrap_or_default()));
        Ok(())
    }

    /// With a null array, only the count.
    fn nvmlDeviceGetGpuInstancePossiblePlacements_v2(
        device: nvmlDevice_t,
        profileId: c_uint,
        placements: *mut nvmlGpuInstancePlacement_t,
        count: *mut c_uint,
    ) {
        let p = profile_by_id(gpu(device)?, profileId)?;
        let all: Vec<nvmlGpuInstancePlacement_t> = p
            .placements
            .iter()
            .map(|pl| nvmlGpuInstancePlacement_t { start: pl.start, size: pl.size })
            .collect();
        fill(placements, count, &all, true)
    }

    fn nvmlDeviceCreateGpuInstanceWithPlacement(
        device: nvmlDevice_t,
        profileId: c_uint,
        placement: *const nvmlGpuInstancePlacement_t,
        gpuInstance: *mut nvmlGpuInstance_t,
    ) {
        if placement.is_null() || gpuInstance.is_null() {
            return Err(nvmlReturn_enum_NVML_ERROR_INVALID_ARGUMENT);
        }
        let (fake, gpu) = (fake()?, gpu(device)?);
        let placement = *placement;
        let profile = profile_by_id(gpu, profileId)?;
        if !profile.placements.iter().any(|p| (p.start, p.size) == (placement.start, placement.size)) {
            return Err(nvmlReturn_enum_NVML_ERROR_INVALID_ARGUMENT);
        }
        let gi = nv(fake.mock.create_gpu_instance(gpu, profileId, placement.start))?;
        out(gpuInstance, fake.handle(Handle::Gi(gpu, gi.id)))
    }

    fn nvmlGpuInstanceDestroy(gpuInstance: nvmlGpuInstance_t) {
        let (gpu, id) = gpu_instance(gpuInstance)?;
        nv(fake()?.mock.destroy_gpu_instance(gpu, id))
    }

    fn nvmlDeviceGetGpuInstances(
        device: nvmlDevice_t,
        profileId: c_uint,
        gpuInstances: *mut nvmlGpuInstance_t,
        count: *mut c_uint,
    ) {
        let (fake, gpu) = (fake()?, gpu(device)?);
        profile_by_id(gpu, profileId)?;
        let handles: Vec<nvmlGpuInstance_t> = nv(fake.mock.gpu_instances(gpu))?
            .into_iter()
            .filter(|gi| gi.profile_id == profileId)
            .map(|gi| fake.handle(Handle::Gi(gpu, gi.id)))
            .collect();
        fill(gpuInstances, count, &handles, false)
    }

    fn nvmlDeviceGetGpuInstanceById(device: nvmlDevice_t, id: c_uint, gpuInstance: *mut nvmlGpuInstance_t) {
        let (fake, gpu) = (fake()?, gpu(device)?);
        if !nv(fake.mock.gpu_instances(gpu))?.iter().any(|gi| gi.id == id) {
            return Err(nvmlReturn_enum_NVML_ERROR_NOT_FOUND);
        }
        out(gpuInstance, fake.handle(Handle::Gi(gpu, id)))
    }

    fn nvmlGpuInstanceGetInfo(gpuInstance: nvmlGpuInstance_t, info: *mut nvmlGpuInstanceInfo_t) {
        let fake = fake()?;
        let (gpu, id) = gpu_instance(gpuInstance)?;
        let gi = nv(fake.mock.gpu_instances(gpu))?
            .into_iter()
            .find(|gi| gi.id == id)
            .ok_or(nvmlReturn_enum_NVML_ERROR_INVALID_ARGUMENT)?;
        out(info, nvmlGpuInstanceInfo_t {
            device: fake.handle(Handle::Gpu(gpu)),
            id,
            profileId: gi.profile_id,
            placement: nvmlGpuInstancePlacement_t {
                start: gi.placement.start,
                size: gi.placement.size,
            },
        })
    }

    /// Compute-instance profile indices are their ids here, as on the
    /// driver's A100 and H100; the shared engine profile only.
    fn nvmlGpuInstanceGetComputeInstanceProfileInfo(
        gpuInstance: nvmlGpuInstance_t,
        profile: c_uint,
        engProfile: c_uint,
        info: *mut nvmlComputeInstanceProfileInfo_t,
    ) {
        let (gpu, gi) = gpu_instance(gpuInstance)?;
        if profile >= NVML_COMPUTE_INSTANCE_PROFILE_COUNT {
            return Err(nvmlReturn_enum_NVML_ERROR_INVALID_ARGUMENT);
        }
        if engProfile != NVML_COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED {
            return Err(nvmlReturn_enum_NVML_ERROR_NOT_SUPPORTED);
        }
        let p = nv(fake()?.mock.compute_instance_profiles(gpu, gi))?
            .into_iter()
            .find(|p| p.id == profile)
            .ok_or(nvmlReturn_enum_NVML_ERROR_NOT_SUPPORTED)?;
        out(info, nvmlComputeInstanceProfileInfo_t {
            id: p.id,
            sliceCount: p.slice_count,
            instanceCount: p.max_count,
            multiprocessorCount: 0,
            sharedCopyEngineCount: 0,
            sharedDecoderCount: 0,
            sharedEncoderCount: 0,
            sharedJpegCount: 0,
            sharedOfaCount: 0,
        })
    }

    fn nvmlGpuInstanceCreateComputeInstance(
        gpuInstance: nvmlGpuInstance_t,
        profileId: c_uint,
        computeInstance: *mut nvmlComputeInstance_t,
    ) {
        let fake = fake()?;
        let (gpu, gi) = gpu_instance(gpuInstance)?;
        let ci = nv(fake.mock.create_compute_instance(gpu, gi, profileId))?;
        out(computeInstance, fake.handle(Handle::Ci(gpu, gi, ci.id)))
    }

    fn nvmlGpuInstanceGetComputeInstanceById(
        gpuInstance: nvmlGpuInstance_t,
        id: c_uint,
        computeInstance: *mut nvmlComputeInstance_t,
    ) {
        let fake = fake()?;
        let (gpu, gi) = gpu_instance(gpuInstance)?;
        if !nv(fake.mock.compute_instances(gpu, gi))?.iter().any(|ci| ci.id == id) {
            return Err(nvmlReturn_enum_NVML_ERROR_NOT_FOUND);
        }
        out(computeInstance, fake.handle(Handle::Ci(gpu, gi, id)))
    }

    fn nvmlComputeInstanceDestroy(computeInstance: nvmlComputeInstance_t) {
        let (gpu, gi, id) = compute_instance(computeInstance)?;
        nv(fake()?.mock.destroy_compute_instance(gpu, gi, id))
    }

    fn nvmlGpuInstanceGetComputeInstances(
        gpuInstance: nvmlGpuInstance_t,
        profileId: c_uint,
        computeInstances: *mut nvmlComputeInstance_t,
        count: *mut c_uint,
    ) {
        let fake = fake()?;
        let (gpu, gi) = gpu_instance(gpuInstance)?;
        let handles: Vec<nvmlComputeInstance_t> = nv(fake.mock.compute_instances(gpu, gi))?
            .into_iter()
            .filter(|ci| ci.profile_id == profileId)
            .map(|ci| fake.handle(Handle::Ci(gpu, gi, ci.id)))
            .collect();
        fill(computeInstances, count, &handles, false)
    }

    fn nvmlComputeInstanceGetInfo_v2(
        computeInstance: nvmlComputeInstance_t,
        info: *mut nvmlComputeInstanceInfo_t,
    ) {
        let fake = fake()?;
        let (gpu, gi, id) = compute_instance(computeInstance)?;
        let ci = nv(fake.mock.compute_instances(gpu, gi))?
            .into_iter()
            .find(|ci| ci.id == id)
            .ok_or(nvmlReturn_enum_NVML_ERROR_INVALID_ARGUMENT)?;
        let slices = nv(fake.mock.compute_instance_profiles(gpu, gi))?
            .into_iter()
            .find(|p| p.id == ci.profile_id)
            .map_or(0, |p| p.slice_count);
        out(info, nvmlComputeInstanceInfo_t {
            device: fake.handle(Handle::Gpu(gpu)),
            gpuInstance: fake.handle(Handle::Gi(gpu, gi)),
            id,
            profileId: ci.profile_id,
            placement: nvmlComputeInstancePlacement_t { start: 0, size: slices },
        })
    }

    /// A MIG-capable GPU has a slot per compute slice.
    fn nvmlDeviceGetMaxMigDeviceCount(device: nvmlDevice_t, count: *mut c_uint) {
        let profiles = nv(fake()?.mock.gpu_instance_profiles(gpu(device)?))?;
        out(count, profiles.iter().map(|p| p.slice_count).max().unwrap_or(0))
    }

    /// The MIG devices in order; `NOT_FOUND` for an empty slot.
    fn nvmlDeviceGetMigDeviceHandleByIndex(device: nvmlDevice_t, index: c_uint, migDevice: *mut nvmlDevice_t) {
        let (fake, gpu) = (fake()?, gpu(device)?);
        let mig = nv(fake.mock.mig_devices(gpu))?
            .into_iter()
            .nth(index as usize)
            .ok_or(nvmlReturn_enum_NVML_ERROR_NOT_FOUND)?;
        out(migDevice, fake.handle(Handle::Mig(gpu, mig.gpu_instance, mig.compute_instance)))
    }

    fn nvmlDeviceGetGpuInstanceId(device: nvmlDevice_t, id: *mut c_uint) {
        let mig = mig_device(device)?.ok_or(nvmlReturn_enum_NVML_ERROR_NOT_SUPPORTED)?;
        out(id, mig.gpu_instance)
    }

    fn nvmlDeviceGetComputeInstanceId(device: nvmlDevice_t, id: *mut c_uint) {
        let mig = mig_device(device)?.ok_or(nvmlReturn_enum_NVML_ERROR_NOT_SUPPORTED)?;
        out(id, mig.compute_instance)
    }

    fn nvmlEventSetCreate(set: *mut nvmlEventSet_t) {
        out(set, fake()?.new_set())
    }

    /// Critical XIDs only.
    fn nvmlDeviceGetSupportedEventTypes(device: nvmlDevice_t, eventTypes: *mut c_ulonglong) {
        let gpu = gpu(device)?;
        alive(gpu)?;
        out(eventTypes, c_ulonglong::from(nvmlEventTypeXidCriticalError))
    }

    fn nvmlDeviceRegisterEvents(device: nvmlDevice_t, eventTypes: c_ulonglong, set: nvmlEventSet_t) {
        let (fake, gpu) = (fake()?, gpu(device)?);
        alive(gpu)?;
        if eventTypes & !c_ulonglong::from(nvmlEventTypeXidCriticalError) != 0 {
            return Err(nvmlReturn_enum_NVML_ERROR_NOT_SUPPORTED);
        }
        fake.with_set(set, |gpus| gpus.insert(gpu)).map(drop)
    }

    /// The next XID on a registered GPU; `GPU_IS_LOST` when one is lost;
    /// `TIMEOUT` when neither comes within `timeoutms`.
    fn nvmlEventSetWait_v2(set: nvmlEventSet_t, data: *mut nvmlEventData_t, timeoutms: c_uint) {
        let fake = fake()?;
        if data.is_null() {
            return Err(nvmlReturn_enum_NVML_ERROR_INVALID_ARGUMENT);
        }
        let deadline = Instant::now() + Duration::from_millis(timeoutms.into());
        loop {
            fake.poll_control();
            let left = deadline.saturating_duration_since(Instant::now());
            let Some(event) = nv(fake.mock.wait_event(left.min(CONTROL_POLL)))? else {
                if left.is_zero() {
                    return Err(nvmlReturn_enum_NVML_ERROR_TIMEOUT);
                }
                continue;
            };
            if !fake.with_set(set, |gpus| gpus.contains(&event.gpu))? {
                continue;
            }
            return match event.kind {
                DeviceEventKind::Xid(xid) => out(data, nvmlEventData_t {
                    device: fake.handle(Handle::Gpu(event.gpu)),
                    eventType: c_ulonglong::from(nvmlEventTypeXidCriticalError),
                    eventData: xid,
                    gpuInstanceId: 0xFFFF_FFFF,
                    computeInstanceId: 0xFFFF_FFFF,
                }),
                DeviceEventKind::GpuLost => Err(nvmlReturn_enum_NVML_ERROR_GPU_IS_LOST),
            };
        }
    }

    fn nvmlEventSetFree(set: nvmlEventSet_t) {
        fake()?.with_set(set, |gpus| gpus.clear())
    }
}

#[cfg(test)]
mod tests;
