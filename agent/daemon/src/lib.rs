//! `gpu-agentd`: the service that owns a host's GPUs.
//!
//! [`run`] wires the parts together: the GPU backend (NVML, or the mock of a
//! host file), the state [`store`], the policy plugins, the [`engine`] thread
//! that drives the scheduler core, and the D-Bus objects of [`service`],
//! which check callers ([`auth`]) and forward requests to the engine.

pub mod auth;
pub mod config;
mod devices;
pub mod early_signals;
pub mod engine;
pub mod exec;
pub mod exporter;
pub mod health;
pub mod heap;
pub mod layout;
pub mod mig;
pub mod output;
pub mod policy_params;
pub mod policy_thread;
pub mod service;
pub mod states;
pub mod store;
mod supervise;
pub mod telemetry;
pub mod test_hooks;

use std::future::Future;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use zbus::{connection, fdo::ObjectManager, object_server::InterfaceRef, Connection};

use config::{Bus, Config, Source};
use devices::DeviceObject;
use engine::{Engine, EngineError, Notice, NoticeInbox, Request, Setup, Timebase};
use gpu_agent_backend::{
    mock::MockBackend, nvml::NvmlBackend, BackendError, GpuBackend, ModelledLoad,
};
use gpu_agent_core::policy::PolicyInstance;
use gpu_agent_core::{
    apps::AppLibrary,
    catalogue,
    host::{DeviceSpec, Partition},
};
use gpu_agent_dbus::{parameters_to_dict, serve_strict_properties, Strict, AGENT_PATH, BUS_NAME};
use gpu_agent_input::InputError;
use gpu_agent_loader::{PluginError, Registry};
use layout::Target;
use mig::MigView;
use service::AgentService;
use store::{Store, StoreError};

/// Why the daemon could not start.
#[derive(Debug, thiserror::Error)]
pub enum DaemonError {
    /// A configuration, host or profile file is wrong.
    #[error(transparent)]
    Input(#[from] InputError),
    /// The GPUs cannot be read.
    #[error(transparent)]
    Backend(#[from] BackendError),
    /// The state cannot be opened.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// The engine cannot start.
    #[error(transparent)]
    Engine(#[from] EngineError),
    /// A time scale that is not a positive number.
    #[error("time scale {0}: expected a finite number > 0")]
    TimeScale(f64),
    /// The plugins cannot be listed, or the policy asked for is not there.
    #[error(transparent)]
    Plugin(#[from] PluginError),
    /// A GPU the catalogue does not describe.
    #[error("GPU {gpu} is a {name:?}, which the catalogue does not describe; known: {known}")]
    UnknownGpu {
        /// Its index.
        gpu: u32,
        /// Its NVML name.
        name: String,
        /// The catalogue's NVML names.
        known: String,
    },
    /// The metrics address cannot be bound.
    #[error("metrics_listen {addr}: cannot listen: {reason}")]
    Metrics {
        /// The address.
        addr: std::net::SocketAddr,
        /// Why.
        reason: String,
    },
    /// The bus cannot be reached, or the name is taken.
    #[error("cannot serve {BUS_NAME} on the {bus} bus: {cause}")]
    Bus {
        /// `system` or `session`.
        bus: &'static str,
        /// Why.
        cause: Box<zbus::Error>,
    },
}

/// What the daemon runs with: the configuration after the command line.
pub struct Options {
    /// Where the configuration comes from; `Reload` reads it again.
    pub source: Source,
    /// The configuration `source` gave at start.
    pub config: Config,
    /// `--policy`: overrides the stored and configured policy.
    pub policy: Option<String>,
    /// Where plugins are loaded from.
    pub plugin_dir: PathBuf,
    /// Whether task output goes to the journal (else to files in the state dir).
    pub journal: bool,
    /// `--accept-state-loss`: start with a database behind what was
    /// acknowledged, giving up the tasks it lacks.
    pub accept_state_loss: bool,
}

/// Runs the daemon until `stop` resolves, then stops it cleanly.
pub async fn run(options: Options, stop: impl Future<Output = ()>) -> Result<(), DaemonError> {
    let running = start(options).await?;
    stop.await;
    running.stop().await;
    Ok(())
}

/// The GPUs the daemon drives and the backend it reaches them through.
struct Gpus {
    backend: Arc<dyn GpuBackend>,
    /// The same backend when it is the mock (`--mock`).
    mock: Option<Arc<MockBackend>>,
    /// The physical GPUs, before their MIG layouts are read.
    specs: Vec<DeviceSpec>,
    /// `nvml` or `mock:FILE`, for the log and `BackendName`.
    name: String,
}

/// The policy the daemon starts with, and what it was chosen from.
struct StartPolicy {
    registry: Registry,
    policy: PolicyInstance,
    /// The parameters it was given (stored with it), over its table.
    params: policy_params::Params,
    /// Its parameters as in use, for the `PolicyParameters` property.
    values: Vec<(String, gpu_agent_dbus::ParamValue)>,
    /// The stored fault of a policy that failed before, if any.
    fault: Option<policy_thread::Fault>,
}

/// What a started daemon runs, each part stopped in turn by [`Running::stop`].
struct Running {
    engine: std::sync::mpsc::Sender<Request>,
    engine_thread: std::thread::JoinHandle<()>,
    stop_events: Arc<std::sync::atomic::AtomicBool>,
    events: std::thread::JoinHandle<()>,
    sampler: tokio::task::JoinHandle<()>,
    hangups: tokio::task::JoinHandle<()>,
    metrics: Option<tokio::task::JoinHandle<()>>,
    watchdog: Option<tokio::task::JoinHandle<()>>,
    pump: tokio::task::JoinHandle<()>,
    conn: Connection,
}

/// Starts the daemon: GPUs, store, policy, the bus name, then the engine
/// and the tasks around it. Nothing starts a task before the name is ours.
async fn start(options: Options) -> Result<Running, DaemonError> {
    let cfg = &options.config;
    let time = Timebase::new(cfg.time_scale).ok_or(DaemonError::TimeScale(cfg.time_scale))?;
    let gpus = open_gpus(cfg, time)?;
    let backend = gpus.backend.clone();
    let load = gpus.mock.clone().map(|m| m as Arc<dyn ModelledLoad>);
    let apps = match &cfg.apps {
        Some(file) => gpu_agent_hostspec::apps::load(file)?,
        None => AppLibrary::default(),
    };
    let mut store = open_store(&options)?;
    let n_gpus = gpus.specs.len() as u32;
    let devices = discover(&*backend, gpus.specs, &mut store)?;
    let targets: Vec<Target> = devices.iter().map(|d| Target::read(&*backend, d)).collect();
    let start_policy = start_policy(&options, &store)?;
    log::info!(
        "{} device(s) on {}; policy {}; state in {}; time scale {}",
        devices.len(),
        gpus.name,
        start_policy.policy.name,
        cfg.state_dir.display(),
        cfg.time_scale
    );
    let requests = Engine::channel();
    let engine = requests.0.clone();
    let telemetry = telemetry::Telemetry::default();
    // Task output without an output file: here, else (systemd) the journal.
    let log_dir = (!options.journal).then(|| cfg.state_dir.join("logs"));
    let (notices, notice_inbox) = engine::notice_channel();
    let agent = agent_service(
        engine.clone(),
        &start_policy,
        gpus.name,
        MigView::new(backend.clone())?,
        &telemetry,
        log_dir.clone(),
        notices.pumped(),
    );
    // Bound before anything starts, so that a taken port refuses the start.
    let metrics_listener = match cfg.metrics_listen {
        Some(addr) => Some(bind_metrics(addr).await?),
        None => None,
    };
    let mock_control = gpus.mock.map(|mock| {
        health::MockControl::new(
            mock,
            n_gpus,
            auth::Auth::new(nix::unistd::getuid().as_raw()),
        )
    });
    let setup = Setup {
        devices,
        targets,
        backend,
        load,
        store,
        registry: start_policy.registry,
        policy: start_policy.policy,
        policy_params: start_policy.params,
        apps,
        time,
        log_dir,
        config: cfg.clone(),
        source: options.source.clone(),
        notices,
        rt: tokio::runtime::Handle::current(),
        telemetry,
    };
    let conn = serve(
        cfg.bus,
        agent,
        mock_control,
        &*setup.backend,
        &setup.devices,
        &setup.targets,
    )
    .await?;
    // The name is ours: no other daemon runs on this bus. Only now may tasks start.
    launch(setup, requests, notice_inbox, conn, metrics_listener).await
}

/// Starts the engine on `setup`, then what surrounds it: the GPU event
/// thread, the notice pump, the sampler, the exporter, the watchdog and
/// SIGHUP.
async fn launch(
    setup: Setup,
    requests: (
        std::sync::mpsc::Sender<Request>,
        std::sync::mpsc::Receiver<Request>,
    ),
    notice_inbox: NoticeInbox,
    conn: Connection,
    metrics_listener: Option<tokio::net::TcpListener>,
) -> Result<Running, DaemonError> {
    let engine = requests.0.clone();
    let bus = setup.config.bus;
    let bus_error = bus_error(bus);
    let devices = setup.devices.clone();
    let targets = setup.targets.clone();
    let backend = setup.backend.clone();
    let telemetry = setup.telemetry.clone();
    let metrics_node = setup.config.metrics_node.clone();
    let engine_thread = Engine::start(setup, requests)?;
    let stop_events = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let events = health::watch(backend.clone(), engine.clone(), stop_events.clone())
        .map_err(|e| DaemonError::Engine(EngineError::Thread(e)))?;
    let objects = device_objects(&conn, &devices, &targets)
        .await
        .map_err(&bus_error)?;
    let agent = agent_object(&conn).await.map_err(&bus_error)?;
    let pump = tokio::spawn(pump_notices(
        conn.clone(),
        backend.clone(),
        agent,
        objects.clone(),
        notice_inbox,
    ));
    let metrics = metrics_listener.map(|listener| {
        if let Ok(addr) = listener.local_addr() {
            log::info!("serving Prometheus metrics at http://{addr}/metrics");
        }
        let node = metrics_node.unwrap_or_else(exporter::host_name);
        log::info!("metrics: every series is labelled node=\"{node}\"");
        tokio::spawn(exporter::serve(
            node,
            listener,
            backend.clone(),
            devices
                .iter()
                .filter(|d| d.mig().is_none())
                .cloned()
                .collect(),
            engine.clone(),
            telemetry,
        ))
    });
    let sampler = tokio::spawn(devices::sample(backend, objects));
    let watchdog = supervise::ready(engine.clone());
    log::info!("serving {BUS_NAME} on the {} bus", bus_word(bus));
    let hangups = tokio::spawn(reload_on_hangup(engine.clone()));
    Ok(Running {
        engine,
        engine_thread,
        stop_events,
        events,
        sampler,
        hangups,
        metrics,
        watchdog,
        pump,
        conn,
    })
}

impl Running {
    /// Stops the daemon: no new tasks, the engine ends the running ones and
    /// restores GPU controls, then the threads and tasks around it end and
    /// the bus name is given up.
    async fn stop(self) {
        log::info!("stopping: no new tasks; ending the running ones and restoring GPU controls");
        supervise::stopping();
        let (tx, rx) = tokio::sync::oneshot::channel();
        if self.engine.send(Request::Stop { reply: tx }).is_ok() {
            let _ = rx.await;
        }
        drop(self.engine);
        let engine_thread = self.engine_thread;
        let _ = tokio::task::spawn_blocking(move || engine_thread.join()).await;
        self.stop_events
            .store(true, std::sync::atomic::Ordering::Relaxed);
        let events = self.events;
        let _ = tokio::task::spawn_blocking(move || events.join()).await;
        self.sampler.abort();
        self.hangups.abort();
        if let Some(m) = self.metrics {
            m.abort();
        }
        if let Some(w) = self.watchdog {
            w.abort();
        }
        // Let the last TaskChanged signals out before the connection goes.
        let _ = tokio::time::timeout(Duration::from_secs(2), self.pump).await;
        self.conn.release_name(BUS_NAME).await.ok();
        log::info!("stopped");
    }
}

/// The backend of the configuration: the mock of `mock`'s host file, else NVML.
fn open_gpus(cfg: &Config, time: Timebase) -> Result<Gpus, DaemonError> {
    Ok(match &cfg.mock {
        Some(file) => {
            let host = gpu_agent_hostspec::host::load(file)?;
            let mock = Arc::new(MockBackend::new(&host, Arc::new(time)));
            Gpus {
                backend: mock.clone(),
                mock: Some(mock),
                // The GPUs as the file describes them; their layouts are read
                // back from the mock like any GPU's.
                specs: layout::physical_gpus(host),
                name: format!("mock:{}", file.display()),
            }
        }
        None => {
            let nvml = Arc::new(NvmlBackend::new()?);
            let specs = inventory(&*nvml)?;
            Gpus {
                backend: nvml,
                mock: None,
                specs,
                name: "nvml".to_string(),
            }
        }
    })
}

/// The state store; with `--accept-state-loss`, also one behind what was
/// acknowledged, the tasks it lacks logged as given up.
fn open_store(options: &Options) -> Result<Store, DaemonError> {
    let dir = &options.config.state_dir;
    if !options.accept_state_loss {
        return Ok(Store::open(dir)?);
    }
    let (store, behind) = Store::open_accepting_loss(dir)?;
    if let Some(store::StoreError::Behind {
        path,
        stored,
        first_missing,
        acknowledged,
    }) = behind
    {
        log::warn!(
            "--accept-state-loss: tasks t{first_missing} to t{acknowledged} were acknowledged \
             and are not in {} (it holds tasks up to t{stored}); they are given up, and \
             their ids are not issued again",
            path.display()
        );
    }
    Ok(store)
}

/// The devices: the GPUs with the MIG instances their layouts hold (a GPU
/// whose stored MIG change resumes keeps its stored layout), the layout
/// stored when it changed.
fn discover(
    backend: &dyn GpuBackend,
    gpus: Vec<DeviceSpec>,
    store: &mut Store,
) -> Result<Vec<DeviceSpec>, DaemonError> {
    let mut changing = std::collections::BTreeSet::new();
    for gpu in 0..gpus.len() as u32 {
        if engine::mig_change_resumes(store, gpu)? {
            changing.insert(gpu);
        }
    }
    let (devices, to_store) = layout::discover(
        backend,
        gpus,
        store.meta(layout::META_KEY)?.as_deref(),
        &changing,
    )?;
    if let Some(text) = to_store {
        store.write(&[store::Op::SetMeta(layout::META_KEY.into(), text)])?;
        store.sync()?;
    }
    Ok(devices)
}

/// The plugins, and the policy to start with (`choose_policy`) with its
/// parameters as stored and as in use.
fn start_policy(options: &Options, store: &Store) -> Result<StartPolicy, DaemonError> {
    let file = options.source.path();
    let registry = options
        .source
        .plugins(&options.config, &options.plugin_dir)?;
    for failure in &registry.failures {
        log::warn!("plugin skipped: {failure}");
    }
    policy_params::check_tables(&options.config, file.as_deref(), &registry)?;
    let stored_params = match store.meta(policy_params::META_KEY)? {
        Some(text) => policy_params::decode(&text).unwrap_or_else(|e| {
            log::warn!("{e}; the stored policy starts with its table and defaults");
            Vec::new()
        }),
        None => Vec::new(),
    };
    let fault = policy_thread::Fault::stored(store)?;
    let (policy, params) = choose_policy(
        &registry,
        options,
        store.meta("policy")?,
        stored_params,
        fault.as_ref(),
    )?;
    let values = match registry.get(&policy.name) {
        Some(plugin) => policy_params::in_use(
            plugin,
            &policy_params::effective(
                policy_params::table(&options.config, file.as_deref(), plugin)?,
                &params,
            ),
        ),
        None => Vec::new(),
    };
    Ok(StartPolicy {
        registry,
        policy,
        params,
        values,
        fault,
    })
}

/// The agent's D-Bus object, before it is served: the policy in use, its
/// stored fault, the backend's name.
fn agent_service(
    engine: std::sync::mpsc::Sender<Request>,
    start_policy: &StartPolicy,
    backend_name: String,
    mig: MigView,
    telemetry: &telemetry::Telemetry,
    log_dir: Option<PathBuf>,
    pumped: engine::Pumped,
) -> AgentService {
    let agent = AgentService::new(
        engine,
        auth::Auth::new(nix::unistd::getuid().as_raw()),
        (
            start_policy.policy.name.clone(),
            parameters_to_dict(&start_policy.values),
        ),
        backend_name,
        mig,
        pumped,
    )
    .time_submits(telemetry.submit_seconds.clone())
    .task_logs(log_dir);
    if let Some(fault) = &start_policy.fault {
        agent.record_policy_fault(fault.describe());
    }
    agent
}

/// Binds `metrics_listen`'s address.
async fn bind_metrics(addr: std::net::SocketAddr) -> Result<tokio::net::TcpListener, DaemonError> {
    exporter::bind(addr)
        .await
        .map_err(|e| DaemonError::Metrics {
            addr,
            reason: e.to_string(),
        })
}

/// `system` or `session`.
fn bus_word(bus: Bus) -> &'static str {
    match bus {
        Bus::System => "system",
        Bus::Session => "session",
    }
}

/// A bus failure as the start's error, naming the bus.
fn bus_error(bus: Bus) -> impl Fn(zbus::Error) -> DaemonError {
    move |cause| DaemonError::Bus {
        bus: bus_word(bus),
        cause: Box::new(cause),
    }
}

/// Connects to the bus, serves the agent, the mock's controls and each
/// device's object, each `Properties` the strict one, then takes the name.
async fn serve(
    bus: Bus,
    agent: AgentService,
    mock_control: Option<health::MockControl>,
    backend: &dyn GpuBackend,
    devices: &[DeviceSpec],
    targets: &[Target],
) -> Result<Connection, DaemonError> {
    let bus_error = bus_error(bus);
    let builder = match bus {
        Bus::System => connection::Builder::system(),
        Bus::Session => connection::Builder::session(),
    }
    .map_err(&bus_error)?;
    let mut builder = builder
        .serve_at(AGENT_PATH, Strict::new(agent))
        .and_then(|b| b.serve_at(AGENT_PATH, Strict::new(ObjectManager)))
        .map_err(&bus_error)?;
    if let Some(control) = mock_control {
        builder = builder
            .serve_at(AGENT_PATH, Strict::new(control))
            .map_err(&bus_error)?;
    }
    for (spec, target) in devices.iter().zip(targets) {
        if let Some(path) = devices::object_path(spec) {
            let status = devices::read(backend, spec, target, String::new());
            builder = builder
                .serve_at(path, DeviceObject { status })
                .map_err(&bus_error)?;
        }
    }
    let conn = builder.build().await.map_err(&bus_error)?;
    // Before the name is taken: no client sees the swap.
    let paths = devices.iter().filter_map(devices::object_path);
    for path in std::iter::once(AGENT_PATH.to_string()).chain(paths) {
        serve_strict_properties(conn.object_server(), &path)
            .await
            .map_err(&bus_error)?;
    }
    conn.request_name(BUS_NAME).await.map_err(&bus_error)?;
    Ok(conn)
}

/// Reloads on each SIGHUP, as the D-Bus method `Reload` does; the outcome
/// goes to the log (the engine logs a success).
async fn reload_on_hangup(engine: std::sync::mpsc::Sender<Request>) {
    use tokio::signal::unix::{signal, SignalKind};
    let mut hangups = match signal(SignalKind::hangup()) {
        Ok(hangups) => hangups,
        Err(e) => {
            log::warn!("cannot handle SIGHUP: {e}");
            return;
        }
    };
    // A hangup while starting waited for now: the handler above is in place,
    // so none is missed between the two.
    let mut early = early_signals::take_hangup();
    while early || hangups.recv().await.is_some() {
        early = false;
        log::info!("SIGHUP: reloading");
        let (reply, answer) = tokio::sync::oneshot::channel();
        if engine.send(Request::Reload { reply }).is_err() {
            return;
        }
        // A refusal is the engine's to log.
        let _ = answer.await;
    }
}

/// The schedulable devices of the NVML backend: every GPU, described by its
/// catalogue entry, at speed 1.
fn inventory(backend: &dyn GpuBackend) -> Result<Vec<DeviceSpec>, DaemonError> {
    (0..backend.device_count()?)
        .map(|gpu| {
            let info = backend.device_info(gpu)?;
            let model =
                catalogue::lookup_nvml(&info.name).ok_or_else(|| DaemonError::UnknownGpu {
                    gpu,
                    name: info.name.clone(),
                    known: catalogue::CATALOGUE
                        .iter()
                        .map(|m| m.nvml_name)
                        .collect::<Vec<_>>()
                        .join(", "),
                })?;
            Ok(DeviceSpec {
                index: gpu,
                model,
                memory_gb: model.memory_gb,
                speed: 1.0,
                cost_per_hour: 0.0,
                partition: Partition::Whole,
            })
        })
        .collect()
}

/// The policy to start with, and the parameters it was given: `--policy`
/// (none given), else the last `SetPolicy` with the parameters stored with
/// it, else the configuration's, else `fifo`. Each is built with its
/// `[policies.NAME]` table, on its own thread within the call budget
/// (`policy_thread`). The built-in FIFO order when the one chosen so is the
/// policy of a stored fault: only an admin's `SetPolicy` makes that one
/// active again.
fn choose_policy(
    registry: &Registry,
    options: &Options,
    stored: Option<String>,
    stored_params: policy_params::Params,
    fault: Option<&policy_thread::Fault>,
) -> Result<(PolicyInstance, policy_params::Params), DaemonError> {
    let file = options.source.path();
    let chosen = options
        .policy
        .clone()
        .or_else(|| stored.clone())
        .or_else(|| options.config.policy.clone());
    if let Some(fault) = fault.filter(|f| chosen.as_deref() == Some(f.policy.as_str())) {
        log::warn!(
            "policy {} failed before ({}); it is not made active again until an admin \
             chooses it (gpuctl policy use {}): running the built-in FIFO order",
            fault.policy,
            fault.reason,
            fault.policy
        );
        return Ok((gpu_agent_core::policy::builtin_fifo(), Vec::new()));
    }
    let build = |name: &str, given: &[(String, String)]| -> Result<PolicyInstance, DaemonError> {
        let plugin = registry.find(name)?;
        let table = policy_params::table(&options.config, file.as_deref(), plugin)?;
        let params = policy_params::effective(table, given);
        Ok(policy_thread::start(
            *plugin,
            params,
            options.config.policy_budget,
        )?)
    };
    if let Some(name) = &options.policy {
        return Ok((build(name, &[])?, Vec::new()));
    }
    let candidates = stored
        .map(|name| (name, stored_params))
        .into_iter()
        .chain(options.config.policy.clone().map(|name| (name, Vec::new())))
        .chain(std::iter::once(("fifo".to_string(), Vec::new())));
    let mut last_error = None;
    for (name, given) in candidates {
        match build(&name, &given) {
            Ok(policy) => return Ok((policy, given)),
            Err(e) => {
                log::warn!("{e}");
                last_error = Some(e);
            }
        }
    }
    Err(last_error.expect("fifo was tried"))
}

/// The device objects as served (a retired MIG instance has none).
async fn device_objects(
    conn: &Connection,
    devices: &[DeviceSpec],
    targets: &[Target],
) -> zbus::Result<devices::Objects> {
    let mut objects = std::collections::BTreeMap::new();
    for (spec, target) in devices.iter().zip(targets) {
        if let Some(path) = devices::object_path(spec) {
            let object = conn
                .object_server()
                .interface::<_, DeviceObject>(path)
                .await?;
            objects.insert(
                spec.index,
                devices::Served {
                    spec: spec.clone(),
                    target: target.clone(),
                    object,
                },
            );
        }
    }
    Ok(Arc::new(tokio::sync::RwLock::new(objects)))
}

/// The agent object as served (its signals and properties go out through it).
async fn agent_object(conn: &Connection) -> zbus::Result<InterfaceRef<Strict<AgentService>>> {
    conn.object_server()
        .interface::<_, Strict<AgentService>>(AGENT_PATH)
        .await
}

/// Turns the engine's notices into signals, property changes and, as MIG
/// layouts change, device objects served and withdrawn; counts each once
/// done with it (`engine::Pumped`).
async fn pump_notices(
    conn: Connection,
    backend: Arc<dyn GpuBackend>,
    agent: InterfaceRef<Strict<AgentService>>,
    objects: devices::Objects,
    mut inbox: NoticeInbox,
) {
    while let Some(notice) = inbox.notices.recv().await {
        let result = match notice {
            Notice::TaskChanged { id, state } => {
                AgentService::task_changed(agent.signal_emitter(), &id, state.as_str()).await
            }
            Notice::CurrentTask { device, task } => match objects.read().await.get(&device) {
                Some(s) => devices::set_current_task(&s.object, task).await,
                None => Ok(()),
            },
            Notice::DeviceHealth {
                device,
                online,
                health,
            } => match objects.read().await.get(&device) {
                Some(s) => devices::set_health(&s.object, online, &health).await,
                None => Ok(()),
            },
            Notice::MigChanged {
                gpu,
                state,
                message,
            } => {
                agent
                    .get()
                    .await
                    .record_mig_state(gpu, state, message.clone());
                AgentService::mig_changed(agent.signal_emitter(), gpu, state.as_str(), &message)
                    .await
            }
            Notice::DevicesChanged {
                gpu,
                added,
                retired,
            } => relayout(&conn, &backend, &objects, gpu, added, retired).await,
            Notice::PolicyFault(fault) => {
                let agent_ref = agent.get().await;
                agent_ref
                    .record_policy_fault(fault.as_ref().map_or(String::new(), |f| f.describe()));
                let emitter = agent.signal_emitter();
                let signalled = match &fault {
                    Some(f) => AgentService::policy_fault(emitter, &f.policy, &f.reason).await,
                    None => Ok(()),
                };
                match signalled {
                    Ok(()) => agent_ref.last_policy_fault_changed(emitter).await,
                    Err(e) => Err(e),
                }
            }
            Notice::Policy { name, parameters } => {
                let agent_ref = agent.get().await;
                agent_ref.record_policy(name, parameters_to_dict(&parameters));
                let emitter = agent.signal_emitter();
                match agent_ref.policy_changed(emitter).await {
                    Ok(()) => agent_ref.policy_parameters_changed(emitter).await,
                    Err(e) => Err(e),
                }
            }
        };
        if let Err(e) = result {
            log::warn!("cannot signal a change: {e}");
        }
        inbox.handled.send_modify(|n| *n += 1);
    }
}

/// Serves the objects of a GPU's new MIG instances and withdraws the
/// retired ones' (first: a new instance may take a retired one's path).
async fn relayout(
    conn: &Connection,
    backend: &Arc<dyn GpuBackend>,
    objects: &devices::Objects,
    gpu: DeviceSpec,
    added: Vec<(DeviceSpec, layout::Target)>,
    retired: Vec<DeviceSpec>,
) -> zbus::Result<()> {
    let mut objects = objects.write().await;
    for spec in retired {
        if let Some(old) = objects.remove(&spec.index) {
            devices::withdraw(conn, &old.spec).await?;
        }
    }
    for (spec, target) in added {
        let index = spec.index;
        if let Some(served) = devices::serve(conn, backend, spec, target).await? {
            objects.insert(index, served);
        }
    }
    if let Some(s) = objects.get_mut(&gpu.index) {
        devices::set_split(&s.object, !gpu.schedulable()).await?;
        s.spec = gpu;
    }
    Ok(())
}

#[cfg(test)]
mod tests;
