//! Injected faults and the call log.

use std::time::{Duration, Instant};

use super::{as_dyn, every_model, kind, outcome};
use crate::mock::{Call, Fault, CALL_LOG_LEN};
use crate::{BackendError, ClockRange, DeviceEvent, DeviceEventKind, On};

#[test]
fn a_lost_gpu_fails_every_call_and_says_so_once() {
    let (mock, _) = every_model();
    let b = as_dyn(&mock);
    mock.inject(2, Fault::GpuLost);
    assert_eq!(
        b.wait_event(Duration::ZERO).unwrap(),
        Some(DeviceEvent {
            gpu: 2,
            kind: DeviceEventKind::GpuLost
        })
    );
    assert_eq!(b.wait_event(Duration::ZERO).unwrap(), None);
    let e = b.power_usage_mw(2).unwrap_err();
    assert_eq!(
        e,
        BackendError::GpuLost {
            on: On(Some(2)),
            call: "nvmlDeviceGetPowerUsage"
        }
    );
    assert_eq!(e.to_string(), "GPU 2: nvmlDeviceGetPowerUsage: GPU is lost");
    assert_eq!(outcome(&b.device_info(2)), "GpuLost");
    assert_eq!(outcome(&b.set_power_limit(2, 300_000)), "GpuLost");
    // The others carry on.
    assert!(b.power_usage_mw(1).unwrap().is_some());
    assert_eq!(b.device_count().unwrap(), 9);
}

#[test]
fn xid_events_arrive_in_order_and_wake_a_waiter() {
    let (mock, _) = every_model();
    let mock = std::sync::Arc::new(mock);
    let waiter = {
        let mock = mock.clone();
        std::thread::spawn(move || as_dyn(&mock).wait_event(Duration::from_secs(30)))
    };
    mock.inject(0, Fault::Xid(79));
    let first = waiter.join().unwrap().unwrap();
    assert_eq!(
        first,
        Some(DeviceEvent {
            gpu: 0,
            kind: DeviceEventKind::Xid(79)
        })
    );
    mock.inject(3, Fault::Xid(48));
    mock.inject(1, Fault::Xid(63));
    let b = as_dyn(&mock);
    let kinds: Vec<_> = (0..3)
        .map(|_| b.wait_event(Duration::ZERO).unwrap())
        .collect();
    assert_eq!(
        kinds,
        vec![
            Some(DeviceEvent {
                gpu: 3,
                kind: DeviceEventKind::Xid(48)
            }),
            Some(DeviceEvent {
                gpu: 1,
                kind: DeviceEventKind::Xid(63)
            }),
            None
        ]
    );
}

#[test]
fn not_supported_readings_are_none_and_writes_are_errors() {
    let (mock, _) = every_model();
    let b = as_dyn(&mock);
    mock.inject(0, Fault::NotSupported("power_usage_mw"));
    mock.inject(0, Fault::NotSupported("energy_mj"));
    mock.inject(0, Fault::NotSupported("lock_core_clocks"));
    assert_eq!(b.power_usage_mw(0).unwrap(), None);
    assert_eq!(b.energy_mj(0).unwrap(), None);
    let e = b
        .lock_core_clocks(
            0,
            ClockRange {
                min_mhz: 900,
                max_mhz: 900,
            },
        )
        .unwrap_err();
    assert_eq!(
        e.to_string(),
        "GPU 0: nvmlDeviceSetGpuLockedClocks: not supported"
    );
    assert_eq!(mock.controls(0).unwrap().locked_core, None);
    // Only that GPU, only those calls.
    assert!(b.power_usage_mw(1).unwrap().is_some());
    assert!(b.temperature_c(0).unwrap().is_some());
    mock.clear_faults();
    assert!(b.power_usage_mw(0).unwrap().is_some());
}

#[test]
fn no_permission_changes_nothing() {
    let (mock, _) = every_model();
    let b = as_dyn(&mock);
    mock.inject(1, Fault::NoPermission("set_power_limit"));
    let e = b.set_power_limit(1, 150_000).unwrap_err();
    assert_eq!(kind(&e), "NoPermission");
    assert_eq!(
        e.to_string(),
        "GPU 1: nvmlDeviceSetPowerManagementLimit: permission denied"
    );
    assert_eq!(mock.controls(1).unwrap().power_limit_mw, 400_000);
}

#[test]
fn slow_calls_take_at_least_their_delay() {
    let (mock, _) = every_model();
    let b = as_dyn(&mock);
    mock.inject(0, Fault::Slow("memory", Duration::from_millis(50)));
    let t = Instant::now();
    b.memory(0).unwrap();
    assert!(t.elapsed() >= Duration::from_millis(50));
}

#[test]
#[should_panic(expected = "not a GpuBackend method")]
fn a_fault_on_an_unknown_method_is_a_test_bug() {
    let (mock, _) = every_model();
    mock.inject(0, Fault::NotSupported("power_usage"));
}

#[test]
fn the_call_log_records_every_call_in_order() {
    let (mock, clock) = every_model();
    let b = as_dyn(&mock);
    b.set_power_limit(0, 10).unwrap();
    clock.advance(1.5);
    b.lock_core_clocks(
        4,
        ClockRange {
            min_mhz: 1000,
            max_mhz: 1100,
        },
    )
    .unwrap();
    b.create_gpu_instance(0, 0, 0).unwrap_err();
    b.energy_mj(9).unwrap_err();
    let calls: Vec<(f64, Option<u32>, &str, String, &str)> = mock
        .calls()
        .iter()
        .map(|c: &Call| (c.at, c.gpu, c.method, c.args.clone(), outcome(&c.outcome)))
        .collect();
    assert_eq!(
        calls,
        vec![
            (0.0, Some(0), "set_power_limit", "10".to_string(), "ok"),
            (
                1.5,
                Some(4),
                "lock_core_clocks",
                "ClockRange { min_mhz: 1000, max_mhz: 1100 }".to_string(),
                "ok"
            ),
            (
                1.5,
                Some(0),
                "create_gpu_instance",
                "0, 0".to_string(),
                "NotSupported"
            ),
            (1.5, Some(9), "energy_mj", String::new(), "InvalidArgument"),
        ]
    );
}

#[test]
fn the_call_log_keeps_the_most_recent_calls() {
    let (mock, clock) = every_model();
    let b = as_dyn(&mock);
    let total = CALL_LOG_LEN + 10;
    for i in 0..total {
        clock.advance(1.0);
        assert!(b.power_usage_mw(i as u32 % 2).is_ok(), "call {i}");
    }
    let calls = mock.calls();
    assert_eq!(calls.len(), CALL_LOG_LEN);
    // The first 10 calls (at 1..=10 s) are gone; the rest are in order.
    assert_eq!(calls[0].at, 11.0);
    assert_eq!(calls[0].gpu, Some(0));
    assert_eq!(calls[CALL_LOG_LEN - 1].at, total as f64);
    assert!(calls.windows(2).all(|w| w[0].at < w[1].at));
}

#[test]
fn a_repaired_gpu_answers_again_with_its_controls_reset() {
    let (mock, _) = every_model();
    let b = as_dyn(&mock);
    let range = b.supported_clocks(1).unwrap()[0].core_mhz[0];
    b.lock_core_clocks(
        1,
        ClockRange {
            min_mhz: range,
            max_mhz: range,
        },
    )
    .unwrap();
    mock.inject(1, Fault::GpuLost);
    assert_eq!(outcome(&b.device_info(1)), "GpuLost");
    assert!(mock.repair(1));
    assert!(b.device_info(1).is_ok());
    assert_eq!(mock.controls(1).unwrap().locked_core, None);
    // Repairing a sound GPU changes nothing; an unknown index is refused.
    assert!(mock.repair(0));
    assert!(!mock.repair(99));
}
