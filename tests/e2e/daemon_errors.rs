//! Every refusal has its named D-Bus error and a message naming the cause,
//! and leaves nothing behind.

use std::time::Duration;

use gpu_agent_dbus::{Dict, TaskStatus};
use zbus::zvariant::{OwnedValue, Value};

use crate::daemon::{dbus_error, spec, Daemon, AGENT};

const INVALID: &str = "org.gpuagent.Agent1.Error.InvalidArgument";
const UNSCHEDULABLE: &str = "org.gpuagent.Agent1.Error.Unschedulable";

fn v<'a>(x: impl Into<Value<'a>>) -> OwnedValue {
    OwnedValue::try_from(x.into()).expect("an owned value")
}

/// The four required keys, valid.
fn base() -> Dict {
    spec(10.0, 1.0, 60.0, 1.0).to_dict()
}

fn with(key: &str, value: OwnedValue) -> Dict {
    let mut d = base();
    d.insert(key.into(), value);
    d
}

#[test]
fn daemon_refusals_have_their_named_errors_and_store_nothing() {
    let d = Daemon::start();
    let first = d.submit(&spec(10.0, 1.0, 60.0, 1.0)).expect("Submit");
    assert_eq!(first, "t1");
    d.wait_state(&first, TaskStatus::Succeeded, Duration::from_secs(10));

    let keys =
        "workload, mem_gb, deadline, weight, gpus, gpus_alt, app, runtimes, command, env, name, requeue, client_token, workdir, output, error, umask";
    let cases: Vec<(&str, Dict, &str, String)> =
        vec![
        // A key left out takes its default, but a relative directory or
        // an error file without an output file is refused.
        (
            "relative workdir",
            with("workdir", v("proj")),
            INVALID,
            "key \"workdir\": expected an absolute directory, got \"proj\"".into(),
        ),
        (
            "error without output",
            with("error", v("e.txt")),
            INVALID,
            "key \"error\": given without \"output\"".into(),
        ),
        // Wrong types.
        (
            "workload as a string",
            with("workload", v("ten")),
            INVALID,
            "key \"workload\": expected type d (a number > 0), got s".into(),
        ),
        (
            "mem_gb as an integer",
            with("mem_gb", v(1u32)),
            INVALID,
            "key \"mem_gb\": expected type d (a number >= 0), got u".into(),
        ),
        (
            "gpus as a double",
            with("gpus", v(2.0)),
            INVALID,
            "key \"gpus\": expected type u (an integer >= 1), got d".into(),
        ),
        (
            "command as a string",
            with("command", v("/bin/true")),
            INVALID,
            "key \"command\": expected type as (a non-empty argv), got s".into(),
        ),
        (
            "requeue as an integer",
            with("requeue", v(1i32)),
            INVALID,
            "key \"requeue\": expected type b (a boolean), got i".into(),
        ),
        // Not finite.
        (
            "NaN workload",
            with("workload", v(f64::NAN)),
            INVALID,
            "key \"workload\": expected a number > 0, got NaN".into(),
        ),
        (
            "infinite deadline",
            with("deadline", v(f64::INFINITY)),
            INVALID,
            "key \"deadline\": expected a number >= 0, got inf".into(),
        ),
        (
            "-inf weight",
            with("weight", v(f64::NEG_INFINITY)),
            INVALID,
            "key \"weight\": expected a number > 0, got -inf".into(),
        ),
        (
            "NaN runtime",
            with("runtimes", v(vec![1.0, f64::NAN, 1.0, 1.0])),
            INVALID,
            "key \"runtimes\": expected numbers > 0 or inf, got NaN".into(),
        ),
        // Out of range.
        (
            "zero workload",
            with("workload", v(0.0)),
            INVALID,
            "key \"workload\": expected a number > 0, got 0".into(),
        ),
        (
            "negative memory",
            with("mem_gb", v(-1.0)),
            INVALID,
            "key \"mem_gb\": expected a number >= 0, got -1".into(),
        ),
        (
            "negative deadline",
            with("deadline", v(-5.0)),
            INVALID,
            "key \"deadline\": expected a number >= 0, got -5".into(),
        ),
        (
            "zero weight",
            with("weight", v(0.0)),
            INVALID,
            "key \"weight\": expected a number > 0, got 0".into(),
        ),
        (
            "zero gpus",
            with("gpus", v(0u32)),
            INVALID,
            "key \"gpus\": expected an integer >= 1, got 0".into(),
        ),
        (
            "empty program",
            with("command", v(vec![String::new()])),
            INVALID,
            "key \"command\": expected a program name first, got \"\"".into(),
        ),
        (
            "runtimes of another host",
            with("runtimes", v(vec![1.0, 2.0])),
            INVALID,
            "key \"runtimes\": expected 4 values (one per device of the host), got 2".into(),
        ),
        // Longer than its limit (docs/dbus.md): a 70,000-character name
        // was taken and broke `gpuctl tasks` for everyone.
        (
            "a name of 70,000 bytes",
            with("name", v("n".repeat(70_000))),
            INVALID,
            "key \"name\": expected at most 256 bytes, got 70000 bytes".into(),
        ),
        (
            "an argument of 200,000 bytes",
            with("command", v(vec!["/bin/echo".to_string(), "a".repeat(200_000)])),
            INVALID,
            "key \"command\": expected at most 131072 bytes, got 200000 bytes".into(),
        ),
        (
            "ten arguments of 120,000 bytes",
            with("command", v(vec!["a".repeat(120_000); 10])),
            INVALID,
            "keys \"command\" and \"env\": expected at most 1048576 bytes together, got 1200010"
                .into(),
        ),
        (
            "an output path of 5,000 bytes",
            with("output", v("o".repeat(5_000))),
            INVALID,
            "key \"output\": expected at most 4096 bytes, got 5000 bytes".into(),
        ),
        // Unknown keys and names.
        (
            "unknown key",
            with("priority", v(1.0)),
            INVALID,
            format!("unknown key \"priority\"; the keys are {keys}"),
        ),
        (
            "unknown profile",
            with("app", v("no-such-app")),
            INVALID,
            "key \"app\": unknown DVFS profile \"no-such-app\"; known: ".into(),
        ),
        // No device could ever hold it.
        (
            "too much memory",
            with("mem_gb", v(41.0)),
            UNSCHEDULABLE,
            "needs 41 GB; the largest device has 40 GB".into(),
        ),
        (
            "too many GPUs",
            with("gpus", v(5u32)),
            UNSCHEDULABLE,
            "needs 5 GPUs at once; the host has 4".into(),
        ),
        (
            "a gang too big for its memory",
            {
                let mut d = with("gpus", v(3u32));
                d.insert("mem_gb".into(), v(35.0));
                d
            },
            UNSCHEDULABLE,
            "needs 3 GPU(s) with 35 GB each and a finite run time; only 2 qualify".into(),
        ),
    ];
    for (what, dict, name, message) in cases {
        let (got_name, got_message) = dbus_error(d.submit_dict(dict));
        assert_eq!(got_name, name, "{what}: {got_message}");
        if message.ends_with(": ") {
            assert!(got_message.starts_with(&message), "{what}: {got_message}");
        } else {
            assert_eq!(got_message, message, "{what}");
        }
    }

    // busctl shows the daemon's message as it is.
    let out = d.busctl(&[
        "call", AGENT[0], AGENT[1], AGENT[2], "Submit", "a{sv}", "3", "workload", "d", "10",
        "mem_gb", "d", "1", "weight", "u", "1",
    ]);
    assert!(!out.status.success());
    assert_eq!(
        String::from_utf8_lossy(&out.stderr),
        "Call failed: key \"weight\": expected type d (a number > 0), got u\n"
    );

    let proxy = d.proxy();
    let (name, message) = dbus_error(d.block_on(proxy.get_task("t999")));
    assert_eq!(name, "org.gpuagent.Agent1.Error.NoSuchTask");
    assert_eq!(message, "no task \"t999\"");
    let (name, message) = dbus_error(d.block_on(proxy.cancel("t999")));
    assert_eq!(name, "org.gpuagent.Agent1.Error.NoSuchTask");
    assert_eq!(message, "no task \"t999\"");
    let (name, message) = dbus_error(d.block_on(proxy.set_policy("annealing")));
    assert_eq!(name, "org.gpuagent.Agent1.Error.UnknownPolicy");
    assert_eq!(
        message,
        "unknown policy \"annealing\"; available: fifo, greedy-eft"
    );
    let (name, message) = dbus_error(d.block_on(proxy.cancel(&first)));
    assert_eq!(name, "org.gpuagent.Agent1.Error.NotCancellable");
    assert_eq!(message, "task t1 already succeeded");
    let (name, message) = dbus_error(d.block_on(proxy.list_tasks("finished")));
    assert_eq!(name, INVALID);
    assert_eq!(
        message,
        "unknown task state \"finished\"; expected one of queued, assigned, running, \
         succeeded, failed, cancelled, lost, rejected"
    );
    for limit in [0, 10_001] {
        let (name, message) = dbus_error(d.block_on(proxy.list_tasks_page("", 0, limit)));
        assert_eq!(name, INVALID);
        assert_eq!(
            message,
            format!("limit must be from 1 to 10000, not {limit}")
        );
    }

    // Nothing was stored, the policy did not change, and no id was used up.
    let tasks = d.tasks();
    assert_eq!(tasks.len(), 1, "{tasks:?}");
    assert_eq!(tasks[0].state, TaskStatus::Succeeded);
    assert_eq!(d.block_on(proxy.policy()).expect("Policy"), "fifo");
    assert_eq!(d.submit(&spec(10.0, 1.0, 60.0, 1.0)).expect("Submit"), "t2");
    // And the refused tasks are not in the metrics as rejected either.
    let metrics =
        gpu_agent_dbus::metrics_from_dict(&d.block_on(proxy.metrics()).unwrap()).expect("metrics");
    assert!(metrics.rejected.is_empty(), "{:?}", metrics.rejected);
}
