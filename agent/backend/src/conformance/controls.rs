//! Clocks, power limits, power draw and energy.

use super::{as_dyn, matrix_mul, one, outcome, process};
use crate::mock::Controls;
use crate::{ClockDomain, ClockPair, ClockRange, GpuBackend};

/// formats.md §6 power, written out independently of the model code.
fn power_w(p0: f64, gamma: f64, c: f64, fc: f64, fm: f64) -> f64 {
    let v = 2.0 * (fc - 0.5) * (fc - 0.5) + 0.5;
    p0 + gamma * fm + c * v * v * fc
}

#[test]
fn locked_clocks_round_to_the_nearest_supported_clock() {
    let (mock, _) = one("A100-SXM4-40GB"); // 1410, 1395, ..., 210 MHz
    let b = as_dyn(&mock);
    let locked = |min_mhz, max_mhz| {
        b.lock_core_clocks(0, ClockRange { min_mhz, max_mhz })
            .unwrap();
        mock.controls(0).unwrap().locked_core.unwrap()
    };
    let r = |min_mhz, max_mhz| ClockRange { min_mhz, max_mhz };
    assert_eq!(locked(1000, 1000), r(1005, 1005));
    assert_eq!(locked(996, 1002), r(990, 1005));
    assert_eq!(locked(0, 5000), r(210, 1410));
    assert_eq!(locked(1095, 1095), r(1095, 1095));
    let e = b.lock_core_clocks(0, r(1200, 1100)).unwrap_err();
    assert_eq!(
        e.to_string(),
        "GPU 0: nvmlDeviceSetGpuLockedClocks: invalid argument: min 1200 MHz > max 1100 MHz"
    );
    assert_eq!(mock.controls(0).unwrap().locked_core, Some(r(1095, 1095)));

    // Idle the GPU sits at the locked minimum; busy, at the locked maximum.
    b.lock_core_clocks(0, r(600, 1200)).unwrap();
    assert_eq!(b.clocks(0, ClockDomain::Core).unwrap().current, Some(600));
    mock.start_process(0, process(1, matrix_mul())).unwrap();
    assert_eq!(b.clocks(0, ClockDomain::Core).unwrap().current, Some(1200));
    b.reset_core_clocks(0).unwrap();
    assert_eq!(b.clocks(0, ClockDomain::Core).unwrap().current, Some(1095));

    // Volta's 7.5 MHz steps: 1526 is as near 1530 as 1522; ties go down.
    let (mock, _) = one("V100-SXM2-32GB");
    mock.lock_core_clocks(0, r(1526, 1526)).unwrap();
    assert_eq!(mock.controls(0).unwrap().locked_core, Some(r(1522, 1522)));
    assert_eq!(
        outcome(&mock.lock_memory_clocks(0, r(877, 877))),
        "NotSupported"
    );
}

#[test]
fn memory_and_application_clocks_use_the_table() {
    let (mock, _) = one("T4"); // memory 5001 or 405 MHz
    let b = as_dyn(&mock);
    assert_eq!(
        outcome(&b.lock_memory_clocks(
            0,
            ClockRange {
                min_mhz: 405,
                max_mhz: 405
            }
        )),
        "NotSupported"
    );
    let (mock, _) = one("L4"); // memory 6251 or 405 MHz
    let b = as_dyn(&mock);
    b.lock_memory_clocks(
        0,
        ClockRange {
            min_mhz: 1000,
            max_mhz: 6000,
        },
    )
    .unwrap();
    assert_eq!(
        mock.controls(0).unwrap().locked_memory,
        Some(ClockRange {
            min_mhz: 405,
            max_mhz: 6251
        })
    );
    b.reset_memory_clocks(0).unwrap();
    assert_eq!(mock.controls(0).unwrap().locked_memory, None);

    let default = ClockPair {
        core_mhz: 2040,
        mem_mhz: 6251,
    };
    assert_eq!(b.applications_clocks(0).unwrap(), Some(default));
    let slow = ClockPair {
        core_mhz: 405,
        mem_mhz: 405,
    };
    b.set_applications_clocks(0, slow).unwrap();
    assert_eq!(b.applications_clocks(0).unwrap(), Some(slow));
    let bad = ClockPair {
        core_mhz: 2040,
        mem_mhz: 405,
    };
    let e = b.set_applications_clocks(0, bad).unwrap_err();
    assert_eq!(
        e.to_string(),
        "GPU 0: nvmlDeviceSetApplicationsClocks: invalid argument: \
         2040 MHz core with 405 MHz memory is not a supported pair"
    );
    assert_eq!(b.applications_clocks(0).unwrap(), Some(slow));
    b.reset_applications_clocks(0).unwrap();
    assert_eq!(b.applications_clocks(0).unwrap(), Some(default));
}

#[test]
fn power_limits_clamp_to_their_constraints() {
    let (mock, _) = one("A100-SXM4-40GB"); // 100..400 W
    let b = as_dyn(&mock);
    assert_eq!(b.set_power_limit(0, 50_000).unwrap(), 100_000);
    assert_eq!(b.power_limits(0).unwrap().current_mw, 100_000);
    assert_eq!(b.set_power_limit(0, 1_000_000).unwrap(), 400_000);
    assert_eq!(b.set_power_limit(0, 250_500).unwrap(), 250_500);
    let limits = b.power_limits(0).unwrap();
    assert_eq!(
        (
            limits.current_mw,
            limits.default_mw,
            limits.min_mw,
            limits.max_mw
        ),
        (250_500, Some(400_000), 100_000, 400_000)
    );
    // A reset restores every control.
    b.lock_core_clocks(
        0,
        ClockRange {
            min_mhz: 900,
            max_mhz: 900,
        },
    )
    .unwrap();
    b.reset_gpu(0).unwrap();
    assert_eq!(
        mock.controls(0).unwrap(),
        Controls {
            locked_core: None,
            locked_memory: None,
            applications: None,
            power_limit_mw: 400_000,
        }
    );
}

#[test]
fn a_power_limit_below_the_draw_throttles_the_core_clock() {
    let (mock, _) = one("A100-SXM4-40GB");
    let b = as_dyn(&mock);
    mock.start_process(0, process(1, matrix_mul())).unwrap();
    // matrixMul at default clocks: 218.1 + 32.5 + 31.6 = 282.2 W.
    assert_eq!(b.power_usage_mw(0).unwrap(), Some(282_200));
    b.set_power_limit(0, 260_000).unwrap();
    let core = b.clocks(0, ClockDomain::Core).unwrap().current.unwrap();
    let fc = f64::from(core) / 1095.0;
    let draw = power_w(218.1, 32.5, 31.6, fc, 1.0);
    assert!(draw <= 260.0, "{core} MHz draws {draw} W");
    let one_up = power_w(218.1, 32.5, 31.6, f64::from(core + 15) / 1095.0, 1.0);
    assert!(
        one_up > 260.0,
        "{core} MHz is not the highest clock under the limit"
    );
    assert_eq!(
        b.power_usage_mw(0).unwrap(),
        Some((draw * 1000.0).round() as u32)
    );
}

#[test]
fn energy_is_the_integral_of_power_over_virtual_time() {
    let (mock, clock) = one("A100-SXM4-40GB"); // idle 55 W, defaults 1095/1215 MHz
    let b = as_dyn(&mock);
    assert_eq!(b.energy_mj(0).unwrap(), Some(0));
    clock.advance(10.0); // idle: 550 J
    mock.start_process(0, process(1, matrix_mul())).unwrap();
    clock.advance(5.0); // 282.2 W at default clocks: 1411 J
    b.lock_core_clocks(
        0,
        ClockRange {
            min_mhz: 600,
            max_mhz: 600,
        },
    )
    .unwrap();
    assert_eq!(b.energy_mj(0).unwrap(), Some(1_961_000));
    clock.advance(3.0); // at 600 MHz
    mock.end_process(0, 1).unwrap();
    clock.advance(2.0); // idle again
    let slow = power_w(218.1, 32.5, 31.6, 600.0 / 1095.0, 1.0);
    let expected = 550_000.0 + 1_411_000.0 + slow * 3000.0 + 110_000.0;
    let got = b.energy_mj(0).unwrap().unwrap() as f64;
    assert!((got - expected).abs() <= 1.0, "{got} mJ vs {expected} mJ");

    // Readings never go back, however often they are taken.
    let mut last = 0;
    for step in 0..100 {
        clock.advance(0.013 * f64::from(step % 7));
        let e = b.energy_mj(0).unwrap().unwrap();
        assert!(e >= last);
        last = e;
    }
}

#[test]
fn under_mig_each_busy_instance_adds_its_share() {
    let (mock, clock) = one("A100-SXM4-40GB");
    let b = as_dyn(&mock);
    b.set_mig_mode(0, true).unwrap();
    b.reset_gpu(0).unwrap();
    let gi = b.create_gpu_instance(0, 9, 0).unwrap(); // 3g: 3 of 7 compute slices
    b.create_compute_instance(0, gi.id, 2).unwrap();
    let p = crate::mock::MockProcess {
        mig: Some((gi.id, 0)),
        ..process(1, matrix_mul())
    };
    mock.start_process(0, p).unwrap();
    let expected: f64 = 55.0 + (282.2 - 55.0) * 3.0 / 7.0;
    assert_eq!(
        b.power_usage_mw(0).unwrap(),
        Some((expected * 1000.0).round() as u32)
    );
    assert_eq!(b.utilization(0).unwrap().unwrap().gpu_pct, 42);
    let e0 = b.energy_mj(0).unwrap().unwrap();
    clock.advance(2.0);
    let e1 = b.energy_mj(0).unwrap().unwrap();
    assert!(((e1 - e0) as f64 - expected * 2000.0).abs() <= 1.0);
}
