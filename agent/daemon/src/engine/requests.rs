//! Answering requests.

use super::executor::Cancelled;
use super::{Accepted, Caller, Engine, Request, Round};
use gpu_agent_core::metrics::{Metrics, Rejection};
use gpu_agent_core::scheduler::Admitted;
use gpu_agent_core::task::OnHost;

use gpu_agent_dbus::{
    check_parameters, AgentError, ParamValue, PolicyDescription, SubmitSpec, TaskInfo, TaskStatus,
};

use crate::policy_params;

/// ` with k=v, ...` for a log line (nothing when none were given).
fn describe_given(given: &[(String, String)]) -> String {
    if given.is_empty() {
        return String::new();
    }
    let pairs: Vec<String> = given.iter().map(|(k, v)| format!("{k}={v}")).collect();
    format!(" with {}", pairs.join(", "))
}

/// Expands a command's `output` and `error` patterns for task `id` of
/// `owner` into the paths they name (from the working directory, else the
/// owner's home directory).
fn resolve_output(spec: &mut SubmitSpec, owner: u32, id: &str) {
    if spec.command.is_empty() || spec.output.is_empty() {
        return;
    }
    let user = nix::unistd::User::from_uid(nix::unistd::Uid::from_raw(owner))
        .ok()
        .flatten();
    let (name, home) = match user {
        Some(u) => (u.name, u.dir.to_string_lossy().into_owned()),
        None => (owner.to_string(), "/".to_string()),
    };
    let from = if spec.workdir.is_empty() {
        home
    } else {
        spec.workdir.clone()
    };
    let task = spec.display_name().to_string();
    spec.output = SubmitSpec::expand(&spec.output, &from, id, &name, &task);
    if !spec.error.is_empty() {
        spec.error = SubmitSpec::expand(&spec.error, &from, id, &name, &task);
    }
}

/// The refusal of a request that would change state after a stop began
/// (a stop is final: ARCHITECTURE.md, invariant 14).
pub(super) fn stopping(what: &str) -> AgentError {
    AgentError::ShuttingDown(format!("gpu-agentd is stopping; {what}"))
}

impl Engine {
    /// Handles one request as part of `round`. Once a stop has begun, every
    /// client request that would change state is refused: the stop has
    /// ended the runs and the core no longer follows them.
    pub(super) fn handle(&mut self, request: Request, round: &mut Round) {
        if !self.stopping {
            return self.serve_stored(request, round);
        }
        match request {
            Request::Submit { reply, .. } => {
                round.reply(reply, Err(stopping("submit again once it is back")));
            }
            Request::Cancel { id, reply, .. } => {
                let what = format!("task {id} is left as the stop leaves it");
                round.reply(reply, Err(stopping(&what)));
            }
            Request::SetPolicy { reply, .. } => {
                round.reply(reply, Err(stopping("the policy is left as it is")));
            }
            Request::Reload { reply } => {
                round.reply(reply, Err(stopping("nothing was reloaded")));
            }
            Request::SetDeviceOnline { reply, .. } => {
                round.reply(reply, Err(stopping("the device is left as it is")));
            }
            Request::Adopt { reply, .. } => {
                round.reply(reply, Err(stopping("nothing was adopted")));
            }
            Request::Release { reply, .. } => {
                round.reply(
                    reply,
                    Err(stopping(
                        "the task stays adopted; release it once gpu-agentd is back",
                    )),
                );
            }
            Request::ApplyMig { reply, .. } => {
                round.reply(reply, Err(stopping("no MIG layout was changed")));
            }
            Request::CancelMig { reply, .. } => {
                round.reply(reply, Err(stopping("the change goes on at the next start")));
            }
            // Stored as applying: the next start makes it.
            Request::MakeMigLayout { gpu } => {
                log::info!("GPU {gpu}: its MIG layout change waits for the next start");
            }
            // Answered after the first stop's effects.
            Request::Stop { reply } => round.answer(reply, ()),
            // Reads, and the ends of processes kept on a stop.
            request => self.serve(request, round),
        }
    }

    /// Handles one request as part of `round`, stopping or not (a request
    /// that changes state once its intent is stored: `intent.rs`).
    pub(super) fn serve(&mut self, request: Request, round: &mut Round) {
        match request {
            Request::Submit { owner, spec, reply } => {
                if self.hang_on.as_ref().is_some_and(|name| *name == spec.name) {
                    log::warn!("test hook: the engine hangs on task {:?}", spec.name);
                    loop {
                        std::thread::park();
                    }
                }
                if self
                    .panic_on
                    .as_ref()
                    .is_some_and(|name| *name == spec.name)
                {
                    panic!("test hook: the engine panics on task {:?}", spec.name);
                }
                if let Some(answer) = self.resubmission(owner, &spec, round) {
                    return round.reply(reply, answer);
                }
                match self.accept(owner, *spec) {
                    Ok((info, task)) => {
                        let token = &info.spec.client_token;
                        self.tokens.remember(
                            info.owner_uid,
                            token,
                            &info.id,
                            info.submitted,
                            info.submitted,
                        );
                        round.accepted.push(Accepted { info, task, reply })
                    }
                    Err(e) => round.reply(reply, Err(e)),
                }
            }
            Request::Cancel { id, caller, reply } => {
                let result = self.cancel(&id, caller, round);
                round.reply(reply, result);
            }
            Request::GetTask { id, reply } => {
                round.reply(reply, self.lookup(&id));
            }
            Request::ListTasks {
                state,
                from,
                limit,
                reply,
            } => {
                let page = self.tasks_page(state, from, limit).map_err(|e| {
                    log::error!("cannot list tasks: {e}");
                    AgentError::Failed(format!("cannot read the stored tasks: {e}"))
                });
                round.reply(reply, page);
            }
            Request::ListPolicies { reply } => {
                let policies = self
                    .registry
                    .plugins
                    .iter()
                    .map(|p| (p.name().to_string(), p.description().to_string()))
                    .collect();
                round.reply(reply, Ok(policies));
            }
            Request::SetPolicy {
                name,
                params,
                reply,
            } => {
                let result = self.set_policy(&name, &params, round);
                round.reply(reply, result);
            }
            Request::DescribePolicy { name, reply } => {
                round.reply(reply, self.describe_policy(&name));
            }
            Request::Metrics { reply } => round.reply(reply, Ok(self.metrics())),
            Request::Reload { reply } => {
                let result = self.reload(round);
                // In the log too: `systemctl reload` says only that it
                // failed, and journald may not put the caller's (busctl's)
                // message under the unit, as it exits at once.
                if let Err(e) = &result {
                    log::error!("{}", zbus::DBusError::description(e).unwrap_or_default());
                }
                round.reply(reply, result);
            }
            Request::Exited { key, exit } => {
                let result = if exit.success() {
                    Ok(())
                } else {
                    Err(format!("exited with status {}", exit.exit_code()))
                };
                if self.tasks.started(key).is_some() {
                    if let Some(task) = self.tasks.get_mut(key) {
                        task.exit_code = Some(exit.exit_code());
                    }
                    self.finish(key, result, round);
                }
            }
            Request::DeviceEvent { event } => self.device_event(event, round),
            Request::SetDeviceOnline { gpu, online, reply } => {
                let result = self.set_device_online(gpu, online, round);
                round.reply(reply, result);
            }
            Request::Adopt { id, spec, reply } => {
                let id = id.unwrap_or_else(|| self.store.next_id());
                if let Some((id, spec, reply)) = self.park_adopt(id, spec, reply) {
                    let result = self.adopt(id, spec, round);
                    round.reply(reply, result);
                }
            }
            Request::Release { id, end, reply } => {
                let result = self.release(&id, end, round);
                round.reply(reply, result);
            }
            Request::ApplyMig {
                targets,
                options,
                reply,
            } => {
                let result = self.apply_mig(targets, options, round);
                round.reply(reply, result);
            }
            Request::CancelMig { gpu, reply } => {
                let result = self.cancel_mig(gpu, round);
                round.reply(reply, result);
            }
            Request::MakeMigLayout { gpu } => self.make_mig_layout(gpu, round),
            Request::MigMade { gpu, made } => self.mig_made(gpu, made, round),
            Request::ClocksLocked { key } => self.clocks_locked(key, round),
            Request::LaunchFailed { key, reason } => {
                if self.tasks.started(key).is_some() {
                    self.finish(key, Err(reason), round);
                }
            }
            Request::SlurmTick => self.slurm_tick(round),
            Request::SlurmChecked { answer } => self.slurm_checked(answer, round),
            Request::Heartbeat { reply } => round.answer(reply, ()),
            Request::Census { reply } => {
                let _ = reply.send(self.census());
            }
            Request::Stop { reply } => {
                self.stop(round);
                round.answer(reply, ());
            }
        }
    }

    /// Task `id` as clients see it: held (a queued task the policy placed
    /// shows `assigned`), or as stored once it has ended.
    pub(super) fn lookup(&self, id: &str) -> Result<TaskInfo, AgentError> {
        if let Some((task, key)) = self.tasks.find(id) {
            return Ok(self.view(task, key));
        }
        self.store
            .task(id)
            .map_err(|e| {
                log::error!("cannot read task {id}: {e}");
                AgentError::Failed(format!("cannot read task {id}: {e}"))
            })?
            .ok_or_else(|| AgentError::NoSuchTask(format!("no task {id:?}")))
    }

    /// Up to `limit` tasks in `state` (any, for `None`) after position
    /// `from` (0: from the first), in submission order, as clients see
    /// them; and the position to go on from, 0 once no task is left.
    /// Positions are the store's sequence numbers, so they stay valid while
    /// tasks come and end.
    fn tasks_page(
        &self,
        state: Option<TaskStatus>,
        from: usize,
        limit: usize,
    ) -> Result<(Vec<TaskInfo>, usize), crate::store::StoreError> {
        // A placed queued task is stored as queued and shown as assigned.
        let stored = state.map(|s| match s {
            TaskStatus::Assigned => TaskStatus::Queued,
            s => s,
        });
        let mut picked = Vec::new();
        let mut after = from as u64;
        loop {
            let want = limit - picked.len();
            let (rows, more) = self.store.page(after, stored.map(|s| s.as_str()), want)?;
            for (seq, stored) in rows {
                after = seq;
                let task = match self.tasks.find(&stored.id) {
                    Some((task, key)) => self.view(task, key),
                    None => stored,
                };
                if state.is_none_or(|s| s == task.state) {
                    picked.push(task);
                }
            }
            if !more {
                return Ok((picked, 0));
            }
            if picked.len() == limit {
                return Ok((picked, usize::try_from(after).unwrap_or(usize::MAX)));
            }
        }
    }

    /// The answer to a submission whose `client_token` its owner already
    /// used within the retention window: the first task's id for the same
    /// spec (a retry), a refusal for another spec.
    fn resubmission(
        &self,
        owner: u32,
        spec: &SubmitSpec,
        round: &Round,
    ) -> Option<Result<String, AgentError>> {
        let id = self
            .tokens
            .lookup(owner, &spec.client_token, self.time.unix_now())?;
        let first = round
            .accepted
            .iter()
            .map(|a| &a.info)
            .find(|t| t.id == id)
            .cloned()
            .or_else(|| self.lookup(id).ok())?;
        let mut resolved = spec.clone();
        resolve_output(&mut resolved, owner, id);
        Some(if first.spec == resolved {
            Ok(id.to_string())
        } else {
            Err(AgentError::InvalidArgument(format!(
                "key \"client_token\": already used for task {id} with another spec; \
                 a new task needs a new token"
            )))
        })
    }

    /// Checks a submission against this host; the task, and the core's
    /// admission of it (the core's one schedulability check, whose refusal
    /// is answered `Unschedulable`). A command's output and error patterns
    /// are stored expanded.
    fn accept(
        &mut self,
        owner: u32,
        mut spec: SubmitSpec,
    ) -> Result<(TaskInfo, Admitted), AgentError> {
        let invalid = AgentError::InvalidArgument;
        let app = self.apps.get(&spec.app).ok_or_else(|| {
            invalid(format!(
                "key \"app\": unknown DVFS profile {:?}; known: {}",
                spec.app,
                self.apps.names().join(", ")
            ))
        })?;
        let daemon_uid = nix::unistd::getuid().as_raw();
        if !spec.command.is_empty() && daemon_uid != 0 && owner != daemon_uid {
            return Err(AgentError::AccessDenied(format!(
                "this gpu-agentd runs as uid {daemon_uid} and cannot run commands as uid {owner}"
            )));
        }
        let now = self.time.model_now();
        let core_spec = spec.to_task(String::new(), now, now, app.clone());
        core_spec
            .check_on(&OnHost::new(&self.devices))
            .map_err(|(key, problem)| invalid(format!("key {key:?}: {problem}")))?;
        let admitted = self
            .core
            .admit(core_spec)
            .map_err(AgentError::Unschedulable)?;
        let id = self.store.next_id();
        let admitted = admitted.named(&id);
        resolve_output(&mut spec, owner, &id);
        Ok((
            TaskInfo {
                id,
                state: TaskStatus::Queued,
                owner_uid: owner,
                devices: Vec::new(),
                submitted: self.time.unix_now(),
                started: None,
                finished: None,
                exit_code: None,
                energy_j: None,
                reason: None,
                spec,
                clocks: None,
                waiting: None,
            },
            admitted,
        ))
    }

    fn cancel(&mut self, id: &str, caller: Caller, round: &mut Round) -> Result<(), AgentError> {
        let (task, key) = match self.tasks.find(id) {
            Some((task, key)) => (task.clone(), key),
            // Not held: it ended, or there is no such task.
            None => (self.lookup(id)?, None),
        };
        if !caller.admin && caller.uid != task.owner_uid {
            return Err(AgentError::AccessDenied(format!(
                "task {id} belongs to uid {}; only its owner or an admin may cancel it",
                task.owner_uid
            )));
        }
        if task.state.is_terminal() {
            return Err(AgentError::NotCancellable(format!(
                "task {id} already {}",
                task.state
            )));
        }
        let Some(key) = key else {
            // Every task restored or taken waiting is in the core.
            log::error!("task {id} is {} but not in the scheduler", task.state);
            return Err(AgentError::Failed(format!(
                "task {id} is {} but not in the scheduler; nothing was cancelled",
                task.state
            )));
        };
        if let Some(run) = self.tasks.started_mut(key) {
            run.cancelled = true;
            if self.cancel_run(key) == Cancelled::Ended {
                self.finish(key, Err("cancelled".into()), round);
            }
            return Ok(());
        }
        let actions = self.core.cancel(self.time.model_now(), key).map_err(|e| {
            log::error!("cannot cancel task {id}: {e}");
            AgentError::NotCancellable(format!("task {id}: {e}"))
        })?;
        self.end(key, TaskStatus::Cancelled, None, round);
        self.apply(actions, round);
        Ok(())
    }

    /// Makes `name` the active policy, built with `params` over its
    /// agent.toml table. A bad key, type or value changes nothing.
    fn set_policy(
        &mut self,
        name: &str,
        params: &[(String, ParamValue)],
        round: &mut Round,
    ) -> Result<(), AgentError> {
        let plugin = *self
            .registry
            .find(name)
            .map_err(|e| AgentError::UnknownPolicy(e.to_string()))?;
        let given = check_parameters(plugin.parameters(), params)
            .map_err(|e| AgentError::InvalidArgument(format!("policy {name}: {e}")))?;
        let table = policy_params::table(&self.config, self.source.path().as_deref(), &plugin)
            .map_err(|e| AgentError::Failed(e.to_string()))?;
        let params = policy_params::effective(table, &given);
        let policy = crate::policy_thread::start(plugin, params, self.config.policy_budget)
            .map_err(|e| {
                if given.is_empty() {
                    AgentError::UnknownPolicy(e.to_string())
                } else {
                    AgentError::InvalidArgument(e.to_string())
                }
            })?;
        let actions = self.core.set_policy(self.time.model_now(), policy);
        self.policy_params = given;
        round
            .ops
            .push(super::Op::SetMeta("policy".into(), name.into()));
        round.ops.push(super::Op::SetMeta(
            policy_params::META_KEY.into(),
            policy_params::encode(&self.policy_params),
        ));
        // An admin chose: a stored fault no longer holds any policy back.
        round.ops.push(super::Op::SetMeta(
            crate::policy_thread::Fault::META_KEY.into(),
            String::new(),
        ));
        round.notice(super::Notice::PolicyFault(None));
        round.notice(self.policy_notice());
        log::info!(
            "policy is now {name}{}",
            describe_given(&self.policy_params)
        );
        self.apply(actions, round);
        Ok(())
    }

    /// The parameters the active policy runs with, each typed for the bus.
    fn policy_values(&self) -> Vec<(String, ParamValue)> {
        let Some(plugin) = self.registry.get(self.core.policy_name()) else {
            return Vec::new();
        };
        let table = policy_params::table(&self.config, self.source.path().as_deref(), plugin)
            .unwrap_or_default();
        policy_params::in_use(
            plugin,
            &policy_params::effective(table, &self.policy_params),
        )
    }

    /// The notice of the active policy and its parameters.
    pub(super) fn policy_notice(&self) -> super::Notice {
        super::Notice::Policy {
            name: self.core.policy_name().into(),
            parameters: self.policy_values(),
        }
    }

    /// `DescribePolicy`'s answer for `name`.
    fn describe_policy(&self, name: &str) -> Result<PolicyDescription, AgentError> {
        let plugin = self
            .registry
            .find(name)
            .map_err(|e| AgentError::UnknownPolicy(e.to_string()))?;
        let active = self.core.policy_name() == name;
        let values = if active {
            self.policy_values()
        } else {
            Vec::new()
        };
        let parameters = plugin
            .parameters()
            .iter()
            .map(|info| {
                let value = values
                    .iter()
                    .find(|(k, _)| k == info.key.as_str())
                    .map(|(_, v)| v.clone());
                (*info, value)
            })
            .collect();
        Ok(PolicyDescription {
            name: plugin.name().to_string(),
            description: plugin.description().to_string(),
            active,
            parameters,
        })
    }

    /// Reads the settings again, checks them, and re-scans the plugin
    /// directory: newly installed policies become selectable, while the
    /// active policy keeps running and no task is touched. `plugin_dir`,
    /// `keep_tasks_on_stop` and `cancel_grace_s` take effect now; the changed
    /// keys that wait for the next start are returned. A file, host or
    /// profile with an error changes nothing (a reload touches no task:
    /// ARCHITECTURE.md, invariant 18).
    fn reload(&mut self, round: &mut Round) -> Result<Vec<String>, AgentError> {
        let refuse = |e: &dyn std::fmt::Display| {
            AgentError::Failed(format!("cannot reload: {e}; nothing changed"))
        };
        let (config, plugin_dir) = self.source.read().map_err(|e| refuse(&e))?;
        // Files named only for the next start are checked now, so that a
        // mistake shows here and not as a service that fails to start.
        if let Some(host) = &config.mock {
            gpu_agent_hostspec::host::load(host).map_err(|e| refuse(&e))?;
        }
        // The profiles, read again: new and changed ones apply to what is
        // submitted or adopted from now on.
        let apps = match &config.apps {
            Some(file) => gpu_agent_hostspec::apps::load(file).map_err(|e| refuse(&e))?,
            None => gpu_agent_core::apps::AppLibrary::default(),
        };
        let registry = self
            .source
            .plugins(&config, &plugin_dir)
            .map_err(|e| refuse(&e))?;
        let file = self.source.path();
        policy_params::check_tables(&config, file.as_deref(), &registry).map_err(|e| refuse(&e))?;
        // The active policy is rebuilt when its table changed.
        let name = self.core.policy_name().to_string();
        let rebuilt = match (self.registry.get(&name), registry.get(&name)) {
            (Some(old), Some(new)) => {
                let before =
                    policy_params::table(&self.config, file.as_deref(), old).unwrap_or_default();
                let after =
                    policy_params::table(&config, file.as_deref(), new).map_err(|e| refuse(&e))?;
                if before == after {
                    None
                } else {
                    let params = policy_params::effective(after, &self.policy_params);
                    Some(
                        crate::policy_thread::start(*new, params, config.policy_budget)
                            .map_err(|e| refuse(&e))?,
                    )
                }
            }
            _ => None,
        };
        for failure in &registry.failures {
            log::warn!("plugin skipped: {failure}");
        }
        let pending = self.config.start_only_changes(&config);
        self.registry = registry;
        self.config.policies = config.policies;
        if let Some(policy) = rebuilt {
            log::info!("policy {name} rebuilt with its new [policies.{name}] table");
            let actions = self.core.set_policy(self.time.model_now(), policy);
            round.notice(self.policy_notice());
            self.apply(actions, round);
        }
        self.config.plugin_dir = config.plugin_dir;
        self.config.keep_tasks_on_stop = config.keep_tasks_on_stop;
        self.config.cancel_grace_s = config.cancel_grace_s;
        self.config.policy_budget = config.policy_budget;
        self.config.idle_clocks = config.idle_clocks;
        self.config.apps = config.apps;
        self.apps = apps;
        let mut names: Vec<&str> = self.registry.plugins.iter().map(|p| p.name()).collect();
        names.sort_unstable();
        log::info!(
            "reloaded {}: policies in {}: {}; cancel_grace_s {}, keep_tasks_on_stop {}, \
             idle_clocks {}; DVFS profiles: {}; \
             policy {} keeps running",
            self.source
                .path()
                .map_or("the defaults".into(), |p| p.display().to_string()),
            plugin_dir.display(),
            if names.is_empty() {
                "none".into()
            } else {
                names.join(", ")
            },
            self.config.cancel_grace_s,
            self.config.keep_tasks_on_stop,
            self.config.idle_clocks.name(),
            self.apps.names().join(", "),
            self.core.policy_name(),
        );
        if !pending.is_empty() {
            log::warn!(
                "changed, but only read at start: {}; they take effect at the next start",
                pending.join(", ")
            );
        }
        Ok(pending.into_iter().map(String::from).collect())
    }

    /// formats.md §4 over the tasks that ran to an end (succeeded, failed or
    /// cancelled while running; not lost), in model seconds counted from the
    /// first of their submissions.
    pub(super) fn metrics(&self) -> Metrics {
        let rejected = self
            .store
            .rejections()
            .unwrap_or_else(|e| {
                log::error!("cannot read the rejected tasks for the metrics: {e}");
                Vec::new()
            })
            .into_iter()
            .map(|(id, reason)| Rejection { id, reason })
            .collect();
        self.ended_tally()
            .metrics(self.core.policy_name(), rejected, &self.devices)
    }
}
