//! MIG through the real binaries (docs/mig.md §6.2): `gpuctl mig show`, `export`
//! and `assert` against the mock host, and `GetMigLayout` through busctl.

use std::path::Path;

use crate::daemon::{gpuctl, Daemon};
use crate::harness::write;

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

fn example() -> String {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("workspace root")
        .join("examples/mig-config.yaml")
        .to_str()
        .expect("utf-8 path")
        .to_string()
}

#[test]
fn daemon_mig_show_export_and_assert() {
    let d = Daemon::start();
    let work = tempfile::tempdir().unwrap();

    let out = gpuctl(&d, &["mig", "show"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let shown = text(&out.stdout);
    let rows: Vec<Vec<&str>> = shown
        .lines()
        .map(|l| l.split_whitespace().collect())
        .collect();
    assert_eq!(rows[0], ["GPU", "MODEL", "MIG", "STATE", "INSTANCES"]);
    assert_eq!(rows[1], ["0", "A100-SXM4-40GB", "off", "stable", "-"]);
    assert_eq!(rows[3], ["2", "V100-SXM2-32GB", "n/a", "stable", "-"]);
    assert_eq!(rows.len(), 5, "{shown}");

    // export, then assert of the export: exit 0.
    let out = gpuctl(&d, &["mig", "export"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let exported = text(&out.stdout);
    assert!(
        exported.starts_with("version: v1\nmig-configs:\n  current:\n"),
        "{exported}"
    );
    let file = write(work.path(), "current.yaml", &exported);
    let out = gpuctl(&d, &["mig", "assert", "-f", &file, "-c", "current"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(
        text(&out.stdout),
        "the GPUs are as configuration current asks\n"
    );

    // A configuration the host is not in: exit 1, each difference listed,
    // after the entry (the H100's) that selects no GPU here.
    let out = gpuctl(&d, &["mig", "assert", "-f", &example(), "-c", "balanced"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(out.stdout.is_empty());
    assert_eq!(
        text(&out.stderr),
        "1 of the 2 entries of configuration balanced match no GPU of this host:\n  \
         entry 1 (line 17: device-filter 0x233010DE, devices all)\n\
         GPU 0: MIG mode is off, wanted on\nGPU 1: MIG mode is off, wanted on\n\
         GPU 2: selected by no entry\nGPU 3: selected by no entry\n\
         gpuctl: error: the GPUs differ from configuration balanced in 4 place(s)\n"
    );

    // Malformed YAML, an unknown configuration, a GPU the host lacks, MIG on
    // a GPU without it: named errors.
    let bad = write(
        work.path(),
        "bad.yaml",
        "version: v1\nmig-configs:\n  a:\n    - devices: all\n      mig-enabled: tru\n",
    );
    let out = gpuctl(&d, &["mig", "assert", "-f", &bad]);
    assert_eq!(out.status.code(), Some(1));
    let err = text(&out.stderr);
    assert!(
        err.starts_with(&format!(
            "gpuctl: error: {bad}: line 5, column 20: mig-configs.a[0].mig-enabled: "
        )),
        "{err}"
    );
    let out = gpuctl(&d, &["mig", "assert", "-f", &example(), "-c", "nope"]);
    assert!(text(&out.stderr)
        .contains("no configuration named `nope`; the file has: balanced, inference-mix"));
    let cases = [
        ("    - devices: [0, 9]\n      mig-enabled: false\n", "NoSuchDevice: line 4, column 16: mig-configs.a[0].devices: GPU 9: no such GPU on this host (GPUs 0, 1, 2, 3)"),
        ("    - devices: [2]\n      mig-enabled: true\n      mig-devices: {}\n", "NotSupported: line 5, column 20: mig-configs.a[0].mig-enabled: GPU 2 (V100-SXM2-32GB) is not MIG-capable"),
        ("    - devices: [0]\n      mig-enabled: true\n      mig-devices: {\"2g.20gb\": 1}\n", "InvalidArgument: line 6, column 32: mig-configs.a[0].mig-devices: 2g.20gb is not a profile of A100-SXM4-40GB (GPU 0)"),
    ];
    for (entry, want) in cases {
        let f = write(
            work.path(),
            "case.yaml",
            &format!("version: v1\nmig-configs:\n  a:\n{entry}"),
        );
        let out = gpuctl(&d, &["mig", "assert", "-f", &f]);
        // The daemon's error, not a difference.
        assert_eq!(out.status.code(), Some(4));
        let err = text(&out.stderr);
        assert!(
            err.contains(&format!("org.gpuagent.Agent1.Error.{want}")),
            "{err}\nwant {want}"
        );
    }
    let out = gpuctl(
        &d,
        &[
            "mig",
            "assert",
            "-f",
            &example(),
            "-c",
            "balanced",
            "--valid-config",
        ],
    );
    assert!(out.status.success());

    // busctl: GetMigLayout's dictionary, and NoSuchDevice.
    let reply = d.call("GetMigLayout", &["u", "1"]);
    let dict = &reply[0];
    assert_eq!(dict["model"]["data"], "A100-SXM4-40GB");
    assert_eq!(dict["capable"]["data"], true);
    assert_eq!(dict["state"]["data"], "stable");
    assert_eq!(dict["instances"]["type"], "aa{sv}");
    let mut args = vec!["call"];
    args.extend_from_slice(&crate::daemon::AGENT);
    args.extend_from_slice(&["GetMigLayout", "u", "9"]);
    let out = d.busctl(&args);
    assert!(!out.status.success());
    assert!(
        text(&out.stderr).contains("no GPU 9; this host has 4 GPU(s)"),
        "{}",
        text(&out.stderr)
    );
}
