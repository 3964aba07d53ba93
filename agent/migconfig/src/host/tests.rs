use super::*;
use gpu_agent_catalogue::mig::{A100_40GB, H100_80GB};

const EXAMPLE: &str = include_str!("../../../../examples/mig-config.yaml");

fn a100(index: u32) -> HostGpu {
    HostGpu {
        index,
        model: "A100-SXM4-40GB".into(),
        pci_id: Some(0x20B0_10DE),
        pci_subsystem_id: None,
        mig: Some(&A100_40GB),
    }
}

fn h100(index: u32) -> HostGpu {
    HostGpu {
        index,
        model: "H100-SXM5-80GB".into(),
        pci_id: Some(0x2330_10DE),
        pci_subsystem_id: None,
        mig: Some(&H100_80GB),
    }
}

fn v100(index: u32) -> HostGpu {
    HostGpu {
        index,
        model: "V100-SXM2-32GB".into(),
        pci_id: Some(0x1DB1_10DE),
        pci_subsystem_id: None,
        mig: None,
    }
}

fn layout(t: &Target) -> Vec<String> {
    t.layout.iter().map(Instance::to_string).collect()
}

fn resolve_text(
    text: &str,
    name: Option<&str>,
    gpus: &[HostGpu],
) -> Result<BTreeMap<u32, Target>, ConfigError> {
    resolve(&MigConfigFile::parse(text).unwrap(), name, gpus)
}

/// A one-config file of one entry selecting `devices`.
fn entry(devices: &str, mig_devices: &str) -> String {
    format!(
        "version: v1\nmig-configs:\n  c:\n    - devices: {devices}\n      mig-enabled: true\n      mig-devices: {mig_devices}\n"
    )
}

#[test]
fn the_example_selects_by_filter_and_places_largest_first() {
    let gpus = [a100(0), a100(1), h100(2), v100(3)];
    let t = resolve_text(EXAMPLE, Some("balanced"), &gpus).unwrap();
    assert_eq!(t.keys().copied().collect::<Vec<_>>(), [0, 1, 2]);
    assert_eq!(
        layout(&t[&0]),
        ["2g.10gb@0", "1g.5gb@2", "1g.5gb@3", "3g.20gb@4"]
    );
    assert_eq!(layout(&t[&0]), layout(&t[&1]));
    assert_eq!(
        layout(&t[&2]),
        ["2g.20gb@0", "1g.10gb@2", "1g.10gb@3", "3g.40gb@4"]
    );
    let t = resolve_text(EXAMPLE, Some("inference-mix"), &gpus).unwrap();
    assert_eq!(layout(&t[&0]), ["4g.20gb@0", "3g.20gb@4"]);
    assert_eq!(
        layout(&t[&1]),
        ["1g.5gb@0", "1g.5gb@1", "1g.5gb@2", "1g.5gb@3", "3g.20gb@4"]
    );
    // MIG off on the V100 is no request at all; GPU 2 (an H100) is off too.
    assert!(!t[&2].enabled && !t[&3].enabled);
}

#[test]
fn refusals_name_the_place_and_the_kind() {
    let gpus = [a100(0), a100(1), v100(2)];
    let cases: &[(String, ErrorKind, &str)] = &[
        (
            entry("[0]", "{\"2g.20gb\": 1}"),
            ErrorKind::Invalid,
            "line 6, column 32: mig-configs.c[0].mig-devices: 2g.20gb is not a profile of A100-SXM4-40GB (GPU 0); its profiles: 1g.5gb, 1g.5gb+me, 1g.10gb, 2g.10gb, 3g.20gb, 4g.20gb, 7g.40gb",
        ),
        (
            entry("[0]", "{\"3g.20gb\": 3}"),
            ErrorKind::Invalid,
            "line 6, column 32: mig-configs.c[0].mig-devices: 3 × 3g.20gb: A100-SXM4-40GB (GPU 0) holds at most 2",
        ),
        (
            entry("[1]", "{\"4g.20gb\": 1, \"3g.20gb\": 2}"),
            ErrorKind::Invalid,
            "line 6, column 20: mig-configs.c[0].mig-devices: 1× 4g.20gb, 2× 3g.20gb cannot be placed together on A100-SXM4-40GB (GPU 1): no layout holds them",
        ),
        (
            entry("[0, 7]", "{}"),
            ErrorKind::NoSuchDevice,
            "line 4, column 16: mig-configs.c[0].devices: GPU 7: no such GPU on this host (GPUs 0, 1, 2)",
        ),
        (
            entry("[2]", "{\"1g.5gb\": 1}"),
            ErrorKind::NotSupported,
            "line 5, column 20: mig-configs.c[0].mig-enabled: GPU 2 (V100-SXM2-32GB) is not MIG-capable",
        ),
        (
            entry("[0]", "{\"1c.3g.20gb\": 1}"),
            ErrorKind::NotSupported,
            "line 6, column 35: mig-configs.c[0].mig-devices: 1c.3g.20gb: compute-instance profiles are not supported: the agent makes one full-size compute instance in each GPU instance (3g.20gb) and schedules it as one device",
        ),
        (
            entry("[0]", "{\"4c.3g.20gb\": 1}"),
            ErrorKind::Invalid,
            "line 6, column 35: mig-configs.c[0].mig-devices: 4c.3g.20gb: a compute instance of 4 slices cannot be larger than its GPU instance (3g.20gb)",
        ),
        (
            entry("[0]", "{\"1g.5gb-me\": 1}"),
            ErrorKind::Invalid,
            "line 6, column 34: mig-configs.c[0].mig-devices: 1g.5gb-me is not a profile of A100-SXM4-40GB (GPU 0); its profiles: 1g.5gb, 1g.5gb+me, 1g.10gb, 2g.10gb, 3g.20gb, 4g.20gb, 7g.40gb",
        ),
        (
            "version: v1\nmig-configs:\n  c:\n    - devices: all\n      mig-enabled: false\n    - devices: [1]\n      mig-enabled: false\n".into(),
            ErrorKind::Invalid,
            "line 6, column 7: mig-configs.c[1]: GPU 1 is selected by entry 0 too; the agent takes each GPU from one entry",
        ),
    ];
    let mut wrong = Vec::new();
    for (text, kind, want) in cases {
        let e = resolve_text(text, None, &gpus).unwrap_err();
        if e.to_string() != *want || e.kind != *kind {
            wrong.push(format!(
                "{text}\n  got  {:?} {e}\n  want {kind:?} {want}",
                e.kind
            ));
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

#[test]
fn filters_select_by_pci_id_and_subsystem() {
    let mut gpus = vec![a100(0), h100(1)];
    gpus[0].pci_subsystem_id = Some(0x145F_10DE);
    let text = "version: v1\nmig-configs:\n  c:\n    - device-filter: \"0x20B010DE:0x145F10DE\"\n      devices: all\n      mig-enabled: true\n      mig-devices: {\"7g.40gb\": 1}\n";
    let t = resolve_text(text, None, &gpus).unwrap();
    assert_eq!(t.keys().copied().collect::<Vec<_>>(), [0]);
    assert_eq!(layout(&t[&0]), ["7g.40gb@0"]);
    gpus[0].pci_subsystem_id = Some(1);
    assert!(resolve_text(text, None, &gpus).unwrap().is_empty());
}

fn state(gpu: &HostGpu, t: &Target) -> GpuMig {
    let _ = gpu;
    GpuMig {
        enabled: t.enabled,
        instances: t.layout.clone(),
    }
}

#[test]
fn export_then_assert_agrees_on_the_same_host() {
    let gpus = [a100(0), a100(1), h100(2), v100(3)];
    for name in ["balanced", "inference-mix"] {
        let t = resolve_text(EXAMPLE, Some(name), &gpus).unwrap();
        let actual: Vec<(HostGpu, GpuMig)> = gpus
            .iter()
            .map(|g| {
                let s = t.get(&g.index).map_or(
                    GpuMig {
                        enabled: false,
                        instances: vec![],
                    },
                    |t| state(g, t),
                );
                (g.clone(), s)
            })
            .collect();
        let file = export("current", &actual);
        let text = file.to_yaml();
        let back = MigConfigFile::parse(&text).unwrap();
        let targets = resolve(&back, Some("current"), &gpus).unwrap();
        let actual: BTreeMap<u32, GpuMig> = actual.into_iter().map(|(g, s)| (g.index, s)).collect();
        assert_eq!(
            mismatches(&targets, &gpus, &actual),
            Vec::<String>::new(),
            "{text}"
        );
    }
}

#[test]
fn export_groups_equal_gpus_and_filters_only_mixed_hosts() {
    let on = |t: &Target| GpuMig {
        enabled: true,
        instances: t.layout.clone(),
    };
    let gpus = [a100(0), a100(1), a100(2)];
    let four = [a100(0), a100(1), a100(2), a100(3)];
    let t = resolve_text(EXAMPLE, Some("inference-mix"), &four).unwrap();
    let off = GpuMig {
        enabled: false,
        instances: vec![],
    };
    let states = [
        (gpus[0].clone(), on(&t[&1])),
        (gpus[1].clone(), off.clone()),
        (gpus[2].clone(), on(&t[&1])),
    ];
    assert_eq!(
        export("current", &states).to_yaml(),
        "version: v1\nmig-configs:\n  current:\n  - devices: [0, 2]\n    mig-enabled: true\n    mig-devices: {3g.20gb: 1, 1g.5gb: 4}\n  - devices: [1]\n    mig-enabled: false\n"
    );
    let states = [
        (a100(0), off.clone()),
        (v100(1), off.clone()),
        (a100(2), off),
    ];
    assert_eq!(
        export("now", &states).to_yaml(),
        "version: v1\nmig-configs:\n  now:\n  - device-filter: \"0x20B010DE\"\n    devices: all\n    mig-enabled: false\n  - device-filter: \"0x1DB110DE\"\n    devices: all\n    mig-enabled: false\n"
    );
}

#[test]
fn assert_lists_every_difference() {
    let gpus = [a100(0), a100(1), a100(2)];
    let four = [a100(0), a100(1), a100(2), a100(3)];
    let mut t = resolve_text(EXAMPLE, Some("inference-mix"), &four).unwrap();
    t.remove(&2);
    let actual = BTreeMap::from([
        (
            0,
            GpuMig {
                enabled: true,
                instances: t[&1].layout.clone(),
            },
        ),
        (
            1,
            GpuMig {
                enabled: false,
                instances: vec![],
            },
        ),
    ]);
    assert_eq!(
        mismatches(&t, &gpus, &actual),
        [
            "GPU 0: has 1× 3g.20gb, 4× 1g.5gb, wanted 1× 4g.20gb, 1× 3g.20gb",
            "GPU 1: MIG mode is off, wanted on",
            "GPU 2: selected by no entry",
        ]
    );
}

#[test]
fn entries_that_select_no_gpu_are_named() {
    let text = "version: v1\nmig-configs:\n  c:\n    - device-filter: \"0x20B010DE\"\n      devices: all\n      mig-enabled: false\n    - device-filter: [\"0x20B710DE\", \"0x233510DE\"]\n      devices: all\n      mig-enabled: true\n      mig-devices: {\"1g.6gb\": 4}\n    - devices: [5]\n      mig-enabled: false\n";
    let file = MigConfigFile::parse(text).unwrap();
    let config = file.config(None).unwrap();
    assert_eq!(
        unmatched(config, &[a100(0), h100(5)]),
        ["entry 1 (line 7: device-filter 0x20B710DE, 0x233510DE, devices all)"]
    );
    assert_eq!(
        unmatched(config, &[h100(0)]),
        [
            "entry 0 (line 4: device-filter 0x20B010DE, devices all)",
            "entry 1 (line 7: device-filter 0x20B710DE, 0x233510DE, devices all)",
            "entry 2 (line 11: devices 5)",
        ]
    );
}
