//! Fitting an application's model to measurements (docs/dvfs.md §2).
//!
//! Per application, time ≈ w0 + w1/fc + w2/fm (t0 = w0, D = w1 + w2,
//! δ = w1/D) and power ≈ w0 + w1·fm + w2·V²·fc (p0, γ, c), every
//! coefficient ≥ 0. Two solvers: non-negative least squares, exact for three
//! coefficients (every active set is tried), and the authors' Lasso
//! (scikit-learn's `Lasso(alpha = 0.01, positive = True, fit_intercept =
//! False)`: (1/2n)‖y − Xw‖² + α‖w‖₁ with w ≥ 0, solved by coordinate descent).

use thiserror::Error;

use crate::model::{voltage, Profile};

/// The authors' Lasso penalty.
pub const LASSO_ALPHA: f64 = 0.01;

/// A solver for the coefficients.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Method {
    /// Non-negative least squares.
    #[default]
    Nnls,
    /// The authors' positive Lasso, α = 0.01.
    Lasso,
}

impl Method {
    /// `nnls` or `lasso`.
    pub fn name(self) -> &'static str {
        match self {
            Method::Nnls => "nnls",
            Method::Lasso => "lasso",
        }
    }
}

/// One measurement, clocks normalised to the base clocks.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Sample {
    /// Core clock / base core clock.
    pub fc: f64,
    /// Memory clock / base memory clock.
    pub fm: f64,
    /// Run time (> 0), any unit.
    pub time: f64,
    /// Power (> 0), W.
    pub power: f64,
}

/// Why samples cannot be fitted.
#[derive(Debug, Error, PartialEq)]
pub enum FitError {
    /// Fewer distinct (fc, fm) points than coefficients.
    #[error("{0} distinct clock points; the fit needs at least 3")]
    TooFewPoints(usize),
}

/// A fitted profile and how well it reproduces its samples.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Fit {
    /// The fitted model.
    pub profile: Profile,
    /// Mean absolute percentage error of the time, as a fraction.
    pub mape_time: f64,
    /// Mean absolute percentage error of the power, as a fraction.
    pub mape_power: f64,
}

/// Fits `samples` of one application with `method`.
pub fn fit(samples: &[Sample], method: Method) -> Result<Fit, FitError> {
    let mut points: Vec<(f64, f64)> = samples.iter().map(|s| (s.fc, s.fm)).collect();
    points.sort_by(|a, b| a.partial_cmp(b).expect("finite clocks"));
    points.dedup();
    if points.len() < 3 {
        return Err(FitError::TooFewPoints(points.len()));
    }
    let time_x: Vec<[f64; 3]> = samples
        .iter()
        .map(|s| [1.0, 1.0 / s.fc, 1.0 / s.fm])
        .collect();
    let power_x: Vec<[f64; 3]> = samples
        .iter()
        .map(|s| [1.0, s.fm, voltage(s.fc).powi(2) * s.fc])
        .collect();
    let time_y: Vec<f64> = samples.iter().map(|s| s.time).collect();
    let power_y: Vec<f64> = samples.iter().map(|s| s.power).collect();
    let solve = |x: &[[f64; 3]], y: &[f64]| match method {
        Method::Nnls => nnls(x, y),
        Method::Lasso => lasso(x, y, LASSO_ALPHA),
    };
    let wt = solve(&time_x, &time_y);
    let wp = solve(&power_x, &power_y);
    let d = wt[1] + wt[2];
    let profile = Profile {
        p0: wp[0],
        gamma: wp[1],
        c: wp[2],
        delta: if d > 0.0 { wt[1] / d } else { 0.5 },
        d,
        t0: wt[0],
    };
    Ok(Fit {
        profile,
        mape_time: mape(&time_x, &time_y, &wt),
        mape_power: mape(&power_x, &power_y, &wp),
    })
}

fn dot(a: &[f64; 3], w: &[f64; 3]) -> f64 {
    a[0] * w[0] + a[1] * w[1] + a[2] * w[2]
}

/// Mean |y − ŷ|/y.
fn mape(x: &[[f64; 3]], y: &[f64], w: &[f64; 3]) -> f64 {
    let sum: f64 = x
        .iter()
        .zip(y)
        .map(|(r, &y)| ((y - dot(r, w)) / y).abs())
        .sum();
    sum / y.len() as f64
}

/// Sum of squared residuals.
fn sse(x: &[[f64; 3]], y: &[f64], w: &[f64; 3]) -> f64 {
    x.iter().zip(y).map(|(r, &y)| (y - dot(r, w)).powi(2)).sum()
}

/// Non-negative least squares for three coefficients: the unconstrained
/// least-squares solution on every subset of columns, the best feasible one
/// kept (the KKT point is among them).
pub fn nnls(x: &[[f64; 3]], y: &[f64]) -> [f64; 3] {
    let mut best = [0.0; 3];
    let mut best_sse = sse(x, y, &best);
    for mask in 1u8..8 {
        let cols: Vec<usize> = (0..3).filter(|j| mask & (1 << j) != 0).collect();
        let Some(w) = least_squares(x, y, &cols) else {
            continue;
        };
        if w.iter().any(|&v| v < 0.0) {
            continue;
        }
        let e = sse(x, y, &w);
        if e < best_sse {
            best = w;
            best_sse = e;
        }
    }
    best
}

/// Least squares on the columns `cols` (the others zero), by the normal
/// equations and Gaussian elimination with partial pivoting; `None` when
/// they are singular.
fn least_squares(x: &[[f64; 3]], y: &[f64], cols: &[usize]) -> Option<[f64; 3]> {
    let k = cols.len();
    let mut a = vec![vec![0.0; k + 1]; k];
    for (r, &yr) in x.iter().zip(y) {
        for (i, &ci) in cols.iter().enumerate() {
            for (j, &cj) in cols.iter().enumerate() {
                a[i][j] += r[ci] * r[cj];
            }
            a[i][k] += r[ci] * yr;
        }
    }
    let scale = a
        .iter()
        .map(|row| row[..k].iter().fold(0.0f64, |m, v| m.max(v.abs())))
        .fold(0.0, f64::max);
    for col in 0..k {
        let pivot = (col..k).max_by(|&i, &j| a[i][col].abs().total_cmp(&a[j][col].abs()))?;
        if a[pivot][col].abs() <= 1e-12 * scale {
            return None;
        }
        a.swap(col, pivot);
        let (top, rest) = a.split_at_mut(col + 1);
        let pivot_row = &top[col];
        for row in rest.iter_mut() {
            let f = row[col] / pivot_row[col];
            for (x, p) in row[col..].iter_mut().zip(&pivot_row[col..]) {
                *x -= f * p;
            }
        }
    }
    let mut sol = vec![0.0; k];
    for i in (0..k).rev() {
        let s: f64 = (i + 1..k).map(|j| a[i][j] * sol[j]).sum();
        sol[i] = (a[i][k] - s) / a[i][i];
    }
    let mut w = [0.0; 3];
    for (i, &c) in cols.iter().enumerate() {
        w[c] = sol[i];
    }
    Some(w)
}

/// Positive Lasso without intercept: minimises (1/2n)‖y − Xw‖² + α·Σw over
/// w ≥ 0 by cyclic coordinate descent from zero, to convergence.
pub fn lasso(x: &[[f64; 3]], y: &[f64], alpha: f64) -> [f64; 3] {
    let n = y.len() as f64;
    let norms: Vec<f64> = (0..3)
        .map(|j| x.iter().map(|r| r[j] * r[j]).sum())
        .collect();
    let mut w = [0.0; 3];
    let mut resid: Vec<f64> = y.to_vec();
    for _ in 0..1_000_000 {
        let mut moved = 0.0f64;
        for j in 0..3 {
            if norms[j] == 0.0 {
                continue;
            }
            let rho: f64 =
                x.iter().zip(&resid).map(|(r, &e)| r[j] * e).sum::<f64>() + norms[j] * w[j];
            let new = ((rho - n * alpha) / norms[j]).max(0.0);
            let step = new - w[j];
            if step != 0.0 {
                for (r, e) in x.iter().zip(resid.iter_mut()) {
                    *e -= step * r[j];
                }
                w[j] = new;
                moved = moved.max(step.abs());
            }
        }
        if moved <= 1e-13 * w.iter().fold(1.0f64, |m, v| m.max(v.abs())) {
            break;
        }
    }
    w
}

#[cfg(test)]
mod tests {
    use super::*;

    fn grid(profile: &Profile) -> Vec<Sample> {
        let mut out = Vec::new();
        for fc in [0.9, 0.95, 1.0, 1.05, 1.1] {
            for fm in [0.8, 0.9, 1.0, 1.1] {
                out.push(Sample {
                    fc,
                    fm,
                    time: profile.time(fc, fm),
                    power: profile.power(voltage(fc), fc, fm),
                });
            }
        }
        out
    }

    #[test]
    fn nnls_recovers_an_exact_model() {
        let truth = Profile {
            p0: 218.1,
            gamma: 32.5,
            c: 31.6,
            delta: 0.7,
            d: 32.14,
            t0: 5.03,
        };
        let f = fit(&grid(&truth), Method::Nnls).unwrap();
        for (a, b) in [
            (f.profile.p0, truth.p0),
            (f.profile.gamma, truth.gamma),
            (f.profile.c, truth.c),
            (f.profile.delta, truth.delta),
            (f.profile.d, truth.d),
            (f.profile.t0, truth.t0),
        ] {
            assert!((a - b).abs() < 1e-6, "{f:?}");
        }
        assert!(f.mape_time < 1e-9 && f.mape_power < 1e-9);
    }

    #[test]
    fn nnls_keeps_coefficients_at_zero_when_unconstrained_would_go_negative() {
        // y = 10 − 2·x1: least squares gives a negative slope, NNLS the best
        // non-negative fit, which is checked against a fine brute force.
        let x: Vec<[f64; 3]> = (0..10)
            .map(|i| {
                let v = i as f64;
                [1.0, v, (v * 0.37).sin() + 2.0]
            })
            .collect();
        let y: Vec<f64> = x.iter().map(|r| 10.0 - 2.0 * r[1] + 0.5 * r[2]).collect();
        let w = nnls(&x, &y);
        assert!(w.iter().all(|&v| v >= 0.0));
        assert_eq!(w[1], 0.0);
        let best = sse(&x, &y, &w);
        for a in 0..=60 {
            for c in 0..=60 {
                let cand = [a as f64 * 0.1, 0.0, c as f64 * 0.1];
                assert!(sse(&x, &y, &cand) >= best - 1e-9);
            }
        }
    }

    #[test]
    fn lasso_satisfies_its_optimality_conditions() {
        let truth = Profile {
            p0: 100.0,
            gamma: 20.0,
            c: 50.0,
            delta: 0.4,
            d: 10.0,
            t0: 1.0,
        };
        let samples = grid(&truth);
        let x: Vec<[f64; 3]> = samples
            .iter()
            .map(|s| [1.0, 1.0 / s.fc, 1.0 / s.fm])
            .collect();
        let y: Vec<f64> = samples.iter().map(|s| s.time).collect();
        let w = lasso(&x, &y, LASSO_ALPHA);
        let n = y.len() as f64;
        for j in 0..3 {
            // Gradient of the smooth part plus α: zero where w > 0, ≥ 0 at w = 0.
            let g: f64 = -x
                .iter()
                .zip(&y)
                .map(|(r, &yy)| r[j] * (yy - dot(r, &w)))
                .sum::<f64>()
                / n
                + LASSO_ALPHA;
            if w[j] > 0.0 {
                assert!(g.abs() < 1e-6, "{j}: {g} {w:?}");
            } else {
                assert!(g >= -1e-6, "{j}: {g} {w:?}");
            }
        }
    }

    #[test]
    fn too_few_clock_points_are_refused() {
        let s = Sample {
            fc: 1.0,
            fm: 1.0,
            time: 1.0,
            power: 100.0,
        };
        let two = [s, Sample { fc: 0.9, ..s }, s];
        assert_eq!(fit(&two, Method::Nnls), Err(FitError::TooFewPoints(2)));
    }
}
