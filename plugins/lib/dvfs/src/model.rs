//! The performance and power model of the energy-aware DVFS paper
//! (docs/dvfs.md §1.1, formats.md §6), clocks normalised to default clocks.

use gpu_agent_plugin_api::{AppModel, PowerModel};

/// The voltage that core clock `fc` needs: V(fc) = 2(fc − 0.5)² + 0.5.
pub fn voltage(fc: f64) -> f64 {
    2.0 * (fc - 0.5).powi(2) + 0.5
}

/// The highest core clock voltage `v` allows: g1(V) = √((V − 0.5)/2) + 0.5.
pub fn g1(v: f64) -> f64 {
    ((v - 0.5) / 2.0).max(0.0).sqrt() + 0.5
}

/// One application's (or task's) model: time t = D(δ/fc + (1 − δ)/fm) + t0,
/// power P = p0 + γ·fm + c·V²·fc.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Profile {
    /// Frequency-independent power, W.
    pub p0: f64,
    /// W per unit of normalised memory clock.
    pub gamma: f64,
    /// W coefficient of V²·fc.
    pub c: f64,
    /// Share of the scalable time that follows the core clock, in [0, 1].
    pub delta: f64,
    /// Scalable part of the time at default clocks.
    pub d: f64,
    /// Clock-independent part of the time.
    pub t0: f64,
}

impl Profile {
    /// Application `app` (its time model) on a device whose power
    /// coefficients for it are `power`: the two halves of a policy's or the
    /// daemon's view of a task, as one profile.
    pub fn of(app: &AppModel, power: PowerModel) -> Profile {
        Profile {
            p0: power.p0,
            gamma: power.gamma,
            c: power.c,
            delta: app.delta,
            d: app.d,
            t0: app.t0,
        }
    }
}

/// A voltage and the two normalised clocks.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Setting {
    /// Voltage, normalised (1 at default clocks).
    pub v: f64,
    /// Core clock, normalised.
    pub fc: f64,
    /// Memory clock, normalised.
    pub fm: f64,
}

impl Setting {
    /// The default clocks (1, 1, 1).
    pub const DEFAULT: Setting = Setting {
        v: 1.0,
        fc: 1.0,
        fm: 1.0,
    };
}

/// A setting with the run time and power it gives.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Point {
    /// The clocks.
    pub setting: Setting,
    /// Run time (the profile's unit).
    pub t: f64,
    /// Power, W.
    pub p: f64,
}

impl Point {
    /// Energy t·P.
    pub fn energy(&self) -> f64 {
        self.t * self.p
    }
}

impl Profile {
    /// Run time at core clock `fc` and memory clock `fm`.
    pub fn time(&self, fc: f64, fm: f64) -> f64 {
        self.d * (self.delta / fc + (1.0 - self.delta) / fm) + self.t0
    }

    /// Power at voltage `v` and clocks `fc`, `fm`.
    pub fn power(&self, v: f64, fc: f64, fm: f64) -> f64 {
        self.p0 + self.gamma * fm + self.c * v * v * fc
    }

    /// The point of `setting`.
    pub fn point(&self, setting: Setting) -> Point {
        Point {
            setting,
            t: self.time(setting.fc, setting.fm),
            p: self.power(setting.v, setting.fc, setting.fm),
        }
    }

    /// The point at the clocks actually set (`fc`, `fm`), V implied by `fc`
    /// (docs/dvfs.md §6: re-evaluated after rounding to supported clocks).
    pub fn at_clocks(&self, fc: f64, fm: f64) -> Point {
        self.point(Setting {
            v: voltage(fc),
            fc,
            fm,
        })
    }

    /// The point at default clocks: t* = D + t0, P* = p0 + γ + c.
    pub fn default_point(&self) -> Point {
        self.point(Setting::DEFAULT)
    }

    /// The unconstrained minimum of the convex E(fm) at (`v`, `fc`):
    /// fm_ξ = √((p0 + c·V²·fc)·D·(1 − δ) / (γ·(t0 + Dδ/fc))); infinite when γ = 0.
    pub fn fm_xi(&self, v: f64, fc: f64) -> f64 {
        let den = self.gamma * (self.t0 + self.d * self.delta / fc);
        let num = (self.p0 + self.c * v * v * fc) * self.d * (1.0 - self.delta);
        if den <= 0.0 {
            if num <= 0.0 && self.gamma > 0.0 {
                0.0
            } else {
                f64::INFINITY
            }
        } else {
            (num / den).sqrt()
        }
    }

    /// This application's shape scaled to a task that takes `t_star` at
    /// default clocks: D_task = t*·D/(D + t0), t0_task = t*·t0/(D + t0)
    /// (docs/dvfs.md §1.1). A profile with D + t0 = 0 keeps all of `t_star`
    /// in D.
    pub fn scaled_to(&self, t_star: f64) -> Profile {
        let total = self.d + self.t0;
        let (d, t0) = if total > 0.0 {
            (t_star * self.d / total, t_star * self.t0 / total)
        } else {
            (t_star, 0.0)
        };
        Profile { d, t0, ..*self }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn voltage_and_g1_are_inverse_and_one_at_default() {
        assert_eq!(voltage(1.0), 1.0);
        assert_eq!(g1(1.0), 1.0);
        for fc in [0.5, 0.7, 0.9, 1.05, 1.1] {
            assert!((g1(voltage(fc)) - fc).abs() < 1e-12);
        }
    }

    #[test]
    fn scaling_keeps_the_shape_and_sets_the_default_time() {
        let p = Profile {
            p0: 218.1,
            gamma: 32.5,
            c: 31.6,
            delta: 1.0,
            d: 32.14,
            t0: 5.03,
        };
        let s = p.scaled_to(100.0);
        assert!((s.default_point().t - 100.0).abs() < 1e-9);
        assert!((s.d / s.t0 - p.d / p.t0).abs() < 1e-9);
        assert_eq!(s.p0, p.p0);
    }
}
