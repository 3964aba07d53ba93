//! The time the mock integrates power over.

use std::sync::{Arc, Mutex};
use std::time::Instant;

/// A source of time in seconds; the mock never reads the system clock itself.
pub trait Clock: Send + Sync {
    /// Seconds since the clock's origin; never decreases.
    fn now(&self) -> f64;
}

/// Time that moves only when told to: for the simulator and tests.
#[derive(Debug, Clone, Default)]
pub struct VirtualClock(Arc<Mutex<f64>>);

impl VirtualClock {
    /// A clock at 0 s.
    pub fn new() -> VirtualClock {
        VirtualClock::default()
    }

    /// Moves the clock `secs` forward (negative or NaN amounts are ignored).
    pub fn advance(&self, secs: f64) {
        if secs > 0.0 {
            *self.0.lock().unwrap_or_else(|e| e.into_inner()) += secs;
        }
    }
}

impl Clock for VirtualClock {
    fn now(&self) -> f64 {
        *self.0.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// Real elapsed time since construction: for a daemon running on the mock.
#[derive(Debug, Clone)]
pub struct SystemClock(Instant);

impl SystemClock {
    /// A clock starting now.
    pub fn new() -> SystemClock {
        SystemClock(Instant::now())
    }
}

impl Default for SystemClock {
    fn default() -> Self {
        SystemClock::new()
    }
}

impl Clock for SystemClock {
    fn now(&self) -> f64 {
        self.0.elapsed().as_secs_f64()
    }
}
