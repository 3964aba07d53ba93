//! A policy that never returns costs its budget, not the daemon: the engine
//! keeps answering, the built-in FIFO order takes over, the fault is
//! signalled and stored, a restart does not make the policy active again,
//! and SIGTERM stops the daemon in time.

use std::time::Duration;

use gpu_agent_dbus::TaskStatus;
use zbus::export::futures_core::Stream;

use crate::daemon::{gpuctl, spec, wait_for, Daemon, Settings};
use crate::harness::{artefacts, HANGING};

const LIMIT: Duration = Duration::from_secs(30);
const FALLBACK: &str = "fifo (built-in fallback)";

/// A task of one unit; of `HANG_WEIGHT`, the fixture never returns from its
/// arrival.
fn task(weight: f64) -> gpu_agent_dbus::SubmitSpec {
    spec(1.0, 1.0, 1e6, weight)
}

const HANG_WEIGHT: f64 = 666.0;

fn policy(d: &Daemon) -> String {
    d.block_on(d.proxy().policy()).expect("Policy")
}

/// Waits for the `Policy` property to read `name` (the bus side learns of
/// a change just after the call that made it is answered).
fn wait_policy(d: &Daemon, name: &str) {
    wait_for(&format!("policy {name}"), LIMIT, || {
        (policy(d) == name).then_some(())
    });
}

#[test]
fn daemon_hung_policy_falls_back_within_its_budget_and_stays_off_at_restart() {
    let mut d = Daemon::start_with(Settings {
        config: Some("policy_budget_ms = 300\n".into()),
        ..Settings::default()
    });
    std::fs::copy(artefacts().join(HANGING), d.plugin_dir().join(HANGING)).expect("copy");
    let _rt = d.enter();
    let proxy = d.proxy();
    d.block_on(proxy.reload()).expect("Reload");

    // Its constructor never returning is a refused policy, nothing more.
    let mut params = std::collections::HashMap::new();
    params.insert(
        "hang_in_new".to_string(),
        zbus::zvariant::Value::from(true).try_into().unwrap(),
    );
    let error = d
        .block_on(proxy.set_policy_with_parameters("hanging", params))
        .expect_err("a constructor that never returns");
    assert!(
        error
            .to_string()
            .contains("policy hanging: its constructor did not return within 300 ms"),
        "{error}"
    );
    assert_eq!(policy(&d), "fifo");

    d.block_on(proxy.set_policy("hanging")).expect("SetPolicy");
    wait_policy(&d, "hanging");
    let faults = d.block_on(proxy.receive_policy_fault()).expect("subscribe");
    let first = d.submit(&task(1.0)).expect("Submit under hanging");

    // The policy never returns on this arrival; the Submit is answered.
    let hung = d.submit(&task(HANG_WEIGHT)).expect("Submit is answered");
    let fault = d.block_on(async {
        let mut faults = std::pin::pin!(faults);
        let next = std::future::poll_fn(|cx| faults.as_mut().poll_next(cx));
        tokio::time::timeout(LIMIT, next)
            .await
            .expect("a PolicyFault signal in time")
            .expect("a PolicyFault signal")
    });
    let args = fault.args().expect("PolicyFault arguments");
    assert_eq!(args.policy(), &"hanging");
    assert_eq!(
        args.reason(),
        &"did not answer within 300 ms (policy_budget_ms); the call is abandoned on its thread"
    );
    wait_policy(&d, FALLBACK);
    let described = "policy hanging failed: did not answer within 300 ms \
                     (policy_budget_ms); the call is abandoned on its thread";
    assert_eq!(d.block_on(proxy.last_policy_fault()).unwrap(), described);
    assert!(d.stderr().contains(&format!(
        "{described}; continuing with the built-in FIFO order"
    )));

    // The engine keeps serving: reads, new work, and the built-in order runs
    // everything, the task it hung on included.
    let later = d.submit(&task(1.0)).expect("Submit after the fault");
    for id in [&first, &hung, &later] {
        d.wait_state(id, TaskStatus::Succeeded, LIMIT);
    }
    let status = String::from_utf8(gpuctl(&d, &["status"]).stdout).unwrap();
    assert!(
        status.contains(&format!("policy fault  {described}")),
        "{status}"
    );

    // SIGTERM stops it in time (the harness allows 10 s), the hung thread
    // notwithstanding.
    assert!(d.terminate().success(), "{}", d.stderr());

    // The restart keeps the fault: built-in FIFO, not the hanging policy.
    d.restart();
    assert_eq!(policy(&d), FALLBACK);
    assert_eq!(d.block_on(proxy.last_policy_fault()).unwrap(), described);
    assert!(
        d.stderr().contains(
            "policy hanging failed before (did not answer within 300 ms (policy_budget_ms); \
             the call is abandoned on its thread); it is not made active again until an admin \
             chooses it (gpuctl policy use hanging): running the built-in FIFO order"
        ),
        "{}",
        d.stderr()
    );
    let again = d.submit(&task(HANG_WEIGHT)).expect("Submit after restart");
    d.wait_state(&again, TaskStatus::Succeeded, LIMIT);

    // Only an admin's choice makes it active again, and clears the fault.
    d.block_on(proxy.set_policy("hanging")).expect("SetPolicy");
    wait_policy(&d, "hanging");
    wait_for("the fault cleared", LIMIT, || {
        d.block_on(proxy.last_policy_fault())
            .unwrap()
            .is_empty()
            .then_some(())
    });
}
