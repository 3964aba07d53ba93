//! Policy parameters on the wire: `SetPolicyWithParameters`' `a{sv}`, the
//! `PolicyParameters` property and `DescribePolicy`'s answer.
//!
//! A parameter's value crosses the bus typed by its declared type (an
//! integer as any D-Bus integer, a number as a double or an integer, a bool
//! as a boolean, a choice or text as a string), or as a string in the form a
//! user writes (`gpuctl policy use NAME --param KEY=VALUE` sends strings).
//! The bus side reads the dictionary into [`ParamValue`]s
//! ([`given_parameters`]); the engine, which knows the policy, checks them
//! against its parameters ([`check_parameters`]). Inside the agent a value is
//! that text, checked by
//! [`ParamInfo::check`](gpu_agent_plugin_api::ParamInfo::check).

use std::collections::HashMap;

use gpu_agent_plugin_api::{ParamInfo, ParamType};
use zbus::zvariant::{OwnedValue, Value};

use crate::task::Dict;

/// A parameter value as it crossed the bus.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub enum ParamValue {
    /// A boolean.
    Bool(bool),
    /// Any D-Bus integer.
    Int(i64),
    /// A double.
    Float(f64),
    /// A string.
    Str(String),
}

impl ParamValue {
    /// Reads a variant; a type no parameter takes (an array, a dictionary, an
    /// unsigned integer beyond i64) is an error naming `key`.
    pub fn from_value(key: &str, value: &Value<'_>) -> Result<ParamValue, String> {
        Ok(match value {
            Value::Value(inner) => return ParamValue::from_value(key, inner),
            Value::Bool(b) => ParamValue::Bool(*b),
            Value::U8(n) => ParamValue::Int(i64::from(*n)),
            Value::I16(n) => ParamValue::Int(i64::from(*n)),
            Value::U16(n) => ParamValue::Int(i64::from(*n)),
            Value::I32(n) => ParamValue::Int(i64::from(*n)),
            Value::U32(n) => ParamValue::Int(i64::from(*n)),
            Value::I64(n) => ParamValue::Int(*n),
            Value::U64(n) => ParamValue::Int(
                i64::try_from(*n).map_err(|_| format!("{key}: {n} is out of range"))?,
            ),
            Value::F64(x) => ParamValue::Float(*x),
            Value::Str(s) => ParamValue::Str(s.to_string()),
            other => {
                return Err(format!(
                "{key}: expected a boolean, an integer, a double or a string, got D-Bus type {}",
                other.value_signature()
            ))
            }
        })
    }

    /// The value as a user writes it, if `info`'s type takes this D-Bus type;
    /// the text is then checked against its range and words.
    pub fn to_text(&self, info: &ParamInfo) -> Result<String, String> {
        let text = match (info.kind, self) {
            (_, ParamValue::Str(s)) => Some(s.clone()),
            (ParamType::Bool, ParamValue::Bool(b)) => Some(b.to_string()),
            (ParamType::Integer | ParamType::Number, ParamValue::Int(n)) => Some(n.to_string()),
            (ParamType::Number, ParamValue::Float(x)) => Some(x.to_string()),
            _ => None,
        };
        let Some(text) = text else {
            return Err(format!(
                "{}: expected {} ({}), got {}",
                info.key,
                info.expected(),
                info.kind.name(),
                self.shown()
            ));
        };
        info.check(&text)?;
        Ok(text)
    }

    /// The value of text `text` as `info`'s type carries it (a word such as
    /// `auto` stays a string).
    pub fn typed(info: &ParamInfo, text: &str) -> ParamValue {
        let parsed = match info.kind {
            ParamType::Bool => text.parse().ok().map(ParamValue::Bool),
            ParamType::Integer => text.parse().ok().map(ParamValue::Int),
            ParamType::Number => text.parse().ok().map(ParamValue::Float),
            ParamType::Choice | ParamType::Text => None,
        };
        parsed.unwrap_or_else(|| ParamValue::Str(text.to_string()))
    }

    /// The value in a message: `true`, `20`, `0.5`, `"auto"`.
    pub fn shown(&self) -> String {
        match self {
            ParamValue::Bool(b) => b.to_string(),
            ParamValue::Int(n) => n.to_string(),
            ParamValue::Float(x) => x.to_string(),
            ParamValue::Str(s) => format!("{s:?}"),
        }
    }

    /// As a variant.
    pub fn to_owned_value(&self) -> OwnedValue {
        let value = match self {
            ParamValue::Bool(b) => Value::from(*b),
            ParamValue::Int(n) => Value::from(*n),
            ParamValue::Float(x) => Value::from(*x),
            ParamValue::Str(s) => Value::from(s.clone()),
        };
        value.try_into().expect("plain values convert")
    }
}

/// Reads `SetPolicyWithParameters`' dictionary: each value as the bus
/// carried it, in key order; a D-Bus type no parameter takes is an error
/// naming its key. Which keys a policy takes, of which types and ranges, is
/// [`check_parameters`]'s to say.
pub fn given_parameters(
    dict: &HashMap<String, OwnedValue>,
) -> Result<Vec<(String, ParamValue)>, String> {
    let mut keys: Vec<&String> = dict.keys().collect();
    keys.sort();
    keys.into_iter()
        .map(|key| Ok((key.clone(), ParamValue::from_value(key, &dict[key])?)))
        .collect()
}

/// Checks parameters [`given_parameters`] read against `infos`: every key
/// must be one of them and every value of its type and in its range. Returns
/// the (key, text) pairs in the order given, or an error naming the first bad
/// key.
pub fn check_parameters(
    infos: &[ParamInfo],
    given: &[(String, ParamValue)],
) -> Result<Vec<(String, String)>, String> {
    given
        .iter()
        .map(|(key, value)| {
            let info = infos
                .iter()
                .find(|i| i.key.as_str() == key)
                .ok_or_else(|| {
                    let takes: Vec<&str> = infos.iter().map(|i| i.key.as_str()).collect();
                    format!(
                        "unknown parameter {key:?} (it takes: {})",
                        if takes.is_empty() {
                            "none".to_string()
                        } else {
                            takes.join(", ")
                        }
                    )
                })?;
            Ok((key.clone(), value.to_text(info)?))
        })
        .collect()
}

/// The `PolicyParameters` property: every parameter of the active policy with
/// the value in use (its default where none was given), typed.
pub fn parameters_to_dict(values: &[(String, ParamValue)]) -> Dict {
    values
        .iter()
        .map(|(k, v)| (k.clone(), v.to_owned_value()))
        .collect()
}

/// A loaded policy as `DescribePolicy` answers it.
#[derive(Debug, Clone)]
pub struct PolicyDescription {
    /// Its name.
    pub name: String,
    /// What it does.
    pub description: String,
    /// Whether it is the active policy.
    pub active: bool,
    /// Each of its parameters, with the value in use when it is active.
    pub parameters: Vec<(ParamInfo, Option<ParamValue>)>,
}

impl PolicyDescription {
    /// `DescribePolicy`'s dictionary: `name`, `description`, `active`, and
    /// `parameters` (one dictionary each: see [`describe_parameter`]).
    pub fn to_dict(&self) -> Dict {
        let parameters: Vec<Dict> = self
            .parameters
            .iter()
            .map(|(info, value)| describe_parameter(info, value.as_ref()))
            .collect();
        let mut d = Dict::new();
        let mut put = |k: &str, v: Value<'_>| {
            d.insert(k.into(), v.try_into().expect("plain values convert"));
        };
        put("name", Value::from(self.name.as_str()));
        put("description", Value::from(self.description.as_str()));
        put("active", Value::from(self.active));
        put("parameters", Value::from(parameters));
        d
    }
}

/// One parameter as `DescribePolicy` lists it: `key`, `type`, `default`,
/// `expected` (the accepted values in words), `description`, and where they
/// apply `minimum`, `minimum_inclusive`, `maximum`, `maximum_inclusive`,
/// `words` (a choice's values, or words a number also takes), and `value`
/// (the value in use, when the policy is active).
pub fn describe_parameter(info: &ParamInfo, value: Option<&ParamValue>) -> Dict {
    let mut d = Dict::new();
    let mut put = |k: &str, v: Value<'_>| {
        d.insert(k.into(), v.try_into().expect("plain values convert"));
    };
    put("key", Value::from(info.key.as_str()));
    put("type", Value::from(info.kind.name()));
    put("default", Value::from(info.default.as_str()));
    put("expected", Value::from(info.expected()));
    put("description", Value::from(info.help.as_str()));
    if let Some(b) = info.min.as_ref().into_option() {
        put("minimum", Value::from(b.value));
        put("minimum_inclusive", Value::from(b.inclusive));
    }
    if let Some(b) = info.max.as_ref().into_option() {
        put("maximum", Value::from(b.value));
        put("maximum_inclusive", Value::from(b.inclusive));
    }
    if !info.words.is_empty() {
        let words: Vec<&str> = info.words.iter().map(|w| w.as_str()).collect();
        put("words", Value::from(words));
    }
    if let Some(v) = value {
        d.insert("value".into(), v.to_owned_value());
    }
    d
}

#[cfg(test)]
mod tests {
    use super::*;
    use gpu_agent_plugin_api::abi_stable::std_types::RStr;

    const AUTO: &[RStr<'static>] = &[RStr::from_str("auto")];

    fn infos() -> [ParamInfo; 3] {
        [
            ParamInfo::integer("budget_ms", "0", "cap").at_least(0.0),
            ParamInfo::number("t0", "auto", "temperature")
                .above(0.0)
                .or_words(AUTO),
            ParamInfo::bool("verbose", "false", "talk"),
        ]
    }

    /// The dictionary read as the bus side reads it, then checked as the
    /// engine checks it.
    fn parameters_from_dict(
        infos: &[ParamInfo],
        dict: &HashMap<String, OwnedValue>,
    ) -> Result<Vec<(String, String)>, String> {
        check_parameters(infos, &given_parameters(dict)?)
    }

    fn dict(pairs: &[(&str, Value<'_>)]) -> HashMap<String, OwnedValue> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.try_to_owned().unwrap()))
            .collect()
    }

    #[test]
    fn typed_values_and_strings_are_read_and_checked() {
        let d = dict(&[
            ("budget_ms", Value::from(20u32)),
            ("t0", Value::from(2.5)),
            ("verbose", Value::from("true")),
        ]);
        assert_eq!(
            parameters_from_dict(&infos(), &d),
            Ok(vec![
                ("budget_ms".into(), "20".into()),
                ("t0".into(), "2.5".into()),
                ("verbose".into(), "true".into()),
            ])
        );
        let d = dict(&[("t0", Value::from("auto"))]);
        assert_eq!(
            parameters_from_dict(&infos(), &d),
            Ok(vec![("t0".into(), "auto".into())])
        );
    }

    #[test]
    fn a_bad_key_type_or_range_is_named() {
        let err = |pairs: &[(&str, Value<'_>)]| parameters_from_dict(&infos(), &dict(pairs));
        assert_eq!(
            err(&[("budget", Value::from(1))]),
            Err("unknown parameter \"budget\" (it takes: budget_ms, t0, verbose)".into())
        );
        assert_eq!(
            err(&[("budget_ms", Value::from(true))]),
            Err("budget_ms: expected an integer >= 0 (integer), got true".into())
        );
        assert_eq!(
            err(&[("budget_ms", Value::from(1.5))]),
            Err("budget_ms: expected an integer >= 0 (integer), got 1.5".into())
        );
        assert_eq!(
            err(&[("budget_ms", Value::from(-1))]),
            Err("budget_ms: expected an integer >= 0, got \"-1\"".into())
        );
        assert_eq!(
            err(&[("verbose", Value::from(vec![1u8]))]),
            Err(
                "verbose: expected a boolean, an integer, a double or a string, got D-Bus type ay"
                    .into()
            )
        );
    }

    #[test]
    fn values_in_use_are_typed_and_described() {
        let [budget, t0, _] = infos();
        assert_eq!(ParamValue::typed(&budget, "20"), ParamValue::Int(20));
        assert_eq!(
            ParamValue::typed(&t0, "auto"),
            ParamValue::Str("auto".into())
        );
        assert_eq!(ParamValue::typed(&t0, "2.5"), ParamValue::Float(2.5));
        let d = describe_parameter(&t0, Some(&ParamValue::Float(2.5)));
        assert_eq!(String::try_from(d["type"].clone()).unwrap(), "number");
        assert_eq!(
            String::try_from(d["expected"].clone()).unwrap(),
            "auto or a number > 0"
        );
        assert_eq!(f64::try_from(&d["minimum"]).unwrap(), 0.0);
        assert!(!bool::try_from(&d["minimum_inclusive"]).unwrap());
        assert_eq!(f64::try_from(&d["value"]).unwrap(), 2.5);
        assert!(!d.contains_key("maximum"));
    }
}
