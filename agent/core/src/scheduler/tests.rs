//! The core's own rules, driven by scripted in-process policies.

use gpu_agent_plugin_api::{
    abi_stable::std_types::ROption, guard, Clocks, Decision, Event, PolicyImpl, TaskKey, View,
};

use super::{Action, Core, Input, TaskSpec};
use crate::apps::AppLibrary;
use crate::catalogue;
use crate::host::Host;
use crate::policy::PolicyInstance;

/// A policy made of a closure.
struct Scripted<F>(F);

impl<F> PolicyImpl for Scripted<F>
where
    F: FnMut(&View<'_>, &Event) -> Result<Vec<Decision>, String> + Send + 'static,
{
    fn on_event(&mut self, view: &View<'_>, event: &Event) -> Result<Vec<Decision>, String> {
        (self.0)(view, event)
    }
}

/// A policy instance made of a closure.
fn scripted(
    f: impl FnMut(&View<'_>, &Event) -> Result<Vec<Decision>, String> + Send + 'static,
) -> PolicyInstance {
    PolicyInstance::new("scripted", guard(Scripted(f)))
}

fn core(
    devices: u32,
    f: impl FnMut(&View<'_>, &Event) -> Result<Vec<Decision>, String> + Send + 'static,
) -> Core {
    let t4 = catalogue::lookup("T4").unwrap();
    Core::new(
        Host::of_models((0..devices).map(|_| t4)).devices,
        scripted(f),
    )
}

fn spec(id: &str, arrival: f64, workload: f64) -> TaskSpec {
    TaskSpec {
        id: id.into(),
        arrival,
        workload,
        mem_gb: 1.0,
        deadline: 100.0,
        weight: 1.0,
        gpus: 1,
        alt_gpus: Vec::new(),
        runtimes: Vec::new(),
        app: AppLibrary::default().get("default").unwrap().clone(),
    }
}

fn assign(
    task: TaskKey,
    devices: &[u32],
    position: Option<u32>,
    clocks: Option<Clocks>,
) -> Decision {
    Decision::Assign {
        task,
        devices: devices.to_vec().into(),
        position: position.into(),
        clocks: clocks.into(),
    }
}

fn starts(actions: &[Action]) -> Vec<(TaskKey, Vec<u32>, f64)> {
    actions
        .iter()
        .filter_map(|a| match a {
            Action::Start {
                task,
                devices,
                runtime,
                ..
            } => Some((*task, devices.clone(), *runtime)),
            _ => None,
        })
        .collect()
}

/// `actions` but the placements in local queues (`Action::Assigned`).
fn moves(actions: &[Action]) -> Vec<Action> {
    actions
        .iter()
        .filter(|a| !matches!(a, Action::Assigned { .. }))
        .cloned()
        .collect()
}

fn fault(actions: &[Action]) -> Option<&str> {
    actions.iter().find_map(|a| match a {
        Action::PolicyFault { reason, .. } => Some(reason.as_str()),
        _ => None,
    })
}

#[test]
fn an_abandoned_call_keeps_what_its_view_showed_and_fifo_carries_on() {
    // The policy queues a on device 0, then gives up on b's arrival as the
    // daemon's time budget does: it raises `abandoned` and answers `Err`,
    // keeping the view it was lent, as a call still running would.
    let lent = std::sync::Arc::new(std::sync::Mutex::new(None));
    let kept = lent.clone();
    let abandoned = crate::policy::Abandoned::default();
    let raise = abandoned.clone();
    let policy = scripted(move |view, event| match event {
        Event::Arrived { task } if view.task(*task).id.as_str() == "b" => {
            // SAFETY (of the test): the view's lifetime is erased to keep it
            // past the call, which is exactly what the core must make sound.
            let view: View<'static> = unsafe { std::mem::transmute(*view) };
            *kept.lock().unwrap() = Some(view);
            raise.raise();
            Err("did not answer within 10 ms".into())
        }
        _ => Ok(view
            .pending
            .iter()
            .map(|&k| assign(k, &[0], None, None))
            .collect()),
    });
    let mut core = Core::new(
        Host::of_models([catalogue::lookup("T4").unwrap(); 2]).devices,
        PolicyInstance {
            abandoned,
            ..policy
        },
    );
    let (a, _) = core.submit(0.0, spec("a", 0.0, 3.0));
    let (b, actions) = core.submit(1.0, spec("b", 1.0, 2.0));
    assert_eq!(fault(&actions), Some("did not answer within 10 ms"));
    assert_eq!(core.policy_name(), "fifo (built-in fallback)");
    assert_eq!(starts(&actions), vec![(b, vec![1], 2.0)]);

    // The core goes on changing its tables: a ends, more tasks come and go.
    core.handle(3.0, Input::Finished { task: a, ok: true });
    for i in 0..100 {
        let (key, actions) = core.submit(4.0 + f64::from(i), spec(&format!("c{i}"), 4.0, 0.5));
        assert_eq!(starts(&actions).len(), 1, "c{i} starts at once");
        core.handle(
            4.5 + f64::from(i),
            Input::Finished {
                task: key,
                ok: true,
            },
        );
    }

    // What the abandoned call was shown is as it was shown.
    let view = lent.lock().unwrap().take().expect("the call kept its view");
    let ids: Vec<&str> = view.held.iter().map(|t| t.id.as_str()).collect();
    assert_eq!(ids, ["a", "b"]);
    assert_eq!(view.pending.as_slice(), [b]);
    assert_eq!(view.devices.len(), 2);
    assert_eq!(view.devices[0].running, ROption::RSome(a));
    assert!(view.devices[1].queue.is_empty());
}

#[test]
fn an_invalid_decision_falls_back_to_fifo_without_losing_the_task() {
    let mut core = core(2, |view, _| {
        Ok(view
            .pending
            .iter()
            .map(|&k| assign(k, &[7], None, None))
            .collect())
    });
    let (key, actions) = core.submit(0.0, spec("a", 0.0, 3.0));
    assert_eq!(
        fault(&actions),
        Some("placed task a on device 7, which does not exist")
    );
    assert_eq!(starts(&actions), vec![(key, vec![0], 3.0)]);
    assert_eq!(core.policy_name(), "fifo (built-in fallback)");
    // The fallback keeps serving later tasks.
    let (b, actions) = core.submit(1.0, spec("b", 1.0, 2.0));
    assert_eq!(starts(&actions), vec![(b, vec![1], 2.0)]);
}

#[test]
fn decisions_before_the_invalid_one_stay_applied() {
    // Queue a on device 0, then place a again: the second is invalid.
    let mut core = core(2, |view, _| {
        let k = view.pending[0];
        Ok(vec![
            assign(k, &[0], None, None),
            assign(k, &[1], None, None),
        ])
    });
    let (_, actions) = core.submit(0.0, spec("a", 0.0, 3.0));
    assert_eq!(
        fault(&actions),
        Some("decided about task a, which is Queued, not pending")
    );
    assert_eq!(starts(&actions), vec![(0, vec![0], 3.0)]);
}

#[test]
fn position_inserts_into_a_local_queue() {
    // Every task goes to the head of device 0's queue: LIFO behind the running one.
    let mut core = core(1, |view, _| {
        Ok(view
            .pending
            .iter()
            .map(|&k| assign(k, &[0], Some(0), None))
            .collect())
    });
    core.submit(0.0, spec("a", 0.0, 10.0));
    core.submit(1.0, spec("b", 1.0, 1.0));
    core.submit(2.0, spec("c", 2.0, 1.0));
    let actions = core.handle(10.0, Input::Finished { task: 0, ok: true });
    assert_eq!(starts(&actions), vec![(2, vec![0], 1.0)]);
    let actions = core.handle(11.0, Input::Finished { task: 2, ok: true });
    assert_eq!(starts(&actions), vec![(1, vec![0], 1.0)]);
}

#[test]
fn start_needs_an_idle_device_with_an_empty_queue() {
    let mut core = core(1, |view, _| {
        Ok(view
            .pending
            .iter()
            .map(|&k| Decision::Start {
                task: k,
                devices: vec![0].into(),
                clocks: ROption::RNone,
            })
            .collect())
    });
    let (_, actions) = core.submit(0.0, spec("a", 0.0, 5.0));
    assert_eq!(starts(&actions), vec![(0, vec![0], 5.0)]);
    let (_, actions) = core.submit(1.0, spec("b", 1.0, 5.0));
    assert_eq!(
        fault(&actions),
        Some("started task b on device 0, which is not idle with an empty queue")
    );
    // FIFO queues b behind a instead.
    assert!(starts(&actions).is_empty());
    assert_eq!(
        starts(&core.handle(5.0, Input::Finished { task: 0, ok: true })),
        vec![(1, vec![0], 5.0)]
    );
}

#[test]
fn gang_tasks_cannot_take_a_queue_position() {
    let mut core = core(2, |view, _| {
        Ok(view
            .pending
            .iter()
            .map(|&k| assign(k, &[0, 1], Some(0), None))
            .collect())
    });
    let (_, actions) = core.submit(
        0.0,
        TaskSpec {
            gpus: 2,
            ..spec("g", 0.0, 1.0)
        },
    );
    assert_eq!(
        fault(&actions),
        Some("assigned gang task g at position 0: gang tasks join the end of their queues")
    );
    assert_eq!(starts(&actions), vec![(0, vec![0, 1], 1.0)]);
}

#[test]
fn alternative_device_counts_divide_the_work() {
    // b needs 2 devices, or 1 or 3, and takes 4 s on 2: on 1 device it takes 8 s.
    // c offers 2 or 3; placing it on 1 device is refused.
    let mut core = core(2, |view, _| {
        Ok(view
            .pending
            .iter()
            .map(|&k| match view.task(k).id.as_str() {
                "b" => assign(k, &[1], None, None),
                _ => assign(k, &[0], None, None),
            })
            .collect())
    });
    let (b, actions) = core.submit(
        0.0,
        TaskSpec {
            gpus: 2,
            alt_gpus: vec![1, 3],
            ..spec("b", 0.0, 4.0)
        },
    );
    assert_eq!(starts(&actions), vec![(b, vec![1], 8.0)]);
    let (_, actions) = core.submit(
        0.0,
        TaskSpec {
            gpus: 2,
            alt_gpus: vec![3],
            ..spec("c", 0.0, 4.0)
        },
    );
    assert_eq!(
        fault(&actions),
        Some("placed task c on 1 device(s); it needs 2 (or 3)")
    );
}

#[test]
fn clocks_scale_the_run_time_and_are_checked() {
    // default app: t = t_default * (0.5/fc + 0.5/fm); T4 core range is 300..1590 MHz.
    let slow = Clocks {
        core: 0.5,
        mem: 1.0,
    };
    let mut core = core(1, move |view, _| {
        Ok(view
            .pending
            .iter()
            .map(|&k| assign(k, &[0], None, Some(slow)))
            .collect())
    });
    let (_, actions) = core.submit(0.0, spec("a", 0.0, 4.0));
    assert_eq!(starts(&actions), vec![(0, vec![0], 6.0)]);
    assert!(matches!(&moves(&actions)[0], Action::Start { clocks, .. } if *clocks == slow));

    // Clocks between supported ones round up (T4: 15 MHz steps down from
    // 1590), memory to the lowest clock at or above it, and the run time
    // is that of the clocks set.
    let between = Clocks {
        core: 0.51,
        mem: 0.5,
    };
    let mut core3 = self::core(1, move |view, _| {
        Ok(view
            .pending
            .iter()
            .map(|&k| assign(k, &[0], None, Some(between)))
            .collect())
    });
    let (_, actions) = core3.submit(0.0, spec("a", 0.0, 4.0));
    let set = Clocks {
        core: 825.0 / 1590.0,
        mem: 1.0,
    };
    let runtime = 4.0 * (0.5 / set.core + 0.5);
    assert_eq!(starts(&actions), vec![(0, vec![0], runtime)]);
    assert!(matches!(&moves(&actions)[0], Action::Start { clocks, .. } if *clocks == set));

    let mut core2 = self::core(1, |view, _| {
        Ok(view
            .pending
            .iter()
            .map(|&k| {
                assign(
                    k,
                    &[0],
                    None,
                    Some(Clocks {
                        core: 1.5,
                        mem: 1.0,
                    }),
                )
            })
            .collect())
    });
    let (_, actions) = core2.submit(0.0, spec("a", 0.0, 4.0));
    assert!(fault(&actions).unwrap().starts_with(
        "asked for clocks core 1.5 mem 1 on device 0 (T4), outside core 0.189..1.000"
    ));
}

#[test]
fn a_policy_may_wait_for_a_timer() {
    // Hold everything until t = 5, then queue it all on device 0.
    let mut core = core(1, |view, event| match event {
        Event::Timer => Ok(view
            .pending
            .iter()
            .map(|&k| assign(k, &[0], None, None))
            .collect()),
        Event::Arrived { .. } => Ok(vec![Decision::WakeAt { time: 5.0 }]),
        _ => Ok(vec![]),
    });
    let (_, actions) = core.submit(0.0, spec("a", 0.0, 1.0));
    assert_eq!(actions, vec![Action::WakeAt { time: 5.0 }]);
    assert_eq!(
        starts(&core.handle(5.0, Input::Timer)),
        vec![(0, vec![0], 1.0)]
    );
}

#[test]
fn stranded_tasks_are_handed_to_fifo() {
    let mut core = core(1, |_, _| Ok(vec![]));
    let (_, actions) = core.submit(0.0, spec("a", 0.0, 1.0));
    assert!(actions.is_empty());
    let actions = core.handle(0.0, Input::Stalled);
    assert_eq!(
        fault(&actions),
        Some("left 1 task(s) pending with nothing running and no wake-up asked for")
    );
    assert_eq!(starts(&actions), vec![(0, vec![0], 1.0)]);
}

#[test]
fn mig_layout_requests_are_a_policy_fault_unless_allowed() {
    let mut core = core(1, |_, _| {
        Ok(vec![Decision::MigLayout {
            gpu: 0,
            layout: "3g.20gb,3g.20gb".into(),
        }])
    });
    let (_, actions) = core.submit(0.0, spec("a", 0.0, 1.0));
    assert_eq!(
        fault(&actions),
        Some(
            "asked for MIG layout \"3g.20gb,3g.20gb\" on GPU 0: policies may not change MIG \
             layouts on this agent (agent.toml [mig] allow_policy = false)"
        )
    );
    assert_eq!(starts(&actions).len(), 1);
}

#[test]
fn tasks_no_device_could_hold_are_rejected_before_the_policy_sees_them() {
    let mut core = core(2, |_, _| panic!("the policy must not be asked"));
    let cases = [
        (
            TaskSpec {
                mem_gb: 20.0,
                ..spec("big", 0.0, 1.0)
            },
            "needs 20 GB; the largest device has 16 GB",
        ),
        (
            TaskSpec {
                gpus: 3,
                ..spec("wide", 0.0, 1.0)
            },
            "needs 3 GPUs at once; the host has 2",
        ),
        (
            TaskSpec {
                gpus: 2,
                runtimes: vec![1.0, f64::INFINITY],
                ..spec("half", 0.0, 1.0)
            },
            "needs 2 GPU(s) with 1 GB each and a finite run time; only 1 qualify",
        ),
    ];
    for (task, reason) in cases {
        let (key, actions) = core.submit(0.0, task);
        assert_eq!(
            actions,
            vec![Action::Reject {
                task: key,
                reason: reason.into()
            }]
        );
    }
    assert_eq!(core.unfinished(), 0);
}

#[test]
fn availability_follows_tasks_that_end_early_or_late() {
    use std::sync::{Arc, Mutex};
    let seen = Arc::new(Mutex::new(Vec::new()));
    let log = seen.clone();
    let mut core = core(1, move |view, _| {
        log.lock().unwrap().push(view.devices[0].available_at);
        Ok(view
            .pending
            .iter()
            .map(|&k| assign(k, &[0], None, None))
            .collect())
    });
    core.submit(0.0, spec("a", 0.0, 10.0)); // sees 0
    core.submit(1.0, spec("b", 1.0, 5.0)); // sees 10 (a's expected end)
    core.handle(4.0, Input::Finished { task: 0, ok: true }); // a ends early; b starts at 4 → sees 9
    core.submit(5.0, spec("c", 5.0, 1.0)); // sees 9
    assert_eq!(*seen.lock().unwrap(), vec![0.0, 10.0, 9.0, 9.0]);
}

/// A run that ends off its expected time moves its device's projection by
/// the queue's work from now (kept as the queue changes); with a gang task
/// queued there, the queues are walked again.
#[test]
fn availability_after_an_off_time_end_counts_the_queue_with_or_without_gangs() {
    use std::sync::{Arc, Mutex};
    let seen = Arc::new(Mutex::new(Vec::new()));
    let log = seen.clone();
    let mut core = core(2, move |view, _| {
        let at: Vec<f64> = view.devices.iter().map(|d| d.available_at).collect();
        log.lock().unwrap().push(at);
        Ok(view
            .pending
            .iter()
            .map(|&k| match view.task(k).gpus {
                1 => assign(k, &[0], None, None),
                _ => assign(k, &[0, 1], None, None),
            })
            .collect())
    });
    core.submit(0.0, spec("a", 0.0, 10.0)); // runs on 0 until 10
    core.submit(0.0, spec("b", 0.0, 5.0));
    core.submit(0.0, spec("c", 0.0, 2.0));
    // a ends late: b and c run from 12.
    core.handle(12.0, Input::Finished { task: 0, ok: true });
    let gang = TaskSpec {
        gpus: 2,
        ..spec("g", 13.0, 1.0)
    };
    core.submit(13.0, gang); // on both from 19
    core.submit(13.0, spec("d", 13.0, 1.0));
    // b ends early, with the gang queued on device 0: c from 16, g from 18.
    core.handle(16.0, Input::Finished { task: 1, ok: true });
    assert_eq!(
        *seen.lock().unwrap(),
        vec![
            vec![0.0, 0.0],
            vec![10.0, 0.0],
            vec![15.0, 0.0],
            vec![19.0, 12.0],
            vec![19.0, 13.0],
            vec![20.0, 20.0],
            vec![20.0, 19.0],
        ]
    );
}

#[test]
fn switching_policy_offers_the_new_one_every_pending_task() {
    let mut core = core(2, |_, _| Ok(vec![]));
    core.submit(0.0, spec("a", 0.0, 1.0));
    core.submit(0.0, spec("b", 0.0, 1.0));
    assert_eq!(core.pending().len(), 2);
    let fifo = crate::policy::builtin_fifo();
    let actions = core.set_policy(1.0, PolicyInstance::new("fifo", fifo.policy));
    assert_eq!(starts(&actions), vec![(0, vec![0], 1.0), (1, vec![1], 1.0)]);
    assert!(core.pending().is_empty());
    assert_eq!(core.policy_name(), "fifo");
}

#[test]
fn admission_tells_the_submit_rejection_without_recording_a_task() {
    let core = core(2, |_, _| panic!("the policy must not be asked"));
    let big = TaskSpec {
        mem_gb: 20.0,
        ..spec("big", 0.0, 1.0)
    };
    assert_eq!(
        core.admit(big).err().as_deref(),
        Some("needs 20 GB; the largest device has 16 GB")
    );
    assert!(core.admit(spec("ok", 0.0, 1.0)).is_ok());
    assert_eq!(core.unfinished(), 0);
}

#[test]
fn an_admitted_task_is_judged_again_only_on_a_new_shape_of_the_host() {
    let a100 = catalogue::lookup("A100-SXM4-40GB").unwrap();
    let mut core = Core::new(
        Host::of_models([a100]).devices,
        crate::policy::builtin_fifo(),
    );
    let big = || TaskSpec {
        mem_gb: 20.0,
        ..spec("big", 0.0, 1.0)
    };
    // On the shape it was judged on, it is taken as it is, under its name.
    let admitted = core.admit(big()).unwrap().named("t1");
    let (key, actions) = core.submit_admitted(0.0, admitted);
    assert_eq!(starts(&actions), vec![(key, vec![0], 1.0)]);
    assert_eq!(core.task(key).unwrap().id.as_str(), "t1");
    // Admitted whole, then the GPU is split into instances too small for it
    // before the task is handed over: it is judged again, and rejected as
    // `submit` rejects it.
    let admitted = core.admit(big()).unwrap();
    core.handle(
        1.0,
        Input::Finished {
            task: key,
            ok: true,
        },
    );
    core.handle(
        1.0,
        Input::Offline {
            device: 0,
            interrupt: false,
        },
    );
    core.repartition(1.0, 0, &requests(&["3g.20gb", "3g.20gb"]))
        .unwrap();
    let (key, actions) = core.submit_admitted(1.0, admitted);
    let reason = core.admit(big()).unwrap_err();
    assert_eq!(actions, vec![Action::Reject { task: key, reason }]);
    let (again, actions) = core.submit(1.0, big());
    assert_eq!(
        actions,
        vec![Action::Reject {
            task: again,
            reason: core.admit(big()).unwrap_err()
        }]
    );
}

#[test]
fn cancelling_a_waiting_task_frees_its_queue_place() {
    use std::sync::{Arc, Mutex};
    let events = Arc::new(Mutex::new(Vec::new()));
    let log = events.clone();
    // Queues every task on device 0, except "p" which it leaves pending.
    let mut core = core(1, move |view, event| {
        log.lock().unwrap().push(format!("{event:?}"));
        Ok(view
            .pending
            .iter()
            .filter(|&&k| view.task(k).id.as_str() != "p")
            .map(|&k| assign(k, &[0], None, None))
            .collect())
    });
    core.submit(0.0, spec("a", 0.0, 10.0)); // starts
    core.submit(0.0, spec("b", 0.0, 5.0)); // queued behind a
    core.submit(0.0, spec("c", 0.0, 1.0)); // queued behind b
    core.submit(0.0, spec("p", 0.0, 1.0)); // pending
    assert_eq!(core.cancel(1.0, 1).unwrap(), vec![]);
    assert_eq!(core.cancel(1.0, 3).unwrap(), vec![]);
    assert_eq!(core.pending(), &[] as &[TaskKey]);
    assert_eq!(
        core.cancel(1.0, 0).unwrap_err(),
        "task a is Running, not waiting"
    );
    assert_eq!(
        core.cancel(1.0, 1).unwrap_err(),
        "task b is Done, not waiting"
    );
    // a ends: c, not the cancelled b, starts next.
    let actions = core.handle(10.0, Input::Finished { task: 0, ok: true });
    assert_eq!(starts(&actions), vec![(2, vec![0], 1.0)]);
    assert_eq!(core.unfinished(), 1);
    let events = events.lock().unwrap();
    assert_eq!(
        events[4..6],
        [
            "Finished { task: 1, ok: false }".to_string(),
            "Finished { task: 3, ok: false }".to_string()
        ]
    );
}

/// A run-time overrun sends the overrunning device's local queue back to the
/// pending queue, in arrival order, and the policy (here FIFO, earliest
/// start) places it again by the new projection: onto the other device as
/// soon as that one frees earlier.
#[test]
fn an_overrun_returns_its_devices_queue_to_the_policy() {
    let t4 = catalogue::lookup("T4").unwrap();
    let mut core = Core::new(
        Host::of_models([t4, t4]).devices,
        crate::policy::builtin_fifo(),
    );
    let (a, actions) = core.submit(0.0, spec("a", 0.0, 1.0));
    assert_eq!(starts(&actions), vec![(a, vec![0], 1.0)]);
    let (x, actions) = core.submit(0.0, spec("x", 0.0, 1.95));
    assert_eq!(starts(&actions), vec![(x, vec![1], 1.95)]);
    let waiting: Vec<TaskKey> = ["b", "c", "d"]
        .iter()
        .map(|id| core.submit(0.0, spec(id, 0.0, 0.3)).0)
        .collect();
    // All three wait behind a on device 0 (free at 1.9 < 1.95).
    assert_eq!(core.local_queue(0), waiting);
    assert!(core.local_queue(1).is_empty());

    // At its expected end, a is still running.
    let actions = core.handle(1.0, Input::Overran { task: a });
    assert!(actions.contains(&Action::Overrunning {
        task: a,
        until: 2.0
    }));
    assert!(starts(&actions).is_empty(), "nothing is free yet");
    // Re-placed: b on device 1 (free at 1.95 < 2), c on device 0 (2 < 2.25),
    // d on device 1 (2.25 < 2.3).
    assert_eq!(core.local_queue(0), vec![waiting[1]]);
    assert_eq!(core.local_queue(1), vec![waiting[0], waiting[2]]);
    assert!(core.pending().is_empty());

    // x ends: b starts on device 1 instead of waiting for a.
    let actions = core.handle(1.95, Input::Finished { task: x, ok: true });
    assert_eq!(starts(&actions), vec![(waiting[0], vec![1], 0.3)]);
    // A late notice for a task that has ended changes nothing.
    core.handle(2.5, Input::Finished { task: a, ok: true });
    assert!(core.handle(2.5, Input::Overran { task: a }).is_empty());
}

/// A core with the built-in FIFO over `n` T4s.
fn fifo_core(n: usize) -> Core {
    let t4 = catalogue::lookup("T4").unwrap();
    Core::new(
        Host::of_models(std::iter::repeat_n(t4, n)).devices,
        crate::policy::builtin_fifo(),
    )
}

/// A device that fails: its running task is interrupted, its local queue
/// goes back to the policy (FIFO here) in arrival order and is placed on
/// the other device; nothing starts on it, and a policy that names it is
/// refused, until it is back online.
#[test]
fn a_failed_device_interrupts_its_task_and_gets_no_placement_until_it_is_back() {
    let mut core = fifo_core(2);
    let a = core.submit(0.0, spec("a", 0.0, 5.0)).0; // device 0
    let x = core.submit(0.0, spec("x", 0.0, 5.0)).0; // device 1
    let [b, c, d] = ["b", "c", "d"].map(|id| core.submit(0.0, spec(id, 0.0, 1.0)).0);
    assert_eq!(core.local_queue(0), vec![b, d]);
    assert_eq!(core.local_queue(1), vec![c]);

    let actions = core.handle(
        1.0,
        Input::Offline {
            device: 0,
            interrupt: true,
        },
    );
    assert_eq!(
        moves(&actions),
        vec![Action::Interrupt { task: a, device: 0 }]
    );
    assert!(!core.online(0));
    // b and d join c behind x on device 1, in arrival order.
    assert!(core.local_queue(0).is_empty());
    assert_eq!(core.local_queue(1), vec![c, b, d]);
    assert!(core.pending().is_empty());
    // A second failure report only asks again to stop a.
    let again = Input::Offline {
        device: 0,
        interrupt: true,
    };
    let actions = core.handle(1.0, again);
    assert_eq!(actions, vec![Action::Interrupt { task: a, device: 0 }]);
    assert_eq!(core.local_queue(1), vec![c, b, d]);

    // a's end frees device 0, but nothing starts on it while it is offline.
    assert!(core
        .handle(1.5, Input::Finished { task: a, ok: false })
        .is_empty());
    let e = core.submit(2.0, spec("e", 2.0, 1.0)).0;
    assert_eq!(core.local_queue(1), vec![c, b, d, e]);
    assert_eq!(core.unfinished(), 5);

    // Back online: the next task starts on it at once.
    assert!(core.handle(3.0, Input::Online { device: 0 }).is_empty());
    assert!(core.online(0));
    let (f, actions) = core.submit(3.0, spec("f", 3.0, 1.0));
    assert_eq!(starts(&actions), vec![(f, vec![0], 1.0)]);
    // Device 1's queue runs in order.
    let actions = core.handle(5.0, Input::Finished { task: x, ok: true });
    assert_eq!(starts(&actions), vec![(c, vec![1], 1.0)]);
}

#[test]
fn decisions_naming_an_offline_device_are_refused() {
    use std::sync::{Arc, Mutex};
    let seen = Arc::new(Mutex::new(Vec::new()));
    let log = seen.clone();
    // Puts everything on device 0, whatever its state.
    let mut core = core(2, move |view, event| {
        if let Event::DeviceChanged { device } = event {
            log.lock()
                .unwrap()
                .push((*device, view.devices[*device as usize].online));
        }
        Ok(view
            .pending
            .iter()
            .map(|&k| assign(k, &[0], None, None))
            .collect())
    });
    let offline = Input::Offline {
        device: 0,
        interrupt: true,
    };
    assert!(core.handle(0.0, offline.clone()).is_empty(), "nothing ran");
    assert!(core.handle(0.0, Input::Online { device: 0 }).is_empty());
    assert!(core.handle(0.0, offline).is_empty());
    // The policy heard each change and saw the device's state.
    assert_eq!(
        *seen.lock().unwrap(),
        vec![(0, false), (0, true), (0, false)]
    );
    let (a, actions) = core.submit(0.0, spec("a", 0.0, 1.0));
    assert_eq!(
        fault(&actions),
        Some("placed task a on device 0, which is offline")
    );
    // The fallback places it on the online device.
    assert_eq!(starts(&actions), vec![(a, vec![1], 1.0)]);
}

/// A task that asked to be queued again goes back to the pending queue in
/// its arrival place when its device fails, and runs again elsewhere.
#[test]
fn an_interrupted_task_can_be_queued_again() {
    let mut core = fifo_core(2);
    let a = core.submit(0.0, spec("a", 0.0, 4.0)).0; // device 0
    let x = core.submit(0.0, spec("x", 0.0, 2.0)).0; // device 1
    let b = core.submit(0.0, spec("b", 0.0, 1.0)).0; // device 1, at 2
    assert_eq!(core.local_queue(1), vec![b]);
    let actions = core.handle(
        1.0,
        Input::Offline {
            device: 0,
            interrupt: true,
        },
    );
    assert_eq!(actions, vec![Action::Interrupt { task: a, device: 0 }]);
    // The driver stopped a and queues it again: FIFO appends it to device
    // 1's queue, behind b.
    assert_eq!(
        core.handle(1.2, Input::Requeue { task: a }),
        vec![Action::Assigned { task: a }]
    );
    assert_eq!(core.local_queue(1), vec![b, a]);
    assert_eq!(core.unfinished(), 3);
    let actions = core.handle(2.0, Input::Finished { task: x, ok: true });
    assert_eq!(starts(&actions), vec![(b, vec![1], 1.0)]);
    let actions = core.handle(3.0, Input::Finished { task: b, ok: true });
    assert_eq!(starts(&actions), vec![(a, vec![1], 4.0)]);
    // The overrun check due at its first run's end (4) is stale now.
    assert!(core.handle(4.0, Input::Overran { task: a }).is_empty());
    let actions = core.handle(7.0, Input::Overran { task: a });
    assert_eq!(
        actions,
        vec![Action::Overrunning {
            task: a,
            until: 11.0
        }]
    );
}

/// Without `interrupt` a device drains: its running task runs to its end,
/// its queue goes elsewhere, and nothing new starts on it.
#[test]
fn a_drained_device_finishes_its_task_and_takes_no_other() {
    let mut core = fifo_core(2);
    let a = core.submit(0.0, spec("a", 0.0, 2.0)).0; // device 0
    let x = core.submit(0.0, spec("x", 0.0, 3.0)).0; // device 1
    let b = core.submit(0.0, spec("b", 0.0, 1.0)).0; // device 0, at 2
    assert_eq!(core.local_queue(0), vec![b]);
    let actions = core.handle(
        1.0,
        Input::Offline {
            device: 0,
            interrupt: false,
        },
    );
    assert!(moves(&actions).is_empty(), "a runs on: {actions:?}");
    assert_eq!(core.local_queue(1), vec![b]);
    // It fails while draining: now a is stopped.
    let failed = Input::Offline {
        device: 0,
        interrupt: true,
    };
    assert_eq!(
        core.handle(1.5, failed),
        vec![Action::Interrupt { task: a, device: 0 }]
    );
    assert!(core
        .handle(2.0, Input::Finished { task: a, ok: true })
        .is_empty());
    let actions = core.handle(3.0, Input::Finished { task: x, ok: true });
    assert_eq!(starts(&actions), vec![(b, vec![1], 1.0)]);
}

/// A gang task queued on a device that goes offline leaves every queue it
/// was in; tasks that need more devices than are online wait for them
/// without a policy fault, and are not rejected.
#[test]
fn tasks_needing_an_offline_device_wait_for_it() {
    let mut core = fifo_core(2);
    let a = core.submit(0.0, spec("a", 0.0, 1.0)).0; // device 0
    let gang = TaskSpec {
        gpus: 2,
        ..spec("g", 0.0, 1.0)
    };
    let g = core.submit(0.0, gang.clone()).0;
    assert_eq!(
        (core.local_queue(0), core.local_queue(1)),
        (vec![g], vec![g])
    );
    let offline = Input::Offline {
        device: 1,
        interrupt: true,
    };
    assert!(core.handle(0.5, offline).is_empty(), "nothing ran on it");
    assert_eq!((core.local_queue(0), core.local_queue(1)), (vec![], vec![]));
    assert_eq!(core.pending(), [g]);
    // A new gang task is accepted too: the host has two devices.
    let (h, actions) = core.submit(
        0.6,
        TaskSpec {
            id: "h".into(),
            ..gang
        },
    );
    assert!(actions.is_empty());
    assert_eq!(
        core.handle(1.0, Input::Finished { task: a, ok: true }),
        vec![]
    );
    // Nothing runs and both wait: that is no fault of the policy.
    assert!(core.handle(1.0, Input::Stalled).is_empty());
    assert_eq!(core.pending(), [g, h]);
    let actions = core.handle(2.0, Input::Online { device: 1 });
    assert_eq!(starts(&actions), vec![(g, vec![0, 1], 1.0)]);
    assert_eq!(core.local_queue(0), vec![h]);
}

#[test]
fn a_dvfs_note_is_kept_for_a_placed_task_and_refused_for_a_pending_one() {
    use gpu_agent_plugin_api::DvfsClass;
    let mut core = core(1, |view, _| {
        Ok(view
            .pending
            .iter()
            .flat_map(|&k| {
                [
                    assign(k, &[0], None, None),
                    Decision::Dvfs {
                        task: k,
                        class: DvfsClass::DeadlinePrior,
                        readjusted: true,
                    },
                ]
            })
            .collect())
    });
    let (key, actions) = core.submit(0.0, spec("a", 0.0, 4.0));
    assert_eq!(fault(&actions), None);
    assert_eq!(core.dvfs(key), Some((DvfsClass::DeadlinePrior, true)));

    let mut early = self::core(1, |view, _| {
        Ok(view
            .pending
            .iter()
            .map(|&k| Decision::Dvfs {
                task: k,
                class: DvfsClass::EnergyPrior,
                readjusted: false,
            })
            .collect())
    });
    let (_, actions) = early.submit(0.0, spec("a", 0.0, 4.0));
    assert_eq!(
        fault(&actions),
        Some("described the clocks of task key 0, which is not placed")
    );
}

/// Two A100-SXM4-40GB at speed 2, GPU 1 split into 2g.10gb ×2 and 3g.20gb
/// (first fit with backtracking puts them at 0, 2 and 4): devices 0 (whole),
/// 1 (split), 2 `1/mig/2g.10gb@0`, 3 `1/mig/2g.10gb@2`, 4 `1/mig/3g.20gb@4`.
fn mig_core(
    f: impl FnMut(&View<'_>, &Event) -> Result<Vec<Decision>, String> + Send + 'static,
) -> Core {
    use crate::placement::{place_or_explain, Request};
    let a100 = catalogue::lookup("A100-SXM4-40GB").unwrap();
    let mut gpus = Host::of_models([a100, a100]).devices;
    for g in &mut gpus {
        g.speed = 2.0;
    }
    let table = a100.mig.unwrap();
    let requests: Vec<Request> = ["3g.20gb", "2g.10gb", "2g.10gb"]
        .iter()
        .map(|t| Request::parse(table, t).unwrap())
        .collect();
    let layout = place_or_explain(table, &requests).unwrap();
    Core::new(Host::partitioned(gpus, &[(1, layout)]).devices, scripted(f))
}

fn rejection(actions: &[Action]) -> Option<&str> {
    actions.iter().find_map(|a| match a {
        Action::Reject { reason, .. } => Some(reason.as_str()),
        _ => None,
    })
}

#[test]
fn mig_instances_are_devices_with_their_profiles_memory_and_a_share_of_speed() {
    use std::sync::{Arc, Mutex};
    type Seen = (u32, f64, f64, bool, Option<(u32, String, u32, u32)>, bool);
    let seen: Arc<Mutex<Vec<Seen>>> = Arc::default();
    let out = seen.clone();
    let mut core = mig_core(move |view, _| {
        *out.lock().unwrap() = view
            .devices
            .iter()
            .map(|d| {
                (
                    d.index,
                    d.memory_gb,
                    d.speed,
                    d.online,
                    d.mig
                        .into_option()
                        .map(|m| (m.parent, m.profile.to_string(), m.start, m.compute_slices)),
                    d.clock_range == gpu_agent_plugin_api::ClockRange::DEFAULT_ONLY,
                )
            })
            .collect();
        Ok(Vec::new())
    });
    core.submit(0.0, spec("a", 0.0, 1.0));
    let mig = |p: &str, s| Some((1, p.to_string(), s, if p == "3g.20gb" { 3 } else { 2 }));
    assert_eq!(
        *seen.lock().unwrap(),
        vec![
            (0, 40.0, 2.0, true, None, false),
            (1, 40.0, 2.0, false, None, false),
            (2, 9.625, 2.0 * 2.0 / 7.0, true, mig("2g.10gb", 0), true),
            (3, 9.625, 2.0 * 2.0 / 7.0, true, mig("2g.10gb", 2), true),
            (4, 19.5, 2.0 * 3.0 / 7.0, true, mig("3g.20gb", 4), true),
        ]
    );
    // The split GPU never comes online: its instances are the devices.
    assert!(core.handle(1.0, Input::Online { device: 1 }).is_empty());
    assert!(!core.online(1));
}

#[test]
fn a_task_no_instance_or_whole_gpu_can_hold_is_rejected_with_its_reason() {
    let mut core = mig_core(|_, _| Ok(Vec::new()));
    let big = TaskSpec {
        mem_gb: 41.0,
        ..spec("big", 0.0, 1.0)
    };
    let (_, actions) = core.submit(0.0, big);
    assert_eq!(
        rejection(&actions),
        Some("needs 41 GB; the largest device has 40 GB")
    );
    // Three GPUs at once: one whole GPU is left for gangs.
    let gang = TaskSpec {
        gpus: 2,
        ..spec("gang", 0.0, 1.0)
    };
    let (_, actions) = core.submit(0.0, gang);
    assert_eq!(
        rejection(&actions),
        Some(
            "needs 2 GPUs at once; the host has 1 not split into MIG instances \
             (a gang never spans MIG devices)"
        )
    );
}

#[test]
fn a_gang_on_a_mig_device_or_a_split_gpu_is_a_policy_fault() {
    // A host with two whole GPUs beside the split one.
    use crate::placement::{place_or_explain, Request};
    let a100 = catalogue::lookup("A100-SXM4-40GB").unwrap();
    let table = a100.mig.unwrap();
    let layout = place_or_explain(table, &[Request::parse(table, "7g.40gb").unwrap()]).unwrap();
    let devices = Host::partitioned(Host::of_models([a100; 3]).devices, &[(2, layout)]).devices;
    let policy = |devices: &'static [u32]| {
        scripted(move |view: &View<'_>, _: &Event| {
            Ok(view
                .pending
                .iter()
                .map(|&k| assign(k, devices, None, None))
                .collect())
        })
    };
    let gang = TaskSpec {
        gpus: 2,
        ..spec("g", 0.0, 4.0)
    };
    let mut core = Core::new(devices.clone(), policy(&[0, 3]));
    let (key, actions) = core.submit(0.0, gang.clone());
    assert_eq!(
        fault(&actions),
        Some(
            "placed gang task g on MIG device 3 (2/mig/7g.40gb@0): a gang never spans MIG devices"
        )
    );
    // The fallback keeps the gang on whole GPUs.
    assert_eq!(starts(&actions), vec![(key, vec![0, 1], 4.0)]);
    let mut core = Core::new(devices.clone(), policy(&[2]));
    let (_, actions) = core.submit(0.0, spec("s", 0.0, 4.0));
    assert_eq!(
        fault(&actions),
        Some("placed task s on device 2, a GPU split into MIG instances (its instances are the devices)")
    );
    // Alone, a task may run on a MIG instance.
    let mut core = Core::new(devices, policy(&[3]));
    let (key, actions) = core.submit(0.0, spec("m", 0.0, 4.0));
    assert_eq!(fault(&actions), None);
    assert_eq!(starts(&actions), vec![(key, vec![3], 4.0)]);
}

/// What a policy heard: `DeviceChanged` devices and `Finished` tasks.
#[derive(Debug, PartialEq)]
enum Heard {
    Changed(u32),
    Finished(TaskKey, bool),
}

/// [`mig_core`] run by a policy that places a pending task `ID@D` on device
/// `D` when `D` is online (or always, when the id starts with `!`), and
/// leaves other tasks pending; it records what it heard and the devices it
/// saw (index, online, MIG label).
#[allow(clippy::type_complexity)]
fn by_name_core() -> (
    Core,
    std::sync::Arc<std::sync::Mutex<Vec<Heard>>>,
    std::sync::Arc<std::sync::Mutex<Vec<(u32, bool, Option<String>)>>>,
) {
    use std::sync::{Arc, Mutex};
    let heard: Arc<Mutex<Vec<Heard>>> = Arc::default();
    let seen: Arc<Mutex<Vec<(u32, bool, Option<String>)>>> = Arc::default();
    let (h, s) = (heard.clone(), seen.clone());
    let core = mig_core(move |view, event| {
        match event {
            Event::DeviceChanged { device } => h.lock().unwrap().push(Heard::Changed(*device)),
            Event::Finished { task, ok } => h.lock().unwrap().push(Heard::Finished(*task, *ok)),
            _ => {}
        }
        *s.lock().unwrap() = view
            .devices
            .iter()
            .map(|d| {
                let mig = d
                    .mig
                    .into_option()
                    .map(|m| format!("{}/mig/{}@{}", m.parent, m.profile, m.start));
                (d.index, d.online, mig)
            })
            .collect();
        Ok(view
            .pending
            .iter()
            .filter_map(|&k| {
                let id = view.task(k).id.as_str();
                let d: u32 = id.split_once('@')?.1.parse().ok()?;
                let online = view.devices.get(d as usize).is_some_and(|v| v.online);
                (online || id.starts_with('!')).then(|| assign(k, &[d], None, None))
            })
            .collect())
    });
    (core, heard, seen)
}

fn requests(texts: &[&str]) -> Vec<crate::placement::Request> {
    let table = catalogue::lookup("A100-SXM4-40GB").unwrap().mig.unwrap();
    texts
        .iter()
        .map(|t| crate::placement::Request::parse(table, t).unwrap())
        .collect()
}

#[test]
fn repartitioning_refuses_a_gpu_that_is_not_drained_or_a_bad_layout_and_changes_nothing() {
    let (mut core, heard, _) = by_name_core();
    let (a, actions) = core.submit(0.0, spec("a@4", 0.0, 6.0));
    // 3g.20gb at speed 2 · 3/7.
    assert_eq!(starts(&actions), vec![(a, vec![4], 7.0)]);
    let (q, _) = core.submit(0.0, spec("q@4", 0.0, 6.0));
    assert_eq!(core.local_queue(4), vec![q]);
    let error = |core: &mut Core, gpu, texts: &[&str]| {
        core.repartition(1.0, gpu, &requests(texts))
            .unwrap_err()
            .to_string()
    };
    assert_eq!(
        error(&mut core, 1, &["7g.40gb"]),
        "GPU 1 is not drained: device 1/mig/2g.10gb@0 is online"
    );
    for d in [2, 3, 4] {
        core.handle(
            1.0,
            Input::Offline {
                device: d,
                interrupt: false,
            },
        );
    }
    // The drain sent q back to the pending queue; a still runs.
    assert_eq!(core.pending(), &[q]);
    assert_eq!(
        error(&mut core, 1, &["7g.40gb"]),
        "GPU 1 is not drained: device 1/mig/3g.20gb@4 runs task a@4"
    );
    assert_eq!(
        error(&mut core, 0, &["3g.20gb"]),
        "GPU 0 is not drained: device 0 is online"
    );
    assert_eq!(
        error(&mut core, 1, &["4g.20gb", "4g.20gb"]),
        "GPU 1: 4g.20gb: at most 1 instance(s)"
    );
    assert_eq!(
        error(&mut core, 1, &["4g.20gb", "3g.20gb@0"]),
        "GPU 1: 4g.20gb, 3g.20gb@0 cannot all be placed on one GPU: no layout gives each its own memory slices at a valid start"
    );
    let a100_80 = catalogue::lookup("A100-SXM4-80GB").unwrap().mig.unwrap();
    let foreign = crate::placement::Request::parse(a100_80, "3g.40gb").unwrap();
    assert_eq!(
        core.repartition(1.0, 1, &[foreign]).unwrap_err(),
        super::RepartitionError::Layout {
            gpu: 1,
            reason: "3g.40gb is not a profile of A100-SXM4-40GB".into()
        }
    );
    assert_eq!(
        core.repartition(1.0, 2, &[]).unwrap_err(),
        super::RepartitionError::NoSuchGpu(2)
    );
    assert_eq!(
        core.repartition(1.0, 9, &[]).unwrap_err(),
        super::RepartitionError::NoSuchGpu(9)
    );
    let t4 = catalogue::lookup("T4").unwrap();
    let mut t4_core = Core::new(Host::of_models([t4]).devices, crate::policy::builtin_fifo());
    t4_core.handle(
        0.0,
        Input::Offline {
            device: 0,
            interrupt: false,
        },
    );
    assert_eq!(
        t4_core
            .repartition(0.0, 0, &requests(&["1g.5gb"]))
            .unwrap_err()
            .to_string(),
        "GPU 0 (T4) does not support MIG"
    );
    // MIG off on a GPU without MIG: nothing to change.
    assert_eq!(t4_core.repartition(0.0, 0, &[]).unwrap().devices, vec![0]);
    // The layout it has: nothing changes, no drain needed.
    let same = core
        .repartition(1.0, 1, &requests(&["2g.10gb@2", "3g.20gb", "2g.10gb"]))
        .unwrap();
    assert_eq!(
        same,
        super::Repartition {
            devices: vec![2, 3, 4],
            retired: Vec::new(),
            actions: Vec::new()
        }
    );
    assert_eq!(core.devices().len(), 5);
    assert!(!heard.lock().unwrap().contains(&Heard::Finished(q, false)));
}

#[test]
fn a_drained_gpu_takes_a_new_layout_at_new_indices_and_strands_nothing_silently() {
    let (mut core, heard, seen) = by_name_core();
    for d in [2, 3, 4] {
        core.handle(
            0.0,
            Input::Offline {
                device: d,
                interrupt: false,
            },
        );
    }
    let (w, _) = core.submit(0.0, spec("w@3", 0.0, 1.0));
    heard.lock().unwrap().clear();
    // MIG off: GPU 1 is whole again, its instances retired; all offline.
    let whole = core.repartition(1.0, 1, &[]).unwrap();
    assert_eq!(
        whole,
        super::Repartition {
            devices: vec![1],
            retired: vec![2, 3, 4],
            actions: Vec::new()
        }
    );
    assert_eq!(
        *heard.lock().unwrap(),
        vec![
            Heard::Changed(1),
            Heard::Changed(2),
            Heard::Changed(3),
            Heard::Changed(4)
        ]
    );
    let label = |p: &str| Some(p.to_string());
    assert_eq!(
        *seen.lock().unwrap(),
        vec![
            (0, true, None),
            (1, false, None),
            (2, false, label("1/mig/2g.10gb@0")),
            (3, false, label("1/mig/2g.10gb@2")),
            (4, false, label("1/mig/3g.20gb@4")),
        ]
    );
    // A retired instance never comes back, and naming it is a fault.
    assert!(core.handle(2.0, Input::Online { device: 3 }).is_empty());
    assert!(!core.online(3));
    assert!(core.handle(2.0, Input::Online { device: 1 }).is_empty());
    assert!(core.online(1));
    assert_eq!(core.pending(), &[w]);
    let devices: Vec<String> = core.devices().map(|d| d.label()).collect();
    assert_eq!(
        devices,
        [
            "0",
            "1",
            "1/mig/2g.10gb@0",
            "1/mig/2g.10gb@2",
            "1/mig/3g.20gb@4"
        ]
    );
    // Two whole GPUs hold a gang, left pending by the policy.
    let gang = TaskSpec {
        gpus: 2,
        ..spec("gang", 2.0, 1.0)
    };
    let (g, actions) = core.submit(2.0, gang);
    assert_eq!(rejection(&actions), None);
    // Split it again: the new instances take indices 5 and 6, never 2..4;
    // the gang no device set can hold any more is rejected, naming the change.
    core.handle(
        3.0,
        Input::Offline {
            device: 1,
            interrupt: false,
        },
    );
    heard.lock().unwrap().clear();
    let split = core
        .repartition(3.0, 1, &requests(&["3g.20gb", "3g.20gb"]))
        .unwrap();
    assert_eq!(split.devices, vec![5, 6]);
    assert_eq!(split.retired, Vec::<u32>::new());
    assert_eq!(
        split.actions,
        vec![Action::Reject {
            task: g,
            reason: "needs 2 GPUs at once; the host has 1 not split into MIG instances \
                     (a gang never spans MIG devices) \
                     (GPU 1's MIG layout changed to 3g.20gb@0, 3g.20gb@4)"
                .into()
        }]
    );
    assert_eq!(
        *heard.lock().unwrap(),
        vec![
            Heard::Finished(g, false),
            Heard::Changed(1),
            Heard::Changed(5),
            Heard::Changed(6)
        ]
    );
    let instance: Vec<(f64, f64, bool)> = core
        .devices()
        .skip(5)
        .map(|d| (d.memory_gb, d.speed, d.schedulable()))
        .collect();
    assert_eq!(instance, vec![(19.5, 2.0 * 3.0 / 7.0, true); 2]);
    assert!(!core.online(5) && !core.online(6));
    assert_eq!(core.unfinished(), 1); // w, which named a retired device
                                      // Online, a new instance takes work.
    core.handle(4.0, Input::Online { device: 6 });
    let (z, actions) = core.submit(4.0, spec("z@6", 4.0, 6.0));
    assert_eq!(starts(&actions), vec![(z, vec![6], 7.0)]);
    let (_, actions) = core.submit(4.0, spec("!x@3", 4.0, 6.0));
    assert_eq!(
        fault(&actions),
        Some("placed task !x@3 on device 3 (1/mig/2g.10gb@2), a MIG instance a layout change removed")
    );
}

#[test]
fn a_core_at_default_clocks_keeps_them_after_a_layout_change() {
    let a100 = catalogue::lookup("A100-SXM4-40GB").unwrap();
    let mut core = Core::new(
        Host::of_models([a100]).devices,
        crate::policy::builtin_fifo(),
    )
    .at_default_clocks();
    core.handle(
        0.0,
        Input::Offline {
            device: 0,
            interrupt: false,
        },
    );
    let split = core.repartition(0.0, 0, &requests(&["7g.40gb"])).unwrap();
    assert_eq!(split.devices, vec![1]);
    core.handle(
        0.0,
        Input::Offline {
            device: 0,
            interrupt: false,
        },
    );
    core.handle(
        0.0,
        Input::Offline {
            device: 1,
            interrupt: false,
        },
    );
    assert_eq!(core.repartition(1.0, 0, &[]).unwrap().retired, vec![1]);
    core.handle(1.0, Input::Online { device: 0 });
    let (k, actions) = core.submit(1.0, spec("a", 1.0, 2.0));
    assert_eq!(starts(&actions), vec![(k, vec![0], 2.0)]);
    assert!(matches!(
        &moves(&actions)[..],
        [Action::Start { clocks, .. }] if *clocks == Clocks::DEFAULT
    ));
}

fn mig_kinds(actions: &[Action]) -> Vec<String> {
    actions
        .iter()
        .filter_map(|a| match a {
            Action::MigDraining { gpu, layout } => {
                let names: Vec<String> = layout.iter().map(|i| i.to_string()).collect();
                Some(format!("draining {gpu} [{}]", names.join(", ")))
            }
            Action::ApplyMigLayout { gpu, layout } => {
                let names: Vec<String> = layout.iter().map(|i| i.to_string()).collect();
                Some(format!("apply {gpu} [{}]", names.join(", ")))
            }
            _ => None,
        })
        .collect()
}

fn apply_of(actions: &[Action]) -> Vec<String> {
    mig_kinds(actions)
        .into_iter()
        .filter(|k| k.starts_with("apply"))
        .collect()
}

#[test]
fn a_mig_change_drains_without_interrupting_and_applies_once_idle() {
    use super::{MigPhase, OnBusy, RepartitionError};
    let (mut core, heard, _) = by_name_core();
    // a on the 3g.20gb (6 / (2 · 3/7) = 7 s), q queued behind it, r on the
    // first 2g.10gb (6 / (2 · 2/7) = 10.5 s).
    let (a, _) = core.submit(0.0, spec("a@4", 0.0, 6.0));
    let (q, _) = core.submit(0.0, spec("q@4", 0.0, 6.0));
    let (r, actions) = core.submit(0.0, spec("r@2", 0.0, 6.0));
    assert_eq!(starts(&actions), vec![(r, vec![2], 10.5)]);
    heard.lock().unwrap().clear();
    let actions = core
        .begin_mig_change(1.0, 1, &requests(&["7g.40gb"]), OnBusy::Wait)
        .unwrap();
    assert!(matches!(
        &actions[0],
        Action::MigDraining { gpu: 1, layout } if layout.len() == 1 && layout[0].to_string() == "7g.40gb@0"
    ));
    // Nothing is interrupted and nothing applies while a and r run.
    assert_eq!(actions.len(), 1);
    assert_eq!(
        *heard.lock().unwrap(),
        vec![Heard::Changed(2), Heard::Changed(3), Heard::Changed(4)]
    );
    assert_eq!(core.pending(), &[q]);
    assert!(core.local_queue(4).is_empty());
    assert!(!core.online(2) && !core.online(3) && !core.online(4));
    assert_eq!(core.mig_change(1).unwrap().phase, MigPhase::Draining);
    assert_eq!(core.mig_change(1).unwrap().drained, vec![2, 3, 4]);
    assert_eq!(core.mig_drain_waits_for(1), vec![a, r]);
    // No device of the GPU comes back meanwhile, and no second change starts.
    assert!(core.handle(2.0, Input::Online { device: 4 }).is_empty());
    assert!(!core.online(4));
    assert_eq!(
        core.begin_mig_change(2.0, 1, &requests(&["3g.20gb"]), OnBusy::Wait),
        Err(RepartitionError::ChangeUnderWay {
            gpu: 1,
            phase: MigPhase::Draining
        })
    );
    assert_eq!(
        core.mig_applied(2.0, 1).unwrap_err().to_string(),
        "GPU 1's MIG layout is already changing (draining)"
    );
    assert!(apply_of(&core.handle(7.0, Input::Finished { task: a, ok: true })).is_empty());
    let actions = core.handle(10.5, Input::Finished { task: r, ok: true });
    assert_eq!(apply_of(&actions), vec!["apply 1 [7g.40gb@0]"]);
    assert_eq!(core.mig_change(1).unwrap().phase, MigPhase::Applying);
    assert_eq!(
        core.cancel_mig_change(11.0, 1).unwrap_err().to_string(),
        "GPU 1's MIG layout is already changing (applying)"
    );
    heard.lock().unwrap().clear();
    let done = core.mig_applied(11.0, 1).unwrap();
    assert_eq!((done.devices, done.retired), (vec![5], vec![2, 3, 4]));
    assert_eq!(core.mig_change(1), None);
    assert!(core.online(5));
    assert_eq!(
        *heard.lock().unwrap(),
        vec![
            Heard::Changed(1),
            Heard::Changed(2),
            Heard::Changed(3),
            Heard::Changed(4),
            Heard::Changed(5),
            Heard::Changed(5)
        ]
    );
    // q named a retired instance and waits; the new 7g.40gb takes work
    // (6 / 2 = 3 s).
    assert_eq!(core.pending(), &[q]);
    let (z, actions) = core.submit(11.0, spec("z@5", 11.0, 6.0));
    assert_eq!(starts(&actions), vec![(z, vec![5], 3.0)]);
}

#[test]
fn a_refused_or_invalid_mig_change_changes_nothing() {
    use super::{Busy, OnBusy, RepartitionError};
    let (mut core, heard, _) = by_name_core();
    core.submit(0.0, spec("a@4", 0.0, 6.0));
    let (q, _) = core.submit(0.0, spec("q@4", 0.0, 6.0));
    heard.lock().unwrap().clear();
    let begin = |core: &mut Core, gpu, texts: &[&str], on_busy| {
        core.begin_mig_change(1.0, gpu, &requests(texts), on_busy)
    };
    assert_eq!(
        begin(&mut core, 1, &["7g.40gb"], OnBusy::Refuse),
        Err(RepartitionError::Busy {
            gpu: 1,
            device: "1/mig/3g.20gb@4".into(),
            what: Busy::Running("a@4".into())
        })
    );
    assert_eq!(
        begin(&mut core, 1, &["4g.20gb", "4g.20gb"], OnBusy::Wait)
            .unwrap_err()
            .to_string(),
        "GPU 1: 4g.20gb: at most 1 instance(s)"
    );
    assert_eq!(
        begin(&mut core, 4, &[], OnBusy::Wait),
        Err(RepartitionError::NoSuchGpu(4))
    );
    // The layout it has (in any order): nothing to do, nothing tracked.
    assert_eq!(
        begin(
            &mut core,
            1,
            &["2g.10gb", "3g.20gb", "2g.10gb"],
            OnBusy::Refuse
        ),
        Ok(Vec::new())
    );
    assert!(core.mig_changes().is_empty());
    assert!((2..5).all(|d| core.online(d)));
    assert!(heard.lock().unwrap().is_empty());
    assert_eq!(core.local_queue(4), vec![q]);
    // An idle GPU with nothing queued is no reason to refuse: it applies at once.
    let actions = begin(&mut core, 0, &["3g.20gb", "3g.20gb"], OnBusy::Refuse).unwrap();
    assert_eq!(
        mig_kinds(&actions)[1..],
        ["apply 0 [3g.20gb@0, 3g.20gb@4]".to_string()]
    );
    let t4 = catalogue::lookup("T4").unwrap();
    let mut t4_core = Core::new(Host::of_models([t4]).devices, crate::policy::builtin_fifo());
    assert_eq!(
        t4_core
            .begin_mig_change(0.0, 0, &requests(&["1g.5gb"]), OnBusy::Wait)
            .unwrap_err()
            .to_string(),
        "GPU 0 (T4) does not support MIG"
    );
    assert_eq!(
        t4_core.cancel_mig_change(0.0, 0),
        Err(RepartitionError::NoChange(0))
    );
    assert_eq!(
        t4_core.mig_failed(0.0, 0, true).unwrap_err().to_string(),
        "GPU 0 has no MIG layout change under way"
    );
}

#[test]
fn a_cancelled_drain_brings_back_only_the_devices_it_took() {
    use super::OnBusy;
    let (mut core, _, _) = by_name_core();
    let (a, _) = core.submit(0.0, spec("a@4", 0.0, 6.0));
    let (q, _) = core.submit(0.0, spec("q@4", 0.0, 6.0));
    // An admin drained 3 before.
    core.handle(
        0.0,
        Input::Offline {
            device: 3,
            interrupt: false,
        },
    );
    core.begin_mig_change(1.0, 1, &requests(&["7g.40gb"]), OnBusy::Wait)
        .unwrap();
    assert_eq!(core.mig_change(1).unwrap().drained, vec![2, 4]);
    assert_eq!(core.pending(), &[q]);
    let actions = core.cancel_mig_change(2.0, 1).unwrap();
    assert!(mig_kinds(&actions).is_empty());
    assert_eq!(core.mig_change(1), None);
    assert!(core.online(2) && !core.online(3) && core.online(4));
    // q went back to 4's queue behind a, which ran on untouched.
    assert_eq!(core.local_queue(4), vec![q]);
    let actions = core.handle(7.0, Input::Finished { task: a, ok: true });
    assert_eq!(starts(&actions), vec![(q, vec![4], 7.0)]);
}

#[test]
fn a_failed_apply_brings_the_gpu_back_only_when_restored() {
    use super::OnBusy;
    let (mut core, _, _) = by_name_core();
    for (now, restored) in [(0.0, true), (1.0, false)] {
        let actions = core
            .begin_mig_change(now, 0, &requests(&["7g.40gb"]), OnBusy::Wait)
            .unwrap();
        assert_eq!(apply_of(&actions), vec!["apply 0 [7g.40gb@0]"]);
        assert!(!core.online(0));
        core.mig_failed(now, 0, restored).unwrap();
        assert_eq!(core.mig_change(0), None);
        assert_eq!(core.online(0), restored);
        assert_eq!(core.devices().len(), 5);
    }
    // The failed GPU takes no task; one that fits elsewhere runs there.
    let (k, actions) = core.submit(1.0, spec("k@0", 1.0, 1.0));
    assert!(starts(&actions).is_empty());
    assert_eq!(core.pending(), &[k]);
}

/// Two whole A100-SXM4-40GB run by a policy that asks once for GPU 0 to be
/// split as `layout` and places every pending task on device 1; it records
/// the events it heard (`DeviceChanged` devices).
fn asking_core(
    layout: &'static str,
    allow: bool,
) -> (Core, std::sync::Arc<std::sync::Mutex<Vec<u32>>>) {
    use std::sync::{Arc, Mutex};
    let heard: Arc<Mutex<Vec<u32>>> = Arc::default();
    let h = heard.clone();
    let mut asked = false;
    let a100 = catalogue::lookup("A100-SXM4-40GB").unwrap();
    let core = Core::new(
        Host::of_models([a100, a100]).devices,
        scripted(move |view, event| {
            if let Event::DeviceChanged { device } = event {
                h.lock().unwrap().push(*device);
            }
            let mut decisions: Vec<Decision> = Vec::new();
            if !std::mem::replace(&mut asked, true) {
                decisions.push(Decision::MigLayout {
                    gpu: 0,
                    layout: layout.into(),
                });
            }
            let free = view.devices[1].running.is_none() && view.devices[1].queue.is_empty();
            decisions.extend(
                view.pending
                    .iter()
                    .take(usize::from(free))
                    .map(|&k| assign(k, &[1], None, None)),
            );
            Ok(decisions)
        }),
    )
    .allowing_mig_policy(allow);
    (core, heard)
}

#[test]
fn an_allowed_policy_request_drains_and_applies_like_an_operators() {
    let (mut core, heard) = asking_core("3g.20gb@4, 3g.20gb", true);
    let (_, actions) = core.submit(0.0, spec("t", 0.0, 1.0));
    assert_eq!(fault(&actions), None);
    assert_eq!(
        mig_kinds(&actions),
        vec![
            "draining 0 [3g.20gb@0, 3g.20gb@4]".to_string(),
            "apply 0 [3g.20gb@0, 3g.20gb@4]".to_string(),
        ]
    );
    // The task went to device 1.
    assert_eq!(starts(&actions).len(), 1);
    assert_eq!(starts(&actions)[0].1, vec![1]);
    // The policy heard of GPU 0 going offline once its decisions applied.
    assert_eq!(*heard.lock().unwrap(), vec![0]);
    assert!(!core.online(0));
    let done = core.mig_applied(0.5, 0).unwrap();
    assert_eq!(done.devices, vec![2, 3]);
    assert!(core.online(2) && core.online(3));
}

#[test]
fn a_policy_request_that_is_invalid_or_not_allowed_is_a_fault_and_changes_nothing() {
    for (layout, allow, reason) in [
        (
            "3g.20gb,3g.20gb",
            false,
            "asked for MIG layout \"3g.20gb,3g.20gb\" on GPU 0: policies may not change MIG \
             layouts on this agent (agent.toml [mig] allow_policy = false)",
        ),
        (
            "3g.20gb,9g.1gb",
            true,
            "asked for MIG layout \"3g.20gb,9g.1gb\" on GPU 0: unknown MIG profile \"9g.1gb\"; \
             this model's: 1g.5gb, 1g.5gb+me, 1g.10gb, 2g.10gb, 3g.20gb, 4g.20gb, 7g.40gb",
        ),
        (
            "4g.20gb,3g.20gb@0",
            true,
            "asked for MIG layout \"4g.20gb,3g.20gb@0\" on GPU 0: GPU 0: 4g.20gb, 3g.20gb@0 cannot \
             all be placed on one GPU: no layout gives each its own memory slices at a valid start",
        ),
    ] {
        let (mut core, _) = asking_core(layout, allow);
        let (_, actions) = core.submit(0.0, spec("t", 0.0, 1.0));
        assert_eq!(fault(&actions), Some(reason));
        assert!(mig_kinds(&actions).is_empty());
        assert!(core.mig_changes().is_empty());
        assert!(core.online(0));
    }
}

/// The GPUs of `actions`' [`Action::MigHeld`]s, each with the layout asked.
fn held_of(actions: &[Action]) -> Vec<(u32, String)> {
    actions
        .iter()
        .filter_map(|a| match a {
            Action::MigHeld { gpu, layout } => Some((*gpu, super::repartition::describe(layout))),
            _ => None,
        })
        .collect()
}

#[test]
fn a_held_gpu_keeps_its_layout_until_the_driver_lets_it_go() {
    use super::{OnBusy, RepartitionError};
    // A policy that asks at every call for both A100s split in two.
    let a100 = catalogue::lookup("A100-SXM4-40GB").unwrap();
    let mut core = Core::new(
        Host::of_models([a100, a100]).devices,
        scripted(|_: &View<'_>, _: &Event| {
            Ok((0..2)
                .map(|gpu| Decision::MigLayout {
                    gpu,
                    layout: "3g.20gb,3g.20gb".into(),
                })
                .collect())
        }),
    )
    .allowing_mig_policy(true);
    // The daemon's adoption of GPU 0: held, then offline without interrupt.
    core.hold_layout(0, true);
    let actions = core.handle(
        0.0,
        Input::Offline {
            device: 0,
            interrupt: false,
        },
    );
    assert_eq!(fault(&actions), None);
    // Refused at each call (one per event the policy heard).
    let held = held_of(&actions);
    assert!(!held.is_empty());
    assert!(held
        .iter()
        .all(|h| *h == (0, "3g.20gb@0, 3g.20gb@4".to_string())));
    // GPU 1, not held, changes.
    assert_eq!(
        mig_kinds(&actions),
        [
            "draining 1 [3g.20gb@0, 3g.20gb@4]",
            "apply 1 [3g.20gb@0, 3g.20gb@4]"
        ]
    );
    assert!(core.mig_change(0).is_none());
    assert_eq!(core.devices_of_gpu(0), [0]);
    // An operator's change is refused too, changing nothing.
    assert_eq!(
        core.begin_mig_change(1.0, 0, &requests(&["7g.40gb"]), OnBusy::Wait),
        Err(RepartitionError::Held(0))
    );
    assert_eq!(
        RepartitionError::Held(0).to_string(),
        "GPU 0's MIG layout is held by work the agent did not place"
    );
    assert!(core.mig_change(0).is_none());
    // Let go (the job released), the next request changes it.
    core.hold_layout(0, false);
    let actions = core.handle(2.0, Input::Online { device: 0 });
    assert_eq!(fault(&actions), None);
    assert!(held_of(&actions).is_empty());
    assert_eq!(
        mig_kinds(&actions),
        [
            "draining 0 [3g.20gb@0, 3g.20gb@4]",
            "apply 0 [3g.20gb@0, 3g.20gb@4]"
        ]
    );
}

#[test]
fn stranded_by_names_the_waiting_tasks_a_layout_would_leave_without_a_device() {
    let (mut core, _, _) = by_name_core();
    // 30 GB: only GPU 0 (whole, 40 GB) holds it; the policy leaves it
    // pending (device 1 is split, never online).
    let big = TaskSpec {
        mem_gb: 30.0,
        ..spec("big@1", 0.0, 1.0)
    };
    let (b, actions) = core.submit(0.0, big);
    assert_eq!(rejection(&actions), None);
    assert_eq!(core.pending(), &[b]);
    assert_eq!(
        core.stranded_by(&[(0, requests(&["3g.20gb", "3g.20gb"]), true)]),
        Ok(vec![(
            b,
            "task big@1 (1 GPU(s) of 30 GB) would fit no device with GPU 0 as 3g.20gb@0, 3g.20gb@4"
                .to_string()
        )])
    );
    // GPU 1 whole again, or one 7g.40gb there: it still fits somewhere.
    assert_eq!(core.stranded_by(&[(1, Vec::new(), false)]), Ok(Vec::new()));
    assert_eq!(
        core.stranded_by(&[(1, requests(&["7g.40gb"]), true)]),
        Ok(Vec::new())
    );
    // Together with GPU 0 split, GPU 1's 7g.40gb holds it.
    assert_eq!(
        core.stranded_by(&[
            (0, requests(&["3g.20gb", "3g.20gb"]), true),
            (1, requests(&["7g.40gb"]), true)
        ]),
        Ok(Vec::new())
    );
    // The layout GPU 1 has: nothing changes.
    assert_eq!(
        core.stranded_by(&[(1, requests(&["2g.10gb", "2g.10gb", "3g.20gb"]), true)]),
        Ok(Vec::new())
    );
    assert_eq!(
        core.stranded_by(&[(5, Vec::new(), false)]),
        Err(super::RepartitionError::NoSuchGpu(5))
    );
    // Asking changed nothing.
    assert_eq!(core.pending(), &[b]);
    assert!(core.mig_changes().is_empty());
}

/// Ended tasks are dropped as the core goes: over 2,000 tasks on two
/// devices, never more than two live at once, the policies' view never
/// holds more than a few dozen, a task that ended is found until the next
/// call and not long after, and every task still starts and finishes once.
#[test]
fn ended_tasks_are_dropped_and_the_view_follows_the_live_ones() {
    use std::sync::{Arc, Mutex};
    let largest = Arc::new(Mutex::new(0usize));
    let seen = largest.clone();
    let mut core = core(2, move |view, event| {
        let mut most = seen.lock().unwrap();
        *most = (*most).max(view.held.len());
        if let Event::Finished { task, .. } = event {
            // The task the event names is in the view.
            assert_eq!(view.task(*task).key, *task);
        }
        // Every pending task goes to an idle device, if there is one.
        let mut idle: Vec<u32> = view
            .devices
            .iter()
            .filter(|d| d.running.is_none() && d.queue.is_empty())
            .map(|d| d.index)
            .collect();
        Ok(view
            .pending
            .iter()
            .filter_map(|&k| Some(assign(k, &[idle.pop()?], None, None)))
            .collect())
    });
    let mut running = std::collections::VecDeque::new();
    let mut started = 0;
    for i in 0..2000u32 {
        let now = f64::from(i);
        let (key, actions) = core.submit(now, spec(&format!("t{i}"), now, 0.5));
        assert_eq!(key, TaskKey::from(i));
        running.extend(starts(&actions).into_iter().map(|(k, _, _)| k));
        while let Some(k) = running.pop_front() {
            started += 1;
            let actions = core.handle(now + 0.5, Input::Finished { task: k, ok: true });
            // Until the next call it is still there, ended.
            assert_eq!(
                core.task(k).map(|t| t.state),
                Some(gpu_agent_plugin_api::TaskState::Done)
            );
            running.extend(starts(&actions).into_iter().map(|(k, _, _)| k));
        }
    }
    assert_eq!(started, 2000);
    assert_eq!(core.unfinished(), 0);
    // Long ended tasks are gone; their keys are not reused.
    assert!(core.task(0).is_none());
    let most = *largest.lock().unwrap();
    assert!(most <= 2 * 64 + 2, "the view held {most} tasks");
}

#[test]
fn mig_off_on_a_gpu_split_with_no_instance_is_a_change() {
    // MIG on and no instance made (what `nvidia-smi -mig 1` or mig-parted's
    // all-enabled leave): the GPU runs nothing, and MIG off must make it
    // whole again, not be taken as the layout it already has.
    use super::OnBusy;
    let a100 = catalogue::lookup("A100-SXM4-40GB").unwrap();
    let devices = Host::partitioned(Host::of_models([a100; 2]).devices, &[(1, Vec::new())]).devices;
    let mut core = Core::new(devices, scripted(|_: &View<'_>, _: &Event| Ok(Vec::new())));
    assert!(!core.online(1));
    assert_eq!(core.stranded_by(&[(1, Vec::new(), false)]), Ok(Vec::new()));
    let actions = core.begin_mig_change(1.0, 1, &[], OnBusy::Wait).unwrap();
    assert_eq!(mig_kinds(&actions), ["draining 1 []", "apply 1 []"]);
    let done = core.mig_applied(1.0, 1).unwrap();
    assert_eq!(done.devices, [1]);
    assert!(core.online(1));
    // Whole now: MIG off again changes nothing.
    assert!(core
        .begin_mig_change(2.0, 1, &[], OnBusy::Wait)
        .unwrap()
        .is_empty());
    // MIG on with no instance, asked on purpose: a 30 GB task only a whole
    // A100 holds would be stranded with both split so; the GPU drains and
    // then takes nothing.
    let big = TaskSpec {
        mem_gb: 30.0,
        ..spec("big", 0.0, 1.0)
    };
    let (b, _) = core.submit(3.0, big);
    assert_eq!(
        core.stranded_by(&[(0, Vec::new(), true), (1, Vec::new(), true)]),
        Ok(vec![(
            b,
            "task big (1 GPU(s) of 30 GB) would fit no device with GPU 0 in MIG mode with no instance and GPU 1 in MIG mode with no instance".to_string()
        )])
    );
    core.cancel(3.0, b).unwrap();
    let actions = core
        .begin_mig_on_without_instances(4.0, 1, OnBusy::Wait)
        .unwrap();
    assert_eq!(mig_kinds(&actions), ["draining 1 []", "apply 1 []"]);
    assert!(core.mig_change(1).unwrap().mig_on);
    let done = core.mig_applied(4.0, 1).unwrap();
    assert!(done.devices.is_empty());
    assert!(!core.online(1));
    assert!(core
        .begin_mig_on_without_instances(5.0, 1, OnBusy::Wait)
        .unwrap()
        .is_empty());
    // On a GPU without MIG: refused.
    let t4 = catalogue::lookup("T4").unwrap();
    let mut whole = Core::new(
        Host::of_models([t4]).devices,
        scripted(|_: &View<'_>, _: &Event| Ok(Vec::new())),
    );
    assert_eq!(
        whole
            .begin_mig_on_without_instances(0.0, 0, OnBusy::Wait)
            .unwrap_err()
            .to_string(),
        "GPU 0 (T4) does not support MIG"
    );
}

#[test]
fn a_waiting_task_is_behind_its_queue_and_starts_when_the_plan_says() {
    use super::Waiting;
    let mut core = core(1, |view, _| {
        Ok(view
            .pending
            .iter()
            .map(|&k| assign(k, &[0], None, None))
            .collect())
    });
    let speed = core.devices().next().unwrap().speed;
    let a = core.submit(0.0, spec("a", 0.0, 10.0)).0;
    let b = core.submit(1.0, spec("b", 1.0, 4.0)).0;
    let c = core.submit(2.0, spec("c", 2.0, 1.0)).0;
    assert_eq!(core.waiting(a, 2.0), None, "a runs");
    assert_eq!(
        core.waiting(b, 2.0),
        Some(Waiting::Queued {
            device: 0,
            behind: Some(a),
            start: 10.0 / speed,
        })
    );
    assert_eq!(
        core.waiting(c, 2.0),
        Some(Waiting::Queued {
            device: 0,
            behind: Some(b),
            start: 14.0 / speed,
        })
    );
    // a overruns: the plan moves with the clock.
    let late = 20.0 / speed;
    assert_eq!(
        core.waiting(c, late),
        Some(Waiting::Queued {
            device: 0,
            behind: Some(b),
            start: late + 4.0 / speed,
        })
    );
}

#[test]
fn a_pending_task_names_the_devices_that_could_hold_it_by_state() {
    use super::Waiting;
    let mut core = fifo_core(3);
    let big = TaskSpec {
        gpus: 2,
        ..spec("g", 0.0, 1.0)
    };
    let a = core.submit(0.0, spec("a", 0.0, 5.0)).0; // device 0
    let offline = Input::Offline {
        device: 1,
        interrupt: false,
    };
    assert!(core.handle(0.0, offline).is_empty());
    let offline = Input::Offline {
        device: 2,
        interrupt: false,
    };
    assert!(core.handle(0.0, offline).is_empty());
    let g = core.submit(0.0, big).0;
    assert_eq!(core.pending(), [g]);
    assert_eq!(
        core.waiting(g, 0.5),
        Some(Waiting::Pending {
            offline: vec![1, 2],
            busy: vec![0],
            idle: vec![],
        })
    );
    core.handle(5.0, Input::Finished { task: a, ok: true });
    assert_eq!(
        core.waiting(g, 5.0),
        Some(Waiting::Pending {
            offline: vec![1, 2],
            busy: vec![],
            idle: vec![0],
        })
    );
}
