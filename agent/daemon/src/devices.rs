//! The device objects: one per GPU and per MIG instance, their readings
//! built from the backend when served, refreshed every second, with
//! `PropertiesChanged` for what changed.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use zbus::{interface, object_server::InterfaceRef, Connection};

use super::layout::Target;
use super::states::Health;
use gpu_agent_backend::{ClockDomain, GpuBackend};
use gpu_agent_core::host::{DeviceSpec, Partition};
use gpu_agent_dbus::{device_path, mig_device_path, serve_strict_properties, DeviceStatus};

/// One device object; its readings are refreshed by the sampler.
pub struct DeviceObject {
    /// The properties.
    pub status: DeviceStatus,
}

#[interface(name = "org.gpuagent.Device1")]
impl DeviceObject {
    #[zbus(property(emits_changed_signal = "const"))]
    async fn index(&self) -> u32 {
        self.status.index
    }
    #[zbus(property(emits_changed_signal = "const"))]
    async fn uuid(&self) -> String {
        self.status.uuid.clone()
    }
    #[zbus(property(emits_changed_signal = "const"))]
    async fn name(&self) -> String {
        self.status.name.clone()
    }
    #[zbus(property(emits_changed_signal = "const"))]
    async fn memory_gb(&self) -> f64 {
        self.status.memory_gb
    }
    #[zbus(property(emits_changed_signal = "const"))]
    async fn speed(&self) -> f64 {
        self.status.speed
    }
    #[zbus(property)]
    async fn core_clock_mhz(&self) -> u32 {
        self.status.core_clock_mhz
    }
    #[zbus(property)]
    async fn mem_clock_mhz(&self) -> u32 {
        self.status.mem_clock_mhz
    }
    #[zbus(property)]
    async fn power_w(&self) -> f64 {
        self.status.power_w
    }
    #[zbus(property)]
    async fn energy_j(&self) -> f64 {
        self.status.energy_j
    }
    #[zbus(property)]
    async fn utilization(&self) -> f64 {
        self.status.utilization
    }
    #[zbus(property)]
    async fn memory_used_gb(&self) -> f64 {
        self.status.memory_used_gb
    }
    #[zbus(property)]
    async fn temperature_c(&self) -> f64 {
        self.status.temperature_c
    }
    #[zbus(property)]
    async fn mig_enabled(&self) -> bool {
        self.status.mig_enabled
    }
    #[zbus(property)]
    async fn current_task(&self) -> String {
        self.status.current_task.clone()
    }
    /// Whether it takes work.
    #[zbus(property)]
    async fn online(&self) -> bool {
        self.status.online
    }
    /// `ok`, `drained`, `lost`, `xid N: what`, `mig` or `retired`.
    #[zbus(property)]
    async fn health(&self) -> String {
        self.status.health.clone()
    }
    /// Whether it can take work at all (a GPU split into MIG instances
    /// cannot; its instances can).
    #[zbus(property)]
    async fn schedulable(&self) -> bool {
        self.status.schedulable
    }
    /// A MIG instance's GPU; a GPU's own index.
    #[zbus(property(emits_changed_signal = "const"))]
    async fn parent(&self) -> u32 {
        self.status.parent
    }
    /// A MIG instance's GPU-instance profile; `""` for a GPU.
    #[zbus(property(emits_changed_signal = "const"))]
    async fn mig_profile(&self) -> String {
        self.status.mig_profile.clone()
    }
    /// A MIG instance's (first memory slice, memory slices); `(0, 0)` for a
    /// GPU.
    #[zbus(property(emits_changed_signal = "const"))]
    async fn mig_placement(&self) -> (u32, u32) {
        self.status.mig_placement
    }
}

/// Bytes per GiB.
const GIB: f64 = (1u64 << 30) as f64;

/// How often readings are refreshed.
pub const SAMPLE_EVERY: Duration = Duration::from_secs(1);

/// The object path of a device (`None`: a retired MIG instance, which has
/// none).
pub fn object_path(spec: &DeviceSpec) -> Option<String> {
    match &spec.partition {
        Partition::Whole | Partition::Split { .. } => Some(device_path(spec.index)),
        Partition::Mig(slot) => Some(mig_device_path(slot.parent, slot.start)),
        Partition::Retired(_) => None,
    }
}

/// A device's properties as the backend reports them now. A MIG instance
/// shows its GPU's name, clocks and MIG mode, its own UUID and memory (from
/// the backend), and its compute-slice share of its GPU's power and energy
/// (docs/mig.md §6.1); NVML reports no utilisation under MIG, nor does it.
pub fn read(
    backend: &dyn GpuBackend,
    spec: &DeviceSpec,
    target: &Target,
    current_task: String,
) -> DeviceStatus {
    let gpu = target.gpu;
    let warn = |what: &str, e: gpu_agent_backend::BackendError| {
        log::debug!("device {}: cannot read {what}: {e}", spec.index);
    };
    let name = match backend.device_info(gpu) {
        Ok(i) => i.name,
        Err(e) => {
            warn("identity", e);
            spec.model.nvml_name.to_string()
        }
    };
    let clock = |domain| {
        backend
            .clocks(gpu, domain)
            .map_err(|e| warn("clocks", e))
            .ok()
            .and_then(|c| c.current)
            .unwrap_or(0)
    };
    let mig = spec.mig();
    let share = Target::energy_share(spec);
    let health = crate::engine::health_of_partition(spec);
    DeviceStatus {
        index: spec.index,
        uuid: target.uuid.clone(),
        name: match mig {
            Some(slot) => format!("{name} MIG {}", slot.profile.name),
            None => name,
        },
        memory_gb: target
            .mig
            .map_or(spec.memory_gb, |m| m.memory_bytes as f64 / GIB),
        speed: spec.speed,
        core_clock_mhz: clock(ClockDomain::Core),
        mem_clock_mhz: clock(ClockDomain::Memory),
        power_w: backend
            .power_usage_mw(gpu)
            .ok()
            .flatten()
            .map_or(f64::NAN, |mw| f64::from(mw) / 1000.0 * share),
        energy_j: backend
            .energy_mj(gpu)
            .ok()
            .flatten()
            .map_or(f64::NAN, |mj| mj as f64 / 1000.0 * share),
        utilization: match mig {
            Some(_) => f64::NAN,
            None => backend
                .utilization(gpu)
                .ok()
                .flatten()
                .map_or(f64::NAN, |u| f64::from(u.gpu_pct) / 100.0),
        },
        memory_used_gb: match mig {
            Some(_) => f64::NAN,
            None => backend
                .memory(gpu)
                .map_or(f64::NAN, |m| m.used_bytes as f64 / GIB),
        },
        temperature_c: match mig {
            Some(_) => f64::NAN,
            None => backend
                .temperature_c(gpu)
                .ok()
                .flatten()
                .map_or(f64::NAN, f64::from),
        },
        mig_enabled: backend
            .mig_mode(gpu)
            .ok()
            .flatten()
            .is_some_and(|m| m.current),
        current_task,
        online: health.is_ok(),
        health: health.to_string(),
        schedulable: spec.schedulable(),
        parent: mig.map_or(spec.index, |m| m.parent),
        mig_profile: mig.map_or_else(String::new, |m| m.profile.name.to_string()),
        mig_placement: mig.map_or((0, 0), |m| (m.start, m.profile.placement_size)),
    }
}

/// A device's object, with what its readings are read from.
#[derive(Clone)]
pub struct Served {
    /// The device.
    pub spec: DeviceSpec,
    /// Where it runs.
    pub target: Target,
    /// Its object.
    pub object: InterfaceRef<DeviceObject>,
}

/// The served device objects by index: the pump adds and withdraws MIG
/// instances' as layouts change, the sampler refreshes them all.
pub type Objects = Arc<tokio::sync::RwLock<BTreeMap<u32, Served>>>;

/// Serves `spec`'s object on `conn` (nothing for a retired instance).
pub async fn serve(
    conn: &Connection,
    backend: &Arc<dyn GpuBackend>,
    spec: DeviceSpec,
    target: Target,
) -> zbus::Result<Option<Served>> {
    let Some(path) = object_path(&spec) else {
        return Ok(None);
    };
    let status = {
        let (backend, spec, target) = (backend.clone(), spec.clone(), target.clone());
        tokio::task::spawn_blocking(move || read(&*backend, &spec, &target, String::new()))
            .await
            .expect("a reading does not panic")
    };
    conn.object_server()
        .at(path.as_str(), DeviceObject { status })
        .await?;
    serve_strict_properties(conn.object_server(), &path).await?;
    let object = conn
        .object_server()
        .interface::<_, DeviceObject>(path.as_str())
        .await?;
    Ok(Some(Served {
        spec,
        target,
        object,
    }))
}

/// Withdraws `spec`'s object from `conn`.
pub async fn withdraw(conn: &Connection, spec: &DeviceSpec) -> zbus::Result<()> {
    if let Some(path) = object_path(spec) {
        conn.object_server()
            .remove::<DeviceObject, _>(path.as_str())
            .await?;
    }
    Ok(())
}

/// Refreshes every device object forever.
pub async fn sample(backend: Arc<dyn GpuBackend>, objects: Objects) {
    let mut tick = tokio::time::interval(SAMPLE_EVERY);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        let served: Vec<Served> = objects.read().await.values().cloned().collect();
        for s in served {
            let backend = backend.clone();
            let (spec, target) = (s.spec.clone(), s.target.clone());
            let fresh =
                tokio::task::spawn_blocking(move || read(&*backend, &spec, &target, String::new()))
                    .await
                    .expect("a reading does not panic");
            if let Err(e) = update(&s.object, fresh).await {
                log::debug!("device {}: cannot signal changes: {e}", s.spec.index);
            }
        }
    }
}

/// Stores `fresh` readings (keeping the current task) and signals the changes.
async fn update(object: &InterfaceRef<DeviceObject>, fresh: DeviceStatus) -> zbus::Result<()> {
    let emitter = object.signal_emitter();
    let mut dev = object.get_mut().await;
    let old = dev.status.clone();
    // Identity, memory and speed are constant; the task, the health and
    // whether it is schedulable come from the engine.
    dev.status = DeviceStatus {
        uuid: old.uuid.clone(),
        name: old.name.clone(),
        current_task: old.current_task.clone(),
        online: old.online,
        health: old.health.clone(),
        schedulable: old.schedulable,
        ..fresh
    };
    let new = dev.status.clone();
    // NaN != NaN: compare readings by bits.
    let same = |a: f64, b: f64| a.to_bits() == b.to_bits();
    if new.core_clock_mhz != old.core_clock_mhz {
        dev.core_clock_mhz_changed(emitter).await?;
    }
    if new.mem_clock_mhz != old.mem_clock_mhz {
        dev.mem_clock_mhz_changed(emitter).await?;
    }
    if !same(new.power_w, old.power_w) {
        dev.power_w_changed(emitter).await?;
    }
    if !same(new.energy_j, old.energy_j) {
        dev.energy_j_changed(emitter).await?;
    }
    if !same(new.utilization, old.utilization) {
        dev.utilization_changed(emitter).await?;
    }
    if !same(new.memory_used_gb, old.memory_used_gb) {
        dev.memory_used_gb_changed(emitter).await?;
    }
    if !same(new.temperature_c, old.temperature_c) {
        dev.temperature_c_changed(emitter).await?;
    }
    if new.mig_enabled != old.mig_enabled {
        dev.mig_enabled_changed(emitter).await?;
    }
    Ok(())
}

/// Sets the task running on a device and signals it.
pub async fn set_current_task(
    object: &InterfaceRef<DeviceObject>,
    task: String,
) -> zbus::Result<()> {
    let mut dev = object.get_mut().await;
    if dev.status.current_task != task {
        dev.status.current_task = task;
        dev.current_task_changed(object.signal_emitter()).await?;
    }
    Ok(())
}

/// Sets whether a device takes work and its health, and signals them.
pub async fn set_health(
    object: &InterfaceRef<DeviceObject>,
    online: bool,
    health: &Health,
) -> zbus::Result<()> {
    let health = health.to_string();
    let mut dev = object.get_mut().await;
    let emitter = object.signal_emitter();
    if dev.status.online != online {
        dev.status.online = online;
        dev.online_changed(emitter).await?;
    }
    if dev.status.health != health {
        dev.status.health = health;
        dev.health_changed(emitter).await?;
    }
    Ok(())
}

/// Sets whether a GPU can take work at all, and whether MIG is on, after
/// it was split or made whole again, and signals them.
pub async fn set_split(object: &InterfaceRef<DeviceObject>, split: bool) -> zbus::Result<()> {
    let mut dev = object.get_mut().await;
    let emitter = object.signal_emitter();
    if dev.status.schedulable == split {
        dev.status.schedulable = !split;
        dev.schedulable_changed(emitter).await?;
    }
    if dev.status.mig_enabled != split {
        dev.status.mig_enabled = split;
        dev.mig_enabled_changed(emitter).await?;
    }
    Ok(())
}
