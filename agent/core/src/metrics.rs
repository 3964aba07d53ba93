//! Schedule metrics (formats.md §4).

use serde::Serialize;

use crate::host::DeviceSpec;

/// A task no device could ever hold.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Rejection {
    /// Task id.
    pub id: String,
    /// Why.
    pub reason: String,
}

/// The metrics of one simulated run, in formats.md §4's key order.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Metrics {
    /// Policy name.
    pub policy: String,
    /// Tasks in the trace, rejected ones included.
    pub tasks: usize,
    /// Rejected tasks, in the order they were rejected.
    pub rejected: Vec<Rejection>,
    /// Total weighted tardiness, sum w_i max(0, c_i - d_i).
    pub twt: f64,
    /// Total weighted completion time, sum w_i (c_i - a_i).
    pub twct: f64,
    /// Average completion time, (1/n) sum (c_i - a_i).
    pub act: f64,
    /// Deadline misses, count of c_i > d_i.
    pub dmc: usize,
    /// Deadline miss ratio, dmc / n.
    pub dmr: f64,
    /// sum p_i * devices_i / (m * (max c_i - min a_i)).
    pub utilization: f64,
    /// max c_i.
    pub makespan: f64,
    /// GPU energy over [min a_i, max c_i], idle included (J):
    /// `energy_run_j + energy_idle_j + energy_overhead_j`.
    pub energy_j: f64,
    /// Energy the GPUs drew running tasks (J).
    pub energy_run_j: f64,
    /// Energy idle GPUs drew over the span (J).
    pub energy_idle_j: f64,
    /// Energy of turning GPUs or servers on (J); 0 on one host, which never
    /// turns a GPU off (docs/dvfs.md §6).
    pub energy_overhead_j: f64,
    /// The same policy's energy without DVFS (J); `energy_j` when no task ran
    /// at other than default clocks.
    pub energy_baseline_j: f64,
    /// 1 - energy_j / energy_baseline_j (0 when the baseline is 0).
    pub energy_saving: f64,
}

/// GPU energy over a span, split as docs/dvfs.md §3.1 does (J).
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct EnergySplit {
    /// While running tasks.
    pub run_j: f64,
    /// While idle.
    pub idle_j: f64,
    /// Turning devices on.
    pub overhead_j: f64,
}

impl EnergySplit {
    /// The total.
    pub fn total(&self) -> f64 {
        self.run_j + self.idle_j + self.overhead_j
    }
}

/// One scheduled task, as the metrics need it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Completed {
    /// a_i.
    pub arrival: f64,
    /// d_i.
    pub deadline: f64,
    /// w_i.
    pub weight: f64,
    /// Start time.
    pub start: f64,
    /// c_i.
    pub end: f64,
    /// Devices it used.
    pub devices: usize,
}

/// GPU energy over the span `to - from` (J): `busy_j` measured or modelled
/// while tasks ran, plus each device's catalogue idle power (times its
/// [`power_share`](DeviceSpec::power_share): a MIG instance draws its share,
/// a split GPU the share no instance holds) over the rest of the span (`busy_s[i]`:
/// seconds device `i` was busy); no overhead (one host never turns a GPU
/// off).
pub fn energy_with_idle(
    devices: &[DeviceSpec],
    busy_s: &[f64],
    busy_j: f64,
    from: f64,
    to: f64,
) -> EnergySplit {
    let idle_j: f64 = devices
        .iter()
        .zip(busy_s)
        .map(|(d, busy)| d.model.idle_w * d.power_share() * ((to - from) - busy).max(0.0))
        .sum();
    EnergySplit {
        run_j: busy_j,
        idle_j,
        overhead_j: 0.0,
    }
}

/// The sums the metrics are made of, added up one scheduled task at a time
/// (so that a driver need not keep every [`Completed`]); the same sums, in
/// the same order, as [`Metrics::compute`] over a slice.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Totals {
    /// Tasks added.
    pub count: usize,
    /// sum w_i max(0, c_i - d_i).
    pub twt: f64,
    /// sum w_i (c_i - a_i).
    pub twct: f64,
    /// sum (c_i - a_i).
    pub completion: f64,
    /// count of c_i > d_i.
    pub dmc: usize,
    /// max c_i (0 with none).
    pub makespan: f64,
    /// sum (end - start) * devices: busy device-seconds.
    pub busy: f64,
    /// min a_i (infinity with none).
    pub first_arrival: f64,
}

impl Default for Totals {
    fn default() -> Self {
        Totals {
            count: 0,
            twt: 0.0,
            twct: 0.0,
            completion: 0.0,
            dmc: 0,
            makespan: 0.0,
            busy: 0.0,
            first_arrival: f64::INFINITY,
        }
    }
}

impl Totals {
    /// Counts one scheduled task in.
    pub fn add(&mut self, t: &Completed) {
        self.count += 1;
        self.twt += t.weight * (t.end - t.deadline).max(0.0);
        self.twct += t.weight * (t.end - t.arrival);
        self.completion += t.end - t.arrival;
        self.dmc += usize::from(t.end > t.deadline);
        self.makespan = self.makespan.max(t.end);
        self.busy += (t.end - t.start) * t.devices as f64;
        self.first_arrival = self.first_arrival.min(t.arrival);
    }
}

impl Metrics {
    /// Metrics of `done` on `m` devices; `energy` is called with the span
    /// (min a_i, max c_i) and returns the energy over it. The baseline is the
    /// run's own energy until [`Metrics::set_baseline`].
    pub fn compute(
        policy: &str,
        tasks: usize,
        rejected: Vec<Rejection>,
        done: &[Completed],
        m: usize,
        energy: impl FnOnce(f64, f64) -> EnergySplit,
    ) -> Metrics {
        let mut totals = Totals::default();
        for t in done {
            totals.add(t);
        }
        Metrics::from_totals(policy, tasks, rejected, &totals, m, energy)
    }

    /// [`Metrics::compute`] from the [`Totals`] of the scheduled tasks.
    pub fn from_totals(
        policy: &str,
        tasks: usize,
        rejected: Vec<Rejection>,
        totals: &Totals,
        m: usize,
        energy: impl FnOnce(f64, f64) -> EnergySplit,
    ) -> Metrics {
        let n = totals.count;
        let mut metrics = Metrics {
            policy: policy.into(),
            tasks,
            rejected,
            twt: 0.0,
            twct: 0.0,
            act: 0.0,
            dmc: 0,
            dmr: 0.0,
            utilization: 0.0,
            makespan: 0.0,
            energy_j: 0.0,
            energy_run_j: 0.0,
            energy_idle_j: 0.0,
            energy_overhead_j: 0.0,
            energy_baseline_j: 0.0,
            energy_saving: 0.0,
        };
        if n == 0 {
            return metrics;
        }
        let Totals {
            twt,
            twct,
            completion,
            dmc,
            makespan,
            busy,
            first_arrival,
            ..
        } = *totals;
        (metrics.twt, metrics.twct, metrics.dmc, metrics.makespan) = (twt, twct, dmc, makespan);
        metrics.act = completion / n as f64;
        metrics.dmr = metrics.dmc as f64 / n as f64;
        let span = metrics.makespan - first_arrival;
        if span > 0.0 {
            metrics.utilization = busy / (m as f64 * span);
        }
        let e = energy(first_arrival, metrics.makespan);
        metrics.energy_j = e.total();
        metrics.energy_run_j = e.run_j;
        metrics.energy_idle_j = e.idle_j;
        metrics.energy_overhead_j = e.overhead_j;
        metrics.set_baseline(metrics.energy_j);
        metrics
    }

    /// Sets the energy without DVFS and the saving against it.
    pub fn set_baseline(&mut self, baseline_j: f64) {
        self.energy_baseline_j = baseline_j;
        self.energy_saving = if baseline_j > 0.0 {
            1.0 - self.energy_j / baseline_j
        } else {
            0.0
        };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formulas_on_a_hand_computed_example() {
        // Three devices. t1: a=0, start 0, end 4, d=3, w=2 (late by 1).
        // t2: a=1, start 1, end 3, d=5, w=1, gang of 2.
        let done = [
            Completed {
                arrival: 0.0,
                deadline: 3.0,
                weight: 2.0,
                start: 0.0,
                end: 4.0,
                devices: 1,
            },
            Completed {
                arrival: 1.0,
                deadline: 5.0,
                weight: 1.0,
                start: 1.0,
                end: 3.0,
                devices: 2,
            },
        ];
        let m = Metrics::compute("p", 3, vec![], &done, 3, |a, c| EnergySplit {
            run_j: (c - a) * 8.0,
            idle_j: (c - a) * 2.0,
            overhead_j: 0.0,
        });
        assert_eq!(m.twt, 2.0); // 2 * 1
        assert_eq!(m.twct, 10.0); // 2*4 + 1*2
        assert_eq!(m.act, 3.0); // (4 + 2) / 2
        assert_eq!((m.dmc, m.dmr), (1, 0.5));
        assert_eq!(m.makespan, 4.0);
        assert_eq!(m.utilization, 8.0 / 12.0); // (4*1 + 2*2) / (3 * 4)
        assert_eq!(m.energy_j, 40.0);
        assert_eq!(
            (m.energy_run_j, m.energy_idle_j, m.energy_overhead_j),
            (32.0, 8.0, 0.0)
        );
        assert_eq!((m.energy_baseline_j, m.energy_saving), (40.0, 0.0));
        let mut m = m;
        m.set_baseline(50.0);
        assert_eq!(
            (m.energy_baseline_j, m.energy_saving),
            (50.0, 1.0 - 40.0 / 50.0)
        );
    }

    #[test]
    fn no_scheduled_task_gives_zeros() {
        let m = Metrics::compute(
            "p",
            1,
            vec![Rejection {
                id: "x".into(),
                reason: "r".into(),
            }],
            &[],
            2,
            |_, _| EnergySplit {
                run_j: 1.0,
                ..EnergySplit::default()
            },
        );
        assert_eq!(
            (m.twt, m.act, m.dmr, m.utilization, m.energy_j),
            (0.0, 0.0, 0.0, 0.0, 0.0)
        );
    }
}
