//! A task on the wire: the `Submit` spec and the task dictionary.

use std::collections::{BTreeMap, HashMap};

use gpu_agent_core::task::{Rule, TaskSpec};
use gpu_agent_plugin_api::AppModel;
use serde::{Deserialize, Serialize};
use zbus::zvariant::{OwnedValue, Value};

/// A string-keyed dictionary of variants (`a{sv}`).
pub type Dict = HashMap<String, OwnedValue>;

/// Where a task is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum TaskStatus {
    /// Stored, waiting for the policy.
    Queued,
    /// In a device's local queue.
    Assigned,
    /// Running on its devices.
    Running,
    /// Ended with exit status 0 (or its modelled time, when simulated).
    Succeeded,
    /// Ended otherwise, or could not start, or the daemon stopped it.
    Failed,
    /// Cancelled by its owner or an admin.
    Cancelled,
    /// Running when the daemon died.
    Lost,
    /// Refused by the policy.
    Rejected,
}

impl TaskStatus {
    /// Every state, in life order.
    pub const ALL: [TaskStatus; 8] = [
        TaskStatus::Queued,
        TaskStatus::Assigned,
        TaskStatus::Running,
        TaskStatus::Succeeded,
        TaskStatus::Failed,
        TaskStatus::Cancelled,
        TaskStatus::Lost,
        TaskStatus::Rejected,
    ];

    /// The wire name.
    pub fn as_str(self) -> &'static str {
        match self {
            TaskStatus::Queued => "queued",
            TaskStatus::Assigned => "assigned",
            TaskStatus::Running => "running",
            TaskStatus::Succeeded => "succeeded",
            TaskStatus::Failed => "failed",
            TaskStatus::Cancelled => "cancelled",
            TaskStatus::Lost => "lost",
            TaskStatus::Rejected => "rejected",
        }
    }

    /// The state named `name`, or an error listing the names.
    pub fn parse(name: &str) -> Result<TaskStatus, String> {
        TaskStatus::ALL
            .into_iter()
            .find(|s| s.as_str() == name)
            .ok_or_else(|| {
                let names: Vec<_> = TaskStatus::ALL.iter().map(|s| s.as_str()).collect();
                format!(
                    "unknown task state {name:?}; expected one of {}",
                    names.join(", ")
                )
            })
    }

    /// Whether the task has ended for good.
    pub fn is_terminal(self) -> bool {
        !matches!(
            self,
            TaskStatus::Queued | TaskStatus::Assigned | TaskStatus::Running
        )
    }
}

impl std::fmt::Display for TaskStatus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What a user submits (the `a{sv}` of `Submit`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SubmitSpec {
    /// Work units (> 0): seconds on a GPU of speed 1.0 at default clocks.
    pub workload: f64,
    /// Memory per device, GB (>= 0).
    pub mem_gb: f64,
    /// Deadline, seconds after submission (>= 0); `None`: none, never late.
    pub deadline: Option<f64>,
    /// Priority weight (> 0).
    pub weight: f64,
    /// Devices needed at once (>= 1).
    pub gpus: u32,
    /// Other device counts it can also run on (the work divides evenly).
    #[serde(default)]
    pub gpus_alt: Vec<u32>,
    /// DVFS application profile.
    pub app: String,
    /// Run time on each device at default clocks, seconds (empty: workload / speed).
    pub runtimes: Vec<f64>,
    /// Program and arguments (empty: a simulated task).
    pub command: Vec<String>,
    /// Environment of the command, over the base one.
    pub env: BTreeMap<String, String>,
    /// A name for people.
    pub name: String,
    /// Queue the task again if the daemon dies while it runs.
    pub requeue: bool,
    /// A key that makes a retried `Submit` safe: the same token from the same
    /// uid within [`CLIENT_TOKEN_RETENTION_S`] answers the first task's id.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub client_token: String,
    /// The outside scheduler's id of an adopted task (`Adopt`; empty for
    /// a submitted one). Not a `Submit` key: `TaskInfo` carries it.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub external_id: String,
    /// The command's working directory, an absolute path (empty: the
    /// owner's home directory).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub workdir: String,
    /// Where stdout (and stderr, without [`SubmitSpec::error`]) goes: a
    /// pattern of [`OUTPUT_ESCAPES`], relative to the working directory
    /// (empty: the daemon's log). The daemon stores it expanded.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub output: String,
    /// Where stderr goes, as [`SubmitSpec::output`] (empty: with stdout).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub error: String,
    /// The file mode creation mask the command runs with and its output
    /// files are created under (`None`: the daemon's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub umask: Option<u32>,
}

/// The estimate of a submission that gives none: one hour on a GPU of speed
/// 1.0 (work units are seconds there). A task that runs longer is followed
/// past its estimate (its queue moves back to pending), so a wrong estimate
/// delays planning, never the task itself.
pub const DEFAULT_WORKLOAD: f64 = 3600.0;

/// The deadline, seconds after submission, the scheduler core plans a task
/// without one with: the largest value a task may hold (about 31.7 years),
/// so deadline-driven policies order it after every real deadline.
pub const NO_DEADLINE_S: f64 = gpu_agent_core::task::MAX_VALUE;

/// The `%` escapes of [`SubmitSpec::output`] and [`SubmitSpec::error`]:
/// (escape, what it becomes).
pub const OUTPUT_ESCAPES: [(char, &str); 5] = [
    ('t', "the task's id"),
    ('j', "the task's id (sbatch's name for it)"),
    ('u', "the owner's user name"),
    (
        'x',
        "the task's name (its program's file name when it has none)",
    ),
    ('%', "a `%`"),
];

/// How long the daemon remembers a `client_token`, seconds (one day).
pub const CLIENT_TOKEN_RETENTION_S: f64 = 86_400.0;

/// The longest `client_token`, bytes.
pub const CLIENT_TOKEN_MAX_LEN: usize = 256;

/// The longest name, bytes: `name`, `app`, an `env` variable's name, and
/// `Adopt`'s `external_id` and `app`.
pub const NAME_MAX_LEN: usize = 256;
/// The longest path, bytes (`PATH_MAX`): `workdir`, `output`, `error`.
pub const PATH_MAX_LEN: usize = 4096;
/// The longest `command` argument or `env` value, bytes (the kernel's
/// `MAX_ARG_STRLEN`).
pub const ARG_MAX_LEN: usize = 131_072;
/// The most bytes `command` and `env` take together (half the kernel's
/// usual `ARG_MAX`, leaving room for the base environment).
pub const COMMAND_MAX_LEN: usize = 1_048_576;

/// Refuses `text` longer than `max` bytes, naming `key`.
pub(crate) fn within(key: &str, text: &str, max: usize) -> Result<(), String> {
    if text.len() > max {
        return Err(format!(
            "key {key:?}: expected at most {max} bytes, got {} bytes",
            text.len()
        ));
    }
    Ok(())
}

/// The keys `Submit` takes, with their D-Bus types.
const SPEC_KEYS: [(&str, &str, &str); 17] = [
    ("workload", "d", "a number > 0"),
    ("mem_gb", "d", "a number >= 0"),
    ("deadline", "d", "a number >= 0 (seconds after submission)"),
    ("weight", "d", "a number > 0"),
    ("gpus", "u", "an integer >= 1"),
    ("gpus_alt", "au", "other device counts >= 1"),
    ("app", "s", "a DVFS profile name"),
    ("runtimes", "ad", "numbers > 0 or inf"),
    ("command", "as", "a non-empty argv"),
    ("env", "a{ss}", "NAME -> value"),
    ("name", "s", "a name"),
    ("requeue", "b", "a boolean"),
    ("client_token", "s", "a retry key of at most 256 bytes"),
    ("workdir", "s", "an absolute directory"),
    ("output", "s", "a file name pattern"),
    ("error", "s", "a file name pattern"),
    ("umask", "u", "a mode mask from 0 to 0777"),
];

/// Checks that every key of `dict` is one of `keys` (key, D-Bus signature,
/// what it means) and has its signature, in key order; the error names the
/// first key that is not, and what was expected.
pub(crate) fn check_keys(dict: &Dict, keys: &[(&str, &str, &str)]) -> Result<(), String> {
    let mut given: Vec<&String> = dict.keys().collect();
    given.sort();
    for key in given {
        let Some((_, sig, what)) = keys.iter().find(|(k, _, _)| k == key) else {
            let known: Vec<_> = keys.iter().map(|(k, _, _)| *k).collect();
            return Err(format!(
                "unknown key {key:?}; the keys are {}",
                known.join(", ")
            ));
        };
        let got = dict[key].value_signature().to_string();
        if got != *sig {
            return Err(format!(
                "key {key:?}: expected type {sig} ({what}), got {got}"
            ));
        }
    }
    Ok(())
}

impl Default for SubmitSpec {
    /// What an empty `Submit` dictionary means: [`DEFAULT_WORKLOAD`], no
    /// memory asked for, no deadline, weight 1, one device, and no command.
    fn default() -> SubmitSpec {
        SubmitSpec {
            workload: DEFAULT_WORKLOAD,
            mem_gb: 0.0,
            deadline: None,
            weight: 1.0,
            gpus: 1,
            gpus_alt: Vec::new(),
            app: "default".into(),
            runtimes: Vec::new(),
            command: Vec::new(),
            env: BTreeMap::new(),
            name: String::new(),
            requeue: false,
            client_token: String::new(),
            external_id: String::new(),
            workdir: String::new(),
            output: String::new(),
            error: String::new(),
            umask: None,
        }
    }
}

impl SubmitSpec {
    /// A spec with these four values and every option at its default.
    pub fn new(workload: f64, mem_gb: f64, deadline: f64, weight: f64) -> SubmitSpec {
        SubmitSpec {
            workload,
            mem_gb,
            deadline: Some(deadline),
            weight,
            ..SubmitSpec::default()
        }
    }

    /// The `a{sv}` form; options at their default are left out.
    pub fn to_dict(&self) -> Dict {
        let mut d = Dict::new();
        self.insert_into(&mut d);
        d
    }

    fn insert_into(&self, d: &mut Dict) {
        d.insert("workload".into(), owned(self.workload));
        d.insert("mem_gb".into(), owned(self.mem_gb));
        if let Some(deadline) = self.deadline {
            d.insert("deadline".into(), owned(deadline));
        }
        d.insert("weight".into(), owned(self.weight));
        if self.gpus != 1 {
            d.insert("gpus".into(), owned(self.gpus));
        }
        if !self.gpus_alt.is_empty() {
            d.insert("gpus_alt".into(), owned(self.gpus_alt.clone()));
        }
        if self.app != "default" {
            d.insert("app".into(), owned(self.app.as_str()));
        }
        if !self.runtimes.is_empty() {
            d.insert("runtimes".into(), owned(self.runtimes.clone()));
        }
        if !self.command.is_empty() {
            d.insert("command".into(), owned(self.command.clone()));
        }
        if !self.env.is_empty() {
            let env: HashMap<String, String> = self.env.clone().into_iter().collect();
            d.insert("env".into(), owned(env));
        }
        if !self.name.is_empty() {
            d.insert("name".into(), owned(self.name.as_str()));
        }
        if self.requeue {
            d.insert("requeue".into(), owned(true));
        }
        if !self.client_token.is_empty() {
            d.insert("client_token".into(), owned(self.client_token.as_str()));
        }
        for (key, value) in [
            ("workdir", &self.workdir),
            ("output", &self.output),
            ("error", &self.error),
        ] {
            if !value.is_empty() {
                d.insert(key.into(), owned(value.as_str()));
            }
        }
        if let Some(umask) = self.umask {
            d.insert("umask".into(), owned(umask));
        }
    }

    /// Reads a `Submit` dictionary strictly: every key known and of its
    /// type, every number in range; a key left out takes its default
    /// ([`SubmitSpec::default`]). The error names the key and what was
    /// expected.
    pub fn from_dict(dict: &Dict) -> Result<SubmitSpec, String> {
        check_keys(dict, &SPEC_KEYS)?;
        let number = |key: &str| {
            dict.get(key)
                .map(|v| f64::try_from(&**v).expect("signature checked"))
        };
        let mut spec = SubmitSpec::default();
        spec.workload = number("workload").unwrap_or(spec.workload);
        spec.mem_gb = number("mem_gb").unwrap_or(spec.mem_gb);
        spec.deadline = number("deadline");
        spec.weight = number("weight").unwrap_or(spec.weight);
        if let Some(v) = dict.get("gpus") {
            spec.gpus = u32::try_from(&**v).expect("signature checked");
        }
        if let Some(v) = dict.get("gpus_alt") {
            spec.gpus_alt = Vec::<u32>::try_from(clone(v)).expect("signature checked");
        }
        if let Some(v) = dict.get("app") {
            spec.app = string(v);
        }
        if let Some(v) = dict.get("runtimes") {
            spec.runtimes = Vec::<f64>::try_from(clone(v)).expect("signature checked");
        }
        if let Some(v) = dict.get("command") {
            spec.command = Vec::<String>::try_from(clone(v)).expect("signature checked");
        }
        if let Some(v) = dict.get("env") {
            let env = HashMap::<String, String>::try_from(clone(v)).expect("signature checked");
            spec.env = env.into_iter().collect();
        }
        if let Some(v) = dict.get("name") {
            spec.name = string(v);
        }
        if let Some(v) = dict.get("requeue") {
            spec.requeue = bool::try_from(&**v).expect("signature checked");
        }
        if let Some(v) = dict.get("client_token") {
            spec.client_token = string(v);
        }
        for (key, field) in [
            ("workdir", &mut spec.workdir),
            ("output", &mut spec.output),
            ("error", &mut spec.error),
        ] {
            if let Some(v) = dict.get(key) {
                *field = string(v);
            }
        }
        if let Some(v) = dict.get("umask") {
            spec.umask = Some(u32::try_from(&**v).expect("signature checked"));
        }
        spec.check()?;
        Ok(spec)
    }

    /// Checks every value's range.
    pub fn check(&self) -> Result<(), String> {
        let number = |key: &str, x: f64, rule: Rule| {
            rule.check(x)
                .map(drop)
                .map_err(|e| format!("key {key:?}: {e}"))
        };
        number("workload", self.workload, Rule::WORKLOAD)?;
        number("mem_gb", self.mem_gb, Rule::MEM_GB)?;
        if let Some(deadline) = self.deadline {
            number("deadline", deadline, Rule::RELATIVE_DEADLINE)?;
        }
        number("weight", self.weight, Rule::WEIGHT)?;
        if self.gpus == 0 {
            return Err("key \"gpus\": expected an integer >= 1, got 0".into());
        }
        if let Some(r) = self.runtimes.iter().find(|&&r| !Rule::RUNTIME.accepts(r)) {
            return Err(match Rule::RUNTIME.check(*r) {
                Err(e) if r.is_finite() && *r > 0.0 => format!("key \"runtimes\": {e}"),
                _ => format!("key \"runtimes\": expected numbers > 0 or inf, got {r}"),
            });
        }
        if self.app.is_empty() {
            return Err("key \"app\": expected a DVFS profile name, got \"\"".into());
        }
        self.check_lengths()?;
        if self.command.first().is_some_and(|p| p.is_empty()) {
            return Err("key \"command\": expected a program name first, got \"\"".into());
        }
        if let Some(k) = self
            .env
            .keys()
            .find(|k| k.is_empty() || k.contains('=') || k.contains('\0'))
        {
            return Err(format!(
                "key \"env\": expected variable names without '=', got {k:?}"
            ));
        }
        if self.client_token.len() > CLIENT_TOKEN_MAX_LEN || self.client_token.contains('\0') {
            return Err(format!(
                "key \"client_token\": expected at most {CLIENT_TOKEN_MAX_LEN} bytes without NUL, got {} bytes",
                self.client_token.len()
            ));
        }
        if let Some(s) = self
            .command
            .iter()
            .chain(self.env.values())
            .find(|s| s.contains('\0'))
        {
            return Err(format!("key \"command\"/\"env\": NUL byte in {s:?}"));
        }
        if !self.workdir.is_empty() && !self.workdir.starts_with('/') {
            return Err(format!(
                "key \"workdir\": expected an absolute directory, got {:?}",
                self.workdir
            ));
        }
        for (key, pattern) in [("output", &self.output), ("error", &self.error)] {
            check_pattern(pattern).map_err(|e| format!("key {key:?}: {e}"))?;
        }
        if !self.error.is_empty() && self.output.is_empty() {
            return Err("key \"error\": given without \"output\"".into());
        }
        if let Some(s) = [&self.workdir, &self.output, &self.error]
            .into_iter()
            .find(|s| s.contains('\0'))
        {
            return Err(format!(
                "key \"workdir\"/\"output\"/\"error\": NUL byte in {s:?}"
            ));
        }
        if let Some(umask) = self.umask.filter(|&m| m > 0o777) {
            return Err(format!(
                "key \"umask\": expected a mode mask from 0 to 0777, got 0{umask:o}"
            ));
        }
        Ok(())
    }

    /// Refuses a string longer than its limit (docs/dbus.md), naming the key.
    fn check_lengths(&self) -> Result<(), String> {
        within("name", &self.name, NAME_MAX_LEN)?;
        within("app", &self.app, NAME_MAX_LEN)?;
        for (key, path) in [
            ("workdir", &self.workdir),
            ("output", &self.output),
            ("error", &self.error),
        ] {
            within(key, path, PATH_MAX_LEN)?;
        }
        for arg in &self.command {
            within("command", arg, ARG_MAX_LEN)?;
        }
        for (k, v) in &self.env {
            within("env", k, NAME_MAX_LEN)?;
            within("env", v, ARG_MAX_LEN)?;
        }
        // As execve counts them: each string and its NUL.
        let total: usize = (self.command.iter())
            .map(|a| a.len() + 1)
            .chain(self.env.iter().map(|(k, v)| k.len() + v.len() + 2))
            .sum();
        if total > COMMAND_MAX_LEN {
            return Err(format!(
                "keys \"command\" and \"env\": expected at most {COMMAND_MAX_LEN} bytes together, got {total}"
            ));
        }
        Ok(())
    }

    /// The task's output (`output`) or error (`error`) file: `pattern` with
    /// its escapes replaced, as a path from `workdir` unless absolute.
    /// `pattern` must have passed [`SubmitSpec::check`].
    pub fn expand(pattern: &str, workdir: &str, id: &str, user: &str, name: &str) -> String {
        let mut out = String::new();
        let mut chars = pattern.chars();
        while let Some(c) = chars.next() {
            if c != '%' {
                out.push(c);
                continue;
            }
            match chars.next() {
                Some('t' | 'j') => out.push_str(id),
                Some('u') => out.push_str(user),
                Some('x') => out.push_str(name),
                _ => out.push('%'),
            }
        }
        if out.starts_with('/') || workdir.is_empty() {
            out
        } else {
            format!("{}/{out}", workdir.trim_end_matches('/'))
        }
    }

    /// The name `%x` stands for: the task's name, else its program's file
    /// name, else `task`.
    pub fn display_name(&self) -> &str {
        if !self.name.is_empty() {
            return &self.name;
        }
        self.command
            .first()
            .and_then(|p| p.rsplit('/').next())
            .filter(|p| !p.is_empty())
            .unwrap_or("task")
    }
}

/// Checks an output pattern: only known escapes ([`OUTPUT_ESCAPES`]), and
/// not a directory's name.
fn check_pattern(pattern: &str) -> Result<(), String> {
    let mut chars = pattern.chars();
    while let Some(c) = chars.next() {
        if c != '%' {
            continue;
        }
        match chars.next() {
            Some(e) if OUTPUT_ESCAPES.iter().any(|(k, _)| *k == e) => {}
            other => {
                let known: Vec<String> = OUTPUT_ESCAPES
                    .iter()
                    .map(|(k, _)| format!("%{k}"))
                    .collect();
                return Err(format!(
                    "unknown escape {:?} in {pattern:?}; the escapes are {}",
                    other.map_or("%".to_string(), |e| format!("%{e}")),
                    known.join(", ")
                ));
            }
        }
    }
    if pattern.ends_with('/') {
        return Err(format!(
            "expected a file name, got the directory {pattern:?}"
        ));
    }
    Ok(())
}

impl SubmitSpec {
    /// The task the core schedules: `id`, arriving at `arrival`, due
    /// `deadline` seconds after `submitted` (both on the core's clock; a task
    /// queued again after a restart arrives later than it was submitted), with
    /// the profile `app` that `self.app` names.
    pub fn to_task(&self, id: String, arrival: f64, submitted: f64, app: AppModel) -> TaskSpec {
        TaskSpec {
            id,
            arrival,
            workload: self.workload,
            mem_gb: self.mem_gb,
            deadline: submitted + self.deadline.unwrap_or(NO_DEADLINE_S),
            weight: self.weight,
            gpus: self.gpus,
            alt_gpus: self.gpus_alt.clone(),
            runtimes: self.runtimes.clone(),
            app,
        }
    }
}

/// A task as `GetTask` and `ListTasks` report it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TaskInfo {
    /// The daemon's id.
    pub id: String,
    /// Where it is.
    pub state: TaskStatus,
    /// Who submitted it.
    pub owner_uid: u32,
    /// The devices it was started on (empty before).
    pub devices: Vec<u32>,
    /// Submission time, unix seconds.
    pub submitted: f64,
    /// Start time, unix seconds.
    pub started: Option<f64>,
    /// End time, unix seconds.
    pub finished: Option<f64>,
    /// The command's exit code (a signal `n` reads as 128 + n).
    pub exit_code: Option<i32>,
    /// GPU energy over its run, J; while an adopted task runs, its energy
    /// so far.
    pub energy_j: Option<f64>,
    /// Why it failed, was rejected or lost.
    pub reason: Option<String>,
    /// What was submitted.
    pub spec: SubmitSpec,
    /// The clocks it ran at and what the DVFS model makes of them, once it
    /// started (docs/dvfs.md §6).
    pub clocks: Option<TaskClocks>,
    /// Why it waits, while it is queued or assigned (the daemon's reading of
    /// its queues and devices when it answered).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub waiting: Option<TaskWait>,
}

/// Why a task that has not started waits, and when it is expected to start.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TaskWait {
    /// In words: `queued on GPU 1 behind t12`, `GPU 2 offline (xid 79: ...)`.
    pub reason: String,
    /// When the policy's current plan starts it, unix seconds (each run
    /// before it taking its expected time); `None` while no plan places it.
    pub expected_start: Option<f64>,
}

/// The clocks a task ran at, on its first device, and the DVFS model's time
/// and power there and at default clocks (docs/dvfs.md §6).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TaskClocks {
    /// Core clock set, MHz.
    pub core_mhz: u32,
    /// Memory clock set, MHz.
    pub mem_mhz: u32,
    /// The voltage the model implies, normalised (V̂).
    pub v: f64,
    /// Core clock, normalised to the device's default (fĉ).
    pub fc: f64,
    /// Memory clock, normalised (fm̂).
    pub fm: f64,
    /// Modelled run time at these clocks, model seconds (t̂).
    pub t: f64,
    /// Modelled power at these clocks, W (P̂).
    pub p: f64,
    /// Modelled run time at default clocks, model seconds (t*).
    pub default_t: f64,
    /// Modelled power at default clocks, W (P*).
    pub default_p: f64,
    /// `energy` or `deadline`, where the policy said.
    pub class: Option<String>,
    /// Whether its clocks were readjusted, where the policy said.
    pub readjusted: Option<bool>,
}

impl TaskClocks {
    fn insert_into(&self, d: &mut Dict) {
        d.insert("core_mhz".into(), owned(self.core_mhz));
        d.insert("mem_mhz".into(), owned(self.mem_mhz));
        for (k, v) in [
            ("v", self.v),
            ("fc", self.fc),
            ("fm", self.fm),
            ("t", self.t),
            ("p", self.p),
            ("default_t", self.default_t),
            ("default_p", self.default_p),
        ] {
            d.insert(k.into(), owned(v));
        }
        if let Some(c) = &self.class {
            d.insert("class".into(), owned(c.as_str()));
        }
        if let Some(r) = self.readjusted {
            d.insert("readjusted".into(), owned(r));
        }
    }

    /// Reads them from a task dictionary: `None` without `core_mhz` (not
    /// started, or a daemon that does not send them).
    fn from_dict(dict: &Dict) -> Result<Option<TaskClocks>, String> {
        if !dict.contains_key("core_mhz") {
            return Ok(None);
        }
        let wrong = |key: &str| format!("task dictionary: {key:?} has the wrong type");
        let num = |key: &str| -> Result<f64, String> {
            dict.get(key)
                .ok_or_else(|| format!("task dictionary without {key:?}"))
                .and_then(|v| f64::try_from(&**v).map_err(|_| wrong(key)))
        };
        let mhz = |key: &str| -> Result<u32, String> {
            dict.get(key)
                .ok_or_else(|| format!("task dictionary without {key:?}"))
                .and_then(|v| u32::try_from(&**v).map_err(|_| wrong(key)))
        };
        Ok(Some(TaskClocks {
            core_mhz: mhz("core_mhz")?,
            mem_mhz: mhz("mem_mhz")?,
            v: num("v")?,
            fc: num("fc")?,
            fm: num("fm")?,
            t: num("t")?,
            p: num("p")?,
            default_t: num("default_t")?,
            default_p: num("default_p")?,
            class: dict
                .get("class")
                .map(|v| {
                    <&str>::try_from(&**v)
                        .map(str::to_string)
                        .map_err(|_| wrong("class"))
                })
                .transpose()?,
            readjusted: dict
                .get("readjusted")
                .map(|v| bool::try_from(&**v).map_err(|_| wrong("readjusted")))
                .transpose()?,
        }))
    }
}

/// What callers other than a task's owner, an admin or root see in place of
/// each `env` value and each argument after `argv[0]`.
pub const REDACTED: &str = "<redacted>";

impl TaskInfo {
    /// The task as others than its owner, admins and root may see it: the
    /// `env` keys with [`REDACTED`] values, and `command` with every argument
    /// after the program replaced by [`REDACTED`] (secrets travel there too).
    pub fn redacted(mut self) -> TaskInfo {
        for value in self.spec.env.values_mut() {
            *value = REDACTED.into();
        }
        for arg in self.spec.command.iter_mut().skip(1) {
            *arg = REDACTED.into();
        }
        self
    }

    /// The `a{sv}` form: the task's own keys and its spec's.
    pub fn to_dict(&self) -> Dict {
        let mut d = Dict::new();
        self.spec.insert_into(&mut d);
        // `name` is always there, even when empty.
        d.insert("name".into(), owned(self.spec.name.as_str()));
        d.insert("id".into(), owned(self.id.as_str()));
        if !self.spec.external_id.is_empty() {
            d.insert("external_id".into(), owned(self.spec.external_id.as_str()));
        }
        d.insert("state".into(), owned(self.state.as_str()));
        d.insert("owner_uid".into(), owned(self.owner_uid));
        d.insert("devices".into(), owned(self.devices.clone()));
        d.insert("submitted".into(), owned(self.submitted));
        if let Some(t) = self.started {
            d.insert("started".into(), owned(t));
        }
        if let Some(t) = self.finished {
            d.insert("finished".into(), owned(t));
        }
        if let Some(c) = self.exit_code {
            d.insert("exit_code".into(), owned(c));
        }
        if let Some(e) = self.energy_j {
            d.insert("energy_j".into(), owned(e));
        }
        if let Some(r) = &self.reason {
            d.insert("reason".into(), owned(r.as_str()));
        }
        if let Some(c) = &self.clocks {
            c.insert_into(&mut d);
        }
        if let Some(w) = &self.waiting {
            d.insert("waiting".into(), owned(w.reason.as_str()));
            if let Some(t) = w.expected_start {
                d.insert("expected_start".into(), owned(t));
            }
        }
        d
    }

    /// Reads a task dictionary; keys this client does not know are ignored.
    pub fn from_dict(dict: &Dict) -> Result<TaskInfo, String> {
        let get = |key: &str| {
            dict.get(key)
                .ok_or_else(|| format!("task dictionary without {key:?}"))
        };
        let wrong = |key: &str| format!("task dictionary: {key:?} has the wrong type");
        let opt_f64 = |key: &str| -> Result<Option<f64>, String> {
            dict.get(key)
                .map(|v| f64::try_from(&**v).map_err(|_| wrong(key)))
                .transpose()
        };
        // A task's output and error are the files its patterns named, no
        // longer patterns (a `%%` made a `%`): read as they are.
        let files = ["output", "error"];
        let spec_dict: Dict = dict
            .iter()
            .filter(|(k, _)| SPEC_KEYS.iter().any(|(s, _, _)| s == k))
            .filter(|(k, _)| !files.contains(&k.as_str()))
            .map(|(k, v)| (k.clone(), clone(v)))
            .collect();
        let mut spec =
            SubmitSpec::from_dict(&spec_dict).map_err(|e| format!("task dictionary: {e}"))?;
        for (key, field) in files.into_iter().zip([&mut spec.output, &mut spec.error]) {
            if let Some(v) = dict.get(key) {
                *field = <&str>::try_from(&**v).map_err(|_| wrong(key))?.to_string();
            }
        }
        if let Some(v) = dict.get("external_id") {
            spec.external_id = <&str>::try_from(&**v)
                .map_err(|_| wrong("external_id"))?
                .to_string();
        }
        Ok(TaskInfo {
            id: <&str>::try_from(&**get("id")?)
                .map_err(|_| wrong("id"))?
                .to_string(),
            state: TaskStatus::parse(
                <&str>::try_from(&**get("state")?).map_err(|_| wrong("state"))?,
            )?,
            owner_uid: u32::try_from(&**get("owner_uid")?).map_err(|_| wrong("owner_uid"))?,
            devices: Vec::<u32>::try_from(clone(get("devices")?)).map_err(|_| wrong("devices"))?,
            submitted: f64::try_from(&**get("submitted")?).map_err(|_| wrong("submitted"))?,
            started: opt_f64("started")?,
            finished: opt_f64("finished")?,
            exit_code: dict
                .get("exit_code")
                .map(|v| i32::try_from(&**v).map_err(|_| wrong("exit_code")))
                .transpose()?,
            energy_j: opt_f64("energy_j")?,
            reason: dict
                .get("reason")
                .map(|v| {
                    <&str>::try_from(&**v)
                        .map(str::to_string)
                        .map_err(|_| wrong("reason"))
                })
                .transpose()?,
            clocks: TaskClocks::from_dict(dict)?,
            waiting: dict
                .get("waiting")
                .map(|v| {
                    Ok::<_, String>(TaskWait {
                        reason: <&str>::try_from(&**v)
                            .map_err(|_| wrong("waiting"))?
                            .to_string(),
                        expected_start: opt_f64("expected_start")?,
                    })
                })
                .transpose()?,
            spec,
        })
    }
}

/// A variant holding `v`.
pub(super) fn owned<'a>(v: impl Into<Value<'a>>) -> OwnedValue {
    v.into()
        .try_into_owned()
        .expect("values without file descriptors always convert")
}

fn clone(v: &OwnedValue) -> OwnedValue {
    v.try_clone()
        .expect("values without file descriptors always clone")
}

fn string(v: &OwnedValue) -> String {
    <&str>::try_from(&**v)
        .expect("signature checked")
        .to_string()
}
