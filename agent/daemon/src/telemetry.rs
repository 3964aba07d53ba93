//! The histograms and counters `/metrics` shows beside its readings, kept
//! by the parts that see the events (the bus service times `Submit`, the
//! engine times the policy's decisions and counts its faults) and read by
//! the exporter at each scrape. A leaf: it imports no module of the daemon.

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};

/// The histograms and counters kept between scrapes.
#[derive(Clone)]
pub struct Telemetry {
    /// Time from a `Submit` call to its answer, seconds.
    pub submit_seconds: Histogram,
    /// Time the core (and the policy in it) takes per event, seconds.
    pub decision_seconds: Histogram,
    /// Policy faults (each switches to the built-in FIFO).
    pub policy_faults: Counter,
}

impl Default for Telemetry {
    fn default() -> Telemetry {
        Telemetry {
            // 50 µs .. ~1.6 s.
            submit_seconds: Histogram::new(exponential_buckets(5e-5, 2.0, 16)),
            // 1 µs .. ~33 ms.
            decision_seconds: Histogram::new(exponential_buckets(1e-6, 2.0, 16)),
            policy_faults: Counter::default(),
        }
    }
}
