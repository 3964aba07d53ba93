//! The NVML backend, the code that runs on a customer's GPUs, against the
//! stand-in driver library (tests/nvml-stand-in): `gpuctl inspect` and the
//! backend's read-only conformance suite, with `LD_LIBRARY_PATH` at the
//! stand-in and its GPUs from a host file.

use std::path::Path;
use std::process::Command;

use crate::harness::{cargo_in_artefacts, gpuctl, nvml_fake, success, write};

/// One GPU of each catalogue model; the first A100 split, as an admin left it.
pub const EVERY_MODEL: &str = "\
[[gpu]]
model = \"A100-SXM4-40GB\"
speed = 1
mig = [\"3g.20gb@0\", \"2g.10gb@4\", \"1g.5gb@6\"]

[[gpu]]
model = \"A100-SXM4-80GB\"
speed = 1

[[gpu]]
model = \"H100-SXM5-80GB\"
speed = 1

[[gpu]]
model = \"H100-PCIe-80GB\"
speed = 1

[[gpu]]
model = \"H200-SXM-141GB\"
speed = 1

[[gpu]]
model = \"V100-SXM2-32GB\"
speed = 1

[[gpu]]
model = \"L4\"
speed = 1

[[gpu]]
model = \"T4\"
speed = 1

[[gpu]]
model = \"A30-PCIe-24GB\"
speed = 1
";

/// `cmd` on the stand-in: its library first on the loader's path, its GPUs
/// from `host`.
pub fn on_stand_in<'c>(cmd: &'c mut Command, host: &Path) -> &'c mut Command {
    cmd.env("LD_LIBRARY_PATH", nvml_fake())
        .env("NVML_FAKE_HOST", host)
}

/// The JSON of `gpuctl inspect --json ARGS`, without the energy counter
/// (which counts from each process's start).
fn inspect_json(args: &[&str], host: Option<&Path>) -> serde_json::Value {
    let out = match host {
        Some(host) => {
            let mut cmd = Command::new(crate::harness::artefacts().join("gpuctl"));
            on_stand_in(cmd.args(["inspect", "--json"]).args(args), host)
                .output()
                .expect("run gpuctl")
        }
        None => gpuctl(&[&["inspect", "--json"], args].concat()),
    };
    let mut gpus: serde_json::Value = serde_json::from_str(&success(&out)).unwrap();
    for gpu in gpus.as_array_mut().unwrap() {
        gpu.as_object_mut().unwrap().remove("energy_mj");
    }
    gpus
}

#[test]
fn inspect_through_nvml_reads_what_the_mock_reads() {
    let dir = tempfile::tempdir().unwrap();
    let host = write(dir.path(), "host.toml", EVERY_MODEL);
    let nvml = inspect_json(&[], Some(Path::new(&host)));
    let mock = inspect_json(&["--mock", &host], None);
    let names: Vec<&str> = nvml
        .as_array()
        .unwrap()
        .iter()
        .map(|g| g["info"]["name"].as_str().unwrap())
        .collect();
    assert_eq!(names.len(), 9, "{names:?}");
    assert_eq!(names[0], "NVIDIA A100-SXM4-40GB");
    for (gpu, (n, m)) in nvml
        .as_array()
        .unwrap()
        .iter()
        .zip(mock.as_array().unwrap())
        .enumerate()
    {
        assert_eq!(n, m, "GPU {gpu}: NVML (left) and mock (right) differ");
    }
    assert_eq!(nvml[0]["mig_devices"].as_array().unwrap().len(), 3);
}

#[test]
fn the_backends_read_only_conformance_suite_passes_on_the_stand_in() {
    let dir = tempfile::tempdir().unwrap();
    let host = write(dir.path(), "host.toml", EVERY_MODEL);
    // The suite a real GPU runs, unchanged: the backend's ignored test.
    let mut cmd = cargo_in_artefacts(&[
        "test",
        "--quiet",
        "-p",
        "gpu-agent-backend",
        "--lib",
        "--",
        "--ignored",
        "--exact",
        "conformance::read_only::nvml_read_only",
        "--nocapture",
    ]);
    let out = on_stand_in(&mut cmd, Path::new(&host))
        .output()
        .expect("run cargo test");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains("1 passed"), "{stdout}");
    assert!(
        stdout.contains("GPU 0: 3 GPU instance(s), 3 MIG device(s)"),
        "{stdout}"
    );
    assert!(stdout.contains("GPU 8: NVIDIA A30 (Ampere)"), "{stdout}");
}
