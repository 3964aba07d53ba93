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

/// Which side of now a duration given for a point in time lies.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum FromNow {
    /// In the past (`--since 1h`: an hour ago).
    Before,
    /// In the future (`--deadline 2h`: two hours from now).
    After,
}

/// A point in time, unix seconds: a duration as [`parse_duration`] reads it,
/// that long `side` of `now`, or an RFC 3339 time with its offset
/// (`2026-11-28T06:00:00Z`, `2026-11-28T07:00:00+01:00`).
pub fn parse_time(text: &str, now: f64, side: FromNow) -> Result<f64, String> {
    let s = text.trim();
    if let Ok(secs) = parse_duration(s) {
        return Ok(match side {
            FromNow::Before => now - secs,
            FromNow::After => now + secs,
        });
    }
    rfc3339(s).map_err(|why| {
        format!(
            "expected seconds or a duration such as 90s, 10m, 2h or 1h30m, or an RFC 3339 \
             time such as 2026-11-28T06:00:00Z, got {text:?} ({why})"
        )
    })
}

/// Unix seconds of an RFC 3339 time. humantime reads it in UTC (`Z`); an
/// offset (`+01:00`) is taken off here.
fn rfc3339(s: &str) -> Result<f64, String> {
    let sign_at = s
        .find('T')
        .and_then(|t| s[t..].rfind(['+', '-']).map(|i| t + i));
    let (utc, offset) = match sign_at {
        Some(i) => {
            let tail = &s[i + 1..];
            let field = |r: std::ops::Range<usize>| tail.get(r)?.parse::<u32>().ok();
            let (5, Some(h), Some(":"), Some(m)) =
                (tail.len(), field(0..2), tail.get(2..3), field(3..5))
            else {
                return Err(format!("a bad offset {:?}", &s[i..]));
            };
            let secs = f64::from(h * 3600 + m * 60);
            let secs = if s[i..].starts_with('-') { -secs } else { secs };
            (format!("{}Z", &s[..i]), secs)
        }
        None if s.ends_with(['Z', 'z']) => (format!("{}Z", &s[..s.len() - 1]), 0.0),
        None => return Err("a time needs its offset: Z for UTC, or such as +01:00".into()),
    };
    let t = humantime::parse_rfc3339(&utc).map_err(|e| e.to_string())?;
    let since = t
        .duration_since(std::time::UNIX_EPOCH)
        .map_err(|_| "a time before 1970".to_string())?;
    Ok(since.as_secs_f64() - offset)
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
    fn a_time_is_a_duration_from_now_or_an_rfc_3339_time() {
        let now = 1_795_845_600.0; // 2026-11-28T06:00:00Z
        for (text, side, at) in [
            ("1h", FromNow::Before, now - 3600.0),
            ("90", FromNow::Before, now - 90.0),
            ("1h30m", FromNow::After, now + 5400.0),
            ("2026-11-28T06:00:00Z", FromNow::Before, now),
            ("2026-11-28T06:00:00z", FromNow::After, now),
            ("2026-11-28T06:00:00.5Z", FromNow::After, now + 0.5),
            ("2026-11-28T07:30:00+01:30", FromNow::After, now),
            ("2026-11-28T01:00:00-05:00", FromNow::Before, now),
        ] {
            assert_eq!(parse_time(text, now, side), Ok(at), "{text}");
        }
        for (text, why) in [
            ("tomorrow", "a time needs its offset"),
            ("2026-11-28T06:00:00", "a time needs its offset"),
            ("2026-11-28T06:00:00+1:00", "a bad offset \"+1:00\""),
            ("2026-13-28T06:00:00Z", "out of range"),
            ("1969-12-31T23:59:59Z", "out of range"),
        ] {
            let e = parse_time(text, now, FromNow::Before).unwrap_err();
            assert!(
                e.starts_with("expected seconds or a duration such as 90s, 10m, 2h or 1h30m, or an RFC 3339 time")
                    && e.contains(&format!("got {text:?} ("))
                    && e.contains(why),
                "{text}: {e}"
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
