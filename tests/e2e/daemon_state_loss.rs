//! A start never takes a state database that lost acknowledged tasks for a
//! new one: an emptied `state.db` is refused, naming the tasks it lacks and
//! how to go on, until `--accept-state-loss` gives them up.

use std::process::{Command, Stdio};
use std::time::Duration;

use gpu_agent_dbus::TaskStatus;

use crate::daemon::{host_file, spec, wait_for, Daemon};
use crate::harness::artefacts;

const LIMIT: Duration = Duration::from_secs(30);

/// `gpu-agentd` on `d`'s bus, state and plugins, with `extra` arguments.
fn gpu_agentd(d: &Daemon, extra: &[&str]) -> Command {
    let mut command = Command::new(artefacts().join("gpu-agentd"));
    command
        .arg("--mock")
        .arg(host_file())
        .arg("--session")
        .arg("--state-dir")
        .arg(d.state_dir())
        .arg("--plugin-dir")
        .arg(d.plugin_dir())
        .args(extra)
        .env("DBUS_SESSION_BUS_ADDRESS", d.address())
        .env_remove("JOURNAL_STREAM")
        .env_remove("NOTIFY_SOCKET")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    command
}

#[test]
fn daemon_state_loss_an_emptied_database_is_refused_until_accepted() {
    let mut d = Daemon::start();
    let ids: Vec<String> = (0..3)
        .map(|_| d.submit(&spec(1.0, 1.0, 1e6, 1.0)).expect("Submit"))
        .collect();
    assert_eq!(ids, ["t1", "t2", "t3"]);
    for id in &ids {
        d.wait_state(id, TaskStatus::Succeeded, LIMIT);
    }
    assert!(d.terminate().success());

    // The database emptied (0 bytes, its WAL gone): SQLite would open it
    // as a new, empty store.
    let db = d.state_dir().join("state.db");
    std::fs::write(&db, b"").unwrap();
    for side in ["-wal", "-shm"] {
        let _ = std::fs::remove_file(format!("{}{side}", db.display()));
    }
    let mut refused = gpu_agentd(&d, &[]).spawn().expect("gpu-agentd runs");
    let status = wait_for("the start to be refused", LIMIT, || {
        if d.name_owned() {
            let _ = refused.kill();
            panic!("gpu-agentd serves an emptied database: t1 to t3 are gone without a word");
        }
        refused.try_wait().expect("wait for gpu-agentd")
    });
    let mut stderr = String::new();
    std::io::Read::read_to_string(&mut refused.stderr.take().unwrap(), &mut stderr).unwrap();
    assert_eq!(status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains(&format!(
            "the state database {} holds tasks up to t0 only, but tasks up to t3 were \
             acknowledged (acknowledged beside it): t1 to t3 are missing",
            db.display()
        )) && stderr.contains("start once with --accept-state-loss to go on without them"),
        "{stderr}"
    );

    // Accepted: it starts, says what it gave up, and issues no lost id again.
    let accepting = gpu_agentd(&d, &["--accept-state-loss"])
        .spawn()
        .expect("gpu-agentd starts");
    wait_for("the accepting daemon to serve", LIMIT, || {
        d.name_owned().then_some(())
    });
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(accepting.id() as i32),
        nix::sys::signal::Signal::SIGTERM,
    )
    .expect("SIGTERM");
    let out = accepting.wait_with_output().expect("it stops");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(
        stderr.contains("--accept-state-loss: tasks t1 to t3 were acknowledged and are not in"),
        "{stderr}"
    );
    wait_for("the name released", LIMIT, || {
        (!d.name_owned()).then_some(())
    });
    d.restart();
    assert_eq!(d.submit(&spec(1.0, 1.0, 1e6, 1.0)).expect("Submit"), "t4");
}
