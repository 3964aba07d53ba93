//! Waiting tasks explain themselves: `gpuctl tasks` and `gpuctl task` show
//! why a task that has not started waits (behind a task in a device's queue,
//! a GPU draining for a MIG change, offline after an XID, held by an adopted
//! Slurm job) and when the policy's current plan starts it; the filters of
//! `gpuctl tasks` and `gpuctl cancel` choose tasks by state, user and age.
//!
//! At time scale 1 the tasks run an hour, so that nothing ends (and no
//! reason changes) while a test looks.

use std::process::Output;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use gpu_agent_dbus::{Dict, TaskInfo, TaskStatus};

use crate::daemon::{gpuctl, spec, wait_for, Daemon, Settings};

const LIMIT: Duration = Duration::from_secs(20);

fn daemon(gpus: u32) -> Daemon {
    Daemon::start_with(Settings {
        time_scale: 1.0,
        host: Some(format!(
            "[[gpu]]\nmodel = \"A100-SXM4-40GB\"\ncount = {gpus}\nspeed = 1.0\n"
        )),
        ..Settings::default()
    })
}

fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn success(out: &Output) -> String {
    assert!(
        out.status.success(),
        "gpuctl failed: {}{}",
        String::from_utf8_lossy(&out.stderr),
        stdout(out)
    );
    stdout(out)
}

/// The ids `gpuctl tasks ARGS --json` lists.
fn listed(d: &Daemon, args: &[&str]) -> Vec<String> {
    let args: Vec<&str> = ["tasks"]
        .into_iter()
        .chain(args.iter().copied())
        .chain(["--json"])
        .collect();
    let out = success(&gpuctl(d, &args));
    let tasks: Vec<TaskInfo> = serde_json::from_str(&out).expect("gpuctl tasks --json");
    tasks.into_iter().map(|t| t.id).collect()
}

/// The line of `text` that starts with `key`.
fn line<'a>(text: &'a str, key: &str) -> &'a str {
    text.lines()
        .find(|l| l.starts_with(key))
        .unwrap_or_else(|| panic!("no {key:?} line in\n{text}"))
}

#[test]
fn daemon_waiting_a_queued_task_names_the_task_before_it_and_its_expected_start() {
    let d = daemon(1);
    // fifo queues each task on the one GPU, in order.
    let t1 = d.submit(&spec(3600.0, 1.0, 1e6, 1.0)).unwrap();
    let running = d.wait_state(&t1, TaskStatus::Running, LIMIT);
    let t2 = d.submit(&spec(600.0, 1.0, 1e6, 1.0)).unwrap();
    let t3 = d.submit(&spec(60.0, 1.0, 1e6, 1.0)).unwrap();
    let second = d.wait_state(&t2, TaskStatus::Assigned, LIMIT);
    let third = d.wait_state(&t3, TaskStatus::Assigned, LIMIT);
    assert_eq!(
        d.task(&t1).waiting,
        None,
        "a running task waits for nothing"
    );
    let w2 = second.waiting.expect("t2 says why it waits");
    let w3 = third.waiting.expect("t3 says why it waits");
    assert_eq!(w2.reason, format!("queued on GPU 0 behind {t1}"));
    assert_eq!(w3.reason, format!("queued on GPU 0 behind {t2}"));
    // The plan: t1 runs its hour (speed 1), then t2 its ten minutes.
    let start2 = w2.expected_start.expect("t2's expected start");
    let start3 = w3.expected_start.expect("t3's expected start");
    let started = running.started.expect("t1 started");
    assert!(
        (start2 - (started + 3600.0)).abs() < 1.0,
        "{start2} vs {started}"
    );
    assert!(
        (start3 - (start2 + 600.0)).abs() < 1e-6,
        "{start3} vs {start2}"
    );

    let table = success(&gpuctl(&d, &["tasks"]));
    assert!(line(&table, "ID").ends_with("DEVICES (REASON)"), "{table}");
    let row = line(&table, &format!("{t2} "));
    assert!(
        row.contains(&format!("(queued on GPU 0 behind {t1})")) && row.contains(" ~"),
        "{table}"
    );
    let shown = success(&gpuctl(&d, &["task", &t3]));
    assert!(
        line(&shown, "waiting").ends_with(&format!("queued on GPU 0 behind {t2}")),
        "{shown}"
    );
    assert!(line(&shown, "expected start").contains("(in 1h"), "{shown}");

    // Filters: several states, a user, an age.
    assert_eq!(
        listed(&d, &["--state", "assigned"]),
        [t2.as_str(), t3.as_str()]
    );
    assert_eq!(
        listed(
            &d,
            &[
                "--state",
                "running,assigned",
                "--user",
                "root",
                "--since",
                "1h"
            ]
        ),
        [t1.as_str(), t2.as_str(), t3.as_str()]
    );
    assert_eq!(listed(&d, &["--state", "running"]), [t1.as_str()]);
    assert!(listed(&d, &["--user", "65534"]).is_empty());
    assert!(listed(&d, &["--since", "0s"]).is_empty());
    // --since as an RFC 3339 time, as date(1) writes one.
    let iso = |when: &str| {
        let out = std::process::Command::new("date")
            .args(["--iso-8601=seconds", "-d", when])
            .output()
            .expect("run date");
        String::from_utf8(out.stdout)
            .expect("utf-8")
            .trim()
            .to_string()
    };
    assert_eq!(
        listed(&d, &["--since", &iso("1 hour ago")]),
        [t1.as_str(), t2.as_str(), t3.as_str()]
    );
    assert!(listed(&d, &["--since", &iso("1 hour")]).is_empty());
    let bad = gpuctl(&d, &["tasks", "--state", "waiting"]);
    assert_eq!(
        bad.status.code(),
        Some(2),
        "a mistyped state is a usage error"
    );

    // Cancel by filter: each one named as it goes.
    let out = success(&gpuctl(
        &d,
        &["cancel", "--state", "assigned", "--user", "root"],
    ));
    assert_eq!(out, format!("cancelling {t2}\ncancelling {t3}\n"));
    for id in [&t2, &t3] {
        assert_eq!(d.task(id).state, TaskStatus::Cancelled);
    }
    assert_eq!(d.task(&t1).state, TaskStatus::Running);
    // Those that cannot go are named, the others go, and the status says so.
    let out = gpuctl(&d, &["cancel", "--state", "running,cancelled"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(4), "{err}");
    assert!(
        err.contains(&format!("{t2} not cancelled"))
            && err.contains(&format!("{t3} not cancelled"))
            && err.contains(&format!("2 of 3 tasks not cancelled: {t2}, {t3}")),
        "{err}"
    );
    assert_eq!(
        d.wait_state(&t1, TaskStatus::Cancelled, LIMIT).state,
        TaskStatus::Cancelled
    );
}

#[test]
fn daemon_waiting_a_pending_task_names_each_device_it_waits_for() {
    let d = daemon(3);
    // GPU 0 runs an hour's task and drains for a MIG change.
    let t1 = d.submit(&spec(3600.0, 1.0, 1e6, 1.0)).unwrap();
    assert_eq!(d.wait_state(&t1, TaskStatus::Running, LIMIT).devices, [0]);
    let yaml = "version: v1\nmig-configs:\n  a:\n    - devices: [0]\n      mig-enabled: true\n      mig-devices: {\"3g.20gb\": 2}\n";
    let proxy = d.proxy();
    let changing = d
        .block_on(async move { proxy.apply_mig_config(yaml, "", Dict::new()).await })
        .expect("ApplyMigConfig");
    assert_eq!(changing, [0]);
    // GPU 1 falls off the bus.
    success(&gpuctl(&d, &["mock", "inject", "1", "xid", "79"]));
    // GPU 2 is held by a Slurm job.
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs_f64();
    let adopted = success(&gpuctl(
        &d,
        &[
            "adopt",
            "--devices",
            "2",
            "--external-id",
            "slurm:4242",
            "--owner-uid",
            "0",
            "--deadline",
            &format!("{}", now + 3600.0),
            "--json",
        ],
    ));
    let job = serde_json::from_str::<serde_json::Value>(&adopted).expect("JSON")["id"]
        .as_str()
        .expect("id")
        .to_string();
    let t = d.submit(&spec(60.0, 1.0, 1e6, 1.0)).unwrap();
    let expected = format!(
        "GPU 0 draining for a MIG change; GPU 1 offline (xid 79: GPU has fallen off the bus); \
         GPU 2 held by Slurm job 4242 ({job})"
    );
    // The XID reaches the engine through the device event thread.
    let waiting = wait_for("the three reasons", LIMIT, || {
        d.task(&t).waiting.filter(|w| w.reason == expected)
    });
    assert_eq!(waiting.expected_start, None, "no plan places it");
    assert_eq!(d.task(&t).state, TaskStatus::Queued);
    let table = success(&gpuctl(&d, &["tasks", "--state", "queued"]));
    assert!(table.contains(&format!("({expected})")), "{table}");
    let shown = success(&gpuctl(&d, &["task", &t]));
    assert!(line(&shown, "waiting").ends_with(&expected), "{shown}");
    assert!(
        line(&shown, "expected start").ends_with("- (no plan places it yet)"),
        "{shown}"
    );
}
