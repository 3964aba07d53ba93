//! The daemon's clock: model time runs `scale` times faster than the wall
//! (ARCHITECTURE.md, invariant 19).

use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use gpu_agent_backend::mock::Clock;

/// Model time (seconds since the daemon started, times the scale) and the
/// unix time of the same instants, both read from one monotonic origin.
#[derive(Debug, Clone, Copy)]
pub struct Timebase {
    origin: Instant,
    origin_unix: f64,
    scale: f64,
}

impl Timebase {
    /// A clock starting now, `scale` times faster than the wall; `None`
    /// unless `scale` is a finite number > 0.
    pub fn new(scale: f64) -> Option<Timebase> {
        if !(scale.is_finite() && scale > 0.0) {
            return None;
        }
        Some(Timebase {
            origin: Instant::now(),
            origin_unix: SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map_or(0.0, |d| d.as_secs_f64()),
            scale,
        })
    }

    /// The scale.
    pub fn scale(&self) -> f64 {
        self.scale
    }

    /// Model seconds since the origin.
    pub fn model_now(&self) -> f64 {
        self.origin.elapsed().as_secs_f64() * self.scale
    }

    /// Unix seconds now.
    pub fn unix_now(&self) -> f64 {
        self.origin_unix + self.origin.elapsed().as_secs_f64()
    }

    /// The model time of a unix time.
    pub fn model_of_unix(&self, unix: f64) -> f64 {
        (unix - self.origin_unix) * self.scale
    }

    /// The unix time of a model time.
    pub fn unix_of_model(&self, model: f64) -> f64 {
        self.origin_unix + model / self.scale
    }

    /// How long to wait on the wall for model time `at` (zero if past).
    pub fn wall_until(&self, at: f64) -> Duration {
        let wait = (at / self.scale - self.origin.elapsed().as_secs_f64()).max(0.0);
        // A millisecond late rather than a spin before it.
        Duration::from_secs_f64(wait.min(86_400.0)) + Duration::from_micros(200)
    }
}

/// The mock GPUs live in model time, so their energy is the modelled energy.
impl Clock for Timebase {
    fn now(&self) -> f64 {
        self.model_now()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn model_time_is_scaled_wall_time() {
        assert!(Timebase::new(0.0).is_none());
        assert!(Timebase::new(f64::NAN).is_none());
        let t = Timebase::new(100.0).unwrap();
        assert_eq!(t.model_of_unix(t.origin_unix + 2.0), 200.0);
        let (m, u) = (t.model_now(), t.unix_now());
        assert!(
            (t.model_of_unix(u) - m).abs() < 1.0,
            "{m} vs {}",
            t.model_of_unix(u)
        );
        assert!(t.wall_until(m - 1.0) <= Duration::from_millis(1));
        assert!(t.wall_until(m + 100.0) > Duration::from_millis(900));
    }
}
