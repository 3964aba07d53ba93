//! The mig-plan policy in the daemon (docs/mig.md §6.4): with `[mig] allow_policy
//! = true` its `Decision::MigLayout` drains the mock A100 and gives it the
//! planned layout, the daemon's MIG instances then run the tasks, nothing is
//! lost, and the policy stays in charge (no fault). A GPU that holds an
//! adopted job keeps its layout until the job is released.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use gpu_agent_dbus::{MigLayout, SubmitSpec, TaskStatus};

use crate::daemon::{gpuctl, spec, wait_for, Daemon, Settings};
use crate::harness::{artefacts, success, MIG_PLAN};

const LIMIT: Duration = Duration::from_secs(60);

/// A daemon on `host` that allows policies' MIG changes, with the
/// mig-plan plugin and examples/mig-shift-apps.toml's profiles.
fn mig_plan_daemon(host: &str) -> Daemon {
    let apps = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("workspace root")
        .join("examples/mig-shift-apps.toml");
    let d = Daemon::start_with(Settings {
        config: Some(format!(
            "apps = {:?}\n[mig]\nallow_policy = true\n",
            apps.display().to_string()
        )),
        host: Some(host.into()),
        ..Settings::default()
    });
    std::fs::copy(artefacts().join(MIG_PLAN), d.plugin_dir().join(MIG_PLAN))
        .expect("copy mig-plan");
    success(&gpuctl(&d, &["reload"]));
    d
}

/// Submits `n` tasks, resnet50 (4 GB) and bert-large (15 GB) in turn: the
/// demand of two applications.
fn submit_two_applications(d: &Daemon, n: usize) -> Vec<String> {
    (0..n)
        .map(|k| {
            let mut s: SubmitSpec = if k % 2 == 0 {
                spec(40.0, 4.0, 1e6, 1.0)
            } else {
                spec(120.0, 15.0, 1e6, 1.0)
            };
            s.app = if k % 2 == 0 { "resnet50" } else { "bert-large" }.into();
            d.submit(&s).expect("Submit")
        })
        .collect()
}

/// The profiles of `layout`'s instances, by first memory slice.
fn profiles(layout: &MigLayout) -> Vec<&str> {
    layout
        .instances
        .iter()
        .map(|i| i.profile.as_str())
        .collect()
}

#[test]
fn daemon_mig_plan_splits_a_gpu_for_two_applications() {
    let d = mig_plan_daemon("[[gpu]]\nmodel = \"A100-SXM4-40GB\"\nspeed = 7.0\n");
    // A plan 20 model seconds (0.2 s at time scale 100) after the policy
    // starts, then every 5.
    use_mig_plan(&d, &["window_s=20", "period_s=5", "min_interval_s=100000"]);
    // resnet50 (4 GB) and bert-large (15 GB): the whole GPU serves one of
    // them at a time, a split one both at once.
    submit_two_applications(&d, 16);
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

/// `gpuctl policy use mig-plan` with each of `params` (`NAME=VALUE`).
fn use_mig_plan(d: &Daemon, params: &[&str]) {
    let mut args = vec!["policy", "use", "mig-plan"];
    for param in params {
        args.extend(["--param", param]);
    }
    success(&gpuctl(d, &args));
}

/// Two A100s with two 1g.5gb each (GPU 0's are devices 3 and 4, GPU 1's 5
/// and 6: layouts any plan for these demands changes) and a V100 that holds
/// bert-large meanwhile.
const TWO_SMALL_SPLITS: &str = "[[gpu]]\nmodel = \"A100-SXM4-40GB\"\nspeed = 7.0\n\
                                mig = [\"1g.5gb\", \"1g.5gb\"]\n\
                                [[gpu]]\nmodel = \"A100-SXM4-40GB\"\nspeed = 7.0\n\
                                mig = [\"1g.5gb\", \"1g.5gb\"]\n\
                                [[gpu]]\nmodel = \"V100-SXM2-32GB\"\nspeed = 7.0\n";

#[test]
fn daemon_mig_plan_leaves_a_gpu_with_an_adopted_job_as_it_is_until_its_release_across_a_kill_9() {
    let mut d = mig_plan_daemon(TWO_SMALL_SPLITS);
    let deadline = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("after 1970")
        .as_secs_f64()
        + 3600.0;
    let out = success(&gpuctl(
        &d,
        &[
            "adopt",
            "--devices",
            "3",
            "--external-id",
            "slurm:81",
            "--owner-uid",
            "4321",
            "--deadline",
            &deadline.to_string(),
            "--json",
        ],
    ));
    let adopted = serde_json::from_str::<serde_json::Value>(&out).expect("JSON")["id"]
        .as_str()
        .expect("id")
        .to_string();
    // Both A100s change at once, each asked for at most every 20 model
    // seconds, within a window that keeps each batch's demand long after
    // that (200 model seconds: 2 s at time scale 100).
    use_mig_plan(
        &d,
        &[
            "window_s=200",
            "period_s=5",
            "min_interval_s=20",
            "max_changing=2",
        ],
    );
    // A kill -9: the job stays adopted, and its GPU held, after the restart.
    d.kill9();
    d.restart();
    wait_for("the job kept in the log", LIMIT, || {
        d.stderr()
            .contains(&format!("task {adopted} (slurm:81) stays adopted"))
            .then_some(())
    });
    let before = d.mig_layout(0);
    assert_eq!(profiles(&before), ["1g.5gb", "1g.5gb"]);
    submit_two_applications(&d, 16);
    let refused = format!(
        "is refused: the GPU holds adopted task {adopted} (slurm:81) on device(s) [3]; \
         its layout can change once that is released"
    );
    // GPU 1 takes the plan's layout; GPU 0's request is refused, and its
    // layout stays as the job found it all along.
    wait_for("GPU 1's new layout and GPU 0's refusal", LIMIT, || {
        let held = d.mig_layout(0);
        assert_eq!(
            (profiles(&held), held.state.as_str()),
            (profiles(&before), "stable"),
            "GPU 0's layout changed under the adopted job: {held:?}\n{}",
            d.stderr()
        );
        let other = d.mig_layout(1);
        let changed = other.state == "stable" && profiles(&other) != ["1g.5gb", "1g.5gb"];
        let log = d.stderr();
        (changed
            && log.contains("GPU 0: the policy's MIG layout change to ")
            && log.contains(&refused))
        .then_some(())
    });
    assert_eq!(d.mig_layout(0).instances, before.instances, "same UUIDs");
    // Nothing was drained: the instance beside the job takes work.
    let out = success(&gpuctl(&d, &["devices", "--json"]));
    let devices: serde_json::Value = serde_json::from_str(&out).expect("devices JSON");
    let beside = devices
        .as_array()
        .expect("an array")
        .iter()
        .find(|v| v["index"] == 4)
        .expect("device 4");
    assert_eq!(beside["online"], true, "{out}");
    let job = d.task(&adopted);
    assert_eq!((job.state, job.devices), (TaskStatus::Running, vec![3]));
    // Released: the next plan changes GPU 0 as well.
    success(&gpuctl(&d, &["release", &adopted]));
    submit_two_applications(&d, 16);
    wait_for("GPU 0's new layout after the release", LIMIT, || {
        let l = d.mig_layout(0);
        (l.state == "stable" && profiles(&l) != ["1g.5gb", "1g.5gb"]).then_some(())
    });
    let ended = d.wait_all_ended(LIMIT);
    assert_eq!(ended.len(), 33);
    for t in &ended {
        assert_eq!(t.state, TaskStatus::Succeeded, "{} {:?}", t.id, t.reason);
    }
    let proxy = d.proxy();
    let policy = d.block_on(proxy.policy()).expect("Policy");
    assert_eq!(policy, "mig-plan", "{}", d.stderr());
}
