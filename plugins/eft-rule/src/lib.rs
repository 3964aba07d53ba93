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

use gpu_agent_plugin_api::{Task, View};

/// Writes `task`'s run time on each device of `view` into `out`, in device
/// order: [`Task::runtime_on`] where the task [`fits`](Task::fits),
/// `f64::INFINITY` where it does not (the form [`choose`] takes).
pub fn runtimes_into(view: &View<'_>, task: &Task, out: &mut Vec<f64>) {
    out.clear();
    out.extend(view.devices.iter().map(|d| {
        if task.fits(d) {
            task.runtime_on(d)
        } else {
            f64::INFINITY
        }
    }));
}

/// Reusable buffers for [`choose`], so that a planning loop does not allocate.
#[derive(Debug, Default)]
pub struct Scratch {
    valid: Vec<usize>,
    fastest: Vec<(f64, usize)>,
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
    let start_on = |j: usize| avail[j].max(now);
    chosen.clear();
    if gpus == 1 {
        let mut best: Option<(usize, f64)> = None;
        for (j, &r) in runtimes.iter().enumerate() {
            if r == f64::INFINITY {
                continue;
            }
            let end = start_on(j) + r;
            if best.is_none_or(|(_, b)| end < b) {
                best = Some((j, end));
            }
        }
        let (j, end) = best?;
        chosen.push(j as u32);
        return Some(end);
    }

    let k = gpus as usize;
    let Scratch { valid, fastest } = scratch;
    valid.clear();
    valid.extend((0..runtimes.len()).filter(|&j| runtimes[j] != f64::INFINITY));
    if valid.len() < k {
        return None;
    }
    valid.sort_by(|&a, &b| start_on(a).total_cmp(&start_on(b)));
    // Walk the devices by start, keeping the k fastest seen so far, ordered by
    // (run time, index); evaluate at the end of each run of equal starts.
    fastest.clear();
    let mut best: Option<f64> = None;
    for (n, &j) in valid.iter().enumerate() {
        let entry = (runtimes[j], j);
        let at = fastest.partition_point(|&(r, i)| r.total_cmp(&entry.0).then(i.cmp(&j)).is_lt());
        if at < k {
            fastest.insert(at, entry);
            fastest.truncate(k);
        }
        let boundary = valid
            .get(n + 1)
            .is_none_or(|&next| start_on(next) != start_on(j));
        if fastest.len() < k || !boundary {
            continue;
        }
        let start = fastest
            .iter()
            .map(|&(_, i)| start_on(i))
            .fold(now, f64::max);
        let end = start + fastest[k - 1].0;
        if best.is_none_or(|b| end < b) {
            chosen.clear();
            chosen.extend(fastest.iter().map(|&(_, i)| i as u32));
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
}
