//! The agent's D-Bus object, `org.gpuagent.Agent1` on the root object
//! (the `org.gpuagent.Device1` objects are `devices.rs`'s). Methods check the
//! caller, then forward the request to the engine and wait for its answer.

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::sync::{mpsc, Mutex};

use tokio::sync::oneshot;
use zbus::{
    interface, message::Header, object_server::SignalEmitter, zvariant::OwnedValue, Connection,
};

use super::auth::{Auth, Roles};
use super::config::Seconds;
use super::engine::{Caller, MigOptions, Pumped, Reply, Request};
use super::mig::MigView;
use super::states::MigState;
use gpu_agent_core::scheduler::OnBusy;
use gpu_agent_dbus::{
    given_parameters, metrics_to_dict, AgentError, Dict, ReleaseEnd, SubmitSpec, TaskInfo,
    TaskStatus, OUTPUT_READ_MAX, TASK_PAGE_MAX,
};

/// The agent object.
pub struct AgentService {
    engine: mpsc::Sender<Request>,
    auth: Auth,
    policy: Mutex<(String, Dict)>,
    /// The stored policy fault, described (`""`: none).
    policy_fault: Mutex<String>,
    version: String,
    backend: String,
    mig: MigView,
    /// Per GPU: the last MIG change state the engine announced, and its
    /// message (`GetMigLayout` shows them). A projection of the engine's
    /// state, not a second owner (ARCHITECTURE.md, invariant 12): the engine
    /// stores each state it reaches and announces it once (`MigChanged`),
    /// and the notice pump records the notices in the order sent, so this is
    /// the stored state as of the last notice pumped: it lags, it cannot
    /// drift. The lag is what `GetMigLayout` needs: a change's `stable`
    /// shows only after the `DevicesChanged` notice before it has served the
    /// new devices' objects (the engine itself would answer `stable` first).
    mig_states: Mutex<BTreeMap<u32, (MigState, String)>>,
    /// How far the notice pump has got: the methods whose effects show in
    /// these projections (a MIG state, a device's objects and health, the
    /// policy) answer once it has caught up with their round.
    pumped: Pumped,
    /// Where `Submit` times go (`/metrics`), if anywhere.
    submit_seconds: Option<prometheus_client::metrics::histogram::Histogram>,
    /// Where the output of tasks without an output file goes (`None`: the
    /// journal).
    log_dir: Option<PathBuf>,
}

impl AgentService {
    /// An agent forwarding to `engine`.
    pub fn new(
        engine: mpsc::Sender<Request>,
        auth: Auth,
        policy: (String, Dict),
        backend: String,
        mig: MigView,
        pumped: Pumped,
    ) -> AgentService {
        AgentService {
            engine,
            auth,
            policy: Mutex::new(policy),
            policy_fault: Mutex::new(String::new()),
            version: env!("CARGO_PKG_VERSION").into(),
            backend,
            mig,
            mig_states: Mutex::new(BTreeMap::new()),
            pumped,
            submit_seconds: None,
            log_dir: None,
        }
    }

    /// Reads the output of tasks without an output file from `log_dir`
    /// (`None`, as before this call: from the journal).
    pub fn task_logs(mut self, log_dir: Option<PathBuf>) -> AgentService {
        self.log_dir = log_dir;
        self
    }

    /// Records how long each `Submit` takes in `histogram`.
    pub fn time_submits(
        mut self,
        histogram: prometheus_client::metrics::histogram::Histogram,
    ) -> AgentService {
        self.submit_seconds = Some(histogram);
        self
    }

    /// Records the active policy and its parameters (the engine's notice),
    /// for the properties.
    pub fn record_policy(&self, name: String, parameters: Dict) {
        *self.policy.lock().unwrap_or_else(|e| e.into_inner()) = (name, parameters);
    }

    /// Records the stored policy fault, described (`""`: none), for the
    /// `LastPolicyFault` property.
    pub fn record_policy_fault(&self, fault: String) {
        *self.policy_fault.lock().unwrap_or_else(|e| e.into_inner()) = fault;
    }

    /// Records GPU `gpu`'s MIG change state (the engine's notice).
    pub fn record_mig_state(&self, gpu: u32, state: MigState, message: String) {
        self.mig_states
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(gpu, (state, message));
    }

    async fn ask<T>(&self, request: impl FnOnce(Reply<T>) -> Request) -> Result<T, AgentError> {
        let gone = || AgentError::ShuttingDown("gpu-agentd is stopping".into());
        let (tx, rx) = oneshot::channel();
        self.engine.send(request(tx)).map_err(|_| gone())?;
        rx.await.map_err(|_| gone())?
    }

    /// [`AgentService::ask`], answered once the bus side shows what the
    /// request did: the notices of its round are pumped (the state
    /// `GetMigLayout` reads, the device objects and their properties, the
    /// `Policy` property), so that a client reading them after the answer
    /// never sees the state from before.
    async fn ask_settled<T>(
        &self,
        request: impl FnOnce(Reply<T>) -> Request,
    ) -> Result<T, AgentError> {
        let answer = self.ask(request).await;
        self.pumped.caught_up().await;
        answer
    }

    /// `ListTasks` and `ListTasksPage`: a page of the tasks in `state`, each
    /// as the caller may see it.
    async fn tasks_page(
        &self,
        state: &str,
        from: usize,
        limit: usize,
        conn: &Connection,
        header: &Header<'_>,
    ) -> Result<(Vec<Dict>, usize), AgentError> {
        let state = match state {
            "" => None,
            s => Some(TaskStatus::parse(s).map_err(AgentError::InvalidArgument)?),
        };
        let roles = self.roles(conn, header).await?;
        let (tasks, next) = self
            .ask(|reply| Request::ListTasks {
                state,
                from,
                limit,
                reply,
            })
            .await?;
        let tasks = tasks
            .into_iter()
            .map(|t| shown_to(roles, t).to_dict())
            .collect();
        Ok((tasks, next))
    }

    /// `Submit` itself: checks the caller and the spec, then queues.
    async fn submit_spec(
        &self,
        spec: HashMap<String, OwnedValue>,
        conn: &Connection,
        header: &Header<'_>,
    ) -> Result<String, AgentError> {
        let roles = self.roles(conn, header).await?;
        roles.require_member("submit tasks")?;
        let spec = SubmitSpec::from_dict(&spec).map_err(AgentError::InvalidArgument)?;
        if !spec.command.is_empty() && !spec.workdir.is_empty() {
            check_workdir(roles.uid, &spec.workdir).await?;
        }
        self.ask(|reply| Request::Submit {
            owner: roles.uid,
            spec: Box::new(spec),
            reply,
        })
        .await
    }

    async fn roles(&self, conn: &Connection, header: &Header<'_>) -> Result<Roles, AgentError> {
        self.auth.roles(conn, header).await
    }

    /// `Release` and `ReleaseWithEnd`: ends adopted task `id` as `end`.
    async fn release_as(
        &self,
        id: String,
        end: ReleaseEnd,
        conn: &Connection,
        header: &Header<'_>,
    ) -> Result<(), AgentError> {
        self.roles(conn, header)
            .await?
            .require_admin("release external tasks")?;
        self.ask_settled(|reply| Request::Release { id, end, reply })
            .await
    }
}

/// Refuses a working directory user `uid` cannot enter, by entering it as
/// the user (off the bus's threads: it starts a thread of its own).
async fn check_workdir(uid: u32, dir: &str) -> Result<(), AgentError> {
    let dir = std::path::PathBuf::from(dir);
    let checked = tokio::task::spawn_blocking(move || crate::exec::check_workdir(uid, &dir))
        .await
        .map_err(|e| AgentError::Failed(format!("cannot check the working directory: {e}")))?;
    match checked {
        Ok(()) => Ok(()),
        Err(e @ crate::exec::ExecError::Workdir { .. }) => Err(AgentError::InvalidArgument(
            format!("key \"workdir\": {e}{}", private_tmp_hint(&e)),
        )),
        // A daemon that cannot run the caller's commands refuses them anyway.
        Err(crate::exec::ExecError::CannotSwitchUser { .. }) => Ok(()),
        Err(e) => Err(AgentError::Failed(format!(
            "cannot check the working directory: {e}"
        ))),
    }
}

/// For a working directory under `/tmp` or `/var/tmp` that does not exist
/// here: the likely reason, the unit's private temporary directories.
fn private_tmp_hint(error: &crate::exec::ExecError) -> &'static str {
    match error {
        crate::exec::ExecError::Workdir { path, cause, .. }
            if cause.kind() == std::io::ErrorKind::NotFound
                && (path.starts_with("/tmp") || path.starts_with("/var/tmp")) =>
        {
            " (under systemd, gpu-agentd and its tasks have a /tmp and /var/tmp of their own, \
             PrivateTmp=yes in gpu-agent.service: submit from another directory)"
        }
        _ => "",
    }
}

#[interface(name = "org.gpuagent.Agent1")]
impl AgentService {
    /// Queues a task; returns its id once it is stored.
    async fn submit(
        &self,
        spec: HashMap<String, OwnedValue>,
        #[zbus(connection)] conn: &Connection,
        #[zbus(header)] header: Header<'_>,
    ) -> Result<String, AgentError> {
        let start = std::time::Instant::now();
        let result = self.submit_spec(spec, conn, &header).await;
        if let Some(h) = &self.submit_seconds {
            h.observe(start.elapsed().as_secs_f64());
        }
        result
    }

    /// Cancels a queued or running task (its owner's, or any for an admin).
    async fn cancel(
        &self,
        id: String,
        #[zbus(connection)] conn: &Connection,
        #[zbus(header)] header: Header<'_>,
    ) -> Result<(), AgentError> {
        let roles = self.roles(conn, &header).await?;
        roles.require_member("cancel tasks")?;
        let caller = Caller {
            uid: roles.uid,
            admin: roles.admin,
        };
        self.ask(|reply| Request::Cancel { id, caller, reply })
            .await
    }
    /// One task's dictionary (its secrets only for its owner and admins).
    async fn get_task(
        &self,
        id: String,
        #[zbus(connection)] conn: &Connection,
        #[zbus(header)] header: Header<'_>,
    ) -> Result<Dict, AgentError> {
        let roles = self.roles(conn, &header).await?;
        let task = self.ask(|reply| Request::GetTask { id, reply }).await?;
        Ok(shown_to(roles, task).to_dict())
    }

    /// Up to `limit` bytes of a task's output from byte `offset`, the offset
    /// to read from next, and whether the task had ended before the read:
    /// its owner's and admins' only.
    async fn read_output(
        &self,
        id: String,
        offset: u64,
        limit: u32,
        #[zbus(connection)] conn: &Connection,
        #[zbus(header)] header: Header<'_>,
    ) -> Result<(Vec<u8>, u64, bool), AgentError> {
        if !(1..=OUTPUT_READ_MAX).contains(&limit) {
            return Err(AgentError::InvalidArgument(format!(
                "limit must be from 1 to {OUTPUT_READ_MAX}, not {limit}"
            )));
        }
        let roles = self.roles(conn, &header).await?;
        let task = self
            .ask(|reply| Request::GetTask {
                id: id.clone(),
                reply,
            })
            .await?;
        if task.owner_uid != roles.uid && !roles.admin {
            return Err(AgentError::AccessDenied(format!(
                "task {id} belongs to uid {}; only its owner or an admin may read its output",
                task.owner_uid
            )));
        }
        if task.spec.command.is_empty() {
            return Err(AgentError::InvalidArgument(format!(
                "task {id} is simulated (it has no command), so it has no output"
            )));
        }
        // Before the read: an empty read of an ended task is its end.
        let ended = task.state.is_terminal();
        let source = crate::output::Source::of(&task, self.log_dir.as_deref());
        let data = tokio::task::spawn_blocking(move || source.read(offset, limit as usize))
            .await
            .map_err(|e| AgentError::Failed(format!("cannot read the output of {id}: {e}")))?
            .map_err(AgentError::Failed)?;
        let next = offset + data.len() as u64;
        Ok((data, next, ended))
    }

    /// The tasks in `state` (`""`: all), in submission order (their secrets
    /// only for their owners and admins).
    async fn list_tasks(
        &self,
        state: String,
        #[zbus(connection)] conn: &Connection,
        #[zbus(header)] header: Header<'_>,
    ) -> Result<Vec<Dict>, AgentError> {
        let (tasks, _) = self
            .tasks_page(&state, 0, usize::MAX, conn, &header)
            .await?;
        Ok(tasks)
    }

    /// Up to `limit` tasks in `state` (`""`: all), in submission order, from
    /// position `from` (0: the first task); and the position the next page
    /// starts at, 0 once no task is left.
    async fn list_tasks_page(
        &self,
        state: String,
        from: u64,
        limit: u32,
        #[zbus(connection)] conn: &Connection,
        #[zbus(header)] header: Header<'_>,
    ) -> Result<(Vec<Dict>, u64), AgentError> {
        if !(1..=TASK_PAGE_MAX).contains(&limit) {
            return Err(AgentError::InvalidArgument(format!(
                "limit must be from 1 to {TASK_PAGE_MAX}, not {limit}"
            )));
        }
        let from = usize::try_from(from).unwrap_or(usize::MAX);
        let (tasks, next) = self
            .tasks_page(&state, from, limit as usize, conn, &header)
            .await?;
        Ok((tasks, next as u64))
    }

    /// How many tasks are in each state (every state listed), from the
    /// engine's counts: no task is read, however many have ended.
    async fn count_tasks(&self) -> Result<HashMap<String, u64>, AgentError> {
        let gone = || AgentError::ShuttingDown("gpu-agentd is stopping".into());
        let (reply, answer) = oneshot::channel();
        self.engine
            .send(Request::Census { reply })
            .map_err(|_| gone())?;
        let census = answer.await.map_err(|_| gone())?;
        Ok(census
            .tasks
            .into_iter()
            .map(|(state, n)| (state.as_str().to_string(), n as u64))
            .collect())
    }

    /// The loaded policies: (name, description).
    async fn list_policies(&self) -> Result<Vec<(String, String)>, AgentError> {
        self.ask(|reply| Request::ListPolicies { reply }).await
    }

    /// Makes `name` the active policy; queued tasks move to it.
    async fn set_policy(
        &self,
        name: String,
        #[zbus(connection)] conn: &Connection,
        #[zbus(header)] header: Header<'_>,
    ) -> Result<(), AgentError> {
        self.roles(conn, &header)
            .await?
            .require_admin("change the policy")?;
        self.ask_settled(|reply| Request::SetPolicy {
            name,
            params: Vec::new(),
            reply,
        })
        .await
    }

    /// Makes `name` the active policy, built with `params` over its
    /// agent.toml table; a bad key, type or value changes nothing.
    async fn set_policy_with_parameters(
        &self,
        name: String,
        params: HashMap<String, OwnedValue>,
        #[zbus(connection)] conn: &Connection,
        #[zbus(header)] header: Header<'_>,
    ) -> Result<(), AgentError> {
        self.roles(conn, &header)
            .await?
            .require_admin("change the policy")?;
        let params = given_parameters(&params)
            .map_err(|e| AgentError::InvalidArgument(format!("policy {name}: {e}")))?;
        self.ask_settled(|reply| Request::SetPolicy {
            name,
            params,
            reply,
        })
        .await
    }

    /// A loaded policy: its description and parameters (types, defaults,
    /// ranges, descriptions, and the values in use when it is active).
    async fn describe_policy(&self, name: String) -> Result<Dict, AgentError> {
        let policy = self
            .ask(|reply| Request::DescribePolicy { name, reply })
            .await?;
        Ok(policy.to_dict())
    }

    /// Reads the configuration file again and re-scans the plugin directory;
    /// returns the changed keys that only take effect at the next start.
    async fn reload(
        &self,
        #[zbus(connection)] conn: &Connection,
        #[zbus(header)] header: Header<'_>,
    ) -> Result<Vec<String>, AgentError> {
        self.roles(conn, &header)
            .await?
            .require_admin("reload the configuration and plugins")?;
        self.ask(|reply| Request::Reload { reply }).await
    }

    /// formats.md §4 metrics over the finished tasks.
    async fn metrics(&self) -> Result<Dict, AgentError> {
        Ok(metrics_to_dict(
            &self.ask(|reply| Request::Metrics { reply }).await?,
        ))
    }

    /// One GPU's MIG state (docs/mig.md §6.2).
    async fn get_mig_layout(&self, gpu: u32) -> Result<Dict, AgentError> {
        let mig = self.mig.clone();
        let mut layout = blocking(move || mig.layout(gpu)).await?;
        let recorded = self
            .mig_states
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(&gpu)
            .cloned();
        // A change's state wins over the mode's, except a settled one's.
        if let Some((state, message)) = recorded {
            if state != MigState::Stable || layout.state == MigState::Stable.as_str() {
                layout.state = state.to_string();
                layout.message = message;
            }
        }
        Ok(layout.to_dict())
    }

    /// The host's MIG state as a mig-parted v1 file (configuration `label`,
    /// `""`: `current`).
    async fn export_mig_config(&self, label: String) -> Result<String, AgentError> {
        let mig = self.mig.clone();
        blocking(move || mig.export(&label)).await
    }

    /// Whether the host is as configuration `name` of the v1 file `yaml` asks
    /// (mig-parted `assert`), and every difference.
    async fn assert_mig_config(
        &self,
        yaml: String,
        name: String,
    ) -> Result<(bool, Vec<String>), AgentError> {
        let mig = self.mig.clone();
        blocking(move || mig.assert(&yaml, &name)).await
    }

    /// Changes the GPUs' MIG layouts to configuration `name` (`""`: the
    /// file's only one) of the mig-parted v1 file `yaml`: each GPU whose
    /// layout differs drains (or, with `on_busy` `refuse`, the call is
    /// refused if a task runs or waits there) and then takes its new layout;
    /// `MigChanged` follows each step. Everything is checked and stored
    /// before the answer, the GPUs that change; a refusal changes nothing.
    /// Admins only.
    async fn apply_mig_config(
        &self,
        yaml: String,
        name: String,
        options: HashMap<String, OwnedValue>,
        #[zbus(connection)] conn: &Connection,
        #[zbus(header)] header: Header<'_>,
    ) -> Result<Vec<u32>, AgentError> {
        self.roles(conn, &header)
            .await?
            .require_admin("change MIG layouts")?;
        let options = mig_options(&options)?;
        let mig = self.mig.clone();
        let without_instances = options.without_instances;
        let targets = blocking(move || mig.targets(&yaml, &name, without_instances)).await?;
        self.ask_settled(|reply| Request::ApplyMig {
            targets,
            options,
            reply,
        })
        .await
    }

    /// Abandons GPU `gpu`'s MIG change while it drains: its devices take
    /// work again and its layout stays. Refused once the change applies.
    /// Admins only.
    async fn cancel_mig_change(
        &self,
        gpu: u32,
        #[zbus(connection)] conn: &Connection,
        #[zbus(header)] header: Header<'_>,
    ) -> Result<(), AgentError> {
        self.roles(conn, &header)
            .await?
            .require_admin("change MIG layouts")?;
        self.ask_settled(|reply| Request::CancelMig { gpu, reply })
            .await
    }

    /// Brings GPU `gpu` back online after probing it (refused while it does
    /// not answer), or drains it (`online` false): its running task ends as
    /// it would, and nothing else is placed on it. Admins only.
    async fn set_device_online(
        &self,
        gpu: u32,
        online: bool,
        #[zbus(connection)] conn: &Connection,
        #[zbus(header)] header: Header<'_>,
    ) -> Result<(), AgentError> {
        self.roles(conn, &header)
            .await?
            .require_admin("take GPUs offline or online")?;
        self.ask_settled(|reply| Request::SetDeviceOnline { gpu, online, reply })
            .await
    }

    /// Adopts work the agent did not place (a Slurm job) on its GPUs:
    /// nothing else is placed there and their clocks follow the active DVFS
    /// policy until `Release`. Returns the task id it shows under. Admins only.
    async fn adopt(
        &self,
        spec: HashMap<String, OwnedValue>,
        #[zbus(connection)] conn: &Connection,
        #[zbus(header)] header: Header<'_>,
    ) -> Result<String, AgentError> {
        self.roles(conn, &header)
            .await?
            .require_admin("adopt external tasks")?;
        let spec =
            gpu_agent_dbus::AdoptSpec::from_dict(&spec).map_err(AgentError::InvalidArgument)?;
        self.ask_settled(|reply| Request::Adopt {
            id: None,
            spec,
            reply,
        })
        .await
    }

    /// Ends adopted task `id`: its GPUs' clocks are restored, its energy
    /// recorded, and its GPUs take work again. Admins only.
    async fn release(
        &self,
        id: String,
        #[zbus(connection)] conn: &Connection,
        #[zbus(header)] header: Header<'_>,
    ) -> Result<(), AgentError> {
        self.release_as(id, ReleaseEnd::Completed, conn, &header)
            .await
    }

    /// `Release` telling how the job ended: `completed` (`succeeded`),
    /// `cancelled`, `timeout` (`failed`, reason `timeout`) or `failed`.
    /// Admins only.
    async fn release_with_end(
        &self,
        id: String,
        end: String,
        #[zbus(connection)] conn: &Connection,
        #[zbus(header)] header: Header<'_>,
    ) -> Result<(), AgentError> {
        let end = ReleaseEnd::parse(&end).map_err(AgentError::InvalidArgument)?;
        self.release_as(id, end, conn, &header).await
    }

    /// A task changed state.
    #[zbus(signal)]
    pub async fn task_changed(
        emitter: &SignalEmitter<'_>,
        id: &str,
        state: &str,
    ) -> zbus::Result<()>;

    /// A GPU's MIG layout change moved on: `state` is `draining`,
    /// `applying`, `stable`, `reset-required` or `failed`.
    #[zbus(signal)]
    pub async fn mig_changed(
        emitter: &SignalEmitter<'_>,
        gpu: u32,
        state: &str,
        message: &str,
    ) -> zbus::Result<()>;

    /// A policy failed (an error, a panic, an invalid decision, or a call
    /// over `policy_budget_ms`): the built-in FIFO order runs from now on,
    /// and `policy` is not made active again, at a restart either, until an
    /// admin's `SetPolicy`.
    #[zbus(signal)]
    pub async fn policy_fault(
        emitter: &SignalEmitter<'_>,
        policy: &str,
        reason: &str,
    ) -> zbus::Result<()>;

    /// The stored policy fault (`policy NAME failed: REASON`; `""`: none),
    /// until an admin's `SetPolicy` clears it.
    #[zbus(property)]
    async fn last_policy_fault(&self) -> String {
        self.policy_fault
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// The active policy.
    #[zbus(property)]
    async fn policy(&self) -> String {
        self.policy
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .0
            .clone()
    }

    /// The active policy's parameters, each with the value in use.
    #[zbus(property)]
    async fn policy_parameters(&self) -> Dict {
        self.policy
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .1
            .clone()
    }

    /// The daemon's version.
    #[zbus(property(emits_changed_signal = "const"))]
    async fn version(&self) -> String {
        self.version.clone()
    }

    /// The GPU backend.
    #[zbus(property(emits_changed_signal = "const"))]
    async fn backend(&self) -> String {
        self.backend.clone()
    }
}

/// `task` as the caller with `roles` may see it: whole for its owner and
/// admins (root and the daemon's user included), else with its `env` values
/// and arguments redacted.
fn shown_to(roles: Roles, task: TaskInfo) -> TaskInfo {
    if roles.admin || roles.uid == task.owner_uid {
        task
    } else {
        task.redacted()
    }
}

/// `ApplyMigConfig`'s options: `on_busy` (`wait`, the default, or
/// `refuse`), `timeout_s` (seconds a drain may take; 0, the default: no
/// limit), `reject_stranded` (false, the default: refuse a change that
/// leaves waiting tasks without a device) and `enable_without_instances`
/// (false, the default: refuse MIG on with no instance).
fn mig_options(options: &HashMap<String, OwnedValue>) -> Result<MigOptions, AgentError> {
    let mut out = MigOptions {
        on_busy: OnBusy::Wait,
        timeout_s: Seconds::default(),
        reject_stranded: false,
        without_instances: false,
    };
    for (key, value) in options {
        match key.as_str() {
            "on_busy" => {
                out.on_busy = match <&str>::try_from(value) {
                    Ok("wait") => OnBusy::Wait,
                    Ok("refuse") => OnBusy::Refuse,
                    _ => {
                        return Err(AgentError::InvalidArgument(format!(
                            "option on_busy: expected \"wait\" or \"refuse\", got {value:?}"
                        )))
                    }
                }
            }
            "timeout_s" => {
                out.timeout_s = f64::try_from(value)
                    .map_err(|_| format!("expected a number of seconds (d), got {value:?}"))
                    .and_then(Seconds::new)
                    .map_err(|e| AgentError::InvalidArgument(format!("option timeout_s: {e}")))?
            }
            "reject_stranded" => {
                out.reject_stranded = bool::try_from(value).map_err(|_| {
                    AgentError::InvalidArgument(format!(
                        "option reject_stranded: expected a boolean (b), got {value:?}"
                    ))
                })?
            }
            "enable_without_instances" => {
                out.without_instances = bool::try_from(value).map_err(|_| {
                    AgentError::InvalidArgument(format!(
                        "option enable_without_instances: expected a boolean (b), got {value:?}"
                    ))
                })?
            }
            other => {
                return Err(AgentError::InvalidArgument(format!(
                    "unknown option {other:?}; ApplyMigConfig takes on_busy, timeout_s, reject_stranded and enable_without_instances"
                )))
            }
        }
    }
    Ok(out)
}

/// Runs backend reads off the bus's threads.
async fn blocking<T: Send + 'static>(
    work: impl FnOnce() -> Result<T, AgentError> + Send + 'static,
) -> Result<T, AgentError> {
    tokio::task::spawn_blocking(work)
        .await
        .map_err(|e| AgentError::Failed(format!("the MIG read failed: {e}")))?
}

#[cfg(test)]
mod tests {
    use super::private_tmp_hint;
    use crate::exec::ExecError;
    use std::io::{Error, ErrorKind};

    #[test]
    fn a_missing_directory_under_tmp_names_the_private_tmp() {
        let workdir = |path: &str, kind: ErrorKind| ExecError::Workdir {
            path: path.into(),
            user: "alice".into(),
            cause: Error::from(kind),
        };
        assert!(
            private_tmp_hint(&workdir("/tmp/proj", ErrorKind::NotFound)).contains("PrivateTmp=yes")
        );
        assert!(
            private_tmp_hint(&workdir("/var/tmp/p", ErrorKind::NotFound))
                .contains("PrivateTmp=yes")
        );
        assert_eq!(
            private_tmp_hint(&workdir("/tmp/proj", ErrorKind::PermissionDenied)),
            ""
        );
        assert_eq!(
            private_tmp_hint(&workdir("/tmpfs/proj", ErrorKind::NotFound)),
            ""
        );
        assert_eq!(
            private_tmp_hint(&workdir("/home/a", ErrorKind::NotFound)),
            ""
        );
    }
}
