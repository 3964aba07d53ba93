//! MIG layout changes in the daemon (docs/mig.md §6.3): `ApplyMigConfig` and a
//! policy's `Decision::MigLayout` start them, the core drains the GPU, and
//! the engine does the NVML work once the core says the GPU is idle.
//!
//! Per GPU the change goes `draining` → `applying` → `stable`, or ends
//! `failed` (a drain that timed out, a layout the driver refused) or
//! `reset-required` (a mode change that needs a GPU reset the agent cannot
//! do). Each state is stored (meta `mig.<gpu>`: state, message, target and
//! old layout) in the round that reaches it, before the round answers or
//! touches the GPU, and announced with `MigChanged`.
//!
//! The NVML sequence: destroy the compute instances, then the GPU instances;
//! set the mode if it differs, resetting the GPU when the mode stays pending
//! (the backend's reset, else `[mig] reset_command`); create each GPU
//! instance at its placement with one full-size compute instance; read the
//! instances back and compare. A failure tries the old layout once: the
//! GPU's devices come back if that works, else they stay offline. Before it,
//! a drained GPU that processes the agent did not start still use waits
//! (looked at every second) until they are gone. The sequence and its
//! rollback run on a thread of their own (a [`Maker`]), not the engine's:
//! a GPU reset can take tens of seconds (`[mig] reset_command`, up to
//! [`RESET_LIMIT`]), and the engine keeps answering, and feeding the
//! watchdog, meanwhile; the outcome comes back as a request
//! ([`MigMade`]), as a process's exit does.
//!
//! At start, a change a previous run stored as `draining`, `applying` or
//! `reset-required` begins again once the tasks are restored
//! ([`Engine::resume_mig_changes`]).

use std::sync::Arc;
use std::time::{Duration, Instant};

use gpu_agent_backend::{BackendError, GpuBackend};
use gpu_agent_core::mig::MigTable;
use gpu_agent_core::placement::{Instance, Layout, Request as Placed};
use gpu_agent_core::scheduler::{MigPhase, OnBusy, RepartitionError};
use gpu_agent_core::Action;
use gpu_agent_dbus::AgentError;

use super::{Engine, Notice, Round};
use crate::config::Seconds;
use crate::states::MigState;
use crate::store::{Op, Store, StoreError};

/// How long `[mig] reset_command` may take before it is killed (a GPU
/// reset takes seconds; the engine waits for it).
const RESET_LIMIT: std::time::Duration = std::time::Duration::from_secs(120);

/// Runs `command` (`{bus_id}` in its arguments replaced by `bus_id`), killed
/// after `limit`; `Err` says how it failed, with its standard error.
fn run_reset_command(
    command: &[String],
    bus_id: &str,
    limit: std::time::Duration,
) -> Result<(), String> {
    use std::io::Read;
    let Some((program, args)) = command.split_first() else {
        return Err("[mig] reset_command is empty".into());
    };
    let args: Vec<String> = args.iter().map(|a| a.replace("{bus_id}", bus_id)).collect();
    let shown = std::iter::once(program.as_str())
        .chain(args.iter().map(String::as_str))
        .collect::<Vec<_>>()
        .join(" ");
    let mut child = std::process::Command::new(program)
        .args(&args)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .map_err(|e| format!("cannot run {shown}: {e}"))?;
    let started = Instant::now();
    let status = loop {
        match child.try_wait() {
            Ok(Some(status)) => break status,
            Ok(None) if started.elapsed() >= limit => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(format!(
                    "{shown} did not end within {} s; killed",
                    limit.as_secs_f64()
                ));
            }
            Ok(None) => std::thread::sleep(std::time::Duration::from_millis(20)),
            Err(e) => return Err(format!("{shown}: {e}")),
        }
    };
    if status.success() {
        return Ok(());
    }
    let mut stderr = String::new();
    if let Some(mut pipe) = child.stderr.take() {
        let _ = pipe.read_to_string(&mut stderr);
    }
    Err(format!("{shown} failed ({status}): {}", stderr.trim()))
}

/// Where GPU `gpu`'s MIG change is stored.
fn meta_key(gpu: u32) -> String {
    format!("mig.{gpu}")
}

/// Whether GPU `gpu` has a stored change that resumes at start
/// (`Engine::resume_mig_changes`): the startup adoption (`crate::layout`)
/// then takes the GPU as it is, half-made or not, and leaves it to the
/// change.
pub fn resumes(store: &Store, gpu: u32) -> Result<bool, StoreError> {
    let Some(text) = store.meta(&meta_key(gpu))? else {
        return Ok(false);
    };
    let record: serde_json::Value = serde_json::from_str(&text).unwrap_or_default();
    let state = MigState::parse(record["state"].as_str().unwrap_or_default());
    Ok(matches!(
        state,
        Some(MigState::Draining | MigState::Applying | MigState::ResetRequired)
    ))
}

/// `3g.20gb@0, 3g.20gb@4`, or `MIG off`.
pub(super) fn describe(layout: &[Instance]) -> String {
    if layout.is_empty() {
        return "MIG off".into();
    }
    let names: Vec<String> = layout.iter().map(Instance::to_string).collect();
    names.join(", ")
}

/// MIG on with no instance, as messages and the stored target say it.
pub(super) const NO_INSTANCE: &str = "MIG on, no instance";

/// How a change's target is told and stored: [`describe`], or
/// [`NO_INSTANCE`] for MIG on with no instance.
pub(super) fn describe_as(layout: &[Instance], enabled: bool) -> String {
    if enabled && layout.is_empty() {
        NO_INSTANCE.into()
    } else {
        describe(layout)
    }
}

/// The instances of a layout as [`describe`] writes it, against `table`.
fn placed_of_text(
    table: &'static gpu_agent_core::mig::MigTable,
    text: &str,
) -> Result<Vec<Placed>, String> {
    if text == "MIG off" || text == NO_INSTANCE {
        return Ok(Vec::new());
    }
    text.split(", ").map(|t| Placed::parse(table, t)).collect()
}

/// What `ApplyMigConfig` asks of one GPU, checked against its model.
#[derive(Debug, Clone, PartialEq)]
pub struct MigTarget {
    /// The GPU.
    pub gpu: u32,
    /// MIG mode (on with an empty layout: no instance, asked on purpose).
    pub enabled: bool,
    /// Its layout, placed (empty: MIG off, or on with no instance).
    pub layout: Layout,
}

/// `ApplyMigConfig`'s options.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct MigOptions {
    /// Wait for running tasks, or refuse.
    pub on_busy: OnBusy,
    /// How long a drain may take (0: no limit).
    pub timeout_s: Seconds,
    /// Go ahead when waiting tasks would fit no device afterwards (they are
    /// rejected then); without it such a change is refused.
    pub reject_stranded: bool,
    /// Allow MIG on with no instance (`enable_without_instances`); without
    /// it such a configuration is refused.
    #[serde(default)]
    pub without_instances: bool,
}

/// One GPU's change, as the engine follows it.
#[derive(Clone)]
struct UnderWay {
    target: Layout,
    /// MIG mode once made (on with an empty target: no instance).
    enabled: bool,
    /// The layout and mode before, for a rollback.
    old: Layout,
    old_enabled: bool,
    began: Instant,
    drained_at: Option<Instant>,
    /// The processes the agent did not start that the GPU waits for (pids).
    foreign: Vec<u32>,
    /// When the drain times out (model time).
    deadline: Option<f64>,
    /// When to look again for processes not the agent's (model time).
    retry_at: Option<f64>,
    /// Whether its [`Maker`] is at work (the outcome is yet to come).
    making: bool,
}

/// The engine's MIG changes.
#[derive(Default)]
pub(super) struct MigChanges {
    under_way: std::collections::BTreeMap<u32, UnderWay>,
    /// Drain deadlines (model time), by GPU.
    deadlines: gpu_agent_core::agenda::Agenda<u32>,
    /// When to look again at a drained GPU that processes the agent did not
    /// start still use (model time), by GPU.
    retries: gpu_agent_core::agenda::Agenda<u32>,
    /// The drain limit of the changes `ApplyMigConfig` is beginning.
    timeout_s: Seconds,
}

impl MigChanges {
    /// The earliest drain deadline or look again, model time.
    pub(super) fn next_deadline(&self) -> Option<f64> {
        [self.deadlines.peek(), self.retries.peek()]
            .into_iter()
            .flatten()
            .map(|(at, _)| at)
            .reduce(f64::min)
    }
}

/// What a [`Maker`] did to a GPU (`Request::MigMade`).
pub struct MigMade {
    /// The new layout, or why not.
    outcome: Result<(), Unmade>,
    /// After a failure, the old layout made again, or why not.
    restored: Option<Result<(), Unmade>>,
    /// How long the sequence took, rollback included.
    took: Duration,
}

/// Why the NVML sequence stopped.
enum Unmade {
    /// The mode waits for a reset the agent could not do.
    ResetRequired(String),
    /// Anything else.
    Failed(String),
}

impl std::fmt::Display for Unmade {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Unmade::ResetRequired(why) | Unmade::Failed(why) => f.write_str(why),
        }
    }
}

impl From<BackendError> for Unmade {
    fn from(e: BackendError) -> Self {
        Unmade::Failed(e.to_string())
    }
}

impl Engine {
    /// `ApplyMigConfig`: begins a change on each GPU of `targets` whose
    /// layout differs; returns those GPUs. Everything is checked before
    /// anything begins: a refusal changes nothing.
    pub(super) fn apply_mig(
        &mut self,
        targets: Vec<MigTarget>,
        options: MigOptions,
        round: &mut Round,
    ) -> Result<Vec<u32>, AgentError> {
        for t in &targets {
            if let Some(change) = self.core.mig_change(t.gpu) {
                return Err(AgentError::Busy(format!(
                    "GPU {}'s MIG layout is already changing ({}) to {}",
                    t.gpu,
                    change.phase,
                    describe_as(&change.target, change.mig_on)
                )));
            }
            // An adopted job's GPU or instance would go from under it, and
            // only its Release ends it: refused whatever `on_busy` says.
            if let Some(job) = self.adopted_on_gpu(t.gpu) {
                return Err(AgentError::Busy(format!(
                    "GPU {} holds adopted task {} ({}) on device(s) {:?}: its MIG layout can change once that is released",
                    t.gpu, job.id, job.spec.external_id, job.devices
                )));
            }
            if options.on_busy == OnBusy::Refuse {
                if let Some(why) = self.mig_busy(t.gpu) {
                    return Err(AgentError::Busy(format!(
                        "GPU {} {why} (on_busy = refuse)",
                        t.gpu
                    )));
                }
            }
        }
        let placed = |layout: &[Instance]| -> Vec<Placed> {
            layout
                .iter()
                .map(|i| Placed {
                    profile: i.profile,
                    start: Some(i.start),
                })
                .collect()
        };
        if !options.reject_stranded {
            let changes: Vec<(u32, Vec<Placed>, bool)> = targets
                .iter()
                .map(|t| (t.gpu, placed(&t.layout), t.enabled))
                .collect();
            let stranded: Vec<String> = self
                .core
                .stranded_by(&changes)
                .map_err(|e| AgentError::InvalidArgument(e.to_string()))?
                .into_iter()
                .map(|(_, why)| why)
                .collect();
            if !stranded.is_empty() {
                return Err(AgentError::Unschedulable(format!(
                    "{}; nothing changed (option reject_stranded = true changes the layout and rejects them)",
                    stranded.join("; ")
                )));
            }
        }
        let now = self.time.model_now();
        let mut changing = Vec::new();
        self.mig.timeout_s = options.timeout_s;
        for t in targets {
            let requests = placed(&t.layout);
            let on_busy = options.on_busy;
            let actions = self
                .decide(|core| {
                    if t.enabled && requests.is_empty() {
                        core.begin_mig_on_without_instances(now, t.gpu, on_busy)
                    } else {
                        core.begin_mig_change(now, t.gpu, &requests, on_busy)
                    }
                })
                .map_err(|e| match e {
                    RepartitionError::NoSuchGpu(_) => AgentError::NoSuchDevice(e.to_string()),
                    RepartitionError::NotMigCapable { .. } => {
                        AgentError::NotSupported(e.to_string())
                    }
                    RepartitionError::Layout { .. } => AgentError::InvalidArgument(e.to_string()),
                    _ => AgentError::Busy(e.to_string()),
                })?;
            if !actions.is_empty() {
                changing.push(t.gpu);
            }
            self.apply(actions, round);
        }
        self.mig.timeout_s = Seconds::default();
        Ok(changing)
    }

    /// `CancelMigChange`: abandons GPU `gpu`'s drain; its devices take work
    /// again and its layout stays as it was.
    pub(super) fn cancel_mig(&mut self, gpu: u32, round: &mut Round) -> Result<(), AgentError> {
        let now = self.time.model_now();
        let waiting = self
            .mig
            .under_way
            .get(&gpu)
            .is_some_and(|u| !u.foreign.is_empty());
        let actions = if waiting {
            // Drained, waiting for processes not the agent's: nothing was
            // touched, so the change can still be abandoned.
            self.decide(|core| core.mig_failed(now, gpu, true))
                .expect("the change waits to apply")
        } else {
            self.decide(|core| core.cancel_mig_change(now, gpu))
                .map_err(|e| match e {
                    RepartitionError::NoChange(_) => AgentError::InvalidArgument(e.to_string()),
                    _ => AgentError::Busy(format!("{e}: it can no longer be cancelled")),
                })?
        };
        self.mig.under_way.remove(&gpu);
        self.apply(actions, round);
        self.show_online(gpu, round);
        self.mig_state(
            gpu,
            MigState::Stable,
            "cancelled; the layout is unchanged".into(),
            round,
        );
        Ok(())
    }

    /// Why GPU `gpu` is busy (a task running or queued there), if it is.
    fn mig_busy(&self, gpu: u32) -> Option<String> {
        if let Some(&task) = self.core.mig_drain_waits_for(gpu).first() {
            return Some(format!("runs task {}", self.core_id(task)));
        }
        self.core.devices_of_gpu(gpu).into_iter().find_map(|d| {
            let task = *self.core.local_queue(d).first()?;
            Some(format!(
                "has task {} queued on device {d}",
                self.core_id(task)
            ))
        })
    }

    /// The core began a change of GPU `gpu` to `target` (`MigDraining`).
    pub(super) fn mig_draining(&mut self, gpu: u32, target: Layout, round: &mut Round) {
        let (old_enabled, old) = self.maker(gpu).read_layout(gpu).unwrap_or_else(|e| {
            log::warn!("GPU {gpu}: cannot read the MIG layout before a change: {e}");
            (false, Vec::new())
        });
        let timeout = self.mig.timeout_s.as_secs_f64();
        let deadline = (timeout > 0.0).then(|| self.time.model_now() + timeout * self.time.scale());
        if let Some(at) = deadline {
            self.mig.deadlines.push(at, gpu);
        }
        let waits = self.drain_waits(gpu);
        let enabled = self
            .core
            .mig_change(gpu)
            .map_or(!target.is_empty(), |c| c.mig_on);
        let shown = describe_as(&target, enabled);
        let message = if waits.is_empty() {
            format!("to {shown}")
        } else {
            format!("to {shown}; waiting for task(s) {}", waits.join(", "))
        };
        log::info!("GPU {gpu}: MIG layout change {message}");
        self.mig.under_way.insert(
            gpu,
            UnderWay {
                target,
                enabled,
                old,
                old_enabled,
                began: Instant::now(),
                drained_at: None,
                foreign: Vec::new(),
                deadline,
                retry_at: None,
                making: false,
            },
        );
        self.show_online(gpu, round);
        self.mig_state(gpu, MigState::Draining, message, round);
    }

    /// The core refused the policy's change of GPU `gpu` to `target`
    /// (`MigHeld`): an adopted job holds the GPU, and only its `Release`
    /// ends it (as `ApplyMigConfig` refuses it).
    pub(super) fn mig_held(&self, gpu: u32, target: &[Instance]) {
        let holder = self
            .adopted_on_gpu(gpu)
            .map_or("an adopted task".into(), |job| {
                format!(
                    "adopted task {} ({}) on device(s) {:?}",
                    job.id, job.spec.external_id, job.devices
                )
            });
        log::warn!(
            "GPU {gpu}: the policy's MIG layout change to {} is refused: the GPU holds {holder}; its layout can change once that is released",
            describe(target)
        );
    }

    /// Tells the bus objects of GPU `gpu`'s devices whether they take work
    /// (a drain took them offline, a cancel brought them back).
    fn show_online(&self, gpu: u32, round: &mut Round) {
        for device in self.core.devices_of_gpu(gpu) {
            if let Some(health) = self.health.get(device as usize) {
                round.notice(Notice::DeviceHealth {
                    device,
                    online: self.core.online(device),
                    health: health.clone(),
                });
            }
        }
    }

    /// GPU `gpu` is drained (`ApplyMigLayout`): the change is stored as
    /// applying, and made at the start of the next round.
    pub(super) fn mig_drained(&mut self, gpu: u32, round: &mut Round) {
        let message = match self.mig.under_way.get_mut(&gpu) {
            Some(u) => {
                u.drained_at = Some(Instant::now());
                format!("to {}", describe_as(&u.target, u.enabled))
            }
            None => String::new(),
        };
        self.mig_state(gpu, MigState::Applying, message, round);
        self.deferred.push(super::Request::MakeMigLayout { gpu });
    }

    /// Fails the drains whose time is up: their devices take work again.
    pub(super) fn mig_timeouts(&mut self, round: &mut Round) {
        let due = self.time.model_now();
        while let Some((at, gpu)) = self.mig.retries.pop_due(due) {
            if self
                .mig
                .under_way
                .get(&gpu)
                .is_some_and(|u| u.retry_at == Some(at))
            {
                self.make_mig_layout(gpu, round);
            }
        }
        while let Some((at, gpu)) = self.mig.deadlines.pop_due(due) {
            // The core's time moves on with each step: read it afresh.
            let now = self.time.model_now();
            // A deadline of an earlier change of the GPU is no longer due.
            let Some(foreign) = self
                .mig
                .under_way
                .get(&gpu)
                .filter(|u| u.deadline == Some(at))
                .map(|u| u.foreign.clone())
            else {
                continue;
            };
            if !foreign.is_empty() {
                // Drained, nothing touched yet: the GPU takes work again.
                let actions = self
                    .decide(|core| core.mig_failed(now, gpu, true))
                    .expect("the change waits to apply");
                let pids: Vec<String> = foreign.iter().map(u32::to_string).collect();
                let message = format!(
                    "the drain timed out with processes the agent did not start on the GPU (pid {}); the layout is unchanged",
                    pids.join(", ")
                );
                self.drain_timed_out(gpu, actions, message, round);
                continue;
            }
            if self.core.mig_change(gpu).map(|c| c.phase) != Some(MigPhase::Draining) {
                continue;
            }
            let waits = self.drain_waits(gpu);
            let actions = self
                .decide(|core| core.cancel_mig_change(now, gpu))
                .expect("a draining change can be cancelled");
            let message = format!(
                "the drain timed out with task(s) {} still running; the layout is unchanged",
                waits.join(", ")
            );
            self.drain_timed_out(gpu, actions, message, round);
        }
    }

    /// GPU `gpu`'s drain timed out and the core gave the change up with
    /// `actions`: the GPU takes work again, and the change failed with
    /// `message`.
    fn drain_timed_out(
        &mut self,
        gpu: u32,
        actions: Vec<Action>,
        message: String,
        round: &mut Round,
    ) {
        self.mig.under_way.remove(&gpu);
        self.apply(actions, round);
        self.show_online(gpu, round);
        log::warn!("GPU {gpu}: MIG change failed: {message}");
        self.mig_state(gpu, MigState::Failed, message, round);
    }

    /// The ids of the tasks GPU `gpu`'s drain still waits for.
    fn drain_waits(&self, gpu: u32) -> Vec<String> {
        self.core
            .mig_drain_waits_for(gpu)
            .into_iter()
            .map(|k| self.core_id(k).to_string())
            .collect()
    }

    /// Starts making GPU `gpu`'s new layout on the backend, on a thread of
    /// its own ([`Maker`]); [`Engine::mig_made`] takes the outcome.
    pub(super) fn make_mig_layout(&mut self, gpu: u32, round: &mut Round) {
        let Some(u) = self.mig.under_way.get(&gpu).filter(|u| !u.making).cloned() else {
            return;
        };
        if self.core.mig_change(gpu).map(|c| c.phase) != Some(MigPhase::Applying) {
            return;
        }
        let now = self.time.model_now();
        match self.backend.processes(gpu) {
            Ok(found) if !found.is_empty() => {
                // Not the agent's: the change waits for them, looking again
                // every second (a drain's timeout still applies).
                let pids: Vec<u32> = found.iter().map(|p| p.pid).collect();
                let at = now + self.time.scale();
                self.mig.retries.push(at, gpu);
                if let Some(w) = self.mig.under_way.get_mut(&gpu) {
                    w.retry_at = Some(at);
                }
                if u.foreign != pids {
                    let shown: Vec<String> = pids.iter().map(u32::to_string).collect();
                    let message = format!(
                        "to {}; waiting for processes the agent did not start to leave the GPU (pid {})",
                        describe_as(&u.target, u.enabled),
                        shown.join(", ")
                    );
                    log::warn!("GPU {gpu}: MIG layout change {message}");
                    if let Some(w) = self.mig.under_way.get_mut(&gpu) {
                        w.foreign = pids;
                    }
                    self.mig_state(gpu, MigState::Applying, message, round);
                }
                return;
            }
            Ok(_) => {}
            Err(e) => log::warn!("GPU {gpu}: cannot list its processes ({e}); applying"),
        }
        let Some(w) = self.mig.under_way.get_mut(&gpu) else {
            return;
        };
        w.foreign.clear();
        w.making = true;
        let maker = self.maker(gpu);
        let inbox = self.inbox.clone();
        let spawned = std::thread::Builder::new()
            .name(format!("mig {gpu}"))
            .spawn(move || {
                let started = Instant::now();
                let outcome = maker.make(gpu, u.enabled, &u.target);
                let restored = outcome
                    .is_err()
                    .then(|| maker.make(gpu, u.old_enabled, &u.old));
                let made = MigMade {
                    outcome,
                    restored,
                    took: started.elapsed(),
                };
                // The engine is gone only while the daemon exits; the change
                // is stored as applying, and the next start makes it.
                let _ = inbox.send(super::Request::MigMade { gpu, made });
            });
        if let Err(e) = spawned {
            let made = MigMade {
                outcome: Err(Unmade::Failed(format!(
                    "cannot start a thread to make it: {e}"
                ))),
                // Nothing was touched.
                restored: Some(Ok(())),
                took: Duration::ZERO,
            };
            self.mig_made(gpu, made, round);
        }
    }

    /// The [`Maker`] of GPU `gpu` is done: tells the core how it went.
    pub(super) fn mig_made(&mut self, gpu: u32, made: MigMade, round: &mut Round) {
        let Some(u) = self.mig.under_way.get(&gpu).filter(|u| u.making).cloned() else {
            return;
        };
        let now = self.time.model_now();
        match made.outcome {
            Ok(()) => {
                self.kill_in_apply_hook(gpu);
                let done = self
                    .decide(|core| core.mig_applied(now, gpu))
                    .expect("the core asked for this layout");
                self.layout_applied(gpu, &done, round);
                self.apply(done.actions.clone(), round);
                let drain = u.drained_at.map_or(0.0, |d| (d - u.began).as_secs_f64());
                let mut message = format!(
                    "{} (drain {drain:.3} s, apply {:.3} s)",
                    describe_as(&u.target, u.enabled),
                    made.took.as_secs_f64()
                );
                if u.enabled && u.target.is_empty() {
                    message
                        .push_str(": the GPU takes no task until a layout with instances is made");
                }
                log::info!("GPU {gpu}: MIG layout is now {message}");
                self.mig_state(gpu, MigState::Stable, message, round);
                self.mig.under_way.remove(&gpu);
            }
            Err(unmade) => {
                let (state, why) = match unmade {
                    Unmade::ResetRequired(why) => (MigState::ResetRequired, why),
                    Unmade::Failed(why) => (MigState::Failed, why),
                };
                let restored = made
                    .restored
                    .unwrap_or_else(|| Err(Unmade::Failed("no rollback was tried".into())));
                let message = match &restored {
                    Ok(()) => format!("{why}; the previous layout ({}) is back", describe_as(&u.old, u.old_enabled)),
                    Err(Unmade::ResetRequired(e) | Unmade::Failed(e)) => format!(
                        "{why}; restoring the previous layout ({}) failed too ({e}): the GPU stays offline",
                        describe_as(&u.old, u.old_enabled)
                    ),
                };
                log::error!(
                    "GPU {gpu}: MIG change to {} failed: {message}",
                    describe_as(&u.target, u.enabled)
                );
                let restored = restored.is_ok();
                let actions = self
                    .decide(|core| core.mig_failed(now, gpu, restored))
                    .expect("the core asked for this layout");
                if restored {
                    // The instances were made again: new UUIDs.
                    let same = gpu_agent_core::scheduler::Repartition {
                        devices: self.core.devices_of_gpu(gpu),
                        retired: Vec::new(),
                        actions: Vec::new(),
                    };
                    self.layout_applied(gpu, &same, round);
                }
                self.apply(actions, round);
                self.mig_state(gpu, state, message, round);
                self.mig.under_way.remove(&gpu);
            }
        }
    }

    /// At start: the changes a previous run stored and did not finish
    /// (`draining`, `applying`, or `reset-required`, whose target waits for
    /// the next start) begin again, waiting for the restored tasks; a
    /// `failed` one is announced again. Call after the tasks are restored.
    pub(super) fn resume_mig_changes(&mut self, round: &mut Round) -> Result<(), StoreError> {
        let gpus: Vec<(u32, &'static gpu_agent_core::mig::MigTable)> = self
            .core
            .devices()
            .filter(|d| d.mig().is_none())
            .filter_map(|d| Some((d.index, d.model.mig?)))
            .collect();
        for (gpu, table) in gpus {
            let Some(text) = self.store.meta(&meta_key(gpu))? else {
                continue;
            };
            let record: serde_json::Value = match serde_json::from_str(&text) {
                Ok(r) => r,
                Err(e) => {
                    log::warn!("GPU {gpu}: stored MIG change unreadable ({e}); ignored");
                    continue;
                }
            };
            let field = |k: &str| record[k].as_str().unwrap_or_default().to_string();
            let target = field("target");
            let Some(state) = MigState::parse(&field("state")) else {
                continue;
            };
            match state {
                MigState::Draining | MigState::Applying | MigState::ResetRequired => {}
                MigState::Failed => {
                    round.notice(Notice::MigChanged {
                        gpu,
                        state,
                        message: field("message"),
                    });
                    continue;
                }
                _ => continue,
            }
            let requests = placed_of_text(table, &target);
            let now = self.time.model_now();
            let begun = requests.map_err(|e| e.to_string()).and_then(|r| {
                self.decide(|core| {
                    if target == NO_INSTANCE {
                        core.begin_mig_on_without_instances(now, gpu, OnBusy::Wait)
                    } else {
                        core.begin_mig_change(now, gpu, &r, OnBusy::Wait)
                    }
                })
                .map_err(|e| e.to_string())
            });
            match begun {
                Ok(actions) if actions.is_empty() => {
                    log::info!("GPU {gpu}: the stored MIG change to {target} is already made");
                    self.mig_state(gpu, MigState::Stable, target, round);
                }
                Ok(actions) => {
                    log::warn!(
                        "GPU {gpu}: resuming the MIG change to {target} a previous run left {state}"
                    );
                    self.apply(actions, round);
                }
                Err(e) => {
                    let message = format!("the stored change to {target:?} cannot resume: {e}");
                    log::error!("GPU {gpu}: {message}");
                    self.mig_state(gpu, MigState::Failed, message, round);
                }
            }
        }
        Ok(())
    }

    /// GPU `gpu`'s layout written as [`describe`] writes it.
    pub(super) fn layout_of_text(&self, gpu: u32, text: &str) -> Result<Layout, String> {
        let table = self
            .core
            .devices()
            .find(|d| d.index == gpu && d.mig().is_none())
            .and_then(|d| d.model.mig)
            .ok_or_else(|| format!("GPU {gpu} has no MIG"))?;
        placed_of_text(table, text)?
            .into_iter()
            .map(|p| {
                let start = p.start.ok_or_else(|| format!("{text:?}: no start"))?;
                Ok(Instance {
                    profile: p.profile,
                    start,
                })
            })
            .collect()
    }

    /// Test hook [`Hook::KillInMigApply`](crate::test_hooks::Hook): as a
    /// crash at that instant would.
    fn kill_in_apply_hook(&mut self, gpu: u32) {
        let Some(marker) = crate::test_hooks::Hook::KillInMigApply.value() else {
            return;
        };
        let marker = std::path::PathBuf::from(marker);
        if marker.exists() || std::fs::write(&marker, b"").is_err() {
            return;
        }
        log::warn!("test hook: killed while applying GPU {gpu}'s MIG layout");
        let _ = nix::sys::signal::raise(nix::sys::signal::Signal::SIGKILL);
    }

    /// The NVML work of GPU `gpu`'s changes.
    fn maker(&self, gpu: u32) -> Maker {
        Maker {
            backend: self.backend.clone(),
            table: self
                .core
                .devices()
                .nth(gpu as usize)
                .and_then(|d| d.model.mig),
            reset_command: self.config.mig.reset_command.clone(),
        }
    }

    /// Stores GPU `gpu`'s MIG state and announces it (`MigChanged`).
    fn mig_state(&mut self, gpu: u32, state: MigState, message: String, round: &mut Round) {
        let (target, old) = match self.mig.under_way.get(&gpu) {
            Some(u) => (
                describe_as(&u.target, u.enabled),
                describe_as(&u.old, u.old_enabled),
            ),
            None => (String::new(), String::new()),
        };
        let record = serde_json::json!({
            "state": state.as_str(),
            "message": message,
            "target": target,
            "old": old,
        });
        round
            .ops
            .push(Op::SetMeta(meta_key(gpu), record.to_string()));
        round.notice(Notice::MigChanged {
            gpu,
            state,
            message,
        });
    }
}

/// The NVML sequence of one GPU's change, done off the engine thread (see
/// the module documentation).
struct Maker {
    backend: Arc<dyn GpuBackend>,
    /// The GPU's MIG table (`None`: its model has no MIG).
    table: Option<&'static MigTable>,
    /// `[mig] reset_command`.
    reset_command: Vec<String>,
}

impl Maker {
    /// GPU `gpu`'s MIG mode and layout on the backend.
    fn read_layout(&self, gpu: u32) -> Result<(bool, Layout), Unmade> {
        let Some(table) = self.table else {
            return Ok((false, Vec::new()));
        };
        let enabled = self.backend.mig_mode(gpu)?.is_some_and(|m| m.current);
        if !enabled {
            return Ok((false, Vec::new()));
        }
        let mut layout = Vec::new();
        for gi in self.backend.gpu_instances(gpu)? {
            let profile = table.profile(gi.profile_id).ok_or_else(|| {
                Unmade::Failed(format!(
                    "GPU instance {} has profile id {}, unknown to the catalogue",
                    gi.id, gi.profile_id
                ))
            })?;
            layout.push(Instance {
                profile,
                start: gi.placement.start,
            });
        }
        layout.sort();
        Ok((true, layout))
    }

    /// The NVML sequence: GPU `gpu` in MIG mode `enabled` with `layout`.
    fn make(&self, gpu: u32, enabled: bool, layout: &[Instance]) -> Result<(), Unmade> {
        let b = &*self.backend;
        let Some(mode) = b.mig_mode(gpu)? else {
            return if enabled {
                Err(Unmade::Failed(format!("GPU {gpu} has no MIG mode")))
            } else {
                Ok(())
            };
        };
        if mode.current {
            for gi in b.gpu_instances(gpu)? {
                for ci in b.compute_instances(gpu, gi.id)? {
                    b.destroy_compute_instance(gpu, gi.id, ci.id)?;
                }
                b.destroy_gpu_instance(gpu, gi.id)?;
            }
        }
        if mode.current != enabled || mode.pending != enabled {
            b.set_mig_mode(gpu, enabled)?;
            if b.mig_mode(gpu)?.is_some_and(|m| m.current != enabled) {
                self.reset(gpu)?;
                if b.mig_mode(gpu)?.is_some_and(|m| m.current != enabled) {
                    return Err(Unmade::ResetRequired(format!(
                        "GPU {gpu}: MIG mode still pending after the reset"
                    )));
                }
            }
        }
        if !enabled {
            return Ok(());
        }
        for i in layout {
            gpu_agent_backend::create_instance(b, gpu, i.profile.id, i.start)?;
        }
        let (_, made) = self.read_layout(gpu)?;
        let mut asked = layout.to_vec();
        asked.sort();
        if made != asked {
            return Err(Unmade::Failed(format!(
                "GPU {gpu} reads back as {}, not {}",
                describe(&made),
                describe(&asked)
            )));
        }
        for gi in b.gpu_instances(gpu)? {
            let n = b.compute_instances(gpu, gi.id)?.len();
            if n != 1 {
                return Err(Unmade::Failed(format!(
                    "GPU {gpu}: GPU instance {} reads back with {n} compute instances, not 1",
                    gi.id
                )));
            }
        }
        Ok(())
    }

    /// Resets GPU `gpu` so that its pending MIG mode takes effect: the
    /// backend's reset where it has one (the mock), else `[mig]
    /// reset_command`.
    fn reset(&self, gpu: u32) -> Result<(), Unmade> {
        match self.backend.reset_gpu(gpu) {
            Ok(()) => return Ok(()),
            Err(BackendError::NotSupported { .. }) => {}
            Err(e) => return Err(Unmade::ResetRequired(e.to_string())),
        }
        let command = &self.reset_command;
        if command.is_empty() {
            return Err(Unmade::ResetRequired(
                "the MIG mode change needs a GPU reset, and [mig] reset_command is empty".into(),
            ));
        }
        let bus_id = self.backend.device_info(gpu)?.pci_bus_id;
        log::info!("GPU {gpu}: resetting it with [mig] reset_command");
        run_reset_command(command, &bus_id, RESET_LIMIT).map_err(Unmade::ResetRequired)
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::run_reset_command;

    fn command(words: &[&str]) -> Vec<String> {
        words.iter().map(|w| w.to_string()).collect()
    }

    #[test]
    fn the_reset_command_gets_the_bus_id_and_its_failures_are_told() {
        let limit = Duration::from_secs(10);
        let bus = "00000000:07:00.0";
        assert_eq!(
            run_reset_command(
                &command(&["sh", "-c", "test \"$0\" = 00000000:07:00.0", "{bus_id}"]),
                bus,
                limit
            ),
            Ok(())
        );
        assert_eq!(
            run_reset_command(
                &command(&["sh", "-c", "echo busy >&2; exit 3", "{bus_id}"]),
                bus,
                limit
            ),
            Err(format!(
                "sh -c echo busy >&2; exit 3 {bus} failed (exit status: 3): busy"
            ))
        );
        assert_eq!(
            run_reset_command(&command(&["sleep", "5"]), bus, Duration::from_millis(100)),
            Err("sleep 5 did not end within 0.1 s; killed".into())
        );
        assert!(run_reset_command(&command(&["/no/such/reset"]), bus, limit)
            .unwrap_err()
            .starts_with("cannot run /no/such/reset: "));
        assert_eq!(
            run_reset_command(&[], bus, limit),
            Err("[mig] reset_command is empty".into())
        );
    }
}
