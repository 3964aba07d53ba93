//! Reading DVFS application profiles (formats.md §6).

use std::path::Path;

use gpu_agent_core::apps::AppLibrary;
use gpu_agent_input::{line_of, parse_toml, read_text, InputError};
use gpu_agent_plugin_api::{abi_stable::std_types::ROption, AppModel, PowerModel};
use serde::Deserialize;
use toml::Spanned;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawLibrary {
    #[serde(default)]
    app: Vec<RawApp>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawApp {
    name: Spanned<String>,
    p0: Spanned<f64>,
    gamma: Spanned<f64>,
    c: Spanned<f64>,
    delta: Spanned<f64>,
    d: Spanned<f64>,
    t0: Spanned<f64>,
}

/// The built-in library plus the profiles in `path`.
pub fn load(path: &Path) -> Result<AppLibrary, InputError> {
    parse(path, &read_text(path)?)
}

/// Parses a profile library; `path` only names it in errors.
pub fn parse(path: &Path, text: &str) -> Result<AppLibrary, InputError> {
    let raw: RawLibrary = parse_toml(path, text)?;
    let mut library = AppLibrary::default();
    for (i, app) in raw.app.into_iter().enumerate() {
        let err = |v: &Spanned<f64>, key: &str, expected: &str| {
            InputError::at(
                path,
                Some(line_of(text, v.span().start)),
                Some(format!("app[{i}].{key}")),
                format!("expected {expected}, got {}", v.get_ref()),
            )
        };
        let at_least_zero = |v: &Spanned<f64>, key: &str| {
            let x = *v.get_ref();
            if x.is_finite() && x >= 0.0 {
                Ok(x)
            } else {
                Err(err(v, key, "a number >= 0"))
            }
        };
        let (p0, gamma, c) = (
            at_least_zero(&app.p0, "p0")?,
            at_least_zero(&app.gamma, "gamma")?,
            at_least_zero(&app.c, "c")?,
        );
        let (d, t0) = (at_least_zero(&app.d, "d")?, at_least_zero(&app.t0, "t0")?);
        let delta = *app.delta.get_ref();
        if !(0.0..=1.0).contains(&delta) {
            return Err(err(&app.delta, "delta", "a number from 0 to 1"));
        }
        if d + t0 <= 0.0 {
            return Err(err(&app.t0, "t0", "d + t0 > 0"));
        }
        let power = ROption::RSome(PowerModel { p0, gamma, c });
        let model = AppModel {
            name: app.name.get_ref().as_str().into(),
            delta,
            d,
            t0,
            power,
        };
        library.insert(model).map_err(|why| {
            let line = Some(line_of(text, app.name.span().start));
            InputError::at(path, line, Some(format!("app[{i}].name")), why)
        })?;
    }
    Ok(library)
}

#[cfg(test)]
mod tests {
    use gpu_agent_core::apps::power_w;
    use gpu_agent_core::catalogue;
    use gpu_agent_plugin_api::Clocks;

    use super::*;

    #[test]
    fn parses_profiles_and_names_bad_fields() {
        let text = "[[app]]\nname = \"matrixMul\"\np0 = 218.1\ngamma = 32.5\nc = 31.6\ndelta = 1.0\nd = 32.14\nt0 = 5.03\n";
        let lib = parse(Path::new("apps.toml"), text).unwrap();
        assert_eq!(lib.names(), vec!["default", "matrixMul"]);
        let m = lib.get("matrixMul").unwrap();
        // P(1,1) = 218.1 + 32.5 + 31.6 = 282.2 W whatever the device.
        assert!(
            (power_w(m, catalogue::lookup("T4").unwrap(), Clocks::DEFAULT) - 282.2).abs() < 1e-9
        );
        let bad = parse(
            Path::new("apps.toml"),
            &text.replace("delta = 1.0", "delta = 1.5"),
        )
        .unwrap_err();
        assert_eq!(
            bad.to_string(),
            "apps.toml:6: app[0].delta: expected a number from 0 to 1, got 1.5"
        );
        let dup = parse(
            Path::new("apps.toml"),
            &text.replace("matrixMul", "default"),
        )
        .unwrap_err();
        assert_eq!(
            dup.to_string(),
            "apps.toml:2: app[0].name: \"default\" is already defined"
        );
    }
}
