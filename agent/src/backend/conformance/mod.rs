//! Behaviour tests written against [`GpuBackend`].
//!
//! [`read_only`] runs on the mock in CI and on a real GPU through the NVML
//! backend (`cargo test -p gpu-agent --lib -- --ignored nvml --nocapture`);
//! it never changes anything. The other modules change state, so they run on
//! the mock only: MIG rules on every catalogue model, clocks and power limits,
//! energy against the power model, and injected faults.

mod controls;
mod energy_property;
mod faults;
mod mig_rules;
mod read_only;

use std::path::Path;
use std::sync::Arc;

use gpu_agent_plugin_api::{abi_stable::std_types::ROption, AppModel, PowerModel};

use super::mock::{MockBackend, MockProcess, VirtualClock};
use super::{BackendError, GpuBackend};
use crate::model::host::Host;

/// Every catalogue model, one GPU each, in catalogue order.
const EVERY_MODEL: &str = r#"
[[gpu]]
model = "A100-SXM4-40GB"
speed = 1.0
[[gpu]]
model = "A100-SXM4-80GB"
speed = 1.0
[[gpu]]
model = "H100-SXM5-80GB"
speed = 1.0
[[gpu]]
model = "H100-PCIe-80GB"
speed = 1.0
[[gpu]]
model = "V100-SXM2-32GB"
speed = 1.0
[[gpu]]
model = "L4"
speed = 1.0
[[gpu]]
model = "T4"
speed = 1.0
"#;

/// A mock of `host` (host-file TOML) on a virtual clock at 0 s.
fn mock(host: &str) -> (MockBackend, VirtualClock) {
    let host = Host::parse(Path::new("test-host.toml"), host).expect("test host parses");
    let clock = VirtualClock::new();
    (MockBackend::new(&host, Arc::new(clock.clone())), clock)
}

/// A mock with one GPU of `model`.
fn one(model: &str) -> (MockBackend, VirtualClock) {
    mock(&format!("[[gpu]]\nmodel = \"{model}\"\nspeed = 1.0\n"))
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
