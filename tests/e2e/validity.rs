//! Random heterogeneous instances, and the validity properties every policy's
//! schedule must have whatever its rules: no device runs two tasks at once, every
//! task either runs exactly once on as many devices as it asked for (all starting
//! and ending together, each able to hold it, never before it arrives) or is
//! rejected because no set of devices could ever hold it, and nothing else runs.

use std::{collections::BTreeMap, path::Path, sync::OnceLock};

use gpu_agent_core::TaskSpec;
use gpu_agent_core::{apps::AppLibrary, host::Host};
use gpu_agent_loader::Registry;
use gpu_agent_sim::input::trace::{Trace, TraceTask};
use gpu_agent_sim::{self as sim, schedule::ScheduleRow};
use proptest::prelude::*;

use crate::harness::{self, SHIPPED};

/// The catalogue models random hosts are drawn from.
pub const MODELS: [&str; 4] = ["T4", "V100-SXM2-32GB", "A100-SXM4-40GB", "A100-SXM4-80GB"];

/// Every shipped policy plugin, loaded once.
pub fn registry() -> &'static Registry {
    static REGISTRY: OnceLock<(tempfile::TempDir, Registry)> = OnceLock::new();
    let (_, registry) = REGISTRY.get_or_init(|| {
        let files: Vec<&str> = SHIPPED.iter().map(|&(_, file)| file).collect();
        let dir = harness::plugin_dir(&files);
        let registry = Registry::load_dir(dir.path()).unwrap();
        (dir, registry)
    });
    registry
}

/// A host and the tasks submitted to it.
#[derive(Debug, Clone)]
pub struct Instance {
    pub host: Host,
    pub tasks: Vec<TaskSpec>,
}

impl Instance {
    /// The tasks as a trace, in their order.
    pub fn trace(&self) -> Trace {
        Trace {
            tasks: self
                .tasks
                .iter()
                .enumerate()
                .map(|(i, spec)| TraceTask {
                    line: i as u64 + 2,
                    spec: spec.clone(),
                    command: None,
                    actual: None,
                })
                .collect(),
            warnings: Vec::new(),
        }
    }
}

/// MIG layouts random A100s may take (profile ids: 3g 9, 2g 14, 1g 19,
/// 4g 5, 7g 0); the first, none, leaves the GPU whole.
const LAYOUTS: [&[u32]; 5] = [&[], &[9, 14, 14], &[0], &[5, 19, 19, 19], &[9, 9]];

/// Random instances: 1 to 5 devices of mixed models and speeds, 1 to 29 tasks
/// with mixed memory, gangs of up to 3, weights, slack and, for some, unrelated
/// run times with devices they cannot use or alternative device counts.
pub fn instance() -> impl Strategy<Value = Instance> {
    instance_with(false)
}

/// As [`instance`], and with `mig`, the A100s split into MIG instances by
/// one of [`LAYOUTS`] (or left whole) in the simulator's host file.
pub fn instance_with(mig: bool) -> impl Strategy<Value = Instance> {
    let devices = prop::collection::vec(
        (
            0..MODELS.len(),
            prop::sample::select(vec![0.25, 0.5, 1.0, 2.0]),
            if mig { 0..LAYOUTS.len() } else { 0..1 },
        ),
        1..=5,
    );
    devices
        .prop_flat_map(|devices| {
            // Physical GPUs, then their MIG instances.
            let m = devices.len()
                + devices
                    .iter()
                    .map(|&(model, _, layout)| layout_of(model, layout).len())
                    .sum::<usize>();
            let runtime =
                prop_oneof![3 => (1u32..30).prop_map(f64::from), 1 => Just(f64::INFINITY)];
            let task = (
                0u32..100,
                1u32..40,
                prop::sample::select(vec![0.0, 8.0, 16.0, 24.0, 40.0, 60.0, 90.0]),
                prop_oneof![6 => Just(1u32), 2 => Just(2u32), 1 => Just(3u32)],
                1u32..100,
                1u32..5,
                prop::option::weighted(0.3, prop::collection::vec(runtime, m)),
                prop::option::weighted(0.2, prop::sample::subsequence(vec![1u32, 2, 3, 4], 1..=2)),
            );
            (Just(devices), prop::collection::vec(task, 1..30))
        })
        .prop_map(|(devices, tasks)| {
            let text: String = devices
                .iter()
                .map(|&(model, speed, layout)| {
                    let mig = layout_of(model, layout);
                    format!(
                        "[[gpu]]\nmodel = \"{}\"\nspeed = {speed}\n{}",
                        MODELS[model],
                        if mig.is_empty() {
                            String::new()
                        } else {
                            format!("mig = {mig:?}\n")
                        }
                    )
                })
                .collect();
            let (host, _) =
                gpu_agent_sim::input::host::parse_with_cluster(Path::new("random.toml"), &text)
                    .unwrap();
            let app = AppLibrary::default().get("default").unwrap().clone();
            let tasks = tasks
                .into_iter()
                .enumerate()
                .map(
                    |(i, (half_secs, workload, mem_gb, gpus, slack, weight, runtimes, alt))| {
                        let arrival = f64::from(half_secs) / 2.0;
                        TaskSpec {
                            id: format!("t{i}"),
                            arrival,
                            workload: f64::from(workload),
                            mem_gb,
                            deadline: arrival + f64::from(slack),
                            weight: f64::from(weight),
                            gpus,
                            alt_gpus: alt
                                .unwrap_or_default()
                                .into_iter()
                                .filter(|&g| g != gpus)
                                .collect(),
                            runtimes: runtimes.unwrap_or_default(),
                            app: app.clone(),
                        }
                    },
                )
                .collect();
            Instance { host, tasks }
        })
}

/// The profile names of layout `layout` of [`LAYOUTS`] on model `model` of
/// [`MODELS`] (none unless it has MIG).
fn layout_of(model: usize, layout: usize) -> Vec<&'static str> {
    let model = gpu_agent_core::catalogue::lookup(MODELS[model]).unwrap();
    match model.mig {
        Some(table) => LAYOUTS[layout]
            .iter()
            .map(|&id| table.profile(id).unwrap().name)
            .collect(),
        None => Vec::new(),
    }
}

/// `task`'s run time on device `j` at default clocks.
pub fn runtime(task: &TaskSpec, host: &Host, j: usize) -> f64 {
    task.runtimes
        .get(j)
        .copied()
        .unwrap_or(task.workload / host.devices[j].speed)
}

/// The devices that could ever hold `task` on its `gpus` devices.
pub fn valid_devices(task: &TaskSpec, host: &Host) -> Vec<usize> {
    valid_for(task, host, task.gpus)
}

/// The devices that could ever hold `task` as one of `g` devices: not a GPU
/// split into MIG instances, and no MIG instance in a gang.
pub fn valid_for(task: &TaskSpec, host: &Host, g: u32) -> Vec<usize> {
    (0..host.devices.len())
        .filter(|&j| {
            let d = &host.devices[j];
            d.schedulable()
                && (g == 1 || d.mig().is_none())
                && d.memory_gb >= task.mem_gb
                && runtime(task, host, j).is_finite()
        })
        .collect()
}

/// Checks the validity properties of `rows` (and the `rejected` ids) for `inst`:
/// a task runs on `gpus` devices or one of its `alt_gpus` counts, for its run
/// time there (the slowest device's, scaled by gpus / count).
pub fn check_valid(
    inst: &Instance,
    rows: &[ScheduleRow],
    rejected: &[String],
) -> Result<(), TestCaseError> {
    let host = &inst.host;
    let mut per_device: Vec<Vec<(f64, f64)>> = vec![Vec::new(); host.devices.len()];
    for r in rows {
        per_device[r.gpu as usize].push((r.start, r.end));
    }
    for (d, spans) in per_device.iter_mut().enumerate() {
        spans.sort_by(|a, b| a.0.total_cmp(&b.0));
        for w in spans.windows(2) {
            prop_assert!(w[0].1 <= w[1].0, "overlap on device {d}: {:?}", w);
        }
    }
    let mut by_id: BTreeMap<&str, Vec<&ScheduleRow>> = BTreeMap::new();
    for r in rows {
        by_id.entry(r.id.as_str()).or_default().push(r);
    }
    for task in &inst.tasks {
        let valid = valid_devices(task, host);
        let k = task.gpus as usize;
        let rows = by_id.remove(task.id.as_str()).unwrap_or_default();
        if valid.len() < k {
            prop_assert!(
                rows.is_empty() && rejected.contains(&task.id),
                "{} should be rejected",
                task.id
            );
            continue;
        }
        prop_assert!(
            !rejected.contains(&task.id),
            "{} rejected though it fits",
            task.id
        );
        let count = rows.len();
        prop_assert!(
            count == k || task.alt_gpus.contains(&(count as u32)),
            "{} must run exactly once on {} devices (or {:?}), ran on {}",
            &task.id,
            k,
            &task.alt_gpus,
            count
        );
        let (start, end) = (rows[0].start, rows[0].end);
        let slowest = rows
            .iter()
            .map(|r| runtime(task, host, r.gpu as usize))
            .fold(0.0, f64::max);
        // At the clocks the row shows: supported ones, the run time theirs.
        let model = host.devices[rows[0].gpu as usize].model;
        prop_assert!(
            model.clock_table.iter().any(
                |t| t.mem_mhz == rows[0].mem_mhz && t.core_clocks().contains(&rows[0].core_mhz)
            ),
            "{} ran at unsupported clocks {} / {} MHz",
            &task.id,
            rows[0].core_mhz,
            rows[0].mem_mhz
        );
        let clocks = gpu_agent_plugin_api::Clocks {
            core: f64::from(rows[0].core_mhz) / f64::from(model.core_default_mhz),
            mem: f64::from(rows[0].mem_mhz) / f64::from(model.mem_default_mhz),
        };
        let expected = slowest * k as f64 / count as f64 * task.app.time_factor(clocks);
        prop_assert!(
            (end - start - expected).abs() <= 1e-9 * expected.max(1.0),
            "{} ran {} s on {} devices; expected {}",
            &task.id,
            end - start,
            count,
            expected
        );
        let valid = valid_for(task, host, count as u32);
        for r in &rows {
            prop_assert!(
                r.start == start && r.end == end,
                "gang rows of {} disagree",
                task.id
            );
            prop_assert!(
                valid.contains(&(r.gpu as usize)),
                "{} on device {} that cannot hold it (as one of {count})",
                task.id,
                r.gpu
            );
            // A MIG instance's clocks are its GPU's: default.
            let device = &host.devices[r.gpu as usize];
            prop_assert!(
                device.mig().is_none() || r.clocks == gpu_agent_plugin_api::Clocks::DEFAULT,
                "{} set clocks {:?} on MIG device {}",
                task.id,
                r.clocks,
                device.label()
            );
        }
        let mut devices: Vec<u32> = rows.iter().map(|r| r.gpu).collect();
        devices.sort_unstable();
        devices.dedup();
        prop_assert_eq!(
            devices.len(),
            count,
            "{} placed twice on a device",
            &task.id
        );
        prop_assert!(
            start >= task.arrival,
            "{} starts before it arrives",
            task.id
        );
    }
    prop_assert!(
        by_id.is_empty(),
        "rows for unknown tasks: {:?}",
        by_id.keys()
    );
    Ok(())
}

/// The parameters every-policy checks give `plugin`: mig-plan places only
/// (`repartition = false`), since these checks hold a schedule against the
/// host as described; its layout changes are checked in
/// tests/e2e/mig_plan_policy.rs against the devices they make.
pub fn placing_only(plugin: &gpu_agent_loader::Plugin) -> Vec<(String, String)> {
    if plugin.name() == "mig-plan" {
        vec![("repartition".to_string(), "false".to_string())]
    } else {
        Vec::new()
    }
}

/// Every shipped policy on `inst`: no fault, a valid schedule, every task
/// counted.
fn every_policy_is_valid_on(inst: &Instance) -> Result<(), TestCaseError> {
    let trace = inst.trace();
    for plugin in registry().plugins.iter() {
        let policy = plugin.instantiate(&placing_only(plugin)).unwrap();
        let outcome = sim::simulate(&inst.host, &trace, policy, |_| {}).unwrap();
        prop_assert!(
            outcome.faults.is_empty(),
            "{}: {:?}",
            plugin.name(),
            outcome.faults
        );
        let rejected: Vec<String> = outcome
            .metrics
            .rejected
            .iter()
            .map(|r| r.id.clone())
            .collect();
        check_valid(inst, &outcome.schedule, &rejected)?;
        prop_assert_eq!(outcome.metrics.tasks, inst.tasks.len());
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    #[test]
    fn every_shipped_policy_schedules_validly(inst in instance()) {
        every_policy_is_valid_on(&inst)?;
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 32, ..ProptestConfig::default() })]

    /// The same on hosts whose A100s are split into MIG instances: every
    /// policy keeps gangs on whole GPUs and runs MIG devices at default
    /// clocks, without a fault.
    #[test]
    fn every_shipped_policy_schedules_validly_on_mig_devices(inst in instance_with(true)) {
        every_policy_is_valid_on(&inst)?;
    }
}

#[test]
fn every_shipped_plugin_loads() {
    let names: Vec<&str> = registry().plugins.iter().map(|p| p.name()).collect();
    assert_eq!(names.len(), SHIPPED.len(), "{names:?}");
}
