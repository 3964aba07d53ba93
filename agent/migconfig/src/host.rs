//! A configuration file against a host's GPUs (docs/mig.md §3.1, §3.2, §3.3).

use std::collections::{BTreeMap, BTreeSet};

use gpu_agent_catalogue::mig::{MigProfile, MigTable, ProfileName};
use gpu_agent_catalogue::placement::{self, Instance};

use crate::error::{ConfigError, ErrorKind, Pos};
use crate::file::{Config, Devices, Entry, MigConfigFile, PciId};

/// One GPU of the host, as a configuration sees it.
#[derive(Debug, Clone, PartialEq)]
pub struct HostGpu {
    /// The agent's GPU index.
    pub index: u32,
    /// The model's name (for messages).
    pub model: String,
    /// PCI device and vendor id (`0x20B010DE`), when known.
    pub pci_id: Option<u32>,
    /// PCI subsystem id, when known.
    pub pci_subsystem_id: Option<u32>,
    /// The model's MIG profiles; `None`: not MIG-capable.
    pub mig: Option<&'static MigTable>,
}

impl HostGpu {
    fn selected_by(&self, entry: &Entry) -> bool {
        let filtered = entry.device_filter.is_empty()
            || self.pci_id.is_some_and(|id| {
                entry
                    .device_filter
                    .iter()
                    .any(|f| f.matches(id, self.pci_subsystem_id))
            });
        filtered && entry.devices.contains(self.index)
    }
}

/// What one GPU is asked to become.
#[derive(Debug, Clone, PartialEq)]
pub struct Target {
    /// The GPU's index.
    pub gpu: u32,
    /// MIG mode.
    pub enabled: bool,
    /// The GPU instances, placed by first-fit decreasing (empty when off).
    pub layout: Vec<Instance>,
    /// Where the entry that selected the GPU starts.
    pub pos: Pos,
}

/// A GPU's MIG state as the backend reports it.
#[derive(Debug, Clone, PartialEq)]
pub struct GpuMig {
    /// Current MIG mode.
    pub enabled: bool,
    /// Its GPU instances.
    pub instances: Vec<Instance>,
}

/// The targets of configuration `name` (the only one when `None`) on `gpus`,
/// one per selected GPU; GPUs no entry selects are absent. Every rule of
/// docs/mig.md §3.3 is checked: GPU indices exist, no GPU is selected twice, MIG
/// only on MIG-capable GPUs, no `c.` profiles, profile names of the GPU's
/// model, counts that can be placed.
pub fn resolve(
    file: &MigConfigFile,
    name: Option<&str>,
    gpus: &[HostGpu],
) -> Result<BTreeMap<u32, Target>, ConfigError> {
    let config = file.config(name)?;
    let mut targets: BTreeMap<u32, (usize, Target)> = BTreeMap::new();
    for (k, entry) in config.entries.iter().enumerate() {
        let key = format!("mig-configs.{}[{k}]", config.name);
        if let Devices::List(list) = &entry.devices {
            if let Some(missing) = list.iter().find(|&&i| gpus.iter().all(|g| g.index != i)) {
                return Err(ConfigError::new(
                    ErrorKind::NoSuchDevice,
                    entry.devices_pos,
                    format!("{key}.devices"),
                    format!(
                        "GPU {missing}: no such GPU on this host ({})",
                        gpu_list(gpus)
                    ),
                ));
            }
        }
        for gpu in gpus.iter().filter(|g| g.selected_by(entry)) {
            if let Some((earlier, _)) = targets.get(&gpu.index) {
                return Err(ConfigError::invalid(
                    entry.pos,
                    key,
                    format!(
                        "GPU {} is selected by entry {earlier} too; the agent takes each GPU from one entry",
                        gpu.index
                    ),
                ));
            }
            let target = target(config, k, entry, gpu)?;
            targets.insert(gpu.index, (k, target));
        }
    }
    Ok(targets.into_iter().map(|(g, (_, t))| (g, t)).collect())
}

/// The entries of `config` that select no GPU of `gpus`, each as
/// `entry 1 (line 12: device-filter 0x20B710DE, devices all)`: what
/// `gpuctl mig apply` and `assert` tell of a file written for several
/// models.
pub fn unmatched(config: &Config, gpus: &[HostGpu]) -> Vec<String> {
    config
        .entries
        .iter()
        .enumerate()
        .filter(|(_, e)| !gpus.iter().any(|g| g.selected_by(e)))
        .map(|(k, e)| {
            let mut what = Vec::new();
            if !e.device_filter.is_empty() {
                let ids: Vec<String> = e.device_filter.iter().map(PciId::to_string).collect();
                what.push(format!("device-filter {}", ids.join(", ")));
            }
            what.push(match &e.devices {
                Devices::All => "devices all".to_string(),
                Devices::List(l) => {
                    let l: Vec<String> = l.iter().map(u32::to_string).collect();
                    format!("devices {}", l.join(", "))
                }
            });
            let at = if e.pos.line > 0 {
                format!("line {}: ", e.pos.line)
            } else {
                String::new()
            };
            format!("entry {k} ({at}{})", what.join(", "))
        })
        .collect()
}

fn gpu_list(gpus: &[HostGpu]) -> String {
    match gpus.len() {
        0 => "it has no GPU".to_string(),
        _ => {
            let l: Vec<String> = gpus.iter().map(|g| g.index.to_string()).collect();
            format!("GPUs {}", l.join(", "))
        }
    }
}

/// The target one entry sets for one GPU.
fn target(config: &Config, k: usize, entry: &Entry, gpu: &HostGpu) -> Result<Target, ConfigError> {
    let key = format!("mig-configs.{}[{k}].mig-devices", config.name);
    if !entry.mig_enabled {
        return Ok(Target {
            gpu: gpu.index,
            enabled: false,
            layout: Vec::new(),
            pos: entry.pos,
        });
    }
    let Some(table) = gpu.mig else {
        return Err(ConfigError::new(
            ErrorKind::NotSupported,
            entry.enabled_pos,
            format!("mig-configs.{}[{k}].mig-enabled", config.name),
            format!("GPU {} ({}) is not MIG-capable", gpu.index, gpu.model),
        ));
    };
    let mut profiles: Vec<&'static MigProfile> = Vec::new();
    for d in &entry.mig_devices {
        let name = ProfileName::parse(&d.profile)
            .map_err(|why| ConfigError::invalid(d.pos, key.clone(), why))?;
        let Some(p) = table.profile_named(&name.gpu_instance().to_string()) else {
            let names: Vec<&str> = table.profiles.iter().map(|p| p.name).collect();
            return Err(ConfigError::invalid(
                d.pos,
                key,
                format!(
                    "{} is not a profile of {} (GPU {}); its profiles: {}",
                    d.profile,
                    gpu.model,
                    gpu.index,
                    names.join(", ")
                ),
            ));
        };
        if name.compute > name.slices {
            return Err(ConfigError::invalid(
                d.pos,
                key,
                format!(
                    "{}: a compute instance of {} slices cannot be larger than its GPU instance ({})",
                    d.profile, name.compute, p.name
                ),
            ));
        }
        if name.is_compute_instance() {
            return Err(ConfigError::new(
                ErrorKind::NotSupported,
                d.pos,
                key,
                format!(
                    "{}: compute-instance profiles are not supported: the agent makes one full-size compute instance in each GPU instance ({}) and schedules it as one device",
                    d.profile, p.name
                ),
            ));
        }
        if d.count > p.max_count {
            return Err(ConfigError::invalid(
                d.pos,
                key,
                format!(
                    "{} × {}: {} (GPU {}) holds at most {}",
                    d.count, p.name, gpu.model, gpu.index, p.max_count
                ),
            ));
        }
        profiles.extend(std::iter::repeat_n(p, d.count as usize));
    }
    let layout = placement::place_all(table, &profiles).ok_or_else(|| {
        ConfigError::invalid(
            entry.mig_devices_pos,
            key.clone(),
            format!(
                "{} cannot be placed together on {} (GPU {}): no layout holds them",
                describe(&profiles),
                gpu.model,
                gpu.index
            ),
        )
    })?;
    Ok(Target {
        gpu: gpu.index,
        enabled: true,
        layout,
        pos: entry.pos,
    })
}

/// `2× 1g.5gb, 1× 3g.20gb`, largest first; `no instances` when empty.
pub fn describe(profiles: &[&'static MigProfile]) -> String {
    let counts = counts(profiles.iter().copied());
    if counts.is_empty() {
        return "no instances".to_string();
    }
    counts
        .iter()
        .map(|(p, n)| format!("{n}× {}", p.name))
        .collect::<Vec<_>>()
        .join(", ")
}

/// Instances per profile, largest profile first.
fn counts(profiles: impl Iterator<Item = &'static MigProfile>) -> Vec<(&'static MigProfile, u32)> {
    let mut all: Vec<&'static MigProfile> = profiles.collect();
    all.sort_by_key(|p| {
        (
            std::cmp::Reverse(p.placement_size),
            std::cmp::Reverse(p.compute_slices),
            p.id,
        )
    });
    let mut out: Vec<(&'static MigProfile, u32)> = Vec::new();
    for p in all {
        match out.last_mut() {
            Some((q, n)) if q.id == p.id => *n += 1,
            _ => out.push((p, 1)),
        }
    }
    out
}

/// What `assert` finds different between `targets` (from [`resolve`]) and the
/// GPUs' state (docs/mig.md §3.2): mode, then instance counts per profile, and
/// GPUs no entry selects. Empty: the host is as configured.
pub fn mismatches(
    targets: &BTreeMap<u32, Target>,
    gpus: &[HostGpu],
    actual: &BTreeMap<u32, GpuMig>,
) -> Vec<String> {
    let mut out = Vec::new();
    let mode = |on: bool| if on { "on" } else { "off" };
    for gpu in gpus {
        let Some(t) = targets.get(&gpu.index) else {
            out.push(format!("GPU {}: selected by no entry", gpu.index));
            continue;
        };
        let Some(a) = actual.get(&gpu.index) else {
            out.push(format!("GPU {}: its MIG state is unknown", gpu.index));
            continue;
        };
        if a.enabled != t.enabled {
            out.push(format!(
                "GPU {}: MIG mode is {}, wanted {}",
                gpu.index,
                mode(a.enabled),
                mode(t.enabled)
            ));
            continue;
        }
        let want: Vec<_> = t.layout.iter().map(|p| p.profile).collect();
        let have: Vec<_> = a.instances.iter().map(|p| p.profile).collect();
        if t.enabled && counts(want.iter().copied()) != counts(have.iter().copied()) {
            out.push(format!(
                "GPU {}: has {}, wanted {}",
                gpu.index,
                describe(&have),
                describe(&want)
            ));
        }
    }
    out
}

/// The host's state as a v1 file with one configuration `label` (mig-parted
/// `export`, docs/mig.md §3.2): GPUs of one model with equal mode and counts share
/// an entry; `device-filter` only when the host mixes models; `devices: all`
/// when an entry covers every GPU its filter matches.
pub fn export(label: &str, gpus: &[(HostGpu, GpuMig)]) -> MigConfigFile {
    let models: BTreeSet<&str> = gpus.iter().map(|(g, _)| g.model.as_str()).collect();
    let mixed = models.len() > 1 && gpus.iter().all(|(g, _)| g.pci_id.is_some());
    // GPUs of one (model, mode, counts by name), in order of the first GPU.
    struct Group {
        key: (String, bool, Vec<(String, u32)>),
        members: Vec<u32>,
        pci_id: Option<u32>,
    }
    let mut groups: Vec<Group> = Vec::new();
    for (gpu, state) in gpus {
        let counts: Vec<(String, u32)> = if state.enabled {
            counts(state.instances.iter().map(|p| p.profile))
                .into_iter()
                .map(|(p, n)| (p.name.to_string(), n))
                .collect()
        } else {
            Vec::new()
        };
        let key = (gpu.model.clone(), state.enabled, counts);
        match groups.iter_mut().find(|g| g.key == key) {
            Some(g) => g.members.push(gpu.index),
            None => groups.push(Group {
                key,
                members: vec![gpu.index],
                pci_id: gpu.pci_id,
            }),
        }
    }
    let entries = groups
        .into_iter()
        .map(|g| {
            let Group {
                key: (model, enabled, counts),
                members,
                pci_id,
            } = g;
            let filter: Vec<PciId> = match (mixed, pci_id) {
                (true, Some(device)) => vec![PciId {
                    device,
                    subsystem: None,
                }],
                _ => Vec::new(),
            };
            let covered = gpus
                .iter()
                .filter(|(g, _)| !mixed || g.model == model)
                .count();
            let devices = if covered == members.len() {
                Devices::All
            } else {
                Devices::List(members)
            };
            Entry::new(filter, devices, enabled, counts)
        })
        .collect();
    MigConfigFile {
        configs: vec![Config {
            name: label.to_string(),
            pos: Pos::default(),
            entries,
        }],
    }
}

#[cfg(test)]
mod tests;
