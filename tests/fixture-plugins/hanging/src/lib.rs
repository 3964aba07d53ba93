//! Test fixture: policy `hanging` queues every task on device 0 and never
//! returns when a task of weight 666 arrives (or from its constructor, with
//! `--param hang_in_new=true`): it sleeps forever, as a plugin stuck on a
//! lock or a dead peer would.

// abi_stable 0.11's derives put impls inside constants.
#![allow(non_local_definitions)]

use gpu_agent_plugin_api::{
    abi_stable::std_types::ROption, param, Decision, Event, Param, ParamInfo, PolicyImpl, View,
};

struct Hanging;

/// The weight of the task whose arrival it never returns from.
const HANG_WEIGHT: f64 = 666.0;

fn hang() -> ! {
    loop {
        std::thread::sleep(std::time::Duration::from_secs(3600));
    }
}

impl PolicyImpl for Hanging {
    fn on_event(&mut self, view: &View<'_>, event: &Event) -> Result<Vec<Decision>, String> {
        if let Event::Arrived { task } = event {
            if view.task(*task).weight == HANG_WEIGHT {
                hang();
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
    name: "hanging",
    description: "test fixture: never returns once a task of weight 666 arrives",
    parameters: [ParamInfo::bool("hang_in_new", "false", "never return from the constructor")],
    new: |params: &[Param]| {
        if param(params, "hang_in_new") == Some("true") {
            hang();
        }
        Ok::<_, String>(Hanging)
    },
}
