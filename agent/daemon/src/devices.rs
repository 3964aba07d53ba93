//! The device objects' readings: built from the backend at start, refreshed
//! every second, with `PropertiesChanged` for what changed.

use std::sync::Arc;
use std::time::Duration;

use zbus::object_server::InterfaceRef;

use super::service::DeviceObject;
use gpu_agent_backend::{ClockDomain, GpuBackend};
use gpu_agent_core::host::DeviceSpec;
use gpu_agent_dbus::DeviceStatus;

/// How often readings are refreshed.
pub const SAMPLE_EVERY: Duration = Duration::from_secs(1);

/// A device's properties as the backend reports them now.
pub fn read(backend: &dyn GpuBackend, spec: &DeviceSpec, current_task: String) -> DeviceStatus {
    let gpu = spec.index;
    let warn = |what: &str, e: gpu_agent_backend::BackendError| {
        log::debug!("device {gpu}: cannot read {what}: {e}");
    };
    let info = backend.device_info(gpu);
    let (uuid, name) = match info {
        Ok(i) => (i.uuid, i.name),
        Err(e) => {
            warn("identity", e);
            (String::new(), spec.model.nvml_name.to_string())
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
    DeviceStatus {
        index: gpu,
        uuid,
        name,
        memory_gb: spec.memory_gb,
        speed: spec.speed,
        core_clock_mhz: clock(ClockDomain::Core),
        mem_clock_mhz: clock(ClockDomain::Memory),
        power_w: backend
            .power_usage_mw(gpu)
            .ok()
            .flatten()
            .map_or(f64::NAN, |mw| f64::from(mw) / 1000.0),
        energy_j: backend
            .energy_mj(gpu)
            .ok()
            .flatten()
            .map_or(f64::NAN, |mj| mj as f64 / 1000.0),
        utilization: backend
            .utilization(gpu)
            .ok()
            .flatten()
            .map_or(f64::NAN, |u| f64::from(u.gpu_pct) / 100.0),
        mig_enabled: backend
            .mig_mode(gpu)
            .ok()
            .flatten()
            .is_some_and(|m| m.current),
        current_task,
        online: true,
        health: crate::engine::HEALTH_OK.into(),
    }
}

/// Refreshes every device object forever.
pub async fn sample(
    backend: Arc<dyn GpuBackend>,
    specs: Vec<DeviceSpec>,
    objects: Vec<InterfaceRef<DeviceObject>>,
) {
    let mut tick = tokio::time::interval(SAMPLE_EVERY);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        for (spec, object) in specs.iter().zip(&objects) {
            let (backend, owned) = (backend.clone(), spec.clone());
            let fresh = tokio::task::spawn_blocking(move || read(&*backend, &owned, String::new()))
                .await
                .expect("a reading does not panic");
            if let Err(e) = update(object, fresh).await {
                log::debug!("device {}: cannot signal changes: {e}", spec.index);
            }
        }
    }
}

/// Stores `fresh` readings (keeping the current task) and signals the changes.
async fn update(object: &InterfaceRef<DeviceObject>, fresh: DeviceStatus) -> zbus::Result<()> {
    let emitter = object.signal_emitter();
    let mut dev = object.get_mut().await;
    let old = dev.status.clone();
    // Identity, memory and speed are constant; the task and the health
    // come from the engine.
    dev.status = DeviceStatus {
        uuid: old.uuid.clone(),
        name: old.name.clone(),
        current_task: old.current_task.clone(),
        online: old.online,
        health: old.health.clone(),
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
    health: String,
) -> zbus::Result<()> {
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
