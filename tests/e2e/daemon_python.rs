//! The `python` policy plugin in the daemon: an admin switches to
//! examples/policies/fifo.py and it runs tasks to completion, and again
//! after a restart; a module that
//! raises, or that does not answer within `policy_budget_ms`, is a policy
//! fault: the built-in FIFO order runs the tasks, and the log holds the
//! Python traceback; a module whose import takes longer than the budget is
//! a refused policy. Skipped, saying so, where the plugin cannot be built.

use std::path::Path;
use std::time::Duration;

use gpu_agent_dbus::TaskStatus;

use crate::daemon::{gpuctl, spec, Daemon, Settings};
use crate::harness::{artefacts, python_plugin, PYTHON};

const LIMIT: Duration = Duration::from_secs(30);
const FALLBACK: &str = "fifo (built-in fallback)";

/// A daemon with the python plugin installed and found (a reload rescans).
fn daemon(settings: Settings) -> Daemon {
    let d = Daemon::start_with(settings);
    std::fs::copy(artefacts().join(PYTHON), d.plugin_dir().join(PYTHON)).expect("copy");
    let proxy = d.proxy();
    d.block_on(proxy.reload()).expect("Reload");
    d
}

fn policy(d: &Daemon) -> String {
    d.block_on(d.proxy().policy()).expect("Policy")
}

/// `gpuctl policy use python --param module=MODULE`, as an admin (root).
fn use_module(d: &Daemon, module: &Path) -> String {
    let param = format!("module={}", module.display());
    let out = gpuctl(d, &["policy", "use", "python", "--param", &param]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).expect("UTF-8")
}

#[test]
fn daemon_python_fifo_runs_tasks_to_completion() {
    if !python_plugin("daemon_python_fifo_runs_tasks_to_completion") {
        return;
    }
    let mut d = daemon(Settings::default());
    // An absolute path, as the daemon needs.
    let module = Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("workspace root")
        .join("examples/policies/fifo.py");
    use_module(&d, &module);
    assert_eq!(policy(&d), "python");
    // Gangs of 2 among them; 1 to 20 units on the 4 mock GPUs.
    let ids: Vec<String> = (0..12)
        .map(|i| {
            let mut s = spec(1.0 + f64::from(i % 5) * 4.0, 8.0, 1e6, 1.0);
            s.gpus = if i % 4 == 3 { 2 } else { 1 };
            d.submit(&s).expect("Submit")
        })
        .collect();
    for id in &ids {
        d.wait_state(id, TaskStatus::Succeeded, LIMIT);
    }
    assert_eq!(policy(&d), "python", "{}", d.stderr());
    assert!(!d.stderr().contains("failed"), "{}", d.stderr());
    // A gang started on two devices at once.
    assert_eq!(d.task(&ids[3]).devices.len(), 2);

    // A restart builds it again from the stored parameters: the module is
    // read again and runs the next tasks.
    assert!(d.terminate().success(), "{}", d.stderr());
    d.restart();
    assert_eq!(policy(&d), "python", "{}", d.stderr());
    let after = d.submit(&spec(2.0, 8.0, 1e6, 1.0)).expect("Submit");
    d.wait_state(&after, TaskStatus::Succeeded, LIMIT);
    assert!(!d.stderr().contains("failed"), "{}", d.stderr());
}

#[test]
fn daemon_python_exception_falls_back_to_fifo_with_its_traceback_in_the_log() {
    if !python_plugin("daemon_python_exception_falls_back_to_fifo_with_its_traceback_in_the_log") {
        return;
    }
    let d = daemon(Settings::default());
    let dir = tempfile::tempdir().expect("temp dir");
    let module = dir.path().join("picky.py");
    std::fs::write(
        &module,
        "import gpu_agent_policy as p\n\
         \n\
         def on_event(view, event):\n    \
             if isinstance(event, p.Arrived):\n        \
                 raise RuntimeError(f'no place for {view.task(event.task).id}')\n    \
             return []\n",
    )
    .expect("write the module");
    use_module(&d, &module);
    assert_eq!(policy(&d), "python");
    let id = d.submit(&spec(1.0, 8.0, 1e6, 1.0)).expect("Submit");
    // The built-in FIFO order ran the task the policy raised on.
    d.wait_state(&id, TaskStatus::Succeeded, LIMIT);
    assert_eq!(policy(&d), FALLBACK);
    let m = module.display();
    let described = format!(
        "policy python failed: {m}: on_event raised Traceback (most recent call last):\n  \
         File \"{m}\", line 5, in on_event\n    \
         raise RuntimeError(f'no place for {{view.task(event.task).id}}')\n\
         RuntimeError: no place for {id}"
    );
    assert_eq!(
        d.block_on(d.proxy().last_policy_fault())
            .expect("LastPolicyFault"),
        described
    );
    assert!(
        d.stderr().contains(&format!(
            "{described}; continuing with the built-in FIFO order"
        )),
        "{}",
        d.stderr()
    );
}

#[test]
fn daemon_python_call_over_budget_is_a_fault() {
    if !python_plugin("daemon_python_call_over_budget_is_a_fault") {
        return;
    }
    let mut d = daemon(Settings {
        config: Some("policy_budget_ms = 300\n".into()),
        ..Settings::default()
    });
    let dir = tempfile::tempdir().expect("temp dir");
    // Loading the module is the constructor: an import over budget is a
    // refused policy, and nothing changes.
    let slow = dir.path().join("slow.py");
    std::fs::write(
        &slow,
        "import time\ntime.sleep(2)\ndef on_event(view, event):\n    return []\n",
    )
    .expect("write the module");
    let param = format!("module={}", slow.display());
    let out = gpuctl(&d, &["policy", "use", "python", "--param", &param]);
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("policy python: its constructor did not return within 300 ms"),
        "{stderr}"
    );
    assert_eq!(policy(&d), "fifo");
    let module = dir.path().join("endless.py");
    std::fs::write(
        &module,
        "import time\n\
         \n\
         def on_event(view, event):\n    \
             while view.pending:\n        \
                 time.sleep(0.01)\n    \
             return []\n",
    )
    .expect("write the module");
    use_module(&d, &module);
    let id = d
        .submit(&spec(1.0, 8.0, 1e6, 1.0))
        .expect("Submit is answered");
    d.wait_state(&id, TaskStatus::Succeeded, LIMIT);
    assert_eq!(policy(&d), FALLBACK);
    assert_eq!(
        d.block_on(d.proxy().last_policy_fault())
            .expect("LastPolicyFault"),
        "policy python failed: did not answer within 300 ms (policy_budget_ms); \
         the call is abandoned on its thread"
    );
    // The call still loops on its thread; SIGTERM stops the daemon anyway.
    assert!(d.terminate().success(), "{}", d.stderr());
}
