//! Quantities for people: durations (read and written), energy, power and
//! utilisation. A reading the device did not give (NaN) prints as `-`.

/// The units a duration may be written in, largest first, with their seconds.
const UNITS: [(char, f64); 4] = [('d', 86_400.0), ('h', 3_600.0), ('m', 60.0), ('s', 1.0)];

/// Seconds from plain seconds (`90`, `2.5`) or numbers with units, largest
/// first and each at most once (`90s`, `10m`, `2h`, `1h30m`, `1d12h`).
pub fn parse_duration(text: &str) -> Result<f64, String> {
    let bad =
        || format!("expected seconds or a duration such as 90s, 10m, 2h or 1h30m, got {text:?}");
    let s = text.trim();
    if is_number(s) {
        return s.parse().map_err(|_| bad());
    }
    if s.is_empty() {
        return Err(bad());
    }
    let mut total = 0.0;
    let mut rest = s;
    let mut smallest_left = 0;
    while !rest.is_empty() {
        let end = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .ok_or_else(bad)?;
        let (number, tail) = rest.split_at(end);
        if !is_number(number) {
            return Err(bad());
        }
        let unit = tail.chars().next().expect("a character ends the number");
        let i = UNITS[smallest_left..]
            .iter()
            .position(|(u, _)| *u == unit)
            .ok_or_else(bad)?
            + smallest_left;
        total += number.parse::<f64>().map_err(|_| bad())? * UNITS[i].1;
        smallest_left = i + 1;
        rest = &tail[unit.len_utf8()..];
    }
    Ok(total)
}

/// Whether `s` is digits with at most one decimal point.
fn is_number(s: &str) -> bool {
    s.bytes().any(|b| b.is_ascii_digit())
        && s.bytes().all(|b| b.is_ascii_digit() || b == b'.')
        && s.bytes().filter(|b| *b == b'.').count() <= 1
}

/// `secs` (>= 0) the way [`parse_duration`] reads it: tenths of a second below
/// a minute (`0s`, `1.5s`, `45s`), whole seconds from there (`1m30s`, `2h`,
/// `1d2h3m4s`); `inf` as such.
pub fn duration(secs: f64) -> String {
    if !secs.is_finite() {
        return secs.to_string();
    }
    let tenths = (secs * 10.0).round() / 10.0;
    if tenths < 60.0 {
        return format!("{tenths}s");
    }
    let mut left = secs.round() as u64;
    let mut text = String::new();
    for (unit, size) in UNITS {
        let size = size as u64;
        if left >= size {
            text.push_str(&format!("{}{unit}", left / size));
            left %= size;
        }
    }
    text
}

/// `secs` (>= 0) to its two largest units, for "how long ago": `4m59s`,
/// `2h5m`, `3d` (3 days and under half an hour).
pub fn rough_duration(secs: f64) -> String {
    let Some(i) = UNITS.iter().position(|(_, size)| secs >= *size) else {
        return duration(secs);
    };
    let Some((_, step)) = UNITS.get(i + 1) else {
        return duration(secs);
    };
    duration((secs / step).round() * step)
}

/// Energy in J, kJ or MJ, whichever reads best.
pub fn energy(joules: f64) -> String {
    if joules.is_nan() {
        "-".into()
    } else if joules.abs() < 1e3 {
        format!("{joules:.1} J")
    } else if joules.abs() < 1e6 {
        format!("{:.2} kJ", joules / 1e3)
    } else {
        format!("{:.2} MJ", joules / 1e6)
    }
}

/// Memory in GB: whole numbers as such, others to a tenth.
pub fn gigabytes(gb: f64) -> String {
    if gb == gb.round() {
        format!("{gb:.0} GB")
    } else {
        format!("{gb:.1} GB")
    }
}

/// Power in W.
pub fn power(watts: f64) -> String {
    if watts.is_nan() {
        "-".into()
    } else {
        format!("{watts:.1} W")
    }
}

/// A 0..1 fraction as a percentage.
pub fn percent(fraction: f64) -> String {
    if fraction.is_nan() {
        "-".into()
    } else {
        format!("{:.0} %", fraction * 100.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_parse_as_seconds() {
        for (text, secs) in [
            ("90", 90.0),
            ("2.5", 2.5),
            ("0", 0.0),
            ("90s", 90.0),
            ("10m", 600.0),
            ("2h", 7200.0),
            ("1h30m", 5400.0),
            ("1h30m15s", 5415.0),
            ("1d", 86400.0),
            ("1d2h", 93600.0),
            ("1.5h", 5400.0),
            ("0.5s", 0.5),
            (" 10m ", 600.0),
            ("2h0m", 7200.0),
        ] {
            assert_eq!(parse_duration(text), Ok(secs), "{text}");
        }
    }

    #[test]
    fn malformed_durations_are_refused_with_the_text() {
        for text in [
            "", "s", "m10", "10x", "10M", "1h1", "30m1h", "1m1m", "-5", "1..5s", "inf", "nan",
            "1h 30m", "10mins", "1e3",
        ] {
            assert_eq!(
                parse_duration(text),
                Err(format!(
                    "expected seconds or a duration such as 90s, 10m, 2h or 1h30m, got {text:?}"
                )),
                "{text}"
            );
        }
    }

    #[test]
    fn durations_print_the_way_they_parse() {
        for (secs, text) in [
            (0.0, "0s"),
            (1.5, "1.5s"),
            (45.0, "45s"),
            (59.99, "1m"),
            (60.0, "1m"),
            (90.0, "1m30s"),
            (3600.0, "1h"),
            (5400.0, "1h30m"),
            (93784.0, "1d2h3m4s"),
            (f64::INFINITY, "inf"),
        ] {
            assert_eq!(duration(secs), text, "{secs}");
            if secs.is_finite() && secs == secs.round() {
                assert_eq!(parse_duration(text), Ok(secs), "{text}");
            }
        }
    }

    #[test]
    fn rough_durations_keep_two_units() {
        for (secs, text) in [
            (1.5, "1.5s"),
            (298.5, "4m59s"),
            (7_530.0, "2h6m"),
            (86_610.0, "1d"),
            (95_238_376.0, "1102d7h"),
            (f64::INFINITY, "inf"),
        ] {
            assert_eq!(rough_duration(secs), text, "{secs}");
        }
    }

    #[test]
    fn readings_have_units_and_nan_is_a_dash() {
        assert_eq!(energy(12.34), "12.3 J");
        assert_eq!(energy(4567.0), "4.57 kJ");
        assert_eq!(energy(7_890_000.0), "7.89 MJ");
        assert_eq!(energy(f64::NAN), "-");
        assert_eq!(gigabytes(80.0), "80 GB");
        assert_eq!(gigabytes(15.76), "15.8 GB");
        assert_eq!(power(250.26), "250.3 W");
        assert_eq!(power(f64::NAN), "-");
        assert_eq!(percent(0.873), "87 %");
        assert_eq!(percent(f64::NAN), "-");
    }
}
