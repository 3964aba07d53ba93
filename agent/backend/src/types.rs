//! What a backend reads and writes, in domain units: MHz, mW, mJ, bytes, °C, %.

use serde::Serialize;

use super::{BackendError, Result};

/// What identifies a GPU.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct DeviceInfo {
    /// NVML index, 0..
    pub index: u32,
    /// `GPU-…` UUID.
    pub uuid: String,
    /// Product name, e.g. `NVIDIA A100-SXM4-40GB`.
    pub name: String,
    /// PCI bus id, e.g. `00000000:07:00.0`.
    pub pci_bus_id: String,
    /// PCI device and vendor id, `0xDDDDVVVV` (`0x20B010DE`).
    pub pci_device_id: u32,
    /// PCI subsystem device and vendor id (`None` where the driver has none).
    pub pci_subsystem_id: Option<u32>,
    /// Architecture, e.g. `Ampere` (`None` when the driver does not say).
    pub architecture: Option<String>,
    /// Whether the GPU supports MIG.
    pub mig_capable: bool,
}

/// Device memory.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct MemoryInfo {
    /// Total bytes.
    pub total_bytes: u64,
    /// Bytes in use.
    pub used_bytes: u64,
}

/// The two clock domains a GPU lets one set.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
pub enum ClockDomain {
    /// Graphics (SM) clock.
    Core,
    /// Memory clock.
    Memory,
}

/// Readings of one clock domain (MHz); `None` where the driver has no reading.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct ClockReadings {
    /// The clock now.
    pub current: Option<u32>,
    /// The default application clock.
    pub default: Option<u32>,
    /// Lowest supported clock.
    pub min: Option<u32>,
    /// Highest clock the GPU can run (boost included).
    pub max: Option<u32>,
}

/// Supported core clocks at one memory clock, highest first.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SupportedClocks {
    /// Memory clock, MHz.
    pub mem_mhz: u32,
    /// Core clocks allowed with it, MHz, highest first.
    pub core_mhz: Vec<u32>,
}

/// An inclusive clock range (MHz) for locking.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct ClockRange {
    /// Lower bound.
    pub min_mhz: u32,
    /// Upper bound.
    pub max_mhz: u32,
}

impl ClockRange {
    /// `InvalidArgument` (naming `gpu` and `call`) unless `min <= max`.
    pub fn check(&self, gpu: u32, call: &'static str) -> Result<()> {
        if self.min_mhz > self.max_mhz {
            return Err(BackendError::invalid(
                gpu,
                call,
                format!("min {} MHz > max {} MHz", self.min_mhz, self.max_mhz),
            ));
        }
        Ok(())
    }
}

/// A (core, memory) pair of application clocks, MHz.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct ClockPair {
    /// Core clock.
    pub core_mhz: u32,
    /// Memory clock.
    pub mem_mhz: u32,
}

/// Power management limit and its constraints (mW).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct PowerLimits {
    /// The limit now.
    pub current_mw: u32,
    /// The default limit.
    pub default_mw: Option<u32>,
    /// Lowest settable limit.
    pub min_mw: u32,
    /// Highest settable limit.
    pub max_mw: u32,
}

impl PowerLimits {
    /// `mw` clamped to the settable range.
    pub fn clamp(&self, mw: u32) -> u32 {
        mw.clamp(self.min_mw, self.max_mw)
    }
}

/// Utilisation over the driver's last sample period (%).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Utilization {
    /// Share of time a kernel ran.
    pub gpu_pct: u32,
    /// Share of time memory was read or written.
    pub memory_pct: u32,
}

/// A process using a GPU.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct GpuProcess {
    /// Process id.
    pub pid: u32,
    /// Device memory it uses, when the driver knows.
    pub used_bytes: Option<u64>,
    /// The GPU instance it runs in (MIG), if any.
    pub gpu_instance: Option<u32>,
    /// The compute instance it runs in (MIG), if any.
    pub compute_instance: Option<u32>,
}

/// MIG mode: what it is and what it will be after the next reset.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct MigMode {
    /// Enabled now.
    pub current: bool,
    /// Enabled after the next GPU reset.
    pub pending: bool,
}

/// Where a GPU instance sits: memory slices `start..start + size`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
pub struct Placement {
    /// First memory slice.
    pub start: u32,
    /// Memory slices occupied.
    pub size: u32,
}

impl Placement {
    /// Whether two placements share a memory slice.
    pub fn overlaps(&self, other: &Placement) -> bool {
        self.start < other.start + other.size && other.start < self.start + self.size
    }
}

/// A GPU-instance profile as the driver reports it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct GpuInstanceProfile {
    /// The driver's profile id (19 for 1g, 0 for 7g, ...).
    pub id: u32,
    /// Name, e.g. `1g.5gb` (`None` where the driver does not name it).
    pub name: Option<String>,
    /// Compute slices.
    pub slice_count: u32,
    /// Memory, bytes.
    pub memory_bytes: u64,
    /// Most instances of it at once.
    pub max_count: u32,
    /// Where instances may go.
    pub placements: Vec<Placement>,
}

impl GpuInstanceProfile {
    /// The order profiles are listed in: fewest compute slices first, then
    /// least memory, then by name (`1g.5gb` before `1g.5gb+me`), as the
    /// catalogue lists them.
    pub fn smallest_first(a: &GpuInstanceProfile, b: &GpuInstanceProfile) -> std::cmp::Ordering {
        (a.slice_count, a.memory_bytes, &a.name).cmp(&(b.slice_count, b.memory_bytes, &b.name))
    }
}

impl std::fmt::Display for GpuInstanceProfile {
    /// One row: id, name, slices, MiB, max count and `start:size` placements.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "profile id {:>2} {:<12} {} slice(s), {:>6} MiB, max {}, placements",
            self.id,
            self.name.as_deref().unwrap_or("-"),
            self.slice_count,
            self.memory_bytes >> 20,
            self.max_count
        )?;
        for p in &self.placements {
            write!(f, " {}:{}", p.start, p.size)?;
        }
        Ok(())
    }
}

/// A GPU instance.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct GpuInstance {
    /// Instance id, unique on its GPU.
    pub id: u32,
    /// The profile it was created from.
    pub profile_id: u32,
    /// Its memory slices.
    pub placement: Placement,
}

/// A compute-instance profile inside a GPU instance.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ComputeInstanceProfile {
    /// The driver's profile id.
    pub id: u32,
    /// Compute slices.
    pub slice_count: u32,
    /// Most instances of it in the GPU instance.
    pub max_count: u32,
}

/// A compute instance.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ComputeInstance {
    /// Instance id, unique in its GPU instance.
    pub id: u32,
    /// The GPU instance holding it.
    pub gpu_instance: u32,
    /// The profile it was created from.
    pub profile_id: u32,
}

/// A MIG device: what CUDA sees for one compute instance.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct MigDevice {
    /// `MIG-…` UUID.
    pub uuid: String,
    /// Its GPU instance.
    pub gpu_instance: u32,
    /// Its compute instance.
    pub compute_instance: u32,
    /// Memory, bytes.
    pub memory_bytes: u64,
}

/// Something the driver reported about a device.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct DeviceEvent {
    /// The GPU.
    pub gpu: u32,
    /// What happened.
    pub kind: DeviceEventKind,
}

/// Kinds of device events.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum DeviceEventKind {
    /// A critical XID error, with its code.
    Xid(u64),
    /// The GPU fell off the bus.
    GpuLost,
}
