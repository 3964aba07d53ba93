//! The MIG layout each GPU has now, followed from the views.
//!
//! A view lists every device ever made, MIG instances a later layout retired
//! among them (offline for good; indices are never reused), so a GPU's
//! current instances are followed, not read: at first sight they are the
//! newest disjoint run of its instances (exact while nothing was retired);
//! afterwards, instances that appear together for a GPU are its new layout
//! (a layout change adds all of them at once, at new indices), and a GPU
//! seen online is whole (a split GPU never is).

use gpu_agent_catalogue::catalogue::{self, GpuModel};
use gpu_agent_catalogue::mig::{MigProfile, MigTable};
use gpu_agent_catalogue::placement::Configuration;
use gpu_agent_plugin_api::View;

/// One MIG-capable GPU.
#[derive(Debug, Clone, PartialEq)]
pub struct Gpu {
    /// Its device index.
    pub index: u32,
    /// Its model.
    pub model: &'static GpuModel,
    /// Work units per second of the whole GPU.
    pub speed: f64,
    /// Its current instances (device indices, by start); empty: whole.
    pub instances: Vec<u32>,
}

impl Gpu {
    /// Its MIG table.
    pub fn table(&self) -> &'static MigTable {
        self.model.mig.expect("only MIG-capable GPUs are followed")
    }

    /// Whether any of its current devices (itself when whole, else its
    /// instances) is online.
    pub fn takes_tasks(&self, view: &View<'_>) -> bool {
        if self.instances.is_empty() {
            view.devices[self.index as usize].online
        } else {
            self.instances
                .iter()
                .any(|&d| view.devices[d as usize].online)
        }
    }

    /// Its configuration now, a whole GPU counting as the full-size
    /// profile (`7g.40gb` on an A100-40GB).
    pub fn configuration(&self, view: &View<'_>) -> Configuration {
        if self.instances.is_empty() {
            return Configuration::from_profiles(vec![full_profile(self.table())]);
        }
        Configuration::from_profiles(
            self.instances
                .iter()
                .map(|&d| profile_of(self.table(), view, d))
                .collect(),
        )
    }
}

/// The profile that takes a whole GPU (all memory slices, no `+me`).
pub fn full_profile(table: &'static MigTable) -> &'static MigProfile {
    table
        .profiles
        .iter()
        .find(|p| p.placement_size == table.memory_slices && !p.name.ends_with("+me"))
        .expect("a MIG table has a full-size profile")
}

/// The profile of MIG device `device` of `view`.
fn profile_of(table: &'static MigTable, view: &View<'_>, device: u32) -> &'static MigProfile {
    let name = view.devices[device as usize]
        .mig
        .as_ref()
        .map(|m| m.profile.as_str())
        .into_option()
        .expect("a followed instance is a MIG device");
    table
        .profile_named(name)
        .unwrap_or_else(|| panic!("{name}: not a profile of its GPU's model"))
}

/// The MIG-capable GPUs of the views and their current instances.
#[derive(Debug, Clone, Default)]
pub struct Layouts {
    /// Devices of the last view (those past it are new).
    known: usize,
    /// The MIG-capable GPUs, by index.
    pub gpus: Vec<Gpu>,
}

impl Layouts {
    /// Follows `view`: new instances become their GPU's layout, a GPU online
    /// is whole.
    pub fn observe(&mut self, view: &View<'_>) {
        let devices = view.devices.as_slice();
        if self.known == 0 {
            self.gpus = devices
                .iter()
                .filter(|d| d.mig.is_none())
                .filter_map(|d| {
                    let model = catalogue::lookup(d.model.as_str())?;
                    model.mig?;
                    Some(Gpu {
                        index: d.index,
                        model,
                        speed: d.speed,
                        instances: Vec::new(),
                    })
                })
                .collect();
            for gpu in &mut self.gpus {
                gpu.instances = newest_layout(gpu, view);
            }
        } else if devices.len() > self.known {
            for gpu in &mut self.gpus {
                let new: Vec<u32> = devices[self.known..]
                    .iter()
                    .filter(|d| d.mig.into_option().is_some_and(|m| m.parent == gpu.index))
                    .map(|d| d.index)
                    .collect();
                if !new.is_empty() {
                    gpu.instances = by_start(view, new);
                }
            }
        }
        for gpu in &mut self.gpus {
            if devices[gpu.index as usize].online {
                gpu.instances.clear();
            }
        }
        self.known = devices.len();
    }
}

/// `devices` (MIG devices of one GPU) ordered by start.
fn by_start(view: &View<'_>, mut devices: Vec<u32>) -> Vec<u32> {
    let start = |d: &u32| {
        view.devices[*d as usize]
            .mig
            .as_ref()
            .map(|m| m.start)
            .unwrap_or(0)
    };
    devices.sort_by_key(start);
    devices
}

/// At first sight: the newest instances of `gpu` that are consecutive in
/// index and disjoint in memory (every layout's instances are made
/// together at consecutive indices).
fn newest_layout(gpu: &Gpu, view: &View<'_>) -> Vec<u32> {
    if view.devices[gpu.index as usize].online {
        return Vec::new();
    }
    let table = gpu.table();
    let mut taken = Vec::new();
    let mut mask = 0u32;
    let mut last: Option<u32> = None;
    for d in view.devices.iter().rev() {
        let Some(m) = d.mig.as_ref().into_option() else {
            continue;
        };
        if m.parent != gpu.index {
            continue;
        }
        if last.is_some_and(|l| l != d.index + 1) {
            break;
        }
        let Some(profile) = table.profile_named(m.profile.as_str()) else {
            break;
        };
        let bits = ((1u32 << profile.placement_size) - 1) << m.start;
        if mask & bits != 0 {
            break;
        }
        mask |= bits;
        taken.push(d.index);
        last = Some(d.index);
    }
    by_start(view, taken)
}

#[cfg(test)]
mod tests {
    use gpu_agent_plugin_api::abi_stable::std_types::RSlice;

    use super::*;
    use crate::testing::{a100, instance};

    fn view<'a>(devices: &'a [gpu_agent_plugin_api::Device<'a>]) -> View<'a> {
        View {
            now: 0.0,
            held: RSlice::EMPTY,
            pending: RSlice::EMPTY,
            devices: RSlice::from_slice(devices),
        }
    }

    /// At first sight GPU 0's layout is its newest consecutive disjoint
    /// instances (3 and 4; 1 and 2 were retired), GPU 5 is whole (online).
    /// Later, instances that appear together are the new layout, and a GPU
    /// that comes online is whole.
    #[test]
    fn layouts_are_followed_through_changes() {
        let mut devices = vec![
            a100(0, false),
            instance(1, 0, "3g.20gb", 0, 3, 19.5, false),
            instance(2, 0, "3g.20gb", 4, 3, 19.5, false),
            instance(3, 0, "4g.20gb", 0, 4, 19.5, true),
            instance(4, 0, "3g.20gb", 4, 3, 19.5, true),
            a100(5, true),
        ];
        let mut l = Layouts::default();
        l.observe(&view(&devices));
        let got: Vec<(u32, Vec<u32>)> = l
            .gpus
            .iter()
            .map(|g| (g.index, g.instances.clone()))
            .collect();
        assert_eq!(got, vec![(0, vec![3, 4]), (5, vec![])]);
        assert_eq!(
            l.gpus[0].configuration(&view(&devices)).to_string(),
            "4g.20gb + 3g.20gb"
        );
        assert_eq!(
            l.gpus[1].configuration(&view(&devices)).to_string(),
            "7g.40gb"
        );
        // GPU 5 split in two (7 at start 4 listed first), GPU 0 whole again.
        devices[5].online = false;
        devices.push(instance(6, 5, "3g.20gb", 4, 3, 19.5, false));
        devices.push(instance(7, 5, "4g.20gb", 0, 4, 19.5, false));
        devices[0].online = true;
        l.observe(&view(&devices));
        let got: Vec<(u32, Vec<u32>)> = l
            .gpus
            .iter()
            .map(|g| (g.index, g.instances.clone()))
            .collect();
        assert_eq!(got, vec![(0, vec![]), (5, vec![7, 6])]);
    }
}
