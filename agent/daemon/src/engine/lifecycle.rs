//! A task's life after the core takes it: start, end, restore, stop; and the
//! effects that touch processes and GPUs.

use gpu_agent_core::catalogue::GpuModel;
use gpu_agent_plugin_api::{AppModel, Clocks, TaskKey};

use super::clocks::{self, LOCKED_CORE, LOCKED_MEMORY};
use super::executor::{AtStop, Cancelled, Start};
use super::table::{Holding, How, Started};
use super::{Effect, Engine, Notice, Request, Round};
use crate::config::IdleClocks;
use crate::exec;
use crate::states::Health;
use crate::store::{ControlRecord, Op, StoreError};
use gpu_agent_core::apps::power_w;
use gpu_agent_core::{Action, Input};
use gpu_agent_dbus::{TaskClocks, TaskInfo, TaskStatus};

/// The ledger's value for the controls an idle lock set.
const IDLE_LOCK: &str = "lowest clocks while idle";

/// Seconds (wall time) a task whose run could not start for want of file
/// descriptors holds its devices before it waits again.
const LAUNCH_RETRY_S: f64 = 1.0;

/// A device's idle clock lock (`idle_clocks = "min"`).
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct IdleLock {
    /// Its clocks are locked at their lowest (and recorded so).
    locked: bool,
}

/// Whether a device's clocks should be locked at their lowest: with
/// `idle_clocks = "min"`, while it is online, runs no task and the daemon
/// is not stopping.
fn wants_idle_lock(setting: IdleClocks, online: bool, busy: bool, stopping: bool) -> bool {
    setting == IdleClocks::Min && online && !busy && !stopping
}

/// Records and locks GPU `gpu`'s clocks at `clocks` for task `id`, as part
/// of `round`: the record is stored before the lock, so that a crash in
/// between still restores it (ARCHITECTURE.md, invariant 16). `launch`: the
/// task's run, which starts once the lock is done (`None` for an adopted
/// job, which runs already).
pub(super) fn lock_clocks(
    gpu: u32,
    clocks: Clocks,
    id: &str,
    launch: Option<TaskKey>,
    round: &mut Round,
) {
    // The memory clock is locked only when it is not the default
    // (set_clocks), so only then recorded.
    let controls: &[&str] = if clocks.mem != 1.0 {
        &[LOCKED_CORE, LOCKED_MEMORY]
    } else {
        &[LOCKED_CORE]
    };
    for &control in controls {
        round.ops.push(Op::RecordControl(ControlRecord {
            gpu,
            control: control.into(),
            value: format!(
                "core {:.3} mem {:.3} for task {id}",
                clocks.core, clocks.mem
            ),
        }));
    }
    round.effects.push(Effect::SetClocks(gpu, clocks, launch));
}

/// Restores GPU `gpu`'s clocks [`lock_clocks`] locked, and clears their record.
pub(super) fn unlock_clocks(gpu: u32, round: &mut Round) {
    round.effects.push(Effect::ResetClocks(gpu));
    for control in [LOCKED_CORE, LOCKED_MEMORY] {
        round.ops.push(Op::ClearControl {
            gpu,
            control: control.into(),
        });
    }
}

impl Engine {
    /// Carries out the core's actions as part of `round`.
    pub(super) fn apply(&mut self, actions: Vec<Action>, round: &mut Round) {
        for action in actions {
            match action {
                Action::Start {
                    task,
                    devices,
                    clocks,
                    runtime,
                } => {
                    let now = self.time.unix_now();
                    let Some(info) = self.tasks.get_mut(task) else {
                        log::error!(
                            "the core started task key {task}, which the engine never gave it"
                        );
                        continue;
                    };
                    info.state = TaskStatus::Running;
                    info.devices = devices.clone();
                    info.started = Some(now);
                    let started = self.core.task(task);
                    info.clocks =
                        self.devices
                            .get(devices[0] as usize)
                            .zip(started)
                            .map(|(d, t)| {
                                let app = &t.app;
                                let dvfs = self.core.dvfs(task);
                                TaskClocks {
                                    class: dvfs.map(|(c, _)| c.name().to_string()),
                                    readjusted: dvfs.map(|(_, r)| r),
                                    ..clocks_record(
                                        d.model,
                                        app,
                                        clocks,
                                        runtime,
                                        runtime / app.time_factor(clocks),
                                    )
                                }
                            });
                    let how = if info.spec.command.is_empty() {
                        How::Modelled
                    } else {
                        How::Process
                    };
                    let (id, info) = (info.id.clone(), info.clone());
                    round.ops.push(Op::put(info));
                    round.notice(Notice::TaskChanged {
                        id: id.clone(),
                        state: TaskStatus::Running,
                    });
                    // Clocks belong to a physical GPU: a MIG instance's
                    // are its siblings' too, and never set (the core offers
                    // instances the default point only).
                    let clocks_set =
                        clocks != Clocks::DEFAULT && devices.iter().all(|&d| self.is_whole(d));
                    for &d in &devices {
                        round.notice(Notice::CurrentTask {
                            device: d,
                            task: id.clone(),
                        });
                        // The task's clocks (or the default) replace the
                        // idle lock.
                        self.unlock_idle(d, round);
                        if clocks_set {
                            lock_clocks(d, clocks, &id, Some(task), round);
                        }
                    }
                    // The run starts once its clocks are locked
                    // (`Engine::clocks_locked`).
                    let locks = if clocks_set { devices.len() } else { 0 };
                    self.tasks.start(
                        task,
                        Started {
                            how,
                            holding: Holding {
                                energy_at_start: Vec::new(),
                                clocks_set,
                            },
                            handle: None,
                            awaiting_locks: (locks > 0).then_some((locks, runtime)),
                            cancelled: false,
                            interrupted: None,
                            overran: false,
                        },
                    );
                    if locks == 0 {
                        round.effects.push(Effect::Launch(task, runtime));
                    }
                    // A modelled run ends at its predicted end; a command may
                    // run past it, which the core must learn then.
                    if how == How::Process {
                        self.overruns.push(self.time.model_now() + runtime, task);
                    }
                }
                Action::Overrunning { task, until } => {
                    let first = self
                        .tasks
                        .started_mut(task)
                        .is_some_and(|run| !std::mem::replace(&mut run.overran, true));
                    if let Some(info) = self.tasks.get(task).filter(|_| first) {
                        log::info!(
                            "task {} runs past its expected end; its GPUs' queued tasks go back to the policy",
                            info.id
                        );
                    }
                    self.overruns.push(until, task);
                }
                Action::Interrupt { task, device } => {
                    let reason = self.interrupt_reason(device);
                    let Some(run) = self.tasks.started_mut(task) else {
                        continue;
                    };
                    if run.interrupted.is_some() {
                        continue; // already being stopped
                    }
                    run.interrupted = Some(reason);
                    if self.cancel_run(task) == Cancelled::Ended {
                        self.finish(task, Err("stopped".into()), round);
                    }
                }
                Action::Reject { task, reason } => {
                    self.end(task, TaskStatus::Rejected, Some(reason), round);
                }
                Action::WakeAt { time } => {
                    if !self.timers.has_time(time) {
                        self.timers.push(time, ());
                    }
                }
                Action::PolicyFault { policy, reason } => {
                    self.telemetry.policy_faults.inc();
                    log::warn!(
                        "policy {policy} failed: {reason}; continuing with the built-in FIFO order"
                    );
                    let fault = crate::policy_thread::Fault { policy, reason };
                    round.ops.push(super::Op::SetMeta(
                        crate::policy_thread::Fault::META_KEY.into(),
                        fault.to_json(),
                    ));
                    round.notice(Notice::PolicyFault(Some(fault)));
                    round.notice(self.policy_notice());
                }
                Action::Assigned { task } => round.assigned.push(task),
                Action::MigDraining { gpu, layout } => self.mig_draining(gpu, layout, round),
                Action::ApplyMigLayout { gpu, .. } => self.mig_drained(gpu, round),
                Action::MigHeld { gpu, layout } => self.mig_held(gpu, &layout),
            }
        }
    }

    /// Frees `devices` at the end of a run (a task's, or an adopted job's)
    /// that held `holding` there: unlocks the clocks the run set, clears
    /// each device's current task, and returns the energy the devices used
    /// since its start ([`Engine::energy_since`]).
    pub(super) fn free_devices(
        &self,
        devices: &[u32],
        holding: &Holding,
        round: &mut Round,
    ) -> Option<u64> {
        let energy_mj = self.energy_since(devices, &holding.energy_at_start);
        for &d in devices {
            round.notice(Notice::CurrentTask {
                device: d,
                task: String::new(),
            });
            if holding.clocks_set {
                unlock_clocks(d, round);
            }
        }
        energy_mj
    }

    /// The energy `devices` used since `energy_at_start` (mJ, their
    /// counters read at the start of a run), `None` where a counter could
    /// not be read. A MIG instance is charged its share of its GPU's
    /// counter (`Engine::energy_share`).
    pub(super) fn energy_since(
        &self,
        devices: &[u32],
        energy_at_start: &[Option<u64>],
    ) -> Option<u64> {
        let mut energy_mj = Some(0u64);
        for (i, &d) in devices.iter().enumerate() {
            let at_start = energy_at_start.get(i).copied().flatten();
            let now = self.energy_counter(d);
            let share = self.energy_share(d);
            energy_mj = match (energy_mj, at_start, now) {
                (Some(sum), Some(a), Some(b)) => {
                    Some(sum + (b.saturating_sub(a) as f64 * share).round() as u64)
                }
                _ => None,
            };
        }
        energy_mj
    }

    /// Asks the run of task `key` to end early (`cancel_grace_s` between
    /// the polite and the forced end); one that never began ends at once.
    pub(super) fn cancel_run(&mut self, key: TaskKey) -> Cancelled {
        let grace = self.cancel_grace();
        match self.tasks.started(key).and_then(|run| run.handle) {
            Some(handle) => self.exec.running(handle).cancel(handle, grace),
            None => Cancelled::Ended,
        }
    }

    /// Settles run `run` of `task` (key `key`), taken off its record: frees
    /// its devices and lets its executor release it; the energy it used, mJ.
    fn settle(
        &mut self,
        key: TaskKey,
        run: &Started,
        task: &TaskInfo,
        round: &mut Round,
    ) -> Option<u64> {
        let energy_mj = self.free_devices(&task.devices, &run.holding, round);
        if let Some(handle) = run.handle {
            self.exec
                .running(handle)
                .release(key, handle, task, &mut round.ops);
        }
        energy_mj
    }

    /// A running task left its devices: `Ok` when it succeeded.
    pub(super) fn finish(&mut self, key: TaskKey, result: Result<(), String>, round: &mut Round) {
        let Some(run) = self.tasks.take_started(key) else {
            log::error!("task key {key} ended but was not running");
            return;
        };
        // A run belongs to a held task (`table.rs`).
        let Some(task) = self.tasks.get(key).cloned() else {
            return;
        };
        let energy_mj = self.settle(key, &run, &task, round);
        if let Some(info) = self.tasks.get_mut(key) {
            info.energy_j = energy_mj.map(|mj| mj as f64 / 1000.0);
        }
        let ok = result.is_ok() && run.interrupted.is_none();
        if let Some(reason) = run.interrupted.as_ref().filter(|_| !run.cancelled) {
            if task.spec.requeue && !self.stopping {
                // Its device failed under it: it waits again, in its place.
                log::warn!("task {}: {reason}; queued again (requeue)", task.id);
                self.requeue(key, round);
                let now = self.time.model_now();
                let actions = self.decide(|core| core.handle(now, Input::Requeue { task: key }));
                self.apply(actions, round);
                return;
            }
        }
        let (state, reason) = match result {
            _ if run.cancelled => (TaskStatus::Cancelled, None),
            _ if run.interrupted.is_some() => (TaskStatus::Failed, run.interrupted),
            Ok(()) => (TaskStatus::Succeeded, None),
            Err(reason) => (TaskStatus::Failed, Some(reason)),
        };
        self.end(key, state, reason, round);
        if !self.stopping {
            let now = self.time.model_now();
            let actions = self.decide(|core| core.handle(now, Input::Finished { task: key, ok }));
            self.apply(actions, round);
        }
    }

    /// Records a task that ran as waiting again (`requeue`): queued, with
    /// no trace of the run.
    fn requeue(&mut self, key: TaskKey, round: &mut Round) {
        let Some(info) = self.tasks.get_mut(key) else {
            return;
        };
        *info = TaskInfo {
            state: TaskStatus::Queued,
            devices: Vec::new(),
            started: None,
            finished: None,
            exit_code: None,
            energy_j: None,
            reason: None,
            clocks: None,
            waiting: None,
            ..info.clone()
        };
        let info = info.clone();
        round.notice(Notice::TaskChanged {
            id: info.id.clone(),
            state: TaskStatus::Queued,
        });
        round.ops.push(Op::put(info));
    }

    /// Records that a task ended in `state`.
    pub(super) fn end(
        &mut self,
        key: TaskKey,
        state: TaskStatus,
        reason: Option<String>,
        round: &mut Round,
    ) {
        let now = self.time.unix_now();
        let Some(info) = self.tasks.get_mut(key) else {
            log::error!("task key {key} ended {state} but is not in the table");
            return;
        };
        info.state = state;
        info.finished = Some(now);
        info.reason = reason;
        let info = info.clone();
        round.notice(Notice::TaskChanged {
            id: info.id.clone(),
            state,
        });
        round.ops.push(Op::put(info));
    }

    /// Stops: refuses new work, ends or keeps the running tasks, restores the clocks.
    pub(super) fn stop(&mut self, round: &mut Round) {
        self.stopping = true;
        self.keep_adopted_at_stop(round);
        for (_, spec, reply) in std::mem::take(&mut self.parked_adopts) {
            let what = format!("{} was not adopted", spec.external_id);
            round.reply(reply, Err(super::requests::stopping(&what)));
        }
        let mut keys: Vec<TaskKey> = self.tasks.running().map(|(key, _, _)| key).collect();
        keys.sort_unstable();
        let mut groups = Vec::new();
        let keep = self.config.keep_tasks_on_stop;
        for key in keys {
            let Some(run) = self.tasks.started(key) else {
                continue;
            };
            let at_stop = match run.handle {
                Some(handle) => self.exec.running(handle).at_stop(handle, keep),
                // It never began: nothing runs to keep.
                None => AtStop::End(None),
            };
            match at_stop {
                // Left running; the next start records it as lost (or queues it again).
                AtStop::Keep => continue,
                AtStop::End(group) => groups.extend(group),
            }
            let requeue = self.tasks.get(key).is_some_and(|t| t.spec.requeue);
            self.finish(key, Err("gpu-agentd stopped while it ran".into()), round);
            if requeue {
                self.requeue(key, round);
            }
        }
        // Signalled once the stop is stored; the daemon waits for them.
        round.effects.push(Effect::EndGroups(groups));
    }

    /// Puts the stored state back: offline devices go offline in the core
    /// first, then waiting tasks go to the core again in submission order; ones that were running are lost, or queued again
    /// when their spec says `requeue`. Controls a previous run left changed
    /// are restored.
    pub(super) fn restore(
        &mut self,
        health: Vec<Health>,
        stored: Vec<TaskInfo>,
        controls: Vec<ControlRecord>,
        processes: Vec<(String, u32)>,
    ) -> Result<Round, StoreError> {
        let mut round = Round::default();
        // Processes a previous run started and could not see end: a task
        // runs at most once at a time, so they go before anything restarts.
        let leftovers: Vec<u32> = processes
            .iter()
            .filter(|(task, pgid)| exec::runs_task(*pgid, task))
            .map(|&(_, pgid)| pgid)
            .collect();
        // A task runs at most once at a time (ARCHITECTURE.md, invariant
        // 15): its group is ended before the task is marked lost or queued.
        if !leftovers.is_empty() {
            log::warn!(
                "ending {} task process group(s) left by a previous run",
                leftovers.len()
            );
            exec::end_groups(&leftovers, self.cancel_grace());
        }
        for (task, _) in processes {
            round.ops.push(Op::ClearProcess { task });
        }
        for c in controls {
            log::info!(
                "restoring GPU {} {} (set by a previous run: {})",
                c.gpu,
                c.control,
                c.value
            );
            self.clocks
                .send(c.gpu, clocks::Job::Reset(vec![c.control.clone()]));
            round.ops.push(Op::ClearControl {
                gpu: c.gpu,
                control: c.control,
            });
        }
        let now_unix = self.time.unix_now();
        let mut waiting = Vec::new();
        let mut adopted = Vec::new();
        let mut tally = self.tally.clone();
        for mut info in stored {
            let requeue = match info.state {
                TaskStatus::Running if !info.spec.external_id.is_empty() => {
                    adopted.push(info);
                    continue;
                }
                TaskStatus::Queued | TaskStatus::Assigned => true,
                TaskStatus::Running if info.spec.requeue => true,
                TaskStatus::Running => {
                    info.state = TaskStatus::Lost;
                    info.finished = Some(now_unix);
                    info.reason = Some("gpu-agentd stopped while it ran".into());
                    tally.add(&info, self.time.scale());
                    round.ops.push(Op::put(info.clone()));
                    false
                }
                _ => false,
            };
            if requeue && info.state != TaskStatus::Queued {
                info = TaskInfo {
                    state: TaskStatus::Queued,
                    devices: Vec::new(),
                    started: None,
                    exit_code: None,
                    clocks: None,
                    waiting: None,
                    ..info
                };
                round.ops.push(Op::put(info.clone()));
            }
            if requeue {
                waiting.push(self.tasks.admit(info));
            } else {
                self.tasks.insert(info);
            }
        }
        if tally != self.tally {
            round
                .ops
                .push(Op::SetMeta(super::tally::META_KEY.into(), tally.to_json()));
        }
        self.store.commit(&std::mem::take(&mut round.ops))?;
        self.tally = tally;
        self.restore_health(health, &mut round);
        for info in adopted {
            self.restore_adopted(info, &mut round);
        }
        let now = self.time.model_now();
        for &key in &waiting {
            let Some(info) = self.tasks.get(key) else {
                continue;
            };
            if self.apps.get(&info.spec.app).is_none() {
                log::warn!(
                    "task {}: DVFS profile {:?} is gone; using default",
                    info.id,
                    info.spec.app
                );
            }
            let spec = info.spec.to_task(
                info.id.clone(),
                now,
                self.time.model_of_unix(info.submitted),
                self.app(&info.spec.app),
            );
            self.submit(key, |core, now| core.submit(now, spec), &mut round);
        }
        log::info!("restored {} waiting task(s)", waiting.len());
        Ok(round)
    }

    /// Does one effect, now that the round is stored.
    pub(super) fn carry_out(&mut self, effect: Effect) {
        match effect {
            Effect::Reply(reply) => reply(),
            Effect::Notice(notice) => self.notices.send(notice),
            Effect::Launch(key, runtime) => self.launch(key, runtime),
            Effect::EndGroups(pids) => exec::end_groups(&pids, self.cancel_grace()),
            Effect::SetClocks(gpu, clocks, launch) => self.set_clocks(gpu, clocks, launch),
            Effect::ResetClocks(gpu) => self.clocks.send(
                gpu,
                clocks::Job::Reset(vec![LOCKED_CORE.into(), LOCKED_MEMORY.into()]),
            ),
            Effect::LockLowest(gpu) => self.clocks.send(gpu, clocks::Job::LockLowest),
        }
    }

    /// Locks the idle online GPUs' clocks at their lowest and undoes the
    /// locks of GPUs no longer idle, online or wanted so (`idle_clocks`,
    /// a stop); run at the end of every round. A task's start undoes the
    /// lock on its GPUs itself, before its own clocks are set.
    pub(super) fn idle_clocks(&mut self, round: &mut Round) {
        let mut busy = vec![false; self.idle.len()];
        for (_, task, _) in self.tasks.running() {
            for &d in &task.devices {
                if let Some(b) = busy.get_mut(d as usize) {
                    *b = true;
                }
            }
        }
        // An adopted GPU runs its job at the job's clocks.
        for d in self.adopted_devices() {
            if let Some(b) = busy.get_mut(d as usize) {
                *b = true;
            }
        }
        for (d, &busy) in busy.iter().enumerate() {
            // Only a whole GPU is locked: a split GPU's clocks are its
            // instances', which may be busy.
            let online = self.health.get(d).is_some_and(Health::is_ok) && self.is_whole(d as u32);
            let want = wants_idle_lock(self.config.idle_clocks, online, busy, self.stopping);
            let gpu = d as u32;
            if want && !self.idle[d].locked {
                self.idle[d].locked = true;
                for control in [LOCKED_CORE, LOCKED_MEMORY] {
                    round.ops.push(Op::RecordControl(ControlRecord {
                        gpu,
                        control: control.into(),
                        value: IDLE_LOCK.into(),
                    }));
                }
                round.effects.push(Effect::LockLowest(gpu));
            } else if !want {
                self.unlock_idle(gpu, round);
            }
        }
    }

    /// Undoes GPU `gpu`'s idle lock, if it has one.
    pub(super) fn unlock_idle(&mut self, gpu: u32, round: &mut Round) {
        let Some(lock) = self.idle.get_mut(gpu as usize).filter(|l| l.locked) else {
            return;
        };
        lock.locked = false;
        log::info!("GPU {gpu}: undoing its idle clock lock");
        round.effects.push(Effect::ResetClocks(gpu));
        for control in [LOCKED_CORE, LOCKED_MEMORY] {
            round.ops.push(Op::ClearControl {
                gpu,
                control: control.into(),
            });
        }
    }

    /// Starts a task's run: its process, or its modelled run when it has no
    /// command.
    fn launch(&mut self, key: TaskKey, runtime: f64) {
        // Absent when cancelled or stopped before it could start.
        let Some(how) = self.tasks.started(key).map(|r| r.how) else {
            return;
        };
        let Some(task) = self.tasks.get(key).cloned() else {
            return;
        };
        let energy: Vec<Option<u64>> = task
            .devices
            .iter()
            .map(|&d| self.energy_counter(d))
            .collect();
        if let Some(run) = self.tasks.started_mut(key) {
            run.holding.energy_at_start = energy;
        }
        let app = self.app(&task.spec.app);
        let start = Start {
            key,
            task: &task,
            app: &app,
            runtime,
        };
        match self.exec.of(how).start(start, &mut self.unsaved) {
            Ok(handle) => {
                if let Some(run) = self.tasks.started_mut(key) {
                    run.handle = Some(handle);
                }
            }
            Err(e) if e.short_of_descriptors && !self.stopping => {
                // It holds its devices until then, so the retry is paced.
                log::warn!(
                    "task {}: {}; it waits again in {} s",
                    task.id,
                    e.reason,
                    LAUNCH_RETRY_S
                );
                let at = self.time.model_now() + LAUNCH_RETRY_S * self.time.scale();
                self.launch_retries.push(at, key);
            }
            Err(e) => self.deferred.push(Request::LaunchFailed {
                key,
                reason: e.reason,
            }),
        }
    }

    /// Puts back in the queue, in its arrival place, a task whose run did not
    /// start for want of file descriptors (unless it ended meanwhile:
    /// cancelled, or its device failed).
    pub(super) fn wait_again(&mut self, key: TaskKey, round: &mut Round) {
        let Some(run) = self.tasks.take_started(key) else {
            return;
        };
        let Some(task) = self.tasks.get(key).cloned() else {
            return;
        };
        self.settle(key, &run, &task, round);
        self.requeue(key, round);
        let now = self.time.model_now();
        let actions = self.decide(|core| core.handle(now, Input::Requeue { task: key }));
        self.apply(actions, round);
    }

    /// Locks a GPU's clocks at the normalised `clocks` (best effort, on
    /// its clock worker); `launch`: the task whose run waits for it.
    fn set_clocks(&mut self, gpu: u32, clocks: Clocks, launch: Option<TaskKey>) {
        let Some(model) = self.devices.get(gpu as usize).map(|d| d.model) else {
            log::error!("cannot lock GPU {gpu}'s clocks: no such device");
            if let Some(key) = launch {
                self.deferred.push(Request::ClocksLocked { key });
            }
            return;
        };
        let (core_mhz, mem_mhz) = model.clocks_mhz(clocks);
        // The memory clock is locked only when it is not the default.
        let mem_mhz = (clocks.mem != 1.0).then_some(mem_mhz);
        self.clocks.send(
            gpu,
            clocks::Job::Lock {
                core_mhz,
                mem_mhz,
                task: launch,
            },
        );
    }

    /// One GPU of task `key` has its clocks locked: its run starts once
    /// every GPU of it has (unless it ended meanwhile, or a stop began).
    pub(super) fn clocks_locked(&mut self, key: TaskKey, round: &mut Round) {
        let Some(run) = self.tasks.started_mut(key) else {
            return;
        };
        let Some((left, runtime)) = run.awaiting_locks.as_mut() else {
            return;
        };
        *left -= 1;
        if *left == 0 {
            let runtime = *runtime;
            run.awaiting_locks = None;
            if !self.stopping {
                round.effects.push(Effect::Launch(key, runtime));
            }
        }
    }
}

/// The record of a run at `clocks` on a `model` GPU (the task dictionary's
/// clock keys): `t` its run time there and `default_t` at default clocks,
/// power from `app`'s model at both; the policy's class and readjustment are
/// the caller's to add.
pub(super) fn clocks_record(
    model: &GpuModel,
    app: &AppModel,
    clocks: Clocks,
    t: f64,
    default_t: f64,
) -> TaskClocks {
    let (core_mhz, mem_mhz) = model.clocks_mhz(clocks);
    TaskClocks {
        core_mhz,
        mem_mhz,
        v: clocks.voltage(),
        fc: clocks.core,
        fm: clocks.mem,
        t,
        p: power_w(app, model, clocks),
        default_t,
        default_p: power_w(app, model, Clocks::DEFAULT),
        class: None,
        readjusted: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_an_online_idle_gpu_under_min_is_locked_and_never_while_stopping() {
        use IdleClocks::{Default, Min};
        assert!(wants_idle_lock(Min, true, false, false));
        assert!(!wants_idle_lock(Default, true, false, false));
        assert!(!wants_idle_lock(Min, false, false, false), "offline");
        assert!(!wants_idle_lock(Min, true, true, false), "busy");
        assert!(!wants_idle_lock(Min, true, false, true), "stopping");
    }
}
