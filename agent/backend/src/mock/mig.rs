//! MIG state of one mock GPU and the driver's rules for changing it.

use super::uuid;
use crate::{
    BackendError, ComputeInstance, ComputeInstanceProfile, GpuInstance, MigDevice, MigMode,
    Placement, Result,
};
use gpu_agent_core::mig::{MigProfile, MigTable};

const CREATE_GI: &str = "nvmlDeviceCreateGpuInstanceWithPlacement";
const DESTROY_GI: &str = "nvmlGpuInstanceDestroy";
const GET_GI: &str = "nvmlDeviceGetGpuInstanceById";
const CREATE_CI: &str = "nvmlGpuInstanceCreateComputeInstance";
const DESTROY_CI: &str = "nvmlComputeInstanceDestroy";
const GET_CI: &str = "nvmlGpuInstanceGetComputeInstanceById";

/// Compute-instance profiles: (the driver's id, compute slices).
const CI_PROFILES: &[(u32, u32)] = &[(0, 1), (1, 2), (2, 3), (3, 4), (4, 7)];

/// A compute instance inside a mock GPU instance.
#[derive(Debug, Clone)]
struct MockCi {
    id: u32,
    profile_id: u32,
    slices: u32,
    uuid: String,
}

/// A mock GPU instance.
#[derive(Debug, Clone)]
pub(super) struct MockGi {
    pub id: u32,
    pub profile: &'static MigProfile,
    pub placement: Placement,
    cis: Vec<MockCi>,
}

/// MIG mode and instances of one GPU.
#[derive(Debug, Clone)]
pub(super) struct MigState {
    table: &'static MigTable,
    mode: MigMode,
    instances: Vec<MockGi>,
    /// Compute instances ever created: a re-created instance gets a new UUID.
    created: u64,
}

impl MigState {
    /// MIG off, nothing pending, no instances.
    pub fn new(table: &'static MigTable) -> MigState {
        MigState {
            table,
            mode: MigMode {
                current: false,
                pending: false,
            },
            instances: Vec::new(),
            created: 0,
        }
    }

    pub fn table(&self) -> &'static MigTable {
        self.table
    }

    pub fn mode(&self) -> MigMode {
        self.mode
    }

    pub fn enabled(&self) -> bool {
        self.mode.current
    }

    /// The GPU instances (none while MIG is off).
    pub fn instances(&self) -> impl Iterator<Item = &MockGi> {
        self.instances.iter().filter(|_| self.mode.current)
    }

    /// Asks for a mode; it stays pending until `reset`.
    pub fn set_mode(&mut self, gpu: u32, enabled: bool) -> Result<MigMode> {
        if !enabled && !self.instances.is_empty() {
            return Err(BackendError::in_use(
                gpu,
                "nvmlDeviceSetMigMode",
                format!(
                    "{} GPU instance(s) exist; destroy them before disabling MIG",
                    self.instances.len()
                ),
            ));
        }
        self.mode.pending = enabled;
        Ok(self.mode)
    }

    /// A GPU reset: the pending mode becomes current and instances are gone.
    pub fn reset(&mut self) {
        self.mode.current = self.mode.pending;
        self.instances.clear();
    }

    fn require_enabled(&self, gpu: u32, call: &'static str) -> Result<()> {
        if self.mode.current {
            Ok(())
        } else {
            Err(BackendError::not_supported(gpu, call))
        }
    }

    pub fn create_gi(&mut self, gpu: u32, profile_id: u32, start: u32) -> Result<GpuInstance> {
        self.require_enabled(gpu, CREATE_GI)?;
        let profile = self.table.profile(profile_id).ok_or_else(|| {
            BackendError::invalid(
                gpu,
                CREATE_GI,
                format!("no GPU-instance profile {profile_id}"),
            )
        })?;
        if !profile.placement_starts.contains(&start) {
            let starts: Vec<String> = profile
                .placement_starts
                .iter()
                .map(u32::to_string)
                .collect();
            return Err(BackendError::invalid(
                gpu,
                CREATE_GI,
                format!(
                    "{} cannot start at memory slice {start}; valid starts: {}",
                    profile.name,
                    starts.join(", ")
                ),
            ));
        }
        let same = self
            .instances
            .iter()
            .filter(|gi| gi.profile.id == profile_id)
            .count() as u32;
        if same >= profile.max_count {
            return Err(BackendError::insufficient(
                gpu,
                CREATE_GI,
                format!(
                    "{}: at most {} instance(s)",
                    profile.name, profile.max_count
                ),
            ));
        }
        let placement = Placement {
            start,
            size: profile.placement_size,
        };
        if let Some(other) = self
            .instances
            .iter()
            .find(|gi| gi.placement.overlaps(&placement))
        {
            return Err(BackendError::insufficient(
                gpu,
                CREATE_GI,
                format!(
                    "memory slices {}..{} overlap GPU instance {} ({} at {}..{})",
                    start,
                    start + placement.size,
                    other.id,
                    other.profile.name,
                    other.placement.start,
                    other.placement.start + other.placement.size
                ),
            ));
        }
        let id = lowest_free(self.instances.iter().map(|gi| gi.id), 1);
        self.instances.push(MockGi {
            id,
            profile,
            placement,
            cis: Vec::new(),
        });
        self.instances.sort_by_key(|gi| gi.id);
        Ok(GpuInstance {
            id,
            profile_id,
            placement,
        })
    }

    pub fn gi(&self, gpu: u32, id: u32, call: &'static str) -> Result<&MockGi> {
        self.require_enabled(gpu, call)?;
        self.instances
            .iter()
            .find(|gi| gi.id == id)
            .ok_or_else(|| BackendError::not_found(gpu, call, format!("GPU instance {id}")))
    }

    fn gi_mut(&mut self, gpu: u32, id: u32, call: &'static str) -> Result<&mut MockGi> {
        self.require_enabled(gpu, call)?;
        self.instances
            .iter_mut()
            .find(|gi| gi.id == id)
            .ok_or_else(|| BackendError::not_found(gpu, call, format!("GPU instance {id}")))
    }

    /// Destroys a GPU instance that holds no compute instance; `busy` says
    /// whether processes run in it.
    pub fn destroy_gi(&mut self, gpu: u32, id: u32, busy: bool) -> Result<()> {
        let gi = self.gi(gpu, id, DESTROY_GI)?;
        if !gi.cis.is_empty() {
            let ids: Vec<String> = gi.cis.iter().map(|ci| ci.id.to_string()).collect();
            return Err(BackendError::in_use(
                gpu,
                DESTROY_GI,
                format!(
                    "GPU instance {id} still holds compute instance(s) {}",
                    ids.join(", ")
                ),
            ));
        }
        if busy {
            return Err(BackendError::in_use(
                gpu,
                DESTROY_GI,
                format!("processes run in GPU instance {id}"),
            ));
        }
        self.instances.retain(|gi| gi.id != id);
        Ok(())
    }

    /// The GPU instances (none while MIG is off).
    pub fn gis(&self) -> Vec<GpuInstance> {
        self.instances()
            .map(|gi| GpuInstance {
                id: gi.id,
                profile_id: gi.profile.id,
                placement: gi.placement,
            })
            .collect()
    }

    pub fn ci_profiles(&self, gpu: u32, gi: u32) -> Result<Vec<ComputeInstanceProfile>> {
        let gi = self.gi(gpu, gi, "nvmlGpuInstanceGetComputeInstanceProfileInfo")?;
        Ok(ci_profiles_for(gi.profile.compute_slices)
            .map(|(id, slices)| ComputeInstanceProfile {
                id,
                slice_count: slices,
                max_count: gi.profile.compute_slices / slices,
            })
            .collect())
    }

    pub fn create_ci(&mut self, gpu: u32, gi: u32, profile_id: u32) -> Result<ComputeInstance> {
        let g = self.gi_mut(gpu, gi, CREATE_CI)?;
        let total = g.profile.compute_slices;
        let slices = ci_profiles_for(total)
            .find(|(id, _)| *id == profile_id)
            .map(|(_, s)| s)
            .ok_or_else(|| {
                BackendError::invalid(
                    gpu,
                    CREATE_CI,
                    format!(
                        "no compute-instance profile {profile_id} in GPU instance {gi} ({})",
                        g.profile.name
                    ),
                )
            })?;
        let used: u32 = g.cis.iter().map(|ci| ci.slices).sum();
        if used + slices > total {
            return Err(BackendError::insufficient(
                gpu,
                CREATE_CI,
                format!(
                    "GPU instance {gi} has {} of {total} compute slices free; profile {profile_id} needs {slices}",
                    total - used
                ),
            ));
        }
        let id = lowest_free(g.cis.iter().map(|ci| ci.id), 0);
        let uuid = uuid("MIG", &[u64::from(gpu), self.created]);
        self.created += 1;
        let g = self.gi_mut(gpu, gi, CREATE_CI)?;
        g.cis.push(MockCi {
            id,
            profile_id,
            slices,
            uuid,
        });
        g.cis.sort_by_key(|ci| ci.id);
        Ok(ComputeInstance {
            id,
            gpu_instance: gi,
            profile_id,
        })
    }

    /// Destroys a compute instance; `busy` says whether processes run in it.
    pub fn destroy_ci(&mut self, gpu: u32, gi: u32, ci: u32, busy: bool) -> Result<()> {
        let g = self.gi_mut(gpu, gi, DESTROY_CI)?;
        if !g.cis.iter().any(|c| c.id == ci) {
            return Err(BackendError::not_found(
                gpu,
                DESTROY_CI,
                format!("compute instance {ci} in GPU instance {gi}"),
            ));
        }
        if busy {
            return Err(BackendError::in_use(
                gpu,
                DESTROY_CI,
                format!("processes run in compute instance {ci} of GPU instance {gi}"),
            ));
        }
        g.cis.retain(|c| c.id != ci);
        Ok(())
    }

    pub fn cis(&self, gpu: u32, gi: u32) -> Result<Vec<ComputeInstance>> {
        let g = self.gi(gpu, gi, "nvmlGpuInstanceGetComputeInstances")?;
        Ok(g.cis
            .iter()
            .map(|ci| ComputeInstance {
                id: ci.id,
                gpu_instance: gi,
                profile_id: ci.profile_id,
            })
            .collect())
    }

    /// Whether compute instance `ci` of GPU instance `gi` exists.
    pub fn has_ci(&self, gpu: u32, gi: u32, ci: u32) -> Result<()> {
        let g = self.gi(gpu, gi, GET_GI)?;
        if g.cis.iter().any(|c| c.id == ci) {
            Ok(())
        } else {
            Err(BackendError::not_found(
                gpu,
                GET_CI,
                format!("compute instance {ci} in GPU instance {gi}"),
            ))
        }
    }

    pub fn devices(&self) -> Vec<MigDevice> {
        if !self.mode.current {
            return Vec::new();
        }
        self.instances
            .iter()
            .flat_map(|gi| {
                gi.cis.iter().map(|ci| MigDevice {
                    uuid: ci.uuid.clone(),
                    gpu_instance: gi.id,
                    compute_instance: ci.id,
                    memory_bytes: gi.profile.memory_mib << 20,
                })
            })
            .collect()
    }
}

/// Compute-instance profiles that fit a GPU instance of `slices` compute slices.
fn ci_profiles_for(slices: u32) -> impl Iterator<Item = (u32, u32)> {
    CI_PROFILES
        .iter()
        .copied()
        .filter(move |(_, s)| *s <= slices)
}

/// The lowest id from `from` that `used` does not hold.
fn lowest_free(used: impl Iterator<Item = u32> + Clone, from: u32) -> u32 {
    (from..)
        .find(|id| !used.clone().any(|u| u == *id))
        .unwrap_or(from)
}
