//! Every shipped policy while the core changes a GPU's MIG layout at run
//! time (docs/mig.md §6.3): the GPU is drained, split into instances, drained
//! again and made whole, in the middle of a replay that this test drives
//! itself, as the daemon will (drain with `Input::Offline`, wait until it is
//! idle, `Core::repartition`, bring the new devices online).
//!
//! Properties: no policy fault (every decision valid, nothing stranded); every
//! task starts exactly once or is rejected, never both; a start's devices are
//! online, schedulable (never a split GPU or a retired instance), idle, hold
//! the task's memory, and a gang is on whole GPUs only.

use gpu_agent_core::agenda::Agenda;
use gpu_agent_core::catalogue;
use gpu_agent_core::host::{DeviceSpec, Partition};
use gpu_agent_core::placement::Request;
use gpu_agent_core::{Action, Core, Input};
use gpu_agent_loader::Plugin;
use gpu_agent_plugin_api::TaskKey;
use proptest::prelude::*;

use crate::validity::{instance, placing_only, registry, Instance};

/// What is due, in this order at equal times.
#[derive(Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Due {
    Finish(TaskKey),
    /// Start draining the GPU for the next layout.
    Drain,
    Timer,
}

/// Layouts the A100 takes in turn (the last, MIG off, makes it whole again).
const LAYOUTS: [&[&str]; 4] = [
    &["3g.20gb", "2g.10gb", "2g.10gb"],
    &["4g.20gb", "1g.5gb", "1g.5gb@5"],
    &["7g.40gb"],
    &[],
];

/// The replay's state and what it saw.
struct Replay {
    core: Core,
    agenda: Agenda<Due>,
    /// Per device: the task running on it.
    running: Vec<Option<TaskKey>>,
    /// Per task key (submission order): started, rejected.
    started: Vec<bool>,
    rejected: Vec<bool>,
    faults: Vec<String>,
}

impl Replay {
    fn apply(&mut self, now: f64, actions: Vec<Action>) -> Result<(), TestCaseError> {
        for action in actions {
            match action {
                Action::Start {
                    task,
                    devices,
                    runtime,
                    ..
                } => {
                    let k = task as usize;
                    prop_assert!(!self.started[k] && !self.rejected[k], "task {k} twice");
                    self.started[k] = true;
                    let specs: Vec<DeviceSpec> = self.core.devices().cloned().collect();
                    let t = self.core.task(task).expect("a started task is held");
                    for &d in &devices {
                        let spec = &specs[d as usize];
                        prop_assert!(spec.schedulable(), "task {k} on {}", spec.label());
                        prop_assert!(self.core.online(d), "task {k} on offline {d}");
                        prop_assert!(spec.memory_gb >= t.mem_gb, "task {k} too big for {d}");
                        prop_assert!(
                            devices.len() == 1 || spec.mig().is_none(),
                            "gang {k} on MIG device {}",
                            spec.label()
                        );
                        if self.running.len() <= d as usize {
                            self.running.resize(d as usize + 1, None);
                        }
                        prop_assert_eq!(self.running[d as usize], None, "device {} busy", d);
                        self.running[d as usize] = Some(task);
                    }
                    self.agenda.push(now + runtime, Due::Finish(task));
                }
                Action::Reject { task, .. } => {
                    let k = task as usize;
                    prop_assert!(!self.started[k] && !self.rejected[k], "task {k} twice");
                    self.rejected[k] = true;
                }
                Action::WakeAt { time } => self.agenda.push(time, Due::Timer),
                Action::Assigned { .. } => {}
                Action::PolicyFault { policy, reason } => {
                    self.faults.push(format!("{policy}: {reason}"))
                }
                Action::Overrunning { .. }
                | Action::Interrupt { .. }
                | Action::MigDraining { .. }
                | Action::ApplyMigLayout { .. }
                | Action::MigHeld { .. } => {
                    prop_assert!(false, "unexpected {action:?}")
                }
            }
        }
        Ok(())
    }

    fn handle(&mut self, now: f64, input: Input) -> Result<(), TestCaseError> {
        let actions = self.core.handle(now, input);
        self.apply(now, actions)
    }

    /// GPU `gpu`'s devices now: itself when whole, else its instances.
    fn devices_of(&self, gpu: u32) -> Vec<u32> {
        let instances: Vec<u32> = self
            .core
            .devices()
            .filter(|d| matches!(d.partition, Partition::Mig(m) if m.parent == gpu))
            .map(|d| d.index)
            .collect();
        if instances.is_empty() {
            vec![gpu]
        } else {
            instances
        }
    }
}

/// Replays `inst` (with an A100 added as its last GPU) under `plugin`,
/// changing the A100's layout through [`LAYOUTS`], a drain starting every
/// `every` seconds.
fn replay(
    inst: &Instance,
    plugin: &Plugin,
    params: &[(String, String)],
    every: f64,
) -> Result<(), TestCaseError> {
    let a100 = catalogue::lookup("A100-SXM4-40GB").unwrap();
    let table = a100.mig.unwrap();
    let mut devices = inst.host.devices.clone();
    let gpu = devices.len() as u32;
    devices.push(DeviceSpec {
        index: gpu,
        model: a100,
        memory_gb: a100.memory_gb,
        speed: 1.0,
        cost_per_hour: 0.0,
        partition: Partition::Whole,
    });
    let policy = plugin.instantiate(params).unwrap();
    let n = inst.tasks.len();
    let mut r = Replay {
        core: Core::new(devices, policy),
        agenda: Agenda::new(),
        running: Vec::new(),
        started: vec![false; n],
        rejected: vec![false; n],
        faults: Vec::new(),
    };
    let mut arrivals: Vec<usize> = (0..n).collect();
    arrivals.sort_by(|&a, &b| inst.tasks[a].arrival.total_cmp(&inst.tasks[b].arrival));
    let mut arrivals = arrivals.into_iter().peekable();
    let mut changes = LAYOUTS.iter();
    let mut draining = false;
    r.agenda.push(every, Due::Drain);
    let mut now = 0.0;
    loop {
        let next_arrival = arrivals.peek().map(|&i| inst.tasks[i].arrival);
        let from_agenda = match (r.agenda.peek().map(|(t, _)| t), next_arrival) {
            (Some(t), Some(a)) => t <= a,
            (Some(_), None) => true,
            (None, Some(_)) => false,
            (None, None) => {
                if r.core.unfinished() == 0 {
                    break;
                }
                r.handle(now, Input::Stalled)?;
                if r.agenda.peek().is_none() {
                    break;
                }
                continue;
            }
        };
        if from_agenda {
            let (at, what) = r.agenda.pop().unwrap();
            now = at;
            match what {
                Due::Finish(task) => {
                    for slot in r.running.iter_mut().filter(|s| **s == Some(task)) {
                        *slot = None;
                    }
                    r.handle(now, Input::Finished { task, ok: true })?;
                }
                Due::Drain => {
                    draining = true;
                    for d in r.devices_of(gpu) {
                        r.handle(
                            now,
                            Input::Offline {
                                device: d,
                                interrupt: false,
                            },
                        )?;
                    }
                }
                Due::Timer => r.handle(now, Input::Timer)?,
            }
        } else {
            let i = arrivals.next().unwrap();
            now = inst.tasks[i].arrival;
            let (_, actions) = r.core.submit(now, inst.tasks[i].clone());
            r.apply(now, actions)?;
        }
        let idle = r
            .devices_of(gpu)
            .iter()
            .all(|&d| r.running.get(d as usize).copied().flatten().is_none());
        if draining && idle {
            draining = false;
            let Some(layout) = changes.next() else {
                unreachable!("a drain is asked for only while layouts are left");
            };
            let requests: Vec<Request> = layout
                .iter()
                .map(|t| Request::parse(table, t).unwrap())
                .collect();
            let change = r.core.repartition(now, gpu, &requests).unwrap();
            r.apply(now, change.actions)?;
            for d in change.devices {
                r.handle(now, Input::Online { device: d })?;
            }
            if changes.len() > 0 {
                r.agenda.push(now + every, Due::Drain);
            }
        }
    }
    prop_assert!(r.faults.is_empty(), "{:?}", r.faults);
    prop_assert!(changes.len() == 0, "layouts left: {}", changes.len());
    for k in 0..n {
        prop_assert!(
            r.started[k] ^ r.rejected[k],
            "task {} neither started nor rejected",
            k
        );
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]

    /// Every shipped policy copes with a GPU drained and re-partitioned
    /// three times mid-replay (split, split differently, whole again).
    #[test]
    fn every_shipped_policy_survives_layout_changes_mid_replay(
        inst in instance(),
        every in prop::sample::select(vec![0.5, 3.0, 10.0]),
    ) {
        for plugin in registry().plugins.iter() {
            // Every policy as shipped (mig-plan placing only: this test
            // changes the layout itself), and sos in its other reading too.
            let mut runs = vec![placing_only(plugin)];
            if plugin.name() == "sos" {
                runs.push(vec![("model".to_string(), "paper".to_string())]);
            }
            for params in runs {
                replay(&inst, plugin, &params, every).map_err(|e| {
                    TestCaseError::fail(format!("{} {params:?}: {e}", plugin.name()))
                })?;
            }
        }
    }
}
