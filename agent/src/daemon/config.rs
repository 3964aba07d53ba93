//! The daemon's configuration file (`/etc/gpu-agent/agent.toml`).

use std::path::{Path, PathBuf};

use serde::Deserialize;
use toml::Spanned;

use crate::model::input_error::{line_of, InputError};

/// Where the daemon reads its configuration unless told otherwise.
pub const DEFAULT_CONFIG: &str = "/etc/gpu-agent/agent.toml";
/// Where the daemon keeps its state unless told otherwise.
pub const DEFAULT_STATE_DIR: &str = "/var/lib/gpu-agent";

/// Which bus the daemon serves on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Bus {
    /// The system bus (production).
    System,
    /// The session bus of the user running the daemon.
    Session,
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
    pub cancel_grace_s: f64,
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
            cancel_grace_s: 10.0,
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
}

impl Config {
    /// Reads `path`; relative paths in it are taken from its directory.
    pub fn load(path: &Path) -> Result<Config, InputError> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| InputError::at(path, None, None, format!("cannot read: {e}")))?;
        Config::parse(path, &text)
    }

    /// Parses a configuration; `path` names it in errors and anchors relative paths.
    pub fn parse(path: &Path, text: &str) -> Result<Config, InputError> {
        let raw: RawConfig = toml::from_str(text).map_err(|e| {
            let line = e.span().map(|s| line_of(text, s.start));
            InputError::at(path, line, None, e.message().trim_end().to_string())
        })?;
        let base = path.parent().unwrap_or(Path::new("."));
        let anchor = |p: PathBuf| if p.is_absolute() { p } else { base.join(p) };
        let number = |v: Spanned<f64>, key: &str, zero_ok: bool| {
            let x = *v.get_ref();
            if x.is_finite() && (x > 0.0 || zero_ok && x == 0.0) {
                Ok(x)
            } else {
                Err(InputError::at(
                    path,
                    Some(line_of(text, v.span().start)),
                    Some(key.into()),
                    format!(
                        "expected a number {} 0, got {x}",
                        if zero_ok { ">=" } else { ">" }
                    ),
                ))
            }
        };
        let d = Config::default();
        Ok(Config {
            policy: raw.policy,
            plugin_dir: raw.plugin_dir.map(anchor),
            state_dir: raw.state_dir.map_or(d.state_dir, anchor),
            mock: raw.mock.map(anchor),
            bus: raw.bus.unwrap_or(d.bus),
            time_scale: raw
                .time_scale
                .map(|v| number(v, "time_scale", false))
                .transpose()?
                .unwrap_or(d.time_scale),
            apps: raw.apps.map(anchor),
            keep_tasks_on_stop: raw.keep_tasks_on_stop.unwrap_or(d.keep_tasks_on_stop),
            cancel_grace_s: raw
                .cancel_grace_s
                .map(|v| number(v, "cancel_grace_s", true))
                .transpose()?
                .unwrap_or(d.cancel_grace_s),
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
                    keep_tasks_on_stop = true\ncancel_grace_s = 0\n";
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
                cancel_grace_s: 0.0,
            }
        );
        assert_eq!(
            Config::parse(Path::new("a.toml"), "").unwrap(),
            Config::default()
        );
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
            "agent.toml:2: time_scale: expected a number > 0, got 0"
        );
        assert_eq!(
            err("cancel_grace_s = -1.0"),
            "agent.toml:1: cancel_grace_s: expected a number >= 0, got -1"
        );
        assert!(err("polcy = \"fifo\"")
            .starts_with("agent.toml:1: unknown field `polcy`, expected one of"));
        assert!(err("bus = \"user\"").starts_with("agent.toml:1: unknown variant `user`"));
    }
}
