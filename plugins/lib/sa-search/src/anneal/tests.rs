use super::*;
use crate::plan::{tests::random_problem, PlanTask};
use rand::RngExt;

#[test]
fn temperature_cools_geometrically_and_rho_follows_it() {
    let mut c = Cooling::new(100.0, 0.5);
    // T_min = 0.1: rho = (T - 0.1) / 99.9, within [0.1, 0.8].
    let mut seen = Vec::new();
    for _ in 0..6 {
        seen.push((c.temperature(), c.rho()));
        c.cool();
    }
    assert_eq!(
        seen,
        vec![
            (100.0, 0.8),
            (50.0, (50.0 - 0.1) / 99.9),
            (25.0, (25.0 - 0.1) / 99.9),
            (12.5, (12.5 - 0.1) / 99.9),
            (6.25, 0.1),
            (3.125, 0.1)
        ]
    );
}

#[test]
fn moves_go_just_before_their_target_the_rest_keep_their_order() {
    let order: Vec<u32> = (10..18).collect();
    let mut out = Vec::new();
    let mut n = Neighbourhood::default();
    // The task at 5 goes before the one at 1, then the one at 3 (same target:
    // relative order kept), the one at 7 before the one at 0.
    let from = n.apply(&order, &mut [(1, 5), (1, 3), (0, 7)], &mut out);
    assert_eq!(out, vec![17, 10, 13, 15, 11, 12, 14, 16]);
    assert_eq!(from, 0);
    let from = n.apply(&order, &mut [(4, 6)], &mut out);
    assert_eq!(out, vec![10, 11, 12, 13, 16, 14, 15, 17]);
    assert_eq!(from, 4);
}

#[test]
fn a_neighbour_moves_the_drawn_tardy_tasks_forward() {
    let mut rng = crate::seeded(3);
    let mut n = Neighbourhood::default();
    let order: Vec<u32> = (0..50).rev().collect();
    let mut out = Vec::new();
    for count in 1..=10 {
        let mut tardy: Vec<usize> = (1..50).step_by(4).collect();
        let from = n.draw(&order, &mut tardy, count, &mut rng, &mut out);
        let mut sorted = out.clone();
        sorted.sort_unstable();
        assert_eq!(sorted, (0..50).collect::<Vec<u32>>(), "a permutation");
        let moved: Vec<u32> = tardy[..count].iter().map(|&p| order[p]).collect();
        // Exactly the drawn tasks changed their order relative to the others,
        // and each now precedes the untouched task just before its old place.
        let rest: Vec<u32> = out.iter().copied().filter(|t| !moved.contains(t)).collect();
        let expected: Vec<u32> = order
            .iter()
            .copied()
            .filter(|t| !moved.contains(t))
            .collect();
        assert_eq!(rest, expected);
        let at = |t: u32| out.iter().position(|&x| x == t).unwrap();
        for &p in &tardy[..count] {
            if let Some(&before) = order[..p].iter().rev().find(|t| !moved.contains(t)) {
                assert!(at(order[p]) < at(before), "task {} moved forward", order[p]);
            }
        }
        assert_eq!(out[..from], order[..from]);
        assert_ne!(out[from], order[from]);
    }
}

fn settings(iterations: u64) -> Settings {
    Settings {
        iterations,
        t0: None,
        alpha: 0.995,
        deadline: None,
    }
}

#[test]
fn never_worse_than_its_start_and_deterministic_for_a_seed() {
    let mut rng = crate::seeded(11);
    let mut improved = 0;
    for case in 0..30 {
        let (n, m) = (
            2 + rng.random_range::<usize, _>(0..80),
            1 + rng.random_range::<usize, _>(0..6),
        );
        let p = random_problem(&mut rng, n, m);
        let start: Vec<u32> = (0..p.len() as u32).collect();
        let run = |seed| anneal(&p, start.clone(), &settings(500), &mut crate::seeded(seed));
        let a = run(case);
        assert!(a.cost.total_cmp(&p.cost(&start)).is_le(), "case {case}");
        assert_eq!(
            a.cost,
            p.cost(&a.order),
            "case {case}: the cost is the order's"
        );
        assert_eq!(run(case), a, "case {case}: same seed, same search");
        improved += usize::from(a.cost.twt < p.cost(&start).twt);
    }
    // The search finds something in most of these (some start with no tardiness).
    assert!(improved >= 20, "improved {improved} of 30");
}

#[test]
fn finds_the_order_that_serves_the_urgent_task_first() {
    // One device: a long loose task arrived before a short urgent one.
    let task = |weight, deadline, runtime| PlanTask {
        gpus: 1,
        weight,
        deadline,
        runtimes: vec![runtime],
    };
    let p = Problem::new(
        0.0,
        vec![0.0],
        vec![task(1.0, 100.0, 10.0), task(5.0, 2.0, 1.0)],
    );
    let out = anneal(&p, vec![0, 1], &settings(50), &mut crate::seeded(1));
    assert_eq!(out.order, vec![1, 0]);
    assert_eq!(
        out.cost,
        Cost {
            twt: 0.0,
            wct: 5.0 * 1.0 + 11.0
        }
    );
    // Nothing is tardy any more: the search stopped right after.
    assert_eq!(out.iterations, 1);
}

#[test]
fn stops_at_its_wall_clock_deadline() {
    let p = random_problem(&mut crate::seeded(5), 200, 4);
    let past = Settings {
        deadline: Some(Instant::now()),
        ..settings(1000)
    };
    let out = anneal(&p, (0..200).collect(), &past, &mut crate::seeded(1));
    assert_eq!(out.iterations, 0);
}
