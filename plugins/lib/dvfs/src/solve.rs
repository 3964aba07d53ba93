//! Algorithm 1 (docs/dvfs.md §1.2, §1.3): the energy-optimal setting of one
//! task, with and without a bound on its length.
//!
//! Two searches: `code`, the authors' grid (V_k = 0.5 + 0.05k, fc = g1(V),
//! fm the clamped minimum fm_ξ of E(fm)), and `paper`, a dense V grid (step
//! 1e-4 over [0.5, 1.2]) whose constrained search also raises fm to the least
//! memory clock that meets the bound. `compat` reproduces the authors'
//! results, their two quirks included (Q1: a deadline-prior task is not
//! re-solved; Q2: a failed readjustment keeps its time and power while its
//! clocks read default); without it a deadline-prior task is re-solved on its
//! deadline and a failed search means "does not fit".

use crate::model::{g1, Point, Profile, Setting};

/// Which search Algorithm 1 runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Search {
    /// The authors' code: a 0.05 V grid, 13 points to solve, 16 to readjust.
    #[default]
    Code,
    /// The paper: a dense V grid (step 1e-4) and the least memory clock
    /// that meets a bound.
    Paper,
}

impl Search {
    /// The name the parameters and the command line use.
    pub fn name(self) -> &'static str {
        match self {
            Search::Code => "code",
            Search::Paper => "paper",
        }
    }

    /// The search named `name` (`code` or `paper`).
    pub fn parse(name: &str) -> Option<Search> {
        match name {
            "code" => Some(Search::Code),
            "paper" => Some(Search::Paper),
            _ => None,
        }
    }
}

/// Code grid: points to solve (V ≤ 1.10).
const K_SOLVE: usize = 13;
/// Code grid: points to readjust and for t_min (V ≤ 1.25).
const K_ADJ: usize = 16;
/// Code grid step in V.
const V_STEP_CODE: f64 = 0.05;
/// Dense grid step in V.
const V_STEP_PAPER: f64 = 1e-4;
/// Lowest voltage of either grid.
const V_MIN: f64 = 0.5;
/// Highest voltage of the dense grid.
const V_MAX_PAPER: f64 = 1.2;
/// Relative slack when comparing a length with its bound (fm_req meets it exactly).
const BOUND_EPS: f64 = 1e-12;

/// How Algorithm 1 runs, and the clocks it may choose.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Options {
    /// The search.
    pub search: Search,
    /// Reproduce the authors' results, quirks included (see the module doc).
    pub compat: bool,
    /// Lowest and highest normalised memory clock (the spec's [0.5, 1.2]).
    pub fm_range: (f64, f64),
    /// Lowest and highest normalised core clock a device allows; grid points
    /// outside are skipped (unbounded by default).
    pub fc_range: (f64, f64),
}

impl Default for Options {
    fn default() -> Self {
        Options {
            search: Search::Code,
            compat: false,
            fm_range: (0.5, 1.2),
            fc_range: (0.0, f64::INFINITY),
        }
    }
}

/// Whether a task can meet its deadline at its energy-optimal setting.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Class {
    /// The optimal setting meets the deadline (t̂ ≤ d − a).
    EnergyPrior,
    /// It does not (t̂ > d − a).
    DeadlinePrior,
}

impl Class {
    /// `energy` or `deadline`, as schedules write it.
    pub fn name(self) -> &'static str {
        match self {
            Class::EnergyPrior => "energy",
            Class::DeadlinePrior => "deadline",
        }
    }
}

/// The clocks chosen for one task and what they give.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Choice {
    /// The setting and its time and power.
    pub point: Point,
    /// The task's class.
    pub class: Class,
    /// Whether `point` meets the length bound (always, without one).
    pub fits: bool,
}

impl Options {
    /// The voltages of the grid, ascending; `adjust` takes the readjustment grid.
    fn voltages(&self, adjust: bool) -> impl Iterator<Item = f64> {
        let (step, n) = match self.search {
            Search::Code => (V_STEP_CODE, if adjust { K_ADJ } else { K_SOLVE }),
            Search::Paper => (
                V_STEP_PAPER,
                ((V_MAX_PAPER - V_MIN) / V_STEP_PAPER).round() as usize + 1,
            ),
        };
        (0..n).map(move |k| V_MIN + step * k as f64)
    }

    /// The memory clock clamped to `fm_range`.
    fn clamp_fm(&self, fm: f64) -> f64 {
        fm.max(self.fm_range.0).min(self.fm_range.1)
    }

    /// The grid's points for `profile`: fc = g1(V) within `fc_range`, fm the
    /// clamped fm_ξ (γ = 0 gives the highest fm).
    fn grid<'a>(&'a self, profile: &'a Profile, adjust: bool) -> impl Iterator<Item = Point> + 'a {
        self.voltages(adjust).filter_map(move |v| {
            let fc = g1(v);
            if fc < self.fc_range.0 || fc > self.fc_range.1 {
                return None;
            }
            let fm = self.clamp_fm(profile.fm_xi(v, fc));
            Some(profile.point(Setting { v, fc, fm }))
        })
    }

    /// The energy-optimal point without a bound: the default point, replaced
    /// by each grid point (V ascending) of strictly less energy.
    pub fn solve(&self, profile: &Profile) -> Point {
        let mut best = profile.default_point();
        for p in self.grid(profile, false) {
            if p.energy() < best.energy() {
                best = p;
            }
        }
        best
    }

    /// C(L): the least-energy point whose length is at most `limit`, or
    /// `None`. The code's search takes readjustment-grid points below the
    /// default energy (and, without `compat`, the default point when it
    /// meets the bound); the paper's also raises fm to fm_req where that
    /// meets the bound, and always offers the default point.
    pub fn constrained(&self, profile: &Profile, limit: f64) -> Option<Point> {
        let meets = |p: &Point| p.t <= limit * (1.0 + BOUND_EPS);
        let default = profile.default_point();
        let mut best: Option<Point> = None;
        let mut offer = |p: Point| {
            if meets(&p) && best.is_none_or(|b| p.energy() < b.energy()) {
                best = Some(p);
            }
        };
        match self.search {
            Search::Code => {
                for p in self.grid(profile, true) {
                    if p.energy() < default.energy() {
                        offer(p);
                    }
                }
                if !self.compat {
                    offer(default);
                }
            }
            Search::Paper => {
                for p in self.grid(profile, true) {
                    if meets(&p) {
                        offer(p);
                        continue;
                    }
                    let Setting { v, fc, .. } = p.setting;
                    let den = limit - profile.t0 - profile.d * profile.delta / fc;
                    if den <= 0.0 {
                        continue;
                    }
                    let fm_req = profile.d * (1.0 - profile.delta) / den;
                    let fm = p.setting.fm.max(fm_req).min(self.fm_range.1);
                    offer(profile.point(Setting { v, fc, fm }));
                }
                offer(default);
            }
        }
        best
    }

    /// The fastest point of the readjustment domain (highest V, highest fm).
    pub fn fastest(&self, profile: &Profile) -> Point {
        let v = self.voltages(true).last().unwrap_or(1.0);
        let fc = g1(v).min(self.fc_range.1);
        profile.point(Setting {
            v,
            fc,
            fm: self.fm_range.1,
        })
    }

    /// t_min: the length at the fastest point (docs/dvfs.md §3.2).
    pub fn t_min(&self, profile: &Profile) -> f64 {
        self.fastest(profile).t
    }

    /// The clocks for a task of `profile` that must finish within `window`
    /// of its start (None: no deadline). The optimum when it meets the
    /// window; otherwise the task is deadline-prior and, unless `compat`
    /// (which keeps the optimum, late), re-solved on the window; when
    /// nothing meets it, the fastest point, marked as not fitting.
    pub fn choose(&self, profile: &Profile, window: Option<f64>) -> Choice {
        let best = self.solve(profile);
        let Some(window) = window else {
            return Choice {
                point: best,
                class: Class::EnergyPrior,
                fits: true,
            };
        };
        if best.t <= window {
            return Choice {
                point: best,
                class: Class::EnergyPrior,
                fits: true,
            };
        }
        let (point, fits) = if self.compat {
            (best, false)
        } else {
            match self.constrained(profile, window) {
                Some(p) => (p, true),
                None => (self.fastest(profile), false),
            }
        };
        Choice {
            point,
            class: Class::DeadlinePrior,
            fits,
        }
    }

    /// θ-readjustment of a task currently at `current` into `slack`: C(slack),
    /// or, when it fails, with `compat` the authors' stale result (t and P
    /// unchanged, clocks default; Q2), without it `None` (does not fit).
    pub fn readjust(&self, profile: &Profile, current: Point, slack: f64) -> Option<Point> {
        match self.constrained(profile, slack) {
            Some(p) => Some(p),
            None if self.compat => Some(Point {
                setting: Setting::DEFAULT,
                ..current
            }),
            None => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn close(a: f64, b: f64, tol: f64) -> bool {
        (a - b).abs() <= tol
    }

    fn code() -> Options {
        Options::default()
    }

    fn paper() -> Options {
        Options {
            search: Search::Paper,
            ..Options::default()
        }
    }

    fn matrix_mul() -> Profile {
        Profile {
            p0: 218.1,
            gamma: 32.5,
            c: 31.6,
            delta: 1.0,
            d: 32.14,
            t0: 5.03,
        }
    }

    fn fig3() -> Profile {
        Profile {
            p0: 100.0,
            gamma: 50.0,
            c: 150.0,
            delta: 0.5,
            d: 25.0,
            t0: 5.0,
        }
    }

    fn table3(delta: f64) -> Profile {
        Profile {
            p0: 100.0,
            gamma: 0.0,
            c: 200.0,
            delta,
            d: 25.0,
            t0: 5.0,
        }
    }

    #[test]
    fn matrix_mul_code_grid() {
        let p = code().solve(&matrix_mul());
        assert!(close(p.setting.v, 1.10, 1e-9), "{p:?}");
        assert!(close(p.setting.fc, 1.0477, 1e-4));
        assert!(close(p.setting.fm, 0.5, 1e-12));
        assert!(close(p.t, 35.706, 1e-3));
        assert!(close(p.p, 274.41, 5e-3));
        assert!(close(p.energy(), 9798.1, 0.1));
        assert!(close(matrix_mul().default_point().energy(), 10489.4, 0.1));
    }

    #[test]
    fn matrix_mul_grid_to_1_2_picks_1_15() {
        // The readjustment grid reaches V 1.25; without a binding bound its
        // optimum is the spec's "grid to 1.2" point.
        let p = code().constrained(&matrix_mul(), f64::INFINITY).unwrap();
        assert!(close(p.setting.v, 1.15, 1e-9), "{p:?}");
        assert!(close(p.t, 35.065, 1e-3));
        assert!(close(p.p, 279.07, 5e-3));
    }

    #[test]
    fn fig3_task_code_and_dense() {
        let c = code().solve(&fig3());
        assert!(close(c.setting.v, 0.60, 1e-9), "{c:?}");
        assert!(close(c.setting.fc, 0.7236, 1e-4));
        assert!(close(c.setting.fm, 1.2, 1e-12));
        assert!(close(c.t, 32.691, 1e-3));
        assert!(close(c.p, 199.07, 5e-3));
        let d = paper().solve(&fig3());
        assert!(close(d.setting.v, 0.5813, 1e-4), "{d:?}");
        assert!(close(d.t, 33.233, 2e-3));
        assert!(close(d.p, 195.56, 5e-3));
    }

    #[test]
    fn table3_dense() {
        for (delta, t, p) in [
            (0.0, 25.83, 125.00),
            (0.5, 35.44, 135.20),
            (0.8, 39.10, 141.39),
            (0.2, 30.86, 127.60),
        ] {
            let s = paper().solve(&table3(delta));
            // Within 0.02, as the spec states the match.
            assert!(close(s.t, t, 2e-2), "δ {delta}: {s:?}");
            assert!(close(s.p, p, 2e-2), "δ {delta}: {s:?}");
        }
    }

    #[test]
    fn table3_j2_is_deadline_prior_and_resolved_on_its_deadline() {
        let j2 = table3(1.0);
        let free = paper().solve(&j2);
        assert!(close(free.t, 41.26, 5e-3), "{free:?}");
        let choice = paper().choose(&j2, Some(36.0));
        assert_eq!(choice.class, Class::DeadlinePrior);
        assert!(choice.fits);
        assert!(
            choice.point.t <= 36.0 && choice.point.t > 35.99,
            "{choice:?}"
        );
        // The dense grid's step leaves the point a hair inside the bound.
        assert!(close(choice.point.p, 176.31, 3e-2), "{choice:?}");
        // compat keeps the late optimum (Q1).
        let compat = Options {
            compat: true,
            ..paper()
        }
        .choose(&j2, Some(36.0));
        assert_eq!(compat.point, free);
        assert!(!compat.fits);
    }

    #[test]
    fn worked_example_readjusts_j3_into_its_slack() {
        // docs/dvfs.md §3.2: J3 readjusted to 60 − 25.83 = 34.17, inside
        // [t_min, t̂] = [31.90, 35.44].
        let j3 = table3(0.5);
        let o = paper();
        let cur = o.solve(&j3);
        let slack = 60.0 - o.solve(&table3(0.0)).t;
        let p = o.readjust(&j3, cur, slack).unwrap();
        assert!(p.t <= slack * (1.0 + 1e-12) && p.t > 31.90, "{p:?}");
        assert!(p.energy() < j3.default_point().energy());
    }

    #[test]
    fn a_bound_below_t_min_fails_without_compat_and_is_stale_with_it() {
        let prof = fig3();
        let o = code();
        let t_min = o.t_min(&prof);
        assert!(o.constrained(&prof, t_min * 0.99).is_none());
        let cur = o.solve(&prof);
        assert_eq!(o.readjust(&prof, cur, t_min * 0.99), None);
        let stale = Options { compat: true, ..o }
            .readjust(&prof, cur, t_min * 0.99)
            .unwrap();
        assert_eq!(stale.setting, Setting::DEFAULT);
        assert_eq!((stale.t, stale.p), (cur.t, cur.p));
        let choice = o.choose(&prof, Some(t_min * 0.99));
        assert!(!choice.fits);
        assert_eq!(choice.point.t, t_min);
    }

    #[test]
    fn constrained_results_meet_their_bound_and_never_beat_the_free_optimum() {
        for o in [code(), paper()] {
            for prof in [matrix_mul(), fig3(), table3(0.3), table3(1.0)] {
                let free = Options {
                    search: o.search,
                    ..o
                }
                .constrained(&prof, f64::INFINITY)
                .unwrap();
                let t_min = o.t_min(&prof);
                for k in 0..20 {
                    let limit = t_min + (prof.default_point().t * 1.5 - t_min) * k as f64 / 19.0;
                    if let Some(p) = o.constrained(&prof, limit) {
                        assert!(p.t <= limit * (1.0 + 1e-9), "{:?} {limit} {p:?}", o.search);
                        assert!(p.energy() >= free.energy() - 1e-9);
                    }
                }
            }
        }
    }

    #[test]
    fn fc_range_skips_grid_points() {
        let o = Options {
            fc_range: (0.0, 1.0),
            ..code()
        };
        let p = o.solve(&matrix_mul());
        assert!(p.setting.fc <= 1.0, "{p:?}");
    }
}
