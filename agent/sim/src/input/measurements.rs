//! Reading DVFS measurements (docs/dvfs.md §2): a CSV with one row per
//! application and clock pair, columns `appName`, `coreF`, `memF` (MHz),
//! `time/UNIT` and `power/W`; other columns are ignored.

use std::path::Path;

use gpu_agent_dvfs::fit::Sample;

use super::{read_text, InputError};

/// Lowest and highest clock a measurement may have, as a share of its base
/// clock: the model's domain (docs/dvfs.md §1.2 reaches 0.5 … 1.2).
pub const CLOCK_RANGE: (f64, f64) = (0.5, 1.5);

/// Distinct clock points an application needs (three coefficients per fit).
pub const MIN_POINTS: usize = 3;

/// The base (default) clocks the measurements are normalised to, MHz.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Bases {
    /// Base core clock, MHz.
    pub core_mhz: f64,
    /// Base memory clock, MHz.
    pub mem_mhz: f64,
}

/// One application's measurements.
#[derive(Debug, Clone, PartialEq)]
pub struct AppSamples {
    /// `appName`.
    pub name: String,
    /// Its rows, clocks normalised.
    pub samples: Vec<Sample>,
    /// The line of its first row.
    pub line: u64,
}

/// Measurements of a file.
#[derive(Debug, Clone, PartialEq)]
pub struct Measurements {
    /// The time column's unit (`ms` for `time/ms`).
    pub time_unit: String,
    /// The applications in order of first appearance.
    pub apps: Vec<AppSamples>,
}

/// Reads `path`, normalising clocks to `bases`.
pub fn load(path: &Path, bases: Bases) -> Result<Measurements, InputError> {
    parse(path, &read_text(path)?, bases)
}

/// Parses measurements; `path` only names the file in errors.
pub fn parse(path: &Path, text: &str, bases: Bases) -> Result<Measurements, InputError> {
    let mut reader = csv::ReaderBuilder::new()
        .has_headers(true)
        .from_reader(text.as_bytes());
    let header_err = |msg: String| InputError::at(path, Some(1), None, msg);
    let headers = reader
        .headers()
        .map_err(|e| header_err(format!("cannot read the header: {e}")))?
        .clone();
    let column = |name: &str| {
        headers
            .iter()
            .position(|h| h.trim() == name)
            .ok_or_else(|| header_err(format!("missing column {name:?}")))
    };
    let app_col = column("appName")?;
    let core_col = column("coreF")?;
    let mem_col = column("memF")?;
    let power_col = column("power/W")?;
    let (time_col, time_unit) = headers
        .iter()
        .enumerate()
        .find_map(|(i, h)| h.trim().strip_prefix("time/").map(|u| (i, u.to_string())))
        .ok_or_else(|| header_err("missing column \"time/UNIT\" (such as time/ms)".into()))?;
    let mut apps: Vec<AppSamples> = Vec::new();
    for record in reader.records() {
        let record = record.map_err(|e| {
            let line = e.position().map(|p| p.line());
            InputError::at(path, line, None, e.to_string())
        })?;
        let line = record.position().map_or(0, |p| p.line());
        let at = |col: usize, msg: String| {
            InputError::at(
                path,
                Some(line),
                Some(format!("column {}", &headers[col])),
                msg,
            )
        };
        let positive = |col: usize| -> Result<f64, InputError> {
            let raw = record.get(col).unwrap_or("").trim();
            match raw.parse::<f64>() {
                Ok(x) if x.is_finite() && x > 0.0 => Ok(x),
                _ => Err(at(col, format!("expected a number > 0, got {raw:?}"))),
            }
        };
        let name = record.get(app_col).unwrap_or("").trim();
        if name.is_empty() {
            return Err(at(app_col, "expected an application name".into()));
        }
        let clock = |col: usize, base: f64| -> Result<f64, InputError> {
            let mhz = positive(col)?;
            let f = mhz / base;
            if f < CLOCK_RANGE.0 || f > CLOCK_RANGE.1 {
                return Err(at(
                    col,
                    format!(
                        "{mhz} MHz is outside the GPU's range for base {base} MHz \
                         ({:.0} … {:.0} MHz)",
                        base * CLOCK_RANGE.0,
                        base * CLOCK_RANGE.1
                    ),
                ));
            }
            Ok(f)
        };
        let sample = Sample {
            fc: clock(core_col, bases.core_mhz)?,
            fm: clock(mem_col, bases.mem_mhz)?,
            time: positive(time_col)?,
            power: positive(power_col)?,
        };
        match apps.iter_mut().find(|a| a.name == name) {
            Some(app) => app.samples.push(sample),
            None => apps.push(AppSamples {
                name: name.to_string(),
                samples: vec![sample],
                line,
            }),
        }
    }
    if apps.is_empty() {
        return Err(InputError::at(path, None, None, "no measurements"));
    }
    for app in &apps {
        let mut points: Vec<(f64, f64)> = app.samples.iter().map(|s| (s.fc, s.fm)).collect();
        points.sort_by(|a, b| a.partial_cmp(b).expect("finite clocks"));
        points.dedup();
        if points.len() < MIN_POINTS {
            return Err(InputError::at(
                path,
                Some(app.line),
                Some(format!("application {:?}", app.name)),
                format!(
                    "{} distinct clock points; the fit needs at least {MIN_POINTS}",
                    points.len()
                ),
            ));
        }
    }
    Ok(Measurements { time_unit, apps })
}

#[cfg(test)]
mod tests {
    use super::*;

    const BASES: Bases = Bases {
        core_mhz: 1800.0,
        mem_mhz: 5000.0,
    };

    fn err(text: &str) -> String {
        parse(Path::new("m.csv"), text, BASES)
            .unwrap_err()
            .to_string()
    }

    const GOOD: &str = ",appName,coreF,memF,time/ms,power/W\n\
        0,a,1800,5000,1.0,100\n\
        1,a,1600,5000,1.1,90\n\
        2,a,1800,4000,1.2,95\n";

    #[test]
    fn reads_and_normalises() {
        let m = parse(Path::new("m.csv"), GOOD, BASES).unwrap();
        assert_eq!(m.time_unit, "ms");
        assert_eq!(m.apps.len(), 1);
        assert_eq!(m.apps[0].line, 2);
        assert_eq!(m.apps[0].samples[2].fm, 0.8);
        assert_eq!(m.apps[0].samples[1].fc, 1600.0 / 1800.0);
    }

    #[test]
    fn bad_input_names_file_line_and_reason() {
        assert_eq!(
            err("appName,coreF,memF,power/W\na,1,1,1\n"),
            "m.csv:1: missing column \"time/UNIT\" (such as time/ms)"
        );
        assert_eq!(
            err("appName,memF,time/ms,power/W\n"),
            "m.csv:1: missing column \"coreF\""
        );
        assert_eq!(
            err(&GOOD.replace("1.1,90", "0,90")),
            "m.csv:3: column time/ms: expected a number > 0, got \"0\""
        );
        assert_eq!(
            err(&GOOD.replace("1.1,90", "-2,90")),
            "m.csv:3: column time/ms: expected a number > 0, got \"-2\""
        );
        assert_eq!(
            err(&GOOD.replace("2,a,1800,4000", "2,a,1800,9000")),
            "m.csv:4: column memF: 9000 MHz is outside the GPU's range for base 5000 MHz (2500 … 7500 MHz)"
        );
        assert_eq!(
            err(&GOOD.replace("2,a,1800,4000", "2,b,1800,4000")),
            "m.csv:2: application \"a\": 2 distinct clock points; the fit needs at least 3"
        );
    }
}
