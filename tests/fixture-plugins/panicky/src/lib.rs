//! Test fixture: policy `panicky` queues every task on device 0 and panics when
//! a task whose id starts with `boom` arrives (or in its constructor, with
//! `--param panic_in_new=true`).

// abi_stable 0.11's derives put impls inside constants.
#![allow(non_local_definitions)]

use gpu_agent_plugin_api::{
    abi_stable::std_types::ROption,
    param, Decision, Event, Param, ParamInfo, PolicyImpl, View,
};

struct Panicky;

impl PolicyImpl for Panicky {
    fn on_event(&mut self, view: &View<'_>, event: &Event) -> Result<Vec<Decision>, String> {
        if let Event::Arrived { task } = event {
            let id = &view.task(*task).id;
            if id.starts_with("boom") {
                panic!("task {id} makes this policy panic");
            }
        }
        Ok(view
            .pending
            .iter()
            .map(|&task| Decision::Assign {
                task,
                devices: vec![0].into(),
                position: ROption::RNone,
                clocks: ROption::RNone,
            })
            .collect())
    }
}

gpu_agent_plugin_api::export_policy! {
    name: "panicky",
    description: "test fixture: panics when a task named boom* arrives",
    parameters: [ParamInfo::bool("panic_in_new", "false", "panic while being constructed")],
    new: |params: &[Param]| {
        if param(params, "panic_in_new") == Some("true") {
            panic!("asked to panic in new");
        }
        Ok::<_, String>(Panicky)
    },
}
