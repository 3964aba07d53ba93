//! DVFS application profiles (formats.md §6 describes their file) and the power model.
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

use std::collections::BTreeMap;

use gpu_agent_plugin_api::{abi_stable::std_types::ROption, AppModel, Clocks, PowerModel};

use crate::catalogue::GpuModel;

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

impl AppLibrary {
    /// Adds `app` under its name; refuses an empty name or one already known
    /// (`default` included), saying why.
    pub fn insert(&mut self, app: AppModel) -> Result<(), String> {
        let name = app.name.as_str();
        if name.is_empty() {
            return Err("must not be empty".into());
        }
        if self.apps.contains_key(name) {
            return Err(format!("{name:?} is already defined"));
        }
        self.apps.insert(name.to_string(), app);
        Ok(())
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
    power_model(app, model).power_w(clocks)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::catalogue;

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
}
