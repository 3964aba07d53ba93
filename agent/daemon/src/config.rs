//! The daemon's configuration file (`/etc/gpu-agent/agent.toml`).

use std::path::{Path, PathBuf};
use std::time::Duration;

use std::collections::BTreeMap;

use gpu_agent_dbus::ParamValue;
use serde::Deserialize;
use toml::Spanned;

use gpu_agent_input::{line_of, parse_toml, read_text, InputError};
use gpu_agent_loader::Registry;

/// Where the daemon reads its configuration unless told otherwise.
pub const DEFAULT_CONFIG: &str = "/etc/gpu-agent/agent.toml";
/// Where the daemon keeps its state unless told otherwise.
pub const DEFAULT_STATE_DIR: &str = "/var/lib/gpu-agent";

/// The largest `policy_budget_ms`: a minute, twice the unit's
/// `WatchdogSec=30s` (a budget near that leaves the watchdog to end a hung
/// policy's daemon instead of the budget).
pub const MAX_POLICY_BUDGET_MS: u64 = 60_000;

/// A span of time as agent.toml or a D-Bus argument gives it, in seconds,
/// checked once where it enters: a finite number from 0 to
/// [`Seconds::MAX_S`]. From then on it is a [`Duration`] that no later
/// conversion can fail on.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Default, serde::Serialize, Deserialize,
)]
#[serde(try_from = "f64", into = "f64")]
pub struct Seconds(Duration);

impl Seconds {
    /// The longest span a setting or an argument may give: a year.
    pub const MAX_S: f64 = 365.0 * 86_400.0;

    /// `x` seconds; the error says what was expected and what came.
    pub fn new(x: f64) -> Result<Seconds, String> {
        if x.is_finite() && (0.0..=Seconds::MAX_S).contains(&x) {
            Ok(Seconds(Duration::from_secs_f64(x)))
        } else {
            Err(format!(
                "expected seconds from 0 to {} (a year), got {x:?}",
                Seconds::MAX_S
            ))
        }
    }

    /// As a duration.
    pub fn duration(self) -> Duration {
        self.0
    }

    /// In seconds.
    pub fn as_secs_f64(self) -> f64 {
        self.0.as_secs_f64()
    }
}

impl TryFrom<f64> for Seconds {
    type Error = String;
    fn try_from(x: f64) -> Result<Seconds, String> {
        Seconds::new(x)
    }
}

impl From<Seconds> for f64 {
    fn from(s: Seconds) -> f64 {
        s.as_secs_f64()
    }
}

impl std::fmt::Display for Seconds {
    /// The number of seconds, as agent.toml writes it.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.as_secs_f64())
    }
}

/// The fastest `time_scale` (agent.toml, `--time-scale`) the daemon runs at.
pub const MAX_TIME_SCALE: f64 = 1e6;

/// Checks a `time_scale`: a finite number > 0 and at most
/// [`MAX_TIME_SCALE`]; the error says what was expected.
pub fn time_scale(x: f64) -> Result<f64, String> {
    if x.is_finite() && x > 0.0 && x <= MAX_TIME_SCALE {
        Ok(x)
    } else {
        Err(format!(
            "expected a number > 0 and <= {MAX_TIME_SCALE}, got {x:?}"
        ))
    }
}

/// Which bus the daemon serves on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Bus {
    /// The system bus (production).
    System,
    /// The session bus of the user running the daemon.
    Session,
}

/// What the daemon does with the clocks of an online GPU that runs no task.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum IdleClocks {
    /// Leaves them to the driver.
    #[default]
    Default,
    /// Locks them at the lowest supported clocks (core, and memory where
    /// the GPU allows it) until a task starts on it.
    Min,
}

impl IdleClocks {
    /// Its value as agent.toml writes it.
    pub fn name(self) -> &'static str {
        match self {
            IdleClocks::Default => "default",
            IdleClocks::Min => "min",
        }
    }
}

/// The configuration, every key optional.
#[derive(Debug, Clone, PartialEq)]
pub struct Config {
    /// The policy at first start (later starts keep the last `SetPolicy`).
    pub policy: Option<String>,
    /// Where policy plugins are loaded from.
    pub plugin_dir: Option<PathBuf>,
    /// Where the state database and task logs live.
    pub state_dir: PathBuf,
    /// A host file: run on mock GPUs instead of NVML.
    pub mock: Option<PathBuf>,
    /// The bus to serve on.
    pub bus: Bus,
    /// Simulated tasks run this many times faster than modelled.
    pub time_scale: f64,
    /// DVFS application profiles (formats.md §6).
    pub apps: Option<PathBuf>,
    /// Whether task processes keep running when the daemon stops.
    pub keep_tasks_on_stop: bool,
    /// Seconds between SIGTERM and SIGKILL when a task is cancelled.
    pub cancel_grace_s: Seconds,
    /// The clocks of an idle GPU.
    pub idle_clocks: IdleClocks,
    /// How long a policy call (its constructor, each event) may take before
    /// it is a policy fault (`crate::policy_thread`).
    pub policy_budget: std::time::Duration,
    /// Where `/metrics` is served (Prometheus); `None`: nowhere.
    pub metrics_listen: Option<std::net::SocketAddr>,
    /// The `node` label of every `/metrics` series; `None`: the host name.
    pub metrics_node: Option<String>,
    /// `[policies.NAME]` tables: the parameters each policy is built with
    /// (checked against the plugin once it is loaded).
    pub policies: BTreeMap<String, Vec<Setting>>,
    /// The `[mig]` table: how the agent changes MIG layouts.
    pub mig: MigSettings,
    /// The `[slurm]` table: how adopted Slurm jobs are checked with Slurm.
    pub slurm: SlurmSettings,
}

/// The `[slurm]` table (docs/slurm.md, "When the epilog never reaches the
/// agent").
#[derive(Debug, Clone, PartialEq)]
pub struct SlurmSettings {
    /// The command that says which of the adopted jobs Slurm still runs;
    /// `{jobs}` in an argument is replaced by their ids, comma-separated.
    /// It prints `JOBID STATE` lines (squeue's `%A %T`).
    pub check_command: Vec<String>,
    /// How often the adopted jobs are checked (and once at start).
    pub check_interval_s: Seconds,
    /// How long one check may take before it counts as Slurm not answering.
    pub check_timeout_s: Seconds,
    /// How long past its deadline an adoption lasts while Slurm cannot be
    /// asked (or for an adoption that is not a Slurm job's).
    pub lease_grace_s: Seconds,
}

impl Default for SlurmSettings {
    fn default() -> Self {
        SlurmSettings {
            check_command: [
                "squeue",
                "--noheader",
                "--states=all",
                "--format=%A %T",
                "--jobs={jobs}",
            ]
            .map(String::from)
            .to_vec(),
            check_interval_s: Seconds(Duration::from_secs(60)),
            check_timeout_s: Seconds(Duration::from_secs(10)),
            lease_grace_s: Seconds(Duration::from_secs(600)),
        }
    }
}

/// The most seconds between two checks of the adopted jobs (a day).
const MAX_CHECK_INTERVAL_S: f64 = 86_400.0;

/// A check's interval or timeout: from 1 s to a day.
fn check_seconds(x: f64) -> Result<Seconds, String> {
    if (1.0..=MAX_CHECK_INTERVAL_S).contains(&x) {
        Seconds::new(x)
    } else {
        Err(format!(
            "expected seconds from 1 to {MAX_CHECK_INTERVAL_S}, got {x}"
        ))
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawSlurm {
    check_command: Option<Spanned<Vec<String>>>,
    check_interval_s: Option<Spanned<f64>>,
    check_timeout_s: Option<Spanned<f64>>,
    lease_grace_s: Option<Spanned<f64>>,
}

/// The `[mig]` table (docs/mig.md §6.3, §6.4).
#[derive(Debug, Clone, PartialEq)]
pub struct MigSettings {
    /// Whether policies may ask for layouts (`Decision::MigLayout`).
    pub allow_policy: bool,
    /// The command that resets a GPU whose MIG mode is pending, where the
    /// backend cannot reset it itself (NVML has no reset); `{bus_id}` is
    /// replaced by the GPU's PCI bus id. Empty: never reset (the change
    /// ends `reset-required`).
    pub reset_command: Vec<String>,
}

impl Default for MigSettings {
    fn default() -> Self {
        MigSettings {
            allow_policy: false,
            reset_command: ["nvidia-smi", "--gpu-reset", "-i", "{bus_id}"]
                .map(String::from)
                .to_vec(),
        }
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawMig {
    allow_policy: Option<bool>,
    reset_command: Option<Vec<String>>,
}

/// One `KEY = VALUE` of a `[policies.NAME]` table.
#[derive(Debug, Clone, PartialEq)]
pub struct Setting {
    /// The parameter.
    pub key: String,
    /// Its value, typed as the file wrote it.
    pub value: ParamValue,
    /// The line it is on.
    pub line: u64,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            policy: None,
            plugin_dir: None,
            state_dir: DEFAULT_STATE_DIR.into(),
            mock: None,
            bus: Bus::System,
            time_scale: 1.0,
            apps: None,
            keep_tasks_on_stop: false,
            cancel_grace_s: Seconds(Duration::from_secs(10)),
            idle_clocks: IdleClocks::Default,
            policy_budget: crate::policy_thread::DEFAULT_BUDGET,
            metrics_listen: None,
            metrics_node: None,
            policies: BTreeMap::new(),
            mig: MigSettings::default(),
            slurm: SlurmSettings::default(),
        }
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawConfig {
    policy: Option<String>,
    plugin_dir: Option<PathBuf>,
    state_dir: Option<PathBuf>,
    mock: Option<PathBuf>,
    bus: Option<Bus>,
    time_scale: Option<Spanned<f64>>,
    apps: Option<PathBuf>,
    keep_tasks_on_stop: Option<bool>,
    cancel_grace_s: Option<Spanned<f64>>,
    idle_clocks: Option<Spanned<String>>,
    policy_budget_ms: Option<Spanned<i64>>,
    metrics_listen: Option<Spanned<String>>,
    metrics_node: Option<Spanned<String>>,
    policies: Option<BTreeMap<String, BTreeMap<String, Spanned<toml::Value>>>>,
    mig: Option<RawMig>,
    slurm: Option<RawSlurm>,
}

/// Settings given on `gpu-agentd`'s command line; they override the file's.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Overrides {
    /// `--mock`.
    pub mock: Option<PathBuf>,
    /// `--session`.
    pub session: bool,
    /// `--time-scale`.
    pub time_scale: Option<f64>,
    /// `--state-dir`.
    pub state_dir: Option<PathBuf>,
    /// `--plugin-dir`.
    pub plugin_dir: Option<PathBuf>,
}

impl Overrides {
    /// `config` with these settings in place of its own.
    pub fn apply(&self, mut config: Config) -> Config {
        if let Some(mock) = &self.mock {
            config.mock = Some(mock.clone());
        }
        if self.session {
            config.bus = Bus::Session;
        }
        if let Some(x) = self.time_scale {
            config.time_scale = x;
        }
        if let Some(dir) = &self.state_dir {
            config.state_dir = dir.clone();
        }
        if let Some(dir) = &self.plugin_dir {
            config.plugin_dir = Some(dir.clone());
        }
        config
    }
}

/// Where the daemon's settings come from: read at start, and again by `Reload`.
#[derive(Debug, Clone, PartialEq)]
pub struct Source {
    /// `--config`; without it, [`DEFAULT_CONFIG`] when that file exists
    /// and the daemon serves the system bus.
    pub file: Option<PathBuf>,
    /// The command line's settings.
    pub overrides: Overrides,
    /// Where plugins are loaded from when neither the command line nor the
    /// file says.
    pub default_plugin_dir: PathBuf,
}

impl Source {
    /// The file to read: `--config`, else [`DEFAULT_CONFIG`] if it exists,
    /// unless the daemon serves a session bus (`--session`): a user's or a
    /// test's daemon takes no setting of the host's service it was not
    /// given.
    pub fn path(&self) -> Option<PathBuf> {
        self.file.clone().or_else(|| {
            let default = Path::new(DEFAULT_CONFIG);
            (!self.overrides.session && default.exists()).then(|| default.to_path_buf())
        })
    }

    /// Reads the settings: the file (defaults without one), then the command
    /// line over it. Returns them and the plugin directory they name.
    pub fn read(&self) -> Result<(Config, PathBuf), InputError> {
        let file = match self.path() {
            Some(path) => Config::load(&path)?,
            None => Config::default(),
        };
        let config = self.overrides.apply(file);
        let plugin_dir = config
            .plugin_dir
            .clone()
            .unwrap_or_else(|| self.default_plugin_dir.clone());
        Ok((config, plugin_dir))
    }
}

impl Source {
    /// Loads the plugins of `dir` (the plugin directory `config` names) and
    /// checks that the policy `config` names is among them. An error names
    /// where the setting came from: the file, line and key, or the command
    /// line's option.
    pub fn plugins(&self, config: &Config, dir: &Path) -> Result<Registry, InputError> {
        let file = self.path();
        let registry = Registry::load_dir(dir).map_err(|e| {
            if self.overrides.plugin_dir.is_some() {
                InputError::at("--plugin-dir", None, None, e.to_string())
            } else if let Some(file) = file.as_deref().filter(|_| config.plugin_dir.is_some()) {
                InputError::at(
                    file,
                    key_line(file, "plugin_dir"),
                    Some("plugin_dir".into()),
                    e.to_string(),
                )
            } else {
                InputError::at(
                    dir,
                    None,
                    None,
                    format!("the default plugin directory: {e}"),
                )
            }
        })?;
        if let (Some(name), Some(file)) = (&config.policy, &file) {
            if let Err(e) = registry.find(name) {
                return Err(InputError::at(
                    file,
                    key_line(file, "policy"),
                    Some("policy".into()),
                    e.to_string(),
                ));
            }
        }
        Ok(registry)
    }
}

/// The line of `path` that sets the top-level `key`, if it can be told.
fn key_line(path: &Path, key: &str) -> Option<u64> {
    let text = std::fs::read_to_string(path).ok()?;
    let keys: std::collections::HashMap<String, Spanned<toml::Value>> =
        toml::from_str(&text).ok()?;
    Some(line_of(&text, keys.get(key)?.span().start))
}

impl Config {
    /// The keys a running daemon only reads at start: a change to them takes
    /// effect at the next start. (`plugin_dir`, `keep_tasks_on_stop`,
    /// `cancel_grace_s`, `idle_clocks`, `apps` and `policy_budget_ms` take
    /// effect at `Reload`; the budget for the policies built from then on,
    /// the profiles for the tasks submitted and jobs adopted from then on.)
    pub const START_ONLY_KEYS: [&'static str; 9] = [
        "policy",
        "state_dir",
        "mock",
        "bus",
        "time_scale",
        "metrics_listen",
        "metrics_node",
        "mig",
        "slurm",
    ];

    /// The keys of [`Config::START_ONLY_KEYS`] whose values differ in `other`.
    pub fn start_only_changes(&self, other: &Config) -> Vec<&'static str> {
        let differs = [
            self.policy != other.policy,
            self.state_dir != other.state_dir,
            self.mock != other.mock,
            self.bus != other.bus,
            self.time_scale != other.time_scale,
            self.metrics_listen != other.metrics_listen,
            self.metrics_node != other.metrics_node,
            self.mig != other.mig,
            self.slurm != other.slurm,
        ];
        Config::START_ONLY_KEYS
            .into_iter()
            .zip(differs)
            .filter_map(|(key, differs)| differs.then_some(key))
            .collect()
    }

    /// Reads `path`; relative paths in it are taken from its directory.
    pub fn load(path: &Path) -> Result<Config, InputError> {
        Config::parse(path, &read_text(path)?)
    }

    /// Parses a configuration; `path` names it in errors and anchors relative paths.
    pub fn parse(path: &Path, text: &str) -> Result<Config, InputError> {
        let raw: RawConfig = parse_toml(path, text)?;
        let base = path.parent().unwrap_or(Path::new("."));
        let anchor = |p: PathBuf| if p.is_absolute() { p } else { base.join(p) };
        // Each number into its typed form, the error naming file, line and key.
        fn typed<T>(
            (path, text): (&Path, &str),
            v: Spanned<f64>,
            key: &str,
            check: impl Fn(f64) -> Result<T, String>,
        ) -> Result<T, InputError> {
            check(*v.get_ref()).map_err(|e| {
                InputError::at(
                    path,
                    Some(line_of(text, v.span().start)),
                    Some(key.into()),
                    e,
                )
            })
        }
        let file = (path, text);
        let metrics_listen = raw
            .metrics_listen
            .map(|v| {
                v.get_ref().parse().map_err(|_| {
                    InputError::at(
                        path,
                        Some(line_of(text, v.span().start)),
                        Some("metrics_listen".into()),
                        format!(
                            "expected an address and port such as \"127.0.0.1:9464\", got {:?}",
                            v.get_ref()
                        ),
                    )
                })
            })
            .transpose()?;
        let metrics_node = raw
            .metrics_node
            .map(|v| {
                if v.get_ref().trim().is_empty() {
                    Err(InputError::at(
                        path,
                        Some(line_of(text, v.span().start)),
                        Some("metrics_node".into()),
                        format!(
                            "expected the node's name (leave it out for the host name), got {:?}",
                            v.get_ref()
                        ),
                    ))
                } else {
                    Ok(v.into_inner())
                }
            })
            .transpose()?;
        let mut policies = BTreeMap::new();
        for (name, table) in raw.policies.unwrap_or_default() {
            let mut settings = Vec::new();
            for (key, v) in table {
                let line = line_of(text, v.span().start);
                let value = match v.into_inner() {
                    toml::Value::Boolean(b) => ParamValue::Bool(b),
                    toml::Value::Integer(n) => ParamValue::Int(n),
                    toml::Value::Float(x) => ParamValue::Float(x),
                    toml::Value::String(s) => ParamValue::Str(s),
                    other => {
                        return Err(InputError::at(
                            path,
                            Some(line),
                            Some(format!("policies.{name}.{key}")),
                            format!(
                                "expected a boolean, an integer, a number or a string, got a {}",
                                other.type_str()
                            ),
                        ))
                    }
                };
                settings.push(Setting { key, value, line });
            }
            policies.insert(name, settings);
        }
        let d = Config::default();
        Ok(Config {
            metrics_listen,
            metrics_node,
            policy: raw.policy,
            plugin_dir: raw.plugin_dir.map(anchor),
            state_dir: raw.state_dir.map_or(d.state_dir, anchor),
            mock: raw.mock.map(anchor),
            bus: raw.bus.unwrap_or(d.bus),
            time_scale: raw
                .time_scale
                .map(|v| typed(file, v, "time_scale", time_scale))
                .transpose()?
                .unwrap_or(d.time_scale),
            apps: raw.apps.map(anchor),
            keep_tasks_on_stop: raw.keep_tasks_on_stop.unwrap_or(d.keep_tasks_on_stop),
            cancel_grace_s: raw
                .cancel_grace_s
                .map(|v| typed(file, v, "cancel_grace_s", Seconds::new))
                .transpose()?
                .unwrap_or(d.cancel_grace_s),
            idle_clocks: raw
                .idle_clocks
                .map(|v| {
                    let value = v.get_ref().as_str();
                    [IdleClocks::Default, IdleClocks::Min]
                        .into_iter()
                        .find(|c| c.name() == value)
                        .ok_or_else(|| {
                            InputError::at(
                                path,
                                Some(line_of(text, v.span().start)),
                                Some("idle_clocks".into()),
                                format!("expected \"default\" or \"min\", got {value:?}"),
                            )
                        })
                })
                .transpose()?
                .unwrap_or(d.idle_clocks),
            policy_budget: raw
                .policy_budget_ms
                .map(|v| {
                    let ms = *v.get_ref();
                    u64::try_from(ms)
                        .ok()
                        .filter(|ms| (1..=MAX_POLICY_BUDGET_MS).contains(ms))
                        .map(std::time::Duration::from_millis)
                        .ok_or_else(|| {
                            InputError::at(
                                path,
                                Some(line_of(text, v.span().start)),
                                Some("policy_budget_ms".into()),
                                format!(
                                    "expected whole milliseconds from 1 to {MAX_POLICY_BUDGET_MS}, got {ms}"
                                ),
                            )
                        })
                })
                .transpose()?
                .unwrap_or(d.policy_budget),
            policies,
            mig: raw.mig.map_or(d.mig.clone(), |m| MigSettings {
                allow_policy: m.allow_policy.unwrap_or(d.mig.allow_policy),
                reset_command: m.reset_command.unwrap_or(d.mig.reset_command),
            }),
            slurm: match raw.slurm {
                None => d.slurm,
                Some(r) => {
                    let ds = d.slurm;
                    let check_command = match r.check_command {
                        None => ds.check_command,
                        Some(v) if v.get_ref().is_empty() => {
                            return Err(InputError::at(
                                path,
                                Some(line_of(text, v.span().start)),
                                Some("slurm.check_command".into()),
                                "expected a program and its arguments, got an empty list",
                            ))
                        }
                        Some(v) => v.into_inner(),
                    };
                    let seconds = |v: Option<Spanned<f64>>,
                                   key: &str,
                                   check: fn(f64) -> Result<Seconds, String>,
                                   default: Seconds| {
                        v.map(|v| typed(file, v, &format!("slurm.{key}"), check))
                            .transpose()
                            .map(|s| s.unwrap_or(default))
                    };
                    SlurmSettings {
                        check_command,
                        check_interval_s: seconds(
                            r.check_interval_s,
                            "check_interval_s",
                            check_seconds,
                            ds.check_interval_s,
                        )?,
                        check_timeout_s: seconds(
                            r.check_timeout_s,
                            "check_timeout_s",
                            check_seconds,
                            ds.check_timeout_s,
                        )?,
                        lease_grace_s: seconds(
                            r.lease_grace_s,
                            "lease_grace_s",
                            Seconds::new,
                            ds.lease_grace_s,
                        )?,
                    }
                }
            },
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_key_reads_and_relative_paths_anchor_at_the_file() {
        let text = "policy = \"greedy-eft\"\nplugin_dir = \"plugins\"\nstate_dir = \"/srv/state\"\n\
                    mock = \"host.toml\"\nbus = \"session\"\ntime_scale = 50.0\napps = \"/etc/apps.toml\"\n\
                    keep_tasks_on_stop = true\ncancel_grace_s = 0\nmetrics_listen = \"127.0.0.1:9464\"\n\
                    metrics_node = \"gpu01\"\n\
                    idle_clocks = \"min\"\npolicy_budget_ms = 250\n[policies.sa-greedy]\nbudget_ms = 50\nt0 = \"auto\"\n";
        let c = Config::parse(Path::new("/etc/gpu-agent/agent.toml"), text).unwrap();
        assert_eq!(
            c,
            Config {
                policy: Some("greedy-eft".into()),
                plugin_dir: Some("/etc/gpu-agent/plugins".into()),
                state_dir: "/srv/state".into(),
                mock: Some("/etc/gpu-agent/host.toml".into()),
                bus: Bus::Session,
                time_scale: 50.0,
                apps: Some("/etc/apps.toml".into()),
                keep_tasks_on_stop: true,
                cancel_grace_s: Seconds::default(),
                idle_clocks: IdleClocks::Min,
                policy_budget: std::time::Duration::from_millis(250),
                metrics_listen: Some("127.0.0.1:9464".parse().unwrap()),
                metrics_node: Some("gpu01".into()),
                policies: [(
                    "sa-greedy".to_string(),
                    vec![
                        Setting {
                            key: "budget_ms".into(),
                            value: ParamValue::Int(50),
                            line: 15,
                        },
                        Setting {
                            key: "t0".into(),
                            value: ParamValue::Str("auto".into()),
                            line: 16,
                        },
                    ]
                )]
                .into(),
                mig: MigSettings::default(),
                slurm: SlurmSettings::default(),
            }
        );
        assert_eq!(
            Config::parse(Path::new("a.toml"), "\nmetrics_listen = \"localhost\"\n")
                .unwrap_err()
                .to_string(),
            "a.toml:2: metrics_listen: expected an address and port such as \"127.0.0.1:9464\", got \"localhost\""
        );
        assert_eq!(
            Config::parse(Path::new("a.toml"), "\n\nmetrics_node = \" \"\n")
                .unwrap_err()
                .to_string(),
            "a.toml:3: metrics_node: expected the node's name (leave it out for the host name), got \" \""
        );
        assert_eq!(
            Config::parse(Path::new("a.toml"), "").unwrap(),
            Config::default()
        );
        let err = Config::parse(
            Path::new("a.toml"),
            "[policies.sos]\nalpha = 0.6\nmodel = [1]\n",
        )
        .unwrap_err();
        assert_eq!(
            err.to_string(),
            "a.toml:3: policies.sos.model: expected a boolean, an integer, a number or a string, got a array"
        );
    }

    #[test]
    fn the_command_line_overrides_the_file() {
        let file = Config {
            policy: Some("fifo".into()),
            plugin_dir: Some("/etc/plugins".into()),
            time_scale: 2.0,
            ..Config::default()
        };
        let overrides = Overrides {
            mock: Some("host.toml".into()),
            session: true,
            time_scale: Some(50.0),
            state_dir: Some("/tmp/state".into()),
            plugin_dir: Some("/opt/plugins".into()),
        };
        assert_eq!(
            overrides.apply(file.clone()),
            Config {
                policy: Some("fifo".into()),
                plugin_dir: Some("/opt/plugins".into()),
                state_dir: "/tmp/state".into(),
                mock: Some("host.toml".into()),
                bus: Bus::Session,
                time_scale: 50.0,
                ..Config::default()
            }
        );
        assert_eq!(Overrides::default().apply(file.clone()), file);
    }

    #[test]
    fn a_source_reads_its_file_then_the_command_line() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("agent.toml");
        std::fs::write(&file, "cancel_grace_s = 3\nplugin_dir = \"plugins\"\n").unwrap();
        let mut source = Source {
            file: Some(file.clone()),
            overrides: Overrides::default(),
            default_plugin_dir: "/usr/lib/gpu-agent/plugins".into(),
        };
        let (config, plugins) = source.read().unwrap();
        assert_eq!(config.cancel_grace_s, Seconds::new(3.0).unwrap());
        assert_eq!(plugins, dir.path().join("plugins"));
        source.overrides.plugin_dir = Some("/opt/p".into());
        assert_eq!(source.read().unwrap().1, Path::new("/opt/p"));
        std::fs::write(&file, "plugin_dir = 3\n").unwrap();
        let err = source.read().unwrap_err().to_string();
        assert!(err.starts_with(&format!("{}:1: ", file.display())), "{err}");
    }

    #[test]
    fn start_only_changes_name_the_keys() {
        let running = Config::default();
        let changed = Config {
            policy: Some("greedy-eft".into()),
            time_scale: 2.0,
            plugin_dir: Some("/elsewhere".into()),
            cancel_grace_s: Seconds::new(1.0).unwrap(),
            keep_tasks_on_stop: true,
            ..Config::default()
        };
        assert_eq!(
            running.start_only_changes(&changed),
            vec!["policy", "time_scale"]
        );
        assert!(running.start_only_changes(&running).is_empty());
        let every = Config {
            policy: Some("p".into()),
            state_dir: "/s".into(),
            mock: Some("m".into()),
            bus: Bus::Session,
            time_scale: 3.0,
            apps: Some("a".into()),
            metrics_listen: Some("[::1]:9464".parse().unwrap()),
            metrics_node: Some("gpu01".into()),
            mig: MigSettings {
                allow_policy: true,
                ..MigSettings::default()
            },
            slurm: SlurmSettings {
                lease_grace_s: Seconds::new(1.0).unwrap(),
                ..SlurmSettings::default()
            },
            ..Config::default()
        };
        assert_eq!(running.start_only_changes(&every), Config::START_ONLY_KEYS);
    }

    /// The keys the parser knows, as its error for an unknown key lists them.
    fn known_keys() -> Vec<String> {
        let message = Config::parse(Path::new("a.toml"), "no_such_key = 1")
            .unwrap_err()
            .to_string();
        let list = message
            .split_once("expected one of ")
            .expect("serde lists the fields")
            .1;
        list.split(", ")
            .map(|k| k.trim().trim_matches('`').to_string())
            .collect()
    }

    #[test]
    fn the_packaged_agent_toml_is_the_defaults_and_documents_every_key() {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../packaging/agent.toml");
        let text = std::fs::read_to_string(&path).unwrap();
        let packaged = Config::parse(Path::new("/etc/gpu-agent/agent.toml"), &text).unwrap();
        assert_eq!(packaged, Config::default());

        // Every commented `# key = value` line, uncommented, is a valid setting.
        let mut keys = Vec::new();
        let mut examples = String::new();
        for line in text.lines() {
            let Some(setting) = line.strip_prefix("# ") else {
                continue;
            };
            // A table (`# [policies.NAME]`, its settings indented) documents its key.
            if let Some(table) = setting.strip_prefix('[') {
                let key = table.split(['.', ']']).next().unwrap_or_default();
                if !keys.iter().any(|k| k == key) {
                    keys.push(key.to_string());
                }
                continue;
            }
            if let Some((key, _)) = setting.split_once(" = ") {
                if key.chars().all(|c| c.is_ascii_lowercase() || c == '_') {
                    keys.push(key.to_string());
                    examples.push_str(setting);
                    examples.push('\n');
                }
            }
        }
        let example = Config::parse(Path::new("/etc/gpu-agent/agent.toml"), &examples)
            .unwrap_or_else(|e| panic!("the commented examples: {e}"));
        // The defaults it claims are the defaults.
        let d = Config::default();
        assert_eq!(example.state_dir, d.state_dir);
        assert_eq!(example.bus, d.bus);
        assert_eq!(example.time_scale, d.time_scale);
        assert_eq!(example.keep_tasks_on_stop, d.keep_tasks_on_stop);
        assert_eq!(example.cancel_grace_s, d.cancel_grace_s);
        assert_eq!(example.idle_clocks, d.idle_clocks);
        assert_eq!(example.policy_budget, d.policy_budget);
        assert_eq!(example.mig, d.mig);
        assert_eq!(
            example.plugin_dir.as_deref(),
            Some(Path::new("/usr/lib/gpu-agent/plugins"))
        );
        keys.sort();
        let mut known = known_keys();
        known.sort();
        assert_eq!(keys, known, "every key, documented once");
    }

    #[test]
    fn bad_keys_and_values_are_named() {
        let err = |text: &str| {
            Config::parse(Path::new("agent.toml"), text)
                .unwrap_err()
                .to_string()
        };
        assert_eq!(
            err("\ntime_scale = 0.0\n"),
            "agent.toml:2: time_scale: expected a number > 0 and <= 1000000, got 0.0"
        );
        assert_eq!(
            err("time_scale = 1e300"),
            "agent.toml:1: time_scale: expected a number > 0 and <= 1000000, got 1e300"
        );
        assert_eq!(
            err("cancel_grace_s = -1.0"),
            "agent.toml:1: cancel_grace_s: expected seconds from 0 to 31536000 (a year), got -1.0"
        );
        for ms in ["0", "60001", "-5"] {
            assert_eq!(
                err(&format!("\npolicy_budget_ms = {ms}")),
                format!("agent.toml:2: policy_budget_ms: expected whole milliseconds from 1 to 60000, got {ms}")
            );
        }
        // Accepted before, then panicked the engine at the first Cancel
        // ("cannot convert float seconds to Duration").
        assert_eq!(
            err("\ncancel_grace_s = 1e300"),
            "agent.toml:2: cancel_grace_s: expected seconds from 0 to 31536000 (a year), got 1e300"
        );
        assert!(err("cancel_grace_s = nan").ends_with("got NaN"));
        assert!(err("polcy = \"fifo\"")
            .starts_with("agent.toml:1: unknown field `polcy`, expected one of"));
        assert!(err("bus = \"user\"").starts_with("agent.toml:1: bus: unknown variant `user`"));
        assert!(err("[mig]\nallow_policy = \"yes\"\n").starts_with(
            "agent.toml:2: mig.allow_policy: invalid type: string \"yes\", expected a boolean"
        ));
        // A top-level value of the wrong type (what `systemctl reload` reports).
        assert_eq!(
            err("policy = \"fifo\"\ncancel_grace_s = \"ten\""),
            "agent.toml:2: cancel_grace_s: invalid type: string \"ten\", expected f64"
        );
        assert!(err("[mig]\nreset = []\n").starts_with(
            "agent.toml:2: mig: unknown field `reset`, expected `allow_policy` or `reset_command`"
        ));
        assert_eq!(
            Config::parse(
                Path::new("agent.toml"),
                "[mig]\nallow_policy = true\nreset_command = []\n"
            )
            .unwrap()
            .mig,
            MigSettings {
                allow_policy: true,
                reset_command: Vec::new()
            }
        );
        assert_eq!(
            err("\n\nidle_clocks = \"lowest\""),
            "agent.toml:3: idle_clocks: expected \"default\" or \"min\", got \"lowest\""
        );
    }

    #[test]
    fn the_slurm_table_reads_and_each_bad_value_is_named() {
        let c = Config::parse(
            Path::new("a.toml"),
            "[slurm]\ncheck_command = [\"jobs\", \"{jobs}\"]\ncheck_interval_s = 5\nlease_grace_s = 0\n",
        )
        .unwrap();
        assert_eq!(
            c.slurm,
            SlurmSettings {
                check_command: vec!["jobs".into(), "{jobs}".into()],
                check_interval_s: Seconds::new(5.0).unwrap(),
                lease_grace_s: Seconds::new(0.0).unwrap(),
                ..SlurmSettings::default()
            }
        );
        let err = |text: &str| {
            Config::parse(Path::new("a.toml"), text)
                .unwrap_err()
                .to_string()
        };
        assert_eq!(
            err("[slurm]\ncheck_interval_s = 0.5\n"),
            "a.toml:2: slurm.check_interval_s: expected seconds from 1 to 86400, got 0.5"
        );
        assert_eq!(
            err("[slurm]\n\ncheck_timeout_s = 86401\n"),
            "a.toml:3: slurm.check_timeout_s: expected seconds from 1 to 86400, got 86401"
        );
        assert!(err("[slurm]\nlease_grace_s = -1\n").starts_with("a.toml:2: slurm.lease_grace_s: "));
        assert_eq!(
            err("[slurm]\ncheck_command = []\n"),
            "a.toml:2: slurm.check_command: expected a program and its arguments, got an empty list"
        );
        assert!(err("[slurm]\ninterval = 5\n").contains("interval"));
    }
}
