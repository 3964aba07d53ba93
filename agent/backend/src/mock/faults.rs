//! Faults the mock injects on request, and the log of calls it received.

use std::collections::VecDeque;
use std::time::Duration;

use crate::BackendError;

/// Names of the `GpuBackend` methods, which faults and the call log use.
pub const METHODS: &[&str] = &[
    "device_count",
    "device_info",
    "memory",
    "clocks",
    "supported_clocks",
    "lock_core_clocks",
    "reset_core_clocks",
    "lock_memory_clocks",
    "reset_memory_clocks",
    "applications_clocks",
    "set_applications_clocks",
    "reset_applications_clocks",
    "power_usage_mw",
    "power_limits",
    "set_power_limit",
    "energy_mj",
    "utilization",
    "temperature_c",
    "processes",
    "mig_mode",
    "set_mig_mode",
    "reset_gpu",
    "gpu_instance_profiles",
    "create_gpu_instance",
    "destroy_gpu_instance",
    "gpu_instances",
    "compute_instance_profiles",
    "create_compute_instance",
    "destroy_compute_instance",
    "compute_instances",
    "mig_devices",
    "wait_event",
];

/// A fault to inject on one GPU.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Fault {
    /// The GPU falls off the bus: every later call on it fails with `GpuLost`,
    /// and a GPU-lost event is queued.
    GpuLost,
    /// The driver reports a critical XID error with this code.
    Xid(u64),
    /// Calls to this method fail with `NotSupported` (readings become `None`).
    NotSupported(&'static str),
    /// Calls to this method fail with `NoPermission`.
    NoPermission(&'static str),
    /// Calls to this method take this long (real time) before they run.
    Slow(&'static str, Duration),
}

/// Faults in force, per GPU.
#[derive(Debug, Default)]
pub(super) struct Faults {
    standing: Vec<(u32, Fault)>,
}

impl Faults {
    /// Adds a standing fault (one-shot faults are handled by the caller).
    pub fn add(&mut self, gpu: u32, fault: Fault) {
        if let Fault::NotSupported(m) | Fault::NoPermission(m) | Fault::Slow(m, _) = &fault {
            assert!(
                METHODS.contains(m),
                "mock fault names {m:?}, which is not a GpuBackend method"
            );
        }
        self.standing.push((gpu, fault));
    }

    /// Removes every standing fault.
    pub fn clear(&mut self) {
        self.standing.clear();
    }

    /// How long a call to `method` on `gpu` must take.
    pub fn delay(&self, gpu: Option<u32>, method: &str) -> Option<Duration> {
        self.standing.iter().find_map(|(g, f)| match f {
            Fault::Slow(m, d) if Some(*g) == gpu && *m == method => Some(*d),
            _ => None,
        })
    }

    /// The error a call to `method` on `gpu` must fail with, if any.
    pub fn refusal(
        &self,
        gpu: u32,
        method: &'static str,
        call: &'static str,
    ) -> Option<BackendError> {
        let on = crate::On(Some(gpu));
        self.standing.iter().find_map(|(g, f)| match f {
            Fault::NotSupported(m) if *g == gpu && *m == method => {
                Some(BackendError::NotSupported { on, call })
            }
            Fault::NoPermission(m) if *g == gpu && *m == method => {
                Some(BackendError::NoPermission { on, call })
            }
            _ => None,
        })
    }
}

/// One call the mock received.
#[derive(Debug, Clone, PartialEq)]
pub struct Call {
    /// Mock time when it ran (s).
    pub at: f64,
    /// The GPU it addressed, if any.
    pub gpu: Option<u32>,
    /// The `GpuBackend` method.
    pub method: &'static str,
    /// Its arguments past the GPU index, as written in Rust (`""` when none).
    pub args: String,
    /// How it ended.
    pub outcome: Result<(), BackendError>,
}

/// How many calls the mock's log keeps: the most recent ones.
pub const CALL_LOG_LEN: usize = 4096;

/// The log of calls, bounded to the last [`CALL_LOG_LEN`].
#[derive(Debug, Default)]
pub(super) struct CallLog(VecDeque<Call>);

impl CallLog {
    /// Appends `call`, dropping the oldest once the log is full.
    pub(super) fn push(&mut self, call: Call) {
        if self.0.len() == CALL_LOG_LEN {
            self.0.pop_front();
        }
        self.0.push_back(call);
    }

    /// The calls kept, oldest first.
    pub(super) fn to_vec(&self) -> Vec<Call> {
        self.0.iter().cloned().collect()
    }
}
