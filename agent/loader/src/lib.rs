//! Loading policy plugins (shared libraries) and instantiating policies.
//!
//! Every `.so` in a directory is loaded on its own with
//! `lib_header_from_path(..).init_root_module()`; a file that cannot be opened,
//! is not a gpu-agent plugin, or was built against another ABI is reported with
//! its path and reason and skipped (ARCHITECTURE.md, invariant 10).

use std::path::{Path, PathBuf};

use abi_stable::library::{lib_header_from_path, LibraryError};
use gpu_agent_plugin_api::instance::PolicyInstance;
use gpu_agent_plugin_api::{
    abi_stable::std_types::RSlice, check_params, Param, ParamInfo, PolicyModRef, ABI_VERSION,
};

/// Errors from finding, loading and instantiating policies.
#[derive(Debug, thiserror::Error)]
pub enum PluginError {
    /// The plugin directory cannot be listed.
    #[error("cannot read plugin directory {dir}: {cause}")]
    Directory {
        /// The directory.
        dir: PathBuf,
        /// Why.
        cause: std::io::Error,
    },
    /// A plugin file cannot be used.
    #[error("{path}: {reason}")]
    Load {
        /// The file.
        path: PathBuf,
        /// Why.
        reason: String,
    },
    /// No loaded plugin has this name.
    #[error("unknown policy {name:?}; available: {available}")]
    UnknownPolicy {
        /// The name asked for.
        name: String,
        /// Loaded policy names, comma-separated.
        available: String,
    },
    /// The policy refused its parameters or failed to start.
    #[error("policy {policy}: {reason}")]
    Instantiate {
        /// The policy.
        policy: String,
        /// Why.
        reason: String,
    },
}

/// Where plugins are looked for by default: the packaged directory when the
/// agent was built with `GPU_AGENT_PLUGIN_DIR`, else the running binary's.
pub fn default_dir() -> std::io::Result<PathBuf> {
    if let Some(dir) = option_env!("GPU_AGENT_PLUGIN_DIR") {
        return Ok(PathBuf::from(dir));
    }
    let exe = std::env::current_exe()?;
    Ok(exe.parent().unwrap_or(Path::new("/")).to_path_buf())
}

/// One loaded policy plugin.
#[derive(Clone, Copy)]
pub struct Plugin {
    module: PolicyModRef,
}

impl Plugin {
    /// Loads and checks one plugin file.
    pub fn load(path: &Path) -> Result<Plugin, PluginError> {
        let fail = |reason: String| PluginError::Load {
            path: path.to_owned(),
            reason,
        };
        let header = lib_header_from_path(path).map_err(|e| fail(describe(&e)))?;
        let module = header
            .init_root_module::<PolicyModRef>()
            .map_err(|e| fail(describe(&e)))?;
        let version = module.abi_version();
        if version.as_str() != ABI_VERSION {
            return Err(fail(format!(
                "built for policy ABI {version:?}; this agent speaks {ABI_VERSION:?}"
            )));
        }
        Ok(Plugin { module })
    }

    /// Policy name.
    pub fn name(&self) -> &'static str {
        self.module.name().as_str()
    }

    /// One-line description.
    pub fn description(&self) -> &'static str {
        self.module.description().as_str()
    }

    /// The parameters it takes, with types, defaults, ranges and help.
    pub fn parameters(&self) -> &'static [ParamInfo] {
        self.module.parameters().as_slice()
    }

    /// Names of the parameters it takes.
    pub fn parameter_names(&self) -> impl Iterator<Item = &'static str> {
        self.parameters().iter().map(|p| p.key.as_str())
    }

    /// Checks `params` against the declared parameters without building a
    /// policy: an unknown key, a wrong type or a value out of range is an
    /// error naming the key.
    pub fn check(&self, params: &[(String, String)]) -> Result<(), PluginError> {
        check_params(
            self.parameters(),
            params.iter().map(|(k, v)| (k.as_str(), v.as_str())),
        )
        .map_err(|reason| PluginError::Instantiate {
            policy: self.name().into(),
            reason,
        })
    }

    /// Builds a policy object from `params`, each checked first ([`Plugin::check`]).
    pub fn instantiate(&self, params: &[(String, String)]) -> Result<PolicyInstance, PluginError> {
        let fail = |reason: String| PluginError::Instantiate {
            policy: self.name().into(),
            reason,
        };
        self.check(params)?;
        let params: Vec<Param> = params
            .iter()
            .map(|(k, v)| Param {
                key: k.as_str().into(),
                value: v.as_str().into(),
            })
            .collect();
        let policy = (self.module.new())(RSlice::from_slice(&params))
            .into_result()
            .map_err(|e| fail(e.into_string()))?;
        Ok(PolicyInstance::new(self.name(), policy))
    }
}

/// One line on why abi_stable refused a file (its own reports run to pages).
fn describe(error: &LibraryError) -> String {
    match error {
        LibraryError::OpenError { err, .. } => format!("cannot open as a shared library: {err}"),
        LibraryError::GetSymbolError { symbol, .. } => {
            format!("not a gpu-agent policy plugin (no {} symbol)", String::from_utf8_lossy(symbol).trim_end_matches('\0'))
        }
        LibraryError::IncompatibleVersionNumber { expected_version, actual_version, .. } => format!(
            "built against plugin API {actual_version}, incompatible with this agent's {expected_version}"
        ),
        LibraryError::AbiInstability(_) => {
            "its plugin ABI layout differs from this agent's (built against another plugin API)".into()
        }
        other => other.to_string().lines().map(str::trim).find(|l| !l.is_empty()).unwrap_or("unknown error").into(),
    }
}

/// The plugins found in a directory, and the files that failed.
pub struct Registry {
    /// Usable plugins, by file name order; names are unique.
    pub plugins: Vec<Plugin>,
    /// Files that were skipped, with why.
    pub failures: Vec<PluginError>,
}

impl Registry {
    /// Loads every `*.so` in `dir`, in file name order.
    pub fn load_dir(dir: &Path) -> Result<Registry, PluginError> {
        let dir_error = |cause| PluginError::Directory {
            dir: dir.to_owned(),
            cause,
        };
        let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
            .map_err(dir_error)?
            .map(|e| e.map(|e| e.path()))
            .collect::<Result<_, _>>()
            .map_err(dir_error)?;
        files.retain(|p| p.extension().is_some_and(|e| e == "so"));
        files.sort();
        let mut registry = Registry {
            plugins: Vec::new(),
            failures: Vec::new(),
        };
        for path in files {
            match Plugin::load(&path) {
                Ok(plugin) if registry.get(plugin.name()).is_some() => {
                    registry.failures.push(PluginError::Load {
                        path,
                        reason: format!(
                            "policy {:?} is already provided by an earlier file",
                            plugin.name()
                        ),
                    })
                }
                Ok(plugin) => registry.plugins.push(plugin),
                Err(e) => registry.failures.push(e),
            }
        }
        Ok(registry)
    }

    /// The plugin providing policy `name`.
    pub fn get(&self, name: &str) -> Option<&Plugin> {
        self.plugins.iter().find(|p| p.name() == name)
    }

    /// The plugin providing policy `name`, or an error listing the available ones.
    pub fn find(&self, name: &str) -> Result<&Plugin, PluginError> {
        self.get(name).ok_or_else(|| PluginError::UnknownPolicy {
            name: name.into(),
            available: {
                let mut names: Vec<_> = self.plugins.iter().map(|p| p.name()).collect();
                names.sort_unstable();
                if names.is_empty() {
                    "none (no plugins loaded)".into()
                } else {
                    names.join(", ")
                }
            },
        })
    }
}
