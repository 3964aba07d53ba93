//! gpu-agent's D-Bus API (docs/dbus.md): names, errors, the wire forms of a
//! task, a device and the metrics, and the `#[proxy]` clients.
//!
//! The daemon's interfaces and `gpuctl` both use the types here, so the two
//! cannot disagree on a key or a type. `gpuctl` knows nothing else of D-Bus.
//! [`private_bus`] starts a bus of its own, for the demo and the tests.

mod adopt;
mod device;
mod metrics;
mod mig;
mod params;
pub mod private_bus;
mod strict;
mod task;

use zbus::{proxy, zvariant::OwnedValue};

pub use adopt::{AdoptSpec, ReleaseEnd};
pub use device::DeviceStatus;
pub use metrics::{metrics_from_dict, metrics_to_dict};
pub use mig::{MigInstance, MigLayout};
pub use params::{
    check_parameters, describe_parameter, given_parameters, parameters_to_dict, ParamValue,
    PolicyDescription,
};
pub use strict::{serve_strict_properties, Strict};
pub use task::{
    Dict, SubmitSpec, TaskClocks, TaskInfo, TaskStatus, TaskWait, ARG_MAX_LEN,
    CLIENT_TOKEN_MAX_LEN, CLIENT_TOKEN_RETENTION_S, COMMAND_MAX_LEN, DEFAULT_WORKLOAD,
    NAME_MAX_LEN, NO_DEADLINE_S, OUTPUT_ESCAPES, PATH_MAX_LEN, REDACTED,
};

/// The daemon's well-known bus name.
pub const BUS_NAME: &str = "org.gpuagent.Agent1";
/// The root object: the agent, and the object manager of the devices.
pub const AGENT_PATH: &str = "/org/gpuagent/Agent1";
/// The agent's interface.
pub const AGENT_INTERFACE: &str = "org.gpuagent.Agent1";
/// The interface of each device object.
pub const DEVICE_INTERFACE: &str = "org.gpuagent.Device1";
/// The most tasks one `ListTasksPage` answer holds.
pub const TASK_PAGE_MAX: u32 = 10_000;

/// The most bytes one `ReadOutput` call answers.
pub const OUTPUT_READ_MAX: u32 = 1 << 20;

/// The object path of physical GPU `index`.
pub fn device_path(index: u32) -> String {
    format!("{AGENT_PATH}/gpu/{index}")
}

/// The object path of the MIG device of GPU `gpu` whose GPU instance starts
/// at memory slice `start` (docs/mig.md §6.1: unique and stable, whatever ids the
/// driver gives).
pub fn mig_device_path(gpu: u32, start: u32) -> String {
    format!("{AGENT_PATH}/gpu/{gpu}/mig/{start}")
}

/// The errors the daemon answers with, named `org.gpuagent.Agent1.Error.<Name>`.
/// Each carries a message meant for a person.
#[derive(Debug, zbus::DBusError)]
#[zbus(prefix = "org.gpuagent.Agent1.Error")]
pub enum AgentError {
    /// A D-Bus failure that is not one of ours.
    #[zbus(error)]
    ZBus(zbus::Error),
    /// A key, type or value of the request is wrong.
    InvalidArgument(String),
    /// No device of this host could ever run the task.
    Unschedulable(String),
    /// No task has this id.
    NoSuchTask(String),
    /// The caller may not do this.
    AccessDenied(String),
    /// No loaded policy has this name, or it refused to start.
    UnknownPolicy(String),
    /// The task is already finished.
    NotCancellable(String),
    /// The daemon is stopping and accepts nothing new.
    ShuttingDown(String),
    /// The daemon could not do it (storage, executor); nothing changed.
    Failed(String),
    /// No GPU has this index.
    NoSuchDevice(String),
    /// The GPU or the agent does not support the request (MIG on a GPU that
    /// is not MIG-capable, compute-instance profiles).
    NotSupported(String),
    /// A device already runs something the agent cannot stop (a task of
    /// its own, another adopted job) or is offline.
    Busy(String),
}

/// The agent (`org.gpuagent.Agent1` on the root object).
#[proxy(
    interface = "org.gpuagent.Agent1",
    default_service = "org.gpuagent.Agent1",
    default_path = "/org/gpuagent/Agent1"
)]
pub trait Agent1 {
    /// Queues a task; returns its id once it is stored.
    fn submit(&self, spec: Dict) -> zbus::Result<String>;
    /// Cancels a queued or running task.
    fn cancel(&self, id: &str) -> zbus::Result<()>;
    /// One task's dictionary.
    fn get_task(&self, id: &str) -> zbus::Result<std::collections::HashMap<String, OwnedValue>>;
    /// Up to `limit` (1 to [`OUTPUT_READ_MAX`]) bytes of a task's output
    /// from byte `offset`; the offset to read from next; and whether the
    /// task had ended before the read (then an empty answer is the end).
    fn read_output(&self, id: &str, offset: u64, limit: u32) -> zbus::Result<(Vec<u8>, u64, bool)>;
    /// Every task in `state` (`""`: all), in submission order.
    fn list_tasks(
        &self,
        state: &str,
    ) -> zbus::Result<Vec<std::collections::HashMap<String, OwnedValue>>>;
    /// Up to `limit` (1 to [`TASK_PAGE_MAX`]) tasks in `state` (`""`: all),
    /// in submission order, from position `from` (0: the first task); and
    /// the position the next page starts at, 0 once no task is left.
    fn list_tasks_page(
        &self,
        state: &str,
        from: u64,
        limit: u32,
    ) -> zbus::Result<(Vec<std::collections::HashMap<String, OwnedValue>>, u64)>;
    /// How many tasks are in each state, every state listed; as cheap with a
    /// million ended tasks as with none (no task is read).
    fn count_tasks(&self) -> zbus::Result<std::collections::HashMap<String, u64>>;
    /// The loaded policies: (name, description).
    fn list_policies(&self) -> zbus::Result<Vec<(String, String)>>;
    /// Makes `name` the active policy; queued tasks move to it.
    fn set_policy(&self, name: &str) -> zbus::Result<()>;
    /// Makes `name` the active policy built with `params` (admins); a bad key,
    /// type or value is `InvalidArgument` naming the key, and changes nothing.
    fn set_policy_with_parameters(&self, name: &str, params: Dict) -> zbus::Result<()>;
    /// A loaded policy: `name`, `description`, `active`, and `parameters`
    /// (one dictionary each: see [`describe_parameter`]).
    fn describe_policy(&self, name: &str) -> zbus::Result<Dict>;
    /// Reads the daemon's configuration file again and re-scans its plugin
    /// directory (admins); returns the changed keys that wait for the next start.
    fn reload(&self) -> zbus::Result<Vec<String>>;
    /// formats.md §4 metrics over the finished tasks.
    fn metrics(&self) -> zbus::Result<std::collections::HashMap<String, OwnedValue>>;
    /// One GPU's MIG state (see [`MigLayout`]).
    fn get_mig_layout(&self, gpu: u32) -> zbus::Result<Dict>;
    /// The host's MIG state as a mig-parted v1 file, one configuration `label`.
    fn export_mig_config(&self, label: &str) -> zbus::Result<String>;
    /// Whether the host is as configuration `name` of the v1 file `yaml` asks
    /// (`""`: its only one); the differences.
    fn assert_mig_config(&self, yaml: &str, name: &str) -> zbus::Result<(bool, Vec<String>)>;
    /// Changes the MIG layouts to configuration `name` of the v1 file `yaml`
    /// (admins); `options`: `on_busy` s (`wait`, `refuse`), `timeout_s` d.
    /// Returns the GPUs that change; `MigChanged` follows their progress.
    fn apply_mig_config(&self, yaml: &str, name: &str, options: Dict) -> zbus::Result<Vec<u32>>;
    /// Abandons GPU `gpu`'s MIG change while it drains (admins).
    fn cancel_mig_change(&self, gpu: u32) -> zbus::Result<()>;
    /// A GPU's MIG change moved on (`draining`, `applying`, `stable`,
    /// `reset-required`, `failed`).
    #[zbus(signal)]
    fn mig_changed(&self, gpu: u32, state: &str, message: &str) -> zbus::Result<()>;

    /// Brings GPU `gpu` back online (after probing it), or drains it.
    fn set_device_online(&self, gpu: u32, online: bool) -> zbus::Result<()>;
    /// Adopts work the agent did not place (see [`AdoptSpec`]); returns the
    /// task id it shows under (admins).
    fn adopt(&self, spec: Dict) -> zbus::Result<String>;
    /// Ends an adopted task: its clocks are restored and its energy recorded (admins).
    fn release(&self, id: &str) -> zbus::Result<()>;
    /// `Release` telling how the job ended (`completed`, `cancelled`,
    /// `timeout`, `failed`: see [`ReleaseEnd`]); an unknown end is
    /// `InvalidArgument` naming it (admins).
    fn release_with_end(&self, id: &str, end: &str) -> zbus::Result<()>;
    /// A task changed state.
    #[zbus(signal)]
    fn task_changed(&self, id: &str, state: &str) -> zbus::Result<()>;
    /// A policy failed; the built-in FIFO order runs from now on.
    #[zbus(signal)]
    fn policy_fault(&self, policy: &str, reason: &str) -> zbus::Result<()>;
    /// The stored policy fault (`""`: none), until an admin's `SetPolicy`.
    #[zbus(property)]
    fn last_policy_fault(&self) -> zbus::Result<String>;
    /// The active policy.
    #[zbus(property)]
    fn policy(&self) -> zbus::Result<String>;
    /// The active policy's parameters, each with the value in use.
    #[zbus(property)]
    fn policy_parameters(&self) -> zbus::Result<Dict>;
    /// The daemon's version.
    #[zbus(property)]
    fn version(&self) -> zbus::Result<String>;
    /// The GPU backend (`nvml` or `mock:<host file>`).
    #[zbus(property)]
    fn backend(&self) -> zbus::Result<String>;
}

/// One device (`org.gpuagent.Device1` at [`device_path`], or
/// [`mig_device_path`] for a MIG instance).
#[proxy(
    interface = "org.gpuagent.Device1",
    default_service = "org.gpuagent.Agent1"
)]
pub trait Device1 {
    /// Device index.
    #[zbus(property)]
    fn index(&self) -> zbus::Result<u32>;
    /// GPU UUID.
    #[zbus(property)]
    fn uuid(&self) -> zbus::Result<String>;
    /// Product name.
    #[zbus(property)]
    fn name(&self) -> zbus::Result<String>;
    /// Memory, GB.
    #[zbus(property)]
    fn memory_gb(&self) -> zbus::Result<f64>;
    /// Work units per second at default clocks.
    #[zbus(property)]
    fn speed(&self) -> zbus::Result<f64>;
    /// Current core clock, MHz.
    #[zbus(property)]
    fn core_clock_mhz(&self) -> zbus::Result<u32>;
    /// Current memory clock, MHz.
    #[zbus(property)]
    fn mem_clock_mhz(&self) -> zbus::Result<u32>;
    /// Power draw, W.
    #[zbus(property)]
    fn power_w(&self) -> zbus::Result<f64>;
    /// Energy counter, J.
    #[zbus(property)]
    fn energy_j(&self) -> zbus::Result<f64>;
    /// GPU utilisation, 0..1.
    #[zbus(property)]
    fn utilization(&self) -> zbus::Result<f64>;
    /// Whether MIG mode is on.
    #[zbus(property)]
    fn mig_enabled(&self) -> zbus::Result<bool>;
    /// The id of the task running on it, or `""`.
    #[zbus(property)]
    fn current_task(&self) -> zbus::Result<String>;

    /// Whether it takes work.
    #[zbus(property)]
    fn online(&self) -> zbus::Result<bool>;

    /// `ok`, `drained`, `lost`, `xid N: what`, `mig`, `retired` or `no-uuid`.
    #[zbus(property)]
    fn health(&self) -> zbus::Result<String>;

    /// Whether it can take work at all (not a GPU split into MIG instances).
    #[zbus(property)]
    fn schedulable(&self) -> zbus::Result<bool>;
    /// A MIG instance's GPU; a GPU's own index.
    #[zbus(property)]
    fn parent(&self) -> zbus::Result<u32>;
    /// A MIG instance's profile, `""` for a GPU.
    #[zbus(property)]
    fn mig_profile(&self) -> zbus::Result<String>;
    /// A MIG instance's (first memory slice, slices); `(0, 0)` for a GPU.
    #[zbus(property)]
    fn mig_placement(&self) -> zbus::Result<(u32, u32)>;
}

/// The tasks a client asks `ListTasksPage` for at a time.
pub const TASK_PAGE: u32 = 1_000;

impl Agent1Proxy<'_> {
    /// Every task in `state` (`""`: all), in submission order, asked for
    /// [`TASK_PAGE`] at a time, so that no one answer grows with the
    /// daemon's history.
    pub async fn all_tasks(
        &self,
        state: &str,
    ) -> zbus::Result<Vec<std::collections::HashMap<String, OwnedValue>>> {
        let mut tasks = Vec::new();
        let mut from = 0;
        loop {
            let (page, next) = self.list_tasks_page(state, from, TASK_PAGE).await?;
            tasks.extend(page);
            if next == 0 {
                return Ok(tasks);
            }
            from = next;
        }
    }
}

/// The mock backend's fault controls (`org.gpuagent.Mock1`, served only by a
/// daemon on mock GPUs).
#[proxy(
    interface = "org.gpuagent.Mock1",
    default_service = "org.gpuagent.Agent1",
    default_path = "/org/gpuagent/Agent1"
)]
pub trait Mock1 {
    /// Injects `fault` (`lost`, or `xid N`) on mock GPU `gpu`.
    fn inject_fault(&self, gpu: u32, fault: &str) -> zbus::Result<()>;

    /// Puts lost mock GPU `gpu` back on the bus.
    fn repair(&self, gpu: u32) -> zbus::Result<()>;
}

/// `name: message` of a D-Bus error reply, as the daemon sent it; other
/// failures as zbus words them.
pub fn describe_error(error: &zbus::Error) -> String {
    match error {
        zbus::Error::MethodError(name, Some(message), _) => format!("{name}: {message}"),
        zbus::Error::MethodError(name, None, _) => name.to_string(),
        zbus::Error::FDO(e) => e.to_string(),
        other => other.to_string(),
    }
}

#[cfg(test)]
mod tests;
