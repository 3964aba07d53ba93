//! Adopted tasks: work the agent did not place (a Slurm job), taken in with
//! `Adopt` and ended with `Release`.
//!
//! An adopted task occupies its devices through the one mechanism the core
//! has for keeping work off a device: `Input::Offline` without interrupt
//! (nothing of the agent's runs there: `Adopt` refuses a device that runs
//! a task with `Busy`), and `Input::Online` on `Release` when the device's
//! health is `ok`. The core never learns of the job itself, so none of its
//! invariants (every task it holds is queued, placed or running by its own
//! decision) has an exception. Its clocks go through the same record-then-
//! lock path as a task's (`lifecycle::lock_clocks`), so `Release`, a stop and
//! the restore after a crash put them back.
//!
//! A stop keeps adopted tasks (their clocks are reset with every control,
//! their energy so far stored with them). After a stop or a crash, an
//! adopted task whose deadline has not passed is kept adopted and its clocks
//! are locked again (its job most likely still runs, and the scheduler's
//! epilog will call `Release`; the Slurm check at start, `slurm.rs`, ends it
//! if its job ended meanwhile); one whose deadline has passed is released
//! then (its job cannot still run inside its time limit).
//!
//! ARCHITECTURE.md, invariant 21.

use gpu_agent_core::apps::{power_model, DEFAULT_APP};
use gpu_agent_core::host::Partition;
use gpu_agent_core::Input;
use gpu_agent_dbus::{
    AdoptSpec, AgentError, ReleaseEnd, SubmitSpec, TaskClocks, TaskInfo, TaskStatus,
};
use gpu_agent_dvfs::{Options, Profile, Search};
use gpu_agent_plugin_api::Clocks;

use super::lifecycle::{clocks_record, lock_clocks};
use super::table::Holding;
use super::{Engine, Notice, Round};
use crate::policy_params;
use crate::states::Health;
use crate::store::Op;

/// A Slurm job's adoption as `/metrics` shows it (docs/metrics.md, "Slurm
/// jobs"): one that runs, or one that ended less than [`RECENT_JOB_S`] ago.
#[derive(Debug, Clone, PartialEq)]
pub struct JobEnergy {
    /// The Slurm job id (its adoption's external id is `slurm:ID`).
    pub job: u64,
    /// The agent's task id.
    pub task: String,
    /// Whether it still runs.
    pub running: bool,
    /// Its energy in J: all of it once it ended; while it runs, what was
    /// stored before a stop, to which [`JobEnergy::energy_j`] adds what the
    /// meters counted since.
    pub energy_j: Option<f64>,
    /// While it runs: what its devices' GPU counters read when it got them
    /// (empty once it ended).
    pub meters: Vec<Meter>,
    /// When it ended (unix s); `None` while it runs.
    pub ended: Option<f64>,
}

/// One device of a running adopted job: its GPU's energy counter when the
/// job got it, and the share of the counter's increase it is charged.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Meter {
    /// The physical GPU whose counter it reads.
    pub gpu: u32,
    /// That counter when the job got the device (mJ); `None` if unread.
    pub at_start_mj: Option<u64>,
    /// Compute slices / 7 on a MIG instance, 1 on a whole GPU.
    pub share: f64,
}

impl JobEnergy {
    /// Its energy until now in J, reading each running meter's GPU counter
    /// (mJ) with `counter`; unknown when one of them is.
    pub fn energy_j(&self, counter: impl Fn(u32) -> Option<u64>) -> Option<f64> {
        let mut since_mj = 0.0;
        for m in &self.meters {
            since_mj += counter(m.gpu)?.saturating_sub(m.at_start_mj?) as f64 * m.share;
        }
        if self.meters.is_empty() {
            self.energy_j
        } else {
            Some(self.energy_j.unwrap_or(0.0) + since_mj / 1000.0)
        }
    }
}

/// How long an ended job stays in `/metrics` (s): several scrape intervals,
/// so that a scrape sees its final energy.
pub const RECENT_JOB_S: f64 = 600.0;
/// The most ended jobs `/metrics` keeps (the oldest go first).
const RECENT_JOBS: usize = 1024;

impl Engine {
    /// The Slurm jobs `/metrics` shows: the adopted ones, then those that
    /// ended in the last [`RECENT_JOB_S`].
    pub(super) fn job_energies(&mut self) -> Vec<JobEnergy> {
        let now = self.time.unix_now();
        while self
            .recent_jobs
            .front()
            .is_some_and(|j| j.ended.is_some_and(|t| now - t > RECENT_JOB_S))
        {
            self.recent_jobs.pop_front();
        }
        let mut jobs: Vec<JobEnergy> = self
            .tasks
            .adoptions()
            .filter_map(|(info, run)| {
                Some(JobEnergy {
                    job: super::slurm::job_of(&info.spec.external_id)?,
                    task: info.id.clone(),
                    running: true,
                    energy_j: info.energy_j,
                    meters: info
                        .devices
                        .iter()
                        .zip(&run.energy_at_start)
                        .map(|(&d, &at_start_mj)| Meter {
                            gpu: self.target(d).map_or(d, |t| t.gpu),
                            at_start_mj,
                            share: self.energy_share(d),
                        })
                        .collect(),
                    ended: None,
                })
            })
            .collect();
        jobs.sort_by_key(|j| j.job);
        jobs.extend(self.recent_jobs.iter().cloned());
        jobs
    }

    /// `Adopt`: checks `spec` against this host, stores the task as `id`,
    /// occupies its devices and locks their clocks. A retried `Adopt` of the
    /// same external id on the same devices answers the first id.
    pub(super) fn adopt(
        &mut self,
        id: String,
        spec: AdoptSpec,
        round: &mut Round,
    ) -> Result<String, AgentError> {
        if let Some(info) = self.adopted_by_external_id(&spec.external_id) {
            return if info.devices == spec.devices {
                Ok(info.id.clone())
            } else {
                Err(AgentError::Busy(format!(
                    "{} is already adopted as task {} on GPUs {:?}",
                    spec.external_id, info.id, info.devices
                )))
            };
        }
        let now = self.time.unix_now();
        if spec.deadline <= now {
            return Err(AgentError::InvalidArgument(format!(
                "key \"deadline\": {} is {:.0} s in the past; an adopted job's deadline is the end of its time limit, ahead of now",
                spec.deadline,
                now - spec.deadline
            )));
        }
        for &d in &spec.devices {
            self.check_free(d)?;
        }
        if spec.app != DEFAULT_APP && self.apps.get(&spec.app).is_none() {
            return Err(AgentError::InvalidArgument(format!(
                "key \"app\": unknown DVFS profile {:?}; known: {}",
                spec.app,
                self.apps.names().join(", ")
            )));
        }
        let window = spec.deadline - now;
        let mut task = SubmitSpec::new(window.max(1.0), 0.0, window.max(0.0), 1.0);
        task.gpus = spec.devices.len() as u32;
        task.app = spec.app.clone();
        task.name = spec.external_id.clone();
        task.external_id = spec.external_id.clone();
        let info = TaskInfo {
            id,
            state: TaskStatus::Running,
            owner_uid: spec.owner_uid,
            devices: spec.devices.clone(),
            submitted: now,
            started: Some(now),
            finished: None,
            exit_code: None,
            energy_j: None,
            reason: None,
            clocks: None,
            waiting: None,
            spec: task,
        };
        let id = info.id.clone();
        let instances = if spec.devices.iter().all(|&d| self.is_whole(d)) {
            ""
        } else {
            "; MIG instances: their GPU's clocks are left alone"
        };
        log::info!(
            "task {id}: adopted {} of uid {} on GPUs {:?} (app {}, {:.0} s to its deadline{instances})",
            spec.external_id,
            spec.owner_uid,
            spec.devices,
            spec.app,
            window
        );
        round.notice(Notice::TaskChanged {
            id: id.clone(),
            state: TaskStatus::Running,
        });
        self.occupy(info, round);
        Ok(id)
    }

    /// `Release`: ends adopted task `id`, restoring its clocks, in the state
    /// `end` maps to.
    pub(super) fn release(
        &mut self,
        id: &str,
        end: ReleaseEnd,
        round: &mut Round,
    ) -> Result<(), AgentError> {
        if self.tasks.adoption(id).is_none() {
            return Err(match self.lookup(id) {
                Ok(_) => AgentError::NoSuchTask(format!(
                    "task {id} is not an adopted task that runs (Cancel ends the agent's own tasks)"
                )),
                Err(e) => e,
            });
        }
        let (state, reason) = end.outcome();
        self.end_adopted(id, state, reason.map(String::from), round);
        Ok(())
    }

    /// Keeps every adopted task as the daemon stops: its clocks reset (the
    /// next start locks them again), its energy so far stored with it.
    pub(super) fn keep_adopted_at_stop(&mut self, round: &mut Round) {
        let mut ids: Vec<String> = self.tasks.adopted().map(|t| t.id.clone()).collect();
        ids.sort();
        for id in ids {
            let (Some(holding), Some(info)) = (
                self.tasks.take_adopted(&id),
                self.tasks.find(&id).map(|(t, _)| t.clone()),
            ) else {
                continue;
            };
            let energy_mj = self.free_devices(&info.devices, &holding, round);
            // The energy from here on is counted from these readings, the
            // time until the next start included.
            let counters = self.counters(&info.devices);
            round
                .ops
                .push(Op::SetMeta(meters_key(&id), meters_text(&counters)));
            let kept = TaskInfo {
                energy_j: sum_energy(info.energy_j, energy_mj),
                ..info
            };
            log::info!(
                "task {id} ({}) stays adopted across the stop; its clocks are reset until the next start",
                kept.spec.external_id
            );
            round.ops.push(Op::put(kept.clone()));
            if let Some(t) = self.tasks.find_mut(&id) {
                *t = kept;
            }
        }
    }

    /// Takes an adopted task stored by a previous run back: kept while its
    /// deadline is ahead (clocks locked again), or a Slurm job's until Slurm
    /// is asked (at start, `slurm.rs`); released otherwise.
    pub(super) fn restore_adopted(&mut self, info: TaskInfo, round: &mut Round) {
        let id = info.id.clone();
        if super::slurm::deadline(&info) > self.time.unix_now() {
            log::warn!(
                "task {id} ({}) stays adopted after the restart: its deadline is ahead; its clocks are locked again",
                info.spec.external_id
            );
            self.occupy(info, round);
        } else if super::slurm::job_of(&info.spec.external_id).is_some() {
            log::warn!(
                "task {id} ({}) stays adopted after the restart until Slurm says whether the job still runs (its deadline passed)",
                info.spec.external_id
            );
            self.occupy(info, round);
        } else {
            log::warn!(
                "task {id} ({}) is released: its deadline passed while gpu-agentd was down",
                info.spec.external_id
            );
            let energy_at_start = self.stored_meters(&info).unwrap_or_default();
            self.tasks.adopt(
                info,
                Holding {
                    energy_at_start,
                    clocks_set: false,
                },
            );
            let reason = "released on restart: its deadline passed while gpu-agentd was down";
            self.end_adopted(&id, TaskStatus::Succeeded, Some(reason.into()), round);
        }
    }

    /// An adopted task's energy so far while it runs, as `GetTask` and
    /// `ListTasks` show it: what a stop stored with it plus its devices'
    /// use since it was adopted (or restored); `None` for any other task.
    pub(super) fn adopted_energy_so_far(&self, info: &TaskInfo) -> Option<f64> {
        let run = self.tasks.adoption(&info.id)?;
        let since_mj = self.energy_since(&info.devices, &run.energy_at_start);
        sum_energy(info.energy_j, since_mj)
    }

    /// Each of `devices`' energy counter now (mJ).
    fn counters(&self, devices: &[u32]) -> Vec<Option<u64>> {
        devices.iter().map(|&d| self.energy_counter(d)).collect()
    }

    /// The counter readings a previous run stored for adopted task `info`
    /// (at its adoption or at the last stop), while every counter reads at
    /// least as much now; `None` (logged) once one went back (the driver
    /// reloaded, the host rebooted: the energy while gpu-agentd was down is
    /// lost), or where none were stored.
    fn stored_meters(&self, info: &TaskInfo) -> Option<Vec<Option<u64>>> {
        let text = match self.store.meta(&meters_key(&info.id)) {
            Ok(text) => text?,
            Err(e) => {
                log::warn!("task {}: cannot read its energy meters: {e}", info.id);
                return None;
            }
        };
        let stored: Vec<Option<u64>> = text.split(',').map(|v| v.parse().ok()).collect();
        let now = self.counters(&info.devices);
        if stored.len() != now.len() {
            return None;
        }
        for ((&d, before), now) in info.devices.iter().zip(&stored).zip(&now) {
            if let (Some(before), Some(now)) = (before, now) {
                if now < before {
                    log::warn!(
                        "task {} ({}): GPU {d}'s energy counter went back ({before} to {now} mJ: the driver reloaded?); the energy while gpu-agentd was down is not counted",
                        info.id,
                        info.spec.external_id
                    );
                    return None;
                }
            }
        }
        Some(stored)
    }

    /// Whether device `gpu` is adopted.
    pub(super) fn is_adopted(&self, gpu: u32) -> bool {
        self.adopted_devices().any(|d| d == gpu)
    }

    /// The adopted task on physical GPU `gpu` (the GPU itself or one of
    /// its MIG instances), if one is.
    pub(super) fn adopted_on_gpu(&self, gpu: u32) -> Option<&TaskInfo> {
        self.tasks
            .adopted()
            .find(|t| t.devices.iter().any(|&d| self.gpu_of(d) == gpu))
    }

    /// The physical GPUs of `devices` (the GPU of each MIG instance).
    fn gpus_of(&self, devices: &[u32]) -> Vec<u32> {
        let mut gpus: Vec<u32> = devices.iter().map(|&d| self.gpu_of(d)).collect();
        gpus.sort_unstable();
        gpus.dedup();
        gpus
    }

    /// The physical GPU of device `d` (itself when whole).
    fn gpu_of(&self, d: u32) -> u32 {
        self.target(d).map_or(d, |target| target.gpu)
    }

    /// The devices of every adopted task.
    pub(super) fn adopted_devices(&self) -> impl Iterator<Item = u32> + '_ {
        self.tasks.adopted().flat_map(|t| t.devices.iter().copied())
    }

    /// Refuses a device that is not this host's, a GPU split into MIG
    /// instances (a job runs on an instance), one whose GPU's layout is
    /// changing (the change would take it from under the job), or one that
    /// runs something.
    fn check_free(&self, gpu: u32) -> Result<(), AgentError> {
        let Some(health) = self.health.get(gpu as usize) else {
            return Err(AgentError::NoSuchDevice(format!(
                "key \"devices\": no GPU {gpu}; this host has {}",
                self.health.len()
            )));
        };
        if self
            .devices
            .get(gpu as usize)
            .is_some_and(|d| matches!(d.partition, Partition::Split { .. }))
        {
            return Err(AgentError::InvalidArgument(format!(
                "key \"devices\": GPU {gpu} is split into MIG instances (devices {:?}); adopt the instances the job runs on",
                self.core.devices_of_gpu(gpu)
            )));
        }
        let parent = self.gpu_of(gpu);
        if let Some(change) = self.core.mig_change(parent) {
            return Err(AgentError::Busy(format!(
                "GPU {parent}'s MIG layout is changing ({}) to {}: device {gpu} can be adopted once it is stable",
                change.phase,
                super::mig_apply::describe_as(&change.target, change.mig_on)
            )));
        }
        if let Some((_, task, _)) = self
            .tasks
            .running()
            .find(|(_, t, _)| t.devices.contains(&gpu))
        {
            return Err(AgentError::Busy(format!(
                "GPU {gpu} runs task {}, which the agent does not stop for an adopted job",
                task.id
            )));
        }
        if let Some(task) = self.tasks.adopted().find(|t| t.devices.contains(&gpu)) {
            return Err(AgentError::Busy(format!(
                "GPU {gpu} is adopted by task {}",
                task.id
            )));
        }
        if !health.is_ok() {
            return Err(AgentError::Busy(format!("GPU {gpu} is offline ({health})")));
        }
        Ok(())
    }

    fn adopted_by_external_id(&self, external_id: &str) -> Option<&TaskInfo> {
        self.tasks
            .adopted()
            .find(|t| t.spec.external_id == external_id)
    }

    /// Occupies the devices of running adopted task `info`: stores it with
    /// its clocks, takes its devices off the policy's hands and locks them.
    fn occupy(&mut self, mut info: TaskInfo, round: &mut Round) {
        let id = info.id.clone();
        let (locked, shown) = self.adopted_clocks(&info).unzip();
        // Default clocks are not locked: nothing to restore.
        let locked = locked.filter(|&c| c != Clocks::DEFAULT);
        let clocks_set = locked.is_some();
        info.clocks = shown;
        // Restored: counted from the readings stored at its adoption or at
        // the last stop, so that the time gpu-agentd was down is counted.
        let energy_at_start = self.stored_meters(&info).unwrap_or_else(|| {
            let counters = self.counters(&info.devices);
            round
                .ops
                .push(Op::SetMeta(meters_key(&id), meters_text(&counters)));
            counters
        });
        round.ops.push(Op::put(info.clone()));
        // Before the policy hears of the devices: no layout change of their
        // GPUs from here on.
        for gpu in self.gpus_of(&info.devices) {
            self.core.hold_layout(gpu, true);
        }
        let now = self.time.model_now();
        for &d in &info.devices {
            // Its clocks replace an idle lock (`idle_clocks = "min"`).
            self.unlock_idle(d, round);
            if let Some(c) = locked {
                lock_clocks(d, c, &id, None, round);
            }
            round.notice(Notice::CurrentTask {
                device: d,
                task: id.clone(),
            });
            if self.health.get(d as usize).is_some_and(Health::is_ok) && !self.stopping {
                let offline = Input::Offline {
                    device: d,
                    interrupt: false,
                };
                let actions = self.decide(|core| core.handle(now, offline));
                self.apply(actions, round);
            }
        }
        self.tasks.adopt(
            info,
            Holding {
                energy_at_start,
                clocks_set,
            },
        );
    }

    /// Ends adopted task `id` in `state` (`reason` when the agent, not
    /// `Release`, ended it): energy, clocks, and its devices back.
    pub(super) fn end_adopted(
        &mut self,
        id: &str,
        state: TaskStatus,
        reason: Option<String>,
        round: &mut Round,
    ) {
        let Some(holding) = self.tasks.take_adopted(id) else {
            return;
        };
        let Some(info) = self.tasks.find(id).map(|(t, _)| t.clone()) else {
            return;
        };
        let energy_mj = self.free_devices(&info.devices, &holding, round);
        let finished = TaskInfo {
            state,
            finished: Some(self.time.unix_now()),
            energy_j: sum_energy(info.energy_j, energy_mj),
            reason,
            ..info
        };
        log::info!(
            "task {id} ({}) released as {state}; GPU energy {}",
            finished.spec.external_id,
            finished
                .energy_j
                .map_or("unknown".into(), |j| format!("{j:.1} J"))
        );
        round.notice(Notice::TaskChanged {
            id: id.to_string(),
            state,
        });
        round.ops.push(Op::ClearMeta(meters_key(id)));
        round.ops.push(Op::put(finished.clone()));
        if let Some(job) = super::slurm::job_of(&finished.spec.external_id) {
            if self.recent_jobs.len() == RECENT_JOBS {
                self.recent_jobs.pop_front();
            }
            self.recent_jobs.push_back(JobEnergy {
                job,
                task: id.to_string(),
                running: false,
                energy_j: finished.energy_j,
                meters: Vec::new(),
                ended: finished.finished,
            });
        }
        let devices = finished.devices.clone();
        if let Some(t) = self.tasks.find_mut(id) {
            *t = finished;
        }
        // Another adopted job may hold an instance of the same GPU.
        for gpu in self.gpus_of(&devices) {
            let held = self.adopted_on_gpu(gpu).is_some();
            self.core.hold_layout(gpu, held);
        }
        if self.stopping {
            return;
        }
        let now = self.time.model_now();
        for d in devices {
            if self.health.get(d as usize).is_some_and(Health::is_ok) {
                let actions = self.decide(|core| core.handle(now, Input::Online { device: d }));
                self.apply(actions, round);
            }
        }
    }

    /// The clocks of adopted task `info` on its first device and what the
    /// DVFS model makes of them: Algorithm 1 (`Options::choose`) on its
    /// app's profile with the time to its deadline as the window, when the
    /// active policy is a DVFS one and the task names a profile; `None`
    /// (default clocks) otherwise, and on a MIG instance, whose clocks are
    /// its GPU's, shared with its siblings (`mig_devices.rs`).
    fn adopted_clocks(&self, info: &TaskInfo) -> Option<(Clocks, TaskClocks)> {
        if info.spec.app == DEFAULT_APP || !info.devices.iter().all(|&d| self.is_whole(d)) {
            return None;
        }
        let options = self.dvfs_options()?;
        let app = self.apps.get(&info.spec.app)?;
        let device = self.devices.get(*info.devices.first()? as usize)?;
        let model = device.model;
        let r = model.clock_range();
        let options = Options {
            fc_range: (r.core_min, r.core_max),
            fm_range: (r.mem_min.max(0.5), r.mem_max.min(1.2)),
            ..options
        };
        let power = power_model(app, model);
        // The job's length at default clocks is its profile's measured run.
        let profile = Profile::of(app, power);
        let deadline = info.started.unwrap_or(info.submitted) + info.spec.deadline.unwrap_or(0.0);
        let window = self.time.model_of_unix(deadline) - self.time.model_now();
        let choice = options.choose(&profile, Some(window.max(0.0)));
        let clocks = Clocks {
            core: choice.point.setting.fc,
            mem: choice.point.setting.fm,
        };
        Some((
            clocks,
            TaskClocks {
                class: Some(choice.class.name().to_string()),
                ..clocks_record(model, app, clocks, choice.point.t, app.d + app.t0)
            },
        ))
    }

    /// Algorithm 1's options of the active policy, when it is a DVFS one:
    /// one that declares `gpu_agent_dvfs`'s `search` and `compat`
    /// parameters (edl), with their values in use.
    fn dvfs_options(&self) -> Option<Options> {
        let name = self.core.policy_name();
        let plugin = self.registry.plugins.iter().find(|p| p.name() == name)?;
        let table = policy_params::table(&self.config, self.source.path().as_deref(), plugin)
            .unwrap_or_default();
        let given = policy_params::effective(table, &self.policy_params);
        let value = |key: &str| {
            let info = plugin.parameters().iter().find(|p| p.key.as_str() == key)?;
            Some(
                given
                    .iter()
                    .rev()
                    .find(|(k, _)| k == key)
                    .map_or(info.default.to_string(), |(_, v)| v.clone()),
            )
        };
        Some(Options {
            search: Search::parse(&value("search")?)?,
            compat: value("compat")? == "true",
            ..Options::default()
        })
    }
}

/// The meta key of adopted task `id`'s energy counter readings (mJ), from
/// which its energy is counted: those at its adoption or at the last stop,
/// until its release.
fn meters_key(id: &str) -> String {
    format!("adopted_meters:{id}")
}

/// Counter readings as stored: comma-separated mJ, `-` for one unread.
fn meters_text(counters: &[Option<u64>]) -> String {
    counters
        .iter()
        .map(|c| c.map_or("-".into(), |mj| mj.to_string()))
        .collect::<Vec<_>>()
        .join(",")
}

/// The energy of an adopted task: what it had before a stop (J) and what
/// its devices used since (mJ); unknown when the latter is.
fn sum_energy(before_j: Option<f64>, since_mj: Option<u64>) -> Option<f64> {
    since_mj.map(|mj| before_j.unwrap_or(0.0) + mj as f64 / 1000.0)
}
