use super::*;
use rand::seq::SliceRandom;
use rand::RngExt;

const INF: f64 = f64::INFINITY;

fn task(gpus: u32, weight: f64, deadline: f64, runtimes: &[f64]) -> PlanTask {
    PlanTask {
        gpus,
        weight,
        deadline,
        runtimes: runtimes.to_vec(),
    }
}

/// A random problem of `n` tasks on `m` devices: mixed speeds, gangs of up to
/// 3, devices some tasks cannot use, busy devices, deadlines tight and loose.
pub(crate) fn random_problem(rng: &mut crate::SearchRng, n: usize, m: usize) -> Problem {
    let now = 10.0;
    let speeds: Vec<f64> = (0..m)
        .map(|_| [0.5, 1.0, 2.0][rng.random_range::<usize, _>(0..3)])
        .collect();
    let avail = (0..m)
        .map(|_| now + f64::from(rng.random_range::<u32, _>(0..4)) * 5.0)
        .collect();
    let tasks = (0..n)
        .map(|_| {
            let gpus = if rng.random_range::<usize, _>(0..8) == 0 {
                rng.random_range::<u32, _>(2..=3).min(m as u32)
            } else {
                1
            };
            let work = f64::from(rng.random_range::<u32, _>(1..40));
            let mut runtimes: Vec<f64> = speeds.iter().map(|v| work / v).collect();
            // Some tasks cannot use some devices; keep enough for the gang.
            for j in 0..m {
                if rng.random_range::<usize, _>(0..6) == 0
                    && runtimes.iter().filter(|r| r.is_finite()).count() > gpus as usize
                {
                    runtimes[j] = INF;
                }
            }
            let deadline =
                now + f64::from(rng.random_range::<u32, _>(1..(8 * n as u32 / m as u32 + 20)));
            task(
                gpus,
                f64::from(rng.random_range::<u32, _>(1..5)),
                deadline,
                &runtimes,
            )
        })
        .collect();
    Problem::new(now, avail, tasks)
}

/// Device 0 (busy until 4) and device 1 (free now, at 2).
fn two_devices() -> Problem {
    Problem::new(
        2.0,
        vec![4.0, 2.0],
        vec![
            // 0: completes 4+1 = 5 on device 0, 2+3 = 5 on device 1 → device 0 (lower index).
            task(1, 2.0, 4.0, &[1.0, 3.0]),
            // 1: gang of both: starts when the last is free.
            task(2, 1.0, 20.0, &[2.0, 4.0]),
            // 2: only device 1 can run it.
            task(1, 3.0, 6.0, &[INF, 1.0]),
            // 3: no device can run it now.
            task(1, 5.0, 0.0, &[INF, INF]),
        ],
    )
}

#[test]
fn list_schedule_by_hand() {
    let p = two_devices();
    // Order 0, 1, 2, 3: 0 on device 0, 4..5; 1 on both, max(5, 2) = 5 .. 5+4 = 9;
    // 2 on device 1, 9..10; 3 left out.
    let plan = p.plan(&[0, 1, 2, 3]);
    let placed = |devices: &[u32], start, end| {
        Some(Placement {
            devices: devices.to_vec(),
            start,
            end,
        })
    };
    assert_eq!(
        plan,
        vec![
            placed(&[0], 4.0, 5.0),
            placed(&[0, 1], 5.0, 9.0),
            placed(&[1], 9.0, 10.0),
            None
        ]
    );
    // twt = 2*(5-4) + 0 + 3*(10-6); wct = 2*5 + 1*9 + 3*10.
    assert_eq!(
        p.cost(&[0, 1, 2, 3]),
        Cost {
            twt: 14.0,
            wct: 49.0
        }
    );
    // Order 2, 0, 1, 3: 2 on device 1, 2..3; 0 on device 0, 4..5 (device 1: 3+3 = 6);
    // 1 at max(5, 3) = 5 .. 9. twt = 2*1; wct = 3*3 + 2*5 + 9.
    assert_eq!(
        p.cost(&[2, 0, 1, 3]),
        Cost {
            twt: 2.0,
            wct: 28.0
        }
    );
    let mut tardy = Vec::new();
    let evaluator = Evaluator::new(&p, vec![0, 1, 2, 3]);
    evaluator.tardy_positions(&mut tardy);
    assert_eq!(tardy, vec![0, 2]);
    assert_eq!(evaluator.cost(), p.cost(&[0, 1, 2, 3]));
}

#[test]
fn costs_compare_by_tardiness_then_completion() {
    let c = |twt, wct| Cost { twt, wct };
    assert!(c(1.0, 100.0).total_cmp(&c(2.0, 0.0)).is_lt());
    assert!(c(1.0, 5.0).total_cmp(&c(1.0, 4.0)).is_gt());
    assert!(c(1.0, 5.0).total_cmp(&c(1.0, 5.0)).is_eq());
}

#[test]
fn incremental_evaluation_equals_full_evaluation() {
    let mut rng = crate::seeded(7);
    for case in 0..40 {
        let (n, m) = (
            1 + rng.random_range::<usize, _>(0..60),
            1 + rng.random_range::<usize, _>(0..6),
        );
        let p = random_problem(&mut rng, n, m);
        let mut order: Vec<u32> = (0..n as u32).collect();
        order.shuffle(&mut rng);
        let mut evaluator = Evaluator::new(&p, order.clone());
        assert_eq!(evaluator.cost(), p.cost(&order), "case {case}");
        for _ in 0..30 {
            // A candidate that agrees with the current order before `from`.
            let from = rng.random_range::<usize, _>(0..n);
            let mut candidate = evaluator.order().to_vec();
            candidate[from..].shuffle(&mut rng);
            let full = p.cost(&candidate);
            // Bit for bit: the prefix sums are the same additions in the same order.
            assert_eq!(
                evaluator.evaluate(&candidate, from, INF),
                Some(full),
                "case {case}"
            );
            if rng.random::<bool>() {
                let limit = full.twt - 1.0;
                assert_eq!(
                    evaluator.evaluate(&candidate, from, limit),
                    None,
                    "case {case}"
                );
            } else {
                evaluator.accept(&mut candidate, from);
                assert_eq!(evaluator.cost(), full, "case {case}");
                let mut tardy = Vec::new();
                evaluator.tardy_positions(&mut tardy);
                let expected: Vec<usize> = p
                    .plan(evaluator.order())
                    .iter()
                    .zip(evaluator.order())
                    .enumerate()
                    .filter(|(_, (pl, &i))| {
                        pl.as_ref()
                            .is_some_and(|pl| pl.end > p.task(i as usize).deadline)
                    })
                    .map(|(pos, _)| pos)
                    .collect();
                assert_eq!(tardy, expected, "case {case}");
            }
        }
    }
}

#[test]
fn evaluation_stops_once_past_the_limit() {
    let p = two_devices();
    let mut evaluator = Evaluator::new(&p, vec![0, 1, 2, 3]);
    // 2, 0, 1, 3 costs twt 2: within 2, not within 1.9.
    assert_eq!(
        evaluator.evaluate(&[2, 0, 1, 3], 0, 2.0),
        Some(Cost {
            twt: 2.0,
            wct: 28.0
        })
    );
    assert_eq!(evaluator.evaluate(&[2, 0, 1, 3], 0, 1.9), None);
}
