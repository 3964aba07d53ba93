//! Behaviour tests written against [`GpuBackend`].
//!
//! [`read_only`] runs on the mock in CI and on a real GPU through the NVML
//! backend (`cargo test -p gpu-agent-backend --lib -- --ignored nvml --nocapture`);
//! it never changes anything. The other modules change state, so they run on
//! the mock only: MIG rules on every catalogue model, clocks and power limits,
//! energy against the power model, and injected faults.

mod controls;
mod energy_property;
mod faults;
mod mig_rules;
mod read_only;

use std::sync::Arc;

use gpu_agent_plugin_api::{abi_stable::std_types::ROption, AppModel, PowerModel};

use crate::mock::{MockBackend, MockProcess, VirtualClock};
use crate::{BackendError, GpuBackend};
use gpu_agent_core::catalogue::{self, GpuModel, CATALOGUE};
use gpu_agent_core::host::Host;

/// A mock of one GPU per model on a virtual clock at 0 s.
fn mock(models: impl IntoIterator<Item = &'static GpuModel>) -> (MockBackend, VirtualClock) {
    let clock = VirtualClock::new();
    let host = Host::of_models(models);
    (MockBackend::new(&host, Arc::new(clock.clone())), clock)
}

/// A mock with every catalogue model, one GPU each, in catalogue order.
fn every_model() -> (MockBackend, VirtualClock) {
    mock(CATALOGUE)
}

/// A mock with one GPU of `model`.
fn one(model: &str) -> (MockBackend, VirtualClock) {
    mock([catalogue::lookup(model).expect("a catalogue model")])
}

/// The measured `matrixMul` profile of formats.md §6.
fn matrix_mul() -> AppModel {
    AppModel {
        name: "matrixMul".into(),
        delta: 1.0,
        d: 32.14,
        t0: 5.03,
        power: ROption::RSome(PowerModel {
            p0: 218.1,
            gamma: 32.5,
            c: 31.6,
        }),
    }
}

/// A process of `app` holding 1 GiB, on the whole GPU.
fn process(pid: u32, app: AppModel) -> MockProcess {
    MockProcess {
        pid,
        used_bytes: 1 << 30,
        app,
        mig: None,
    }
}

/// The variant of an error, for comparisons that ignore the message.
fn kind(e: &BackendError) -> &'static str {
    match e {
        BackendError::LibraryNotFound => "LibraryNotFound",
        BackendError::NotSupported { .. } => "NotSupported",
        BackendError::NoPermission { .. } => "NoPermission",
        BackendError::InvalidArgument { .. } => "InvalidArgument",
        BackendError::InsufficientResources { .. } => "InsufficientResources",
        BackendError::InUse { .. } => "InUse",
        BackendError::NotFound { .. } => "NotFound",
        BackendError::GpuLost { .. } => "GpuLost",
        BackendError::Driver { .. } => "Driver",
    }
}

/// The error kind of `r`, or "ok".
fn outcome<T>(r: &Result<T, BackendError>) -> &'static str {
    r.as_ref().err().map_or("ok", kind)
}

/// Asserts the backend works as a trait object (the daemon holds one).
fn as_dyn(b: &MockBackend) -> &dyn GpuBackend {
    b
}
