//! GPU health: a mock GPU lost under load goes offline, its running task
//! fails (or runs again elsewhere with `requeue`), its queue runs on the
//! other GPUs, nothing is placed on it, no task is lost (also across a
//! kill -9), and it comes back when repaired and an admin says so.

use std::collections::HashSet;
use std::process::Output;
use std::time::Duration;

use serde_json::json;

use futures_util::StreamExt;
use gpu_agent_dbus::{Device1Proxy, SubmitSpec, TaskStatus};

use crate::daemon::{gpuctl, spec, wait_for, Daemon, AGENT};

fn ok(out: &Output) -> String {
    assert!(
        out.status.success(),
        "gpuctl failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// `busctl get-property` of device `gpu`'s property `name`.
fn device_property(d: &Daemon, gpu: u32, name: &str) -> serde_json::Value {
    d.busctl_json(&[
        "get-property",
        AGENT[0],
        &format!("/org/gpuagent/Agent1/gpu/{gpu}"),
        "org.gpuagent.Device1",
        name,
    ])
}

/// Waits until device `gpu` reads `online` with `health`.
pub(crate) fn wait_health(d: &Daemon, gpu: u32, online: bool, health: &str) {
    wait_for(
        &format!("GPU {gpu} online={online} health={health:?}"),
        Duration::from_secs(10),
        || {
            (device_property(d, gpu, "Online") == json!({"type": "b", "data": online})
                && device_property(d, gpu, "Health") == json!({"type": "s", "data": health}))
            .then_some(())
        },
    );
}

/// `gpuctl devices --json`: (index, online, health) per device.
fn devices(d: &Daemon) -> Vec<(u64, bool, String)> {
    let out = ok(&gpuctl(d, &["devices", "--json"]));
    let list: serde_json::Value = serde_json::from_str(&out).expect("gpuctl devices --json");
    list.as_array()
        .expect("an array")
        .iter()
        .map(|v| {
            (
                v["index"].as_u64().unwrap(),
                v["online"].as_bool().unwrap(),
                v["health"].as_str().unwrap().to_string(),
            )
        })
        .collect()
}

pub(crate) fn requeued(workload: f64) -> SubmitSpec {
    let mut s = spec(workload, 1.0, 1e5, 1.0);
    s.requeue = true;
    s
}

#[test]
fn daemon_health_a_gpu_lost_under_load_loses_no_task() {
    // The bundled host: A100 (speed 1), A100 (1), V100 (0.6), T4 (0.25);
    // time scale 100 (a modelled second is 10 ms); fifo (earliest start,
    // lowest index first).
    let mut d = Daemon::start();
    // Each runs 4 s on its GPU: a on 0, b on 1, c on 2, e on 3. All but a
    // have `requeue`, so that they run again after the kill -9 below.
    let a = d.submit(&spec(400.0, 1.0, 1e5, 1.0)).expect("Submit a");
    let b = d.submit(&requeued(400.0)).expect("Submit b");
    let c = d.submit(&requeued(240.0)).expect("Submit c");
    let e = d.submit(&requeued(100.0)).expect("Submit e");
    // Six more wait in the GPUs' local queues.
    let waiting: Vec<String> = (0..6)
        .map(|_| d.submit(&requeued(50.0)).expect("Submit"))
        .collect();
    for id in [&a, &b, &c, &e] {
        d.wait_state(id, TaskStatus::Running, Duration::from_secs(10));
    }
    assert_eq!(d.task(&a).devices, vec![0]);
    assert_eq!(d.task(&b).devices, vec![1]);
    let assigned = waiting
        .iter()
        .filter(|id| d.task(id).state == TaskStatus::Assigned)
        .count();
    assert_eq!(assigned, 6, "{:?}", d.tasks());

    // GPU 0 falls off the bus: a fails, GPU 0 goes offline.
    ok(&gpuctl(&d, &["mock", "inject", "0", "lost"]));
    let failed = d.wait_state(&a, TaskStatus::Failed, Duration::from_secs(10));
    assert_eq!(failed.reason.as_deref(), Some("GPU 0 went offline (lost)"));
    wait_health(&d, 0, false, "lost");
    // GPU 1 reports XID 79: b is queued again and runs elsewhere.
    ok(&gpuctl(&d, &["mock", "inject", "1", "xid", "79"]));
    wait_health(&d, 1, false, "xid 79: GPU has fallen off the bus");
    // An application's XID leaves GPU 2 online.
    ok(&gpuctl(&d, &["mock", "inject", "2", "xid", "13"]));
    wait_for("xid 13 logged", Duration::from_secs(10), || {
        d.stderr().contains("GPU 2: xid 13").then_some(())
    });
    assert_eq!(
        device_property(&d, 2, "Online"),
        json!({"type": "b", "data": true})
    );
    let table = ok(&gpuctl(&d, &["devices"]));
    assert!(table.contains("HEALTH"), "{table}");
    assert!(table.contains(" lost "), "{table}");

    // A crash now loses nothing, and the GPUs stay offline after it.
    d.kill9();
    d.restart();
    let tasks = d.wait_all_ended(Duration::from_secs(60));
    assert_eq!(tasks.len(), 10, "{tasks:?}");
    for t in &tasks {
        if t.id == a {
            assert_eq!(t.state, TaskStatus::Failed);
            continue;
        }
        assert_eq!(t.state, TaskStatus::Succeeded, "{t:?}");
        // Nothing ran on the lost GPUs after the loss.
        assert!(
            t.devices.iter().all(|&g| g >= 2),
            "{} ran on {:?}",
            t.id,
            t.devices
        );
    }
    assert_eq!(
        devices(&d)[..2],
        [
            (0, false, "lost".to_string()),
            (1, false, "xid 79: GPU has fallen off the bus".to_string())
        ]
    );

    let status = ok(&gpuctl(&d, &["status"]));
    assert!(status.contains("devices  4 (2 offline: 0, 1)"), "{status}");

    // The restarted mock GPU 0 is sound; lose it again so that it must be
    // repaired: while it does not answer, it cannot come back.
    ok(&gpuctl(&d, &["mock", "inject", "0", "lost"]));
    wait_for("GPU 0 lost again", Duration::from_secs(10), || {
        let out = gpuctl(&d, &["devices", "online", "0"]);
        let err = String::from_utf8_lossy(&out.stderr).into_owned();
        (!out.status.success() && err.contains("it does not answer")).then_some(err)
    });
    ok(&gpuctl(&d, &["mock", "repair", "0"]));
    assert_eq!(
        ok(&gpuctl(&d, &["devices", "online", "0"])),
        "GPU 0 is back online\n"
    );
    ok(&gpuctl(&d, &["devices", "online", "1"]));
    wait_health(&d, 0, true, "ok");
    wait_health(&d, 1, true, "ok");
    // Both take work again: with every GPU idle, fifo starts on 0 and 1.
    let new: Vec<String> = (0..2)
        .map(|_| d.submit(&spec(10.0, 1.0, 1e5, 1.0)).expect("Submit"))
        .collect();
    let used: HashSet<u32> = new
        .iter()
        .flat_map(|id| {
            d.wait_state(id, TaskStatus::Succeeded, Duration::from_secs(10))
                .devices
        })
        .collect();
    assert_eq!(used, HashSet::from([0, 1]));
}

#[test]
fn daemon_health_a_requeued_modelled_task_runs_its_whole_time_again() {
    // The bundled host at time scale 100: x, a modelled run, starts on A100
    // 0 (300 model s: 3 s); GPUs 1 and 2 are kept busy, so that when GPU 0
    // fails x runs again on the T4, 4 times slower (1,200 model s: 12 s).
    // Its first run's end, due 3 s after that start, belongs to a run that
    // is over: it must not end the second one.
    let d = Daemon::start();
    let x = d.submit(&requeued(300.0)).expect("Submit x");
    d.wait_state(&x, TaskStatus::Running, Duration::from_secs(10));
    assert_eq!(d.task(&x).devices, vec![0]);
    let busy: Vec<String> = (0..2)
        .map(|_| d.submit(&spec(1e5, 1.0, 1e6, 1.0)).expect("Submit"))
        .collect();
    for id in &busy {
        d.wait_state(id, TaskStatus::Running, Duration::from_secs(10));
    }
    ok(&gpuctl(&d, &["mock", "inject", "0", "xid", "79"]));
    wait_for("x runs again on the T4", Duration::from_secs(10), || {
        let t = d.task(&x);
        (t.state == TaskStatus::Running && t.devices == [3]).then_some(())
    });
    let done = d.wait_state(&x, TaskStatus::Succeeded, Duration::from_secs(60));
    let ran = done.finished.unwrap() - done.started.unwrap();
    // Stored times are wall seconds: 1,200 model s at scale 100.
    assert!(
        ran * 100.0 >= 1_200.0 - 1.0,
        "x ran {ran} s on the T4: {done:?}"
    );
}

#[test]
fn daemon_health_a_drained_gpu_finishes_its_task_and_takes_no_other() {
    let d = Daemon::start();
    let _rt = d.enter();
    let device = d.block_on(async {
        Device1Proxy::builder(d.conn())
            .path("/org/gpuagent/Agent1/gpu/0")
            .expect("a device path")
            .build()
            .await
            .expect("a Device1 proxy")
    });
    let mut health = d.block_on(device.receive_health_changed());
    let a = d.submit(&spec(200.0, 1.0, 1e5, 1.0)).expect("Submit a");
    d.wait_state(&a, TaskStatus::Running, Duration::from_secs(10));
    assert_eq!(
        ok(&gpuctl(&d, &["devices", "offline", "0"])),
        "GPU 0 is drained: it takes no new work\n"
    );
    wait_health(&d, 0, false, "drained");
    // The change was signalled (PropertiesChanged), not only readable.
    let signalled = d.block_on(async {
        tokio::time::timeout(Duration::from_secs(10), async {
            while let Some(change) = health.next().await {
                if change.get().await.ok().as_deref() == Some("drained") {
                    return true;
                }
            }
            false
        })
        .await
    });
    assert_eq!(signalled, Ok(true));
    let later: Vec<String> = (0..4)
        .map(|_| d.submit(&spec(10.0, 1.0, 1e5, 1.0)).expect("Submit"))
        .collect();
    assert_eq!(
        d.wait_state(&a, TaskStatus::Succeeded, Duration::from_secs(10))
            .devices,
        vec![0]
    );
    for id in &later {
        let t = d.wait_state(id, TaskStatus::Succeeded, Duration::from_secs(20));
        assert_ne!(t.devices, vec![0], "{id} ran on the drained GPU");
    }
    // Not a mock method for a stranger to the GPU: a bad index is named.
    let out = gpuctl(&d, &["devices", "online", "9"]);
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("no GPU 9; this host has 4"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}
