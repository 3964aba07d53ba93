//! The configurations (device count and device set) a task may run on.

use gpu_agent_plugin_api::{Clocks, Task, TaskKey, View};

/// One way to run a task: a set of devices, its run time and its usage cost.
#[derive(Debug, Clone, PartialEq)]
pub struct Config {
    /// Its devices, ascending.
    pub devices: Vec<u32>,
    /// Run time there at default clocks: the slowest device's, scaled to the
    /// device count (`Task::scaled`).
    pub runtime: f64,
    /// Usage cost: the devices' `cost_per_hour` / 3600 times the run time.
    pub cost: f64,
}

/// A task to place and the configurations it may take.
#[derive(Debug, Clone, PartialEq)]
pub struct Candidate {
    /// The task.
    pub key: TaskKey,
    /// Its weight.
    pub weight: f64,
    /// Its absolute deadline.
    pub deadline: f64,
    /// Where it may run; never empty.
    pub configs: Vec<Config>,
}

impl Candidate {
    /// The weighted tardiness plus usage cost of running configuration `c`
    /// from `start`.
    pub fn penalty(&self, c: usize, start: f64) -> f64 {
        let config = &self.configs[c];
        self.weight * (start + config.runtime - self.deadline).max(0.0) + config.cost
    }
}

/// The devices among `devices` that can hold `task`.
pub fn usable(view: &View<'_>, task: &Task, devices: &[u32]) -> Vec<u32> {
    devices
        .iter()
        .copied()
        .filter(|&j| task.fits(&view.devices[j as usize]))
        .collect()
}

/// Whether `usable` (devices that can hold `task`) hold one of its device
/// counts: g of them that may form a gang of g (no MIG instance in a gang).
pub fn holds(view: &View<'_>, task: &Task, usable: &[u32]) -> bool {
    task.gpu_counts()
        .any(|g| gang_members(view, usable, g).count() >= g as usize)
}

/// The devices of `devices` that may be one of `g` devices of a placement.
fn gang_members<'v>(
    view: &'v View<'_>,
    devices: &'v [u32],
    g: u32,
) -> impl Iterator<Item = u32> + 'v {
    devices
        .iter()
        .copied()
        .filter(move |&j| view.devices[j as usize].takes_gang_of(g))
}

/// `task`'s configurations on `usable` (devices that can hold it, at least as
/// many as one of its counts), where device j is free from `release(j)`.
///
/// The devices are ordered by (release, the task's run time there, cost per
/// hour, index); for each count g (`gpus`, then `alt_gpus`) that they allow,
/// that order, less the MIG instances when g > 1, is cut into consecutive
/// blocks of g devices (a shorter remainder is dropped), each block one
/// configuration. The blocks are taken
/// round-robin over the counts (the first block of every count, then the
/// second, ...) until `max_configs` are taken. Blocks never overlap within a
/// count, so tasks of one group can run side by side.
pub fn candidate(
    view: &View<'_>,
    task: &Task,
    usable: &[u32],
    release: impl Fn(u32) -> f64,
    max_configs: usize,
) -> Candidate {
    let devices = view.devices.as_slice();
    let mut order = usable.to_vec();
    order.sort_by(|&a, &b| {
        let (da, db) = (&devices[a as usize], &devices[b as usize]);
        release(a)
            .total_cmp(&release(b))
            .then(task.runtime_on(da).total_cmp(&task.runtime_on(db)))
            .then(da.cost_per_hour.total_cmp(&db.cost_per_hour))
            .then(a.cmp(&b))
    });
    // Per count, the order it cuts into blocks.
    let counts: Vec<(usize, Vec<u32>)> = task
        .gpu_counts()
        .map(|g| {
            (
                g as usize,
                gang_members(view, &order, g).collect::<Vec<_>>(),
            )
        })
        .filter(|(g, members)| *g <= members.len())
        .collect();
    let factor = task.app.time_factor(Clocks::DEFAULT);
    let mut configs = Vec::new();
    'rounds: for round in 0.. {
        let mut any = false;
        for (g, order) in &counts {
            let g = *g;
            let Some(block) = order.chunks_exact(g).nth(round) else {
                continue;
            };
            any = true;
            let slowest = block
                .iter()
                .map(|&j| task.runtime_on(&devices[j as usize]))
                .fold(0.0, f64::max);
            let runtime = task.scaled(slowest, g as u32) * factor;
            let rate: f64 = block
                .iter()
                .map(|&j| devices[j as usize].cost_per_hour)
                .sum();
            let mut chosen = block.to_vec();
            chosen.sort_unstable();
            configs.push(Config {
                devices: chosen,
                runtime,
                cost: rate / 3600.0 * runtime,
            });
            if configs.len() == max_configs {
                break 'rounds;
            }
        }
        if !any {
            break;
        }
    }
    Candidate {
        key: task.key,
        weight: task.weight,
        deadline: task.deadline,
        configs,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{device, task, Fixture};

    #[test]
    fn blocks_follow_release_then_speed_then_cost() {
        // Devices: 0 slow, 1 fast and dear, 2 fast and cheap, 3 fast but busy until 5.
        let mut f = Fixture::new(0.0);
        f.devices = vec![
            device(0, 1.0, 0.0),
            device(1, 2.0, 36.0),
            device(2, 2.0, 0.0),
            device(3, 2.0, 0.0),
        ];
        f.devices[3].available_at = 5.0;
        let mut t = task(0, 8.0, 100.0, 1.0);
        t.gpus = 2;
        t.alt_gpus = vec![1, 4].into();
        f.tasks.push(t);
        let view = f.view();
        let c = candidate(
            &view,
            view.task(0),
            &[0, 1, 2, 3],
            |j| view.devices[j as usize].available_at,
            8,
        );
        let got: Vec<(Vec<u32>, f64, f64)> = c
            .configs
            .iter()
            .map(|c| (c.devices.clone(), c.runtime, c.cost))
            .collect();
        // Order: 2 (free, 4 s, 0), 1 (free, 4 s, 36), 0 (free, 8 s), 3 (busy).
        // Rounds: 2-blocks [2,1] [0,3]; 1-blocks [2] [1] [0] [3]; 4-block [2,1,0,3].
        // 2 GPUs: slowest 4 s → 4 s; 1 GPU: 8 s on a fast one; 4 GPUs: slowest 8 s / 2.
        assert_eq!(
            got,
            vec![
                (vec![1, 2], 4.0, 0.04),
                (vec![2], 8.0, 0.0),
                (vec![0, 1, 2, 3], 4.0, 0.04),
                (vec![0, 3], 8.0, 0.0),
                (vec![1], 8.0, 0.08),
                (vec![0], 16.0, 0.0),
                (vec![3], 8.0, 0.0),
            ]
        );
        let capped = candidate(&view, view.task(0), &[0, 1, 2, 3], |_| 0.0, 2);
        assert_eq!(capped.configs.len(), 2);
    }

    #[test]
    fn counts_larger_than_the_devices_are_left_out() {
        let mut f = Fixture::new(0.0);
        f.devices = vec![device(0, 1.0, 0.0), device(1, 1.0, 0.0)];
        let mut t = task(0, 2.0, 100.0, 1.0);
        t.gpus = 3;
        t.alt_gpus = vec![1].into();
        f.tasks.push(t);
        let view = f.view();
        assert!(holds(&view, view.task(0), &[0, 1]));
        assert!(!holds(&view, view.task(0), &[]));
        let c = candidate(&view, view.task(0), &[0, 1], |_| 0.0, 8);
        let sets: Vec<Vec<u32>> = c.configs.iter().map(|c| c.devices.clone()).collect();
        assert_eq!(sets, [vec![0], vec![1]]);
        // 1 GPU: 2 s × 3 / 1 = 6 s; from 99 it ends at 105, 5 s late.
        assert_eq!(c.penalty(0, 99.0), 5.0);
    }
}
