//! `gpuctl inspect`: reading GPUs through the backend, mock or NVML.

use std::path::Path;

use crate::harness::{failure, gpuctl, success};

fn example_host() -> String {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap();
    root.join("examples/host.toml")
        .to_str()
        .unwrap()
        .to_string()
}

#[test]
fn inspect_reads_a_mock_host_as_json() {
    let out = gpuctl(&["inspect", "--mock", &example_host(), "--json"]);
    let gpus: serde_json::Value = serde_json::from_str(&success(&out)).unwrap();
    let gpus = gpus.as_array().unwrap();
    let names: Vec<&str> = gpus
        .iter()
        .map(|g| g["info"]["name"].as_str().unwrap())
        .collect();
    assert_eq!(
        names,
        [
            "NVIDIA A100-SXM4-40GB",
            "NVIDIA A100-SXM4-40GB",
            "Tesla V100-SXM2-32GB",
            "Tesla T4"
        ]
    );
    let a100 = &gpus[0];
    assert_eq!(a100["memory"]["total_bytes"], 40u64 << 30);
    assert_eq!(a100["core_clock"]["default"], 1095);
    assert_eq!(a100["power_limits"]["max_mw"], 400_000);
    assert_eq!(a100["power_mw"], 55_000);
    assert_eq!(a100["mig_mode"]["current"], false);
    let profiles = a100["gpu_instance_profiles"].as_array().unwrap();
    let ids: Vec<u64> = profiles.iter().map(|p| p["id"].as_u64().unwrap()).collect();
    assert_eq!(ids, [19, 20, 15, 14, 9, 5, 0]);
    assert_eq!(
        profiles[4]["placements"],
        serde_json::json!([{"start": 0, "size": 4}, {"start": 4, "size": 4}])
    );
    // Not MIG-capable: no MIG mode, no profiles.
    assert_eq!(gpus[3]["mig_mode"], serde_json::Value::Null);
    assert_eq!(gpus[3]["gpu_instance_profiles"], serde_json::json!([]));
}

#[test]
fn inspect_prints_one_block_per_gpu() {
    let out = gpuctl(&["inspect", "--mock", &example_host(), "--gpu", "3"]);
    let text = success(&out);
    assert!(text.starts_with("GPU 3  Tesla T4  (Turing)\n"), "{text}");
    assert!(
        text.contains("  power         10.0 W now; limit 70.0 W (settable 60.0 W to 70.0 W, default 70.0 W)\n"),
        "{text}"
    );
    assert!(
        text.contains("  clock table   2 memory clock(s), 95 (memory, core) pairs\n"),
        "{text}"
    );
    assert!(text.contains("  MIG           not supported\n"), "{text}");
    assert!(!text.contains("GPU 0"));
}

#[test]
fn inspect_names_a_gpu_that_is_not_there() {
    let out = gpuctl(&["inspect", "--mock", &example_host(), "--gpu", "4"]);
    assert_eq!(
        failure(&out),
        "gpuctl: error: --gpu 4: the host has 4 GPU(s), 0..4\n"
    );
}

#[test]
fn inspect_without_nvml_says_what_to_do() {
    let out = gpuctl(&["inspect"]);
    if out.status.success() {
        // A machine with an NVIDIA driver: it read real GPUs.
        assert!(String::from_utf8_lossy(&out.stdout).starts_with("GPU 0  "));
    } else {
        assert_eq!(
            failure(&out),
            "gpuctl: error: NVML library not found: install the NVIDIA driver, \
             or run with --mock HOST.toml\n"
        );
    }
}
