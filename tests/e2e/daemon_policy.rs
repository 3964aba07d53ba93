//! Switching policy under load loses nothing.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use gpu_agent_dbus::TaskStatus;
use zbus::export::futures_core::Stream;

use crate::daemon::{spec, wait_for, Daemon};

const TASKS: usize = 100;
const CLIENTS: usize = 4;

#[test]
fn daemon_policy_switch_under_load_loses_nothing() {
    // 100 tasks of 10 units on 2.85 units/s of devices: about 350 model
    // seconds, 3.5 s of wall time at scale 100, time enough to switch twice.
    let d = Daemon::start();
    let _rt = d.enter();
    let proxy = d.proxy();

    // Every TaskChanged, from before the first submission.
    let signals: Arc<Mutex<Vec<(String, String)>>> = Arc::default();
    let stream = d.block_on(proxy.receive_task_changed()).expect("subscribe");
    let sink = signals.clone();
    let listener = d.spawn(async move {
        let mut stream = std::pin::pin!(stream);
        while let Some(signal) = std::future::poll_fn(|cx| stream.as_mut().poll_next(cx)).await {
            let args = signal.args().expect("TaskChanged arguments");
            sink.lock()
                .unwrap()
                .push((args.id().to_string(), args.state().to_string()));
        }
    });

    let clients: Vec<_> = (0..CLIENTS)
        .map(|_| {
            let proxy = d.new_client();
            d.spawn(async move {
                let mut ids = Vec::new();
                for _ in 0..TASKS / CLIENTS {
                    ids.push(
                        proxy
                            .submit(spec(10.0, 1.0, 600.0, 1.0).to_dict())
                            .await
                            .expect("Submit"),
                    );
                }
                ids
            })
        })
        .collect();
    let mut ids: Vec<String> = clients
        .into_iter()
        .flat_map(|c| d.block_on(c).expect("a client finished"))
        .collect();
    ids.sort_by_key(|id| id[1..].parse::<u32>().unwrap());
    assert_eq!(
        ids,
        (1..=TASKS).map(|n| format!("t{n}")).collect::<Vec<_>>()
    );

    let waiting = |tasks: &[gpu_agent_dbus::TaskInfo]| {
        tasks.iter().filter(|t| !t.state.is_terminal()).count()
    };
    let switch = |name: &str| {
        d.block_on(proxy.set_policy(name)).expect("SetPolicy");
        wait_for(
            &format!("Policy to read {name}"),
            Duration::from_secs(10),
            || (d.block_on(proxy.policy()).expect("Policy") == name).then_some(()),
        );
        let tasks = d.tasks();
        let left = waiting(&tasks);
        assert!(
            left > CLIENTS,
            "only {left} task(s) left when switching to {name}: the test did not test"
        );
        tasks
    };
    let at_first = switch("greedy-eft");
    let done_before = TASKS - waiting(&at_first);
    wait_for(
        "more tasks to end under greedy-eft",
        Duration::from_secs(20),
        || (TASKS - waiting(&d.tasks()) >= done_before + 8).then_some(()),
    );
    switch("fifo");

    let tasks = d.wait_all_ended(Duration::from_secs(30));
    assert_eq!(tasks.len(), TASKS);
    for t in &tasks {
        assert_eq!(t.state, TaskStatus::Succeeded, "{t:?}");
    }
    // Each task started once and ended once, as the signals tell it.
    wait_for("every succeeded signal", Duration::from_secs(10), || {
        let s = signals.lock().unwrap();
        (s.iter().filter(|(_, state)| state == "succeeded").count() >= TASKS).then_some(())
    });
    listener.abort();
    let signals = signals.lock().unwrap().clone();
    let mut per_task: HashMap<&str, Vec<&str>> = HashMap::new();
    for (id, state) in &signals {
        per_task.entry(id).or_default().push(state);
    }
    assert_eq!(per_task.len(), TASKS);
    for (id, states) in &per_task {
        let count = |s: &str| states.iter().filter(|x| **x == s).count();
        assert_eq!(states.first(), Some(&"queued"), "{id}: {states:?}");
        assert_eq!(count("queued"), 1, "{id}: {states:?}");
        assert_eq!(count("running"), 1, "{id}: {states:?}");
        assert_eq!(count("succeeded"), 1, "{id}: {states:?}");
        assert_eq!(states.last(), Some(&"succeeded"), "{id}: {states:?}");
    }
    let metrics = gpu_agent_dbus::metrics_from_dict(&d.block_on(proxy.metrics()).expect("Metrics"))
        .expect("metrics");
    assert_eq!(metrics.policy, "fifo");
    assert_eq!(metrics.tasks, TASKS);
    assert!(metrics.rejected.is_empty());
}
