//! DVFS application profiles (formats.md §6) and the power model.
//!
//! Clocks are normalised to the device's default clocks. The voltage needed for
//! core clock fc is V = 2(fc - 0.5)^2 + 0.5; power is P = p0 + gamma*fm + c*V^2*fc.
//!
//! The built-in `default` profile is frequency-insensitive in the sense of the
//! paper's model with delta = 0.5, d = 1, t0 = 0, and takes its power
//! coefficients from the device's catalogue entry so that it draws the model's
//! typical board power (the default power limit) at default clocks:
//! p0 = idle power, and the rest, P_board - P_idle, split 20 % to the memory term
//! (gamma) and 80 % to the core term (c). At fc = fm = 1, V = 1 and
//! P = idle + 0.2*(board - idle) + 0.8*(board - idle) = board.

use std::{collections::BTreeMap, path::Path};

use gpu_agent_plugin_api::{abi_stable::std_types::ROption, AppModel, Clocks, PowerModel};
use serde::Deserialize;
use toml::Spanned;

use super::catalogue::GpuModel;
use super::input_error::{line_of, InputError};

/// Name of the built-in profile.
pub const DEFAULT_APP: &str = "default";

/// Share of a device's dynamic board power the `default` profile gives the memory term.
const DEFAULT_MEMORY_SHARE: f64 = 0.2;

/// Known application profiles by name; always holds `default`.
#[derive(Debug, Clone)]
pub struct AppLibrary {
    apps: BTreeMap<String, AppModel>,
}

impl Default for AppLibrary {
    fn default() -> Self {
        let default = AppModel::builtin_default();
        AppLibrary {
            apps: BTreeMap::from([(DEFAULT_APP.to_string(), default)]),
        }
    }
}

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

impl AppLibrary {
    /// The built-in library plus the profiles in `path`.
    pub fn load(path: &Path) -> Result<AppLibrary, InputError> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| InputError::at(path, None, None, format!("cannot read: {e}")))?;
        AppLibrary::parse(path, &text)
    }

    /// Parses a profile library; `path` only names it in errors.
    pub fn parse(path: &Path, text: &str) -> Result<AppLibrary, InputError> {
        let raw: RawLibrary = toml::from_str(text).map_err(|e| {
            let line = e.span().map(|s| line_of(text, s.start));
            InputError::at(path, line, None, e.message().trim_end().to_string())
        })?;
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
            let name = app.name.get_ref().clone();
            let line = Some(line_of(text, app.name.span().start));
            let field = Some(format!("app[{i}].name"));
            if name.is_empty() || name == DEFAULT_APP || library.apps.contains_key(&name) {
                let why = if name.is_empty() {
                    "must not be empty".to_string()
                } else {
                    format!("{name:?} is already defined")
                };
                return Err(InputError::at(path, line, field, why));
            }
            let power = ROption::RSome(PowerModel { p0, gamma, c });
            library.apps.insert(
                name.clone(),
                AppModel {
                    name: name.into(),
                    delta,
                    d,
                    t0,
                    power,
                },
            );
        }
        Ok(library)
    }

    /// The profile named `name`.
    pub fn get(&self, name: &str) -> Option<&AppModel> {
        self.apps.get(name)
    }

    /// Known profile names, sorted.
    pub fn names(&self) -> Vec<&str> {
        self.apps.keys().map(String::as_str).collect()
    }
}

/// Power coefficients of `app` on `model` (the `default` derivation when the app has none).
pub fn power_model(app: &AppModel, model: &GpuModel) -> PowerModel {
    match app.power {
        ROption::RSome(p) => p,
        ROption::RNone => {
            let dynamic = model.power_default_w - model.idle_w;
            PowerModel {
                p0: model.idle_w,
                gamma: DEFAULT_MEMORY_SHARE * dynamic,
                c: (1.0 - DEFAULT_MEMORY_SHARE) * dynamic,
            }
        }
    }
}

/// Power (W) drawn running `app` on `model` at `clocks`.
pub fn power_w(app: &AppModel, model: &GpuModel, clocks: Clocks) -> f64 {
    let p = power_model(app, model);
    let v = 2.0 * (clocks.core - 0.5).powi(2) + 0.5;
    p.p0 + p.gamma * clocks.mem + p.c * v * v * clocks.core
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::catalogue;

    #[test]
    fn default_profile_draws_board_power_at_default_clocks() {
        let lib = AppLibrary::default();
        let app = lib.get(DEFAULT_APP).unwrap();
        for model in catalogue::CATALOGUE {
            let p = power_w(app, model, Clocks::DEFAULT);
            assert!(
                (p - model.power_default_w).abs() < 1e-9,
                "{}: {p}",
                model.name
            );
        }
        // T4: idle 10 W, dynamic 60 W → gamma 12, c 48. At fc = 0.5: V = 0.5,
        // P = 10 + 12*1 + 48*0.25*0.5 = 28 W.
        let t4 = catalogue::lookup("T4").unwrap();
        assert!(
            (power_w(
                app,
                t4,
                Clocks {
                    core: 0.5,
                    mem: 1.0
                }
            ) - 28.0)
                .abs()
                < 1e-9
        );
    }

    #[test]
    fn parses_profiles_and_names_bad_fields() {
        let text = "[[app]]\nname = \"matrixMul\"\np0 = 218.1\ngamma = 32.5\nc = 31.6\ndelta = 1.0\nd = 32.14\nt0 = 5.03\n";
        let lib = AppLibrary::parse(Path::new("apps.toml"), text).unwrap();
        assert_eq!(lib.names(), vec!["default", "matrixMul"]);
        let m = lib.get("matrixMul").unwrap();
        // P(1,1) = 218.1 + 32.5 + 31.6 = 282.2 W whatever the device.
        assert!(
            (power_w(m, catalogue::lookup("T4").unwrap(), Clocks::DEFAULT) - 282.2).abs() < 1e-9
        );
        let bad = AppLibrary::parse(
            Path::new("apps.toml"),
            &text.replace("delta = 1.0", "delta = 1.5"),
        )
        .unwrap_err();
        assert_eq!(
            bad.to_string(),
            "apps.toml:6: app[0].delta: expected a number from 0 to 1, got 1.5"
        );
        let dup = AppLibrary::parse(
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
