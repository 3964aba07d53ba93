//! A device's properties on the wire (`org.gpuagent.Device1`).

use serde::Serialize;

use super::task::{owned, Dict};

/// Every property of one `org.gpuagent.Device1` object.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct DeviceStatus {
    /// Device index: GPUs 0.., then MIG instances (never reused).
    pub index: u32,
    /// `GPU-…`, or a MIG instance's `MIG-…` (`CUDA_VISIBLE_DEVICES`).
    pub uuid: String,
    /// Product name.
    pub name: String,
    /// Memory, GB.
    pub memory_gb: f64,
    /// Work units per second at default clocks.
    pub speed: f64,
    /// Current core clock, MHz (0: not reported).
    pub core_clock_mhz: u32,
    /// Current memory clock, MHz (0: not reported).
    pub mem_clock_mhz: u32,
    /// Power draw, W (NaN: not reported).
    pub power_w: f64,
    /// Energy counter, J (NaN: not reported).
    pub energy_j: f64,
    /// GPU utilisation, 0..1 (NaN: not reported).
    pub utilization: f64,
    /// Memory in use, GB (NaN: not reported, as for a MIG instance).
    pub memory_used_gb: f64,
    /// Temperature, °C (NaN: not reported, as for a MIG instance).
    pub temperature_c: f64,
    /// Whether MIG mode is on.
    pub mig_enabled: bool,
    /// The id of the task running on it, or `""`.
    pub current_task: String,
    /// Whether it takes work: false after a failure or an admin's drain,
    /// until an admin brings it back.
    pub online: bool,
    /// `ok`, `drained` (by an admin), `lost` (fell off the bus),
    /// `xid N: what` (a critical XID error), `mig` (a GPU split into MIG
    /// instances) or `retired` (a MIG instance a layout change removed).
    pub health: String,
    /// Whether it can take work at all: a whole GPU or a MIG instance; not
    /// a GPU split into MIG instances.
    pub schedulable: bool,
    /// A MIG instance's GPU; a GPU's own index.
    pub parent: u32,
    /// A MIG instance's GPU-instance profile (`3g.20gb`); `""` for a GPU.
    pub mig_profile: String,
    /// A MIG instance's placement (first memory slice, slices); `(0, 0)`
    /// for a GPU.
    pub mig_placement: (u32, u32),
}

impl DeviceStatus {
    /// The properties as `GetAll` returns them (D-Bus property names).
    pub fn to_dict(&self) -> Dict {
        Dict::from([
            ("Index".into(), owned(self.index)),
            ("Uuid".into(), owned(self.uuid.as_str())),
            ("Name".into(), owned(self.name.as_str())),
            ("MemoryGb".into(), owned(self.memory_gb)),
            ("Speed".into(), owned(self.speed)),
            ("CoreClockMhz".into(), owned(self.core_clock_mhz)),
            ("MemClockMhz".into(), owned(self.mem_clock_mhz)),
            ("PowerW".into(), owned(self.power_w)),
            ("EnergyJ".into(), owned(self.energy_j)),
            ("Utilization".into(), owned(self.utilization)),
            ("MemoryUsedGb".into(), owned(self.memory_used_gb)),
            ("TemperatureC".into(), owned(self.temperature_c)),
            ("MigEnabled".into(), owned(self.mig_enabled)),
            ("CurrentTask".into(), owned(self.current_task.as_str())),
            ("Online".into(), owned(self.online)),
            ("Health".into(), owned(self.health.as_str())),
            ("Schedulable".into(), owned(self.schedulable)),
            ("Parent".into(), owned(self.parent)),
            ("MigProfile".into(), owned(self.mig_profile.as_str())),
            ("MigPlacement".into(), owned(self.mig_placement)),
        ])
    }

    /// Reads the properties of one device object, as `GetAll` or
    /// `GetManagedObjects` returns them.
    pub fn from_dict(d: &Dict) -> Result<DeviceStatus, String> {
        fn get<'a, T: TryFrom<&'a zbus::zvariant::Value<'a>>>(
            d: &'a Dict,
            key: &str,
        ) -> Result<T, String> {
            let v = d
                .get(key)
                .ok_or_else(|| format!("device without property {key}"))?;
            T::try_from(v).map_err(|_| format!("device property {key} has the wrong type"))
        }
        Ok(DeviceStatus {
            index: get(d, "Index")?,
            uuid: get::<&str>(d, "Uuid")?.into(),
            name: get::<&str>(d, "Name")?.into(),
            memory_gb: get(d, "MemoryGb")?,
            speed: get(d, "Speed")?,
            core_clock_mhz: get(d, "CoreClockMhz")?,
            mem_clock_mhz: get(d, "MemClockMhz")?,
            power_w: get(d, "PowerW")?,
            energy_j: get(d, "EnergyJ")?,
            utilization: get(d, "Utilization")?,
            // Absent from a daemon older than them: not reported.
            memory_used_gb: get(d, "MemoryUsedGb").unwrap_or(f64::NAN),
            temperature_c: get(d, "TemperatureC").unwrap_or(f64::NAN),
            mig_enabled: get(d, "MigEnabled")?,
            current_task: get::<&str>(d, "CurrentTask")?.into(),
            online: get(d, "Online")?,
            health: get::<&str>(d, "Health")?.into(),
            schedulable: get(d, "Schedulable")?,
            parent: get(d, "Parent")?,
            mig_profile: get::<&str>(d, "MigProfile")?.into(),
            mig_placement: {
                let v = d
                    .get("MigPlacement")
                    .ok_or("device without property MigPlacement")?;
                <(u32, u32)>::try_from(v.try_clone().map_err(|e| e.to_string())?)
                    .map_err(|_| "device property MigPlacement has the wrong type")?
            },
        })
    }
}
