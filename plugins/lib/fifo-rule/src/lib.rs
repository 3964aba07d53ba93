//! The first-come-first-served placement rule (formats.md §5), shared by the
//! `fifo` policy and the core's built-in fallback.
//!
//! Tasks are taken in arrival order (the pending queue's order; ties in trace
//! order). Each goes to the valid device with the earliest start
//! max(a_i, avail_j), ties to the lowest device index, at the end of that
//! device's local queue. A gang task of k GPUs takes the k valid devices that
//! come first by (start, index) and starts on all of them when the last is free;
//! a gang never takes a MIG instance.

use gpu_agent_plugin_api::{
    abi_stable::{
        rvec,
        std_types::{ROption, RVec},
    },
    Decision, Event, PolicyImpl, View,
};

/// The FIFO policy. It keeps no state from one call to the next, only
/// buffers: every call places the whole pending queue.
#[derive(Debug, Default)]
pub struct Fifo {
    /// When each device is free, as this call's placements leave it.
    avail: Vec<f64>,
    /// The devices a gang task fits, by (start, index).
    valid: Vec<usize>,
}

impl PolicyImpl for Fifo {
    fn on_event(&mut self, view: &View<'_>, _event: &Event) -> Result<Vec<Decision>, String> {
        if view.pending.is_empty() {
            return Ok(Vec::new());
        }
        let Fifo { avail, valid } = self;
        avail.clear();
        avail.extend(view.devices.iter().map(|d| d.available_at));
        let mut decisions = Vec::with_capacity(view.pending.len());
        for &key in view.pending.iter() {
            let task = view.task(key);
            let start_on = |j: usize| avail[j].max(view.now);
            let k = task.gpus as usize;
            let chosen: RVec<u32> = if k == 1 {
                // The earliest start, the first (lowest index) of equals.
                let mut best: Option<(f64, usize)> = None;
                for d in view.devices.iter() {
                    let j = d.index as usize;
                    let start = start_on(j);
                    // The fit test (a division for the run time) only on a
                    // device that would start it earlier than the best yet.
                    if best.is_none_or(|(s, _)| start.total_cmp(&s).is_lt()) && task.fits(d) {
                        best = Some((start, j));
                    }
                }
                let Some((_, j)) = best else {
                    continue; // no online device holds it right now: leave it pending
                };
                rvec![j as u32]
            } else {
                valid.clear();
                valid.extend(
                    view.devices
                        .iter()
                        .filter(|d| task.fits_as(d, task.gpus))
                        .map(|d| d.index as usize),
                );
                if valid.len() < k {
                    continue; // not enough online devices for it right now: leave it pending
                }
                // The first k by (start, index), in that order: those a
                // stable sort by start would put first.
                let order =
                    |a: &usize, b: &usize| start_on(*a).total_cmp(&start_on(*b)).then(a.cmp(b));
                if valid.len() > k {
                    valid.select_nth_unstable_by(k - 1, order);
                }
                valid[..k].sort_unstable_by(order);
                valid[..k].iter().map(|&j| j as u32).collect()
            };
            let start = chosen
                .iter()
                .map(|&j| start_on(j as usize))
                .fold(view.now, f64::max);
            let runtime = chosen
                .iter()
                .map(|&j| task.runtime_on(&view.devices[j as usize]))
                .fold(0.0, f64::max);
            for &j in &chosen {
                avail[j as usize] = start + runtime;
            }
            decisions.push(Decision::Assign {
                task: key,
                devices: chosen,
                position: ROption::RNone,
                clocks: ROption::RNone,
            });
        }
        Ok(decisions)
    }
}

#[cfg(test)]
mod tests {
    use gpu_agent_plugin_api::{
        abi_stable::std_types::{RSlice, RStr},
        AppModel, ClockRange, Device, PowerModel, Task, TaskState,
    };

    use super::*;

    fn device(index: u32, memory_gb: f64, available_at: f64) -> Device<'static> {
        Device {
            index,
            model: RStr::from_str("T4"),
            memory_gb,
            speed: 1.0,
            cost_per_hour: 0.0,
            online: true,
            running: ROption::RNone,
            queue: RSlice::from_slice(&[]),
            available_at,
            clock_range: ClockRange::DEFAULT_ONLY,
            default_power: PowerModel {
                p0: 10.0,
                gamma: 12.0,
                c: 48.0,
            },
            mig: ROption::RNone,
        }
    }

    fn task(key: u64, gpus: u32) -> Task {
        Task {
            key,
            id: format!("t{key}").into(),
            arrival: 0.0,
            workload: 2.0,
            mem_gb: 16.0,
            deadline: 100.0,
            weight: 1.0,
            gpus,
            alt_gpus: RVec::new(),
            runtimes: RVec::new(),
            app: AppModel::builtin_default(),
            state: TaskState::Pending,
        }
    }

    /// The devices each pending task of `tasks` goes to, in order.
    fn placed(devices: &[Device<'static>], tasks: &[Task]) -> Vec<Vec<u32>> {
        let pending: Vec<u64> = tasks.iter().map(|t| t.key).collect();
        let view = View {
            now: 1.0,
            held: RSlice::from_slice(tasks),
            pending: RSlice::from_slice(&pending),
            devices: RSlice::from_slice(devices),
        };
        Fifo::default()
            .on_event(&view, &Event::Timer)
            .unwrap()
            .into_iter()
            .map(|d| match d {
                Decision::Assign { devices, .. } => devices.to_vec(),
                other => panic!("{other:?}"),
            })
            .collect()
    }

    /// Earliest start, ties to the lowest index, devices that cannot hold
    /// the task skipped even when earliest; a gang takes the first k by
    /// (start, index), in that order; starts before `now` count as `now`.
    #[test]
    fn earliest_start_ties_to_the_lowest_index_gangs_by_start_then_index() {
        // Device 0 is earliest but too small; 2 and 4 tie at now (1.0).
        let devices = [
            device(0, 8.0, 0.0),
            device(1, 40.0, 5.0),
            device(2, 40.0, 0.5),
            device(3, 40.0, 3.0),
            device(4, 40.0, 1.0),
            device(5, 40.0, 2.0),
        ];
        assert_eq!(placed(&devices, &[task(0, 1)]), [vec![2]]);
        assert_eq!(placed(&devices, &[task(0, 3)]), [vec![2, 4, 5]]);
        // Each placement moves its devices' start for the next task: the
        // gang of two ends at 1 + 2 on devices 2 and 4, so 5 (2.0) is first,
        // then 2, 3 and 4 (all 3.0), by index.
        assert_eq!(
            placed(&devices, &[task(0, 2), task(1, 4)]),
            [vec![2, 4], vec![5, 2, 3, 4]]
        );
        // Not enough devices hold it: it stays pending.
        assert!(placed(&devices, &[task(0, 6)]).is_empty());
    }
}
