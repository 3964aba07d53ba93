//! Creating MIG instances: one GPU instance at a placement and one
//! full-size compute instance in it (docs/mig.md §1.2), the way the agent
//! makes every instance.

use super::{BackendError, ComputeInstance, GpuBackend, GpuInstance, Result};

/// Creates a GPU instance of profile `profile_id` at memory slice `start` on
/// GPU `gpu` (MIG already on), then its one compute instance of all its
/// compute slices. If the compute instance cannot be made, the GPU instance
/// is destroyed again (best effort) and the first error returned.
pub fn create_instance(
    backend: &dyn GpuBackend,
    gpu: u32,
    profile_id: u32,
    start: u32,
) -> Result<(GpuInstance, ComputeInstance)> {
    let gi = backend.create_gpu_instance(gpu, profile_id, start)?;
    let ci = backend
        .compute_instance_profiles(gpu, gi.id)
        .and_then(|profiles| {
            let full = profiles
                .iter()
                .max_by_key(|p| p.slice_count)
                .ok_or_else(|| {
                    BackendError::invalid(
                        gpu,
                        "nvmlGpuInstanceGetComputeInstanceProfileInfo",
                        format!("GPU instance {} lists no compute-instance profile", gi.id),
                    )
                })?;
            backend.create_compute_instance(gpu, gi.id, full.id)
        });
    match ci {
        Ok(ci) => Ok((gi, ci)),
        Err(e) => {
            if let Err(undo) = backend.destroy_gpu_instance(gpu, gi.id) {
                log::warn!(
                    "GPU {gpu}: cannot destroy GPU instance {} again: {undo}",
                    gi.id
                );
            }
            Err(e)
        }
    }
}
