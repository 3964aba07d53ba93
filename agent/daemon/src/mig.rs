//! The MIG read side (docs/mig.md §6.2): a GPU's layout, the host as a mig-parted
//! v1 file, and whether the host matches one. Reads go straight to the
//! backend; nothing here changes a GPU.

use std::collections::BTreeMap;
use std::sync::Arc;

use gpu_agent_backend::{BackendError, GpuBackend};
use gpu_agent_core::catalogue;
use gpu_agent_core::placement::Instance;
use gpu_agent_dbus::{AgentError, MigInstance, MigLayout};

use crate::engine::MigTarget;
use crate::states::MigState;
use gpu_agent_migconfig::{
    self as migconfig, ConfigError, ErrorKind, GpuMig, HostGpu, MigConfigFile,
};

/// The host's GPUs as MIG configurations see them, and the backend to read.
#[derive(Clone)]
pub struct MigView {
    backend: Arc<dyn GpuBackend>,
    gpus: Vec<HostGpu>,
}

impl MigView {
    /// Every GPU of `backend`, with its model's MIG profiles.
    pub fn new(backend: Arc<dyn GpuBackend>) -> Result<MigView, BackendError> {
        let gpus = (0..backend.device_count()?)
            .map(|gpu| {
                let info = backend.device_info(gpu)?;
                let model = catalogue::lookup_nvml(&info.name);
                Ok(HostGpu {
                    index: gpu,
                    model: model.map_or(info.name.clone(), |m| m.name.to_string()),
                    pci_id: Some(info.pci_device_id),
                    pci_subsystem_id: info.pci_subsystem_id,
                    mig: model.and_then(|m| m.mig).filter(|_| info.mig_capable),
                })
            })
            .collect::<Result<Vec<_>, BackendError>>()?;
        Ok(MigView { backend, gpus })
    }

    /// GPU `gpu`'s MIG state (`GetMigLayout`).
    pub fn layout(&self, gpu: u32) -> Result<MigLayout, AgentError> {
        let host = self.gpu(gpu)?;
        // A backend error names its GPU.
        let failed = |e: BackendError| AgentError::Failed(e.to_string());
        let mode = match host.mig {
            Some(_) => self.backend.mig_mode(gpu).map_err(failed)?,
            None => None,
        };
        let (enabled, pending) = mode.map_or((false, false), |m| (m.current, m.pending));
        let mut instances = Vec::new();
        if enabled {
            let table = host.mig.expect("a MIG mode comes from a MIG table");
            let devices = self.backend.mig_devices(gpu).map_err(failed)?;
            for gi in self.backend.gpu_instances(gpu).map_err(failed)? {
                let profile = table.profile(gi.profile_id);
                let cis = match self.backend.compute_instances(gpu, gi.id) {
                    Ok(cis) => cis,
                    // Destroyed since the list was read, by a change under
                    // way: no longer part of the layout.
                    Err(BackendError::NotFound { .. }) => continue,
                    Err(e) => return Err(failed(e)),
                };
                let ci = cis.first();
                let device = ci.and_then(|ci| {
                    devices
                        .iter()
                        .find(|d| d.gpu_instance == gi.id && d.compute_instance == ci.id)
                });
                instances.push(MigInstance {
                    profile: profile
                        .map_or_else(|| format!("id {}", gi.profile_id), |p| p.name.to_string()),
                    profile_id: gi.profile_id,
                    start: gi.placement.start,
                    memory_gb: device.map_or_else(
                        || profile.map_or(0.0, |p| p.memory_mib as f64 / 1024.0),
                        |d| d.memory_bytes as f64 / (1u64 << 30) as f64,
                    ),
                    gpu_instance: gi.id,
                    compute_instance: ci.map_or(0, |c| c.id),
                    uuid: device.map_or_else(String::new, |d| d.uuid.clone()),
                });
            }
            instances.sort_by_key(|i| i.start);
        }
        let (state, message) = if enabled != pending {
            (
                MigState::ResetRequired,
                format!(
                    "MIG mode turns {} at the next GPU reset",
                    if pending { "on" } else { "off" }
                ),
            )
        } else if enabled && instances.is_empty() {
            (
                MigState::Stable,
                "MIG on with no instance: the GPU takes no task until a layout with instances is made"
                    .to_string(),
            )
        } else {
            (MigState::Stable, String::new())
        };
        Ok(MigLayout {
            gpu,
            model: host.model.clone(),
            pci_device_id: host.pci_id,
            pci_subsystem_id: host.pci_subsystem_id,
            capable: host.mig.is_some(),
            enabled,
            pending,
            state: state.to_string(),
            message,
            instances,
        })
    }

    /// The host as a v1 file with one configuration `label` (`ExportMigConfig`).
    pub fn export(&self, label: &str) -> Result<String, AgentError> {
        let label = if label.is_empty() { "current" } else { label };
        if label.contains(|c: char| c.is_control()) {
            return Err(AgentError::InvalidArgument(format!(
                "label {label:?}: control characters are not allowed"
            )));
        }
        let states = self.states()?;
        let pairs: Vec<(HostGpu, GpuMig)> = self
            .gpus
            .iter()
            .map(|g| (g.clone(), states[&g.index].clone()))
            .collect();
        Ok(migconfig::export(label, &pairs).to_yaml())
    }

    /// Whether the host is as configuration `name` (`""`: the file's only
    /// one) of `yaml` asks, and the differences (`AssertMigConfig`).
    pub fn assert(&self, yaml: &str, name: &str) -> Result<(bool, Vec<String>), AgentError> {
        let file = MigConfigFile::parse(yaml).map_err(config_error)?;
        let name = (!name.is_empty()).then_some(name);
        let targets = migconfig::resolve(&file, name, &self.gpus).map_err(config_error)?;
        let found = migconfig::mismatches(&targets, &self.gpus, &self.states()?);
        Ok((found.is_empty(), found))
    }

    /// The GPUs configuration `name` (`""`: the file's only one) of `yaml`
    /// changes, each with its layout (`ApplyMigConfig`): every rule of the
    /// file checked, GPUs already as asked left out. MIG on with no
    /// instance is refused unless `without_instances`: the agent schedules
    /// a GPU whole or its instances, and such a GPU has neither (an admin
    /// asks for it when another tool makes the instances).
    pub fn targets(
        &self,
        yaml: &str,
        name: &str,
        without_instances: bool,
    ) -> Result<Vec<MigTarget>, AgentError> {
        let file = MigConfigFile::parse(yaml).map_err(config_error)?;
        let name = (!name.is_empty()).then_some(name);
        let targets = migconfig::resolve(&file, name, &self.gpus).map_err(config_error)?;
        if let Some(t) = targets
            .values()
            .find(|t| t.enabled && t.layout.is_empty() && !without_instances)
        {
            return Err(AgentError::NotSupported(format!(
                "{}: GPU {}: MIG on with no instance leaves the GPU with no device to schedule; \
                 name at least one profile, set mig-enabled: false, or ask for it with the \
                 option enable_without_instances (gpuctl mig apply --enable-without-instances)",
                t.pos, t.gpu
            )));
        }
        let states = self.states()?;
        Ok(targets
            .into_values()
            .filter(|t| {
                let now = &states[&t.gpu];
                let mut have: Vec<u32> = now.instances.iter().map(|i| i.profile.id).collect();
                let mut want: Vec<u32> = t.layout.iter().map(|i| i.profile.id).collect();
                have.sort_unstable();
                want.sort_unstable();
                now.enabled != t.enabled || have != want
            })
            .map(|t| MigTarget {
                gpu: t.gpu,
                enabled: t.enabled,
                layout: t.layout,
            })
            .collect())
    }

    fn gpu(&self, gpu: u32) -> Result<&HostGpu, AgentError> {
        self.gpus.iter().find(|g| g.index == gpu).ok_or_else(|| {
            AgentError::NoSuchDevice(format!(
                "no GPU {gpu}; this host has {} GPU(s)",
                self.gpus.len()
            ))
        })
    }

    /// Every GPU's mode and instances.
    fn states(&self) -> Result<BTreeMap<u32, GpuMig>, AgentError> {
        self.gpus
            .iter()
            .map(|g| {
                let failed = |e: BackendError| AgentError::Failed(e.to_string());
                let Some(table) = g.mig else {
                    return Ok((
                        g.index,
                        GpuMig {
                            enabled: false,
                            instances: Vec::new(),
                        },
                    ));
                };
                let enabled = self
                    .backend
                    .mig_mode(g.index)
                    .map_err(failed)?
                    .is_some_and(|m| m.current);
                let instances = if enabled {
                    self.backend
                        .gpu_instances(g.index)
                        .map_err(failed)?
                        .iter()
                        .map(|gi| {
                            let profile = table.profile(gi.profile_id).ok_or_else(|| {
                                AgentError::Failed(format!(
                                    "GPU {}: GPU instance {} has profile id {}, which {} does not list",
                                    g.index, gi.id, gi.profile_id, g.model
                                ))
                            })?;
                            Ok(Instance {
                                profile,
                                start: gi.placement.start,
                            })
                        })
                        .collect::<Result<Vec<_>, AgentError>>()?
                } else {
                    Vec::new()
                };
                Ok((g.index, GpuMig { enabled, instances }))
            })
            .collect()
    }
}

/// The D-Bus error of a configuration error (docs/mig.md §6.2).
pub fn config_error(e: ConfigError) -> AgentError {
    let text = e.to_string();
    match e.kind {
        ErrorKind::Invalid => AgentError::InvalidArgument(text),
        ErrorKind::NotSupported => AgentError::NotSupported(text),
        ErrorKind::NoSuchDevice => AgentError::NoSuchDevice(text),
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::time::Duration;

    use gpu_agent_backend::mock::{Fault, MockBackend, VirtualClock};
    use gpu_agent_backend::GpuBackend;

    use super::MigView;

    /// A GPU instance destroyed between the layout's list of instances and
    /// the read of its compute instances (a change under way on another
    /// thread) is left out; the read does not fail.
    #[test]
    fn a_layout_read_during_a_change_leaves_out_an_instance_destroyed_meanwhile() {
        let host = gpu_agent_hostspec::host::parse(
            std::path::Path::new("host.toml"),
            "[[gpu]]\nmodel = \"A100-SXM4-40GB\"\nspeed = 1\nmig = [\"3g.20gb@0\", \"3g.20gb@4\"]\n",
        )
        .unwrap();
        let mock = Arc::new(MockBackend::new(&host, Arc::new(VirtualClock::new())));
        let view = MigView::new(mock.clone()).unwrap();
        // Reading compute instances takes a second: the change below lands
        // in it, after the list of GPU instances was read.
        mock.inject(0, Fault::Slow("compute_instances", Duration::from_secs(1)));
        let reader = std::thread::spawn(move || view.layout(0));
        while !mock.calls().iter().any(|c| c.method == "gpu_instances") {
            std::thread::yield_now();
        }
        // The second instance goes (its ids from the MIG devices, which
        // are not slowed), while the reader waits on the first.
        let second = mock.mig_devices(0).unwrap()[1].clone();
        mock.destroy_compute_instance(0, second.gpu_instance, second.compute_instance)
            .unwrap();
        mock.destroy_gpu_instance(0, second.gpu_instance).unwrap();
        let layout = reader
            .join()
            .unwrap()
            .expect("the layout, read during the change");
        let starts: Vec<u32> = layout.instances.iter().map(|i| i.start).collect();
        assert_eq!(starts, [0]);
    }
}
