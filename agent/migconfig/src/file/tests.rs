use super::*;

const EXAMPLE: &str = include_str!("../../../../examples/mig-config.yaml");

fn err(text: &str) -> String {
    MigConfigFile::parse(text).unwrap_err().to_string()
}

/// A one-entry file around `entry` (indented as an item of config `a`).
fn one(entry: &str) -> String {
    format!("version: v1\nmig-configs:\n  a:\n    - {entry}\n")
}

#[test]
fn the_example_reads_as_written() {
    let f = MigConfigFile::parse(EXAMPLE).unwrap();
    let names: Vec<&str> = f.configs.iter().map(|c| c.name.as_str()).collect();
    assert_eq!(names, ["balanced", "inference-mix"]);
    let b = &f.configs[0];
    assert_eq!(b.entries.len(), 2);
    assert_eq!(
        b.entries[0].device_filter,
        [PciId {
            device: 0x20B0_10DE,
            subsystem: None
        }]
    );
    assert_eq!(b.entries[0].devices, Devices::All);
    let md: Vec<(&str, u32)> = b.entries[0]
        .mig_devices
        .iter()
        .map(|d| (d.profile.as_str(), d.count))
        .collect();
    assert_eq!(md, [("1g.5gb", 2), ("2g.10gb", 1), ("3g.20gb", 1)]);
    assert_eq!(
        b.entries[0].mig_devices[0].pos,
        Pos {
            line: 16,
            column: 31
        }
    );
    let m = &f.configs[1];
    assert_eq!(m.entries[2].devices, Devices::List(vec![2, 3]));
    assert!(!m.entries[2].mig_enabled && m.entries[2].mig_devices.is_empty());
    assert_eq!(
        f.config(Some("inference-mix")).unwrap().name,
        "inference-mix"
    );
}

#[test]
fn what_is_written_reads_back_the_same() {
    let f = MigConfigFile::parse(EXAMPLE).unwrap();
    let text = f.to_yaml();
    assert!(
        text.starts_with("version: v1\nmig-configs:\n  balanced:\n"),
        "{text}"
    );
    assert!(text.contains("device-filter: \"0x20B010DE\""), "{text}");
    let back = MigConfigFile::parse(&text).unwrap();
    let strip = |f: &MigConfigFile| {
        f.configs
            .iter()
            .map(|c| {
                let e: Vec<_> = c
                    .entries
                    .iter()
                    .map(|e| {
                        let md: Vec<_> = e
                            .mig_devices
                            .iter()
                            .map(|d| (d.profile.clone(), d.count))
                            .collect();
                        (
                            e.device_filter.clone(),
                            e.devices.clone(),
                            e.mig_enabled,
                            md,
                        )
                    })
                    .collect();
                (c.name.clone(), e)
            })
            .collect::<Vec<_>>()
    };
    assert_eq!(strip(&back), strip(&f));
}

#[test]
fn a_planned_file_is_written_as_mig_parted_writes_it() {
    let f = MigConfigFile {
        configs: vec![Config {
            name: "plan".into(),
            pos: Pos::default(),
            entries: vec![
                Entry::new(
                    vec![],
                    Devices::List(vec![0]),
                    true,
                    vec![("4g.20gb".into(), 1), ("3g.20gb".into(), 1)],
                ),
                Entry::new(vec![], Devices::List(vec![1]), false, vec![]),
                Entry::new(vec![], Devices::All, true, vec![]),
            ],
        }],
    };
    assert_eq!(
        f.to_yaml(),
        "version: v1\nmig-configs:\n  plan:\n  - devices: [0]\n    mig-enabled: true\n    mig-devices: {4g.20gb: 1, 3g.20gb: 1}\n  - devices: [1]\n    mig-enabled: false\n  - devices: all\n    mig-enabled: true\n    mig-devices: {}\n"
    );
}

#[test]
fn schema_errors_name_line_column_and_key() {
    let cases: &[(String, &str)] = &[
        (
            "version: v2\nmig-configs: {}\n".into(),
            "line 1, column 10: version: `v2` is not supported; only v1 is",
        ),
        (
            "version: v1\nmig-configs: {}\nextra: 1\n".into(),
            "line 3, column 1: extra: unknown field `extra`, expected one of version, mig-configs",
        ),
        (
            "version: v1\nmig-configs: {}\n".into(),
            "line 2, column 14: mig-configs: the file names no configuration",
        ),
        (
            "version: v1\nmig-configs:\n  a: []\n".into(),
            "line 3, column 6: mig-configs.a: a configuration needs at least one entry",
        ),
        (
            one("mig-enabled: true\n      mig-devices: {}"),
            "line 5, column 7: mig-configs.a[0]: missing field `devices`",
        ),
        (
            one("devices: all"),
            "line 4, column 7: mig-configs.a[0]: missing field `mig-enabled`",
        ),
        (
            one("devices: al\n      mig-enabled: false"),
            "line 4, column 7: mig-configs.a[0].devices: invalid value: string \"al\", expected `all` or a list of GPU indices",
        ),
        (
            one("devices: []\n      mig-enabled: false"),
            "line 4, column 16: mig-configs.a[0].devices: an empty list selects no GPU; write `all` or GPU indices",
        ),
        (
            one("devices: [1, 1]\n      mig-enabled: false"),
            "line 4, column 16: mig-configs.a[0].devices: GPU 1 is listed twice",
        ),
        (
            one("devices: all\n      mig-enabled: true"),
            "line 4, column 7: mig-configs.a[0].mig-devices: required when mig-enabled is true (`{}` for MIG on without instances)",
        ),
        (
            one("devices: all\n      mig-enabled: false\n      mig-devices: {\"1g.5gb\": 1}"),
            "line 6, column 20: mig-configs.a[0].mig-devices: must be empty when mig-enabled is false",
        ),
        (
            one("devices: all\n      mig-enabled: true\n      mig-devices: {\"1g.5gb\": 0, \"2g.10gb\": 0}"),
            "line 6, column 20: mig-configs.a[0].mig-devices: every count is 0; write `{}` for MIG on without instances",
        ),
        (
            one("devices: all\n      mig-enabled: true\n      mig-devices: {\"1g.5gb\": -1}"),
            "line 6, column 31: mig-configs.a[0].mig-devices.1g.5gb: count -1 is not a whole number ≥ 0",
        ),
        (
            one("devices: all\n      mig-enabled: true\n      mig-devices: {\"big\": 1}"),
            "line 6, column 28: mig-configs.a[0].mig-devices: `big` is not a profile name: expected 2 or 3 fields separated by `.` ([<c>c.]<g>g.<mem>gb[+attributes|-attributes], e.g. 3g.20gb, 1g.10gb+me, 1c.3g.20gb)",
        ),
        (
            one("devices: all\n      mig-enabled: true\n      mig-devices: {\"1g.5gb\": 1, \"1g.5gb\": 2}"),
            "line 6, column 34: mig-configs.a[0].mig-devices: duplicate mapping key: 1g.5gb",
        ),
        (
            one("device-filter: \"0x20B0\"\n      devices: all\n      mig-enabled: false"),
            "line 4, column 22: mig-configs.a[0].device-filter: `0x20B0` is not a PCI id (0xDDDDVVVV, optionally :0xSSSSVVVV)",
        ),
        (
            one("device-filter: []\n      devices: all\n      mig-enabled: false"),
            "line 4, column 22: mig-configs.a[0].device-filter: an empty filter matches no GPU; leave the key out to match every GPU",
        ),
        (
            one("devices: all\n      mig-enabled: true\n      mig-devices: {}\n      bogus: 1"),
            "line 7, column 7: mig-configs.a[0].bogus: unknown field `bogus`, expected one of device-filter, devices, mig-enabled, mig-devices",
        ),
        (
            "version: v1\nmig-configs:\n  a: [\n".into(),
            "line 3, column 6: mig-configs.a: unclosed bracket '['",
        ),
    ];
    let wrong: Vec<String> = cases
        .iter()
        .filter(|(text, want)| err(text) != *want)
        .map(|(text, want)| format!("{text}\n  got  {}\n  want {want}", err(text)))
        .collect();
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

#[test]
fn filters_and_profile_forms() {
    let f = MigConfigFile::parse(&one(
        "device-filter: [\"0x20B010DE\", \"0x20b210de:0x145F10DE\"]\n      devices: [3, 0]\n      mig-enabled: true\n      mig-devices: {\"1c.3g.20gb\": 1, \"1g.5gb+me\": 1}",
    ))
    .unwrap();
    let e = &f.configs[0].entries[0];
    assert_eq!(
        e.device_filter,
        [
            PciId {
                device: 0x20B0_10DE,
                subsystem: None
            },
            PciId {
                device: 0x20B2_10DE,
                subsystem: Some(0x145F_10DE)
            }
        ]
    );
    assert!(e.device_filter[1].matches(0x20B2_10DE, Some(0x145F_10DE)));
    assert!(!e.device_filter[1].matches(0x20B2_10DE, Some(0x1)));
    assert!(e.device_filter[0].matches(0x20B0_10DE, None));
    assert_eq!(e.device_filter[1].to_string(), "0x20B210DE:0x145F10DE");
    assert_eq!(e.devices, Devices::List(vec![3, 0]));
    // Every form of go-nvlib's grammar reads; a name no GPU has is no error
    // of the file.
    let f = MigConfigFile::parse(&one(
        "devices: all\n      mig-enabled: true\n      mig-devices: {\"1g.24gb+me.all\": 1, \"1g.24gb-me\": 1, \"2g.48gb+gfx\": 1, \"1g.24gb+me,gfx\": 1, \"1c.2g.48gb+gfx\": 1, \"9g.999gb\": 1}",
    ))
    .unwrap();
    assert_eq!(f.configs[0].entries[0].mig_devices.len(), 6);
    for (bad, why) in [
        ("3g", "expected 2 or 3 fields separated by `.`"),
        ("g.5gb", "`g` is not `<number>g`"),
        ("1g.5gb+", "an attribute is empty"),
        ("1x.5gb", "`1x` is not `<number>g`"),
        ("1g.5gb+m-e", "it has both `+` and `-` attributes"),
        ("1c.2c.3g.20gb", "`2c` is not `<number>g`"),
    ] {
        let text = one(&format!(
            "devices: all\n      mig-enabled: true\n      mig-devices: {{\"{bad}\": 1}}"
        ));
        assert_eq!(
            err(&text),
            format!(
                "line 6, column {}: mig-configs.a[0].mig-devices: `{bad}` is not a profile name: {why} \
                 ([<c>c.]<g>g.<mem>gb[+attributes|-attributes], e.g. 3g.20gb, 1g.10gb+me, 1c.3g.20gb)",
                25 + bad.len()
            ),
            "{bad}"
        );
    }
}

#[test]
fn choosing_a_configuration() {
    let f = MigConfigFile::parse(EXAMPLE).unwrap();
    assert_eq!(
        f.config(None).unwrap_err().to_string(),
        "mig-configs: the file has several configurations (balanced, inference-mix); name one"
    );
    assert_eq!(
        f.config(Some("nope")).unwrap_err().to_string(),
        "mig-configs: no configuration named `nope`; the file has: balanced, inference-mix"
    );
    let single = MigConfigFile::parse(&one("devices: all\n      mig-enabled: false")).unwrap();
    assert_eq!(single.config(None).unwrap().name, "a");
}
