//! The greedy earliest-finish placement rule (formats.md §5), shared by the
//! `greedy-eft` and `sa-greedy` policies.
//!
//! A task goes to the valid device with the earliest completion
//! max(now, avail_j) + p_ij, ties to the lowest device index.
//!
//! A gang task of k GPUs runs at the pace of its slowest device and starts when
//! the last of its devices is free. Among the valid devices ordered by
//! (start, index), for each prefix that ends at a distinct start time s the rule
//! takes the k fastest of the prefix (ties to the lower index); it keeps the set
//! with the earliest completion, ties to the earliest s.

use gpu_agent_plugin_api::{abi_stable::std_types::ROption, Decision, Task, View};

/// greedy-eft's whole decision (formats.md §5), reusable buffers included:
/// each pending task in the pending queue's order goes to the end of the
/// local queue of the devices [`choose`] picks, planned against the
/// availability earlier picks leave; a task no online devices can hold now
/// stays pending.
#[derive(Debug, Default)]
pub struct Placer {
    avail: Vec<f64>,
    runtimes: Vec<f64>,
    scratch: Scratch,
}

impl Placer {
    /// One [`Decision::Assign`] per pending task of `view` that can be
    /// placed now, in the pending queue's order.
    pub fn assign_pending(&mut self, view: &View<'_>) -> Vec<Decision> {
        self.assign_pending_avoiding(view, &[])
    }

    /// As [`Placer::assign_pending`], using none of the devices `avoid`
    /// (say, those of a GPU about to be drained).
    pub fn assign_pending_avoiding(&mut self, view: &View<'_>, avoid: &[u32]) -> Vec<Decision> {
        if view.pending.is_empty() {
            return Vec::new();
        }
        let Placer {
            avail,
            runtimes,
            scratch,
        } = self;
        avail.clear();
        avail.extend(view.devices.iter().map(|d| d.available_at));
        let mut decisions = Vec::with_capacity(view.pending.len());
        for &key in view.pending.iter() {
            let task = view.task(key);
            runtimes_into(view, task, runtimes);
            for &j in avoid {
                runtimes[j as usize] = f64::INFINITY;
            }
            let mut chosen = Vec::with_capacity(task.gpus as usize);
            let Some(end) = choose(view.now, task.gpus, runtimes, avail, scratch, &mut chosen)
            else {
                // Not enough online devices for it right now: leave it pending.
                continue;
            };
            for &j in &chosen {
                avail[j as usize] = end;
            }
            decisions.push(Decision::Assign {
                task: key,
                devices: chosen.into(),
                position: ROption::RNone,
                clocks: ROption::RNone,
            });
        }
        decisions
    }
}

/// Writes `task`'s run time on each device of `view` into `out`, in device
/// order: [`Task::runtime_on`] where the task fits as one of its `gpus`
/// devices ([`Task::fits_as`]: a gang takes no MIG instance),
/// `f64::INFINITY` where it does not (the form [`choose`] takes).
pub fn runtimes_into(view: &View<'_>, task: &Task, out: &mut Vec<f64>) {
    out.clear();
    out.extend(view.devices.iter().map(|d| {
        // `task.fits_as(d, task.gpus)` with the run time it needs computed
        // once (a division per device, not two).
        let runtime = task.runtime_on(d);
        let fits = d.online
            && d.memory_gb >= task.mem_gb
            && runtime.is_finite()
            && d.takes_gang_of(task.gpus);
        debug_assert_eq!(fits, task.fits_as(d, task.gpus));
        if fits {
            runtime
        } else {
            f64::INFINITY
        }
    }));
}

/// Reusable buffers for [`choose`], so that a planning loop does not allocate.
#[derive(Debug, Default)]
pub struct Scratch {
    /// (start, device) of the devices that can run the task.
    valid: Vec<(f64, usize)>,
    /// (run time, device, start) of the k fastest so far.
    fastest: Vec<(f64, usize, f64)>,
}

/// The greedy earliest-finish rule (see the crate documentation) for a task
/// needing `gpus` devices at once, with run time `runtimes[j]` on device `j`
/// (`f64::INFINITY` where it cannot run; see [`runtimes_into`]) and device `j`
/// free from `avail[j]`, at time `now`.
///
/// Writes the chosen devices, ascending, into `chosen` and returns the task's
/// completion time, or returns `None` (`chosen` then unspecified) when fewer
/// than `gpus` devices can run it.
pub fn choose(
    now: f64,
    gpus: u32,
    runtimes: &[f64],
    avail: &[f64],
    scratch: &mut Scratch,
    chosen: &mut Vec<u32>,
) -> Option<f64> {
    // max(avail, now), without f64::max's NaN handling (no NaN here).
    let start_at = |a: f64| if a > now { a } else { now };
    chosen.clear();
    if gpus == 1 {
        // The hot loop of list scheduling. Four lanes (device j in lane j mod 4)
        // keep the earliest completion and its lowest index each, without
        // branches and independently of each other; the merge takes the least
        // (completion, index). An infinite run time never ends strictly earlier
        // than infinity, so devices the task cannot use need no test.
        const LANES: usize = 4;
        let mut end = [f64::INFINITY; LANES];
        let mut at = [usize::MAX; LANES];
        let mut lane = |j: usize, e: f64| {
            let l = j % LANES;
            if e < end[l] {
                (end[l], at[l]) = (e, j);
            }
        };
        let whole = runtimes.len() / LANES * LANES;
        for (c, (rs, avs)) in runtimes
            .chunks_exact(LANES)
            .zip(avail.chunks_exact(LANES))
            .enumerate()
        {
            for l in 0..LANES {
                lane(c * LANES + l, start_at(avs[l]) + rs[l]);
            }
        }
        for j in whole..runtimes.len() {
            lane(j, start_at(avail[j]) + runtimes[j]);
        }
        let (mut best, mut best_end) = (usize::MAX, f64::INFINITY);
        for l in 0..LANES {
            if end[l] < best_end || (end[l] == best_end && at[l] < best) {
                (best, best_end) = (at[l], end[l]);
            }
        }
        if best == usize::MAX {
            return None;
        }
        chosen.push(best as u32);
        return Some(best_end);
    }

    let k = gpus as usize;
    let Scratch { valid, fastest } = scratch;
    valid.clear();
    valid.extend(
        runtimes
            .iter()
            .zip(avail)
            .enumerate()
            .filter(|(_, (&r, _))| r != f64::INFINITY)
            .map(|(j, (_, &a))| (start_at(a), j)),
    );
    if valid.len() < k {
        return None;
    }
    valid.sort_unstable_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
    // Walk the devices by start, keeping the k fastest seen so far, ordered by
    // (run time, index); evaluate at the end of each run of equal starts.
    fastest.clear();
    let mut best: Option<f64> = None;
    for (n, &(start_j, j)) in valid.iter().enumerate() {
        let r = runtimes[j];
        let at = fastest.partition_point(|&(ri, i, _)| ri.total_cmp(&r).then(i.cmp(&j)).is_lt());
        if at < k {
            fastest.insert(at, (r, j, start_j));
            fastest.truncate(k);
        }
        let boundary = valid.get(n + 1).is_none_or(|&(next, _)| next != start_j);
        if fastest.len() < k || !boundary {
            continue;
        }
        let start = fastest.iter().map(|&(_, _, s)| s).fold(now, f64::max);
        let end = start + fastest[k - 1].0;
        if best.is_none_or(|b| end < b) {
            chosen.clear();
            chosen.extend(fastest.iter().map(|&(_, i, _)| i as u32));
            chosen.sort_unstable();
            best = Some(end);
        }
    }
    best
}

#[cfg(test)]
mod tests {
    use super::*;

    const INF: f64 = f64::INFINITY;

    fn pick(now: f64, gpus: u32, runtimes: &[f64], avail: &[f64]) -> Option<(Vec<u32>, f64)> {
        let mut chosen = Vec::new();
        let end = choose(
            now,
            gpus,
            runtimes,
            avail,
            &mut Scratch::default(),
            &mut chosen,
        )?;
        Some((chosen, end))
    }

    #[test]
    fn single_task_takes_the_earliest_completion_ties_to_the_lower_index() {
        // Completions 0+4, 1+3, 2+2: devices 1 and 2 tie at 4 with device 0 → device 0.
        assert_eq!(
            pick(0.0, 1, &[4.0, 3.0, 2.0], &[0.0, 1.0, 2.0]),
            Some((vec![0], 4.0))
        );
        // Device 0 cannot run it; `now` delays every start.
        assert_eq!(
            pick(5.0, 1, &[INF, 3.0, 2.0], &[0.0, 1.0, 9.0]),
            Some((vec![1], 8.0))
        );
        assert_eq!(pick(0.0, 1, &[INF, INF], &[0.0, 0.0]), None);
        // Ties across many devices go to the lowest index, whatever its lane.
        let mut runtimes = vec![9.0; 11];
        for j in [3, 6, 10] {
            runtimes[j] = 2.0;
        }
        assert_eq!(pick(0.0, 1, &runtimes, &[0.0; 11]), Some((vec![3], 2.0)));
        runtimes[9] = 1.0;
        assert_eq!(pick(0.0, 1, &runtimes, &[0.0; 11]), Some((vec![9], 1.0)));
    }

    #[test]
    fn gang_waits_for_its_last_device_and_runs_at_its_slowest_pace() {
        // Starts 4, 6, 6, equal run times: the first prefix of two devices ends at
        // s = 6 and holds all three; the two fastest by (run time, index) are 0, 1.
        assert_eq!(
            pick(1.0, 2, &[2.0, 2.0, 2.0], &[4.0, 6.0, 6.0]),
            Some((vec![0, 1], 8.0))
        );
        // Waiting for a fast device beats starting now on a slow one:
        // {0, 1} now ends at 10; {0, 2} at 3 + 4 = 7.
        assert_eq!(
            pick(0.0, 2, &[1.0, 10.0, 4.0], &[0.0, 0.0, 3.0]),
            Some((vec![0, 2], 7.0))
        );
        assert_eq!(pick(0.0, 3, &[1.0, INF, 1.0], &[0.0, 0.0, 0.0]), None);
    }

    #[test]
    fn single_task_agrees_with_a_plain_minimum_over_devices() {
        // A small xorshift: deterministic cases without a dependency.
        let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
        let mut next = |n: u64| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x % n
        };
        for _ in 0..2000 {
            let m = 1 + next(13) as usize;
            let runtimes: Vec<f64> = (0..m)
                .map(|_| if next(4) == 0 { INF } else { next(6) as f64 })
                .collect();
            let avail: Vec<f64> = (0..m).map(|_| next(6) as f64).collect();
            let now = next(4) as f64;
            // The first device, by index, of the least finite completion.
            let expected = (0..m)
                .filter(|&j| runtimes[j].is_finite())
                .map(|j| (avail[j].max(now) + runtimes[j], j))
                .min_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)))
                .map(|(end, j)| (vec![j as u32], end));
            assert_eq!(
                pick(now, 1, &runtimes, &avail),
                expected,
                "{runtimes:?} {avail:?} {now}"
            );
        }
    }
}
