//! A GPU's MIG layout on the wire (`GetMigLayout`, docs/mig.md §6.2).

use std::collections::HashMap;

use serde::Serialize;
use zbus::zvariant::{OwnedValue, Value};

use super::task::{owned, Dict};

/// One GPU's MIG state.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct MigLayout {
    /// The GPU's index.
    pub gpu: u32,
    /// The catalogue model, e.g. `A100-SXM4-40GB`.
    pub model: String,
    /// PCI device and vendor id (`0x20B010DE`), which mig-parted's
    /// `device-filter` matches; `None` from a daemon that does not send it.
    pub pci_device_id: Option<u32>,
    /// PCI subsystem id, when known.
    pub pci_subsystem_id: Option<u32>,
    /// Whether the model supports MIG.
    pub capable: bool,
    /// MIG mode now.
    pub enabled: bool,
    /// Whether the mode waits for a GPU reset (the next mode differs).
    pub pending: bool,
    /// `stable` or `reset-required` (a mode change waits for a reset).
    pub state: String,
    /// What the state means here, for a person (`""` when stable).
    pub message: String,
    /// The GPU instances, by first memory slice.
    pub instances: Vec<MigInstance>,
}

/// One GPU instance and its (full-size) compute instance.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct MigInstance {
    /// Profile name, e.g. `3g.20gb`.
    pub profile: String,
    /// The driver's profile id.
    pub profile_id: u32,
    /// First memory slice.
    pub start: u32,
    /// Memory, GB (as the driver reports it).
    pub memory_gb: f64,
    /// The driver's GPU-instance id.
    pub gpu_instance: u32,
    /// The driver's compute-instance id.
    pub compute_instance: u32,
    /// `MIG-…` UUID (`""` without a compute instance).
    pub uuid: String,
}

impl MigLayout {
    /// The `a{sv}` `GetMigLayout` answers with.
    pub fn to_dict(&self) -> Dict {
        let instances: Vec<HashMap<String, Value<'static>>> = self
            .instances
            .iter()
            .map(|i| {
                HashMap::from([
                    ("profile".to_string(), Value::from(i.profile.clone())),
                    ("profile_id".to_string(), Value::from(i.profile_id)),
                    ("start".to_string(), Value::from(i.start)),
                    ("memory_gb".to_string(), Value::from(i.memory_gb)),
                    ("gpu_instance".to_string(), Value::from(i.gpu_instance)),
                    (
                        "compute_instance".to_string(),
                        Value::from(i.compute_instance),
                    ),
                    ("uuid".to_string(), Value::from(i.uuid.clone())),
                ])
            })
            .collect();
        let mut d = Dict::from([
            ("gpu".into(), owned(self.gpu)),
            ("model".into(), owned(self.model.as_str())),
            ("capable".into(), owned(self.capable)),
            ("enabled".into(), owned(self.enabled)),
            ("pending".into(), owned(self.pending)),
            ("state".into(), owned(self.state.as_str())),
            ("message".into(), owned(self.message.as_str())),
            ("instances".into(), owned(instances)),
        ]);
        if let Some(id) = self.pci_device_id {
            d.insert("pci_device_id".into(), owned(id));
        }
        if let Some(id) = self.pci_subsystem_id {
            d.insert("pci_subsystem_id".into(), owned(id));
        }
        d
    }

    /// Reads `GetMigLayout`'s answer.
    pub fn from_dict(d: &Dict) -> Result<MigLayout, String> {
        let instances = match d.get("instances").map(|v| &**v) {
            Some(Value::Array(a)) => a
                .iter()
                .map(|v| {
                    let m = HashMap::<String, OwnedValue>::try_from(
                        v.try_clone().map_err(|e| e.to_string())?,
                    )
                    .map_err(|_| "a MIG instance is not a dictionary".to_string())?;
                    Ok(MigInstance {
                        profile: get::<&str>(&m, "profile")?.into(),
                        profile_id: get(&m, "profile_id")?,
                        start: get(&m, "start")?,
                        memory_gb: get(&m, "memory_gb")?,
                        gpu_instance: get(&m, "gpu_instance")?,
                        compute_instance: get(&m, "compute_instance")?,
                        uuid: get::<&str>(&m, "uuid")?.into(),
                    })
                })
                .collect::<Result<Vec<_>, String>>()?,
            _ => return Err("MIG layout without instances".into()),
        };
        let optional = |key: &str| d.contains_key(key).then(|| get::<u32>(d, key)).transpose();
        Ok(MigLayout {
            gpu: get(d, "gpu")?,
            model: get::<&str>(d, "model")?.into(),
            pci_device_id: optional("pci_device_id")?,
            pci_subsystem_id: optional("pci_subsystem_id")?,
            capable: get(d, "capable")?,
            enabled: get(d, "enabled")?,
            pending: get(d, "pending")?,
            state: get::<&str>(d, "state")?.into(),
            message: get::<&str>(d, "message")?.into(),
            instances,
        })
    }
}

fn get<'a, T: TryFrom<&'a Value<'a>>>(d: &'a Dict, key: &str) -> Result<T, String> {
    let v = d
        .get(key)
        .ok_or_else(|| format!("MIG layout without key {key}"))?;
    T::try_from(v).map_err(|_| format!("MIG layout key {key} has the wrong type"))
}
