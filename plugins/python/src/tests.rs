//! The plugin against policy modules written for the test, on hand-built
//! views.

use std::path::Path;

use gpu_agent_plugin_api::{
    abi_stable::std_types::{ROption, RSlice, RStr, RVec},
    AppModel, ClockRange, Clocks, Decision, Device, DvfsClass, Event, MigInstance, Param,
    PolicyImpl, PowerModel, Task, TaskState, View,
};
use pyo3::prelude::*;

use crate::PythonPolicy;

fn device(index: u32, queue: &'static [u64]) -> Device<'static> {
    Device {
        index,
        model: RStr::from_str("A100-SXM4-40GB"),
        memory_gb: 40.0,
        speed: 1.0,
        cost_per_hour: 2.5,
        online: true,
        running: ROption::RNone,
        queue: RSlice::from_slice(queue),
        available_at: 3.0,
        clock_range: ClockRange {
            core_min: 0.5,
            core_max: 1.1,
            mem_min: 0.9,
            mem_max: 1.0,
        },
        default_power: PowerModel {
            p0: 10.0,
            gamma: 12.0,
            c: 48.0,
        },
        mig: ROption::RNone,
    }
}

fn task(key: u64, state: TaskState) -> Task {
    Task {
        key,
        id: format!("t{key}").into(),
        arrival: 1.0,
        workload: 10.0,
        mem_gb: 16.0,
        deadline: 100.0,
        weight: 2.0,
        gpus: 1,
        alt_gpus: RVec::from(vec![2]),
        runtimes: RVec::new(),
        app: AppModel::builtin_default(),
        state,
    }
}

fn view<'a>(held: &'a [Task], pending: &'a [u64], devices: &'a [Device<'a>]) -> View<'a> {
    View {
        now: 5.0,
        held: RSlice::from_slice(held),
        pending: RSlice::from_slice(pending),
        devices: RSlice::from_slice(devices),
    }
}

/// A policy made of `source`, written to `NAME.py` in a directory of its own.
fn policy(dir: &Path, name: &str, source: &str) -> Result<PythonPolicy, String> {
    let path = dir.join(format!("{name}.py"));
    std::fs::write(&path, source).expect("write the module");
    PythonPolicy::new(&[Param {
        key: "module".into(),
        value: path.to_str().expect("utf-8 path").into(),
    }])
}

/// `expression` evaluated in the loaded module `name`'s namespace.
fn eval(name: &str, expression: &str) -> String {
    Python::attach(|py| {
        let module = py
            .import("sys")
            .and_then(|sys| sys.getattr("modules"))
            .and_then(|m| m.get_item(format!("gpu_agent_policy_{name}")))
            .expect("the module is loaded");
        let code = std::ffi::CString::new(expression).expect("no NUL");
        py.eval(
            &code,
            Some(&module.getattr("__dict__").unwrap().cast_into().unwrap()),
            None,
        )
        .and_then(|v| v.str().map(|s| s.to_string()))
        .expect("the expression evaluates")
    })
}

#[test]
fn every_kind_of_decision_comes_back() {
    let dir = tempfile::tempdir().unwrap();
    let mut p = policy(
        dir.path(),
        "every_kind",
        r#"
from gpu_agent_policy import *

def on_event(view, event):
    return [
        Assign(0, [1], position=0, clocks=Clocks(0.8, 1.0)),
        Assign(1, (0, 1)),
        Start(2, [0], clocks=None),
        Reject(3, "too big"),
        WakeAt(12.5),
        MigLayout(0, "3g.20gb,3g.20gb"),
        Dvfs(0, "deadline", readjusted=True),
    ]
"#,
    )
    .expect("loads");
    let devices = [device(0, &[]), device(1, &[])];
    let held = [task(0, TaskState::Pending)];
    let got = p
        .on_event(&view(&held, &[0], &devices), &Event::Activated)
        .expect("decides");
    assert_eq!(
        got,
        [
            Decision::Assign {
                task: 0,
                devices: vec![1].into(),
                position: ROption::RSome(0),
                clocks: ROption::RSome(Clocks {
                    core: 0.8,
                    mem: 1.0
                }),
            },
            Decision::Assign {
                task: 1,
                devices: vec![0, 1].into(),
                position: ROption::RNone,
                clocks: ROption::RNone,
            },
            Decision::Start {
                task: 2,
                devices: vec![0].into(),
                clocks: ROption::RNone,
            },
            Decision::Reject {
                task: 3,
                reason: "too big".into(),
            },
            Decision::WakeAt { time: 12.5 },
            Decision::MigLayout {
                gpu: 0,
                layout: "3g.20gb,3g.20gb".into(),
            },
            Decision::Dvfs {
                task: 0,
                class: DvfsClass::DeadlinePrior,
                readjusted: true,
            },
        ]
    );
}

#[test]
fn the_view_and_events_mirror_the_core() {
    let dir = tempfile::tempdir().unwrap();
    let mut p = policy(
        dir.path(),
        "mirror",
        "calls = []\ndef on_event(view, event):\n    calls.append((view, event))\n    return None\n",
    )
    .expect("loads");
    let mut mig = device(2, &[]);
    mig.mig = ROption::RSome(MigInstance {
        parent: 0,
        profile: RStr::from_str("3g.20gb"),
        start: 4,
        compute_slices: 3,
    });
    mig.memory_gb = 19.5;
    let mut busy = device(1, &[2, 3]);
    busy.running = ROption::RSome(1);
    let devices = [device(0, &[]), busy, mig];
    let held = [task(0, TaskState::Pending), task(1, TaskState::Running)];
    let v = view(&held, &[0], &devices);
    for event in [
        Event::Arrived { task: 0 },
        Event::Finished { task: 1, ok: false },
        Event::DeviceChanged { device: 2 },
        Event::Timer,
    ] {
        assert_eq!(p.on_event(&v, &event), Ok(Vec::new()));
    }
    let e = |x: &str| eval("mirror", x);
    assert_eq!(
        e("[type(ev).__name__ + repr(vars(ev) if hasattr(ev, '__dict__') else [getattr(ev, s) for s in ev.__slots__]) for _, ev in calls]"),
        "['Arrived[0]', 'Finished[1, False]', 'DeviceChanged[2]', 'Timer[]']"
    );
    let v = "calls[0][0]";
    assert_eq!(
        e(&format!("({v}.now, {v}.pending, sorted({v}.tasks))")),
        "(5.0, [0], [0, 1])"
    );
    assert_eq!(
        e(&format!("{v}.task(1)")),
        "Task(key=1, id='t1', arrival=1.0, workload=10.0, mem_gb=16.0, deadline=100.0, weight=2.0, \
         gpus=1, alt_gpus=(2,), runtimes=(), app=AppModel(name='default', delta=0.5, d=1.0, t0=0.0, \
         power=None), state='running')"
    );
    assert_eq!(
        e(&format!("{v}.devices[1]")),
        "Device(index=1, model='A100-SXM4-40GB', memory_gb=40.0, speed=1.0, cost_per_hour=2.5, \
         online=True, running=1, queue=[2, 3], available_at=3.0, clock_range=ClockRange(core_min=0.5, \
         core_max=1.1, mem_min=0.9, mem_max=1.0), default_power=PowerModel(p0=10.0, gamma=12.0, c=48.0), \
         mig=None)"
    );
    assert_eq!(
        e(&format!("{v}.devices[2].mig")),
        "MigInstance(parent=0, profile='3g.20gb', start=4, compute_slices=3)"
    );
    // The rules of plugin-api's methods.
    assert_eq!(
        e(&format!(
            "[{v}.task(0).fits(d) for d in {v}.devices], [{v}.task(0).fits_as(d, 2) for d in {v}.devices], \
             {v}.task(0).runtime_on({v}.devices[0]), {v}.task(0).gpu_counts(), {v}.task(0).scaled(6.0, 2)"
        )),
        "([True, True, True], [True, True, False], 10.0, (1, 2), 3.0)"
    );
}

#[test]
fn tasks_are_made_once_and_follow_the_core() {
    let dir = tempfile::tempdir().unwrap();
    let mut p = policy(
        dir.path(),
        "kept",
        "seen = []\ndef on_event(view, event):\n    seen.append({k: (id(t), t.state) for k, t in view.tasks.items()})\n    return []\n",
    )
    .expect("loads");
    let devices = [device(0, &[])];
    let first = [
        task(0, TaskState::Running),
        task(1, TaskState::Queued),
        task(2, TaskState::Pending),
    ];
    p.on_event(&view(&first, &[2], &devices), &Event::Timer)
        .unwrap();
    // Task 0 ended and was dropped, 1 runs, 2 waits, 3 arrived.
    let second = [
        task(1, TaskState::Running),
        task(2, TaskState::Pending),
        task(3, TaskState::Pending),
    ];
    p.on_event(
        &view(&second, &[2, 3], &devices),
        &Event::Arrived { task: 3 },
    )
    .unwrap();
    let e = |x: &str| eval("kept", x);
    assert_eq!(e("sorted(seen[1])"), "[1, 2, 3]");
    assert_eq!(
        e("[seen[1][k][1] for k in (1, 2, 3)]"),
        "['running', 'pending', 'pending']"
    );
    assert_eq!(
        e("[seen[0][k][0] == seen[1][k][0] for k in (1, 2)]"),
        "[True, True]"
    );
    // The state that changed is the one the object shows.
    p.on_event(&view(&[], &[], &devices), &Event::Timer)
        .unwrap();
    assert_eq!(e("seen[2]"), "{}");
}

#[test]
fn a_devices_fixed_fields_are_shared_until_they_change() {
    let dir = tempfile::tempdir().unwrap();
    let mut p = policy(
        dir.path(),
        "devices",
        "seen = []\ndef on_event(view, event):\n    seen.append(view.devices[0])\n    return []\n",
    )
    .expect("loads");
    let mut d = device(0, &[]);
    p.on_event(&view(&[], &[], &[d]), &Event::Timer).unwrap();
    d.available_at = 7.0;
    p.on_event(&view(&[], &[], &[d]), &Event::Timer).unwrap();
    d.clock_range.core_max = 1.2;
    d.model = RStr::from_str("H100-SXM5-80GB");
    p.on_event(&view(&[], &[], &[d]), &Event::Timer).unwrap();
    let e = |x: &str| eval("devices", x);
    assert_eq!(e("[d.available_at for d in seen]"), "[3.0, 7.0, 7.0]");
    assert_eq!(
        e("(seen[0].clock_range is seen[1].clock_range, seen[1].clock_range is seen[2].clock_range)"),
        "(True, False)"
    );
    assert_eq!(
        e("(seen[2].clock_range.core_max, seen[2].model)"),
        "(1.2, 'H100-SXM5-80GB')"
    );
}

#[test]
fn an_exception_is_a_fault_with_its_traceback() {
    let dir = tempfile::tempdir().unwrap();
    let mut p = policy(
        dir.path(),
        "raises",
        "def helper(view):\n    return 1 / len(view.devices)\n\ndef on_event(view, event):\n    return helper(view)\n",
    )
    .expect("loads");
    let err = p
        .on_event(&view(&[], &[], &[]), &Event::Timer)
        .expect_err("a fault");
    let path = dir.path().join("raises.py");
    let path = path.display();
    // Less the lines of carets under the code, which differ between
    // Python versions.
    let lines: Vec<&str> = err
        .lines()
        .filter(|l| !l.trim().chars().all(|c| matches!(c, '^' | '~')))
        .collect();
    assert_eq!(
        lines,
        [
            format!("{path}: on_event raised Traceback (most recent call last):"),
            format!("  File \"{path}\", line 5, in on_event"),
            "    return helper(view)".into(),
            format!("  File \"{path}\", line 2, in helper"),
            "    return 1 / len(view.devices)".into(),
            "ZeroDivisionError: division by zero".into(),
        ]
    );
}

#[test]
fn an_invalid_answer_is_a_fault_naming_the_decision() {
    let dir = tempfile::tempdir().unwrap();
    let cases = [
        ("return 5", "on_event must return a list of decisions, not int"),
        (
            "return [WakeAt(1.0), 'start t0']",
            "decision 1, 'start t0': a str, not a decision (gpu_agent_policy's Assign, Start, Reject, WakeAt, MigLayout or Dvfs)",
        ),
        (
            "return [Assign(0, '1')]",
            "decision 0, Assign(task=0, devices='1', position=None, clocks=None): devices: TypeError: Can't extract `str` to `Vec`",
        ),
        (
            "return [Assign(0, [1.0])]",
            "decision 0, Assign(task=0, devices=[1.0], position=None, clocks=None): devices: TypeError: 'float' object cannot be interpreted as an integer",
        ),
        (
            "return [Start(-1, [0])]",
            "decision 0, Start(task=-1, devices=[0], clocks=None): task: OverflowError: can't convert negative int to unsigned",
        ),
        (
            "return [Assign(0, [0], clocks=(0.9, 1.0))]",
            "decision 0, Assign(task=0, devices=[0], position=None, clocks=(0.9, 1.0)): clocks: expected a Clocks or None, got a tuple",
        ),
        (
            "return [Dvfs(0, 'fast')]",
            "decision 0, Dvfs(task=0, cls='fast', readjusted=False): cls: expected \"energy\" or \"deadline\", got \"fast\"",
        ),
    ];
    for (i, (body, reason)) in cases.into_iter().enumerate() {
        let name = format!("invalid{i}");
        let source =
            format!("from gpu_agent_policy import *\ndef on_event(view, event):\n    {body}\n");
        let mut p = policy(dir.path(), &name, &source).expect("loads");
        let path = dir.path().join(format!("{name}.py"));
        assert_eq!(
            p.on_event(&view(&[], &[], &[]), &Event::Timer),
            Err(format!(
                "{}: on_event returned an invalid decision: {reason}",
                path.display()
            )),
            "{body}"
        );
    }
}

#[test]
fn a_module_that_cannot_be_loaded_refuses_the_policy() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("missing.py");
    let err = |r: Result<PythonPolicy, String>| r.err().expect("refused");
    assert_eq!(
        err(PythonPolicy::new(&[Param {
            key: "module".into(),
            value: missing.to_str().unwrap().into(),
        }])),
        format!(
            "module: cannot read {}: No such file or directory (os error 2)",
            missing.display()
        )
    );
    assert_eq!(
        err(PythonPolicy::new(&[])),
        "module: a Python file is required (--param module=PATH)"
    );
    let path = dir.path().join("no_on_event.py");
    assert_eq!(
        err(policy(
            dir.path(),
            "no_on_event",
            "def decide(view, event):\n    return []\n"
        )),
        format!(
            "module {}: defines no function on_event(view, event)",
            path.display()
        )
    );
    let path = dir.path().join("broken.py");
    assert_eq!(
        err(policy(dir.path(), "broken", "import gpu_agent_policy\nraise RuntimeError('no GPUs here')\n")),
        format!(
            "module {}: Traceback (most recent call last):\n{}  File \"{}\", line 2, in <module>\n    \
             raise RuntimeError('no GPUs here')\nRuntimeError: no GPUs here",
            path.display(),
            "",
            path.display()
        )
    );
}
