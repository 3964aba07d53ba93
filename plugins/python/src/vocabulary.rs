//! The view and the events as `gpu_agent_policy` objects, and the decisions
//! read back from them.

use gpu_agent_plugin_api::{
    abi_stable::std_types::{ROption, RVec},
    ClockRange, Clocks, Decision, Device, DvfsClass, Event, PowerModel, Task, TaskKey, TaskState,
    View,
};
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList, PyString, PyTuple};

/// `gpu_agent_policy`'s classes and task states, fetched once per policy.
pub struct Classes {
    clocks: Py<PyAny>,
    clock_range: Py<PyAny>,
    power_model: Py<PyAny>,
    app_model: Py<PyAny>,
    task: Py<PyAny>,
    mig_instance: Py<PyAny>,
    device: Py<PyAny>,
    view: Py<PyAny>,
    activated: Py<PyAny>,
    arrived: Py<PyAny>,
    finished: Py<PyAny>,
    timer: Py<PyAny>,
    device_changed: Py<PyAny>,
    assign: Py<PyAny>,
    start: Py<PyAny>,
    reject: Py<PyAny>,
    wake_at: Py<PyAny>,
    mig_layout: Py<PyAny>,
    dvfs: Py<PyAny>,
    /// `TaskState`'s strings, by [`state_index`].
    states: [Py<PyString>; 5],
}

/// Where a state's name is in [`Classes::states`].
fn state_index(state: TaskState) -> usize {
    match state {
        TaskState::Pending => 0,
        TaskState::Queued => 1,
        TaskState::Running => 2,
        TaskState::Done => 3,
        TaskState::Rejected => 4,
    }
}

impl Classes {
    /// Fetches them from `gpu_agent_policy` (in `sys.modules`).
    pub fn new(py: Python<'_>) -> PyResult<Classes> {
        let module = py.import("gpu_agent_policy")?;
        let class = |name: &str| module.getattr(name).map(Bound::unbind);
        let state = |name: &str| PyString::intern(py, name).unbind();
        Ok(Classes {
            clocks: class("Clocks")?,
            clock_range: class("ClockRange")?,
            power_model: class("PowerModel")?,
            app_model: class("AppModel")?,
            task: class("Task")?,
            mig_instance: class("MigInstance")?,
            device: class("Device")?,
            view: class("View")?,
            activated: class("Activated")?,
            arrived: class("Arrived")?,
            finished: class("Finished")?,
            timer: class("Timer")?,
            device_changed: class("DeviceChanged")?,
            assign: class("Assign")?,
            start: class("Start")?,
            reject: class("Reject")?,
            wake_at: class("WakeAt")?,
            mig_layout: class("MigLayout")?,
            dvfs: class("Dvfs")?,
            states: [
                state("pending"),
                state("queued"),
                state("running"),
                state("done"),
                state("rejected"),
            ],
        })
    }

    /// `event` as an object; `None` for a kind of event newer than this plugin.
    pub fn event<'py>(
        &self,
        py: Python<'py>,
        event: &Event,
    ) -> PyResult<Option<Bound<'py, PyAny>>> {
        Ok(Some(match *event {
            Event::Activated => self.activated.bind(py).call0()?,
            Event::Arrived { task } => self.arrived.bind(py).call1((task,))?,
            Event::Finished { task, ok } => self.finished.bind(py).call1((task, ok))?,
            Event::Timer => self.timer.bind(py).call0()?,
            Event::DeviceChanged { device } => self.device_changed.bind(py).call1((device,))?,
            _ => return Ok(None),
        }))
    }

    fn power<'py>(&self, py: Python<'py>, p: PowerModel) -> PyResult<Bound<'py, PyAny>> {
        self.power_model.bind(py).call1((p.p0, p.gamma, p.c))
    }

    fn task_object<'py>(&self, py: Python<'py>, t: &Task) -> PyResult<Bound<'py, PyAny>> {
        let power = match t.app.power {
            ROption::RSome(p) => Some(self.power(py, p)?),
            ROption::RNone => None,
        };
        let app = self.app_model.bind(py).call1((
            t.app.name.as_str(),
            t.app.delta,
            t.app.d,
            t.app.t0,
            power,
        ))?;
        self.task.bind(py).call1((
            t.key,
            t.id.as_str(),
            t.arrival,
            t.workload,
            t.mem_gb,
            t.deadline,
            t.weight,
            t.gpus,
            PyTuple::new(py, t.alt_gpus.iter())?,
            PyTuple::new(py, t.runtimes.iter())?,
            app,
            self.states[state_index(t.state)].bind(py),
        ))
    }

    /// `d` as a `Device`, with the objects of its fields that do not
    /// change from `fixed`.
    fn device_object<'py>(
        &self,
        py: Python<'py>,
        d: &Device<'_>,
        fixed: &Fixed,
    ) -> PyResult<Bound<'py, PyAny>> {
        self.device.bind(py).call1((
            d.index,
            fixed.model.bind(py),
            d.memory_gb,
            d.speed,
            d.cost_per_hour,
            d.online,
            d.running.into_option(),
            PyList::new(py, d.queue.iter())?,
            d.available_at,
            fixed.clock_range.bind(py),
            fixed.default_power.bind(py),
            fixed.mig.bind(py),
        ))
    }

    /// The objects of `d`'s fields that do not change.
    fn fixed(&self, py: Python<'_>, d: &Device<'_>) -> PyResult<Fixed> {
        let ClockRange {
            core_min,
            core_max,
            mem_min,
            mem_max,
        } = d.clock_range;
        let mig = match d.mig {
            ROption::RSome(m) => self.mig_instance.bind(py).call1((
                m.parent,
                m.profile.as_str(),
                m.start,
                m.compute_slices,
            ))?,
            ROption::RNone => py.None().into_bound(py),
        };
        Ok(Fixed {
            key: FixedKey::of(d),
            model: PyString::new(py, d.model.as_str()).unbind(),
            clock_range: self
                .clock_range
                .bind(py)
                .call1((core_min, core_max, mem_min, mem_max))?
                .unbind(),
            default_power: self.power(py, d.default_power)?.unbind(),
            mig: mig.unbind(),
        })
    }

    /// The decisions in `answer` (a list of them, or None for none): an
    /// error names the first that is not one, or its field that is wrong.
    pub fn decisions(&self, answer: &Bound<'_, PyAny>) -> Result<Vec<Decision>, String> {
        if answer.is_none() {
            return Ok(Vec::new());
        }
        let items = answer.try_iter().map_err(|_| {
            format!(
                "on_event must return a list of decisions, not {}",
                type_name(answer)
            )
        })?;
        let mut decisions = Vec::new();
        for (i, item) in items.enumerate() {
            let item = item.map_err(|e| e.to_string())?;
            let decision = self.decision(&item).map_err(|e| {
                let shown = item
                    .repr()
                    .map(|r| r.to_string())
                    .unwrap_or_else(|_| type_name(&item));
                format!("decision {i}, {shown}: {e}")
            })?;
            decisions.push(decision);
        }
        Ok(decisions)
    }

    fn decision(&self, d: &Bound<'_, PyAny>) -> Result<Decision, String> {
        let py = d.py();
        let is = |class: &Py<PyAny>| d.is_instance(class.bind(py)).unwrap_or(false);
        Ok(if is(&self.assign) {
            Decision::Assign {
                task: field(d, "task")?,
                devices: devices(d)?,
                position: field::<Option<u32>>(d, "position")?.into(),
                clocks: self.clocks_of(d)?,
            }
        } else if is(&self.start) {
            Decision::Start {
                task: field(d, "task")?,
                devices: devices(d)?,
                clocks: self.clocks_of(d)?,
            }
        } else if is(&self.reject) {
            Decision::Reject {
                task: field(d, "task")?,
                reason: field::<String>(d, "reason")?.into(),
            }
        } else if is(&self.wake_at) {
            Decision::WakeAt {
                time: field(d, "time")?,
            }
        } else if is(&self.mig_layout) {
            Decision::MigLayout {
                gpu: field(d, "gpu")?,
                layout: field::<String>(d, "layout")?.into(),
            }
        } else if is(&self.dvfs) {
            Decision::Dvfs {
                task: field(d, "task")?,
                class: match field::<String>(d, "cls")?.as_str() {
                    "energy" => DvfsClass::EnergyPrior,
                    "deadline" => DvfsClass::DeadlinePrior,
                    other => {
                        return Err(format!(
                            "cls: expected \"energy\" or \"deadline\", got {other:?}"
                        ))
                    }
                },
                readjusted: field(d, "readjusted")?,
            }
        } else {
            return Err(format!(
                "a {}, not a decision (gpu_agent_policy's Assign, Start, Reject, WakeAt, MigLayout or Dvfs)",
                type_name(d)
            ));
        })
    }

    /// A decision's `clocks`: None, or a `Clocks`.
    fn clocks_of(&self, d: &Bound<'_, PyAny>) -> Result<ROption<Clocks>, String> {
        let clocks = d.getattr("clocks").map_err(|e| format!("clocks: {e}"))?;
        if clocks.is_none() {
            return Ok(ROption::RNone);
        }
        if !clocks
            .is_instance(self.clocks.bind(d.py()))
            .unwrap_or(false)
        {
            return Err(format!(
                "clocks: expected a Clocks or None, got a {}",
                type_name(&clocks)
            ));
        }
        Ok(ROption::RSome(Clocks {
            core: field(&clocks, "core").map_err(|e| format!("clocks.{e}"))?,
            mem: field(&clocks, "mem").map_err(|e| format!("clocks.{e}"))?,
        }))
    }
}

/// Attribute `name` of `object` as a `T`; the error names it.
fn field<T>(object: &Bound<'_, PyAny>, name: &str) -> Result<T, String>
where
    T: for<'a, 'py> FromPyObject<'a, 'py>,
    for<'a, 'py> <T as FromPyObject<'a, 'py>>::Error: Into<PyErr>,
{
    let value = object.getattr(name).map_err(|e| format!("{name}: {e}"))?;
    value
        .extract::<T>()
        .map_err(|e| format!("{name}: {}", Into::<PyErr>::into(e)))
}

/// A placement's `devices`: a list of device indices.
fn devices(d: &Bound<'_, PyAny>) -> Result<RVec<u32>, String> {
    let list: Vec<u32> = field(d, "devices")?;
    Ok(list.into())
}

/// The name of `object`'s type.
fn type_name(object: &Bound<'_, PyAny>) -> String {
    object
        .get_type()
        .name()
        .map(|n| n.to_string())
        .unwrap_or_else(|_| "?".into())
}

/// The tasks of the last view, as `Task` objects in a dict by key that the
/// plugin keeps from call to call: a task's object is made once, when a view
/// first holds it, and only its `state` is written again (nothing else of a
/// task changes while the core holds it); a task the view no longer holds
/// leaves the dict. So a call costs a walk over the held tasks in Rust and
/// Python work only for what changed.
pub struct Tasks {
    dict: Py<PyDict>,
    /// The keys and states the dict holds, in key order.
    known: Vec<(TaskKey, TaskState)>,
    /// The next call's `known`, built while walking.
    next: Vec<(TaskKey, TaskState)>,
}

impl Tasks {
    /// None yet.
    pub fn new(py: Python<'_>) -> Tasks {
        Tasks {
            dict: PyDict::new(py).unbind(),
            known: Vec::new(),
            next: Vec::new(),
        }
    }

    /// Brings the dict to what `view` holds.
    fn sync(&mut self, py: Python<'_>, classes: &Classes, view: &View<'_>) -> PyResult<()> {
        let dict = self.dict.bind(py);
        let mut known = self.known.iter().peekable();
        self.next.clear();
        // Both in key order: a merge.
        for t in view.held.iter() {
            while let Some(&&(key, _)) = known.peek() {
                if key >= t.key {
                    break;
                }
                dict.del_item(key)?;
                known.next();
            }
            match known.peek() {
                Some(&&(key, state)) if key == t.key => {
                    known.next();
                    if state != t.state {
                        let object = dict.get_item(key)?.expect("a known task is in the dict");
                        object.setattr("state", classes.states[state_index(t.state)].bind(py))?;
                    }
                }
                _ => dict.set_item(t.key, classes.task_object(py, t)?)?,
            }
            self.next.push((t.key, t.state));
        }
        for &(key, _) in known {
            dict.del_item(key)?;
        }
        std::mem::swap(&mut self.known, &mut self.next);
        Ok(())
    }
}

/// What a device's fixed fields are, to tell whether its [`Fixed`] objects
/// still show it.
#[derive(PartialEq)]
struct FixedKey {
    model: String,
    clock_range: ClockRange,
    default_power: PowerModel,
    mig: Option<(u32, String, u32, u32)>,
}

impl FixedKey {
    fn of(d: &Device<'_>) -> FixedKey {
        FixedKey {
            model: d.model.as_str().to_string(),
            clock_range: d.clock_range,
            default_power: d.default_power,
            mig: d.mig.into_option().map(|m| {
                (
                    m.parent,
                    m.profile.as_str().to_string(),
                    m.start,
                    m.compute_slices,
                )
            }),
        }
    }

    fn shows(&self, d: &Device<'_>) -> bool {
        self.model == d.model.as_str()
            && self.clock_range == d.clock_range
            && self.default_power == d.default_power
            && self
                .mig
                .as_ref()
                .map(|(p, name, s, c)| (*p, name.as_str(), *s, *c))
                == d.mig
                    .into_option()
                    .map(|m| (m.parent, m.profile.as_str(), m.start, m.compute_slices))
    }
}

/// A device's fields that do not change from call to call (model, clock
/// range, default power, MIG instance), as the objects each call's
/// `Device` shares.
struct Fixed {
    key: FixedKey,
    model: Py<PyString>,
    clock_range: Py<PyAny>,
    default_power: Py<PyAny>,
    mig: Py<PyAny>,
}

/// The devices' [`Fixed`] objects, by device index, made when a view first
/// shows a device and again only if what they show changed.
#[derive(Default)]
pub struct Devices(Vec<Fixed>);

/// `view` as a `View` object.
pub fn view<'py>(
    py: Python<'py>,
    classes: &Classes,
    tasks: &mut Tasks,
    fixed: &mut Devices,
    view: &View<'_>,
) -> PyResult<Bound<'py, PyAny>> {
    tasks.sync(py, classes, view)?;
    let pending = PyList::new(py, view.pending.iter())?;
    let devices = PyList::empty(py);
    for (i, d) in view.devices.iter().enumerate() {
        match fixed.0.get(i) {
            Some(f) if f.key.shows(d) => {}
            Some(_) => fixed.0[i] = classes.fixed(py, d)?,
            None => fixed.0.push(classes.fixed(py, d)?),
        }
        devices.append(classes.device_object(py, d, &fixed.0[i])?)?;
    }
    classes
        .view
        .bind(py)
        .call1((view.now, tasks.dict.bind(py), pending, devices))
}
