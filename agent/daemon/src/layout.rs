//! The host's devices as its GPUs are partitioned (docs/mig.md §6.1, §6.5).
//!
//! At start the daemon reads each GPU's MIG mode and instances from the
//! backend: a GPU with MIG on is split (it keeps its index and runs
//! nothing), and each of its instances is a device. Instances take the
//! indices after the physical GPUs and keep them for good: the MIG slots,
//! retired ones included, are stored (meta [`META_KEY`]), and a restart
//! gives each GPU's instances their stored indices again. Per GPU, against
//! the stored layout:
//! - the GPU has it: adopted;
//! - MIG is on and the GPU has no instance (a reboot loses them): the stored
//!   layout is made again, before any task is accepted;
//! - anything else (changed out of band, MIG turned off): what the GPU has
//!   is adopted, with a warning; the stored instances are retired and the
//!   GPU's instances take new indices.
//!
//! A GPU whose layout change a stop interrupted is taken as it is: the
//! change resumes when the engine starts (`engine/mig_apply.rs`).
//!
//! [`Target`] says where a device's work goes on the backend: the physical
//! GPU, and for a MIG instance its GPU and compute instance and `MIG-` UUID.

use std::collections::BTreeSet;
use std::sync::{Arc, RwLock};

use gpu_agent_backend::{BackendError, GpuBackend, MigDevice};
use gpu_agent_core::host::{DeviceSpec, Host, MigSlot, Partition};
use gpu_agent_core::mig::MigTable;

/// Where the MIG slots are stored.
pub const META_KEY: &str = "mig_slots";

/// Bytes per GiB (the backend's memory is in bytes, `MemoryGb` in GiB).
const GIB: f64 = (1u64 << 30) as f64;

/// Every device's [`Target`], by index: the engine's, shared with its
/// executors, grown when a layout change adds instances.
pub type Targets = Arc<RwLock<Vec<Target>>>;

/// Device `d`'s target (`None`: no such device).
pub fn get(targets: &Targets, d: u32) -> Option<Target> {
    targets
        .read()
        .unwrap_or_else(|e| e.into_inner())
        .get(d as usize)
        .cloned()
}

/// Where a device's work runs on the backend.
#[derive(Debug, Clone, PartialEq)]
pub struct Target {
    /// The physical GPU (a MIG instance's parent).
    pub gpu: u32,
    /// `GPU-…`, or `MIG-…` for a MIG instance (`CUDA_VISIBLE_DEVICES`);
    /// empty where it could not be read, and for a retired instance.
    pub uuid: String,
    /// For a MIG instance: its GPU instance and compute instance ids, and
    /// its memory in bytes as the backend reports it.
    pub mig: Option<MigIds>,
}

/// A MIG instance as the driver knows it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct MigIds {
    /// GPU-instance id.
    pub gpu_instance: u32,
    /// Compute-instance id.
    pub compute_instance: u32,
    /// Memory, bytes.
    pub memory_bytes: u64,
}

impl Target {
    /// Where device `spec` runs, read from the backend (best effort: a
    /// reading that fails leaves the UUID empty and is logged).
    pub fn read(backend: &dyn GpuBackend, spec: &DeviceSpec) -> Target {
        match &spec.partition {
            Partition::Whole | Partition::Split { .. } => Target {
                gpu: spec.index,
                uuid: backend.device_info(spec.index).map_or_else(
                    |e| {
                        log::warn!("device {}: no UUID: {e}", spec.index);
                        String::new()
                    },
                    |i| i.uuid,
                ),
                mig: None,
            },
            Partition::Retired(slot) => Target {
                gpu: slot.parent,
                uuid: String::new(),
                mig: None,
            },
            Partition::Mig(slot) => match mig_device(backend, slot) {
                Ok(Some((ids, uuid))) => Target {
                    gpu: slot.parent,
                    uuid,
                    mig: Some(ids),
                },
                Ok(None) => {
                    log::warn!(
                        "device {}: GPU {} has no MIG device at memory slice {}",
                        spec.index,
                        slot.parent,
                        slot.start
                    );
                    Target {
                        gpu: slot.parent,
                        uuid: String::new(),
                        mig: None,
                    }
                }
                Err(e) => {
                    log::warn!("device {}: cannot read its MIG device: {e}", spec.index);
                    Target {
                        gpu: slot.parent,
                        uuid: String::new(),
                        mig: None,
                    }
                }
            },
        }
    }

    /// The share of its GPU's energy counter a device's run is charged:
    /// compute slices / 7 for a MIG instance (docs/mig.md §6.1), 1 otherwise.
    pub fn energy_share(spec: &DeviceSpec) -> f64 {
        match &spec.partition {
            Partition::Mig(_) => spec.power_share(),
            _ => 1.0,
        }
    }
}

/// The GPU instance at `slot`'s start, its full-size compute instance and
/// its MIG device (`None`: not there).
fn mig_device(
    backend: &dyn GpuBackend,
    slot: &MigSlot,
) -> Result<Option<(MigIds, String)>, BackendError> {
    let gpu = slot.parent;
    let Some(gi) = backend
        .gpu_instances(gpu)?
        .into_iter()
        .find(|gi| gi.placement.start == slot.start)
    else {
        return Ok(None);
    };
    let Some(ci) = backend.compute_instances(gpu, gi.id)?.into_iter().next() else {
        return Ok(None);
    };
    let devices: Vec<MigDevice> = backend.mig_devices(gpu)?;
    Ok(devices
        .into_iter()
        .find(|d| d.gpu_instance == gi.id && d.compute_instance == ci.id)
        .map(|d| {
            (
                MigIds {
                    gpu_instance: gi.id,
                    compute_instance: ci.id,
                    memory_bytes: d.memory_bytes,
                },
                d.uuid,
            )
        }))
}

/// One stored MIG slot.
#[derive(Debug, Clone, PartialEq)]
struct Stored {
    gpu: u32,
    profile: &'static gpu_agent_core::mig::MigProfile,
    start: u32,
    retired: bool,
}

/// The slots of `devices` (after `gpus` physical GPUs) as stored: a line
/// `gpus N`, then per slot in index order `GPU PROFILE START current|retired`.
pub fn encode(devices: &[DeviceSpec]) -> String {
    let gpus = devices.iter().filter(|d| d.mig().is_none()).count();
    let mut text = format!("gpus {gpus}\n");
    for d in devices {
        let (slot, state) = match &d.partition {
            Partition::Mig(slot) => (slot, "current"),
            Partition::Retired(slot) => (slot, "retired"),
            _ => continue,
        };
        text.push_str(&format!(
            "{} {} {} {state}\n",
            slot.parent, slot.profile.name, slot.start
        ));
    }
    text
}

/// The stored slots for `gpus` (each GPU's MIG table, `None`: no MIG), in
/// index order; an error says why they do not fit this host.
fn decode(text: &str, gpus: &[Option<&'static MigTable>]) -> Result<Vec<Stored>, String> {
    let mut lines = text.lines();
    let n: usize = lines
        .next()
        .and_then(|l| l.strip_prefix("gpus "))
        .and_then(|n| n.parse().ok())
        .ok_or("no `gpus N` line")?;
    if n != gpus.len() {
        return Err(format!(
            "they were stored for {n} GPU(s); this host has {}",
            gpus.len()
        ));
    }
    lines
        .enumerate()
        .map(|(i, line)| {
            let bad = || format!("slot {i}: {line:?}");
            let fields: Vec<&str> = line.split(' ').collect();
            let [gpu, profile, start, state] = fields[..] else {
                return Err(bad());
            };
            let gpu: u32 = gpu.parse().map_err(|_| bad())?;
            let table = gpus
                .get(gpu as usize)
                .copied()
                .flatten()
                .ok_or_else(|| format!("slot {i}: GPU {gpu} has no MIG"))?;
            let profile = table
                .profile_named(profile)
                .ok_or_else(|| format!("slot {i}: GPU {gpu} has no profile {profile}"))?;
            Ok(Stored {
                gpu,
                profile,
                start: start.parse().map_err(|_| bad())?,
                retired: match state {
                    "current" => false,
                    "retired" => true,
                    _ => return Err(bad()),
                },
            })
        })
        .collect()
}

/// A GPU's instances as (profile id, start), sorted.
type Layout = Vec<(&'static gpu_agent_core::mig::MigProfile, u32)>;

fn describe(layout: &Layout) -> String {
    if layout.is_empty() {
        return "no instance".into();
    }
    let names: Vec<String> = layout
        .iter()
        .map(|(p, start)| format!("{}@{start}", p.name))
        .collect();
    names.join(", ")
}

/// GPU `gpu`'s layout, `None` while MIG is off (or the GPU has no MIG).
fn actual(
    backend: &dyn GpuBackend,
    gpu: u32,
    table: Option<&'static MigTable>,
) -> Result<Option<Layout>, BackendError> {
    let Some(table) = table else { return Ok(None) };
    if !backend.mig_mode(gpu)?.is_some_and(|m| m.current) {
        return Ok(None);
    }
    let mut layout = Layout::new();
    for gi in backend.gpu_instances(gpu)? {
        match table.profile(gi.profile_id) {
            Some(p) => layout.push((p, gi.placement.start)),
            None => log::warn!(
                "GPU {gpu}: GPU instance {} has profile id {}, which the catalogue does not list; left out",
                gi.id,
                gi.profile_id
            ),
        }
    }
    layout.sort_by_key(|(p, start)| (*start, p.id));
    Ok(Some(layout))
}

/// The physical GPUs of a host description, whole: what [`discover`] starts
/// from on the mock, whose layouts are then read back like any GPU's.
pub fn physical_gpus(host: Host) -> Vec<DeviceSpec> {
    host.devices
        .into_iter()
        .filter(|d| d.mig().is_none())
        .map(|d| DeviceSpec {
            partition: Partition::Whole,
            ..d
        })
        .collect()
}

/// The devices of a host of physical `gpus` (whole, indexed 0..) as their
/// MIG layouts stand, after the restart rules of the [module](self)
/// documentation against the `stored` slots; and the slots to store when
/// they differ from `stored`. Re-making a lost layout is the only change
/// made to a GPU. A GPU of `changing` (a stored layout change resumes
/// once the engine starts) is taken as it is, without a warning: the
/// change makes its layout.
pub fn discover(
    backend: &dyn GpuBackend,
    mut gpus: Vec<DeviceSpec>,
    stored: Option<&str>,
    changing: &BTreeSet<u32>,
) -> Result<(Vec<DeviceSpec>, Option<String>), BackendError> {
    let tables: Vec<Option<&'static MigTable>> = gpus.iter().map(|g| g.model.mig).collect();
    let mut slots = match stored.map(|text| decode(text, &tables)) {
        None => Vec::new(),
        Some(Ok(slots)) => slots,
        Some(Err(why)) => {
            log::warn!(
                "the stored MIG slots do not fit this host ({why}); MIG devices are numbered afresh"
            );
            Vec::new()
        }
    };
    let mut fresh: Vec<Stored> = Vec::new();
    for (g, table) in tables.iter().enumerate() {
        let g = g as u32;
        let mut found = actual(backend, g, *table)?;
        let mut want: Layout = slots
            .iter()
            .filter(|s| s.gpu == g && !s.retired)
            .map(|s| (s.profile, s.start))
            .collect();
        want.sort_by_key(|(p, start)| (*start, p.id));
        let resumes = changing.contains(&g);
        if !resumes && !want.is_empty() && found.as_ref().is_some_and(Vec::is_empty) {
            log::warn!(
                "GPU {g} has MIG on and no instance (a reboot?): making its stored layout {} again",
                describe(&want)
            );
            for &(profile, start) in &want {
                if let Err(e) = gpu_agent_backend::create_instance(backend, g, profile.id, start) {
                    log::error!("GPU {g}: cannot make {}@{start} again: {e}", profile.name);
                    break;
                }
            }
            found = actual(backend, g, *table)?;
        }
        let have = found.clone().unwrap_or_default();
        if have != want {
            if resumes {
                log::info!(
                    "GPU {g}: a MIG layout change resumes; its devices are {} until it is made",
                    describe(&have)
                );
            } else if !want.is_empty() {
                log::warn!(
                    "GPU {g}: stored MIG layout {}, found {}: adopting what the GPU has (changed out of band); the stored instances are retired",
                    describe(&want),
                    match &found {
                        None => "MIG off".into(),
                        Some(l) => describe(l),
                    }
                );
            }
            for s in slots.iter_mut().filter(|s| s.gpu == g) {
                s.retired = true;
            }
            fresh.extend(have.iter().map(|&(profile, start)| Stored {
                gpu: g,
                profile,
                start,
                retired: false,
            }));
        }
        if found.is_some() {
            let held: u32 = have.iter().map(|(p, _)| p.compute_slices).sum();
            let total = table.expect("MIG on comes with a table").compute_slices;
            gpus[g as usize].partition = Partition::Split {
                free_slices: total.saturating_sub(held),
            };
        }
    }
    slots.extend(fresh);
    let first = gpus.len() as u32;
    let mut devices = gpus.clone();
    for (s, index) in slots.iter().zip(first..) {
        let mut d = DeviceSpec::mig_instance(index, &gpus[s.gpu as usize], s.profile, s.start);
        if s.retired {
            let slot = *d.mig().expect("made as an instance");
            d.partition = Partition::Retired(slot);
        } else if let Some(ids) = Target::read(backend, &d).mig {
            d.memory_gb = ids.memory_bytes as f64 / GIB;
        }
        devices.push(d);
    }
    let text = encode(&devices);
    let changed = (stored != Some(text.as_str())).then_some(text);
    Ok((devices, changed))
}

#[cfg(test)]
mod tests {
    use std::path::Path;
    use std::sync::Arc;

    use super::*;
    use gpu_agent_backend::mock::{MockBackend, VirtualClock};

    /// A T4 and two A100s, the first split as `mig0`; the mock and its GPUs
    /// as the daemon takes them (whole, before discovery).
    fn host(mig0: &str) -> (Arc<MockBackend>, Vec<DeviceSpec>) {
        let text = format!(
            "[[gpu]]\nmodel = \"T4\"\nspeed = 1\n\
             [[gpu]]\nmodel = \"A100-SXM4-40GB\"\nspeed = 7\n{mig0}\n\
             [[gpu]]\nmodel = \"A100-SXM4-40GB\"\nspeed = 7\n"
        );
        let host = gpu_agent_hostspec::host::parse(Path::new("host.toml"), &text).unwrap();
        let mock = Arc::new(MockBackend::new(&host, Arc::new(VirtualClock::new())));
        (mock, physical_gpus(host))
    }

    fn labels(devices: &[DeviceSpec]) -> Vec<String> {
        devices
            .iter()
            .map(|d| match d.partition {
                Partition::Retired(_) => format!("{} retired", d.label()),
                Partition::Split { free_slices } => format!("{} split {free_slices}", d.label()),
                _ => d.label(),
            })
            .collect()
    }

    #[test]
    fn a_split_gpu_gives_devices_after_the_gpus_and_its_slots_are_stored() {
        let (mock, gpus) = host("mig = [\"3g.20gb@4\", \"2g.10gb@0\"]");
        let (devices, stored) = discover(&*mock, gpus, None, &BTreeSet::new()).unwrap();
        assert_eq!(
            labels(&devices),
            ["0", "1 split 2", "2", "1/mig/2g.10gb@0", "1/mig/3g.20gb@4"]
        );
        let stored = stored.unwrap();
        assert_eq!(stored, "gpus 3\n1 2g.10gb 0 current\n1 3g.20gb 4 current\n");
        // speed 7 × 3/7; the backend's memory.
        assert_eq!(devices[4].speed, 3.0);
        assert_eq!(devices[4].memory_gb, 19.5);
        // A run there is charged 3/7 of the GPU's energy; a whole GPU's, all.
        assert_eq!(Target::energy_share(&devices[4]), 3.0 / 7.0);
        assert_eq!(Target::energy_share(&devices[2]), 1.0);
        let t = Target::read(&*mock, &devices[4]);
        assert!(t.uuid.starts_with("MIG-"), "{}", t.uuid);
        assert_eq!(
            (t.gpu, t.mig.map(|m| m.memory_bytes)),
            (1, Some(19968 << 20))
        );
        // Again on the same GPUs: adopted as stored, nothing to store.
        let (_, gpus) = host("");
        let (again, changed) = discover(&*mock, gpus, Some(&stored), &BTreeSet::new()).unwrap();
        assert_eq!(again, devices);
        assert_eq!(changed, None);
    }

    #[test]
    fn lost_instances_are_made_again_at_their_indices() {
        let (mock, gpus) = host("mig = [\"4g.20gb\", \"3g.20gb\"]");
        let (devices, stored) = discover(&*mock, gpus, None, &BTreeSet::new()).unwrap();
        // A reboot: MIG still on, no instance.
        let (rebooted, gpus) = host("mig = []");
        assert!(rebooted.gpu_instances(1).unwrap().is_empty());
        let (again, changed) =
            discover(&*rebooted, gpus, stored.as_deref(), &BTreeSet::new()).unwrap();
        assert_eq!(again, devices);
        assert_eq!(changed, None);
        let made: Vec<u32> = rebooted
            .gpu_instances(1)
            .unwrap()
            .iter()
            .map(|gi| gi.placement.start)
            .collect();
        assert_eq!(made, [0, 4]);
    }

    #[test]
    fn a_layout_changed_out_of_band_is_adopted_at_new_indices() {
        let (mock, gpus) = host("mig = [\"4g.20gb\", \"3g.20gb\"]");
        let (_, stored) = discover(&*mock, gpus, None, &BTreeSet::new()).unwrap();
        let (changed_mock, gpus) = host("mig = [\"7g.40gb\"]");
        let (devices, changed) =
            discover(&*changed_mock, gpus, stored.as_deref(), &BTreeSet::new()).unwrap();
        assert_eq!(
            labels(&devices),
            [
                "0",
                "1 split 0",
                "2",
                "1/mig/4g.20gb@0 retired",
                "1/mig/3g.20gb@4 retired",
                "1/mig/7g.40gb@0"
            ]
        );
        let stored = changed.unwrap();
        assert_eq!(
            stored,
            "gpus 3\n1 4g.20gb 0 retired\n1 3g.20gb 4 retired\n1 7g.40gb 0 current\n"
        );
        // MIG turned off: the GPU is whole again, every slot retired.
        let (off, gpus) = host("");
        let (devices, changed) = discover(&*off, gpus, Some(&stored), &BTreeSet::new()).unwrap();
        assert_eq!(devices.len(), 6);
        assert!(devices[1].schedulable());
        assert!(devices[3..].iter().all(|d| !d.schedulable()));
        assert_eq!(
            changed.unwrap(),
            "gpus 3\n1 4g.20gb 0 retired\n1 3g.20gb 4 retired\n1 7g.40gb 0 retired\n"
        );
    }

    #[test]
    fn slots_stored_for_another_host_are_dropped() {
        let (mock, gpus) = host("mig = [\"7g.40gb\"]");
        for stored in ["gpus 2\n", "garbage", "gpus 3\n0 7g.40gb 0 current\n"] {
            let (devices, changed) =
                discover(&*mock, gpus.clone(), Some(stored), &BTreeSet::new()).unwrap();
            assert_eq!(labels(&devices), ["0", "1 split 0", "2", "1/mig/7g.40gb@0"]);
            assert_eq!(changed.unwrap(), "gpus 3\n1 7g.40gb 0 current\n");
        }
    }

    #[test]
    fn a_gpu_whose_change_resumes_is_taken_as_it_is() {
        let (mock, gpus) = host("mig = [\"4g.20gb\", \"3g.20gb\"]");
        let (_, stored) = discover(&*mock, gpus, None, &BTreeSet::new()).unwrap();
        // Killed mid-apply with the instances destroyed: nothing is made
        // again, the change (resumed by the engine) makes the new layout.
        let (cleared, gpus) = host("mig = []");
        let changing = BTreeSet::from([1]);
        let (devices, changed) = discover(&*cleared, gpus, stored.as_deref(), &changing).unwrap();
        assert!(cleared.gpu_instances(1).unwrap().is_empty());
        assert_eq!(
            labels(&devices),
            [
                "0",
                "1 split 7",
                "2",
                "1/mig/4g.20gb@0 retired",
                "1/mig/3g.20gb@4 retired"
            ]
        );
        assert!(changed.is_some());
    }
}
