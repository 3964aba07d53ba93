//! Errors of GPU backends, named by device and call.

use std::fmt;

/// Which GPU a call addressed, if any (`device_count` and event waits address none).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct On(pub Option<u32>);

impl fmt::Display for On {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0 {
            Some(gpu) => write!(f, "GPU {gpu}"),
            None => f.write_str("host"),
        }
    }
}

/// What went wrong in a backend call. Each variant names the device and the
/// driver call (the NVML function, which the mock names the same way).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BackendError {
    /// No NVML library on this machine.
    #[error("NVML library not found: install the NVIDIA driver, or run with --mock HOST.toml")]
    LibraryNotFound,
    /// The device has no such feature (or not in its current mode).
    #[error("{on}: {call}: not supported")]
    NotSupported { on: On, call: &'static str },
    /// The caller may not do this (most writes need root).
    #[error("{on}: {call}: permission denied")]
    NoPermission { on: On, call: &'static str },
    /// An argument the driver refuses.
    #[error("{on}: {call}: invalid argument: {reason}")]
    InvalidArgument {
        on: On,
        call: &'static str,
        reason: String,
    },
    /// Not enough free resources (MIG slices, instance counts, memory).
    #[error("{on}: {call}: insufficient resources: {reason}")]
    InsufficientResources {
        on: On,
        call: &'static str,
        reason: String,
    },
    /// The device or instance is busy (processes running, instances present).
    #[error("{on}: {call}: in use: {reason}")]
    InUse {
        on: On,
        call: &'static str,
        reason: String,
    },
    /// No such device, instance or object.
    #[error("{on}: {call}: not found: {what}")]
    NotFound {
        on: On,
        call: &'static str,
        what: String,
    },
    /// The GPU fell off the bus or is otherwise inaccessible.
    #[error("{on}: {call}: GPU is lost")]
    GpuLost { on: On, call: &'static str },
    /// Any other driver error, with the driver's words.
    #[error("{on}: {call}: {message}")]
    Driver {
        on: On,
        call: &'static str,
        message: String,
    },
}

impl BackendError {
    /// `NotSupported` on `gpu`.
    pub fn not_supported(gpu: u32, call: &'static str) -> BackendError {
        BackendError::NotSupported {
            on: On(Some(gpu)),
            call,
        }
    }

    /// `InvalidArgument` on `gpu`.
    pub fn invalid(gpu: u32, call: &'static str, reason: impl Into<String>) -> BackendError {
        BackendError::InvalidArgument {
            on: On(Some(gpu)),
            call,
            reason: reason.into(),
        }
    }

    /// `InsufficientResources` on `gpu`.
    pub fn insufficient(gpu: u32, call: &'static str, reason: impl Into<String>) -> BackendError {
        BackendError::InsufficientResources {
            on: On(Some(gpu)),
            call,
            reason: reason.into(),
        }
    }

    /// `InUse` on `gpu`.
    pub fn in_use(gpu: u32, call: &'static str, reason: impl Into<String>) -> BackendError {
        BackendError::InUse {
            on: On(Some(gpu)),
            call,
            reason: reason.into(),
        }
    }

    /// `NotFound` on `gpu`.
    pub fn not_found(gpu: u32, call: &'static str, what: impl Into<String>) -> BackendError {
        BackendError::NotFound {
            on: On(Some(gpu)),
            call,
            what: what.into(),
        }
    }

    /// Whether this is `NotSupported` (readings turn it into `None`).
    pub fn is_not_supported(&self) -> bool {
        matches!(self, BackendError::NotSupported { .. })
    }
}

/// Result of a backend call.
pub type Result<T> = std::result::Result<T, BackendError>;

/// A reading: `Ok(None)` where the device does not support it.
pub fn optional<T>(reading: Result<T>) -> Result<Option<T>> {
    match reading {
        Ok(value) => Ok(Some(value)),
        Err(err) if err.is_not_supported() => Ok(None),
        Err(err) => Err(err),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_name_the_device_and_the_call() {
        let e = BackendError::insufficient(
            1,
            "nvmlDeviceCreateGpuInstanceWithPlacement",
            "memory slices 0..4 are taken",
        );
        assert_eq!(
            e.to_string(),
            "GPU 1: nvmlDeviceCreateGpuInstanceWithPlacement: insufficient resources: \
             memory slices 0..4 are taken"
        );
        let e = BackendError::NotSupported {
            on: On(None),
            call: "nvmlEventSetWait_v2",
        };
        assert_eq!(e.to_string(), "host: nvmlEventSetWait_v2: not supported");
    }
}
