//! A task's life after the core takes it: start, end, restore, stop; and the
//! effects that touch processes and GPUs.

use gpu_agent_plugin_api::{Clocks, TaskKey};

use super::{Due, Effect, Engine, Notice, Request, Round, Running, Wake};
use crate::exec::{self, Launch, LogSink};
use crate::store::{ControlRecord, Op, StoreError};
use gpu_agent_backend::{mock::MockProcess, ClockRange};
use gpu_agent_core::{Action, Input, TaskSpec};
use gpu_agent_dbus::{TaskInfo, TaskStatus};

/// The controls the daemon sets, as recorded in the store.
const LOCKED_CORE: &str = "locked_core_clocks";
const LOCKED_MEMORY: &str = "locked_memory_clocks";

/// The pid the mock GPUs show for a simulated task: above Linux's pid range
/// (2^22); unique among the tasks a device could hold at once.
fn simulated_pid(key: TaskKey) -> u32 {
    (1 << 24) | (key & 0xff_ffff) as u32
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
                    let info = self.task_mut(task);
                    info.state = TaskStatus::Running;
                    info.devices = devices.clone();
                    info.started = Some(now);
                    let (id, info) = (info.id.clone(), info.clone());
                    round.ops.push(Op::put(info));
                    round.notice(Notice::TaskChanged {
                        id: id.clone(),
                        state: TaskStatus::Running,
                    });
                    let clocks_set = clocks != Clocks::DEFAULT;
                    for &d in &devices {
                        round.notice(Notice::CurrentTask {
                            device: d,
                            task: id.clone(),
                        });
                        if clocks_set {
                            for control in [LOCKED_CORE, LOCKED_MEMORY] {
                                round.ops.push(Op::RecordControl(ControlRecord {
                                    gpu: d,
                                    control: control.into(),
                                    value: format!(
                                        "core {:.3} mem {:.3} for task {id}",
                                        clocks.core, clocks.mem
                                    ),
                                }));
                            }
                            round.effects.push(Effect::SetClocks(d, clocks));
                        }
                    }
                    self.running.insert(
                        task,
                        Running {
                            pid: None,
                            energy_at_start: Vec::new(),
                            clocks_set,
                            cancelled: false,
                        },
                    );
                    round.effects.push(Effect::Launch(task, runtime));
                }
                Action::Reject { task, reason } => {
                    self.end(task, TaskStatus::Rejected, Some(reason), round);
                }
                Action::WakeAt { time } => {
                    if !self
                        .timers
                        .iter()
                        .any(|d| d.what == Wake::Timer && d.at == time)
                    {
                        self.timers.push(Due {
                            at: time,
                            what: Wake::Timer,
                        });
                    }
                }
                Action::PolicyFault { policy, reason } => {
                    log::warn!(
                        "policy {policy} failed: {reason}; continuing with the built-in FIFO order"
                    );
                    round.notice(Notice::Policy(self.core.policy_name().into()));
                }
            }
        }
    }

    /// A running task left its devices: `Ok` when it succeeded.
    pub(super) fn finish(&mut self, key: TaskKey, result: Result<(), String>, round: &mut Round) {
        let run = self
            .running
            .remove(&key)
            .expect("a finishing task is running");
        let devices = self.task_mut(key).devices.clone();
        let mut energy_mj = Some(0u64);
        for (i, &d) in devices.iter().enumerate() {
            let at_start = run.energy_at_start.get(i).copied().flatten();
            let now = self.backend.energy_mj(d).ok().flatten();
            energy_mj = match (energy_mj, at_start, now) {
                (Some(sum), Some(a), Some(b)) => Some(sum + b.saturating_sub(a)),
                _ => None,
            };
            if let Some(mock) = &self.mock {
                let pid = run.pid.unwrap_or(simulated_pid(key));
                if let Err(e) = mock.end_process(d, pid) {
                    log::warn!("mock GPU {d}: {e}");
                }
            }
            round.notice(Notice::CurrentTask {
                device: d,
                task: String::new(),
            });
            if run.clocks_set {
                round.effects.push(Effect::ResetClocks(d));
                for control in [LOCKED_CORE, LOCKED_MEMORY] {
                    round.ops.push(Op::ClearControl {
                        gpu: d,
                        control: control.into(),
                    });
                }
            }
        }
        self.task_mut(key).energy_j = energy_mj.map(|mj| mj as f64 / 1000.0);
        if run.pid.is_some() {
            let task = self.task_mut(key).id.clone();
            round.ops.push(Op::ClearProcess { task });
        }
        let ok = result.is_ok();
        let (state, reason) = match result {
            _ if run.cancelled => (TaskStatus::Cancelled, None),
            Ok(()) => (TaskStatus::Succeeded, None),
            Err(reason) => (TaskStatus::Failed, Some(reason)),
        };
        self.end(key, state, reason, round);
        if !self.stopping {
            let actions = self
                .core
                .handle(self.time.model_now(), Input::Finished { task: key, ok });
            self.apply(actions, round);
        }
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
        let info = self.task_mut(key);
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
        let mut keys: Vec<TaskKey> = self.running.keys().copied().collect();
        keys.sort_unstable();
        let mut groups = Vec::new();
        for key in keys {
            let pid = self.running[&key].pid;
            if self.config.keep_tasks_on_stop && pid.is_some() {
                // Left running; the next start records it as lost (or queues it again).
                continue;
            }
            groups.extend(pid);
            let requeue = self.task_mut(key).spec.requeue;
            self.finish(key, Err("gpu-agentd stopped while it ran".into()), round);
            if requeue {
                let info = self.task_mut(key);
                *info = TaskInfo {
                    state: TaskStatus::Queued,
                    devices: Vec::new(),
                    started: None,
                    finished: None,
                    exit_code: None,
                    energy_j: None,
                    reason: None,
                    ..info.clone()
                };
                let info = info.clone();
                round.notice(Notice::TaskChanged {
                    id: info.id.clone(),
                    state: TaskStatus::Queued,
                });
                round.ops.push(Op::put(info));
            }
        }
        // Signalled once the stop is stored; the daemon waits for them.
        round.effects.push(Effect::EndGroups(groups));
    }

    /// Puts the stored tasks back: waiting ones go to the core again in
    /// submission order; ones that were running are lost, or queued again
    /// when their spec says `requeue`. Controls a previous run left changed
    /// are restored.
    pub(super) fn restore(
        &mut self,
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
            self.reset_control(c.gpu, &c.control);
            round.ops.push(Op::ClearControl {
                gpu: c.gpu,
                control: c.control,
            });
        }
        let now_unix = self.time.unix_now();
        let mut waiting = Vec::new();
        for mut info in stored {
            let requeue = match info.state {
                TaskStatus::Queued | TaskStatus::Assigned => true,
                TaskStatus::Running if info.spec.requeue => true,
                TaskStatus::Running => {
                    info.state = TaskStatus::Lost;
                    info.finished = Some(now_unix);
                    info.reason = Some("gpu-agentd stopped while it ran".into());
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
                    ..info
                };
                round.ops.push(Op::put(info.clone()));
            }
            let idx = self.record(info);
            if requeue {
                waiting.push(idx);
            }
        }
        self.store.commit(&std::mem::take(&mut round.ops))?;
        let now = self.time.model_now();
        for &idx in &waiting {
            let info = &self.tasks[idx];
            let spec = TaskSpec {
                id: info.id.clone(),
                arrival: now,
                workload: info.spec.workload,
                mem_gb: info.spec.mem_gb,
                deadline: self.time.model_of_unix(info.submitted) + info.spec.deadline,
                weight: info.spec.weight,
                gpus: info.spec.gpus,
                alt_gpus: info.spec.gpus_alt.clone(),
                runtimes: info.spec.runtimes.clone(),
                app: self.apps.get(&info.spec.app).cloned().unwrap_or_else(|| {
                    log::warn!(
                        "task {}: DVFS profile {:?} is gone; using default",
                        info.id,
                        info.spec.app
                    );
                    self.apps
                        .get("default")
                        .expect("the default profile exists")
                        .clone()
                }),
            };
            let key = self.bind(idx);
            let (core_key, actions) = self.core.submit(now, spec);
            debug_assert_eq!(key, core_key);
            self.apply(actions, &mut round);
        }
        log::info!("restored {} waiting task(s)", waiting.len());
        Ok(round)
    }

    /// Does one effect, now that the round is stored.
    pub(super) fn carry_out(&mut self, effect: Effect) {
        match effect {
            Effect::Reply(reply) => reply(),
            Effect::Notice(notice) => {
                // The D-Bus side is gone only while the daemon exits.
                let _ = self.notices.send(notice);
            }
            Effect::Launch(key, runtime) => self.launch(key, runtime),
            Effect::EndGroups(pids) => exec::end_groups(&pids, self.cancel_grace()),
            Effect::SetClocks(gpu, clocks) => self.set_clocks(gpu, clocks),
            Effect::ResetClocks(gpu) => {
                for control in [LOCKED_CORE, LOCKED_MEMORY] {
                    self.reset_control(gpu, control);
                }
            }
        }
    }

    /// Starts a task's process, or its modelled run when it has no command.
    fn launch(&mut self, key: TaskKey, runtime: f64) {
        if !self.running.contains_key(&key) {
            return; // cancelled or stopped before it could start
        }
        let info = self.tasks[self.by_key[key as usize]].clone();
        let energy: Vec<Option<u64>> = info
            .devices
            .iter()
            .map(|&d| self.backend.energy_mj(d).ok().flatten())
            .collect();
        self.running.get_mut(&key).expect("checked").energy_at_start = energy;
        let pid = if info.spec.command.is_empty() {
            let at = self.time.model_now() + runtime;
            self.timers.push(Due {
                at,
                what: Wake::End(key),
            });
            simulated_pid(key)
        } else {
            let inbox = self.inbox.clone();
            let launch = Launch {
                task_id: info.id.clone(),
                argv: info.spec.command.clone(),
                env: info.spec.env.clone(),
                uid: info.owner_uid,
                visible_devices: info
                    .devices
                    .iter()
                    .map(|&d| self.uuids[d as usize].clone())
                    .collect(),
                log: match &self.log_dir {
                    Some(dir) => LogSink::File(dir.join(format!("{}.log", info.id))),
                    None => LogSink::Journal,
                },
            };
            match exec::spawn(launch, &self.rt, move |exit| {
                let _ = inbox.send(Request::Exited { key, exit });
            }) {
                Ok(pid) => {
                    self.running.get_mut(&key).expect("checked").pid = Some(pid);
                    // Stored right after this round, so that a restart after
                    // a crash can end the process instead of running it twice.
                    self.unsaved.push(Op::RecordProcess {
                        task: info.id.clone(),
                        pgid: pid,
                    });
                    log::info!(
                        "task {} started as process {pid} on device(s) {:?}",
                        info.id,
                        info.devices
                    );
                    pid
                }
                Err(e) => {
                    log::warn!("task {}: {e}", info.id);
                    self.deferred.push(Request::LaunchFailed {
                        key,
                        reason: e.to_string(),
                    });
                    return;
                }
            }
        };
        if let Some(mock) = &self.mock {
            let app = self.apps.get(&info.spec.app).cloned();
            for &d in &info.devices {
                let process = MockProcess {
                    pid,
                    used_bytes: (info.spec.mem_gb * 1e9) as u64,
                    app: app.clone().unwrap_or_else(|| {
                        self.apps.get("default").expect("default profile").clone()
                    }),
                    mig: None,
                };
                if let Err(e) = mock.start_process(d, process) {
                    log::warn!("mock GPU {d}: {e}");
                }
            }
        }
    }

    /// Locks a GPU's clocks at the normalised `clocks` (best effort).
    fn set_clocks(&self, gpu: u32, clocks: Clocks) {
        let model = self.devices[gpu as usize].model;
        let (core, mem) = model.clocks_mhz(clocks);
        if let Err(e) = self.backend.lock_core_clocks(
            gpu,
            ClockRange {
                min_mhz: core,
                max_mhz: core,
            },
        ) {
            log::warn!("cannot lock GPU {gpu}'s core clock at {core} MHz: {e}");
        }
        if clocks.mem != 1.0 {
            if let Err(e) = self.backend.lock_memory_clocks(
                gpu,
                ClockRange {
                    min_mhz: mem,
                    max_mhz: mem,
                },
            ) {
                log::warn!("cannot lock GPU {gpu}'s memory clock at {mem} MHz: {e}");
            }
        }
    }

    /// Restores one control (best effort: a failure is logged, never fatal).
    fn reset_control(&self, gpu: u32, control: &str) {
        let result = match control {
            LOCKED_CORE => self.backend.reset_core_clocks(gpu),
            LOCKED_MEMORY => self.backend.reset_memory_clocks(gpu),
            other => {
                log::warn!("GPU {gpu}: unknown control {other:?} in the state; left as it is");
                return;
            }
        };
        match result {
            Ok(()) => {}
            Err(gpu_agent_backend::BackendError::NotSupported { .. }) => {}
            Err(e) => log::warn!("cannot restore GPU {gpu}'s {control}: {e}"),
        }
    }
}
