//! Adding up the wall time of many short calls without a clock call per call.
//!
//! Each call is timed with a cheap steady counter ([`ticks`]: on x86-64 the
//! time-stamp counter, `rdtsc`, a few nanoseconds and no system call;
//! elsewhere nanoseconds from [`Instant`]), and counter ticks become wall time
//! against the system clock over the stopwatch's whole life, which also
//! absorbs any difference between the counter's nominal and real rates.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Adds up the wall time of the calls it times.
pub(crate) struct Stopwatch {
    created: Instant,
    created_ticks: u64,
    /// Counter ticks inside timed calls.
    inside: u64,
    calls: u64,
}

impl Stopwatch {
    pub fn new() -> Stopwatch {
        Stopwatch {
            created: Instant::now(),
            created_ticks: ticks(),
            inside: 0,
            calls: 0,
        }
    }

    /// Runs `call`, adding its wall time.
    pub fn time<T>(&mut self, call: impl FnOnce() -> T) -> T {
        let started = ticks();
        let result = call();
        self.inside += ticks().wrapping_sub(started);
        self.calls += 1;
        result
    }

    /// Calls timed so far.
    pub fn calls(&self) -> u64 {
        self.calls
    }

    /// The wall time inside the timed calls so far.
    pub fn total(&self) -> Duration {
        self.wall(self.inside)
    }

    /// The wall time of `counted` counter ticks taken during the stopwatch's
    /// life (by it or by a [`Tally`]).
    pub fn wall(&self, counted: u64) -> Duration {
        let wall = self.created.elapsed();
        let ticks = ticks().wrapping_sub(self.created_ticks);
        if ticks == 0 {
            return Duration::ZERO;
        }
        // The share of the stopwatch's life spent inside calls.
        let share = (counted as f64 / ticks as f64).min(1.0);
        wall.mul_f64(share)
    }
}

/// Counter ticks spent in calls made where a [`Stopwatch`] cannot reach
/// (inside another object, such as the policy the core owns); shared, so
/// that the owner of the stopwatch can read it.
#[derive(Debug, Clone, Default)]
pub(crate) struct Tally(Arc<AtomicU64>);

impl Tally {
    /// Runs `call`, adding its counter ticks.
    pub fn time<T>(&self, call: impl FnOnce() -> T) -> T {
        let started = ticks();
        let result = call();
        self.0
            .fetch_add(ticks().wrapping_sub(started), Ordering::Relaxed);
        result
    }

    /// Counter ticks so far.
    pub fn ticks(&self) -> u64 {
        self.0.load(Ordering::Relaxed)
    }
}

/// A steady counter: the time-stamp counter.
#[cfg(target_arch = "x86_64")]
fn ticks() -> u64 {
    // SAFETY: `rdtsc` has no preconditions; every x86-64 processor has it.
    unsafe { std::arch::x86_64::_rdtsc() }
}

/// A steady counter: nanoseconds since the first reading.
#[cfg(not(target_arch = "x86_64"))]
fn ticks() -> u64 {
    static START: std::sync::OnceLock<Instant> = std::sync::OnceLock::new();
    START.get_or_init(Instant::now).elapsed().as_nanos() as u64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn adds_up_the_time_inside_calls_only() {
        let started = Instant::now();
        let mut watch = Stopwatch::new();
        let tally = Tally::default();
        std::thread::sleep(Duration::from_millis(30));
        for _ in 0..3 {
            watch.time(|| {
                std::thread::sleep(Duration::from_millis(5));
                tally.time(|| std::thread::sleep(Duration::from_millis(10)));
            });
        }
        std::thread::sleep(Duration::from_millis(30));
        let total = watch.total();
        let inner = watch.wall(tally.ticks());
        let whole = started.elapsed();
        assert_eq!(watch.calls(), 3);
        // At least the 45 ms slept inside, and not the 60 ms slept outside
        // (a little slack for the calibration).
        assert!(total >= Duration::from_millis(44), "{total:?}");
        assert!(
            total + Duration::from_millis(55) <= whole,
            "{total:?} of {whole:?}"
        );
        // The tally: at least its 30 ms, and not the 15 ms outside it.
        assert!(inner >= Duration::from_millis(29), "{inner:?}");
        assert!(
            inner + Duration::from_millis(14) <= total,
            "{inner:?} of {total:?}"
        );
    }
}
