//! Which parameters a policy is built with: its `[policies.NAME]` table in
//! agent.toml, with the parameters given to `SetPolicyWithParameters` over
//! it; and how the given ones are stored beside the policy's name.

use std::path::Path;

use gpu_agent_dbus::ParamValue;
use gpu_agent_input::InputError;
use gpu_agent_loader::{Plugin, Registry};

use crate::config::Config;

/// (key, value as a user writes it) pairs.
pub type Params = Vec<(String, String)>;

/// The `meta` key the given parameters are stored under (beside `policy`).
pub const META_KEY: &str = "policy_parameters";

/// `name`'s table in `config`, as text checked against `plugin`: an unknown
/// key or a bad value is an error naming the file, line and key.
pub fn table(config: &Config, file: Option<&Path>, plugin: &Plugin) -> Result<Params, InputError> {
    let name = plugin.name();
    let Some(settings) = config.policies.get(name) else {
        return Ok(Vec::new());
    };
    settings
        .iter()
        .map(|s| {
            let field = format!("policies.{name}.{}", s.key);
            let fail = |message: String| match file {
                Some(f) => InputError::at(f, Some(s.line), Some(field.clone()), message),
                None => InputError::at("agent.toml", Some(s.line), Some(field.clone()), message),
            };
            let info = plugin
                .parameters()
                .iter()
                .find(|i| i.key.as_str() == s.key)
                .ok_or_else(|| {
                    let takes: Vec<&str> = plugin.parameter_names().collect();
                    fail(format!(
                        "policy {name} has no parameter {:?} (it takes: {})",
                        s.key,
                        if takes.is_empty() {
                            "none".into()
                        } else {
                            takes.join(", ")
                        }
                    ))
                })?;
            let text = s.value.to_text(info).map_err(|e| {
                // The check's message starts with the key, already named.
                fail(e.split_once(": ").map_or(e.clone(), |(_, m)| m.to_string()))
            })?;
            Ok((s.key.clone(), text))
        })
        .collect()
}

/// Checks every table of `config` whose policy is loaded; a table for a
/// policy that is not is only warned about.
pub fn check_tables(
    config: &Config,
    file: Option<&Path>,
    registry: &Registry,
) -> Result<(), InputError> {
    for name in config.policies.keys() {
        match registry.get(name) {
            Some(plugin) => {
                table(config, file, plugin)?;
            }
            None => log::warn!("[policies.{name}]: no loaded policy is called {name}"),
        }
    }
    Ok(())
}

/// `table` with `given` over it: what the policy is built with.
pub fn effective(table: Params, given: &[(String, String)]) -> Params {
    let mut params = table;
    for (k, v) in given {
        params.retain(|(key, _)| key != k);
        params.push((k.clone(), v.clone()));
    }
    params
}

/// Every parameter of `plugin` with the value in `params`, else its default,
/// typed for the bus.
pub fn in_use(plugin: &Plugin, params: &[(String, String)]) -> Vec<(String, ParamValue)> {
    plugin
        .parameters()
        .iter()
        .map(|info| {
            let text = params
                .iter()
                .rev()
                .find(|(k, _)| k == info.key.as_str())
                .map_or(info.default.as_str(), |(_, v)| v.as_str());
            (info.key.to_string(), ParamValue::typed(info, text))
        })
        .collect()
}

/// The given parameters as stored (a JSON object of strings).
pub fn encode(params: &[(String, String)]) -> String {
    let map: serde_json::Map<String, serde_json::Value> = params
        .iter()
        .map(|(k, v)| (k.clone(), serde_json::Value::String(v.clone())))
        .collect();
    serde_json::Value::Object(map).to_string()
}

/// Reads what [`encode`] stored.
pub fn decode(text: &str) -> Result<Params, String> {
    let map: serde_json::Map<String, serde_json::Value> =
        serde_json::from_str(text).map_err(|e| format!("stored policy parameters: {e}"))?;
    map.into_iter()
        .map(|(k, v)| match v {
            serde_json::Value::String(s) => Ok((k, s)),
            other => Err(format!(
                "stored policy parameter {k}: not a string: {other}"
            )),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn given_parameters_override_the_table_and_survive_storage() {
        let table = vec![
            ("budget_ms".into(), "50".into()),
            ("seed".into(), "3".into()),
        ];
        let given = vec![("budget_ms".to_string(), "20".to_string())];
        assert_eq!(
            effective(table, &given),
            vec![
                ("seed".to_string(), "3".to_string()),
                ("budget_ms".to_string(), "20".to_string())
            ]
        );
        let stored = encode(&given);
        assert_eq!(stored, r#"{"budget_ms":"20"}"#);
        assert_eq!(decode(&stored), Ok(given));
        assert!(decode("[1]").is_err());
    }
}
