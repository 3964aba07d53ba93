//! Adopted tasks (issue 19 item 1): `Adopt` occupies a GPU with the clocks
//! the active DVFS policy's rule picks for the job's app and deadline, the
//! policy places nothing there, `Release` restores the clocks and records
//! the energy; the errors name what is wrong; a kill -9 while adopted keeps
//! the task adopted with its clocks locked again.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use gpu_agent_dbus::{AdoptSpec, TaskStatus};

use crate::daemon::{dbus_error, gpuctl, spec, wait_for, Daemon, Settings, AGENT};
use crate::harness::{artefacts, success, EDL};

const LIMIT: Duration = Duration::from_secs(30);
const ERROR: &str = "org.gpuagent.Agent1.Error.";

/// A daemon on the example host (two A100s, a V100, a T4) with the
/// GTX 1080 Ti profiles, running `edl`.
fn adopt_daemon() -> Daemon {
    adopt_daemon_with("", Settings::default().time_scale)
}

/// The GTX 1080 Ti's fitted profiles (examples/dvfs).
fn example_apps() -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("workspace root")
        .join("examples/dvfs/gtx1080ti-apps.toml")
}

/// [`adopt_daemon`] with more `agent.toml` lines, at `time_scale`.
pub(crate) fn adopt_daemon_with(config: &str, time_scale: f64) -> Daemon {
    adopt_daemon_in(Settings {
        config: Some(config.into()),
        time_scale,
        ..Settings::default()
    })
}

/// [`adopt_daemon`] with `settings` (its `config`: more `agent.toml` lines).
pub(crate) fn adopt_daemon_in(settings: Settings) -> Daemon {
    adopt_daemon_on(&example_apps(), settings)
}

/// [`adopt_daemon_in`] on the profiles of `apps`.
fn adopt_daemon_on(apps: &std::path::Path, settings: Settings) -> Daemon {
    let config = settings.config.as_deref().unwrap_or_default();
    let d = Daemon::start_with(Settings {
        config: Some(format!("apps = {:?}\n{config}", apps.display().to_string())),
        ..settings
    });
    std::fs::copy(artefacts().join(EDL), d.plugin_dir().join(EDL)).expect("copy edl");
    success(&gpuctl(&d, &["reload"]));
    success(&gpuctl(&d, &["policy", "use", "edl"]));
    d
}

fn now() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("after 1970")
        .as_secs_f64()
}

/// A Slurm-like job on `devices`, ending in an hour.
fn job(devices: &[u32], external_id: &str, app: &str) -> AdoptSpec {
    AdoptSpec {
        devices: devices.to_vec(),
        external_id: external_id.into(),
        owner_uid: 4321,
        app: app.into(),
        deadline: now() + 3600.0,
    }
}

fn adopt(d: &Daemon, spec: &AdoptSpec) -> zbus::Result<String> {
    d.block_on(d.proxy().adopt(spec.to_dict()))
}

fn release(d: &Daemon, id: &str) -> zbus::Result<()> {
    d.block_on(d.proxy().release(id))
}

/// Whether GPU `gpu` shows core clock `mhz`, as the driver rounds it to
/// its supported clocks (the A100's come in 15 MHz steps).
pub(crate) fn shows(d: &Daemon, gpu: usize, mhz: u32) -> bool {
    core_clock(d, gpu).abs_diff(u64::from(mhz)) <= 7
}

/// GPU `gpu`'s core clock as `gpuctl devices --json` shows it.
pub(crate) fn core_clock(d: &Daemon, gpu: usize) -> u64 {
    let out = success(&gpuctl(d, &["devices", "--json"]));
    let devices: serde_json::Value = serde_json::from_str(&out).expect("devices JSON");
    devices[gpu]["core_clock_mhz"]
        .as_u64()
        .expect("core_clock_mhz")
}

#[test]
fn daemon_adopt_holds_a_gpu_at_the_dvfs_clocks_until_release() {
    let d = adopt_daemon();
    let idle = core_clock(&d, 1);
    let id = adopt(&d, &job(&[1], "slurm:4242", "BlackScholes")).expect("Adopt");
    let task = d.task(&id);
    assert_eq!(task.state, TaskStatus::Running);
    assert_eq!(task.spec.external_id, "slurm:4242");
    assert_eq!(task.owner_uid, 4321);
    assert_eq!(task.devices, [1]);
    // BlackScholes' time does not follow the core clock (delta 0): Algorithm
    // 1 picks a low core clock, the A100's memory clock stays (it has one).
    let clocks = task.clocks.clone().expect("the chosen clocks");
    assert!(clocks.core_mhz < 1095, "{clocks:?}");
    assert_eq!(clocks.class.as_deref(), Some("energy"));
    wait_for("GPU 1 locked at the chosen clock", LIMIT, || {
        shows(&d, 1, clocks.core_mhz).then_some(())
    });
    // A retried Adopt answers the same id.
    assert_eq!(
        adopt(&d, &job(&[1], "slurm:4242", "BlackScholes")).unwrap(),
        id
    );
    // The policy places nothing on GPU 1 while it is adopted.
    let ids: Vec<String> = (0..8)
        .map(|_| d.submit(&spec(100.0, 1.0, 3600.0, 1.0)).expect("Submit"))
        .collect();
    for t in &ids {
        let t = d.wait_state(t, TaskStatus::Succeeded, LIMIT);
        assert!(
            !t.devices.contains(&1),
            "task {} ran on the adopted GPU: {t:?}",
            t.id
        );
    }
    assert!(shows(&d, 1, clocks.core_mhz));
    // While it runs, its energy so far (what a SPANK plugin writes into the
    // job's record before the job ends).
    let so_far = d.task(&id).energy_j.expect("the energy so far");
    assert!(so_far > 0.0, "{so_far}");
    // `Release`: default clocks again, the energy measured, done.
    release(&d, &id).expect("Release");
    let done = d.task(&id);
    assert_eq!(done.state, TaskStatus::Succeeded);
    assert!(done.energy_j.expect("energy") >= so_far, "{done:?}");
    wait_for("GPU 1 unlocked", LIMIT, || {
        (core_clock(&d, 1) == idle).then_some(())
    });
    // GPU 1 takes work again.
    let id = d.submit(&spec(1e6, 1.0, 1e7, 1.0)).expect("Submit");
    let mut others = vec![d.submit(&spec(1e6, 1.0, 1e7, 1.0)).expect("Submit")];
    others.push(d.submit(&spec(1e6, 1.0, 1e7, 1.0)).expect("Submit"));
    others.push(d.submit(&spec(1e6, 1.0, 1e7, 1.0)).expect("Submit"));
    wait_for("a task on GPU 1", LIMIT, || {
        others
            .iter()
            .chain([&id])
            .any(|t| d.task(t).devices.contains(&1))
            .then_some(())
    });
    // A second Release is an error: it is no longer adopted.
    let (name, message) = dbus_error(release(&d, &done.id));
    assert_eq!(name, format!("{ERROR}NoSuchTask"), "{message}");
}

#[test]
fn daemon_adopt_refusals_name_the_problem() {
    let d = adopt_daemon();
    let refused = |dict, want: &str, words: &str| {
        let (name, message) = dbus_error(d.block_on(d.proxy().adopt(dict)));
        assert_eq!(name, format!("{ERROR}{want}"), "{message}");
        assert!(message.contains(words), "{message:?} lacks {words:?}");
    };
    let mut dict = job(&[1], "slurm:1", "default").to_dict();
    dict.remove("deadline");
    refused(
        dict,
        "InvalidArgument",
        "missing required key \"deadline\" (d)",
    );
    let mut dict = job(&[1], "slurm:1", "default").to_dict();
    dict.insert(
        "gpus".into(),
        zbus::zvariant::Value::U32(1).try_into().unwrap(),
    );
    refused(dict, "InvalidArgument", "unknown key \"gpus\"");
    // A deadline already past: the job cannot still run.
    let mut late = job(&[1], "slurm:1", "default");
    late.deadline = now() - 60.0;
    refused(late.to_dict(), "InvalidArgument", "key \"deadline\"");
    assert!(d.tasks().is_empty());
    refused(
        job(&[1], "slurm:1", "no-such-app").to_dict(),
        "InvalidArgument",
        "key \"app\"",
    );
    refused(
        job(&[9], "slurm:1", "default").to_dict(),
        "NoSuchDevice",
        "no GPU 9",
    );
    // A GPU that runs one of the agent's tasks is busy.
    let long = d.submit(&spec(1e6, 1.0, 1e7, 1.0)).expect("Submit");
    let gpu = d.wait_state(&long, TaskStatus::Running, LIMIT).devices[0];
    refused(
        job(&[gpu], "slurm:2", "default").to_dict(),
        "Busy",
        &format!("runs task {long}"),
    );
    // So is an adopted one.
    let free = (0..4).find(|&g| g != gpu).unwrap();
    let id = adopt(&d, &job(&[free], "slurm:3", "default")).expect("Adopt");
    refused(
        job(&[free], "slurm:4", "default").to_dict(),
        "Busy",
        &format!("adopted by task {id}"),
    );
    // Without a profile, default clocks: nothing locked, nothing shown.
    assert_eq!(d.task(&id).clocks, None);
    let (name, _) = dbus_error(release(&d, "t999"));
    assert_eq!(name, format!("{ERROR}NoSuchTask"));
    let (name, _) = dbus_error(release(&d, &long));
    assert_eq!(name, format!("{ERROR}NoSuchTask"));
    release(&d, &id).expect("Release");
}

#[test]
fn daemon_adopt_survives_a_kill_9_with_its_clocks_locked_again() {
    let mut d = adopt_daemon();
    let id = adopt(&d, &job(&[1], "slurm:77", "BlackScholes")).expect("Adopt");
    let clocks = d.task(&id).clocks.expect("clocks");
    wait_for("GPU 1 locked", LIMIT, || {
        shows(&d, 1, clocks.core_mhz).then_some(())
    });
    d.kill9();
    d.restart();
    // The lock's record is restored first, then locked again for the job
    // (both logged by the engine's restore, which runs once the daemon owns
    // its name: waited for, not assumed).
    wait_for("the restore in the log", LIMIT, || {
        d.stderr()
            .contains("restoring GPU 1 locked_core_clocks")
            .then_some(())
    });
    wait_for("the job kept in the log", LIMIT, || {
        d.stderr()
            .contains(&format!("task {id} (slurm:77) stays adopted"))
            .then_some(())
    });
    let task = d.task(&id);
    assert_eq!(task.state, TaskStatus::Running);
    assert_eq!(task.spec.external_id, "slurm:77");
    wait_for("GPU 1 locked again", LIMIT, || {
        shows(&d, 1, clocks.core_mhz).then_some(())
    });
    // Still occupied: nothing of the agent's goes there.
    let long = d.submit(&spec(1e6, 1.0, 1e7, 1.0)).expect("Submit");
    let ran = d.wait_state(&long, TaskStatus::Running, LIMIT);
    assert_ne!(ran.devices, [1]);
    // The epilog's Release still works, and a stop keeps what is left
    // adopted, clocks locked again at the next start.
    release(&d, &id).expect("Release");
    wait_for("GPU 1 unlocked", LIMIT, || {
        (!shows(&d, 1, clocks.core_mhz)).then_some(())
    });
    let second = adopt(&d, &job(&[1], "slurm:78", "BlackScholes")).expect("Adopt");
    d.terminate();
    d.restart();
    let after = d.task(&second);
    assert_eq!(after.state, TaskStatus::Running, "{after:?}");
    wait_for("GPU 1 locked again after the stop", LIMIT, || {
        shows(&d, 1, clocks.core_mhz).then_some(())
    });
    assert!(
        d.stderr().contains(&format!(
            "task {second} (slurm:78) stays adopted across the stop"
        )),
        "{}",
        d.stderr()
    );
    release(&d, &second).expect("Release");
    let released = d.task(&second);
    assert_eq!(released.state, TaskStatus::Succeeded, "{released:?}");
    assert!(released.energy_j.is_some(), "{released:?}");
}

#[test]
fn daemon_adopt_through_gpuctl() {
    let d = adopt_daemon();
    let help = success(&gpuctl(&d, &["adopt", "--help"]));
    assert!(
        help.contains("--external-id") && help.contains("--deadline"),
        "{help}"
    );
    let deadline = format!("{}", now() + 3600.0);
    let out = success(&gpuctl(
        &d,
        &[
            "adopt",
            "--devices",
            "2",
            "--external-id",
            "slurm:9",
            "--owner-uid",
            "1000",
            "--app",
            "BlackScholes",
            "--deadline",
            &deadline,
            "--json",
        ],
    ));
    let id = serde_json::from_str::<serde_json::Value>(&out).expect("JSON")["id"]
        .as_str()
        .expect("id")
        .to_string();
    let tasks = success(&gpuctl(&d, &["tasks"]));
    assert!(
        tasks.contains("slurm:9") && tasks.contains(&id) && tasks.contains("running (adopted)"),
        "{tasks}"
    );
    // gpuctl task shows the job as adopted, with no workload of the agent's.
    let shown = success(&gpuctl(&d, &["task", &id]));
    let adopted = shown
        .lines()
        .find(|l| l.starts_with("adopted "))
        .unwrap_or_else(|| panic!("no adopted row: {shown}"));
    assert!(adopted.contains("slurm:9"), "{shown}");
    assert!(
        shown.contains("BlackScholes") && shown.contains("core "),
        "{shown}"
    );
    assert!(
        !shown.contains("workload") && !shown.contains("simulated"),
        "{shown}"
    );
    let out = success(&gpuctl(&d, &["release", &id, "--json"]));
    let released: serde_json::Value = serde_json::from_str(&out).expect("JSON");
    assert_eq!(released["external_id"], "slurm:9");
    assert!(
        released["energy_j"].as_f64().expect("energy_j") > 0.0,
        "{released}"
    );
    // --deadline as a duration from now.
    let out = success(&gpuctl(
        &d,
        &[
            "adopt",
            "--devices",
            "2",
            "--external-id",
            "slurm:10",
            "--owner-uid",
            "1000",
            "--deadline",
            "2h",
        ],
    ));
    let task = d.task(out.trim());
    assert_eq!(task.state, TaskStatus::Running, "{task:?}");
    let deadline = task.started.unwrap() + task.spec.deadline.unwrap();
    assert!((deadline - now() - 7200.0).abs() < 60.0, "{task:?}");
    // A mistyped device list is refused before the daemon is asked.
    let bad = gpuctl(
        &d,
        &[
            "adopt",
            "--devices",
            "x",
            "--external-id",
            "a",
            "--owner-uid",
            "1",
            "--deadline",
            "1",
        ],
    );
    assert!(!bad.status.success());
}

#[test]
fn daemon_adopt_clocks_replace_the_idle_lock() {
    let d = adopt_daemon_with("idle_clocks = \"min\"\n", Settings::default().time_scale);
    let id = adopt(&d, &job(&[1], "slurm:5", "BlackScholes")).expect("Adopt");
    let clocks = d.task(&id).clocks.expect("clocks");
    // Held at the job's clocks, not the idle lock's lowest, round after round.
    wait_for("GPU 1 locked at the job's clocks", LIMIT, || {
        shows(&d, 1, clocks.core_mhz).then_some(())
    });
    d.submit(&spec(100.0, 1.0, 3600.0, 1.0)).expect("Submit");
    std::thread::sleep(Duration::from_millis(1500));
    assert!(shows(&d, 1, clocks.core_mhz));
    release(&d, &id).expect("Release");
    // Idle again: the idle lock's lowest clock.
    wait_for("GPU 1 idle-locked", LIMIT, || {
        (core_clock(&d, 1) == 210).then_some(())
    });
}

#[test]
fn daemon_adopt_release_records_how_the_job_ended() {
    let d = adopt_daemon();
    let ended = |id: &str| {
        let t = d.task(id);
        (t.state, t.reason)
    };
    // An old caller's `Release(s)` (busctl, no end) still records succeeded.
    let id = adopt(&d, &job(&[0], "slurm:10", "default")).expect("Adopt");
    let out = d.busctl(&["call", AGENT[0], AGENT[1], AGENT[2], "Release", "s", &id]);
    assert!(
        out.status.success(),
        "busctl Release: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(ended(&id), (TaskStatus::Succeeded, None));
    // Each end through `ReleaseWithEnd`.
    for (gpu, end, state, reason) in [
        (0, "completed", TaskStatus::Succeeded, None),
        (2, "timeout", TaskStatus::Failed, Some("timeout")),
        (3, "failed", TaskStatus::Failed, None),
    ] {
        let id = adopt(&d, &job(&[gpu], &format!("slurm:{end}"), "default")).expect("Adopt");
        d.block_on(d.proxy().release_with_end(&id, end))
            .expect("ReleaseWithEnd");
        assert_eq!(ended(&id), (state, reason.map(String::from)), "{end}");
    }
    // An unknown end is refused, naming it, and the job stays adopted.
    let id = adopt(&d, &job(&[1], "slurm:11", "default")).expect("Adopt");
    let (name, message) = dbus_error(d.block_on(d.proxy().release_with_end(&id, "oom")));
    assert_eq!(name, format!("{ERROR}InvalidArgument"), "{message}");
    assert!(
        message.contains("\"end\"") && message.contains("\"oom\""),
        "{message}"
    );
    assert_eq!(ended(&id), (TaskStatus::Running, None));
    // gpuctl release --end.
    let out = success(&gpuctl(
        &d,
        &["release", &id, "--end", "cancelled", "--json"],
    ));
    let released: serde_json::Value = serde_json::from_str(&out).expect("JSON");
    assert_eq!(released["state"], "cancelled", "{released}");
    assert_eq!(ended(&id), (TaskStatus::Cancelled, None));
    let bad = gpuctl(&d, &["release", &id, "--end", "oom"]);
    assert!(!bad.status.success());
}

#[test]
fn daemon_adopt_lease_ends_an_adoption_slurm_cannot_be_asked_about() {
    // Slurm cannot be asked (the check command fails): each adoption lasts
    // until its deadline plus lease_grace_s.
    let d = adopt_daemon_with(
        "[slurm]\ncheck_command = [\"false\"]\ncheck_interval_s = 1\nlease_grace_s = 1\n",
        Settings::default().time_scale,
    );
    let short = AdoptSpec {
        deadline: now() + 2.0,
        ..job(&[0], "slurm:41", "BlackScholes")
    };
    let long = job(&[1], "slurm:42", "BlackScholes");
    let short_id = adopt(&d, &short).expect("Adopt");
    let long_id = adopt(&d, &long).expect("Adopt");
    let ended = d.wait_state(&short_id, TaskStatus::Lost, LIMIT);
    assert_eq!(
        ended.reason.as_deref(),
        Some("lease ended: its deadline plus lease_grace_s (1 s) passed and Slurm cannot be asked")
    );
    assert!(ended.finished.unwrap() >= short.deadline + 1.0, "{ended:?}");
    assert_eq!(d.task(&long_id).state, TaskStatus::Running);
    let log = d.stderr();
    assert!(
        log.contains(
            "cannot ask Slurm whether the adopted jobs still run: false: failed with no message"
        ),
        "{log}"
    );
    assert!(
        log.contains(&format!("task {short_id}: released as lost; lease ended")),
        "{log}"
    );
    // Its GPU takes an adoption again.
    adopt(&d, &job(&[0], "slurm:43", "BlackScholes")).expect("Adopt");
}

#[test]
fn daemon_adopt_reload_reads_the_apps_file_again() {
    let dir = tempfile::tempdir().expect("temp dir");
    let apps = dir.path().join("apps.toml");
    let text = std::fs::read_to_string(example_apps()).expect("the example profiles");
    std::fs::write(&apps, &text).expect("write apps.toml");
    let d = adopt_daemon_on(&apps, Settings::default());
    let refused = adopt(&d, &job(&[0], "slurm:60", "Fitted")).expect_err("no such profile");
    assert!(
        refused
            .to_string()
            .contains("key \"app\": unknown DVFS profile \"Fitted\""),
        "{refused}"
    );
    // A profile added to the file (BlackScholes's, renamed): a reload, and
    // the next job of that app is adopted at its clocks.
    let block = text
        .split("[[app]]")
        .find(|b| b.contains("name = \"BlackScholes\""))
        .expect("BlackScholes's profile");
    let added = block.replace("BlackScholes", "Fitted");
    std::fs::write(&apps, format!("{text}\n[[app]]{added}")).expect("write apps.toml");
    success(&gpuctl(&d, &["reload"]));
    let id = adopt(&d, &job(&[0], "slurm:60", "Fitted")).expect("Adopt after the reload");
    let task = d.task(&id);
    assert_eq!(task.spec.app, "Fitted");
    let clocks = task.clocks.expect("the profile's clocks");
    assert_eq!(clocks.class.as_deref(), Some("energy"), "{clocks:?}");
    // A broken file refuses the reload, naming it; the profiles stay.
    std::fs::write(&apps, "[[app]]\nname = 3\n").expect("write apps.toml");
    let out = gpuctl(&d, &["reload"]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains(&apps.display().to_string()), "{err}");
    adopt(&d, &job(&[1], "slurm:61", "Fitted")).expect("Adopt with the profiles kept");
}

/// GPU 0: an A100 split into two 3g.20gb (devices 2 and 3); GPU 1: a T4.
const MIG_HOST: &str = "[[gpu]]\nmodel = \"A100-SXM4-40GB\"\nspeed = 7\n\
                        mig = [\"3g.20gb@0\", \"3g.20gb@4\"]\n\
                        [[gpu]]\nmodel = \"T4\"\nspeed = 1\n";

#[test]
fn daemon_adopt_on_a_mig_instance_keeps_the_agents_tasks_and_mig_changes_off_it_and_its_clocks_alone(
) {
    let d = adopt_daemon_in(Settings {
        host: Some(MIG_HOST.into()),
        ..Settings::default()
    });
    // The split GPU itself: refused, naming its instances.
    let (name, message) = dbus_error(adopt(&d, &job(&[0], "slurm:70", "BlackScholes")));
    assert_eq!(name, format!("{ERROR}InvalidArgument"), "{message}");
    assert!(
        message.contains(
            "key \"devices\": GPU 0 is split into MIG instances (devices [2, 3]); adopt the instances the job runs on"
        ),
        "{message}"
    );
    // An instance: adopted, no clocks of its own (they are GPU 0's).
    let id = adopt(&d, &job(&[2], "slurm:71", "BlackScholes")).expect("Adopt");
    let task = d.task(&id);
    assert_eq!(task.state, TaskStatus::Running);
    assert_eq!(task.devices, [2]);
    assert_eq!(task.clocks, None, "{task:?}");
    assert!(
        d.stderr().contains(&format!(
            "task {id}: adopted slurm:71 of uid 4321 on GPUs [2] (app BlackScholes"
        )) && d
            .stderr()
            .contains("; MIG instances: their GPU's clocks are left alone)"),
        "{}",
        d.stderr()
    );
    // Its GPU's MIG layout cannot change under the job.
    let whole = "version: v1\nmig-configs:\n  a:\n    - devices: [0]\n      mig-enabled: false\n";
    let proxy = d.proxy();
    let (name, message) = dbus_error(
        d.block_on(async move { proxy.apply_mig_config(whole, "", Default::default()).await }),
    );
    assert_eq!(name, format!("{ERROR}Busy"), "{message}");
    assert!(
        message.contains(&format!(
            "GPU 0 holds adopted task {id} (slurm:71) on device(s) [2]: its MIG layout can change once that is released"
        )),
        "{message}"
    );
    // Tasks only an instance can hold (17 GB: more than the T4's 16) all
    // run on the other instance.
    let ids: Vec<String> = (0..4)
        .map(|_| d.submit(&spec(600.0, 17.0, 3600.0, 1.0)).expect("Submit"))
        .collect();
    for t in &ids {
        let t = d.wait_state(t, TaskStatus::Succeeded, LIMIT);
        assert_eq!(t.devices, [3], "task {} beside the adopted instance", t.id);
    }
    // Released: the instance's share of GPU 0's energy, and it takes work.
    release(&d, &id).expect("Release");
    let done = d.task(&id);
    assert!(done.energy_j.expect("energy") > 0.0, "{done:?}");
    let long: Vec<String> = (0..2)
        .map(|_| d.submit(&spec(1e6, 17.0, 1e7, 1.0)).expect("Submit"))
        .collect();
    let mut on: Vec<u32> = long
        .iter()
        .map(|t| d.wait_state(t, TaskStatus::Running, LIMIT).devices[0])
        .collect();
    on.sort_unstable();
    assert_eq!(on, [2, 3]);
}

#[test]
fn daemon_adopt_refuses_an_instance_of_a_gpu_whose_layout_is_changing() {
    let d = adopt_daemon_in(Settings {
        host: Some(MIG_HOST.into()),
        ..Settings::default()
    });
    // A long task only an instance holds (17 GB) runs on one of them, so
    // that GPU 0's change to whole drains until it ends.
    let long = d.submit(&spec(1e6, 17.0, 1e7, 1.0)).expect("Submit");
    let idle = match d.wait_state(&long, TaskStatus::Running, LIMIT).devices[..] {
        [2] => 3,
        [3] => 2,
        ref other => panic!("task {long} runs on {other:?}, not an instance"),
    };
    let whole = "version: v1\nmig-configs:\n  a:\n    - devices: [0]\n      mig-enabled: false\n";
    let proxy = d.proxy();
    let changing = d
        .block_on(async move { proxy.apply_mig_config(whole, "", Default::default()).await })
        .expect("ApplyMigConfig");
    assert_eq!(changing, [0]);
    wait_for("GPU 0 draining", LIMIT, || {
        (d.mig_layout(0).state == "draining").then_some(())
    });
    // The idle instance beside it would go with the change: Busy.
    let (name, message) = dbus_error(adopt(&d, &job(&[idle], "slurm:72", "default")));
    assert_eq!(name, format!("{ERROR}Busy"), "{message}");
    assert!(
        message.contains(&format!(
            "GPU 0's MIG layout is changing (draining) to MIG off: device {idle} can be adopted once it is stable"
        )),
        "{message}"
    );
    assert!(d.tasks().iter().all(|t| t.spec.external_id.is_empty()));
    // The change cancelled, the layout as it was: adopted.
    let proxy = d.proxy();
    d.block_on(async move { proxy.cancel_mig_change(0).await })
        .expect("CancelMigChange");
    wait_for("GPU 0 stable", LIMIT, || {
        (d.mig_layout(0).state == "stable").then_some(())
    });
    let id = adopt(&d, &job(&[idle], "slurm:72", "default")).expect("Adopt");
    assert_eq!(d.task(&id).devices, [idle]);
    assert_eq!(d.task(&long).state, TaskStatus::Running);
}
