//! What `Metrics()` and `/metrics` need of the tasks that have ended, as
//! running sums: ended tasks are in the store only, and nothing here grows
//! with their number. The sums are stored too (`meta` key [`META_KEY`]),
//! in the transaction that writes the ended records they count, so that a
//! restart reads them instead of every ended task.

use std::collections::HashMap;

use gpu_agent_core::host::DeviceSpec;
use gpu_agent_core::metrics::{energy_with_idle, Completed, Metrics, Rejection, Totals};
use gpu_agent_dbus::{TaskInfo, TaskStatus};

/// The `meta` key of the stored tally (JSON).
pub(super) const META_KEY: &str = "tally";

/// The ended tasks, summed up.
#[derive(Default, Clone, Debug, PartialEq)]
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

/// A [`Tally`] as stored: the same figures, JSON-friendly (the first
/// arrival of no ran task, infinite in [`Totals`], is none).
#[derive(serde::Serialize, serde::Deserialize)]
struct Stored {
    ended: Vec<(TaskStatus, usize)>,
    zero: Option<f64>,
    count: usize,
    twt: f64,
    twct: f64,
    completion: f64,
    dmc: usize,
    makespan: f64,
    busy: f64,
    first_arrival: Option<f64>,
    busy_s: Vec<f64>,
    busy_j: f64,
    default_busy_s: Vec<f64>,
    default_busy_j: f64,
}

impl Tally {
    /// The tally as stored under [`META_KEY`].
    pub fn to_json(&self) -> String {
        let t = &self.totals;
        let mut ended: Vec<_> = self.ended.iter().map(|(&s, &n)| (s, n)).collect();
        ended.sort_by_key(|&(s, _)| s.as_str());
        let stored = Stored {
            ended,
            zero: self.zero,
            count: t.count,
            twt: t.twt,
            twct: t.twct,
            completion: t.completion,
            dmc: t.dmc,
            makespan: t.makespan,
            busy: t.busy,
            first_arrival: t.first_arrival.is_finite().then_some(t.first_arrival),
            busy_s: self.busy_s.clone(),
            busy_j: self.busy_j,
            default_busy_s: self.default_busy_s.clone(),
            default_busy_j: self.default_busy_j,
        };
        serde_json::to_string(&stored).expect("a tally serialises")
    }

    /// A tally stored by [`Tally::to_json`].
    pub fn from_json(json: &str) -> Result<Tally, serde_json::Error> {
        let s: Stored = serde_json::from_str(json)?;
        Ok(Tally {
            ended: s.ended.into_iter().collect(),
            zero: s.zero,
            totals: Totals {
                count: s.count,
                twt: s.twt,
                twct: s.twct,
                completion: s.completion,
                dmc: s.dmc,
                makespan: s.makespan,
                busy: s.busy,
                first_arrival: s.first_arrival.unwrap_or(f64::INFINITY),
            },
            busy_s: s.busy_s,
            busy_j: s.busy_j,
            default_busy_s: s.default_busy_s,
            default_busy_j: s.default_busy_j,
        })
    }

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
            // A task without a deadline is never late.
            deadline: model(task.submitted) + task.spec.deadline.unwrap_or(f64::INFINITY),
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

    /// Ended tasks in all.
    pub fn ended_total(&self) -> usize {
        self.ended.values().sum()
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

#[cfg(test)]
mod tests {
    use super::*;
    use gpu_agent_dbus::SubmitSpec;

    fn ended(id: &str, state: TaskStatus, times: Option<(f64, f64)>) -> TaskInfo {
        TaskInfo {
            id: id.into(),
            state,
            owner_uid: 0,
            devices: vec![1],
            submitted: 1000.0,
            started: times.map(|t| t.0),
            finished: times.map(|t| t.1),
            exit_code: None,
            energy_j: times.map(|_| 123.456_789),
            reason: None,
            spec: SubmitSpec::new(1.0, 1.0, 0.1, 3.0),
            clocks: None,
            waiting: None,
        }
    }

    #[test]
    fn a_stored_tally_reads_back_exactly() {
        let empty = Tally::default();
        assert_eq!(Tally::from_json(&empty.to_json()).unwrap(), empty);
        // Only rejected: counted, nothing ran (no first arrival).
        let mut tally = Tally::default();
        tally.add(&ended("t1", TaskStatus::Rejected, None), 1000.0);
        assert_eq!(Tally::from_json(&tally.to_json()).unwrap(), tally);
        // Ran, late, with sums that need every bit of their f64s.
        tally.add(
            &ended("t2", TaskStatus::Succeeded, Some((1000.1, 1000.3))),
            1000.0,
        );
        tally.add(
            &ended("t3", TaskStatus::Failed, Some((1000.3, 1000.7))),
            1000.0,
        );
        let back = Tally::from_json(&tally.to_json()).unwrap();
        assert_eq!(back, tally);
        assert_eq!(back.ended(TaskStatus::Succeeded), 1);
        assert_eq!(back.ended(TaskStatus::Rejected), 1);
        assert!(Tally::from_json("{\"ended\": []}").is_err());
        // A unix time that serde_json's default float parser reads back one
        // bit off (as 1891198857.9370563): the workspace enables its
        // float_roundtrip feature.
        let mut unix = Tally::default();
        let submitted = 1_891_198_857.937_056_5;
        let mut task = ended(
            "t4",
            TaskStatus::Succeeded,
            Some((submitted, submitted + 42.0)),
        );
        task.submitted = submitted;
        unix.add(&task, 1.0);
        assert_eq!(Tally::from_json(&unix.to_json()).unwrap(), unix);
    }

    #[test]
    fn a_task_without_a_deadline_is_never_late() {
        let ran = Some((1000.0, 2000.0));
        let mut due = Tally::default();
        due.add(&ended("t1", TaskStatus::Succeeded, ran), 1.0);
        assert_eq!(due.totals.dmc, 1);
        assert!(
            (due.totals.twt - 3.0 * 999.9).abs() < 1e-6,
            "{}",
            due.totals.twt
        );
        let mut free = Tally::default();
        let mut task = ended("t1", TaskStatus::Succeeded, ran);
        task.spec.deadline = None;
        free.add(&task, 1.0);
        assert_eq!((free.totals.dmc, free.totals.twt), (0, 0.0));
        assert_eq!(free.totals.count, 1);
        assert_eq!(Tally::from_json(&free.to_json()).unwrap(), free);
    }
}
