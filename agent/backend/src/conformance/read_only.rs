//! Readings only: safe on a production GPU.
//!
//! [`check`] reads every GPU of a backend, asserts what any driver must
//! satisfy, compares a GPU the catalogue knows with its catalogue entry, and
//! returns a report of what it read.

use std::fmt::Write;
use std::time::Duration;

use super::{as_dyn, every_model, process};
use crate::{ClockDomain, GpuBackend, Placement};
use gpu_agent_core::catalogue;

/// Reads every GPU; `wait_1s` lets one second of backend time pass (for the
/// energy counter). Panics on a violated property; returns what it read and
/// where a GPU the catalogue knows differs from its entry (each difference
/// also in the report), so that a run on a real GPU shows every answer
/// before it fails.
pub(super) fn check(b: &dyn GpuBackend, wait_1s: &dyn Fn()) -> (String, Vec<String>) {
    let mut report = String::new();
    let mut differences = Vec::new();
    let count = b.device_count().expect("device_count");
    assert!(count >= 1, "no GPUs");
    for gpu in 0..count {
        check_gpu(b, gpu, &mut report, &mut differences);
    }
    let before: Vec<Option<u64>> = (0..count)
        .map(|g| b.energy_mj(g).expect("energy"))
        .collect();
    wait_1s();
    for gpu in 0..count {
        let after = b.energy_mj(gpu).expect("energy");
        if let (Some(e0), Some(e1)) = (before[gpu as usize], after) {
            assert!(
                e1 >= e0,
                "GPU {gpu}: energy counter went back: {e0} -> {e1} mJ"
            );
            writeln!(report, "GPU {gpu}: energy counter +{} mJ over 1 s", e1 - e0).unwrap();
        } else {
            writeln!(report, "GPU {gpu}: energy counter not supported").unwrap();
        }
    }
    for d in &differences {
        writeln!(report, "differs from the catalogue: {d}").unwrap();
    }
    (report, differences)
}

fn check_gpu(b: &dyn GpuBackend, gpu: u32, report: &mut String, differences: &mut Vec<String>) {
    let info = b.device_info(gpu).expect("device_info");
    assert_eq!(info.index, gpu);
    assert!(
        info.uuid.starts_with("GPU-"),
        "GPU {gpu}: uuid {}",
        info.uuid
    );
    assert!(!info.name.is_empty());
    assert!(
        info.pci_bus_id.contains(':') && info.pci_bus_id.ends_with(".0"),
        "GPU {gpu}: PCI bus id {}",
        info.pci_bus_id
    );
    let mem = b.memory(gpu).expect("memory");
    assert!(mem.total_bytes > 0 && mem.used_bytes <= mem.total_bytes);
    writeln!(
        report,
        "GPU {gpu}: {} ({}), {}, {}, {} MiB, MIG {}",
        info.name,
        info.architecture
            .as_deref()
            .unwrap_or("architecture unknown"),
        info.uuid,
        info.pci_bus_id,
        mem.total_bytes >> 20,
        if info.mig_capable {
            "capable"
        } else {
            "not capable"
        }
    )
    .unwrap();

    let table = b.supported_clocks(gpu).expect("supported_clocks");
    for w in table.windows(2) {
        assert!(
            w[0].mem_mhz > w[1].mem_mhz,
            "GPU {gpu}: memory clocks not highest first"
        );
    }
    for t in &table {
        assert!(
            !t.core_mhz.is_empty(),
            "GPU {gpu}: no core clocks at {} MHz",
            t.mem_mhz
        );
        assert!(
            t.core_mhz.windows(2).all(|w| w[0] > w[1]),
            "GPU {gpu}: core clocks not highest first"
        );
    }
    for domain in [ClockDomain::Core, ClockDomain::Memory] {
        let c = b.clocks(gpu, domain).expect("clocks");
        if let (Some(min), Some(max)) = (c.min, c.max) {
            assert!(min <= max, "GPU {gpu} {domain:?}: min {min} > max {max}");
            if let Some(d) = c.default {
                assert!(
                    min <= d && d <= max,
                    "GPU {gpu} {domain:?}: default {d} outside {min}..{max}"
                );
            }
        }
        if let (Some(cur), Some(max)) = (c.current, c.max) {
            assert!(
                cur <= max,
                "GPU {gpu} {domain:?}: current {cur} > max {max}"
            );
        }
        writeln!(report, "GPU {gpu}: {domain:?} clock MHz {c:?}").unwrap();
    }
    let core_clocks: usize = table.iter().map(|t| t.core_mhz.len()).sum();
    writeln!(
        report,
        "GPU {gpu}: {} memory clock(s) {:?}, {core_clocks} (memory, core) pairs",
        table.len(),
        table.iter().map(|t| t.mem_mhz).collect::<Vec<_>>()
    )
    .unwrap();

    let limits = b.power_limits(gpu).expect("power_limits");
    assert!(limits.min_mw <= limits.max_mw);
    assert!(limits.min_mw <= limits.current_mw && limits.current_mw <= limits.max_mw);
    if let Some(d) = limits.default_mw {
        assert!(limits.min_mw <= d && d <= limits.max_mw);
    }
    let power = b.power_usage_mw(gpu).expect("power_usage_mw");
    if let Some(p) = power {
        assert!(p > 0, "GPU {gpu}: a supported power reading of 0 mW");
    }
    writeln!(report, "GPU {gpu}: power {power:?} mW, limits {limits:?}").unwrap();
    if let Some(u) = b.utilization(gpu).expect("utilization") {
        assert!(u.gpu_pct <= 100 && u.memory_pct <= 100);
    }
    if let Some(t) = b.temperature_c(gpu).expect("temperature") {
        assert!((1..=120).contains(&t), "GPU {gpu}: {t} °C");
    }
    for p in b.processes(gpu).expect("processes") {
        if let Some(used) = p.used_bytes {
            assert!(used <= mem.total_bytes);
        }
    }

    check_mig(b, gpu, info.mig_capable, mem.total_bytes, report);
    differences.extend(compare_with_catalogue(b, gpu, &info.name));
}

fn check_mig(b: &dyn GpuBackend, gpu: u32, capable: bool, total: u64, report: &mut String) {
    let mode = b.mig_mode(gpu).expect("mig_mode");
    assert_eq!(mode.is_some(), capable, "GPU {gpu}: MIG mode vs capability");
    let Some(mode) = mode else { return };
    writeln!(report, "GPU {gpu}: MIG mode {mode:?}").unwrap();
    let profiles = b.gpu_instance_profiles(gpu).expect("gpu_instance_profiles");
    let mut ids: Vec<u32> = profiles.iter().map(|p| p.id).collect();
    ids.sort_unstable();
    ids.dedup();
    assert_eq!(
        ids.len(),
        profiles.len(),
        "GPU {gpu}: duplicate profile ids"
    );
    let slices = profiles
        .iter()
        .flat_map(|p| &p.placements)
        .map(|pl| pl.start + pl.size)
        .max()
        .unwrap_or(0);
    for p in &profiles {
        assert!(
            p.max_count >= 1 && p.slice_count >= 1,
            "GPU {gpu}: profile {}",
            p.id
        );
        assert!(
            p.memory_bytes > 0 && p.memory_bytes <= total,
            "GPU {gpu}: profile {}",
            p.id
        );
        writeln!(report, "GPU {gpu}: {p}").unwrap();
    }
    if !mode.current {
        return;
    }
    let instances = b.gpu_instances(gpu).expect("gpu_instances");
    let mut cis = 0;
    for (i, gi) in instances.iter().enumerate() {
        let profile = profiles.iter().find(|p| p.id == gi.profile_id);
        let profile = profile.unwrap_or_else(|| panic!("GPU {gpu}: instance of unknown profile"));
        assert!(
            profile.placements.contains(&gi.placement),
            "GPU {gpu}: bad placement"
        );
        assert!(gi.placement.start + gi.placement.size <= slices);
        for other in &instances[i + 1..] {
            assert!(
                !gi.placement.overlaps(&other.placement),
                "GPU {gpu}: overlap"
            );
        }
        cis += b
            .compute_instances(gpu, gi.id)
            .expect("compute_instances")
            .len();
    }
    let devices = b.mig_devices(gpu).expect("mig_devices");
    assert_eq!(
        devices.len(),
        cis,
        "GPU {gpu}: one MIG device per compute instance"
    );
    assert!(devices.iter().all(|d| d.uuid.starts_with("MIG-")));
    writeln!(
        report,
        "GPU {gpu}: {} GPU instance(s), {cis} MIG device(s)",
        instances.len()
    )
    .unwrap();
}

/// Where a GPU the catalogue knows by its NVML name differs from its
/// catalogue entry: clock table, default core clock, power limits, and every
/// MIG profile both ways (one the driver lacks, one the catalogue lacks, and
/// each field of the ones both have).
fn compare_with_catalogue(b: &dyn GpuBackend, gpu: u32, name: &str) -> Vec<String> {
    let mut out = Vec::new();
    let Some(model) = catalogue::lookup_nvml(name) else {
        return out;
    };
    let at = format!("GPU {gpu} ({name})");
    let table = b.supported_clocks(gpu).expect("supported_clocks");
    let expected: Vec<(u32, Vec<u32>)> = model
        .clock_table
        .iter()
        .map(|t| (t.mem_mhz, t.core_clocks()))
        .collect();
    let read: Vec<(u32, Vec<u32>)> = table.into_iter().map(|t| (t.mem_mhz, t.core_mhz)).collect();
    if read != expected {
        out.push(format!(
            "{at}: clock table {read:?}, catalogue {expected:?}"
        ));
    }
    let core = b.clocks(gpu, ClockDomain::Core).expect("clocks");
    if let Some(d) = core.default.filter(|&d| d != model.core_default_mhz) {
        out.push(format!(
            "{at}: default core clock {d} MHz, catalogue {}",
            model.core_default_mhz
        ));
    }
    let limits = b.power_limits(gpu).expect("power_limits");
    let w = |mw: u32| f64::from(mw) / 1000.0;
    let read = (w(limits.min_mw), w(limits.max_mw));
    if read != (model.power_min_w, model.power_max_w) {
        out.push(format!(
            "{at}: power limits {read:?} W, catalogue {:?}",
            (model.power_min_w, model.power_max_w)
        ));
    }
    let Some(mig) = model.mig else {
        return out;
    };
    let profiles = match b.gpu_instance_profiles(gpu) {
        Ok(p) => p,
        Err(e) => {
            out.push(format!("{at}: the MIG profiles cannot be read: {e}"));
            return out;
        }
    };
    for p in mig.profiles {
        let Some(got) = profiles.iter().find(|q| q.id == p.id) else {
            out.push(format!(
                "{at}: the driver lacks profile {} ({})",
                p.id, p.name
            ));
            continue;
        };
        let placements: Vec<Placement> = p
            .placement_starts
            .iter()
            .map(|&start| Placement {
                start,
                size: p.placement_size,
            })
            .collect();
        let read = (
            got.name.as_deref(),
            got.slice_count,
            got.memory_bytes >> 20,
            got.max_count,
            &got.placements,
        );
        let listed = (
            Some(p.name),
            p.compute_slices,
            p.memory_mib,
            p.max_count,
            &placements,
        );
        // A driver without names (before R470) is compared on the rest.
        let differs = match read.0 {
            Some(_) => read != listed,
            None => (read.1, read.2, read.3, read.4) != (listed.1, listed.2, listed.3, listed.4),
        };
        if differs {
            out.push(format!(
                "{at}: profile {}: driver (name, slices, MiB, max, placements) {read:?}, catalogue {listed:?}",
                p.id
            ));
        }
    }
    for q in profiles.iter().filter(|q| mig.profile(q.id).is_none()) {
        out.push(format!("{at}: the catalogue lacks {q}"));
    }
    out
}

#[test]
fn mock_satisfies_the_read_only_suite_idle_and_busy() {
    let (b, clock) = every_model();
    let (report, differences) = check(as_dyn(&b), &|| clock.advance(1.0));
    assert_eq!(differences, Vec::<String>::new());
    // Idle, the energy counter grows by exactly the idle power over 1 s.
    assert!(
        report.contains("GPU 0: energy counter +55000 mJ over 1 s"),
        "{report}"
    );
    assert!(
        report.contains("GPU 7: energy counter +10000 mJ over 1 s"),
        "{report}"
    );
    assert!(report.contains(
        "GPU 0: profile id 19 1g.5gb       1 slice(s),   4864 MiB, max 7, placements 0:1 1:1 2:1 3:1 4:1 5:1 6:1"
    ));

    // Busy, with MIG enabled and instances on the first GPU.
    b.start_process(4, process(7, super::matrix_mul())).unwrap();
    b.set_mig_mode(0, true).unwrap();
    b.reset_gpu(0).unwrap();
    let gi = b.create_gpu_instance(0, 9, 4).unwrap();
    b.create_compute_instance(0, gi.id, 2).unwrap();
    let (report, differences) = check(as_dyn(&b), &|| clock.advance(1.0));
    assert!(differences.is_empty(), "{differences:?}");
    assert!(
        report.contains("GPU 0: 1 GPU instance(s), 1 MIG device(s)"),
        "{report}"
    );
}
#[test]
#[ignore = "needs an NVIDIA GPU and driver; reads only"]
fn nvml_read_only() {
    let b = crate::nvml::NvmlBackend::new().expect("NVML");
    let (report, differences) = check(&b, &|| std::thread::sleep(Duration::from_secs(1)));
    println!("{report}");
    assert!(differences.is_empty(), "{differences:#?}");
}
