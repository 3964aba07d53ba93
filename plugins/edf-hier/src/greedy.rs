//! The greedy rule: each task in turn takes its best configuration.

use crate::config::Candidate;
use crate::timeline::Timeline;

/// Where a task goes: the index of its configuration and its start.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Placement {
    /// Index into the candidate's configurations.
    pub config: usize,
    /// Absolute start, seconds.
    pub start: f64,
}

/// Places `tasks` one after another, in the order given, from `now`: each
/// takes the configuration whose earliest gap on `timeline` gives the least
/// weighted tardiness plus usage cost (ties: the earliest completion, then the
/// first configuration), and is booked there before the next is placed.
pub fn place(tasks: &[Candidate], timeline: &mut Timeline, now: f64) -> Vec<Placement> {
    tasks
        .iter()
        .map(|task| {
            let mut best: Option<(f64, f64, Placement)> = None;
            for (c, config) in task.configs.iter().enumerate() {
                let start = timeline.earliest(&config.devices, now, config.runtime);
                let key = (task.penalty(c, start), start + config.runtime);
                if best
                    .as_ref()
                    .is_none_or(|&(p, end, _)| key.0 < p || (key.0 == p && key.1 < end))
                {
                    best = Some((key.0, key.1, Placement { config: c, start }));
                }
            }
            let (_, end, placement) = best.expect("a candidate has a configuration");
            timeline.book(
                &task.configs[placement.config].devices,
                placement.start,
                end,
            );
            placement
        })
        .collect()
}

/// The weighted tardiness plus usage cost of `placements` of `tasks`.
pub fn objective(tasks: &[Candidate], placements: &[Placement]) -> f64 {
    tasks
        .iter()
        .zip(placements)
        .map(|(t, p)| t.penalty(p.config, p.start))
        .sum()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::config;

    #[test]
    fn each_task_takes_its_cheapest_then_earliest_configuration() {
        let tasks = [
            // Late either way, less so on two devices.
            Candidate {
                key: 0,
                weight: 1.0,
                deadline: 1.0,
                configs: vec![config(&[0], 4.0, 0.0), config(&[0, 1], 2.0, 0.0)],
            },
            // On time on device 1 after task 0; device 0 is dearer.
            Candidate {
                key: 1,
                weight: 1.0,
                deadline: 10.0,
                configs: vec![config(&[0], 3.0, 0.5), config(&[1], 3.0, 0.0)],
            },
            // Ties at zero penalty: the earliest completion wins (device 0 at 2).
            Candidate {
                key: 2,
                weight: 1.0,
                deadline: 100.0,
                configs: vec![config(&[1], 1.0, 0.0), config(&[0], 1.0, 0.0)],
            },
        ];
        let mut timeline = Timeline::new(0.0, &[0.0, 0.0]);
        let placed = place(&tasks, &mut timeline, 0.0);
        assert_eq!(
            placed,
            [
                Placement {
                    config: 1,
                    start: 0.0
                },
                Placement {
                    config: 1,
                    start: 2.0
                },
                Placement {
                    config: 1,
                    start: 2.0
                },
            ]
        );
        // Task 0 ends at 2, 1 s late; the others are on time and free.
        assert_eq!(objective(&tasks, &placed), 1.0);
    }
}
