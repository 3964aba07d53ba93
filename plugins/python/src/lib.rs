//! `python`: a scheduling policy written in Python (docs/policies.md, "python").
//!
//! The plugin embeds CPython through pyo3 and loads the file its `module`
//! parameter names. At every event it hands the module's `on_event(view,
//! event)` the view and the event as objects of `gpu_agent_policy`
//! (`gpu_agent_policy.py`, which it puts in `sys.modules` first: plain
//! classes mirroring plugin-api's), and turns the list that comes back into
//! decisions. A Python exception, or an answer that is not a list of
//! decisions, is an `Err` carrying the traceback or naming the decision and
//! field: a policy fault, as a Rust plugin's error is, which the agent logs
//! with that reason before it falls back to FIFO.
//!
//! In a process where Python already runs (the `gpu_agent` package's
//! `simulate`), the plugin uses that interpreter; otherwise it starts one
//! (`interpreter.rs`).

// abi_stable 0.11's derives put impls inside constants.
#![allow(non_local_definitions)]

mod interpreter;
mod vocabulary;

use gpu_agent_plugin_api::{Decision, Event, Param, ParamInfo, ParamReader, PolicyImpl, View};
use pyo3::prelude::*;

use vocabulary::{Classes, Devices, Tasks};

/// The plugin's parameters.
const PARAMS: [ParamInfo; 1] = [ParamInfo::text(
    "module",
    "",
    "path of the Python file whose on_event(view, event) decides (required; the daemon needs an absolute path)",
)];

gpu_agent_plugin_api::export_policy! {
    name: "python",
    description: "a policy written in Python: the module parameter's on_event(view, event)",
    parameters: PARAMS,
    new: PythonPolicy::new,
}

/// A policy module loaded into the interpreter, with what the plugin keeps
/// between its calls.
pub struct PythonPolicy {
    /// The file, as given (for messages).
    path: String,
    /// The module's `on_event`.
    on_event: Py<PyAny>,
    /// `gpu_agent_policy`'s classes.
    classes: Classes,
    /// The tasks of the last view, as Python objects.
    tasks: Tasks,
    /// The devices' fields that do not change, as Python objects.
    devices: Devices,
}

impl PythonPolicy {
    /// Loads the module `params` names; its import errors (with their
    /// traceback) refuse the policy.
    pub fn new(params: &[Param]) -> Result<PythonPolicy, String> {
        let path = ParamReader::new(&PARAMS, params)?.text("module");
        if path.is_empty() {
            return Err("module: a Python file is required (--param module=PATH)".into());
        }
        let loaded = interpreter::load(path)?;
        Python::attach(|py| {
            let classes = Classes::new(py).map_err(|e| interpreter::describe(py, &e))?;
            Ok(PythonPolicy {
                path: path.to_string(),
                on_event: loaded,
                tasks: Tasks::new(py),
                devices: Devices::default(),
                classes,
            })
        })
    }
}

impl PolicyImpl for PythonPolicy {
    fn on_event(&mut self, view: &View<'_>, event: &Event) -> Result<Vec<Decision>, String> {
        Python::attach(|py| {
            let Some(event) = self.classes.event(py, event).map_err(|e| {
                format!(
                    "{}: building the event: {}",
                    self.path,
                    interpreter::describe(py, &e)
                )
            })?
            else {
                return Ok(Vec::new()); // an event kind newer than this plugin
            };
            let view =
                vocabulary::view(py, &self.classes, &mut self.tasks, &mut self.devices, view)
                    .map_err(|e| {
                        format!(
                            "{}: building the view: {}",
                            self.path,
                            interpreter::describe(py, &e)
                        )
                    })?;
            let answer = self.on_event.bind(py).call1((view, event)).map_err(|e| {
                format!(
                    "{}: on_event raised {}",
                    self.path,
                    interpreter::describe(py, &e)
                )
            })?;
            self.classes
                .decisions(&answer)
                .map_err(|e| format!("{}: on_event returned an invalid decision: {e}", self.path))
        })
    }
}

#[cfg(test)]
mod tests;
