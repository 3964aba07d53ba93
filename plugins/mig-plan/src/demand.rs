//! Each application's observed demand: the work its tasks submitted over a
//! sliding window, per second.

use std::collections::VecDeque;

use gpu_agent_plugin_api::{TaskKey, TaskState, View};

/// One submitted task, as the window keeps it.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Submitted {
    /// When the policy first saw it, seconds.
    at: f64,
    /// Index into [`Window::apps`].
    app: usize,
    /// Device-work: its workload times its gang size.
    work: f64,
    /// Memory it needs on each device, GB.
    mem_gb: f64,
    /// Whether it is a gang (several devices at once).
    gang: bool,
}

/// One application's demand over the window. Gang tasks count apart from
/// the application's single-device tasks (only whole GPUs serve them).
#[derive(Debug, Clone, PartialEq)]
pub struct AppDemand {
    /// The application (the task's `app` profile name).
    pub app: String,
    /// Whether these are its gang tasks.
    pub gang: bool,
    /// Work submitted per second (device-work: workload times gang size).
    pub rate: f64,
    /// The most memory one of its tasks needs on a device, GB.
    pub mem_gb: f64,
}

/// The sliding window over submitted tasks.
#[derive(Debug, Clone)]
pub struct Window {
    /// Its length, seconds.
    length_s: f64,
    /// When the policy was first called: the window is full `length_s` later.
    since: Option<f64>,
    /// The key of the next task to take in (keys below it were taken in).
    taken: TaskKey,
    /// Tasks submitted within the window, oldest first.
    submitted: VecDeque<Submitted>,
    /// Application names seen, in order of first sight.
    apps: Vec<String>,
}

impl Window {
    /// An empty window of `length_s` seconds.
    pub fn new(length_s: f64) -> Window {
        Window {
            length_s,
            since: None,
            taken: 0,
            submitted: VecDeque::new(),
            apps: Vec::new(),
        }
    }

    /// Takes in the tasks `view` holds that it has not seen yet (keys are
    /// handed out in submission order), as submitted now, but those the
    /// agent already refused, and forgets those submitted before the window.
    pub fn observe(&mut self, view: &View<'_>) {
        let now = view.now;
        self.since.get_or_insert(now);
        let tasks = view.held.as_slice();
        let new = tasks.partition_point(|t| t.key < self.taken);
        for task in &tasks[new..] {
            // Refused before any policy saw it: no device set can hold it.
            if task.state == TaskState::Rejected {
                continue;
            }
            let name = task.app.name.as_str();
            let app = match self.apps.iter().position(|a| a == name) {
                Some(i) => i,
                None => {
                    self.apps.push(name.to_string());
                    self.apps.len() - 1
                }
            };
            self.submitted.push_back(Submitted {
                at: now,
                app,
                work: task.workload * f64::from(task.gpus.max(1)),
                mem_gb: task.mem_gb,
                gang: task.gpus > 1,
            });
        }
        if let Some(last) = tasks.last() {
            self.taken = self.taken.max(last.key + 1);
        }
        while self
            .submitted
            .front()
            .is_some_and(|s| s.at <= now - self.length_s)
        {
            self.submitted.pop_front();
        }
    }

    /// Whether a whole window has passed since the first call at `now`.
    pub fn full(&self, now: f64) -> bool {
        self.since.is_some_and(|s| now - s >= self.length_s)
    }

    /// Whether any task was submitted within the window.
    pub fn is_empty(&self) -> bool {
        self.submitted.is_empty()
    }

    /// The demand of each application (and, apart, of its gangs) that
    /// submitted work within the window: applications in order of first
    /// sight, single-device tasks before gangs.
    pub fn demands(&self) -> Vec<AppDemand> {
        let mut out: Vec<AppDemand> = Vec::new();
        for gang in [false, true] {
            for (app, name) in self.apps.iter().enumerate() {
                let mut seen = self
                    .submitted
                    .iter()
                    .filter(|s| s.app == app && s.gang == gang)
                    .peekable();
                if seen.peek().is_none() {
                    continue;
                }
                let (work, mem_gb) =
                    seen.fold((0.0, 0.0_f64), |(w, m), s| (w + s.work, m.max(s.mem_gb)));
                out.push(AppDemand {
                    app: name.clone(),
                    gang,
                    rate: work / self.length_s,
                    mem_gb,
                });
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use gpu_agent_plugin_api::abi_stable::std_types::RSlice;
    use gpu_agent_plugin_api::{Task, View};

    use super::*;
    use crate::testing::task;

    fn at<'a>(now: f64, tasks: &'a [Task]) -> View<'a> {
        View {
            now,
            held: RSlice::from_slice(tasks),
            pending: RSlice::EMPTY,
            devices: RSlice::EMPTY,
        }
    }

    /// Rates over a 10 s window: tasks count from when they were first seen
    /// and leave the window 10 s later; a gang counts its work on each of
    /// its devices, apart.
    #[test]
    fn demand_is_work_per_second_over_the_window() {
        let mut w = Window::new(10.0);
        let tasks = [
            task(0, "a", 20.0, 4.0, 1),
            task(1, "b", 5.0, 30.0, 1),
            task(2, "a", 10.0, 8.0, 1),
            task(3, "a", 3.0, 1.0, 2),
        ];
        w.observe(&at(0.0, &tasks[..1]));
        assert!(!w.full(9.0) && w.full(10.0));
        w.observe(&at(4.0, &tasks[..4]));
        let d = |app: &str, gang: bool, rate: f64, mem_gb: f64| AppDemand {
            app: app.into(),
            gang,
            rate,
            mem_gb,
        };
        assert_eq!(
            w.demands(),
            vec![
                d("a", false, 3.0, 8.0),
                d("b", false, 0.5, 30.0),
                d("a", true, 0.6, 1.0)
            ]
        );
        // At 10 the task seen at 0 has left the window; at 14 all have.
        w.observe(&at(10.0, &tasks));
        assert_eq!(
            w.demands(),
            vec![
                d("a", false, 1.0, 8.0),
                d("b", false, 0.5, 30.0),
                d("a", true, 0.6, 1.0)
            ]
        );
        w.observe(&at(14.0, &tasks));
        assert!(w.is_empty() && w.demands().is_empty());
    }
}
