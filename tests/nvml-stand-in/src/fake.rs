//! The stand-in's state: a mock backend (the project's one model of a GPU),
//! the handles NVML gave out, the event sets, and the control file.

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};

use gpu_agent_backend::mock::{Fault, MockBackend, SystemClock};
use gpu_agent_backend::{BackendError, ClockPair, ClockRange, GpuBackend};
use nvml_wrapper_sys::bindings::*;

use crate::control::{Control, Event};

/// The stand-in, once `nvmlInit` found its host file.
static FAKE: OnceLock<Fake> = OnceLock::new();

/// What an NVML handle stands for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Handle {
    /// A physical GPU, by index.
    Gpu(u32),
    /// A MIG device: (GPU, GPU instance, compute instance).
    Mig(u32, u32, u32),
    /// A GPU instance: (GPU, id).
    Gi(u32, u32),
    /// A compute instance: (GPU, GPU instance, id).
    Ci(u32, u32, u32),
    /// An event set.
    Set(usize),
}

/// The stand-in's GPUs and what NVML handed out.
pub(crate) struct Fake {
    pub(crate) mock: MockBackend,
    /// Every handle given out; a handle is its index here plus one.
    handles: Mutex<Vec<Handle>>,
    /// The GPUs registered in each event set, by set number.
    sets: Mutex<Vec<BTreeSet<u32>>>,
    pub(crate) control: Control,
    /// Where the GPUs' controls are kept between processes; the lock makes
    /// each read of the controls and its write one step, so that a write
    /// from another thread cannot overtake it with older controls.
    state: Mutex<Option<PathBuf>>,
}

/// Locks `m`, whatever a panicking holder left.
fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl Fake {
    /// The stand-in, made on the first successful `nvmlInit` from the host
    /// file `NVML_FAKE_HOST` names.
    pub(crate) fn init() -> Result<&'static Fake, nvmlReturn_t> {
        if let Some(fake) = FAKE.get() {
            return Ok(fake);
        }
        let Some(path) = std::env::var_os("NVML_FAKE_HOST").map(PathBuf::from) else {
            eprintln!("nvml stand-in: NVML_FAKE_HOST names no host file");
            return Err(nvmlReturn_enum_NVML_ERROR_DRIVER_NOT_LOADED);
        };
        let host = gpu_agent_hostspec::host::load(&path).map_err(|e| {
            eprintln!("nvml stand-in: {e}");
            nvmlReturn_enum_NVML_ERROR_DRIVER_NOT_LOADED
        })?;
        let fake = Fake {
            mock: MockBackend::new(&host, Arc::new(SystemClock::new())),
            handles: Mutex::default(),
            sets: Mutex::default(),
            control: Control::from_env(),
            state: Mutex::new(std::env::var_os("NVML_FAKE_STATE").map(PathBuf::from)),
        };
        let kept = lock(&fake.state)
            .as_ref()
            .and_then(|p| std::fs::read_to_string(p).ok());
        if let Some(text) = kept {
            fake.restore(&text);
        }
        Ok(FAKE.get_or_init(|| fake))
    }

    /// Writes every GPU's controls to the file `NVML_FAKE_STATE` names, for
    /// the next process's `nvmlInit`: the driver keeps clock locks,
    /// application clocks and power limits after the process that set them
    /// ends, killed or not. (MIG instances are not kept.)
    pub(crate) fn save(&self) {
        let state = lock(&self.state);
        let Some(path) = state.as_ref() else { return };
        let mut text = String::new();
        for gpu in 0.. {
            let Some(c) = self.mock.controls(gpu) else {
                break;
            };
            if let Some(r) = c.locked_core {
                text += &format!("{gpu} core {} {}\n", r.min_mhz, r.max_mhz);
            }
            if let Some(r) = c.locked_memory {
                text += &format!("{gpu} memory {} {}\n", r.min_mhz, r.max_mhz);
            }
            if let Some(p) = c.applications {
                text += &format!("{gpu} applications {} {}\n", p.core_mhz, p.mem_mhz);
            }
            text += &format!("{gpu} power {}\n", c.power_limit_mw);
        }
        let staged = path.with_extension(format!("{}", std::process::id()));
        if let Err(e) = std::fs::write(&staged, text).and_then(|()| std::fs::rename(&staged, path))
        {
            eprintln!(
                "nvml stand-in: cannot keep the GPUs' controls in {}: {e}",
                path.display()
            );
        }
    }

    /// Puts back the controls [`save`](Self::save) kept, through the mock's
    /// own calls.
    fn restore(&self, text: &str) {
        for line in text.lines() {
            let words: Vec<&str> = line.split_whitespace().collect();
            let n = |i: usize| {
                words
                    .get(i)
                    .and_then(|w| w.parse::<u32>().ok())
                    .unwrap_or(0)
            };
            let gpu = n(0);
            let range = ClockRange {
                min_mhz: n(2),
                max_mhz: n(3),
            };
            let restored = match words.get(1) {
                Some(&"core") => self.mock.lock_core_clocks(gpu, range),
                Some(&"memory") => self.mock.lock_memory_clocks(gpu, range),
                Some(&"applications") => self.mock.set_applications_clocks(
                    gpu,
                    ClockPair {
                        core_mhz: n(2),
                        mem_mhz: n(3),
                    },
                ),
                Some(&"power") => self.mock.set_power_limit(gpu, n(2)).map(drop),
                _ => Ok(()),
            };
            if let Err(e) = restored {
                eprintln!("nvml stand-in: {line:?} kept by the last process: {e}");
            }
        }
    }

    /// The stand-in, once initialised.
    pub(crate) fn get() -> Result<&'static Fake, nvmlReturn_t> {
        FAKE.get().ok_or(nvmlReturn_enum_NVML_ERROR_UNINITIALIZED)
    }

    /// Applies what the control file asked for since the last call.
    pub(crate) fn poll_control(&self) {
        for event in self.control.poll() {
            match event {
                Event::Xid(gpu, code) => self.mock.inject(gpu, Fault::Xid(code)),
                Event::Lost(gpu) => self.mock.inject(gpu, Fault::GpuLost),
            }
        }
    }

    /// The NVML handle of `handle` (the same pointer each time).
    pub(crate) fn handle<T>(&self, handle: Handle) -> *mut T {
        let mut handles = lock(&self.handles);
        let at = match handles.iter().position(|&h| h == handle) {
            Some(at) => at,
            None => {
                handles.push(handle);
                handles.len() - 1
            }
        };
        std::ptr::without_provenance_mut(at + 1)
    }

    /// What NVML handle `ptr` stands for; `INVALID_ARGUMENT` for a pointer
    /// NVML never gave out.
    pub(crate) fn resolve<T>(&self, ptr: *mut T) -> Result<Handle, nvmlReturn_t> {
        let at = ptr.addr().checked_sub(1);
        at.and_then(|at| lock(&self.handles).get(at).copied())
            .ok_or(nvmlReturn_enum_NVML_ERROR_INVALID_ARGUMENT)
    }

    /// A new, empty event set.
    pub(crate) fn new_set(&self) -> nvmlEventSet_t {
        let mut sets = lock(&self.sets);
        sets.push(BTreeSet::new());
        let set = sets.len() - 1;
        drop(sets);
        self.handle(Handle::Set(set))
    }

    /// Runs `f` on the GPUs registered in event set `set`.
    pub(crate) fn with_set<T>(
        &self,
        set: nvmlEventSet_t,
        f: impl FnOnce(&mut BTreeSet<u32>) -> T,
    ) -> Result<T, nvmlReturn_t> {
        let Handle::Set(set) = self.resolve(set)? else {
            return Err(nvmlReturn_enum_NVML_ERROR_INVALID_ARGUMENT);
        };
        Ok(f(&mut lock(&self.sets)[set]))
    }
}

/// The NVML return code of a backend error, as the driver would return it.
pub(crate) fn code(err: BackendError) -> nvmlReturn_t {
    match err {
        BackendError::LibraryNotFound => nvmlReturn_enum_NVML_ERROR_LIBRARY_NOT_FOUND,
        BackendError::NotSupported { .. } => nvmlReturn_enum_NVML_ERROR_NOT_SUPPORTED,
        BackendError::NoPermission { .. } => nvmlReturn_enum_NVML_ERROR_NO_PERMISSION,
        BackendError::InvalidArgument { .. } => nvmlReturn_enum_NVML_ERROR_INVALID_ARGUMENT,
        BackendError::InsufficientResources { .. } => {
            nvmlReturn_enum_NVML_ERROR_INSUFFICIENT_RESOURCES
        }
        BackendError::InUse { .. } => nvmlReturn_enum_NVML_ERROR_IN_USE,
        BackendError::NotFound { .. } => nvmlReturn_enum_NVML_ERROR_NOT_FOUND,
        BackendError::GpuLost { .. } => nvmlReturn_enum_NVML_ERROR_GPU_IS_LOST,
        BackendError::Driver { .. } => nvmlReturn_enum_NVML_ERROR_UNKNOWN,
    }
}
