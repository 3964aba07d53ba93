//! What `Metrics()` and `/metrics` need of the tasks that have ended, as
//! running sums: ended tasks are in the store only, and nothing here grows
//! with their number.

use std::collections::HashMap;

use gpu_agent_core::host::DeviceSpec;
use gpu_agent_core::metrics::{energy_with_idle, Completed, Metrics, Rejection, Totals};
use gpu_agent_dbus::{TaskInfo, TaskStatus};

/// The ended tasks, summed up.
#[derive(Default, Clone)]
pub(super) struct Tally {
    /// Ended tasks by state.
    ended: HashMap<TaskStatus, usize>,
    /// The unix time that is zero on the clock of `totals` (the first ran
    /// task's submission).
    zero: Option<f64>,
    /// The tasks that ran (succeeded, failed or cancelled after starting),
    /// in model seconds from `zero`.
    totals: Totals,
    /// Model seconds each device was busy.
    busy_s: Vec<f64>,
    /// Energy the tasks drew (J).
    busy_j: f64,
    /// The same two at default clocks (formats.md §4's no-DVFS baseline).
    default_busy_s: Vec<f64>,
    default_busy_j: f64,
}

impl Tally {
    /// Counts `task`, which has ended, its times scaled by `scale` (model
    /// seconds per second).
    pub fn add(&mut self, task: &TaskInfo, scale: f64) {
        *self.ended.entry(task.state).or_default() += 1;
        if !matches!(
            task.state,
            TaskStatus::Succeeded | TaskStatus::Failed | TaskStatus::Cancelled
        ) {
            return;
        }
        let (Some(started), Some(finished)) = (task.started, task.finished) else {
            return;
        };
        let zero = *self.zero.get_or_insert(task.submitted);
        let model = |unix: f64| (unix - zero) * scale;
        let (start, end) = (model(started), model(finished));
        // Re-evaluated at default clocks: the measured energy scaled by the
        // model's E*/Ê and the run time by t*/t̂.
        let (energy, time) = match &task.clocks {
            Some(c) if c.t > 0.0 && c.p > 0.0 => {
                (c.default_p * c.default_t / (c.p * c.t), c.default_t / c.t)
            }
            _ => (1.0, 1.0),
        };
        for &d in &task.devices {
            let d = d as usize;
            if self.busy_s.len() <= d {
                self.busy_s.resize(d + 1, 0.0);
                self.default_busy_s.resize(d + 1, 0.0);
            }
            self.busy_s[d] += end - start;
            self.default_busy_s[d] += (end - start) * time;
        }
        let j = task.energy_j.unwrap_or(0.0);
        self.busy_j += j;
        self.default_busy_j += j * energy;
        self.totals.add(&Completed {
            arrival: model(task.submitted),
            deadline: model(task.submitted) + task.spec.deadline,
            weight: task.spec.weight,
            start,
            end,
            devices: task.devices.len(),
        });
    }

    /// Ended tasks in `state`.
    pub fn ended(&self, state: TaskStatus) -> usize {
        self.ended.get(&state).copied().unwrap_or(0)
    }

    /// The metrics of the tasks that ran, on `devices` under `policy`, with
    /// `rejected` (the rejected tasks' ids and reasons), over the span from
    /// the first ran task's submission to the last one's end.
    pub fn metrics(
        &self,
        policy: &str,
        rejected: Vec<Rejection>,
        devices: &[DeviceSpec],
    ) -> Metrics {
        // Counted from the first submission: every end is after it.
        let totals = Totals {
            makespan: self.totals.makespan - self.totals.first_arrival,
            first_arrival: 0.0,
            ..self.totals
        };
        let per_device = |busy: &[f64]| {
            let mut busy = busy.to_vec();
            busy.resize(devices.len(), 0.0);
            busy
        };
        let (busy_s, default_busy_s) = (per_device(&self.busy_s), per_device(&self.default_busy_s));
        let mut span = (0.0, 0.0);
        let mut metrics = Metrics::from_totals(
            policy,
            totals.count + rejected.len(),
            rejected,
            &totals,
            devices.len(),
            |from, to| {
                span = (from, to);
                energy_with_idle(devices, &busy_s, self.busy_j, from, to)
            },
        );
        if totals.count > 0 {
            let baseline = energy_with_idle(
                devices,
                &default_busy_s,
                self.default_busy_j,
                span.0,
                span.1,
            );
            metrics.set_baseline(baseline.total());
        }
        metrics
    }
}
