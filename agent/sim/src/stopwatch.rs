//! Adding up the wall time of many short calls without a clock call per call.
//!
//! On x86-64 each call is timed with the time-stamp counter (`rdtsc`, a few
//! nanoseconds, no system call), and the counter's rate is calibrated against
//! the system clock over the stopwatch's whole life, which also absorbs any
//! difference between the counter's nominal and real rates. Elsewhere it reads
//! [`Instant`] around each call.

use std::time::{Duration, Instant};

/// Adds up the wall time of the calls it times.
pub(crate) struct Stopwatch {
    created: Instant,
    #[cfg(target_arch = "x86_64")]
    created_ticks: u64,
    /// Counter ticks (x86-64) or nanoseconds inside timed calls.
    inside: u64,
    calls: u64,
}

impl Stopwatch {
    pub fn new() -> Stopwatch {
        Stopwatch {
            created: Instant::now(),
            #[cfg(target_arch = "x86_64")]
            created_ticks: ticks(),
            inside: 0,
            calls: 0,
        }
    }

    /// Runs `call`, adding its wall time.
    pub fn time<T>(&mut self, call: impl FnOnce() -> T) -> T {
        #[cfg(target_arch = "x86_64")]
        {
            let started = ticks();
            let result = call();
            self.inside += ticks().wrapping_sub(started);
            self.calls += 1;
            result
        }
        #[cfg(not(target_arch = "x86_64"))]
        {
            let started = Instant::now();
            let result = call();
            self.inside += started.elapsed().as_nanos() as u64;
            self.calls += 1;
            result
        }
    }

    /// Calls timed so far.
    pub fn calls(&self) -> u64 {
        self.calls
    }

    /// The wall time inside the timed calls so far.
    pub fn total(&self) -> Duration {
        #[cfg(target_arch = "x86_64")]
        {
            let wall = self.created.elapsed();
            let ticks = ticks().wrapping_sub(self.created_ticks);
            if ticks == 0 {
                return Duration::ZERO;
            }
            // The share of the stopwatch's life spent inside calls.
            let share = (self.inside as f64 / ticks as f64).min(1.0);
            wall.mul_f64(share)
        }
        #[cfg(not(target_arch = "x86_64"))]
        {
            Duration::from_nanos(self.inside)
        }
    }
}

#[cfg(target_arch = "x86_64")]
fn ticks() -> u64 {
    // SAFETY: `rdtsc` has no preconditions; every x86-64 processor has it.
    unsafe { std::arch::x86_64::_rdtsc() }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn adds_up_the_time_inside_calls_only() {
        let started = Instant::now();
        let mut watch = Stopwatch::new();
        std::thread::sleep(Duration::from_millis(30));
        for _ in 0..3 {
            watch.time(|| std::thread::sleep(Duration::from_millis(10)));
        }
        std::thread::sleep(Duration::from_millis(30));
        let total = watch.total();
        let whole = started.elapsed();
        assert_eq!(watch.calls(), 3);
        // At least the 30 ms slept inside, and not the 60 ms slept outside
        // (a little slack for the calibration).
        assert!(total >= Duration::from_millis(29), "{total:?}");
        assert!(
            total + Duration::from_millis(55) <= whole,
            "{total:?} of {whole:?}"
        );
    }
}
