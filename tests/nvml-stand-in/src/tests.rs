use std::collections::BTreeSet;
use std::path::Path;

use gpu_agent_backend::{GpuInstanceProfile, Placement};

use super::*;

/// NVML functions `nvml-wrapper` calls on its own: `Nvml`'s drop
/// (`nvmlShutdown`, which panics where the symbol is missing), `EventSet`'s
/// drop, and `Nvml::init`'s driver-version query.
const WRAPPER_CALLS: &[&str] = &[
    "nvmlShutdown",
    "nvmlEventSetFree",
    "nvmlSystemGetDriverVersion",
];

/// Every NVML function the NVML backend names: its error contexts name each
/// call it makes through the wrapper ("nvmlX"), and its raw calls read the
/// library's symbol fields (`lib().nvmlX`).
fn backend_calls() -> BTreeSet<String> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../agent/backend/src/nvml");
    let mut names = BTreeSet::new();
    for entry in std::fs::read_dir(&dir).expect("the NVML backend's sources") {
        let text = std::fs::read_to_string(entry.unwrap().path()).unwrap();
        for (at, _) in text.match_indices("nvml") {
            let before = text[..at].chars().next_back();
            let name: String = text[at..]
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                .collect();
            let after = text[at + name.len()..].chars().next();
            let literal = before == Some('"') && after == Some('"');
            let field = before == Some('.');
            if (literal || field) && name.len() > "nvml".len() && name != "nvml_wrapper" {
                names.insert(name);
            }
        }
    }
    names
}

#[test]
fn every_nvml_function_the_backend_and_wrapper_call_is_exported() {
    let calls = backend_calls();
    // The scan finds the calls (a guard against a scan that finds nothing).
    assert!(calls.contains("nvmlDeviceSetGpuLockedClocks"), "{calls:?}");
    assert!(
        calls.contains("nvmlGpuInstanceGetComputeInstances"),
        "{calls:?}"
    );
    let missing: Vec<&str> = calls
        .iter()
        .map(String::as_str)
        .chain(WRAPPER_CALLS.iter().copied())
        .filter(|name| !ENTRY_POINTS.contains(name))
        .collect();
    assert_eq!(missing, Vec::<&str>::new(), "not exported by the stand-in");
    let unused: Vec<&str> = ENTRY_POINTS
        .iter()
        .copied()
        .filter(|name| !calls.contains(*name) && !WRAPPER_CALLS.contains(name))
        .collect();
    assert_eq!(unused, Vec::<&str>::new(), "exported, but nothing calls it");
    for write in WRITES {
        assert!(
            ENTRY_POINTS.contains(write),
            "{write} is not an entry point"
        );
    }
}

fn profile(id: u32, name: &str, slices: u32, mib: u64) -> GpuInstanceProfile {
    GpuInstanceProfile {
        id,
        name: Some(name.into()),
        slice_count: slices,
        memory_bytes: mib << 20,
        max_count: 1,
        placements: vec![Placement { start: 0, size: 1 }],
    }
}

#[test]
fn profile_indices_are_nvml_h_s() {
    // The A100-40GB's profiles, with the indices `nvidia-smi mig -lgip` reads
    // them at (NVML_GPU_INSTANCE_PROFILE_*).
    let a100 = [
        profile(19, "1g.5gb", 1, 4864),
        profile(20, "1g.5gb+me", 1, 4864),
        profile(15, "1g.10gb", 1, 9856),
        profile(14, "2g.10gb", 2, 9856),
        profile(9, "3g.20gb", 3, 19968),
        profile(5, "4g.20gb", 4, 19968),
        profile(0, "7g.40gb", 7, 40192),
    ];
    let indices: Vec<Option<u32>> = a100.iter().map(|p| profile_index(p, &a100)).collect();
    assert_eq!(
        indices,
        [0, 7, 9, 1, 2, 3, 4].map(Some).to_vec(),
        "1_SLICE, 1_SLICE_REV1, 1_SLICE_REV2, 2_SLICE, 3_SLICE, 4_SLICE, 7_SLICE"
    );
    // The A30's: 2g+me is 2_SLICE_REV1.
    let a30 = [
        profile(14, "1g.6gb", 1, 5952),
        profile(21, "1g.6gb+me", 1, 5952),
        profile(5, "2g.12gb", 2, 11968),
        profile(6, "2g.12gb+me", 2, 11968),
        profile(0, "4g.24gb", 4, 24000),
    ];
    let indices: Vec<Option<u32>> = a30.iter().map(|p| profile_index(p, &a30)).collect();
    assert_eq!(indices, [0, 7, 1, 8, 3].map(Some).to_vec());
}

#[test]
fn lists_follow_nvml_s_size_protocol() {
    let values = [3u32, 2, 1];
    let mut count = 2;
    let mut items = [0u32; 3];
    // SAFETY: `items` holds `count` elements and more.
    let short = unsafe { fill(items.as_mut_ptr(), &mut count, &values, false) };
    assert_eq!(
        (short, count),
        (Err(nvmlReturn_enum_NVML_ERROR_INSUFFICIENT_SIZE), 3)
    );
    // SAFETY: as above.
    let fits = unsafe { fill(items.as_mut_ptr(), &mut count, &values, false) };
    assert_eq!((fits, count, items), (Ok(()), 3, values));
    let mut count = 0;
    // SAFETY: a null array is only counted.
    let counted = unsafe { fill(std::ptr::null_mut(), &mut count, &values, true) };
    assert_eq!((counted, count), (Ok(()), 3));
    let mut buf = [0 as c_char; 4];
    // SAFETY: `buf` holds 4 bytes.
    unsafe {
        assert_eq!(
            text(buf.as_mut_ptr(), 4, "GPU-0"),
            Err(nvmlReturn_enum_NVML_ERROR_INSUFFICIENT_SIZE)
        );
        assert_eq!(text(buf.as_mut_ptr(), 4, "abc"), Ok(()));
    }
    assert_eq!(buf.map(|c| c as u8), *b"abc\0");
}
