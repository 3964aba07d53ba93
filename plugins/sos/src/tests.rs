//! The policy's decisions on hand-made views, event by event.

use gpu_agent_plugin_api::{
    abi_stable::std_types::{ROption, RSlice, RStr},
    AppModel, Device, Event, Param, PolicyImpl, Task, TaskKey, TaskState, View,
};

use super::*;

/// The one `Task` literal of this file: `runtimes[i]` on device i.
fn task(key: TaskKey, weight: f64, gpus: u32, runtimes: &[f64]) -> Task {
    Task {
        key,
        id: format!("t{key}").into(),
        arrival: 0.0,
        workload: 1.0,
        mem_gb: 0.0,
        deadline: 100.0,
        weight,
        gpus,
        alt_gpus: Default::default(),
        runtimes: runtimes.to_vec().into(),
        app: AppModel::builtin_default(),
        state: TaskState::Pending,
    }
}

/// The tasks and which devices are online.
struct World {
    tasks: Vec<Task>,
    online: Vec<bool>,
}

impl World {
    fn new(devices: usize, tasks: Vec<Task>) -> World {
        World {
            tasks,
            online: vec![true; devices],
        }
    }

    /// The policy's answer to `event` at `now`, written compactly; assigned
    /// tasks leave the pending queue.
    fn call(&mut self, sos: &mut Sos, now: f64, event: Event) -> Vec<String> {
        let devices: Vec<Device<'_>> = (0..self.online.len())
            .map(|i| Device {
                index: i as u32,
                model: RStr::from_str("T4"),
                memory_gb: 16.0,
                speed: 1.0,
                cost_per_hour: 0.0,
                online: self.online[i],
                running: ROption::RNone,
                queue: RSlice::from_slice(&[]),
                available_at: now,
                clock_range: gpu_agent_plugin_api::ClockRange::DEFAULT_ONLY,
                default_power: gpu_agent_plugin_api::PowerModel {
                    p0: 0.0,
                    gamma: 0.0,
                    c: 0.0,
                },
                mig: ROption::RNone,
            })
            .collect();
        let pending: Vec<TaskKey> = self
            .tasks
            .iter()
            .filter(|t| t.state == TaskState::Pending)
            .map(|t| t.key)
            .collect();
        let view = View {
            now,
            held: RSlice::from_slice(&self.tasks),
            pending: RSlice::from_slice(&pending),
            devices: RSlice::from_slice(&devices),
        };
        let decisions = sos.on_event(&view, &event).unwrap();
        decisions
            .iter()
            .map(|d| match d {
                Decision::Assign {
                    task,
                    devices,
                    position: ROption::RNone,
                    clocks: ROption::RNone,
                } => {
                    self.tasks[*task as usize].state = TaskState::Queued;
                    format!("assign t{task} {:?}", devices.as_slice())
                }
                Decision::WakeAt { time } => format!("wake {time}"),
                other => panic!("unexpected decision {other:?}"),
            })
            .collect()
    }
}

fn arrived(task: TaskKey) -> Event {
    Event::Arrived { task }
}

#[test]
fn alpha_is_checked() {
    let with = |value: &str| {
        let params = [
            Param {
                key: "alpha".into(),
                value: value.into(),
            },
            Param {
                key: "model".into(),
                value: "paper".into(),
            },
        ];
        match SosPolicy::from_params(&params) {
            Ok(SosPolicy::Paper(sos)) => Ok(sos.alpha),
            Ok(SosPolicy::Baseline(_)) => panic!("model = paper"),
            Err(e) => Err(e),
        }
    };
    let paper = [Param {
        key: "model".into(),
        value: "paper".into(),
    }];
    assert!(matches!(SosPolicy::from_params(&paper), Ok(SosPolicy::Paper(s)) if s.alpha == 0.5));
    assert_eq!(with("1"), Ok(1.0));
    assert_eq!(with("0.6"), Ok(0.6));
    for bad in ["0", "-0.5", "1.01", "NaN", "inf", "half", "", " 0.6 "] {
        assert_eq!(
            with(bad).unwrap_err(),
            format!("alpha: expected a number in (0, 1], got {bad:?}")
        );
    }
    assert_eq!(
        Sos::new(0.0).unwrap_err(),
        "alpha: expected a number in (0, 1], got 0"
    );
}

#[test]
fn tasks_go_to_the_least_cost_device_and_leave_at_their_alpha_points() {
    let mut w = World::new(
        2,
        vec![task(0, 2.0, 1, &[4.0, 8.0]), task(1, 1.0, 1, &[2.0, 1.0])],
    );
    let mut sos = Sos::new(0.5).unwrap();
    // t0 at 0: cost_0 = 2 * 4 = 8, cost_1 = 2 * 8 = 16 → device 0, alpha-point 0 + 2.
    assert_eq!(w.call(&mut sos, 0.0, arrived(0)), ["wake 2"]);
    // t1 at 1: on device 0 its ratio 1/2 ties with t0's, which came first and
    // has 3 of 4 units left: cost_0 = 1 (2 + 3) = 5; cost_1 = 1 * 1 = 1 →
    // device 1, alpha-point 1 + 0.5.
    assert_eq!(w.call(&mut sos, 1.0, arrived(1)), ["wake 1.5"]);
    assert_eq!(
        w.call(&mut sos, 1.5, Event::Timer),
        ["assign t1 [1]", "wake 2"]
    );
    assert_eq!(w.call(&mut sos, 2.0, Event::Timer), ["assign t0 [0]"]);
    assert!(w.call(&mut sos, 9.0, Event::Timer).is_empty());
}

#[test]
fn late_events_release_in_time_order_then_device_order() {
    let mut w = World::new(
        2,
        vec![
            task(0, 1.0, 1, &[2.0, 9.0]),
            task(1, 1.0, 1, &[9.0, 2.0]),
            task(2, 1.0, 1, &[1.0, 9.0]),
        ],
    );
    let mut sos = Sos::new(0.5).unwrap();
    assert_eq!(w.call(&mut sos, 0.0, arrived(0)), ["wake 1"]);
    assert_eq!(w.call(&mut sos, 0.0, arrived(1)), Vec::<String>::new());
    // t2 (ratio 1) overtakes t0 on device 0 at 0: t2 leaves at 0.5, t0 at 1.5.
    // cost_0 = 1 * 1 + 1 * (1 * 1) = 2; on device 1 t1 (ratio 1/2) is ahead:
    // cost_1 = 1 (9 + 2) = 11.
    assert_eq!(w.call(&mut sos, 0.0, arrived(2)), ["wake 0.5"]);
    // A wake-up delivered late, at 3: t2 (0.5), t1 (1, device 1), t0 (1.5).
    assert_eq!(
        w.call(&mut sos, 3.0, Event::Timer),
        ["assign t2 [0]", "assign t1 [1]", "assign t0 [0]"]
    );
}

#[test]
fn a_gang_joins_its_queues_when_its_last_copy_leaves() {
    let mut w = World::new(
        3,
        vec![
            task(0, 1.0, 1, &[2.0, 2.0, 2.0]),
            task(1, 1.0, 2, &[2.0, 3.0, 6.0]),
        ],
    );
    let mut sos = Sos::new(0.5).unwrap();
    // t0: cost 2 everywhere → device 0, alpha-point 1.
    assert_eq!(w.call(&mut sos, 0.0, arrived(0)), ["wake 1"]);
    // The gang t1: cost_0 = 1 (2 + 2) = 4 (behind t0, equal ratio, earlier),
    // cost_1 = 3, cost_2 = 6 → devices 1 and 0. Its copy on device 1 leaves at
    // 1.5; on device 0 it starts after t0, at 1, and leaves at 2.
    assert_eq!(w.call(&mut sos, 0.0, arrived(1)), Vec::<String>::new());
    assert_eq!(
        w.call(&mut sos, 1.0, Event::Timer),
        ["assign t0 [0]", "wake 1.5"]
    );
    assert_eq!(w.call(&mut sos, 1.5, Event::Timer), ["wake 2"]);
    assert_eq!(w.call(&mut sos, 2.0, Event::Timer), ["assign t1 [0, 1]"]);
}

#[test]
fn a_task_no_device_can_hold_waits_for_the_next_event() {
    let mut w = World::new(
        2,
        vec![
            task(0, 1.0, 1, &[f64::INFINITY, 2.0]),
            task(1, 1.0, 1, &[2.0, f64::INFINITY]),
        ],
    );
    let mut sos = Sos::new(0.5).unwrap();
    w.online[1] = false;
    assert!(w.call(&mut sos, 0.0, arrived(0)).is_empty());
    // t1 → device 0, alpha-point 1.
    assert_eq!(w.call(&mut sos, 0.0, arrived(1)), ["wake 1"]);
    // Device 1 is back at 0.5: t0 is offered again (alpha-point 1.5); device 0
    // goes offline, so t1 cannot join its queue at 1 and waits.
    w.online[1] = true;
    assert!(w.call(&mut sos, 0.5, Event::Timer).is_empty());
    w.online[0] = false;
    assert_eq!(w.call(&mut sos, 1.0, Event::Timer), ["wake 1.5"]);
    assert_eq!(w.call(&mut sos, 1.5, Event::Timer), ["assign t0 [1]"]);
    // Device 0 is back: t1 starts over in its virtual schedule (alpha-point 2 + 1).
    w.online[0] = true;
    assert_eq!(w.call(&mut sos, 2.0, Event::Timer), ["wake 3"]);
    assert_eq!(w.call(&mut sos, 3.0, Event::Timer), ["assign t1 [0]"]);
}

#[test]
fn a_cancelled_task_leaves_its_virtual_schedule() {
    let mut w = World::new(1, vec![task(0, 1.0, 1, &[4.0]), task(1, 1.0, 1, &[2.0])]);
    let mut sos = Sos::new(0.5).unwrap();
    assert_eq!(w.call(&mut sos, 0.0, arrived(0)), ["wake 2"]);
    // t1 (ratio 1/2) overtakes t0 (1/4) at 1 and reaches its alpha-point at 2:
    // the wake-up already asked for.
    assert!(w.call(&mut sos, 1.0, arrived(1)).is_empty());
    // t1 is cancelled at 1.5: t0 resumes with 1 of its 2 units left.
    w.tasks[1].state = TaskState::Done;
    let cancelled = Event::Finished { task: 1, ok: false };
    assert_eq!(w.call(&mut sos, 1.5, cancelled), ["wake 2.5"]);
    assert!(w.call(&mut sos, 2.0, Event::Timer).is_empty());
    assert_eq!(w.call(&mut sos, 2.5, Event::Timer), ["assign t0 [0]"]);
}

#[test]
fn activation_offers_every_pending_task_in_order() {
    let mut w = World::new(
        2,
        vec![task(0, 1.0, 1, &[2.0, 4.0]), task(1, 1.0, 1, &[2.0, 3.0])],
    );
    let mut sos = Sos::new(1.0).unwrap();
    // At 5: t0 → device 0 (2 < 4), alpha-point 7. t1: cost_0 = 1 (2 + 2) = 4
    // (behind t0, equal ratio), cost_1 = 3 → device 1, alpha-point 8.
    assert_eq!(w.call(&mut sos, 5.0, Event::Activated), ["wake 7"]);
    assert_eq!(
        w.call(&mut sos, 7.0, Event::Timer),
        ["assign t0 [0]", "wake 8"]
    );
    assert_eq!(w.call(&mut sos, 8.0, Event::Timer), ["assign t1 [1]"]);
}
