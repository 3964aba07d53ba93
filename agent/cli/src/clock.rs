//! Instants for people, in local time: the time of day for today, the date
//! otherwise, and how long ago.

use std::time::{SystemTime, UNIX_EPOCH};

use crate::units;

/// The present moment and a time zone, to show unix times against.
pub struct Clock {
    /// Now, unix seconds.
    pub now: f64,
    /// The zone's offset from UTC at a unix time, seconds east.
    pub utc_offset: fn(i64) -> i64,
}

/// A local date and time of day.
#[derive(Debug, PartialEq, Eq)]
struct Civil {
    year: i64,
    month: u32,
    day: u32,
    hour: u32,
    minute: u32,
    second: u32,
}

impl Clock {
    /// The system clock, in the local time zone.
    pub fn system() -> Clock {
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0.0, |d| d.as_secs_f64());
        Clock {
            now,
            utc_offset: local_utc_offset,
        }
    }

    /// `HH:MM:SS` when `t` falls on today's local date, `YYYY-MM-DD` otherwise.
    pub fn short(&self, t: f64) -> String {
        let when = self.civil(t);
        let today = self.civil(self.now);
        if (when.year, when.month, when.day) == (today.year, today.month, today.day) {
            format!("{:02}:{:02}:{:02}", when.hour, when.minute, when.second)
        } else {
            format!("{:04}-{:02}-{:02}", when.year, when.month, when.day)
        }
    }

    /// `YYYY-MM-DD HH:MM:SS (12s ago)`, or `(in 5m)` for a time to come.
    pub fn long(&self, t: f64) -> String {
        let c = self.civil(t);
        let ago = self.now - t;
        let relative = if ago >= 0.0 {
            format!("{} ago", units::rough_duration(ago))
        } else {
            format!("in {}", units::rough_duration(-ago))
        };
        format!(
            "{:04}-{:02}-{:02} {:02}:{:02}:{:02} ({relative})",
            c.year, c.month, c.day, c.hour, c.minute, c.second
        )
    }

    /// The local date and time of unix time `t` (to the second below).
    fn civil(&self, t: f64) -> Civil {
        let utc = t.floor() as i64;
        let local = utc + (self.utc_offset)(utc);
        let (days, secs) = (local.div_euclid(86_400), local.rem_euclid(86_400));
        let (year, month, day) = civil_from_days(days);
        Civil {
            year,
            month,
            day,
            hour: (secs / 3600) as u32,
            minute: (secs / 60 % 60) as u32,
            second: (secs % 60) as u32,
        }
    }
}

/// (year, month, day) of `days` since 1970-01-01 in the proleptic Gregorian
/// calendar (Howard Hinnant's `civil_from_days`).
fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let month = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let year = yoe + era * 400 + i64::from(month <= 2);
    (year, month, day)
}

/// The local time zone's offset from UTC at unix time `t` (daylight saving
/// included), from the C library's `localtime_r`; 0 if it cannot tell.
fn local_utc_offset(t: i64) -> i64 {
    // `time_t` and `long` are 64 bits on every target gpu-agent runs on.
    let t = t as libc::time_t;
    let mut tm = std::mem::MaybeUninit::<libc::tm>::zeroed();
    // SAFETY: `localtime_r` reads `t` and writes `tm`, both valid for the
    // call; it returns null (leaving `tm` unread) on failure.
    let converted = unsafe { libc::localtime_r(&t, tm.as_mut_ptr()) };
    if converted.is_null() {
        return 0;
    }
    // SAFETY: `localtime_r` succeeded, so it filled `tm` (and it was zeroed).
    unsafe { tm.assume_init() }.tm_gmtoff
}

#[cfg(test)]
mod tests {
    use super::*;

    /// 2024-03-14 09:26:53 UTC.
    const T: f64 = 1_710_408_413.0;

    fn utc(now: f64) -> Clock {
        Clock {
            now,
            utc_offset: |_| 0,
        }
    }

    #[test]
    fn dates_follow_the_gregorian_calendar() {
        assert_eq!(civil_from_days(0), (1970, 1, 1));
        assert_eq!(civil_from_days(-1), (1969, 12, 31));
        assert_eq!(civil_from_days(11_016), (2000, 2, 29));
        assert_eq!(civil_from_days(19_796), (2024, 3, 14));
    }

    #[test]
    fn today_shows_the_time_and_other_days_the_date() {
        let clock = utc(T + 60.0);
        assert_eq!(clock.short(T), "09:26:53");
        assert_eq!(clock.short(T + 0.9), "09:26:53");
        assert_eq!(clock.short(T - 10.0 * 3600.0), "2024-03-13");
        assert_eq!(clock.long(T), "2024-03-14 09:26:53 (1m ago)");
        assert_eq!(clock.long(T + 660.0), "2024-03-14 09:37:53 (in 10m)");
    }

    #[test]
    fn the_zone_offset_moves_the_day() {
        let east = Clock {
            now: T,
            utc_offset: |_| 15 * 3600,
        };
        assert_eq!(east.short(T), "00:26:53");
        assert_eq!(east.long(T - 3600.0), "2024-03-14 23:26:53 (1h ago)");
        assert_eq!(east.short(T - 3600.0), "2024-03-14");
    }

    #[test]
    fn the_local_offset_is_a_whole_zone() {
        let offset = local_utc_offset(T as i64);
        assert!(offset.abs() <= 14 * 3600 && offset % 60 == 0, "{offset}");
    }
}
