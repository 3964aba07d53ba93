//! MIG: mode changes, GPU- and compute-instance rules, on every catalogue model.

use std::collections::BTreeSet;

use super::{as_dyn, kind, matrix_mul, one, outcome, process};
use crate::mock::MockProcess;
use crate::{GpuBackend, MigMode, Placement};
use gpu_agent_core::catalogue::CATALOGUE;
use gpu_agent_core::mig::MigTable;

/// A GPU instance request: (profile id, first memory slice).
type Request = (u32, u32);

fn enable_mig(b: &dyn GpuBackend, gpu: u32) {
    b.set_mig_mode(gpu, true).unwrap();
    b.reset_gpu(gpu).unwrap();
}

/// Every valid request of the table, by start then profile id.
fn requests(table: &MigTable) -> Vec<Request> {
    let mut all: Vec<Request> = table
        .profiles
        .iter()
        .flat_map(|p| p.placement_starts.iter().map(move |&s| (p.id, s)))
        .collect();
    all.sort_by_key(|&(id, start)| (start, id));
    all
}

/// Whether `r` can join `layout`: under the profile's count, overlapping nothing.
fn fits(table: &MigTable, layout: &[Request], r: Request) -> bool {
    let span = |(id, start): Request| {
        let size = table.profile(id).unwrap().placement_size;
        start..start + size
    };
    let p = table.profile(r.0).unwrap();
    let same = layout.iter().filter(|(id, _)| *id == r.0).count() as u32;
    let (a, b) = (span(r), r);
    same < p.max_count
        && layout.iter().all(|&other| {
            let o = span(other);
            b != other && (a.end <= o.start || o.end <= a.start)
        })
}

/// Every maximal layout (no request fits any more), each once, requests in
/// `requests` order.
fn maximal_layouts(table: &MigTable) -> Vec<Vec<Request>> {
    fn walk(
        table: &MigTable,
        all: &[Request],
        from: usize,
        layout: &mut Vec<Request>,
        out: &mut Vec<Vec<Request>>,
    ) {
        if all.iter().all(|&r| !fits(table, layout, r)) {
            out.push(layout.clone());
            return;
        }
        for i in from..all.len() {
            if fits(table, layout, all[i]) {
                layout.push(all[i]);
                walk(table, all, i + 1, layout, out);
                layout.pop();
            }
        }
    }
    let mut out = Vec::new();
    walk(table, &requests(table), 0, &mut Vec::new(), &mut out);
    out
}

#[test]
fn a100_40gb_layouts_include_the_ones_nvidia_documents() {
    let table = CATALOGUE[0].mig.unwrap();
    let layouts: BTreeSet<Vec<Request>> = maximal_layouts(table).into_iter().collect();
    for documented in [
        vec![(0, 0)],                             // 7g.40gb
        vec![(5, 0), (9, 4)],                     // 4g + 3g
        vec![(9, 0), (9, 4)],                     // 3g + 3g
        vec![(14, 0), (14, 2), (9, 4)],           // 2g + 2g + 3g
        vec![(14, 0), (14, 2), (14, 4), (19, 6)], // 2g x3 + 1g
        vec![
            (19, 0),
            (19, 1),
            (19, 2),
            (19, 3),
            (19, 4),
            (19, 5),
            (19, 6),
        ], // 1g x7
        vec![(15, 0), (15, 2), (15, 4), (15, 6)], // 1g.10gb x4
    ] {
        assert!(layouts.contains(&documented), "{documented:?} missing");
    }
    // Not maximal: a 4g at 0 leaves room for a 3g at 4.
    assert!(!layouts.contains(&vec![(5, 0)]));
}

/// Builds every maximal layout on `model`, then checks that every further
/// request is refused for lack of resources and every misplaced one as invalid.
fn every_maximal_layout_builds(model: &str) -> usize {
    let table = CATALOGUE
        .iter()
        .find(|m| m.name == model)
        .unwrap()
        .mig
        .unwrap();
    let layouts = maximal_layouts(table);
    let (mock, _) = one(model);
    let b = as_dyn(&mock);
    enable_mig(b, 0);
    for layout in &layouts {
        let mut ids = Vec::new();
        for &(profile, start) in layout {
            let gi = b
                .create_gpu_instance(0, profile, start)
                .unwrap_or_else(|e| panic!("{model} {layout:?}: ({profile}, {start}): {e}"));
            let size = table.profile(profile).unwrap().placement_size;
            assert_eq!(
                (gi.profile_id, gi.placement),
                (profile, Placement { start, size })
            );
            ids.push(gi.id);
        }
        let built: BTreeSet<Request> = b
            .gpu_instances(0)
            .unwrap()
            .iter()
            .map(|gi| (gi.profile_id, gi.placement.start))
            .collect();
        assert_eq!(built, layout.iter().copied().collect(), "{model}");
        for r in requests(table) {
            let got = b.create_gpu_instance(0, r.0, r.1);
            assert_eq!(
                outcome(&got),
                "InsufficientResources",
                "{model} {layout:?} + {r:?}"
            );
        }
        for p in table.profiles {
            for start in (0..table.memory_slices).filter(|s| !p.placement_starts.contains(s)) {
                let got = b.create_gpu_instance(0, p.id, start);
                assert_eq!(
                    outcome(&got),
                    "InvalidArgument",
                    "{model} {} at {start}",
                    p.name
                );
            }
        }
        for id in ids.into_iter().rev() {
            b.destroy_gpu_instance(0, id).unwrap();
        }
        assert!(b.gpu_instances(0).unwrap().is_empty());
    }
    layouts.len()
}

#[test]
fn every_maximal_layout_builds_on_every_mig_model() {
    let mut counts = Vec::new();
    for model in CATALOGUE.iter().filter(|m| m.mig_capable()) {
        counts.push((model.name, every_maximal_layout_builds(model.name)));
    }
    // The A100, H100 and H200 models share NVIDIA's 8-slice placement rules
    // (239 with the 1g+me and 1g double-memory variants); the A30 has 4
    // slices.
    assert_eq!(
        counts,
        [
            ("A100-SXM4-40GB", 239),
            ("A100-SXM4-80GB", 239),
            ("H100-SXM5-80GB", 239),
            ("H100-PCIe-80GB", 239),
            ("H200-SXM-141GB", 239),
            ("A30-PCIe-24GB", 21),
        ]
    );
}

#[test]
fn over_count_is_refused_even_without_overlap() {
    let (mock, _) = one("A100-SXM4-40GB");
    let b = as_dyn(&mock);
    enable_mig(b, 0);
    b.create_gpu_instance(0, 20, 0).unwrap(); // 1g.5gb+me, at most one
    let e = b.create_gpu_instance(0, 20, 3).unwrap_err();
    assert_eq!(kind(&e), "InsufficientResources");
    assert_eq!(
        e.to_string(),
        "GPU 0: nvmlDeviceCreateGpuInstanceWithPlacement: insufficient resources: \
         1g.5gb+me: at most 1 instance(s)"
    );
    let e = b.create_gpu_instance(0, 19, 0).unwrap_err();
    assert_eq!(
        e.to_string(),
        "GPU 0: nvmlDeviceCreateGpuInstanceWithPlacement: insufficient resources: \
         memory slices 0..1 overlap GPU instance 1 (1g.5gb+me at 0..1)"
    );
    let e = b.create_gpu_instance(0, 14, 1).unwrap_err();
    assert_eq!(
        e.to_string(),
        "GPU 0: nvmlDeviceCreateGpuInstanceWithPlacement: invalid argument: \
         2g.10gb cannot start at memory slice 1; valid starts: 0, 2, 4"
    );
    assert_eq!(outcome(&b.create_gpu_instance(0, 3, 0)), "InvalidArgument");
}

#[test]
fn models_without_mig_refuse_every_mig_call() {
    for model in CATALOGUE.iter().filter(|m| !m.mig_capable()) {
        let (mock, _) = one(model.name);
        let b = as_dyn(&mock);
        assert_eq!(b.mig_mode(0).unwrap(), None, "{}", model.name);
        assert!(!b.device_info(0).unwrap().mig_capable);
        assert_eq!(outcome(&b.set_mig_mode(0, true)), "NotSupported");
        assert_eq!(outcome(&b.gpu_instance_profiles(0)), "NotSupported");
        assert_eq!(outcome(&b.create_gpu_instance(0, 19, 0)), "NotSupported");
        assert_eq!(b.gpu_instances(0).unwrap(), vec![]);
        assert_eq!(b.mig_devices(0).unwrap(), vec![]);
    }
}

#[test]
fn mig_mode_stays_pending_until_a_reset_with_nothing_running() {
    let (mock, _) = one("H100-SXM5-80GB");
    let b = as_dyn(&mock);
    let off = MigMode {
        current: false,
        pending: false,
    };
    assert_eq!(b.mig_mode(0).unwrap(), Some(off));
    assert_eq!(outcome(&b.create_gpu_instance(0, 0, 0)), "NotSupported");
    let pending = MigMode {
        current: false,
        pending: true,
    };
    assert_eq!(b.set_mig_mode(0, true).unwrap(), pending);
    assert_eq!(b.mig_mode(0).unwrap(), Some(pending));
    assert_eq!(outcome(&b.create_gpu_instance(0, 0, 0)), "NotSupported");

    mock.start_process(0, process(42, matrix_mul())).unwrap();
    let e = b.reset_gpu(0).unwrap_err();
    assert_eq!(
        e.to_string(),
        "GPU 0: nvmlDeviceResetGpu: in use: processes are running: pid 42"
    );
    assert_eq!(b.mig_mode(0).unwrap(), Some(pending));
    mock.end_process(0, 42).unwrap();
    b.reset_gpu(0).unwrap();
    let on = MigMode {
        current: true,
        pending: true,
    };
    assert_eq!(b.mig_mode(0).unwrap(), Some(on));

    // Under MIG a process needs a compute instance.
    assert_eq!(
        outcome(&mock.start_process(0, process(43, matrix_mul()))),
        "InvalidArgument"
    );
    let gi = b.create_gpu_instance(0, 0, 0).unwrap();
    assert_eq!(outcome(&b.set_mig_mode(0, false)), "InUse");
    b.destroy_gpu_instance(0, gi.id).unwrap();
    assert_eq!(
        b.set_mig_mode(0, false).unwrap(),
        MigMode {
            current: true,
            pending: false
        }
    );
    b.reset_gpu(0).unwrap();
    assert_eq!(b.mig_mode(0).unwrap(), Some(off));
}

#[test]
fn compute_instances_share_their_gpu_instance() {
    let (mock, _) = one("A100-SXM4-40GB");
    let b = as_dyn(&mock);
    enable_mig(b, 0);
    let gi = b.create_gpu_instance(0, 9, 0).unwrap(); // 3g.20gb
    let profiles: Vec<(u32, u32, u32)> = b
        .compute_instance_profiles(0, gi.id)
        .unwrap()
        .iter()
        .map(|p| (p.id, p.slice_count, p.max_count))
        .collect();
    assert_eq!(profiles, vec![(0, 1, 3), (1, 2, 1), (2, 3, 1)]);
    assert_eq!(
        outcome(&b.create_compute_instance(0, gi.id, 4)),
        "InvalidArgument"
    );
    let cis: Vec<u32> = (0..3)
        .map(|_| b.create_compute_instance(0, gi.id, 0).unwrap().id)
        .collect();
    assert_eq!(cis, vec![0, 1, 2]);
    assert_eq!(
        outcome(&b.create_compute_instance(0, gi.id, 0)),
        "InsufficientResources"
    );
    assert_eq!(outcome(&b.create_compute_instance(0, 99, 0)), "NotFound");

    let devices = b.mig_devices(0).unwrap();
    assert_eq!(devices.len(), 3);
    let uuids: BTreeSet<&str> = devices.iter().map(|d| d.uuid.as_str()).collect();
    assert_eq!(uuids.len(), 3);
    assert!(devices
        .iter()
        .all(|d| d.uuid.starts_with("MIG-") && d.memory_bytes == 19968 << 20));

    // A re-created compute instance is a new MIG device.
    b.destroy_compute_instance(0, gi.id, 2).unwrap();
    assert_eq!(b.create_compute_instance(0, gi.id, 0).unwrap().id, 2);
    let again = b.mig_devices(0).unwrap();
    assert_eq!(again[..2], devices[..2]);
    assert_ne!(again[2].uuid, devices[2].uuid);

    assert_eq!(outcome(&b.destroy_gpu_instance(0, gi.id)), "InUse");
    let in_ci = MockProcess {
        mig: Some((gi.id, 1)),
        ..process(5, matrix_mul())
    };
    mock.start_process(0, in_ci).unwrap();
    let listed = b.processes(0).unwrap();
    assert_eq!(
        (listed[0].gpu_instance, listed[0].compute_instance),
        (Some(gi.id), Some(1))
    );
    assert_eq!(outcome(&b.destroy_compute_instance(0, gi.id, 1)), "InUse");
    mock.end_process(0, 5).unwrap();
    for ci in cis {
        b.destroy_compute_instance(0, gi.id, ci).unwrap();
    }
    assert_eq!(
        outcome(&b.destroy_compute_instance(0, gi.id, 0)),
        "NotFound"
    );
    b.destroy_gpu_instance(0, gi.id).unwrap();
    assert_eq!(outcome(&b.destroy_gpu_instance(0, gi.id)), "NotFound");
}

#[test]
fn a_process_must_fit_its_gpu_instance() {
    let (mock, _) = one("A100-SXM4-40GB");
    let b = as_dyn(&mock);
    enable_mig(b, 0);
    let gi = b.create_gpu_instance(0, 19, 0).unwrap(); // 1g.5gb: 4864 MiB
    b.create_compute_instance(0, gi.id, 0).unwrap();
    let too_big = MockProcess {
        used_bytes: 4865 << 20,
        mig: Some((gi.id, 0)),
        ..process(1, matrix_mul())
    };
    assert_eq!(
        outcome(&mock.start_process(0, too_big)),
        "InsufficientResources"
    );
    let fits = MockProcess {
        used_bytes: 4864 << 20,
        mig: Some((gi.id, 0)),
        ..process(1, matrix_mul())
    };
    mock.start_process(0, fits).unwrap();
    assert_eq!(b.memory(0).unwrap().used_bytes, 4864 << 20);
}
