//! `Reload` through `busctl`, and SIGHUP: the plugin directory is scanned
//! again and the configuration file read again, while the active policy keeps
//! running and no task is touched; a bad file is refused and changes nothing.

use std::time::Duration;

use gpu_agent_dbus::TaskStatus;
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;

use crate::daemon::{spec, wait_for, Daemon, Settings, AGENT};
use crate::harness::{artefacts, PANICKY};

const LIMIT: Duration = Duration::from_secs(20);

/// The names `ListPolicies` answers, sorted.
fn policies(d: &Daemon) -> Vec<String> {
    let data = d.call("ListPolicies", &[]);
    let mut names: Vec<String> = data[0]
        .as_array()
        .expect("an a(ss)")
        .iter()
        .map(|p| p[0].as_str().expect("a name").to_string())
        .collect();
    names.sort();
    names
}

/// `busctl call ... Reload`: the changed keys waiting for a restart, or the
/// error busctl printed.
fn reload(d: &Daemon) -> Result<Vec<String>, String> {
    let mut args = vec!["--json=short", "call"];
    args.extend_from_slice(&AGENT);
    args.push("Reload");
    let out = d.busctl(&args);
    if !out.status.success() {
        return Err(String::from_utf8_lossy(&out.stderr).trim().to_string());
    }
    let reply: serde_json::Value = serde_json::from_slice(&out.stdout).expect("busctl JSON");
    Ok(reply["data"][0]
        .as_array()
        .expect("an as")
        .iter()
        .map(|k| k.as_str().expect("a key").to_string())
        .collect())
}

fn policy_property(d: &Daemon) -> String {
    let proxy = d.proxy();
    d.block_on(async move { proxy.policy().await })
        .expect("the Policy property")
}

#[test]
fn daemon_reload_rescans_plugins_and_rereads_the_config() {
    let d = Daemon::start_with(Settings {
        config: Some("cancel_grace_s = 5\n".into()),
        ..Settings::default()
    });
    let config = d.config_file();
    let panicky = d.plugin_dir().join(PANICKY);

    // A task that runs through every reload below (1e6 units: hours).
    let long = d.submit(&spec(1e6, 1.0, 1e6, 1.0)).expect("Submit");
    let started = d
        .wait_state(&long, TaskStatus::Running, LIMIT)
        .started
        .expect("a start time");
    assert_eq!(policies(&d), ["fifo", "greedy-eft"]);
    assert_eq!(policy_property(&d), "fifo");

    // A plugin file installed after the start is selectable after a reload.
    std::fs::copy(artefacts().join(PANICKY), &panicky).expect("copy a plugin");
    assert_eq!(
        policies(&d),
        ["fifo", "greedy-eft"],
        "only a reload rescans"
    );
    assert_eq!(reload(&d), Ok(vec![]));
    assert_eq!(policies(&d), ["fifo", "greedy-eft", "panicky"]);
    assert_eq!(
        policy_property(&d),
        "fifo",
        "the active policy keeps running"
    );

    // A changed key read only at start is named, and the log says so.
    std::fs::write(&config, "cancel_grace_s = 5\npolicy = \"greedy-eft\"\n").unwrap();
    assert_eq!(reload(&d), Ok(vec!["policy".to_string()]));
    assert!(
        d.stderr().contains(
            "changed, but only read at start: policy; they take effect at the next start"
        ),
        "{}",
        d.stderr()
    );
    assert_eq!(policy_property(&d), "fifo");

    // A bad file is refused, naming file, line and key, and nothing changes:
    // the plugin file removed meanwhile is still loaded.
    std::fs::remove_file(&panicky).unwrap();
    // (1e300 s was taken, and the next Cancel panicked the engine.)
    std::fs::write(&config, "policy = \"fifo\"\ncancel_grace_s = 1e300\n").unwrap();
    let error = reload(&d).expect_err("a bad file is refused");
    assert!(
        error.contains(&format!(
            "cannot reload: {}:2: cancel_grace_s: expected seconds from 0 to 31536000 (a year), \
             got 1e300; nothing changed",
            config.display()
        )),
        "{error}"
    );
    // The daemon's log says why, for `systemctl reload`, which does not.
    assert!(
        d.stderr().contains(&format!(
            "cannot reload: {}:2: cancel_grace_s: expected seconds",
            config.display()
        )),
        "{}",
        d.stderr()
    );
    assert_eq!(policies(&d), ["fifo", "greedy-eft", "panicky"]);
    // A value of the wrong type names its key as well as its line.
    std::fs::write(&config, "policy = \"fifo\"\ncancel_grace_s = \"ten\"\n").unwrap();
    let error = reload(&d).expect_err("a value of the wrong type is refused");
    assert!(
        error.contains(&format!(
            "cannot reload: {}:2: cancel_grace_s: invalid type: string \"ten\", expected f64; \
             nothing changed",
            config.display()
        )),
        "{error}"
    );
    // So is a reference to a profile file that does not exist (a reload
    // reads `apps` again).
    std::fs::write(&config, "apps = \"no-such-apps.toml\"\n").unwrap();
    let error = reload(&d).expect_err("a missing profile file is refused");
    assert!(error.contains("no-such-apps.toml"), "{error}");
    assert!(error.contains("nothing changed"), "{error}");
    assert_eq!(policies(&d), ["fifo", "greedy-eft", "panicky"]);

    // Once the file is right, the reload goes through.
    std::fs::write(&config, "cancel_grace_s = 5\n").unwrap();
    assert_eq!(reload(&d), Ok(vec![]));
    assert_eq!(policies(&d), ["fifo", "greedy-eft"]);

    // SIGHUP reloads the same way.
    std::fs::copy(artefacts().join(PANICKY), &panicky).expect("copy a plugin");
    kill(Pid::from_raw(d.pid() as i32), Signal::SIGHUP).expect("SIGHUP");
    wait_for("the SIGHUP reload", LIMIT, || {
        (policies(&d) == ["fifo", "greedy-eft", "panicky"]).then_some(())
    });
    assert!(d.name_owned(), "SIGHUP does not stop the daemon");

    // No task was touched.
    let task = d.task(&long);
    assert_eq!(task.state, TaskStatus::Running);
    assert_eq!(task.started, Some(started));
    assert_eq!(policy_property(&d), "fifo");
}
