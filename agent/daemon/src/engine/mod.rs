//! The engine: the daemon's one thread that owns the scheduler core, the
//! state store, the timers and the running tasks (ARCHITECTURE.md,
//! invariant 12).
//!
//! It drives the sans-IO core with real time (scaled by `--time-scale`) and
//! works in rounds: it takes every request waiting on its channel, then
//! 1. writes the round's new tasks in one transaction, and only then hands
//!    them to the core (a refused write leaves nothing behind);
//! 2. writes everything the round changed (task states, clock controls about
//!    to be set, the policy) in a second transaction;
//! 3. syncs the store once for both (a group commit: one `fdatasync`,
//!    however many requests the round took);
//! 4. carries out the round's effects: its notices to the D-Bus side
//!    (signals, the projections beside the engine), then the rest in order:
//!    replies, process launches, and clock changes handed to the GPUs'
//!    clock workers (`clocks.rs`: a task's launch waits until its locks are
//!    made);
//! 5. if launches recorded process groups, writes them and syncs again, so
//!    that a restart finds every group it must end (invariant 15).
//!
//! Store, then act: ARCHITECTURE.md, invariant 13.
//!
//! So a task is on disk before `Submit` answers, and a task is recorded as
//! running before its process starts. A sync that fails ends the daemon at
//! once, without answering (the kernel may have dropped what it was to
//! write; systemd restarts it, and it recovers what reached the disk). Once a
//! stop begins, the round refuses every later request that would change
//! state (`ShuttingDown`).
//!
//! The engine knows its tasks through one `table::TaskTable`, a record
//! per task holding all the engine keeps of it (its stored state, its core
//! key, its run: executor handle, energy and clocks to settle, adoption),
//! so that a task leaves with everything at once (invariant 23); and runs
//! them through one `executor::Executor` trait: `process::Processes` for
//! tasks with a command, `modelled::Modelled` for the rest, which keep no
//! table of their own (their handles are in the records).

mod adopt;
mod clocks;
mod executor;
mod health;
mod intent;
mod lifecycle;
mod mig_apply;
mod mig_devices;
mod modelled;
mod process;
mod requests;
mod slurm;
mod table;
mod tally;
mod time;
mod tokens;
mod waiting;

use std::collections::{HashMap, VecDeque};
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{mpsc, Arc};
use std::time::Duration;

use gpu_agent_plugin_api::TaskKey;
use tokio::sync::mpsc::{UnboundedReceiver, UnboundedSender};
use tokio::sync::{oneshot, watch};

use super::config::{Config, Source};
use super::exec::Exit;
use super::store::{Op, Store, StoreError};
use crate::layout::{Target, Targets};
use crate::states::{Health, MigState};
use crate::telemetry::Telemetry;
use crate::test_hooks::Hook;
use executor::{Executor, Handle, MockLoad};
use gpu_agent_backend::{GpuBackend, ModelledLoad};
use gpu_agent_core::agenda::Agenda;
use gpu_agent_core::metrics::Metrics;
use gpu_agent_core::policy::PolicyInstance;
use gpu_agent_core::scheduler::Admitted;
use gpu_agent_core::Core;
use gpu_agent_core::{apps::AppLibrary, host::DeviceSpec};
use gpu_agent_dbus::{AgentError, SubmitSpec, TaskInfo, TaskStatus};
use gpu_agent_loader::Registry;
use gpu_agent_plugin_api::AppModel;
use modelled::Modelled;
use process::Processes;
use table::{How, TaskTable};
use tally::Tally;
use tokens::ClientTokens;

pub use adopt::{JobEnergy, Meter};
pub use health::of_partition as health_of_partition;
pub use mig_apply::{resumes as mig_change_resumes, MigMade, MigOptions, MigTarget};
pub use time::Timebase;

/// The exit status of a daemon whose engine thread panicked (`EX_SOFTWARE`):
/// it exits rather than answer every later call "stopping", so that its
/// service manager restarts it.
pub const ENGINE_PANICKED: i32 = 70;

/// How a request is answered.
pub type Reply<T> = oneshot::Sender<Result<T, AgentError>>;

/// Who is calling, as the bus vouches for it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Caller {
    /// The caller's uid.
    pub uid: u32,
    /// Whether the caller may manage every task and the policy.
    pub admin: bool,
}

/// What the engine is asked to do.
pub enum Request {
    /// Queue a task owned by `owner`.
    Submit {
        /// The submitter's uid.
        owner: u32,
        /// The task (boxed: the largest request by far).
        spec: Box<SubmitSpec>,
        /// Answered with the new id once it is stored.
        reply: Reply<String>,
    },
    /// Cancel a task.
    Cancel {
        /// Its id.
        id: String,
        /// Who asks.
        caller: Caller,
        /// Answered when the cancellation is stored (a running process is
        /// signalled; its end is reported with `TaskChanged`).
        reply: Reply<()>,
    },
    /// One task.
    GetTask {
        /// Its id.
        id: String,
        /// The task.
        reply: Reply<TaskInfo>,
    },
    /// Up to `limit` tasks in a state (`None`: all), in submission order,
    /// from position `from`; and the position after them (0: none left).
    ListTasks {
        /// The state.
        state: Option<TaskStatus>,
        /// The position of the first task to look at (0: the first).
        from: usize,
        /// The most tasks to answer.
        limit: usize,
        /// The tasks and the next position.
        reply: Reply<(Vec<TaskInfo>, usize)>,
    },
    /// Loaded policies: (name, description).
    ListPolicies {
        /// The policies.
        reply: Reply<Vec<(String, String)>>,
    },
    /// Switch policy.
    SetPolicy {
        /// The policy's name.
        name: String,
        /// Its parameters as given on the bus, in key order (empty: its
        /// agent.toml table and defaults only).
        params: Vec<(String, gpu_agent_dbus::ParamValue)>,
        /// Answered once the switch is stored.
        reply: Reply<()>,
    },
    /// A loaded policy with its parameters.
    DescribePolicy {
        /// The policy's name.
        name: String,
        /// The policy and its parameters.
        reply: Reply<gpu_agent_dbus::PolicyDescription>,
    },
    /// formats.md §4 metrics over the finished tasks.
    Metrics {
        /// The metrics.
        reply: Reply<Metrics>,
    },
    /// Read the settings again and re-scan the plugin directory; the active
    /// policy and every task are left as they are.
    Reload {
        /// Answered with the changed keys that wait for the next start.
        reply: Reply<Vec<String>>,
    },
    /// A task's process ended (sent by the executor).
    Exited {
        /// The task.
        key: TaskKey,
        /// How it ended.
        exit: Exit,
    },
    /// The backend reported an event on a GPU (sent by the event watcher).
    DeviceEvent {
        /// The event.
        event: gpu_agent_backend::DeviceEvent,
    },
    /// Bring a GPU back online (after probing it), or drain it.
    SetDeviceOnline {
        /// The GPU.
        gpu: u32,
        /// Online, or drained.
        online: bool,
        /// Answered once the change is stored.
        reply: Reply<()>,
    },
    /// Adopt work the agent did not place (`Adopt`).
    Adopt {
        /// The task id it is stored under, given with its intent
        /// (`intent.rs`); `None` from the bus.
        id: Option<String>,
        /// What was adopted.
        spec: gpu_agent_dbus::AdoptSpec,
        /// Answered with the task id once it is stored.
        reply: Reply<String>,
    },
    /// End an adopted task (`Release`).
    Release {
        /// Its id.
        id: String,
        /// How its job ended.
        end: gpu_agent_dbus::ReleaseEnd,
        /// Answered once its end is stored.
        reply: Reply<()>,
    },
    /// Change the MIG layouts of `targets` (`ApplyMigConfig`, checked
    /// against the GPUs' models).
    ApplyMig {
        /// Each GPU's layout.
        targets: Vec<MigTarget>,
        /// What to do with busy GPUs, how long a drain may take.
        options: MigOptions,
        /// Answered, once the changes are stored, with the GPUs that change.
        reply: Reply<Vec<u32>>,
    },
    /// Abandon a GPU's MIG drain (`CancelMigChange`).
    CancelMig {
        /// The GPU.
        gpu: u32,
        /// Answered once its devices take work again.
        reply: Reply<()>,
    },
    /// Make the layout of a drained GPU (sent by the engine to itself, the
    /// round after it stored the change as applying).
    MakeMigLayout {
        /// The GPU.
        gpu: u32,
    },
    /// The layout of a drained GPU is made, or failed (sent by the thread
    /// that made it).
    MigMade {
        /// The GPU.
        gpu: u32,
        /// What was done.
        made: MigMade,
    },
    /// One GPU of a task has its clocks locked (sent by its clock worker,
    /// `clocks.rs`): the task's run starts once all of them have.
    ClocksLocked {
        /// The task.
        key: TaskKey,
    },
    /// A task's process could not be started (sent by the engine to itself).
    LaunchFailed {
        /// The task.
        key: TaskKey,
        /// Why.
        reason: String,
    },
    /// Time to check the adopted Slurm jobs (sent by the Slurm check
    /// thread, `slurm.rs`, at start and every `[slurm] check_interval_s`).
    SlurmTick,
    /// What Slurm said of the jobs the engine asked about (sent by the
    /// Slurm check thread).
    SlurmChecked {
        /// Each job's state, or why Slurm could not be asked.
        answer: slurm::Answer,
    },
    /// Counts for `/metrics` and `CountTasks`.
    Census {
        /// Answered at once.
        reply: oneshot::Sender<Census>,
    },
    /// The watchdog's heartbeat: answered once the round that took it has
    /// been stored, so an answer means the engine thread is making progress.
    Heartbeat {
        /// Answered after the round.
        reply: oneshot::Sender<()>,
    },
    /// Stop: refuse new work, end or keep the running tasks as configured,
    /// restore every control, and leave the loop.
    Stop {
        /// Answered when everything is stored.
        reply: oneshot::Sender<()>,
    },
}

/// What the engine tells the D-Bus side.
#[derive(Debug, Clone, PartialEq)]
pub enum Notice {
    /// A task changed state.
    TaskChanged {
        /// Its id.
        id: String,
        /// The new state.
        state: TaskStatus,
    },
    /// The task running on a device changed (`""`: none).
    CurrentTask {
        /// The device.
        device: u32,
        /// The task's id.
        task: String,
    },
    /// A device went offline or came back.
    DeviceHealth {
        /// The device.
        device: u32,
        /// Whether it takes work.
        online: bool,
        /// Its health.
        health: Health,
    },
    /// A GPU's MIG layout change moved on (`MigChanged`).
    MigChanged {
        /// The GPU.
        gpu: u32,
        /// Where the change stands.
        state: MigState,
        /// What happened, for people.
        message: String,
    },
    /// A GPU's MIG layout changed (`Engine::layout_applied`).
    DevicesChanged {
        /// The GPU as it is now (whole, or split).
        gpu: DeviceSpec,
        /// The new MIG instances, with where they run.
        added: Vec<(DeviceSpec, Target)>,
        /// The instances the change retired.
        retired: Vec<DeviceSpec>,
    },
    /// A policy failed (`Some`, stored: signalled `PolicyFault`), or an
    /// admin's `SetPolicy` cleared the stored fault (`None`).
    PolicyFault(Option<crate::policy_thread::Fault>),
    /// The active policy, or its parameters, changed.
    Policy {
        /// Its name.
        name: String,
        /// Its parameters with the values in use.
        parameters: Vec<(String, gpu_agent_dbus::ParamValue)>,
    },
}

/// The channel of the engine's notices to the D-Bus side, counted at both
/// ends (see [`Pumped`]).
pub fn notice_channel() -> (Notices, NoticeInbox) {
    let (tx, notices) = tokio::sync::mpsc::unbounded_channel();
    let (handled, seen) = watch::channel(0);
    let pumped = Pumped {
        sent: Arc::new(AtomicU64::new(0)),
        handled: seen,
    };
    (Notices { tx, pumped }, NoticeInbox { notices, handled })
}

/// The engine's end of the notices: it counts each one it sends.
pub struct Notices {
    tx: UnboundedSender<Notice>,
    pumped: Pumped,
}

impl Notices {
    /// Sends `notice` to the D-Bus side.
    fn send(&self, notice: Notice) {
        self.pumped.sent.fetch_add(1, Ordering::AcqRel);
        // The D-Bus side is gone only while the daemon exits.
        let _ = self.tx.send(notice);
    }

    /// How far the D-Bus side has got with these notices.
    pub fn pumped(&self) -> Pumped {
        self.pumped.clone()
    }
}

/// The D-Bus side's end of the notices: the pump takes each from `notices`
/// and, once it has done what it says (a signal sent, a projection
/// recorded, device objects served), counts it in `handled`.
pub struct NoticeInbox {
    /// The notices, in the order sent.
    pub notices: UnboundedReceiver<Notice>,
    /// How many the pump has handled.
    pub handled: watch::Sender<u64>,
}

/// How many notices the engine has sent and how many the pump has handled,
/// for a D-Bus method that answers only once the bus side shows what its
/// request did (the projections of invariant 12 lag the engine): a round
/// sends its notices before its replies, so once a method has its answer,
/// every notice of its round is counted as sent.
#[derive(Clone)]
pub struct Pumped {
    sent: Arc<AtomicU64>,
    handled: watch::Receiver<u64>,
}

impl Pumped {
    /// Waits until the pump has handled every notice sent so far (at once
    /// if the pump is gone: the daemon is exiting).
    pub async fn caught_up(&self) {
        let sent = self.sent.load(Ordering::Acquire);
        let mut handled = self.handled.clone();
        let _ = handled.wait_for(|&n| n >= sent).await;
    }
}

/// Everything the engine is built from.
pub struct Setup {
    /// The devices: physical GPUs (index = backend GPU index), then MIG
    /// slots (`crate::layout`).
    pub devices: Vec<DeviceSpec>,
    /// Where each device's work runs on the backend.
    pub targets: Vec<Target>,
    /// The backend.
    pub backend: Arc<dyn GpuBackend>,
    /// The same backend when it can show modelled runs (the mock), so that
    /// its GPUs draw their power.
    pub load: Option<Arc<dyn ModelledLoad>>,
    /// The state store.
    pub store: Store,
    /// Loaded plugins.
    pub registry: Registry,
    /// The policy to start with.
    pub policy: PolicyInstance,
    /// The parameters it was given (`SetPolicyWithParameters`, stored),
    /// over its agent.toml table.
    pub policy_params: crate::policy_params::Params,
    /// DVFS profiles tasks may name.
    pub apps: AppLibrary,
    /// The clock.
    pub time: Timebase,
    /// Task output files go here; `None`: to the journal.
    pub log_dir: Option<PathBuf>,
    /// The settings in force (`cancel_grace_s` and `keep_tasks_on_stop` are
    /// read from here).
    pub config: Config,
    /// Where the settings come from, for `Reload`.
    pub source: Source,
    /// Where notices go.
    pub notices: Notices,
    /// The runtime processes are awaited on.
    pub rt: tokio::runtime::Handle,
    /// Where decision times and policy faults are counted (`/metrics`).
    pub telemetry: Telemetry,
}

/// The engine's counts for `/metrics`.
#[derive(Debug, Clone, Default)]
pub struct Census {
    /// Tasks by state, every state listed.
    pub tasks: Vec<(TaskStatus, usize)>,
    /// Tasks in the central pending queue.
    pub pending: usize,
    /// Tasks in the devices' local queues.
    pub local: usize,
    /// Per device: whether a task runs on it.
    pub busy: Vec<bool>,
    /// Per device: its health.
    pub health: Vec<Health>,
    /// The devices as the GPUs' layouts stand (MIG instances included).
    pub devices: Vec<DeviceSpec>,
    /// The adopted Slurm jobs, and those that ended lately.
    pub jobs: Vec<JobEnergy>,
}

/// Why the engine could not start.
#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    /// The stored state cannot be read or restored.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// The engine's thread cannot be started.
    #[error("cannot start the engine thread: {0}")]
    Thread(std::io::Error),
}

/// The executors, one per [`How`].
struct Executors {
    processes: Processes,
    modelled: Modelled,
}

impl Executors {
    fn of(&mut self, how: How) -> &mut dyn Executor {
        match how {
            How::Process => &mut self.processes,
            How::Modelled => &mut self.modelled,
        }
    }

    /// The executor that started run `handle`.
    fn running(&mut self, handle: Handle) -> &mut dyn Executor {
        match handle {
            Handle::Process(_) => &mut self.processes,
            Handle::Modelled(_) => &mut self.modelled,
        }
    }
}

/// Something to do once the round's changes are stored.
enum Effect {
    Reply(Box<dyn FnOnce() + Send>),
    Notice(Notice),
    Launch(TaskKey, f64),
    /// End these task process groups (at stop), waiting up to the grace.
    EndGroups(Vec<u32>),
    /// Lock a GPU's clocks (on its clock worker); the task whose run starts
    /// once they are.
    SetClocks(u32, gpu_agent_plugin_api::Clocks, Option<TaskKey>),
    ResetClocks(u32),
    /// Lock an idle GPU's clocks at their lowest (`idle_clocks = "min"`).
    LockLowest(u32),
}

/// A new task waiting for its first write.
struct Accepted {
    /// The task as it is stored.
    info: TaskInfo,
    /// The core's admission of it, handed to the core once it is stored.
    task: Admitted,
    /// Answered with its id once it is stored.
    reply: Reply<String>,
}

/// What one round changed.
#[derive(Default)]
struct Round {
    accepted: Vec<Accepted>,
    ops: Vec<Op>,
    effects: Vec<Effect>,
    /// Tasks the policy placed in a local queue this round
    /// (`Action::Assigned`).
    assigned: Vec<TaskKey>,
}

impl Round {
    fn reply<T: Send + 'static>(&mut self, reply: Reply<T>, result: Result<T, AgentError>) {
        self.answer(reply, result);
    }

    /// Sends `value` on `to` once the round's changes are stored.
    fn answer<T: Send + 'static>(&mut self, to: oneshot::Sender<T>, value: T) {
        self.effects.push(Effect::Reply(Box::new(move || {
            // The caller may have gone away; nothing to do then.
            let _ = to.send(value);
        })));
    }

    fn notice(&mut self, notice: Notice) {
        self.effects.push(Effect::Notice(notice));
    }
}

/// The engine. See the module documentation.
pub struct Engine {
    core: Core,
    store: Store,
    registry: Registry,
    devices: Vec<DeviceSpec>,
    /// Where each device's work runs (shared with the executors).
    targets: Targets,
    backend: Arc<dyn GpuBackend>,
    apps: AppLibrary,
    time: Timebase,
    /// The parameters the active policy was given over its table.
    policy_params: crate::policy_params::Params,
    /// The settings in force, and where they come from.
    config: Config,
    source: Source,
    notices: Notices,
    /// The engine's own channel, for the threads that report back to it.
    inbox: mpsc::Sender<Request>,
    /// Requests the engine sent itself, handled before waiting again.
    deferred: Vec<Request>,
    /// Every task that has not ended, with all the engine holds of it:
    /// its stored record, its core key, its run (`table.rs`).
    tasks: TaskTable,
    /// The tasks that ended and left the table, summed up.
    tally: Tally,
    /// Each device's health.
    health: Vec<Health>,
    /// Per device: its clocks locked while idle (`idle_clocks = "min"`).
    idle: Vec<lifecycle::IdleLock>,
    /// The threads that lock and reset the GPUs' clocks (`clocks.rs`).
    clocks: clocks::Workers,
    /// The Slurm jobs whose adoption ended lately, oldest first (`/metrics`).
    recent_jobs: VecDeque<adopt::JobEnergy>,
    /// The thread that asks Slurm whether adopted jobs still run.
    slurm: slurm::Checker,
    /// `Adopt`s waiting for Slurm's word on the jobs holding their GPUs.
    parked_adopts: Vec<(String, gpu_agent_dbus::AdoptSpec, Reply<String>)>,
    exec: Executors,
    /// Policy wake-ups.
    timers: Agenda<()>,
    /// When running commands are expected to end: each is checked then, and
    /// the core told if it still runs (`Input::Overran`).
    overruns: Agenda<TaskKey>,
    /// Tasks whose run could not start for want of file descriptors, and
    /// when they wait again (`Engine::wait_again`).
    launch_retries: Agenda<TaskKey>,
    /// Changes whose write failed, retried with the next round.
    unsaved: Vec<Op>,
    /// The last request stored before it was carried out whose changes
    /// are not written yet (`intent.rs`).
    intents_through: Option<i64>,
    stopping: bool,
    /// Recent `client_token`s, for retried submissions.
    tokens: ClientTokens,
    /// Test hook [`Hook::KillAfterStore`]: as a crash at that instant would.
    kill_after_store: Option<String>,
    /// Test hook [`Hook::HangOn`]: as a policy or a driver call that never
    /// returns would make it.
    hang_on: Option<String>,
    /// Test hook [`Hook::PanicOn`]: as a bug would.
    panic_on: Option<String>,
    telemetry: Telemetry,
    /// MIG layout changes under way (`mig_apply.rs`).
    mig: mig_apply::MigChanges,
}

impl Engine {
    /// A channel to send an engine requests; requests wait in it until the
    /// engine is started on it.
    pub fn channel() -> (mpsc::Sender<Request>, mpsc::Receiver<Request>) {
        mpsc::channel()
    }

    /// Builds the engine, restores the stored tasks and starts its thread,
    /// serving the channel `(tx, rx)` made by [`Engine::channel`].
    pub fn start(
        setup: Setup,
        (tx, rx): (mpsc::Sender<Request>, mpsc::Receiver<Request>),
    ) -> Result<std::thread::JoinHandle<()>, EngineError> {
        let health = health::stored(&setup.store, &setup.devices, &setup.targets)?;
        let targets: Targets = Arc::new(std::sync::RwLock::new(setup.targets));
        let stored = setup.store.live_tasks()?;
        let controls = setup.store.controls()?;
        let processes = setup.store.processes()?;
        let n_devices = setup.devices.len();
        let gpus = MockLoad(setup.load, targets.clone());
        let slurm = slurm::Checker::start(setup.config.slurm.clone(), tx.clone());
        let mut engine = Engine {
            core: Core::new(setup.devices.clone(), setup.policy)
                .allowing_mig_policy(setup.config.mig.allow_policy),
            store: setup.store,
            registry: setup.registry,
            devices: setup.devices,
            targets: targets.clone(),
            backend: setup.backend.clone(),
            apps: setup.apps,
            time: setup.time,
            policy_params: setup.policy_params,
            config: setup.config,
            source: setup.source,
            notices: setup.notices,
            inbox: tx.clone(),
            deferred: Vec::new(),
            tasks: TaskTable::default(),
            tally: Tally::default(),
            health: Vec::new(),
            idle: vec![lifecycle::IdleLock::default(); n_devices],
            clocks: clocks::Workers::new(setup.backend.clone(), tx.clone()),
            recent_jobs: VecDeque::new(),
            slurm,
            parked_adopts: Vec::new(),
            exec: Executors {
                processes: Processes::new(setup.rt, tx, setup.log_dir, targets, gpus.clone()),
                modelled: Modelled::new(setup.time, gpus),
            },
            timers: Agenda::new(),
            overruns: Agenda::new(),
            launch_retries: Agenda::new(),
            unsaved: Vec::new(),
            intents_through: None,
            stopping: false,
            tokens: ClientTokens::default(),
            kill_after_store: Hook::KillAfterStore.value(),
            hang_on: Hook::HangOn.value(),
            panic_on: Hook::PanicOn.value(),
            telemetry: setup.telemetry,
            mig: mig_apply::MigChanges::default(),
        };
        engine.tally = engine.stored_tally(stored.len())?;
        let now_unix = engine.time.unix_now();
        for t in &stored {
            let token = &t.spec.client_token;
            engine
                .tokens
                .remember(t.owner_uid, token, &t.id, t.submitted, now_unix);
        }
        // The ended tasks' tokens still in their window; none of them kept.
        let since = now_unix - gpu_agent_dbus::CLIENT_TOKEN_RETENTION_S;
        let tokens = &mut engine.tokens;
        engine
            .store
            .each_ended_token(since, |owner, token, id, submitted| {
                tokens.remember(owner, token, id, submitted, now_unix)
            })?;
        let mut round = engine.restore(health, stored, controls, processes)?;
        engine.resume_mig_changes(&mut round)?;
        engine.replay_intents(&mut round)?;
        std::thread::Builder::new()
            .name("engine".into())
            .spawn(move || {
                let served = std::panic::catch_unwind(std::panic::AssertUnwindSafe(move || {
                    engine.flush(round);
                    engine.run(rx);
                }));
                if let Err(panic) = served {
                    // What each round changed is stored with it; what the
                    // panicking round changed is lost, and was not answered.
                    let what = panic
                        .downcast_ref::<&str>()
                        .copied()
                        .or_else(|| panic.downcast_ref::<String>().map(String::as_str))
                        .unwrap_or("no message");
                    log::error!(
                        "the engine thread panicked ({what}); exiting with status \
                         {ENGINE_PANICKED} to be restarted from what is stored"
                    );
                    std::process::exit(ENGINE_PANICKED);
                }
            })
            .map_err(EngineError::Thread)
    }

    /// Handles requests and timers until stopped (or every sender is gone).
    fn run(mut self, rx: mpsc::Receiver<Request>) {
        const MAX_ROUND: usize = 1024;
        loop {
            let mut round = Round::default();
            let mut first = std::mem::take(&mut self.deferred);
            if first.is_empty() {
                let next = [
                    self.timers.peek().map(|(at, ())| at),
                    self.exec.modelled.next_end(),
                    self.overruns.peek().map(|(at, _)| at),
                    self.launch_retries.peek().map(|(at, _)| at),
                    self.mig.next_deadline(),
                ]
                .into_iter()
                .flatten()
                .reduce(f64::min);
                let wait = next.map(|at| self.time.wall_until(at));
                let got = match wait {
                    Some(w) => rx
                        .recv_timeout(w)
                        .map_err(|e| e == mpsc::RecvTimeoutError::Disconnected),
                    None => rx.recv().map_err(|_| true),
                };
                match got {
                    Ok(request) => first.push(request),
                    Err(true) => return,
                    Err(false) => {}
                }
            }
            for request in first {
                self.handle(request, &mut round);
            }
            while round.effects.len() + round.accepted.len() < MAX_ROUND {
                match rx.try_recv() {
                    Ok(request) => self.handle(request, &mut round),
                    Err(_) => break,
                }
            }
            self.fire_timers(&mut round);
            self.flush(round);
            if self.stopping {
                self.finish_clocks();
                return;
            }
            self.unstick();
        }
    }

    /// Delivers every wake-up that is due.
    fn fire_timers(&mut self, round: &mut Round) {
        let now = self.time.model_now();
        for (key, handle) in self.exec.modelled.due(now) {
            // Not an earlier run's end (the task went back to wait, and
            // started again).
            if self
                .tasks
                .started(key)
                .is_some_and(|r| r.handle == Some(handle))
            {
                self.finish(key, Ok(()), round);
            }
        }
        while let Some((_, key)) = self.overruns.pop_due(now) {
            if self.tasks.started(key).is_some() && !self.stopping {
                // Afresh: a finish above may have moved the core past `now`.
                let at = self.time.model_now();
                let actions = self
                    .decide(|core| core.handle(at, gpu_agent_core::Input::Overran { task: key }));
                self.apply(actions, round);
            }
        }
        while let Some((_, key)) = self.launch_retries.pop_due(now) {
            self.wait_again(key, round);
        }
        let mut timer = false;
        while self.timers.pop_due(now).is_some() {
            timer = true;
        }
        if timer && !self.stopping {
            let at = self.time.model_now();
            let actions = self.decide(|core| core.handle(at, gpu_agent_core::Input::Timer));
            self.apply(actions, round);
        }
        if !self.stopping {
            self.mig_timeouts(round);
        }
    }

    /// Tells the core it stranded tasks when nothing else will ever wake it.
    fn unstick(&mut self) {
        if self.tasks.running().next().is_none()
            && self.timers.is_empty()
            && !self.core.pending().is_empty()
        {
            let mut round = Round::default();
            let actions = self
                .core
                .handle(self.time.model_now(), gpu_agent_core::Input::Stalled);
            self.apply(actions, &mut round);
            self.flush(round);
        }
    }

    /// At the end of a stop: waits for the clock workers' resets
    /// ([`clocks::STOP_WAIT`] at most); a GPU whose call has not returned
    /// has its controls recorded again, for the next start to restore
    /// (invariant 16).
    fn finish_clocks(&mut self) {
        let stuck = self.clocks.finish(clocks::STOP_WAIT);
        if stuck.is_empty() {
            return;
        }
        let mut ops = Vec::new();
        for &gpu in &stuck {
            log::warn!(
                "GPU {gpu}: a clock call has not returned {} s into the stop; its clocks are restored at the next start",
                clocks::STOP_WAIT.as_secs()
            );
            for control in [clocks::LOCKED_CORE, clocks::LOCKED_MEMORY] {
                ops.push(Op::RecordControl(crate::store::ControlRecord {
                    gpu,
                    control: control.into(),
                    value: "not restored: a clock call was still under way at the stop".into(),
                }));
            }
        }
        self.write_changes(ops);
        self.sync_or_exit();
    }

    /// Stores the round's changes, then carries out its effects.
    fn flush(&mut self, mut round: Round) {
        let accepted = std::mem::take(&mut round.accepted);
        if !accepted.is_empty() {
            let ops: Vec<Op> = accepted.iter().map(|a| Op::put(a.info.clone())).collect();
            if let Err(e) = self.store.write(&ops) {
                log::error!("cannot store {} new task(s): {e}", accepted.len());
                for a in accepted {
                    let spec = &a.info.spec;
                    self.tokens
                        .forget(a.info.owner_uid, &spec.client_token, &a.info.id);
                    round.reply(
                        a.reply,
                        Err(AgentError::Failed(format!(
                            "cannot store the task ({e}); nothing was queued"
                        ))),
                    );
                }
            } else {
                if let Some(name) = self.kill_after_store.clone() {
                    if accepted.iter().any(|a| a.info.spec.name == name) {
                        self.sync_or_exit();
                        log::warn!("test hook: killed after storing task {name:?}");
                        let _ = nix::sys::signal::raise(nix::sys::signal::Signal::SIGKILL);
                    }
                }
                for a in accepted {
                    let id = a.info.id.clone();
                    round.notice(Notice::TaskChanged {
                        id: id.clone(),
                        state: TaskStatus::Queued,
                    });
                    if self.stopping {
                        // Taken before the stop: stored, it waits for the
                        // next start, as a running task does not start now.
                        self.tasks.insert(a.info);
                    } else {
                        let key = self.tasks.admit(a.info);
                        let task = a.task;
                        self.submit(key, |core, now| core.submit_admitted(now, task), &mut round);
                    }
                    round.reply(a.reply, Ok(id));
                }
            }
        }
        self.note_placements(&mut round);
        self.idle_clocks(&mut round);
        let mut ops = std::mem::take(&mut self.unsaved);
        ops.append(&mut round.ops);
        self.write_changes(ops);
        self.sync_or_exit();
        // Notices first: a method that waits for the pump once it has its
        // answer (`Pumped`) then waits for every notice of its round.
        let (notices, effects): (Vec<Effect>, Vec<Effect>) = round
            .effects
            .into_iter()
            .partition(|e| matches!(e, Effect::Notice(_)));
        for effect in notices.into_iter().chain(effects) {
            self.carry_out(effect);
        }
        // Launches record their process groups: store them now, not whenever
        // the next request comes.
        if !self.unsaved.is_empty() {
            let ops = std::mem::take(&mut self.unsaved);
            self.write_changes(ops);
            self.sync_or_exit();
        }
    }

    /// Writes `ops` in one batch, or keeps them to retry with the next
    /// round. A task whose ended record they wrote leaves the table for the
    /// tally, which the same batch stores: from now on the task is read
    /// from the store.
    fn write_changes(&mut self, mut ops: Vec<Op>) {
        // A batch kept from a failed write holds the sums of then, and the
        // requests carried out by then.
        ops.retain(|op| match op {
            Op::SetMeta(key, _) => key != tally::META_KEY,
            Op::ClearIntents { .. } => false,
            _ => true,
        });
        ops.extend(self.clear_intents());
        // Tasks whose ended record this is, in the order written, each once.
        let mut seen = std::collections::HashSet::new();
        let ended: Vec<String> = ops
            .iter()
            .filter_map(|op| match op {
                Op::Put(task) if task.state.is_terminal() => Some(&task.id),
                _ => None,
            })
            .filter(|id| {
                self.tasks
                    .find(id)
                    .is_some_and(|(t, _)| t.state.is_terminal())
            })
            .filter(|id| seen.insert(id.as_str()))
            .cloned()
            .collect();
        let mut tally = None;
        if !ended.is_empty() {
            let mut next = self.tally.clone();
            let scale = self.time.scale();
            for id in &ended {
                if let Some((task, _)) = self.tasks.find(id) {
                    next.add(task, scale);
                }
            }
            ops.push(Op::SetMeta(tally::META_KEY.into(), next.to_json()));
            tally = Some(next);
        }
        if let Err(e) = self.store.write(&ops) {
            log::error!(
                "cannot store {} change(s), retrying with the next round: {e}",
                ops.len()
            );
            self.unsaved = ops;
            return;
        }
        self.intents_through = None;
        for id in &ended {
            self.tasks.retire(id);
        }
        if let Some(next) = tally {
            self.tally = next;
        }
        if self.tasks.shrink() {
            crate::heap::give_back();
        }
    }

    /// The sums of the ended tasks as stored, when they count every task
    /// stored as ended (the store holds `live` others); otherwise (a store
    /// from before the sums were, or changed by another program, such as an
    /// older gpu-agentd or an operator pruning old tasks) summed from every
    /// ended task once and stored.
    fn stored_tally(&mut self, live: usize) -> Result<Tally, StoreError> {
        if let Some(json) = self.store.meta(tally::META_KEY)? {
            let ended = self.store.count()?.saturating_sub(live);
            match Tally::from_json(&json) {
                Ok(tally) if tally.ended_total() == ended => return Ok(tally),
                Ok(tally) => log::warn!(
                    "the stored sums count {} ended task(s), the store holds {ended}; summing them again",
                    tally.ended_total()
                ),
                Err(e) => log::warn!(
                    "the stored sums of the ended tasks are unreadable ({e}); summing them again"
                ),
            }
        }
        let (mut tally, scale) = (Tally::default(), self.time.scale());
        self.store.each_ended(|task| tally.add(&task, scale))?;
        self.store
            .commit(&[Op::SetMeta(tally::META_KEY.into(), tally.to_json())])?;
        Ok(tally)
    }

    /// The tally of every ended task: those retired, and those that ended
    /// in this round (their records are not written yet).
    fn ended_tally(&self) -> Tally {
        let mut tally = self.tally.clone();
        let scale = self.time.scale();
        for (task, _) in self.tasks.iter() {
            if task.state.is_terminal() {
                tally.add(task, scale);
            }
        }
        tally
    }

    /// Makes what the round wrote durable; ends the daemon at once, without
    /// answering anyone, if that fails: after a failed `fdatasync` the
    /// kernel may have dropped the written pages, and only a restart that
    /// reads back what reached the disk tells what is stored.
    fn sync_or_exit(&mut self) {
        if let Err(e) = self.store.sync() {
            log::error!(
                "{e}; stopping at once, without answering, to restart from what is on disk"
            );
            std::process::exit(1);
        }
    }

    /// SIGTERM-to-SIGKILL grace of a cancelled or stopped task.
    fn cancel_grace(&self) -> Duration {
        self.config.cancel_grace_s.duration()
    }

    /// Hands the core the task just admitted to the table under `key`,
    /// through `submit` (the core's `submit`, or `submit_admitted` for a
    /// task it admitted) at the current time.
    fn submit(
        &mut self,
        key: TaskKey,
        submit: impl FnOnce(&mut Core, f64) -> (TaskKey, Vec<gpu_agent_core::Action>),
        round: &mut Round,
    ) {
        let now = self.time.model_now();
        let (core_key, actions) = self.decide(|core| submit(core, now));
        // Both number tasks from 0 in the order they are given them, and
        // every admission is followed by this submission.
        debug_assert_eq!(key, core_key, "engine and core number tasks alike");
        self.apply(actions, round);
    }

    /// Runs `call` on the core, timing it for `/metrics`.
    fn decide<T>(&mut self, call: impl FnOnce(&mut Core) -> T) -> T {
        let start = std::time::Instant::now();
        let result = call(&mut self.core);
        self.telemetry
            .decision_seconds
            .observe(start.elapsed().as_secs_f64());
        result
    }

    /// The id of the task the core holds under `key` (it holds every task
    /// that has not ended).
    fn core_id(&self, key: TaskKey) -> &str {
        self.core.task(key).map_or("<ended>", |t| t.id.as_str())
    }

    /// The counts `/metrics` shows.
    fn census(&mut self) -> Census {
        let mut by_state: HashMap<TaskStatus, usize> = HashMap::new();
        let mut busy = vec![false; self.devices.len()];
        let ended = self.ended_tally();
        for (task, key) in self.tasks.iter() {
            if task.state.is_terminal() {
                continue; // counted in `ended`
            }
            let task = self.view(task, key);
            *by_state.entry(task.state).or_default() += 1;
            if task.state == TaskStatus::Running {
                for &d in &task.devices {
                    if let Some(b) = busy.get_mut(d as usize) {
                        *b = true;
                    }
                }
            }
        }
        let pending = self.core.pending().len();
        Census {
            tasks: TaskStatus::ALL
                .iter()
                .map(|s| (*s, by_state.get(s).copied().unwrap_or(0) + ended.ended(*s)))
                .collect(),
            pending,
            local: by_state.get(&TaskStatus::Assigned).copied().unwrap_or(0),
            busy,
            health: self.health.clone(),
            devices: self.devices.clone(),
            jobs: self.job_energies(),
        }
    }

    /// The DVFS profile `name`, or the built-in default.
    fn app(&self, name: &str) -> AppModel {
        self.apps
            .get(name)
            .or_else(|| self.apps.get(gpu_agent_core::apps::DEFAULT_APP))
            .cloned()
            .unwrap_or_else(AppModel::builtin_default)
    }

    /// Signals `assigned`, once each, for the tasks the policy placed in a
    /// local queue this round that still wait there (not those that started
    /// or went back to pending since): O(placements), whatever the backlog.
    fn note_placements(&mut self, round: &mut Round) {
        let mut assigned = std::mem::take(&mut round.assigned);
        assigned.sort_unstable();
        assigned.dedup();
        for key in assigned {
            let queued = self
                .core
                .task(key)
                .is_some_and(|t| t.state == gpu_agent_plugin_api::TaskState::Queued);
            if let Some(task) = self.tasks.get(key).filter(|_| queued) {
                round.notice(Notice::TaskChanged {
                    id: task.id.clone(),
                    state: TaskStatus::Assigned,
                });
            }
        }
    }

    /// The stored view of a task with core key `key` (if it has one), with
    /// `assigned` for a queued task the policy has placed and a running
    /// adopted task's energy so far.
    fn view(&self, task: &TaskInfo, key: Option<TaskKey>) -> TaskInfo {
        let mut info = task.clone();
        if info.state == TaskStatus::Queued
            && key
                .and_then(|k| self.core.task(k))
                .is_some_and(|t| t.state == gpu_agent_plugin_api::TaskState::Queued)
        {
            info.state = TaskStatus::Assigned;
        }
        info.waiting = key.and_then(|k| self.waiting(k));
        if let Some(j) = self.adopted_energy_so_far(&info) {
            info.energy_j = Some(j);
        }
        info
    }
}
