//! A full state disk (issue 28): every request that changes state answers
//! only once its change is stored, or answers a named error and changes
//! nothing, in memory either.
//!
//! The state directory is a small tmpfs the test mounts, sets the scene on,
//! then fills. Each state-changing method is called once on the full disk;
//! its answer must then hold twice: in the running daemon, and after a
//! kill -9 and a start on the same tmpfs grown to have room. Mounting needs
//! root; without it the test says so and passes.

use std::collections::HashMap;
use std::io::Write;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use gpu_agent_dbus::{AdoptSpec, Device1Proxy, Dict, SubmitSpec, TaskInfo, TaskStatus};
use tempfile::TempDir;
use zbus::proxy::CacheProperties;
use zbus::zvariant::{OwnedValue, Value};

use crate::daemon::{spec, wait_for, Daemon, Settings};
use crate::harness::{artefacts, SA_GREEDY};

const LIMIT: Duration = Duration::from_secs(60);

/// GPU 0 runs `a` and drains for a MIG change; GPU 1 is idle (the change
/// made on the full disk); GPU 2 idle (adopted on it); GPU 3 idle (drained
/// on it); GPU 4, the only one with 80 GB, runs `b` with `c` waiting
/// behind; GPU 5 is adopted (released on it).
const HOST: &str = "[[gpu]]\nmodel = \"A100-SXM4-40GB\"\ncount = 2\nspeed = 1.0\n\n\
                    [[gpu]]\nmodel = \"V100-SXM2-32GB\"\nspeed = 0.6\n\n\
                    [[gpu]]\nmodel = \"T4\"\nspeed = 0.25\n\n\
                    [[gpu]]\nmodel = \"H100-SXM5-80GB\"\nspeed = 1.0\n\n\
                    [[gpu]]\nmodel = \"T4\"\nspeed = 0.25\n";

/// GPU `gpu` split in two `3g.20gb` instances (mig-parted v1).
fn split(gpu: u32) -> String {
    format!(
        "version: v1\nmig-configs:\n  a:\n    - devices: [{gpu}]\n      mig-enabled: true\n      \
         mig-devices: {{\"3g.20gb\": 2}}\n"
    )
}

/// A tmpfs the test mounted, unmounted when dropped.
struct Tmpfs {
    dir: TempDir,
}

impl Tmpfs {
    /// Mounts a tmpfs of `size` (`mount`'s spelling); `None` when not root.
    fn mount(size: &str) -> Option<Tmpfs> {
        if !nix::unistd::geteuid().is_root() {
            return None;
        }
        let dir = tempfile::tempdir().expect("temp dir");
        run(Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(dir.path()));
        Some(Tmpfs { dir })
    }

    fn path(&self) -> &Path {
        self.dir.path()
    }

    /// Gives it `size`, keeping its files.
    fn resize(&self, size: &str) {
        run(Command::new("mount")
            .args(["-o", &format!("remount,size={size}")])
            .arg(self.path()));
    }

    /// Writes a file until the file system is full.
    fn fill(&self) {
        let mut file = std::fs::File::create(self.path().join("filler")).expect("a filler file");
        let block = vec![0u8; 4096];
        while file.write_all(&block).is_ok() {}
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(self.path()).status();
    }
}

fn run(command: &mut Command) {
    let status = command.status().expect("run a command");
    assert!(status.success(), "{command:?} failed: {status}");
}

fn now() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("after 1970")
        .as_secs_f64()
}

/// A task of `mem_gb` that runs for days, named `name`.
fn long(name: &str, mem_gb: f64) -> SubmitSpec {
    let mut s = spec(1e6, mem_gb, 1e9, 1.0);
    s.name = name.into();
    s
}

fn adopt_spec(gpu: u32) -> AdoptSpec {
    AdoptSpec {
        devices: vec![gpu],
        external_id: format!("slurm:{gpu}"),
        owner_uid: 4321,
        app: "default".into(),
        deadline: now() + 3600.0,
    }
}

/// A method's answer: `Ok` with what it returned, or the error's name and
/// message.
type Answer = Result<String, (String, String)>;

/// Every case's answer, by method.
type Answers<'a> = HashMap<&'a str, Answer>;

fn answer<T: std::fmt::Debug>(result: zbus::Result<T>) -> Answer {
    match result {
        Ok(v) => Ok(format!("{v:?}").trim_matches('"').to_string()),
        Err(zbus::Error::MethodError(name, message, _)) => {
            Err((name.to_string(), message.unwrap_or_default()))
        }
        Err(e) => panic!("no answer, a {e:?}"),
    }
}

/// Task `id`, if the daemon knows it.
fn task(d: &Daemon, id: &str) -> Option<TaskInfo> {
    let proxy = d.proxy();
    let id = id.to_string();
    let dict = d.block_on(async move { proxy.get_task(&id).await }).ok()?;
    Some(TaskInfo::from_dict(&dict).expect("a task dictionary the contract reads"))
}

/// Waits until GPU `gpu` has no change under way; its instances.
fn settled(d: &Daemon, gpu: u32) -> usize {
    wait_for(&format!("GPU {gpu}'s MIG change to settle"), LIMIT, || {
        let l = d.mig_layout(gpu);
        (l.state != "draining" && l.state != "applying").then_some(l.instances.len())
    })
}

fn device(d: &Daemon, gpu: u32) -> Device1Proxy<'static> {
    let _rt = d.enter();
    d.block_on(async {
        Device1Proxy::builder(d.conn())
            .path(format!("/org/gpuagent/Agent1/gpu/{gpu}"))
            .expect("a device path")
            .cache_properties(CacheProperties::No)
            .build()
            .await
            .expect("a Device1 proxy")
    })
}

fn online(d: &Daemon, gpu: u32) -> bool {
    let device = device(d, gpu);
    d.block_on(async move { device.online().await.expect("Online") })
}

/// The task on GPU `gpu` (`""`: none).
fn current_task(d: &Daemon, gpu: u32) -> String {
    let device = device(d, gpu);
    d.block_on(async move { device.current_task().await.expect("CurrentTask") })
}

fn policy(d: &Daemon) -> (String, Dict) {
    let proxy = d.proxy();
    d.block_on(async move {
        (
            proxy.policy().await.expect("Policy"),
            proxy.policy_parameters().await.expect("PolicyParameters"),
        )
    })
}

/// The ids answered, the scene's ids, by name.
struct Scene {
    ids: HashMap<&'static str, String>,
}

/// One state-changing method, called once on the full disk.
struct Case {
    method: &'static str,
    call: fn(&Daemon, &Scene) -> Answer,
    /// Whether the daemon shows the answer: `Ok(())`, or what is wrong.
    /// `answers` holds every case's answer, by method; `restarted` says
    /// whether the daemon was started again since.
    holds: fn(&Daemon, &Scene, &Answers, bool) -> Result<(), String>,
}

const CASES: &[Case] = &[
    Case {
        method: "Submit",
        call: |d, _| answer(d.submit(&long("d", 60.0))),
        holds: |d, _, answers, _| match &answers["Submit"] {
            Ok(id) if task(d, id).is_some_and(|t| t.spec.name == "d") => Ok(()),
            Err(_) if !d.tasks().iter().any(|t| t.spec.name == "d") => Ok(()),
            a => Err(format!("answered {a:?}; the tasks: {:?}", d.tasks())),
        },
    },
    Case {
        method: "Cancel",
        call: |d, s| {
            let proxy = d.proxy();
            let id = s.ids["c"].clone();
            answer(d.block_on(async move { proxy.cancel(&id).await }))
        },
        holds: |d, s, answers, _| {
            let state = d.task(&s.ids["c"]).state;
            match (&answers["Cancel"], state) {
                (Ok(_), TaskStatus::Cancelled) => Ok(()),
                // Still waiting; after the restart it may run (`b` was lost).
                (Err(_), s) if !s.is_terminal() => Ok(()),
                (a, state) => Err(format!("answered {a:?}, task c is {state}")),
            }
        },
    },
    Case {
        method: "SetPolicy",
        call: |d, _| {
            let proxy = d.proxy();
            answer(d.block_on(async move { proxy.set_policy("greedy-eft").await }))
        },
        holds: |d, s, answers, _| {
            // The last switch answered wins: this one, then the one with
            // parameters.
            let (name, params) = policy(d);
            let budget = params.get("budget_ms").map(|v| format!("{v:?}"));
            let expected = match (&answers["SetPolicy"], &answers["SetPolicyWithParameters"]) {
                (_, Ok(_)) => "sa-greedy",
                (Ok(_), Err(_)) => "greedy-eft",
                (Err(_), Err(_)) => s.ids["policy"].as_str(),
            };
            let budget_ok =
                (name != "sa-greedy") || budget.as_deref().is_some_and(|b| b.contains("20"));
            if name == expected && budget_ok {
                Ok(())
            } else {
                Err(format!(
                    "answered {:?} then {:?}; the policy is {name} with budget_ms {budget:?}",
                    answers["SetPolicy"], answers["SetPolicyWithParameters"]
                ))
            }
        },
    },
    Case {
        method: "SetPolicyWithParameters",
        call: |d, _| {
            let proxy = d.proxy();
            let params: Dict = [(
                "budget_ms".to_string(),
                OwnedValue::try_from(Value::from(20i64)).unwrap(),
            )]
            .into_iter()
            .collect();
            answer(d.block_on(async move {
                proxy.set_policy_with_parameters("sa-greedy", params).await
            }))
        },
        // Checked with SetPolicy.
        holds: |_, _, _, _| Ok(()),
    },
    Case {
        method: "ApplyMigConfig",
        call: |d, _| {
            let proxy = d.proxy();
            answer(
                d.block_on(async move { proxy.apply_mig_config(&split(1), "", Dict::new()).await }),
            )
        },
        holds: |d, _, answers, _| {
            let instances = settled(d, 1);
            match (&answers["ApplyMigConfig"], instances) {
                (Ok(_), 2) | (Err(_), 0) => Ok(()),
                (a, n) => Err(format!("answered {a:?}, GPU 1 has {n} MIG instances")),
            }
        },
    },
    Case {
        method: "CancelMigChange",
        call: |d, _| {
            let proxy = d.proxy();
            answer(d.block_on(async move { proxy.cancel_mig_change(0).await }))
        },
        holds: |d, _, answers, restarted| {
            // Before the restart, task a still runs on GPU 0: a change not
            // cancelled still drains; after it, a is lost and the change is
            // made.
            let l = d.mig_layout(0);
            match (&answers["CancelMigChange"], restarted) {
                (Ok(_), _) if settled(d, 0) == 0 => Ok(()),
                (Err(_), false) if l.state == "draining" => Ok(()),
                (Err(_), true) if settled(d, 0) == 2 => Ok(()),
                (a, _) => Err(format!("answered {a:?}, GPU 0 is {l:?}")),
            }
        },
    },
    Case {
        method: "SetDeviceOnline",
        call: |d, _| {
            let proxy = d.proxy();
            answer(d.block_on(async move { proxy.set_device_online(3, false).await }))
        },
        holds: |d, _, answers, _| match (&answers["SetDeviceOnline"], online(d, 3)) {
            (Ok(_), false) | (Err(_), true) => Ok(()),
            (a, on) => Err(format!("answered {a:?}, GPU 3 online: {on}")),
        },
    },
    Case {
        method: "Adopt",
        call: |d, _| {
            let proxy = d.proxy();
            answer(d.block_on(async move { proxy.adopt(adopt_spec(2).to_dict()).await }))
        },
        holds: |d, _, answers, _| {
            let adopted = |t: &TaskInfo| t.spec.external_id == "slurm:2";
            match &answers["Adopt"] {
                Ok(id)
                    if task(d, id)
                        .is_some_and(|t| adopted(&t) && t.state == TaskStatus::Running) =>
                {
                    Ok(())
                }
                Err(_) if !d.tasks().iter().any(adopted) && current_task(d, 2).is_empty() => Ok(()),
                a => Err(format!(
                    "answered {a:?}; GPU 2 runs {:?}; the tasks: {:?}",
                    current_task(d, 2),
                    d.tasks()
                )),
            }
        },
    },
    Case {
        method: "Release",
        call: |d, s| {
            let proxy = d.proxy();
            let id = s.ids["adopted"].clone();
            answer(d.block_on(async move { proxy.release(&id).await }))
        },
        holds: |d, s, answers, _| {
            let state = d.task(&s.ids["adopted"]).state;
            match (&answers["Release"], state) {
                (Ok(_), s) if s.is_terminal() => Ok(()),
                (Err(_), TaskStatus::Running) => Ok(()),
                (a, state) => Err(format!("answered {a:?}, the adopted task is {state}")),
            }
        },
    },
];

/// Every case's answer holds in `d`; panics naming each that does not.
fn check(d: &Daemon, scene: &Scene, answers: &Answers, restarted: bool) {
    let wrong: Vec<String> = CASES
        .iter()
        .filter_map(|case| {
            (case.holds)(d, scene, answers, restarted)
                .err()
                .map(|e| format!("{}: {e}", case.method))
        })
        .collect();
    let when = if restarted {
        "after kill -9 and a start with room"
    } else {
        "on the full disk"
    };
    assert!(
        wrong.is_empty(),
        "{when}:\n{}\nstderr:\n{}",
        wrong.join("\n"),
        d.stderr()
    );
}

#[test]
fn daemon_full_disk_every_answer_holds_after_kill_and_restart() {
    let Some(disk) = Tmpfs::mount("4m") else {
        println!(
            "daemon_full_disk_every_answer_holds_after_kill_and_restart: skipped: \
             it mounts a tmpfs and needs root"
        );
        return;
    };
    let mut d = Daemon::start_with(Settings {
        host: Some(HOST.into()),
        state_dir: Some(disk.path().join("state")),
        ..Settings::default()
    });
    std::fs::copy(artefacts().join(SA_GREEDY), d.plugin_dir().join(SA_GREEDY))
        .expect("install sa-greedy");
    let proxy = d.proxy();
    d.block_on(async move { proxy.reload().await })
        .expect("Reload");

    // The scene, on a disk with room.
    let mut ids = HashMap::new();
    let b = d.submit(&long("b", 60.0)).expect("Submit b");
    assert_eq!(d.wait_state(&b, TaskStatus::Running, LIMIT).devices, [4]);
    let a = d.submit(&long("a", 35.0)).expect("Submit a");
    assert_eq!(d.wait_state(&a, TaskStatus::Running, LIMIT).devices, [0]);
    ids.insert("c", d.submit(&long("c", 60.0)).expect("Submit c"));
    let proxy = d.proxy();
    let began = d.block_on(async move { proxy.apply_mig_config(&split(0), "", Dict::new()).await });
    assert_eq!(began, Ok(vec![0]));
    assert_eq!(d.mig_layout(0).state, "draining");
    let proxy = d.proxy();
    let adopted = d.block_on(async move { proxy.adopt(adopt_spec(5).to_dict()).await });
    ids.insert("adopted", adopted.expect("Adopt GPU 5"));
    ids.insert("policy", policy(&d).0);

    // Full: a Submit fails once the database cannot grow (its file may
    // still have room for a few).
    disk.fill();
    let mut acknowledged = Vec::new();
    let refused = (0..200).find_map(|i| match d.submit(&long(&format!("probe{i}"), 60.0)) {
        Ok(id) => {
            acknowledged.push(id);
            None
        }
        Err(e) => Some(e),
    });
    let refused = refused.expect("a Submit is refused once the disk is full");
    assert!(refused.to_string().contains("disk is full"), "{refused}");

    let scene = Scene { ids };
    let answers: Answers = CASES
        .iter()
        .map(|case| (case.method, (case.call)(&d, &scene)))
        .collect();
    for (method, a) in &answers {
        if let Err((name, message)) = a {
            assert!(
                name.starts_with("org.gpuagent.Agent1.Error."),
                "{method}: {name}: {message}"
            );
        }
    }
    check(&d, &scene, &answers, false);

    d.kill9();
    disk.resize("64m");
    d.restart();
    check(&d, &scene, &answers, true);
    for id in &acknowledged {
        d.task(id);
    }
}
