//! GPU health on the bus side: the thread that hands the backend's device
//! events to the engine, and the mock's fault controls
//! (`org.gpuagent.Mock1`, served only by a daemon on mock GPUs).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc};
use std::time::Duration;

use zbus::{interface, message::Header, Connection};

use super::auth::Auth;
use super::engine::Request;
use gpu_agent_backend::mock::{Fault, MockBackend, METHODS};
use gpu_agent_backend::GpuBackend;
use gpu_agent_dbus::AgentError;

/// How long one wait for an event lasts, so that a stop is seen.
const WAIT: Duration = Duration::from_millis(500);

/// Hands every device event of `backend` to `engine` until `stop` is set or
/// the engine is gone. A backend that cannot wait for events is reported
/// once and asked again after a pause.
pub fn watch(
    backend: Arc<dyn GpuBackend>,
    engine: mpsc::Sender<Request>,
    stop: Arc<AtomicBool>,
) -> std::io::Result<std::thread::JoinHandle<()>> {
    std::thread::Builder::new()
        .name("device-events".into())
        .spawn(move || {
            let mut failing = false;
            while !stop.load(Ordering::Relaxed) {
                match backend.wait_event(WAIT) {
                    Ok(Some(event)) => {
                        failing = false;
                        if engine.send(Request::DeviceEvent { event }).is_err() {
                            return;
                        }
                    }
                    Ok(None) => failing = false,
                    Err(e) => {
                        if !failing {
                            log::warn!("cannot wait for GPU events (XID errors, lost GPUs): {e}; trying again every 10 s");
                            failing = true;
                        }
                        for _ in 0..20 {
                            if stop.load(Ordering::Relaxed) {
                                return;
                            }
                            std::thread::sleep(WAIT);
                        }
                    }
                }
            }
        })
}

/// The longest `slow METHOD SECONDS` (an hour).
const MAX_SLOW_S: f64 = 3600.0;

/// A fault `InjectFault` takes: `lost`, `xid N`, `fail METHOD` (calls to
/// the backend method fail as not supported), or `slow METHOD SECONDS`
/// (they take that long, as a driver call or a GPU reset can).
fn parse_fault(text: &str) -> Result<Fault, AgentError> {
    let words: Vec<&str> = text.split_whitespace().collect();
    let method = |name: &str| {
        METHODS
            .iter()
            .find(|m| **m == name)
            .copied()
            .ok_or_else(|| {
                AgentError::InvalidArgument(format!(
                    "fault {text:?}: {name:?} is not a backend method ({})",
                    METHODS.join(", ")
                ))
            })
    };
    match words.as_slice() {
        ["lost"] => Ok(Fault::GpuLost),
        ["fail", name] => method(name).map(Fault::NotSupported),
        ["slow", name, seconds] => {
            let method = method(name)?;
            let seconds = seconds
                .parse::<f64>()
                .ok()
                .filter(|s| *s > 0.0 && *s <= MAX_SLOW_S)
                .ok_or_else(|| {
                    AgentError::InvalidArgument(format!(
                        "fault {text:?}: slow takes seconds, a number > 0 and <= {MAX_SLOW_S}"
                    ))
                })?;
            Ok(Fault::Slow(method, std::time::Duration::from_secs_f64(seconds)))
        }
        ["xid", code] => code.parse().map(Fault::Xid).map_err(|_| {
            AgentError::InvalidArgument(format!(
                "fault {text:?}: xid takes a code, a whole number >= 0"
            ))
        }),
        _ => Err(AgentError::InvalidArgument(format!(
            "fault {text:?}: expected \"lost\", \"xid N\", \"fail METHOD\" or \"slow METHOD SECONDS\""
        ))),
    }
}

/// `org.gpuagent.Mock1`: faults on the mock GPUs of a running daemon, for
/// tests and demonstrations. Admins only; a daemon on NVML has no such object.
pub struct MockControl {
    mock: Arc<MockBackend>,
    gpus: u32,
    auth: Auth,
}

impl MockControl {
    /// The controls of `mock`, which has `gpus` GPUs.
    pub fn new(mock: Arc<MockBackend>, gpus: u32, auth: Auth) -> MockControl {
        MockControl { mock, gpus, auth }
    }

    async fn admit(
        &self,
        gpu: u32,
        conn: &Connection,
        header: &Header<'_>,
    ) -> Result<(), AgentError> {
        self.auth
            .roles(conn, header)
            .await?
            .require_admin("inject faults on mock GPUs")?;
        if gpu >= self.gpus {
            return Err(AgentError::NoSuchDevice(format!(
                "no GPU {gpu}; this host has {}",
                self.gpus
            )));
        }
        Ok(())
    }
}

#[interface(name = "org.gpuagent.Mock1")]
impl MockControl {
    /// Injects `fault` on mock GPU `gpu`: `lost` (it falls off the bus:
    /// every call on it fails until `Repair`) or `xid N` (the driver reports
    /// XID N), either reported as a device event, as NVML would; `fail
    /// METHOD` (calls of that backend method on it fail as not supported,
    /// for as long as the daemon runs); or `slow METHOD SECONDS` (they take
    /// that long, wall time, before they run).
    async fn inject_fault(
        &self,
        gpu: u32,
        fault: String,
        #[zbus(connection)] conn: &Connection,
        #[zbus(header)] header: Header<'_>,
    ) -> Result<(), AgentError> {
        self.admit(gpu, conn, &header).await?;
        let fault = parse_fault(&fault)?;
        log::warn!("mock: injecting {fault:?} on GPU {gpu}");
        self.mock.inject(gpu, fault);
        Ok(())
    }

    /// Puts lost mock GPU `gpu` back on the bus, as a reset would; the
    /// daemon keeps it offline until an admin brings it back
    /// (`SetDeviceOnline`).
    async fn repair(
        &self,
        gpu: u32,
        #[zbus(connection)] conn: &Connection,
        #[zbus(header)] header: Header<'_>,
    ) -> Result<(), AgentError> {
        self.admit(gpu, conn, &header).await?;
        log::info!("mock: GPU {gpu} repaired");
        self.mock.repair(gpu);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn faults_are_read_strictly() {
        assert_eq!(parse_fault("lost").unwrap(), Fault::GpuLost);
        assert_eq!(parse_fault(" xid  79 ").unwrap(), Fault::Xid(79));
        assert_eq!(
            parse_fault("xid -1").unwrap_err().to_string(),
            "org.gpuagent.Agent1.Error.InvalidArgument: fault \"xid -1\": xid takes a code, a whole number >= 0"
        );
        assert_eq!(
            parse_fault("gone").unwrap_err().to_string(),
            "org.gpuagent.Agent1.Error.InvalidArgument: fault \"gone\": expected \"lost\", \"xid N\", \"fail METHOD\" or \"slow METHOD SECONDS\""
        );
        assert_eq!(
            parse_fault("fail mig_devices").unwrap(),
            Fault::NotSupported("mig_devices")
        );
        assert_eq!(
            parse_fault("slow reset_gpu 2.5").unwrap(),
            Fault::Slow("reset_gpu", std::time::Duration::from_millis(2500))
        );
        for seconds in ["0", "-1", "3601", "inf", "NaN", "soon"] {
            assert_eq!(
                parse_fault(&format!("slow reset_gpu {seconds}")).unwrap_err().to_string(),
                format!("org.gpuagent.Agent1.Error.InvalidArgument: fault \"slow reset_gpu {seconds}\": slow takes seconds, a number > 0 and <= 3600")
            );
        }
        assert!(parse_fault("fail nvmlInit")
            .unwrap_err()
            .to_string()
            .starts_with("org.gpuagent.Agent1.Error.InvalidArgument: fault \"fail nvmlInit\": \"nvmlInit\" is not a backend method (device_count, "));
    }
}
