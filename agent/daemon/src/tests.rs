//! Daemon and client agree: the real `AgentService` and engine on one end of
//! a peer-to-peer connection, the contract's `Agent1Proxy` on the other.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use futures_util::StreamExt;
use tokio::sync::oneshot;
use zbus::{connection, Guid};

use super::config::{Config, Overrides, Source};
use super::engine::{Caller, Engine, Notice, NoticeInbox, Request, Setup, Timebase};
use super::service::AgentService;
use super::store::Store;
use gpu_agent_backend::{mock::MockBackend, GpuBackend};
use gpu_agent_core::apps::AppLibrary;
use gpu_agent_core::policy::builtin_fifo;
use gpu_agent_dbus::{
    metrics_from_dict, Agent1Proxy, Strict, SubmitSpec, TaskInfo, TaskStatus, AGENT_PATH, BUS_NAME,
};
use gpu_agent_loader::Registry;

const HOST: &str = "[[gpu]]\nmodel = \"A100-SXM4-40GB\"\ncount = 2\nspeed = 1.0\n";

/// An engine's setup on the mock of [`HOST`], with its state in `dir`; the
/// mock, and where the engine's notices arrive.
fn setup(dir: &Path) -> (Setup, Arc<MockBackend>, NoticeInbox) {
    setup_on(dir, HOST)
}

/// [`setup`] on the mock of host file `host`.
fn setup_on(dir: &Path, host: &str) -> (Setup, Arc<MockBackend>, NoticeInbox) {
    let host = gpu_agent_hostspec::host::parse(Path::new("host.toml"), host).unwrap();
    // 1000x: a 10 s task takes 10 ms.
    let time = Timebase::new(1000.0).unwrap();
    let mock = Arc::new(MockBackend::new(&host, Arc::new(time)));
    let (notices, notice_inbox) = super::engine::notice_channel();
    let setup = Setup {
        devices: host.devices.clone(),
        targets: host
            .devices
            .iter()
            .map(|d| super::layout::Target::read(&*mock, d))
            .collect(),
        backend: mock.clone(),
        load: Some(mock.clone()),
        store: Store::open(dir).unwrap(),
        registry: Registry {
            plugins: Vec::new(),
            failures: Vec::new(),
        },
        policy: builtin_fifo(),
        policy_params: Vec::new(),
        apps: AppLibrary::default(),
        time,
        log_dir: Some(dir.join("logs")),
        config: Config {
            state_dir: dir.to_path_buf(),
            plugin_dir: Some(dir.join("plugins")),
            cancel_grace_s: super::config::Seconds::new(1.0).unwrap(),
            ..Config::default()
        },
        source: Source {
            file: Some(dir.join("agent.toml")),
            overrides: Overrides::default(),
            default_plugin_dir: dir.join("plugins"),
        },
        notices,
        rt: tokio::runtime::Handle::current(),
        telemetry: Default::default(),
    };
    (setup, mock, notice_inbox)
}

/// A daemon (engine + agent object) serving one peer; the client's proxy.
async fn serve(dir: &Path) -> (Agent1Proxy<'static>, zbus::Connection) {
    let (proxy, server, _mock) = serve_mock(dir).await;
    (proxy, server)
}

/// [`serve`], and the mock GPUs behind it.
async fn serve_mock(dir: &Path) -> (Agent1Proxy<'static>, zbus::Connection, Arc<MockBackend>) {
    let (proxy, _client, mock, server) = serve_both(dir).await;
    (proxy, server, mock)
}

/// [`serve_mock`], with the client's connection (for other objects'
/// proxies) in place of the server's, which the proxy keeps up.
async fn serve_mock_client(
    dir: &Path,
) -> (Agent1Proxy<'static>, zbus::Connection, Arc<MockBackend>) {
    let (proxy, client, mock, _server) = serve_both(dir).await;
    (proxy, client, mock)
}

/// A daemon serving one peer: the client's proxy and connection, the mock,
/// the server's connection.
async fn serve_both(
    dir: &Path,
) -> (
    Agent1Proxy<'static>,
    zbus::Connection,
    Arc<MockBackend>,
    zbus::Connection,
) {
    serve_both_on(dir, HOST).await
}

/// [`serve_both`] on the mock of host file `host`.
async fn serve_both_on(
    dir: &Path,
    host: &str,
) -> (
    Agent1Proxy<'static>,
    zbus::Connection,
    Arc<MockBackend>,
    zbus::Connection,
) {
    serve_lagging(dir, host, Duration::ZERO).await
}

/// [`serve_both_on`], the notice pump taking each notice `lag` after it
/// arrives (a bus side behind the engine, as on a loaded host).
async fn serve_lagging(
    dir: &Path,
    host: &str,
    lag: Duration,
) -> (
    Agent1Proxy<'static>,
    zbus::Connection,
    Arc<MockBackend>,
    zbus::Connection,
) {
    let (setup, mock, mut inbox) = setup_on(dir, host);
    let pumped = setup.notices.pumped();
    if !lag.is_zero() {
        let (tx, lagging) = tokio::sync::mpsc::unbounded_channel();
        let mut notices = std::mem::replace(&mut inbox.notices, lagging);
        tokio::spawn(async move {
            while let Some(notice) = notices.recv().await {
                tokio::time::sleep(lag).await;
                if tx.send(notice).is_err() {
                    break;
                }
            }
        });
    }
    let requests = Engine::channel();
    let engine = requests.0.clone();
    Engine::start(setup, requests).unwrap();
    let (ours, theirs) = tokio::net::UnixStream::pair().unwrap();
    let agent = AgentService::new(
        engine,
        super::auth::Auth::new(nix::unistd::getuid().as_raw()),
        ("fifo (built-in fallback)".into(), Default::default()),
        "mock:host.toml".into(),
        super::mig::MigView::new(mock.clone()).unwrap(),
        pumped,
    );
    let server = connection::Builder::unix_stream(ours)
        .server(Guid::generate())
        .unwrap()
        .p2p()
        .serve_at(AGENT_PATH, Strict::new(agent))
        .unwrap()
        .build();
    let client = connection::Builder::unix_stream(theirs).p2p().build();
    let (server, client) = tokio::try_join!(server, client).unwrap();
    let agent = super::agent_object(&server).await.unwrap();
    tokio::spawn(super::pump_notices(
        server.clone(),
        mock.clone(),
        agent,
        Default::default(),
        inbox,
    ));
    let proxy = Agent1Proxy::builder(&client)
        .destination(BUS_NAME)
        .unwrap()
        .build()
        .await
        .unwrap();
    (proxy, client, mock, server)
}

/// (id, state) of every stored task, read beside the running daemon.
/// Stops the engine on `tx` and waits for its `thread` to end.
async fn stop(tx: std::sync::mpsc::Sender<Request>, thread: std::thread::JoinHandle<()>) {
    let (reply, stopped) = oneshot::channel();
    tx.send(Request::Stop { reply }).unwrap();
    stopped.await.unwrap();
    drop(tx);
    tokio::task::spawn_blocking(move || thread.join())
        .await
        .unwrap()
        .unwrap();
}

fn stored(dir: &Path) -> Vec<(String, String)> {
    let db = rusqlite::Connection::open(dir.join(super::store::DB_FILE)).unwrap();
    let mut stmt = db
        .prepare("SELECT id, state FROM tasks ORDER BY seq")
        .unwrap();
    let rows = stmt.query_map([], |r| Ok((r.get(0)?, r.get(1)?))).unwrap();
    rows.collect::<Result<_, _>>().unwrap()
}

fn error_name(e: zbus::Error) -> String {
    match e {
        zbus::Error::MethodError(name, _, _) => name.to_string(),
        other => panic!("not a method error: {other}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_round_trips_between_daemon_and_client() {
    let dir = tempfile::tempdir().unwrap();
    let (agent, _server) = serve(dir.path()).await;
    let mut changes = agent.receive_task_changed().await.unwrap();

    let mut spec = SubmitSpec::new(10.0, 4.0, 60.0, 2.0);
    spec.name = "train".into();
    let id = agent.submit(spec.to_dict()).await.unwrap();
    assert_eq!(id, "t1");

    let mut seen = Vec::new();
    while seen.last().map(String::as_str) != Some("succeeded") {
        let signal = tokio::time::timeout(Duration::from_secs(10), changes.next())
            .await
            .expect("TaskChanged in time")
            .unwrap();
        let args = signal.args().unwrap();
        assert_eq!(args.id, "t1");
        seen.push(args.state.to_string());
    }
    assert_eq!(seen, ["queued", "running", "succeeded"]);

    let task = TaskInfo::from_dict(&agent.get_task("t1").await.unwrap()).unwrap();
    assert_eq!(task.state, TaskStatus::Succeeded);
    assert_eq!(task.spec, spec);
    assert_eq!(task.owner_uid, nix::unistd::getuid().as_raw());
    assert_eq!(task.devices, vec![0]);
    assert!(task.energy_j.unwrap() > 0.0);
    let (start, end) = (task.started.unwrap(), task.finished.unwrap());
    assert!(task.submitted <= start && start <= end);

    let listed = agent.list_tasks("succeeded").await.unwrap();
    assert_eq!(listed.len(), 1);
    assert!(agent.list_tasks("queued").await.unwrap().is_empty());
    let metrics = metrics_from_dict(&agent.metrics().await.unwrap()).unwrap();
    assert_eq!((metrics.tasks, metrics.dmc), (1, 0));
    assert_eq!(agent.policy().await.unwrap(), "fifo (built-in fallback)");
    assert_eq!(agent.backend().await.unwrap(), "mock:host.toml");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refusals_carry_their_error_names() {
    let dir = tempfile::tempdir().unwrap();
    let (agent, _server) = serve(dir.path()).await;
    let mut bad = SubmitSpec::new(10.0, 4.0, 60.0, 2.0).to_dict();
    bad.insert("weight".into(), 2u32.into());
    let e = agent.submit(bad).await.unwrap_err();
    assert_eq!(
        gpu_agent_dbus::describe_error(&e),
        "org.gpuagent.Agent1.Error.InvalidArgument: key \"weight\": expected type d (a number > 0), got u"
    );
    let huge = SubmitSpec::new(10.0, 400.0, 60.0, 2.0).to_dict();
    let e = agent.submit(huge).await.unwrap_err();
    assert_eq!(
        gpu_agent_dbus::describe_error(&e),
        "org.gpuagent.Agent1.Error.Unschedulable: needs 400 GB; the largest device has 40 GB"
    );
    let mut wide = SubmitSpec::new(10.0, 1.0, 60.0, 2.0);
    wide.runtimes = vec![1.0];
    assert_eq!(
        gpu_agent_dbus::describe_error(&agent.submit(wide.to_dict()).await.unwrap_err()),
        "org.gpuagent.Agent1.Error.InvalidArgument: key \"runtimes\": expected 2 values (one per device of the host), got 1"
    );
    let mut alt = SubmitSpec::new(10.0, 1.0, 60.0, 2.0);
    (alt.gpus, alt.gpus_alt) = (2, vec![1, 2]);
    assert_eq!(
        gpu_agent_dbus::describe_error(&agent.submit(alt.to_dict()).await.unwrap_err()),
        "org.gpuagent.Agent1.Error.InvalidArgument: key \"gpus_alt\": expected distinct device counts >= 1 other than gpus (2), got 2"
    );
    let mut app = SubmitSpec::new(10.0, 1.0, 60.0, 2.0);
    app.app = "nbody".into();
    assert_eq!(
        gpu_agent_dbus::describe_error(&agent.submit(app.to_dict()).await.unwrap_err()),
        "org.gpuagent.Agent1.Error.InvalidArgument: key \"app\": unknown DVFS profile \"nbody\"; known: default"
    );
    assert_eq!(
        error_name(agent.get_task("t9").await.unwrap_err()),
        "org.gpuagent.Agent1.Error.NoSuchTask"
    );
    assert_eq!(
        error_name(agent.cancel("t9").await.unwrap_err()),
        "org.gpuagent.Agent1.Error.NoSuchTask"
    );
    assert_eq!(
        gpu_agent_dbus::describe_error(&agent.set_policy("sjf").await.unwrap_err()),
        "org.gpuagent.Agent1.Error.UnknownPolicy: unknown policy \"sjf\"; available: none (no plugins loaded)"
    );
    assert_eq!(
        error_name(agent.list_tasks("done").await.unwrap_err()),
        "org.gpuagent.Agent1.Error.InvalidArgument"
    );
    // Nothing was stored for any of them.
    assert!(agent.list_tasks("").await.unwrap().is_empty());
    assert!(stored(dir.path()).is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancelling_a_queued_task_stores_it_cancelled() {
    let dir = tempfile::tempdir().unwrap();
    let (agent, _server) = serve(dir.path()).await;
    // Two long tasks fill both GPUs; the third waits.
    let long = SubmitSpec::new(1e6, 1.0, 60.0, 1.0).to_dict();
    for _ in 0..3 {
        agent.submit(long.clone()).await.unwrap();
    }
    agent.cancel("t3").await.unwrap();
    agent.cancel("t1").await.unwrap();
    let state = |d: &gpu_agent_dbus::Dict| TaskInfo::from_dict(d).unwrap().state;
    assert_eq!(
        state(&agent.get_task("t3").await.unwrap()),
        TaskStatus::Cancelled
    );
    assert_eq!(
        state(&agent.get_task("t1").await.unwrap()),
        TaskStatus::Cancelled
    );
    assert_eq!(
        state(&agent.get_task("t2").await.unwrap()),
        TaskStatus::Running
    );
    assert_eq!(
        gpu_agent_dbus::describe_error(&agent.cancel("t3").await.unwrap_err()),
        "org.gpuagent.Agent1.Error.NotCancellable: task t3 already cancelled"
    );
    let stored = stored(dir.path());
    assert_eq!(
        stored,
        [
            ("t1".to_string(), "cancelled".to_string()),
            ("t2".to_string(), "running".to_string()),
            ("t3".to_string(), "cancelled".to_string())
        ]
    );
}

/// A stop, then a cancel and a policy switch in the same round: the stop has
/// just ended the running `requeue` task (queued again, though the core still
/// counts it as running), so the two come too late and are refused; nothing
/// panics and nothing starts after the stop.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_after_a_stop_in_the_same_round_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let admin = Caller {
        uid: nix::unistd::getuid().as_raw(),
        admin: true,
    };
    let mut long = SubmitSpec::new(1e6, 1.0, 60.0, 1.0);
    long.requeue = true;

    // A first run takes the task and starts it; its stop queues it again.
    let (setup_1, _, _notices) = setup(dir.path());
    let (tx, rx) = Engine::channel();
    let thread = Engine::start(setup_1, (tx.clone(), rx)).unwrap();
    let (reply, submitted) = oneshot::channel();
    tx.send(Request::Submit {
        owner: admin.uid,
        spec: Box::new(long.clone()),
        reply,
    })
    .unwrap();
    assert_eq!(submitted.await.unwrap().unwrap(), "t1");
    assert_eq!(stored(dir.path()), [("t1".into(), "running".into())]);
    stop(tx, thread).await;
    assert_eq!(stored(dir.path()), [("t1".into(), "queued".into())]);

    // The second run starts it again on restore, before it reads a request;
    // the stop, the cancel and the switch are already waiting, so the engine
    // takes all three in its first round.
    let (setup_2, mock, _notices) = setup(dir.path());
    let (tx, rx) = Engine::channel();
    let (stop, stopped) = oneshot::channel();
    let (cancel, cancelled) = oneshot::channel();
    let (policy, switched) = oneshot::channel();
    tx.send(Request::Stop { reply: stop }).unwrap();
    tx.send(Request::Cancel {
        id: "t1".into(),
        caller: admin,
        reply: cancel,
    })
    .unwrap();
    tx.send(Request::SetPolicy {
        name: "fifo".into(),
        params: Default::default(),
        reply: policy,
    })
    .unwrap();
    let thread = Engine::start(setup_2, (tx, rx)).unwrap();
    let joined = tokio::task::spawn_blocking(move || thread.join())
        .await
        .unwrap();
    assert!(joined.is_ok(), "the engine thread panicked");
    stopped.await.expect("the stop is answered");
    let refused = |r: Result<(), gpu_agent_dbus::AgentError>| match r {
        Err(gpu_agent_dbus::AgentError::ShuttingDown(m)) => m,
        other => panic!("not refused as shutting down: {other:?}"),
    };
    assert!(refused(cancelled.await.unwrap()).contains("stopping"));
    assert!(refused(switched.await.unwrap()).contains("stopping"));
    // The task is queued again, and nothing runs on the GPUs.
    assert_eq!(stored(dir.path()), [("t1".into(), "queued".into())]);
    for gpu in 0..2 {
        assert!(
            mock.processes(gpu).unwrap().is_empty(),
            "GPU {gpu} runs a task"
        );
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn mig_layout_export_and_assert_read_the_gpus() {
    let dir = tempfile::tempdir().unwrap();
    let (agent, _server, mock) = serve_mock(dir.path()).await;
    // GPU 1: MIG on, 4g.20gb@0 and 3g.20gb@4, one full-size CI each.
    mock.set_mig_mode(1, true).unwrap();
    mock.reset_gpu(1).unwrap();
    for (profile, start) in [(5, 0), (9, 4)] {
        let gi = mock.create_gpu_instance(1, profile, start).unwrap();
        let ci = mock.compute_instance_profiles(1, gi.id).unwrap();
        let full = ci.iter().max_by_key(|p| p.slice_count).unwrap();
        mock.create_compute_instance(1, gi.id, full.id).unwrap();
    }
    let off =
        gpu_agent_dbus::MigLayout::from_dict(&agent.get_mig_layout(0).await.unwrap()).unwrap();
    assert_eq!(
        (
            off.model.as_str(),
            off.capable,
            off.enabled,
            off.state.as_str(),
            off.instances.len()
        ),
        ("A100-SXM4-40GB", true, false, "stable", 0)
    );
    let on = gpu_agent_dbus::MigLayout::from_dict(&agent.get_mig_layout(1).await.unwrap()).unwrap();
    let got: Vec<(&str, u32, u32)> = on
        .instances
        .iter()
        .map(|i| (i.profile.as_str(), i.profile_id, i.start))
        .collect();
    assert_eq!(got, [("4g.20gb", 5, 0), ("3g.20gb", 9, 4)]);
    assert!(on
        .instances
        .iter()
        .all(|i| i.uuid.starts_with("MIG-") && i.memory_gb > 19.0));
    assert_eq!(
        error_name(agent.get_mig_layout(2).await.unwrap_err()),
        "org.gpuagent.Agent1.Error.NoSuchDevice"
    );

    let exported = agent.export_mig_config("").await.unwrap();
    assert_eq!(
        exported,
        "version: v1\nmig-configs:\n  current:\n  - devices: [0]\n    mig-enabled: false\n  - devices: [1]\n    mig-enabled: true\n    mig-devices: {4g.20gb: 1, 3g.20gb: 1}\n"
    );
    assert_eq!(
        agent.assert_mig_config(&exported, "current").await.unwrap(),
        (true, vec![])
    );
    let example = include_str!("../../../examples/mig-config.yaml");
    assert_eq!(
        agent.assert_mig_config(example, "balanced").await.unwrap(),
        (
            false,
            vec![
                "GPU 0: MIG mode is off, wanted on".to_string(),
                "GPU 1: has 1× 4g.20gb, 1× 3g.20gb, wanted 1× 3g.20gb, 1× 2g.10gb, 2× 1g.5gb"
                    .to_string()
            ]
        )
    );
    let e = agent
        .assert_mig_config(
            "version: v1\nmig-configs:\n  a:\n    - devices: [0, 5]\n      mig-enabled: false\n",
            "",
        )
        .await
        .unwrap_err();
    assert_eq!(error_name(e), "org.gpuagent.Agent1.Error.NoSuchDevice");
    let e = agent.assert_mig_config("version: [", "").await.unwrap_err();
    assert_eq!(error_name(e), "org.gpuagent.Agent1.Error.InvalidArgument");
}

/// Clears GPU `gpu` of the mock (compute, then GPU instances) and creates
/// `layout`, one full-size compute instance per GPU instance.
fn lay_out(mock: &MockBackend, gpu: u32, layout: &[gpu_agent_core::placement::Instance]) {
    for gi in mock.gpu_instances(gpu).unwrap() {
        for ci in mock.compute_instances(gpu, gi.id).unwrap() {
            mock.destroy_compute_instance(gpu, gi.id, ci.id).unwrap();
        }
        mock.destroy_gpu_instance(gpu, gi.id).unwrap();
    }
    for i in layout {
        let gi = mock
            .create_gpu_instance(gpu, i.profile.id, i.start)
            .unwrap();
        let profiles = mock.compute_instance_profiles(gpu, gi.id).unwrap();
        let full = profiles.iter().max_by_key(|p| p.slice_count).unwrap();
        mock.create_compute_instance(gpu, gi.id, full.id).unwrap();
    }
}

/// Every maximal A100-40GB layout over profiles 19, 14, 9, 5, 0 (docs/mig.md
/// §1.4: 19 layouts, 14 configurations), written as a v1 configuration,
/// places by first-fit decreasing where the mock's driver rules accept it,
/// and then asserts true through the agent.
#[tokio::test(flavor = "multi_thread")]
async fn every_maximal_a100_layout_places_on_the_mock_and_asserts() {
    use gpu_agent_core::{mig::A100_40GB, placement::Tree};
    use gpu_agent_migconfig::{Config, Devices, Entry, MigConfigFile, Pos};
    let dir = tempfile::tempdir().unwrap();
    let (agent, _server, mock) = serve_mock(dir.path()).await;
    mock.set_mig_mode(0, true).unwrap();
    mock.reset_gpu(0).unwrap();
    let profiles: Vec<_> = [19, 14, 9, 5, 0]
        .iter()
        .map(|&id| A100_40GB.profile(id).unwrap())
        .collect();
    let layouts = Tree::new(&A100_40GB, &profiles).maximal_layouts();
    assert_eq!(layouts.len(), 19);
    let mut configurations = std::collections::BTreeSet::new();
    for layout in &layouts {
        let mut counts: Vec<(String, u32)> = Vec::new();
        for i in layout {
            match counts.iter_mut().find(|(n, _)| n == i.profile.name) {
                Some((_, c)) => *c += 1,
                None => counts.push((i.profile.name.to_string(), 1)),
            }
        }
        counts.sort();
        configurations.insert(counts.clone());
        let file = MigConfigFile {
            configs: vec![Config {
                name: "plan".into(),
                pos: Pos::default(),
                entries: vec![
                    Entry::new(vec![], Devices::List(vec![0]), true, counts),
                    Entry::new(vec![], Devices::List(vec![1]), false, vec![]),
                ],
            }],
        };
        let yaml = file.to_yaml();
        let targets = gpu_agent_migconfig::resolve(
            &MigConfigFile::parse(&yaml).unwrap(),
            Some("plan"),
            &host_gpus(),
        )
        .unwrap();
        lay_out(&mock, 0, &targets[&0].layout);
        assert_eq!(
            agent.assert_mig_config(&yaml, "plan").await.unwrap(),
            (true, vec![]),
            "{yaml}"
        );
    }
    assert_eq!(configurations.len(), 14);
}

/// [`HOST`]'s GPUs as a configuration sees them.
fn host_gpus() -> Vec<gpu_agent_migconfig::HostGpu> {
    (0..2)
        .map(|index| gpu_agent_migconfig::HostGpu {
            index,
            model: "A100-SXM4-40GB".into(),
            pci_id: Some(0x20B0_10DE),
            pci_subsystem_id: None,
            mig: Some(&gpu_agent_core::mig::A100_40GB),
        })
        .collect()
}

/// The next `MigChanged` of GPU `gpu` in a settled state (`stable`,
/// `failed`, `reset-required`), as (state, message); the steps before it.
async fn settled(
    changes: &mut gpu_agent_dbus::MigChangedStream,
    gpu: u32,
) -> ((String, String), Vec<String>) {
    let mut steps = Vec::new();
    loop {
        let signal = tokio::time::timeout(Duration::from_secs(30), changes.next())
            .await
            .expect("a MigChanged within 30 s")
            .expect("the stream goes on");
        let args = signal.args().unwrap();
        if args.gpu != gpu {
            continue;
        }
        let (state, message) = (args.state.to_string(), args.message.to_string());
        if ["stable", "failed", "reset-required"].contains(&state.as_str()) {
            return ((state, message), steps);
        }
        steps.push(format!("{state}: {message}"));
    }
}

/// A client that waits for GPU 0's MIG change by reading `GetMigLayout`
/// from the moment `ApplyMigConfig` answered sees `stable` only with the
/// new layout and its instances' `Device1` objects served (or withdrawn),
/// however far the bus side lags the engine (here each notice is pumped
/// 100 ms late): the method answers once the notices of its round are
/// pumped. What `gpuctl mig apply` and a script that waits for `stable`
/// rely on; before, the answer could overtake the `draining` notice, and
/// the wait ended at once on the state from before.
#[tokio::test(flavor = "multi_thread")]
async fn a_mig_change_read_after_apply_mig_config_answered_is_stable_only_once_made() {
    let dir = tempfile::tempdir().unwrap();
    let (agent, client, _mock, _server) =
        serve_lagging(dir.path(), HOST, Duration::from_millis(100)).await;
    for (entry, instances) in [
        ("mig-enabled: true\n      mig-devices: {\"3g.20gb\": 2}", 2),
        ("mig-enabled: false", 0),
    ] {
        let yaml = format!("version: v1\nmig-configs:\n  a:\n    - devices: [0]\n      {entry}\n");
        let changing = agent
            .apply_mig_config(&yaml, "a", Default::default())
            .await
            .unwrap();
        assert_eq!(changing, [0]);
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        loop {
            let seen = agent.get_mig_layout(0).await.unwrap();
            let seen = gpu_agent_dbus::MigLayout::from_dict(&seen).unwrap();
            if seen.state == "stable" {
                assert_eq!(seen.instances.len(), instances, "{entry}: {seen:?}");
                for start in [0, 4] {
                    let served = mig_device(&client, start).await.index().await.is_ok();
                    assert_eq!(served, instances > 0, "{entry}: instance at {start}");
                }
                break;
            }
            assert!(std::time::Instant::now() < deadline, "{entry}: {seen:?}");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

/// Every maximal layout's configuration of every MIG model of the catalogue,
/// over all its profiles (`+me` and the 1g with twice the memory included),
/// applies through `ApplyMigConfig` on a mock with one GPU of each, one
/// after another on its GPU: the GPU is then laid out as first-fit
/// decreasing places it and asserts true (only the other GPUs, which no
/// entry selects, differ). The A100-40GB over profiles 19, 14, 9, 5, 0 has
/// the 14 maximal configurations
/// `every_maximal_a100_layout_places_on_the_mock_and_asserts` applies.
#[tokio::test(flavor = "multi_thread")]
async fn every_maximal_configuration_of_every_mig_model_applies_through_apply_mig_config() {
    use gpu_agent_core::catalogue::CATALOGUE;
    use gpu_agent_core::mig::A100_40GB;
    use gpu_agent_core::placement::{self, Instance, Tree};
    let models: Vec<_> = CATALOGUE.iter().filter(|m| m.mig_capable()).collect();
    let host: String = models
        .iter()
        .map(|m| format!("[[gpu]]\nmodel = \"{}\"\nspeed = 1.0\n", m.name))
        .collect();
    let dir = tempfile::tempdir().unwrap();
    let (agent, _client, mock, _server) = serve_both_on(dir.path(), &host).await;
    let mut changes = agent.receive_mig_changed().await.unwrap();
    let a100: Vec<_> = [19, 14, 9, 5, 0]
        .iter()
        .map(|&id| A100_40GB.profile(id).unwrap())
        .collect();
    assert_eq!(Tree::new(&A100_40GB, &a100).configurations().len(), 14);
    let mut applied = Vec::new();
    for (gpu, model) in models.iter().enumerate() {
        let gpu = gpu as u32;
        let table = model.mig.unwrap();
        let all: Vec<_> = table.profiles.iter().collect();
        let configurations = Tree::new(table, &all).configurations();
        for c in &configurations {
            let mut counts: std::collections::BTreeMap<&str, u32> = Default::default();
            for p in c.profiles() {
                *counts.entry(p.name).or_default() += 1;
            }
            let devices: Vec<String> = counts
                .iter()
                .map(|(p, n)| format!("\"{p}\": {n}"))
                .collect();
            let yaml = format!(
                "version: v1\nmig-configs:\n  plan:\n    - devices: [{gpu}]\n      mig-enabled: true\n      mig-devices: {{{}}}\n",
                devices.join(", ")
            );
            let changing = agent
                .apply_mig_config(&yaml, "plan", Default::default())
                .await
                .unwrap();
            assert_eq!(changing, vec![gpu], "{yaml}");
            let ((state, message), _) = settled(&mut changes, gpu).await;
            assert_eq!(state, "stable", "{yaml}{message}");
            let (_, mismatches) = agent.assert_mig_config(&yaml, "plan").await.unwrap();
            let others: Vec<String> = (0..models.len() as u32)
                .filter(|&g| g != gpu)
                .map(|g| format!("GPU {g}: selected by no entry"))
                .collect();
            assert_eq!(mismatches, others, "{yaml}");
            let mut made: Vec<Instance> = mock
                .gpu_instances(gpu)
                .unwrap()
                .iter()
                .map(|gi| Instance {
                    profile: table.profile(gi.profile_id).unwrap(),
                    start: gi.placement.start,
                })
                .collect();
            made.sort();
            assert_eq!(
                Some(made),
                placement::place_all(table, c.profiles()),
                "{yaml}"
            );
        }
        applied.push((model.name, configurations.len()));
    }
    // 64 configurations of 8 memory slices with 1g+me and 1g double; the
    // A30's 9: 4g; two 2g (one may be +me); a 2g (or 2g+me) and two 1g (one
    // may be +me); four 1g (one may be +me).
    assert_eq!(
        applied,
        [
            ("A100-SXM4-40GB", 64),
            ("A100-SXM4-80GB", 64),
            ("H100-SXM5-80GB", 64),
            ("H100-PCIe-80GB", 64),
            ("H200-SXM-141GB", 64),
            ("A30-PCIe-24GB", 9),
        ]
    );
}

/// `examples/mig-profile-forms.yaml`, which spells profiles in every form
/// of the grammar, applies through `ApplyMigConfig` on a mock with one GPU
/// of each catalogued MIG model: each GPU is laid out exactly as its entry
/// asks, the entry for a model the host lacks (its Blackwell-only attribute
/// forms and a compute instance) selects nothing, and the host asserts true.
#[tokio::test(flavor = "multi_thread")]
async fn every_profile_form_applies_on_every_mig_model() {
    use gpu_agent_core::catalogue::CATALOGUE;
    let yaml = include_str!("../../../examples/mig-profile-forms.yaml");
    let models: Vec<_> = CATALOGUE.iter().filter(|m| m.mig_capable()).collect();
    let host: String = models
        .iter()
        .map(|m| format!("[[gpu]]\nmodel = \"{}\"\nspeed = 1.0\n", m.name))
        .collect();
    let dir = tempfile::tempdir().unwrap();
    let (agent, _client, mock, _server) = serve_both_on(dir.path(), &host).await;
    let mut changes = agent.receive_mig_changed().await.unwrap();
    let changing = agent
        .apply_mig_config(yaml, "every-form", Default::default())
        .await
        .unwrap();
    assert_eq!(changing, [0, 1, 2, 3, 4, 5]);
    let mut left: std::collections::BTreeSet<u32> = changing.into_iter().collect();
    while !left.is_empty() {
        let signal = tokio::time::timeout(Duration::from_secs(30), changes.next())
            .await
            .expect("a MigChanged within 30 s")
            .expect("the stream goes on");
        let args = signal.args().unwrap();
        if ["stable", "failed", "reset-required"].contains(&args.state) {
            assert_eq!(args.state, "stable", "GPU {}: {}", args.gpu, args.message);
            left.remove(&args.gpu);
        }
    }
    let layouts: Vec<(&str, Vec<String>)> = models
        .iter()
        .enumerate()
        .map(|(gpu, m)| {
            let table = m.mig.unwrap();
            let mut made: Vec<(u32, &str)> = mock
                .gpu_instances(gpu as u32)
                .unwrap()
                .iter()
                .map(|gi| {
                    (
                        gi.placement.start,
                        table.profile(gi.profile_id).unwrap().name,
                    )
                })
                .collect();
            made.sort();
            let made = made.iter().map(|(s, p)| format!("{p}@{s}")).collect();
            (m.name, made)
        })
        .collect();
    let want: Vec<(&str, Vec<&str>)> = vec![
        (
            "A100-SXM4-40GB",
            vec!["3g.20gb@0", "1g.5gb@4", "1g.5gb+me@5", "1g.10gb@6"],
        ),
        (
            "A100-SXM4-80GB",
            vec!["4g.40gb@0", "2g.20gb@4", "1g.10gb+me@6"],
        ),
        (
            "H100-SXM5-80GB",
            vec!["2g.20gb@0", "1g.20gb@2", "1g.20gb@4", "1g.10gb+me@6"],
        ),
        (
            "H100-PCIe-80GB",
            vec!["2g.20gb@0", "1g.20gb@2", "1g.20gb@4", "1g.10gb+me@6"],
        ),
        ("H200-SXM-141GB", vec!["7g.141gb@0"]),
        (
            "A30-PCIe-24GB",
            vec!["2g.12gb+me@0", "1g.6gb@2", "1g.6gb+me@3"],
        ),
    ];
    let layouts: Vec<(&str, Vec<&str>)> = layouts
        .iter()
        .map(|(m, l)| (*m, l.iter().map(String::as_str).collect()))
        .collect();
    assert_eq!(layouts, want);
    assert_eq!(
        agent.assert_mig_config(yaml, "every-form").await.unwrap(),
        (true, vec![])
    );
}

/// A GPU left with MIG on and no instance (mig-parted's `all-enabled`,
/// `nvidia-smi -mig 1`) is turned off by a configuration that asks MIG off:
/// it changes (it was answered as already laid out, and stayed on) and then
/// takes work as a whole GPU.
#[tokio::test(flavor = "multi_thread")]
async fn mig_off_applies_to_a_gpu_with_mig_on_and_no_instance() {
    let host = "[[gpu]]\nmodel = \"A100-SXM4-40GB\"\nspeed = 1.0\nmig = []\n\
                [[gpu]]\nmodel = \"A100-SXM4-40GB\"\nspeed = 1.0\n";
    let dir = tempfile::tempdir().unwrap();
    let (agent, _client, mock, _server) = serve_both_on(dir.path(), host).await;
    let mut changes = agent.receive_mig_changed().await.unwrap();
    assert!(mock.mig_mode(0).unwrap().unwrap().current);
    let split = agent.set_device_online(0, true).await.unwrap_err();
    assert!(
        split.to_string().contains("split into MIG instances"),
        "{split}"
    );
    let layout =
        gpu_agent_dbus::MigLayout::from_dict(&agent.get_mig_layout(0).await.unwrap()).unwrap();
    assert_eq!(
        layout.message,
        "MIG on with no instance: the GPU takes no task until a layout with instances is made"
    );
    let off = "version: v1\nmig-configs:\n  all-disabled:\n    - devices: all\n      mig-enabled: false\n";
    assert_eq!(
        agent.assert_mig_config(off, "").await.unwrap(),
        (false, vec!["GPU 0: MIG mode is on, wanted off".to_string()])
    );
    assert_eq!(
        agent
            .apply_mig_config(off, "", Default::default())
            .await
            .unwrap(),
        vec![0]
    );
    let ((state, message), _) = settled(&mut changes, 0).await;
    assert_eq!(
        (state.as_str(), message.as_str()),
        ("stable", "MIG off (drain 0.000 s, apply 0.000 s)"),
        "{message}"
    );
    assert!(!mock.mig_mode(0).unwrap().unwrap().current);
    assert_eq!(
        agent.assert_mig_config(off, "").await.unwrap(),
        (true, vec![])
    );
    // Whole again: no longer "split into MIG instances".
    agent.set_device_online(0, true).await.unwrap();
}

/// mig-parted's `all-enabled` (MIG on, no instance) is refused unless the
/// admin asks for it with `enable_without_instances`; then the GPU has MIG
/// on and no instance, takes no task (it is split into nothing) and says
/// why, asserts true, and a later layout with instances or MIG off applies.
#[tokio::test(flavor = "multi_thread")]
async fn mig_on_without_instances_only_when_asked() {
    use zbus::zvariant::{OwnedValue, Value};
    let dir = tempfile::tempdir().unwrap();
    let (agent, _server, mock) = serve_mock(dir.path()).await;
    let mut changes = agent.receive_mig_changed().await.unwrap();
    let enabled = "version: v1\nmig-configs:\n  all-enabled:\n    - devices: [0]\n      mig-enabled: true\n      mig-devices: {}\n";
    let refused = agent
        .apply_mig_config(enabled, "", Default::default())
        .await
        .unwrap_err();
    assert!(
        refused
            .to_string()
            .contains("org.gpuagent.Agent1.Error.NotSupported")
            && refused
                .to_string()
                .contains("option enable_without_instances"),
        "{refused}"
    );
    assert!(!mock.mig_mode(0).unwrap().unwrap().current);
    let asked: gpu_agent_dbus::Dict = [(
        "enable_without_instances".to_string(),
        OwnedValue::try_from(Value::from(true)).unwrap(),
    )]
    .into();
    assert_eq!(
        agent
            .apply_mig_config(enabled, "", asked.clone())
            .await
            .unwrap(),
        vec![0]
    );
    let ((state, message), steps) = settled(&mut changes, 0).await;
    assert_eq!(state, "stable", "{message}");
    assert!(
        message.starts_with("MIG on, no instance (drain "),
        "{message}"
    );
    assert!(
        steps[0].starts_with("draining: to MIG on, no instance"),
        "{steps:?}"
    );
    assert!(mock.mig_mode(0).unwrap().unwrap().current);
    assert!(mock.gpu_instances(0).unwrap().is_empty());
    let layout =
        gpu_agent_dbus::MigLayout::from_dict(&agent.get_mig_layout(0).await.unwrap()).unwrap();
    assert_eq!((layout.enabled, layout.instances.len()), (true, 0));
    assert!(
        layout
            .message
            .ends_with(": the GPU takes no task until a layout with instances is made"),
        "{}",
        layout.message
    );
    let split = agent.set_device_online(0, true).await.unwrap_err();
    assert!(
        split.to_string().contains("split into MIG instances"),
        "{split}"
    );
    let (ok, mismatches) = agent.assert_mig_config(enabled, "").await.unwrap();
    assert_eq!(
        (ok, mismatches),
        (false, vec!["GPU 1: selected by no entry".to_string()])
    );
    // Asked again: nothing to change.
    assert_eq!(
        agent.apply_mig_config(enabled, "", asked).await.unwrap(),
        Vec::<u32>::new()
    );
    // Another tool's turn is over: a layout with instances applies.
    let split = "version: v1\nmig-configs:\n  a:\n    - devices: [0]\n      mig-enabled: true\n      mig-devices: {\"3g.20gb\": 2}\n";
    assert_eq!(
        agent
            .apply_mig_config(split, "", Default::default())
            .await
            .unwrap(),
        vec![0]
    );
    let ((state, message), _) = settled(&mut changes, 0).await;
    assert_eq!(state, "stable", "{message}");
    assert_eq!(mock.gpu_instances(0).unwrap().len(), 2);
}

/// A drained GPU where a process the agent did not start runs is not
/// changed until that process has gone.
#[tokio::test(flavor = "multi_thread")]
async fn a_drained_gpu_waits_for_processes_the_agent_did_not_start() {
    use gpu_agent_backend::mock::MockProcess;
    let dir = tempfile::tempdir().unwrap();
    let (agent, _server, mock) = serve_mock(dir.path()).await;
    let mut changes = agent.receive_mig_changed().await.unwrap();
    mock.start_process(
        0,
        MockProcess {
            pid: 4242,
            used_bytes: 1 << 30,
            app: gpu_agent_plugin_api::AppModel::builtin_default(),
            mig: None,
        },
    )
    .unwrap();
    let yaml = "version: v1\nmig-configs:\n  a:\n    - devices: [0]\n      mig-enabled: true\n      mig-devices: {\"3g.20gb\": 2}\n";
    assert_eq!(
        agent
            .apply_mig_config(yaml, "", Default::default())
            .await
            .unwrap(),
        vec![0]
    );
    // It says what it waits for; the GPU keeps its mode meanwhile.
    loop {
        let signal = changes.next().await.unwrap();
        let args = signal.args().unwrap();
        if args.message.contains("pid 4242") {
            assert_eq!(args.state, "applying");
            assert_eq!(
                args.message,
                "to 3g.20gb@0, 3g.20gb@4; waiting for processes the agent did not start to leave the GPU (pid 4242)"
            );
            break;
        }
        assert_ne!(args.state, "stable", "{}", args.message);
    }
    assert!(!mock.mig_mode(0).unwrap().unwrap().current);
    mock.end_process(0, 4242).unwrap();
    let ((state, message), _) = settled(&mut changes, 0).await;
    assert_eq!(state, "stable", "{message}");
    assert!(
        message.starts_with("3g.20gb@0, 3g.20gb@4 (drain "),
        "{message}"
    );
    assert_eq!(mock.gpu_instances(0).unwrap().len(), 2);
}

/// GPU 0's `Device1` object at MIG slice `start`, its properties read afresh.
async fn mig_device(client: &zbus::Connection, start: u32) -> gpu_agent_dbus::Device1Proxy<'_> {
    gpu_agent_dbus::Device1Proxy::builder(client)
        .destination(BUS_NAME)
        .unwrap()
        .path(gpu_agent_dbus::mig_device_path(0, start))
        .unwrap()
        .cache_properties(zbus::proxy::CacheProperties::No)
        .build()
        .await
        .unwrap()
}

/// A MIG instance whose MIG device (UUID) cannot be read after a layout
/// change takes no task: offline with health `no-uuid`, shown so on its
/// `Device1`, and `SetDeviceOnline` cannot bring it back; the next change
/// that reads its UUID makes its instances take work again.
#[tokio::test(flavor = "multi_thread")]
async fn a_mig_instance_without_a_uuid_takes_no_task() {
    use gpu_agent_backend::mock::Fault;
    let dir = tempfile::tempdir().unwrap();
    let (agent, client, mock) = serve_mock_client(dir.path()).await;
    let mut changes = agent.receive_mig_changed().await.unwrap();
    mock.inject(0, Fault::NotSupported("mig_devices"));
    let apply = |yaml: &'static str| {
        let agent = agent.clone();
        async move { agent.apply_mig_config(yaml, "", Default::default()).await }
    };
    let two = "version: v1\nmig-configs:\n  plan:\n    - devices: [0]\n      mig-enabled: true\n      mig-devices: {3g.20gb: 2}\n";
    assert_eq!(apply(two).await.unwrap(), vec![0]);
    let ((state, message), _) = settled(&mut changes, 0).await;
    assert_eq!(state, "stable", "{message}");
    for start in [0, 4] {
        let device = mig_device(&client, start).await;
        assert_eq!(
            (
                device.online().await.unwrap(),
                device.health().await.unwrap(),
                device.uuid().await.unwrap()
            ),
            (false, "no-uuid".to_string(), String::new()),
            "instance at slice {start}"
        );
    }
    let index = mig_device(&client, 0).await.index().await.unwrap();
    let refused = agent.set_device_online(index, true).await.unwrap_err();
    assert_eq!(
        error_name(refused.clone()),
        "org.gpuagent.Agent1.Error.Failed"
    );
    assert!(refused.to_string().contains("no-uuid"), "{refused}");

    mock.clear_faults();
    let one = "version: v1\nmig-configs:\n  plan:\n    - devices: [0]\n      mig-enabled: true\n      mig-devices: {7g.40gb: 1}\n";
    assert_eq!(apply(one).await.unwrap(), vec![0]);
    let ((state, message), _) = settled(&mut changes, 0).await;
    assert_eq!(state, "stable", "{message}");
    let device = mig_device(&client, 0).await;
    assert_eq!(
        (
            device.online().await.unwrap(),
            device.health().await.unwrap()
        ),
        (true, "ok".to_string())
    );
    assert!(device.uuid().await.unwrap().starts_with("MIG-"));
}

/// At startup, a MIG instance whose MIG device (UUID) cannot be read takes
/// no task: the engine takes it offline with health `no-uuid` (what its
/// `Device1` shows), and `SetDeviceOnline` cannot bring it back.
#[tokio::test(flavor = "multi_thread")]
async fn a_mig_instance_found_without_a_uuid_at_startup_takes_no_task() {
    use gpu_agent_backend::mock::Fault;
    use gpu_agent_core::mig::A100_40GB;
    use gpu_agent_core::placement::Instance;
    let dir = tempfile::tempdir().unwrap();
    let (mut setup, mock, mut notices) = setup(dir.path());
    mock.set_mig_mode(0, true).unwrap();
    mock.reset_gpu(0).unwrap();
    let three = A100_40GB.profile(9).unwrap();
    let layout: Vec<Instance> = [0, 4]
        .iter()
        .map(|&start| Instance {
            profile: three,
            start,
        })
        .collect();
    lay_out(&mock, 0, &layout);
    mock.inject(0, Fault::NotSupported("mig_devices"));
    let (devices, _) =
        super::layout::discover(&*mock, setup.devices.clone(), None, &Default::default()).unwrap();
    assert_eq!(devices.len(), 4);
    setup.targets = devices
        .iter()
        .map(|d| super::layout::Target::read(&*mock, d))
        .collect();
    setup.devices = devices;
    let (tx, rx) = Engine::channel();
    Engine::start(setup, (tx.clone(), rx)).unwrap();
    let mut offline = Vec::new();
    while offline.len() < 2 {
        let notice = tokio::time::timeout(Duration::from_secs(10), notices.notices.recv())
            .await
            .expect("a notice within 10 s")
            .expect("the engine runs");
        if let Notice::DeviceHealth {
            device,
            online,
            health,
        } = notice
        {
            offline.push((device, online, health));
        }
    }
    assert_eq!(
        offline,
        [(2, false, "no-uuid".into()), (3, false, "no-uuid".into())]
    );
    let (reply, answer) = oneshot::channel();
    tx.send(Request::SetDeviceOnline {
        gpu: 2,
        online: true,
        reply,
    })
    .unwrap();
    let refused = answer.await.unwrap().unwrap_err();
    assert!(refused.to_string().contains("no-uuid"), "{refused}");
}

/// Requests a previous run stored and answered but whose changes it never
/// wrote (the disk was full) are carried out at the next start, in order,
/// an adoption under the id it answered; their intents are then deleted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stored_requests_whose_changes_were_never_written_are_carried_out_at_start() {
    let dir = tempfile::tempdir().unwrap();
    let deadline = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs_f64()
        + 3600.0;
    {
        let mut store = Store::open(dir.path()).unwrap();
        let intents = [
            serde_json::json!({"request": "set_device_online", "gpu": 1, "online": false}),
            serde_json::json!({"request": "adopt", "id": "t7", "spec": {
                "devices": [0], "external_id": "slurm:1", "owner_uid": 1000,
                "app": "default", "deadline": deadline,
            }}),
        ];
        for intent in intents {
            store.put_intent(&intent.to_string()).unwrap();
        }
        store.sync().unwrap();
    }
    let (setup, _mock, _notices) = setup(dir.path());
    let (tx, rx) = Engine::channel();
    let thread = Engine::start(setup, (tx.clone(), rx)).unwrap();
    let (reply, census) = oneshot::channel();
    tx.send(Request::Census { reply }).unwrap();
    let health: Vec<String> = census
        .await
        .unwrap()
        .health
        .iter()
        .map(ToString::to_string)
        .collect();
    assert_eq!(health, ["ok", "drained"]);
    assert_eq!(stored(dir.path()), [("t7".into(), "running".into())]);
    stop(tx, thread).await;
    let store = Store::open(dir.path()).unwrap();
    assert_eq!(store.intents().unwrap(), []);
}

/// An adopted job's energy counts the time gpu-agentd was down: its GPU's
/// counter from the adoption to the release, across a stop and a start (the
/// readings stored at the adoption and at the stop), on a mock whose clock
/// moves only when told, so that the energy is exactly the counter's gain.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_adopted_jobs_energy_counts_the_time_the_agent_was_down() {
    let dir = tempfile::tempdir().unwrap();
    let host = gpu_agent_hostspec::host::parse(Path::new("host.toml"), HOST).unwrap();
    let clock = Arc::new(gpu_agent_backend::mock::VirtualClock::new());
    let mock = Arc::new(MockBackend::new(&host, clock.clone()));
    clock.advance(100.0);
    let on_mock = |setup: Setup| Setup {
        backend: mock.clone(),
        load: Some(mock.clone()),
        ..setup
    };
    let ask = |tx: &std::sync::mpsc::Sender<Request>, id: &str| {
        let (reply, task) = oneshot::channel();
        tx.send(Request::GetTask {
            id: id.into(),
            reply,
        })
        .unwrap();
        task
    };
    let (setup_first, _, _notices) = setup(dir.path());
    let (tx, rx) = Engine::channel();
    let thread = Engine::start(on_mock(setup_first), (tx.clone(), rx)).unwrap();
    let at_adopt = mock.energy_mj(1).unwrap().unwrap();
    let deadline = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs_f64()
        + 3600.0;
    let (reply, adopted) = oneshot::channel();
    tx.send(Request::Adopt {
        id: None,
        spec: gpu_agent_dbus::AdoptSpec {
            devices: vec![1],
            external_id: "slurm:7".into(),
            owner_uid: 1000,
            app: "default".into(),
            deadline,
        },
        reply,
    })
    .unwrap();
    let id = adopted.await.unwrap().unwrap();
    clock.advance(10.0);
    stop(tx, thread).await;
    let at_stop = mock.energy_mj(1).unwrap().unwrap();
    // Down for 100 s.
    clock.advance(100.0);
    let (setup_second, _, _notices) = setup(dir.path());
    let (tx, rx) = Engine::channel();
    let thread = Engine::start(on_mock(setup_second), (tx.clone(), rx)).unwrap();
    let kept = ask(&tx, &id).await.unwrap().unwrap();
    assert_eq!(kept.state, TaskStatus::Running);
    clock.advance(10.0);
    let (reply, released) = oneshot::channel();
    tx.send(Request::Release {
        id: id.clone(),
        end: gpu_agent_dbus::ReleaseEnd::Completed,
        reply,
    })
    .unwrap();
    released.await.unwrap().unwrap();
    let at_release = mock.energy_mj(1).unwrap().unwrap();
    let done = ask(&tx, &id).await.unwrap().unwrap();
    stop(tx, thread).await;
    assert_eq!(done.state, TaskStatus::Succeeded);
    let energy_mj = done.energy_j.expect("its energy") * 1000.0;
    let down_mj = (at_stop as f64 - at_adopt as f64) * 10.0;
    assert!(down_mj > 0.0, "the mock draws power at idle");
    assert!(
        (energy_mj - (at_release - at_adopt) as f64).abs() <= 1.0,
        "{energy_mj} mJ recorded, the counter gained {} mJ ({down_mj} mJ of it while down)",
        at_release - at_adopt
    );
    // Released: its readings are gone from the store.
    let store = Store::open(dir.path()).unwrap();
    assert_eq!(store.meta(&format!("adopted_meters:{id}")).unwrap(), None);
}
