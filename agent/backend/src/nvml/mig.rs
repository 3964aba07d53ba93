//! MIG through raw NVML symbols: nvml-wrapper has no calls for GPU and compute
//! instances, and its placement query always comes back empty (it reads into
//! a `Vec` whose length it never sets).
//!
//! Instance handles live only within one call; the backend serialises the
//! calls that use them.

use std::ffi::CStr;
use std::{mem, ptr};

use nvml_wrapper::error::{nvml_try, NvmlError};
use nvml_wrapper::Device;
use nvml_wrapper_sys::bindings::{
    nvmlComputeInstanceInfo_t, nvmlComputeInstanceProfileInfo_t, nvmlComputeInstance_t,
    nvmlDevice_t, nvmlGpuInstanceInfo_t, nvmlGpuInstancePlacement_t,
    nvmlGpuInstanceProfileInfo_v2_t, nvmlGpuInstance_t, nvmlReturn_t, NvmlLib,
    NVML_COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED, NVML_COMPUTE_INSTANCE_PROFILE_COUNT,
    NVML_GPU_INSTANCE_PROFILE_COUNT,
};

use super::errors::{self, on_gpu, symbol};
use crate::{
    BackendError, ComputeInstance, ComputeInstanceProfile, GpuInstance, GpuInstanceProfile,
    Placement, Result,
};

/// `nvmlGpuInstanceProfileInfo_v2`: nvml.h's `NVML_STRUCT_VERSION(GpuInstanceProfileInfo, 2)`,
/// the struct's size with the version in the top byte.
const GPU_INSTANCE_PROFILE_INFO_V2: u32 =
    mem::size_of::<nvmlGpuInstanceProfileInfo_v2_t>() as u32 | (2 << 24);

/// Bytes in a MiB (NVML gives profile memory in MiB, calling it MB).
const MIB: u64 = 1024 * 1024;

/// The MIG calls of one physical GPU.
pub(super) struct Mig<'d> {
    device: &'d Device<'static>,
    gpu: u32,
}

impl<'d> Mig<'d> {
    /// MIG calls on `device`, NVML index `gpu`.
    pub(super) fn new(device: &'d Device<'static>, gpu: u32) -> Mig<'d> {
        Mig { device, gpu }
    }

    fn lib(&self) -> &'static NvmlLib {
        self.device.nvml().lib()
    }

    fn handle(&self) -> nvmlDevice_t {
        // SAFETY: the handle is only passed to NVML calls; it is never freed nor
        // wrapped in a second `Device`.
        unsafe { self.device.handle() }
    }

    /// The status of raw call `call` as a `Result`.
    fn check(&self, call: &'static str, status: nvmlReturn_t) -> Result<()> {
        nvml_try(status).map_err(on_gpu(self.gpu, call))
    }

    /// The GPU-instance profiles this GPU offers, with their placements.
    pub(super) fn gpu_instance_profiles(&self) -> Result<Vec<GpuInstanceProfile>> {
        let mut profiles = Vec::new();
        for index in 0..NVML_GPU_INSTANCE_PROFILE_COUNT {
            if let Some(mut profile) = self.gpu_instance_profile(index)? {
                profile.placements = self.placements(profile.id)?;
                profiles.push(profile);
            }
        }
        // NVML's profile indices run 1g, 2g, 3g, 4g, 7g, then the 1g
        // variants; the trait's order is smallest first.
        profiles.sort_by(crate::GpuInstanceProfile::smallest_first);
        Ok(profiles)
    }

    /// The profile at NVML profile index `index` (not its id), placements
    /// empty; `None` where this GPU has no such profile.
    fn gpu_instance_profile(&self, index: u32) -> Result<Option<GpuInstanceProfile>> {
        let (call, info) = match self.lib().nvmlDeviceGetGpuInstanceProfileInfoV.as_ref() {
            Ok(get_info) => {
                // SAFETY: all-zero is a valid value of this plain C struct.
                let mut info: nvmlGpuInstanceProfileInfo_v2_t = unsafe { mem::zeroed() };
                info.version = GPU_INSTANCE_PROFILE_INFO_V2;
                // SAFETY: `info` is the v2 struct its `version` names, and NVML
                // writes only into it.
                let status = unsafe { get_info(self.handle(), index, &mut info) };
                let profile = nvml_try(status).map(|()| GpuInstanceProfile {
                    id: info.id,
                    name: profile_name(&info.name),
                    slice_count: info.sliceCount,
                    memory_bytes: info.memorySizeMB.saturating_mul(MIB),
                    max_count: info.instanceCount,
                    placements: Vec::new(),
                });
                ("nvmlDeviceGetGpuInstanceProfileInfoV", profile)
            }
            // Drivers before R470 lack the V call, and with it the names.
            Err(_) => {
                let profile = self
                    .device
                    .profile_info(index)
                    .map(|info| GpuInstanceProfile {
                        id: info.id,
                        name: None,
                        slice_count: info.slice_count,
                        memory_bytes: info.memory_size_mb.saturating_mul(MIB),
                        max_count: info.instance_count,
                        placements: Vec::new(),
                    });
                ("nvmlDeviceGetGpuInstanceProfileInfo", profile)
            }
        };
        match info {
            Ok(profile) => Ok(Some(profile)),
            Err(NvmlError::NotSupported | NvmlError::InvalidArg) => Ok(None),
            Err(err) => Err(on_gpu(self.gpu, call)(err)),
        }
    }

    /// Where instances of profile `profile_id` may go.
    fn placements(&self, profile_id: u32) -> Result<Vec<Placement>> {
        const CALL: &str = "nvmlDeviceGetGpuInstancePossiblePlacements_v2";
        let get = symbol(
            self.gpu,
            CALL,
            &self.lib().nvmlDeviceGetGpuInstancePossiblePlacements_v2,
        )?;
        let mut count = 0;
        // SAFETY: with a null array NVML only writes the count.
        self.check(CALL, unsafe {
            get(self.handle(), profile_id, ptr::null_mut(), &mut count)
        })?;
        if count == 0 {
            return Ok(Vec::new());
        }
        let mut placements = vec![nvmlGpuInstancePlacement_t { start: 0, size: 0 }; count as usize];
        // SAFETY: the array holds `count` placements, as `count` tells NVML.
        self.check(CALL, unsafe {
            get(
                self.handle(),
                profile_id,
                placements.as_mut_ptr(),
                &mut count,
            )
        })?;
        placements.truncate(count as usize);
        Ok(placements
            .into_iter()
            .map(|p| Placement {
                start: p.start,
                size: p.size,
            })
            .collect())
    }

    /// Creates a GPU instance of `profile_id` at memory slice `start`.
    pub(super) fn create_gpu_instance(&self, profile_id: u32, start: u32) -> Result<GpuInstance> {
        const CALL: &str = "nvmlDeviceCreateGpuInstanceWithPlacement";
        let size = self
            .placements(profile_id)?
            .into_iter()
            .find(|p| p.start == start)
            .map(|p| p.size)
            .ok_or_else(|| {
                BackendError::invalid(
                    self.gpu,
                    CALL,
                    format!("profile {profile_id} has no placement at memory slice {start}"),
                )
            })?;
        let create = symbol(
            self.gpu,
            CALL,
            &self.lib().nvmlDeviceCreateGpuInstanceWithPlacement,
        )?;
        let placement = nvmlGpuInstancePlacement_t { start, size };
        let mut instance = ptr::null_mut();
        // SAFETY: NVML reads `placement` and writes the new handle to `instance`.
        self.check(CALL, unsafe {
            create(self.handle(), profile_id, &placement, &mut instance)
        })?;
        self.gpu_instance_info(instance)
    }

    /// Destroys GPU instance `id`.
    pub(super) fn destroy_gpu_instance(&self, id: u32) -> Result<()> {
        const CALL: &str = "nvmlGpuInstanceDestroy";
        let instance = self.gpu_instance(id)?;
        let destroy = symbol(self.gpu, CALL, &self.lib().nvmlGpuInstanceDestroy)?;
        // SAFETY: `instance` is a live handle from NVML.
        self.check(CALL, unsafe { destroy(instance) })
    }

    /// The GPU instances, by id.
    pub(super) fn gpu_instances(&self) -> Result<Vec<GpuInstance>> {
        const CALL: &str = "nvmlDeviceGetGpuInstances";
        let get = symbol(self.gpu, CALL, &self.lib().nvmlDeviceGetGpuInstances)?;
        let mut instances = Vec::new();
        for index in 0..NVML_GPU_INSTANCE_PROFILE_COUNT {
            let Some(profile) = self.gpu_instance_profile(index)? else {
                continue;
            };
            let mut handles = vec![ptr::null_mut(); profile.max_count as usize];
            let mut count = profile.max_count;
            if count == 0 {
                continue;
            }
            // SAFETY: the array has room for the profile's most instances, as
            // NVML requires; NVML writes `count` handles into it.
            self.check(CALL, unsafe {
                get(self.handle(), profile.id, handles.as_mut_ptr(), &mut count)
            })?;
            handles.truncate(count as usize);
            for handle in handles {
                instances.push(self.gpu_instance_info(handle)?);
            }
        }
        instances.sort_by_key(|i| i.id);
        Ok(instances)
    }

    /// The compute-instance profiles of GPU instance `gpu_instance`.
    pub(super) fn compute_instance_profiles(
        &self,
        gpu_instance: u32,
    ) -> Result<Vec<ComputeInstanceProfile>> {
        self.compute_profiles_of(self.gpu_instance(gpu_instance)?)
    }

    fn compute_profiles_of(
        &self,
        instance: nvmlGpuInstance_t,
    ) -> Result<Vec<ComputeInstanceProfile>> {
        const CALL: &str = "nvmlGpuInstanceGetComputeInstanceProfileInfo";
        let get = symbol(
            self.gpu,
            CALL,
            &self.lib().nvmlGpuInstanceGetComputeInstanceProfileInfo,
        )?;
        let mut profiles = Vec::new();
        for index in 0..NVML_COMPUTE_INSTANCE_PROFILE_COUNT {
            // SAFETY: all-zero is a valid value of this plain C struct.
            let mut info: nvmlComputeInstanceProfileInfo_t = unsafe { mem::zeroed() };
            // SAFETY: `instance` is a live handle; NVML writes only into `info`.
            let status = unsafe {
                get(
                    instance,
                    index,
                    NVML_COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED,
                    &mut info,
                )
            };
            match nvml_try(status) {
                Ok(()) => profiles.push(ComputeInstanceProfile {
                    id: info.id,
                    slice_count: info.sliceCount,
                    max_count: info.instanceCount,
                }),
                Err(NvmlError::NotSupported | NvmlError::InvalidArg) => {}
                Err(err) => return Err(on_gpu(self.gpu, CALL)(err)),
            }
        }
        Ok(profiles)
    }

    /// Creates a compute instance of `profile_id` in GPU instance `gpu_instance`.
    pub(super) fn create_compute_instance(
        &self,
        gpu_instance: u32,
        profile_id: u32,
    ) -> Result<ComputeInstance> {
        const CALL: &str = "nvmlGpuInstanceCreateComputeInstance";
        let instance = self.gpu_instance(gpu_instance)?;
        let create = symbol(
            self.gpu,
            CALL,
            &self.lib().nvmlGpuInstanceCreateComputeInstance,
        )?;
        let mut compute = ptr::null_mut();
        // SAFETY: `instance` is a live handle; NVML writes the new one to `compute`.
        self.check(CALL, unsafe { create(instance, profile_id, &mut compute) })?;
        self.compute_instance_info(gpu_instance, compute)
    }

    /// Destroys compute instance `id` of GPU instance `gpu_instance`.
    pub(super) fn destroy_compute_instance(&self, gpu_instance: u32, id: u32) -> Result<()> {
        const FIND: &str = "nvmlGpuInstanceGetComputeInstanceById";
        const CALL: &str = "nvmlComputeInstanceDestroy";
        let instance = self.gpu_instance(gpu_instance)?;
        let find = symbol(
            self.gpu,
            FIND,
            &self.lib().nvmlGpuInstanceGetComputeInstanceById,
        )?;
        let mut compute = ptr::null_mut();
        // SAFETY: `instance` is a live handle; NVML writes the found one to `compute`.
        self.check(FIND, unsafe { find(instance, id, &mut compute) })
            .map_err(|err| {
                errors::missing(err, || {
                    format!("compute instance {id} in GPU instance {gpu_instance}")
                })
            })?;
        let destroy = symbol(self.gpu, CALL, &self.lib().nvmlComputeInstanceDestroy)?;
        // SAFETY: `compute` is a live handle from NVML.
        self.check(CALL, unsafe { destroy(compute) })
    }

    /// The compute instances of GPU instance `gpu_instance`, by id.
    pub(super) fn compute_instances(&self, gpu_instance: u32) -> Result<Vec<ComputeInstance>> {
        const CALL: &str = "nvmlGpuInstanceGetComputeInstances";
        let instance = self.gpu_instance(gpu_instance)?;
        let get = symbol(
            self.gpu,
            CALL,
            &self.lib().nvmlGpuInstanceGetComputeInstances,
        )?;
        let mut computes = Vec::new();
        for profile in self.compute_profiles_of(instance)? {
            let mut handles = vec![ptr::null_mut(); profile.max_count as usize];
            let mut count = profile.max_count;
            if count == 0 {
                continue;
            }
            // SAFETY: the array has room for the profile's most instances, as
            // NVML requires; NVML writes `count` handles into it.
            self.check(CALL, unsafe {
                get(instance, profile.id, handles.as_mut_ptr(), &mut count)
            })?;
            handles.truncate(count as usize);
            for handle in handles {
                computes.push(self.compute_instance_info(gpu_instance, handle)?);
            }
        }
        computes.sort_by_key(|c| c.id);
        Ok(computes)
    }

    /// The handle of GPU instance `id`.
    fn gpu_instance(&self, id: u32) -> Result<nvmlGpuInstance_t> {
        const CALL: &str = "nvmlDeviceGetGpuInstanceById";
        let find = symbol(self.gpu, CALL, &self.lib().nvmlDeviceGetGpuInstanceById)?;
        let mut instance = ptr::null_mut();
        // SAFETY: NVML writes the found handle to `instance`.
        self.check(CALL, unsafe { find(self.handle(), id, &mut instance) })
            .map_err(|err| errors::missing(err, || format!("GPU instance {id}")))?;
        Ok(instance)
    }

    fn gpu_instance_info(&self, instance: nvmlGpuInstance_t) -> Result<GpuInstance> {
        const CALL: &str = "nvmlGpuInstanceGetInfo";
        let get = symbol(self.gpu, CALL, &self.lib().nvmlGpuInstanceGetInfo)?;
        // SAFETY: all-zero (null pointers included) is a valid value of this C struct.
        let mut info: nvmlGpuInstanceInfo_t = unsafe { mem::zeroed() };
        // SAFETY: `instance` is a live handle; NVML writes only into `info`.
        self.check(CALL, unsafe { get(instance, &mut info) })?;
        Ok(GpuInstance {
            id: info.id,
            profile_id: info.profileId,
            placement: Placement {
                start: info.placement.start,
                size: info.placement.size,
            },
        })
    }

    fn compute_instance_info(
        &self,
        gpu_instance: u32,
        compute: nvmlComputeInstance_t,
    ) -> Result<ComputeInstance> {
        const CALL: &str = "nvmlComputeInstanceGetInfo_v2";
        let get = symbol(self.gpu, CALL, &self.lib().nvmlComputeInstanceGetInfo_v2)?;
        // SAFETY: all-zero (null pointers included) is a valid value of this C struct.
        let mut info: nvmlComputeInstanceInfo_t = unsafe { mem::zeroed() };
        // SAFETY: `compute` is a live handle; NVML writes only into `info`.
        self.check(CALL, unsafe { get(compute, &mut info) })?;
        Ok(ComputeInstance {
            id: info.id,
            gpu_instance,
            profile_id: info.profileId,
        })
    }
}

/// The GPU- and compute-instance ids of MIG device `device`, a MIG device of GPU `gpu`.
pub(super) fn mig_device_ids(device: &Device<'static>, gpu: u32) -> Result<(u32, u32)> {
    const GI: &str = "nvmlDeviceGetGpuInstanceId";
    const CI: &str = "nvmlDeviceGetComputeInstanceId";
    let lib = device.nvml().lib();
    let get_gi = symbol(gpu, GI, &lib.nvmlDeviceGetGpuInstanceId)?;
    let get_ci = symbol(gpu, CI, &lib.nvmlDeviceGetComputeInstanceId)?;
    // SAFETY: the handle is only passed to NVML, never freed.
    let handle = unsafe { device.handle() };
    let (mut gi, mut ci) = (0, 0);
    // SAFETY: NVML writes one id into each out-parameter.
    nvml_try(unsafe { get_gi(handle, &mut gi) }).map_err(on_gpu(gpu, GI))?;
    // SAFETY: as above.
    nvml_try(unsafe { get_ci(handle, &mut ci) }).map_err(on_gpu(gpu, CI))?;
    Ok((gi, ci))
}

/// A profile name as the catalogue writes it (`1g.5gb`; NVML says `MIG 1g.5gb`).
fn profile_name(raw: &[std::ffi::c_char]) -> Option<String> {
    // `c_char` is `i8` or `u8` by platform; either way one byte.
    let bytes: Vec<u8> = raw.iter().map(|&c| c as u8).collect();
    let name = CStr::from_bytes_until_nul(&bytes).ok()?.to_str().ok()?;
    let name = name.strip_prefix("MIG ").unwrap_or(name).trim();
    (!name.is_empty()).then(|| name.to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn raw_name(name: &str) -> [std::ffi::c_char; 96] {
        let mut raw = [0; 96];
        for (slot, byte) in raw.iter_mut().zip(name.bytes()) {
            *slot = byte as std::ffi::c_char;
        }
        raw
    }

    #[test]
    fn the_v2_profile_info_version_matches_nvml_h() {
        // nvml.h: #define nvmlGpuInstanceProfileInfo_v2 0x02000098 (152-byte struct).
        assert_eq!(GPU_INSTANCE_PROFILE_INFO_V2, 0x0200_0098);
    }

    #[test]
    fn profile_names_lose_the_mig_prefix() {
        assert_eq!(profile_name(&raw_name("MIG 1g.5gb")), Some("1g.5gb".into()));
        assert_eq!(
            profile_name(&raw_name("MIG 1g.10gb+me")),
            Some("1g.10gb+me".into())
        );
        assert_eq!(profile_name(&raw_name("3g.20gb")), Some("3g.20gb".into()));
        assert_eq!(profile_name(&raw_name("")), None);
        assert_eq!(profile_name(&[b'x' as std::ffi::c_char; 4]), None);
    }
}
