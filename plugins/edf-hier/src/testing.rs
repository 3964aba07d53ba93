//! Hand-built views for the unit tests.

use gpu_agent_plugin_api::{
    abi_stable::std_types::{ROption, RSlice, RStr, RVec},
    AppModel, Device, Task, TaskKey, TaskState, View,
};

/// An idle device of `speed` costing `cost_per_hour`, with 40 GB.
pub fn device(index: u32, speed: f64, cost_per_hour: f64) -> Device<'static> {
    Device {
        index,
        model: RStr::from_str("A100-SXM4-40GB"),
        memory_gb: 40.0,
        speed,
        cost_per_hour,
        online: true,
        running: ROption::RNone,
        queue: RSlice::from_slice(&[]),
        available_at: 0.0,
        clock_range: gpu_agent_plugin_api::ClockRange::DEFAULT_ONLY,
        default_power: gpu_agent_plugin_api::PowerModel {
            p0: 0.0,
            gamma: 0.0,
            c: 0.0,
        },
        mig: ROption::RNone,
    }
}

/// A pending one-GPU task arriving at 0, needing 1 GB.
pub fn task(key: TaskKey, workload: f64, deadline: f64, weight: f64) -> Task {
    Task {
        key,
        id: format!("t{key}").into(),
        arrival: 0.0,
        workload,
        mem_gb: 1.0,
        deadline,
        weight,
        gpus: 1,
        alt_gpus: RVec::new(),
        runtimes: RVec::new(),
        app: AppModel::builtin_default(),
        state: TaskState::Pending,
    }
}

/// The parts of a view; pending tasks are those in state `Pending`, by key.
pub struct Fixture {
    pub now: f64,
    pub tasks: Vec<Task>,
    pub devices: Vec<Device<'static>>,
    pending: Vec<TaskKey>,
}

impl Fixture {
    /// No tasks, no devices, at `now`.
    pub fn new(now: f64) -> Fixture {
        Fixture {
            now,
            tasks: Vec::new(),
            devices: Vec::new(),
            pending: Vec::new(),
        }
    }

    /// The view of it.
    pub fn view(&mut self) -> View<'_> {
        self.pending = self
            .tasks
            .iter()
            .filter(|t| t.state == TaskState::Pending)
            .map(|t| t.key)
            .collect();
        View {
            now: self.now,
            held: RSlice::from_slice(&self.tasks),
            pending: RSlice::from_slice(&self.pending),
            devices: RSlice::from_slice(&self.devices),
        }
    }
}

/// The configuration `devices` with its run time and usage cost.
pub fn config(devices: &[u32], runtime: f64, cost: f64) -> crate::config::Config {
    crate::config::Config {
        devices: devices.to_vec(),
        runtime,
        cost,
    }
}
