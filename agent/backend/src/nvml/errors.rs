//! NVML errors as `BackendError`s naming the GPU and the NVML function.

use nvml_wrapper::error::NvmlError;
use nvml_wrapper_sys::bindings::{
    nvmlReturn_enum_NVML_ERROR_FREQ_NOT_SUPPORTED,
    nvmlReturn_enum_NVML_ERROR_INSUFFICIENT_RESOURCES,
};

#[cfg(test)]
use crate::optional;
use crate::{BackendError, On, Result};

/// `NVML_ERROR_INSUFFICIENT_RESOURCES`, which nvml-wrapper 0.13 has no variant for.
const INSUFFICIENT_RESOURCES: u32 = nvmlReturn_enum_NVML_ERROR_INSUFFICIENT_RESOURCES;
/// `NVML_ERROR_FREQ_NOT_SUPPORTED`, likewise.
const FREQ_NOT_SUPPORTED: u32 = nvmlReturn_enum_NVML_ERROR_FREQ_NOT_SUPPORTED;

/// `err`, returned by the NVML function `call` on `on`, as a `BackendError`.
pub(super) fn map(err: NvmlError, on: On, call: &'static str) -> BackendError {
    match err {
        NvmlError::NotSupported => BackendError::NotSupported { on, call },
        NvmlError::NoPermission => BackendError::NoPermission { on, call },
        NvmlError::InvalidArg => BackendError::InvalidArgument {
            on,
            call,
            reason: err.to_string(),
        },
        NvmlError::UnexpectedVariant(INSUFFICIENT_RESOURCES) => {
            BackendError::InsufficientResources {
                on,
                call,
                reason: "NVML_ERROR_INSUFFICIENT_RESOURCES".into(),
            }
        }
        NvmlError::UnexpectedVariant(FREQ_NOT_SUPPORTED) => BackendError::InvalidArgument {
            on,
            call,
            reason: "clock frequency not supported (NVML_ERROR_FREQ_NOT_SUPPORTED)".into(),
        },
        NvmlError::InUse => BackendError::InUse {
            on,
            call,
            reason: err.to_string(),
        },
        NvmlError::NotFound => BackendError::NotFound {
            on,
            call,
            what: err.to_string(),
        },
        NvmlError::GpuLost => BackendError::GpuLost { on, call },
        other => BackendError::Driver {
            on,
            call,
            message: other.to_string(),
        },
    }
}

/// Maps an error of `call` on GPU `gpu`.
pub(super) fn on_gpu(gpu: u32, call: &'static str) -> impl FnOnce(NvmlError) -> BackendError {
    move |err| map(err, On(Some(gpu)), call)
}

/// Maps an error of `call`, which addresses no GPU.
pub(super) fn on_host(call: &'static str) -> impl FnOnce(NvmlError) -> BackendError {
    move |err| map(err, On(None), call)
}

/// The raw NVML function `call` (a symbol of the loaded library), or an error
/// naming it where the library lacks it.
pub(super) fn symbol<'a, T, E: ToString>(
    gpu: u32,
    call: &'static str,
    symbol: &'a std::result::Result<T, E>,
) -> Result<&'a T> {
    symbol
        .as_ref()
        .map_err(|err| on_gpu(gpu, call)(NvmlError::FailedToLoadSymbol(err.to_string())))
}

/// An error of loading and initialising NVML: `LibraryNotFound` where there is
/// no usable library (none at the path, not NVML, or no driver behind it).
pub(super) fn load(err: NvmlError) -> BackendError {
    match err {
        NvmlError::LibloadingError(_)
        | NvmlError::FailedToLoadSymbol(_)
        | NvmlError::LibraryNotFound
        | NvmlError::DriverNotLoaded => BackendError::LibraryNotFound,
        other => map(other, On(None), "nvmlInit_v2"),
    }
}

/// `err` with a `NotFound` saying what was missing.
pub(super) fn missing(err: BackendError, what: impl FnOnce() -> String) -> BackendError {
    match err {
        BackendError::NotFound { on, call, .. } => BackendError::NotFound {
            on,
            call,
            what: what(),
        },
        other => other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const CALL: &str = "nvmlDeviceSetGpuLockedClocks";
    const GPU: On = On(Some(3));

    fn mapped(err: NvmlError) -> BackendError {
        on_gpu(3, CALL)(err)
    }

    #[test]
    fn each_nvml_error_maps_to_its_backend_error() {
        assert_eq!(
            mapped(NvmlError::NotSupported),
            BackendError::NotSupported {
                on: GPU,
                call: CALL
            }
        );
        assert_eq!(
            mapped(NvmlError::NoPermission),
            BackendError::NoPermission {
                on: GPU,
                call: CALL
            }
        );
        assert_eq!(
            mapped(NvmlError::InvalidArg),
            BackendError::InvalidArgument {
                on: GPU,
                call: CALL,
                reason: "a supplied argument was invalid".into()
            }
        );
        assert_eq!(
            mapped(NvmlError::UnexpectedVariant(23)),
            BackendError::InsufficientResources {
                on: GPU,
                call: CALL,
                reason: "NVML_ERROR_INSUFFICIENT_RESOURCES".into()
            }
        );
        assert_eq!(
            mapped(NvmlError::UnexpectedVariant(24)),
            BackendError::InvalidArgument {
                on: GPU,
                call: CALL,
                reason: "clock frequency not supported (NVML_ERROR_FREQ_NOT_SUPPORTED)".into()
            }
        );
        assert_eq!(
            mapped(NvmlError::InUse),
            BackendError::InUse {
                on: GPU,
                call: CALL,
                reason: "operation cannot be performed because the GPU is currently in use".into()
            }
        );
        assert_eq!(
            mapped(NvmlError::NotFound),
            BackendError::NotFound {
                on: GPU,
                call: CALL,
                what: "a query to find an object was unsuccessful".into()
            }
        );
        assert_eq!(
            mapped(NvmlError::GpuLost),
            BackendError::GpuLost {
                on: GPU,
                call: CALL
            }
        );
    }

    #[test]
    fn other_errors_keep_the_wrappers_words() {
        assert_eq!(
            mapped(NvmlError::Unknown),
            BackendError::Driver {
                on: GPU,
                call: CALL,
                message: "an internal driver error occurred".into()
            }
        );
        assert_eq!(
            mapped(NvmlError::UnexpectedVariant(27)),
            BackendError::Driver {
                on: GPU,
                call: CALL,
                message: "unexpected enum variant value: 27".into()
            }
        );
        assert_eq!(
            mapped(NvmlError::FailedToLoadSymbol("gone".into())),
            BackendError::Driver {
                on: GPU,
                call: CALL,
                message: "function symbol failed to load: gone".into()
            }
        );
        assert_eq!(
            on_host("nvmlEventSetWait_v2")(NvmlError::Timeout),
            BackendError::Driver {
                on: On(None),
                call: "nvmlEventSetWait_v2",
                message: "the provided timeout was reached".into()
            }
        );
    }

    #[test]
    fn a_missing_library_or_driver_is_library_not_found() {
        for err in [
            NvmlError::LibraryNotFound,
            NvmlError::DriverNotLoaded,
            NvmlError::FailedToLoadSymbol("nvmlInit_v2".into()),
        ] {
            assert_eq!(load(err), BackendError::LibraryNotFound);
        }
        assert_eq!(
            load(NvmlError::NoPermission),
            BackendError::NoPermission {
                on: On(None),
                call: "nvmlInit_v2"
            }
        );
    }

    #[test]
    fn missing_names_what_was_not_found() {
        let err = missing(mapped(NvmlError::NotFound), || "GPU instance 5".into());
        assert_eq!(err, BackendError::not_found(3, CALL, "GPU instance 5"));
        let err = missing(mapped(NvmlError::GpuLost), || unreachable!());
        assert_eq!(
            err,
            BackendError::GpuLost {
                on: GPU,
                call: CALL
            }
        );
    }

    #[test]
    fn readings_turn_not_supported_into_none() {
        assert_eq!(optional(Ok(5)), Ok(Some(5)));
        assert_eq!(
            optional::<u32>(Err(mapped(NvmlError::NotSupported))),
            Ok(None)
        );
        assert_eq!(
            optional::<u32>(Err(mapped(NvmlError::GpuLost))),
            Err(BackendError::GpuLost {
                on: GPU,
                call: CALL
            })
        );
    }
}
