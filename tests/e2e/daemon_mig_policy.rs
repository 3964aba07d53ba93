//! The mig-plan policy in the daemon (docs/mig.md §6.4): with `[mig] allow_policy
//! = true` its `Decision::MigLayout` drains the mock A100 and gives it the
//! planned layout, the daemon's MIG instances then run the tasks, nothing is
//! lost, and the policy stays in charge (no fault).

use std::time::Duration;

use gpu_agent_dbus::TaskStatus;

use crate::daemon::{gpuctl, spec, wait_for, Daemon, Settings};
use crate::harness::{artefacts, success, MIG_PLAN};

const LIMIT: Duration = Duration::from_secs(60);

#[test]
fn daemon_mig_plan_splits_a_gpu_for_two_applications() {
    let apps = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("workspace root")
        .join("examples/mig-shift-apps.toml");
    let d = Daemon::start_with(Settings {
        config: Some(format!(
            "apps = {:?}\n[mig]\nallow_policy = true\n",
            apps.display().to_string()
        )),
        host: Some("[[gpu]]\nmodel = \"A100-SXM4-40GB\"\nspeed = 7.0\n".into()),
        ..Settings::default()
    });
    std::fs::copy(artefacts().join(MIG_PLAN), d.plugin_dir().join(MIG_PLAN))
        .expect("copy mig-plan");
    success(&gpuctl(&d, &["reload"]));
    // A plan 20 model seconds (0.2 s at time scale 100) after the policy
    // starts, then every 5.
    success(&gpuctl(
        &d,
        &[
            "policy",
            "use",
            "mig-plan",
            "--param",
            "window_s=20",
            "--param",
            "period_s=5",
            "--param",
            "min_interval_s=100000",
        ],
    ));
    // resnet50 (4 GB) and bert-large (15 GB): the whole GPU serves one of
    // them at a time, a split one both at once.
    let mut ids = Vec::new();
    for k in 0..16 {
        let mut s = if k % 2 == 0 {
            spec(40.0, 4.0, 1e6, 1.0)
        } else {
            spec(120.0, 15.0, 1e6, 1.0)
        };
        s.app = if k % 2 == 0 { "resnet50" } else { "bert-large" }.into();
        ids.push(d.submit(&s).unwrap());
    }
    let layout = || d.mig_layout(0);
    let split = wait_for("mig-plan's layout on GPU 0", LIMIT, || {
        let l = layout();
        (l.enabled && l.state == "stable").then_some(l)
    });
    // bert-large needs an instance of 15 GB or more (3g.20gb or 4g.20gb).
    assert!(
        split
            .instances
            .iter()
            .any(|i| i.profile == "3g.20gb" || i.profile == "4g.20gb"),
        "{split:?}"
    );
    let ended = d.wait_all_ended(LIMIT);
    assert_eq!(ended.len(), 16);
    for t in &ended {
        assert_eq!(t.state, TaskStatus::Succeeded, "{} {:?}", t.id, t.reason);
    }
    // Tasks ran on the instances (indices from 1) once the GPU was split.
    assert!(
        ended.iter().any(|t| t.devices.iter().all(|&d| d >= 1)),
        "{ended:?}"
    );
    let proxy = d.proxy();
    let policy = d.block_on(proxy.policy()).expect("Policy");
    assert_eq!(policy, "mig-plan", "{}", d.stderr());
}
