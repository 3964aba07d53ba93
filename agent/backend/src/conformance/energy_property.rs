//! Property: whatever is done to a mock GPU, its energy counter grows by the
//! power it reports times the time that passes, and the draw respects the limit.

use proptest::prelude::*;

use super::{as_dyn, matrix_mul, one, process};
use crate::{ClockPair, ClockRange, GpuBackend};
use gpu_agent_core::apps::{AppLibrary, DEFAULT_APP};
use gpu_agent_core::catalogue::CATALOGUE;

#[derive(Debug, Clone)]
enum Op {
    Start { pid: u32, hungry: bool },
    End { pid: u32 },
    LockCore { a: u32, b: u32 },
    ResetCore,
    Limit { mw: u32 },
    AppClocks { pick: usize },
    ResetAppClocks,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        (0..3u32, any::<bool>()).prop_map(|(pid, hungry)| Op::Start { pid, hungry }),
        (0..3u32).prop_map(|pid| Op::End { pid }),
        (0..2500u32, 0..2500u32).prop_map(|(a, b)| Op::LockCore { a, b }),
        Just(Op::ResetCore),
        (0..800_000u32).prop_map(|mw| Op::Limit { mw }),
        (0..500usize).prop_map(|pick| Op::AppClocks { pick }),
        Just(Op::ResetAppClocks),
    ]
}

fn apply(mock: &crate::mock::MockBackend, op: &Op) {
    let b: &dyn GpuBackend = as_dyn(mock);
    // Refusals are part of the game (a pid that runs already, out of memory):
    // whatever the outcome, the properties below must hold.
    let _ = match *op {
        Op::Start { pid, hungry } => {
            let app = if hungry {
                matrix_mul()
            } else {
                AppLibrary::default().get(DEFAULT_APP).unwrap().clone()
            };
            mock.start_process(0, process(pid, app))
        }
        Op::End { pid } => mock.end_process(0, pid),
        Op::LockCore { a, b: hi } => b.lock_core_clocks(
            0,
            ClockRange {
                min_mhz: a.min(hi),
                max_mhz: a.max(hi),
            },
        ),
        Op::ResetCore => b.reset_core_clocks(0),
        Op::Limit { mw } => b.set_power_limit(0, mw).map(|_| ()),
        Op::AppClocks { pick } => {
            let table = b.supported_clocks(0).unwrap();
            let pairs: Vec<ClockPair> = table
                .iter()
                .flat_map(|t| {
                    t.core_mhz.iter().map(|&core_mhz| ClockPair {
                        core_mhz,
                        mem_mhz: t.mem_mhz,
                    })
                })
                .collect();
            b.set_applications_clocks(0, pairs[pick % pairs.len()])
        }
        Op::ResetAppClocks => b.reset_applications_clocks(0),
    };
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]
    #[test]
    fn energy_grows_by_reported_power_times_time(
        model in 0..CATALOGUE.len(),
        steps in prop::collection::vec((op(), 0.0..50.0f64), 1..40),
    ) {
        let (mock, clock) = one(CATALOGUE[model].name);
        let b = as_dyn(&mock);
        for (op, dt) in &steps {
            apply(&mock, op);
            let p = b.power_usage_mw(0).unwrap().unwrap();
            let limits = b.power_limits(0).unwrap();
            let core = b.clocks(0, crate::ClockDomain::Core).unwrap();
            // Over the limit only when already at the lowest core clock.
            prop_assert!(p <= limits.current_mw || core.current == core.min,
                "{p} mW over a {} mW limit at {:?} MHz", limits.current_mw, core.current);
            let e0 = b.energy_mj(0).unwrap().unwrap();
            clock.advance(*dt);
            let e1 = b.energy_mj(0).unwrap().unwrap();
            prop_assert!(e1 >= e0);
            // p is rounded to 1 mW, the counter to 1 mJ.
            let expected = f64::from(p) * dt;
            let slack = 0.5 * dt + 2.0;
            prop_assert!(((e1 - e0) as f64 - expected).abs() <= slack,
                "{} mJ over {dt} s at {p} mW", e1 - e0);
        }
    }
}
