//! The layers of ARCHITECTURE.md, checked from `cargo metadata`: every arrow
//! between the workspace's crates points the allowed way, the core stays free
//! of I/O crates, and only the D-Bus layers know zbus.
//!
//! ```text
//! plugin-api <- catalogue <- core <- {backend, dbus, sim} <- {daemon, cli}
//! ```
//!
//! The binaries' crates are libraries with a `main.rs` that declares no
//! module. `manual` (clap pages) stands apart and serves both binaries; the
//! loader needs plugin-api alone, migconfig the catalogue; the policy
//! plugins see plugin-api and the plain libraries only (the policy
//! libraries, the catalogue and the MIG planner over it). A new crate
//! fails here until it is given a place below.

use std::collections::{BTreeMap, BTreeSet};
use std::process::Command;

use serde_json::Value;

/// Each workspace crate and the workspace crates it may depend on (normal,
/// build and dev dependencies alike).
const ALLOWED: &[(&str, &[&str])] = &[
    ("gpu-agent-plugin-api", &[]),
    // GPU models, MIG tables and the placement tree: plain data and pure
    // functions the core re-exports, so that plain libraries (the MIG
    // planner, and through it the mig-plan policy) need no core.
    ("gpu-agent-catalogue", &["gpu-agent-plugin-api"]),
    // The DVFS model and Algorithm 1: numbers over the plugin API's task and
    // power models only, so the policies, the simulator and gpuctl share one
    // rule.
    ("gpu-agent-dvfs", &["gpu-agent-plugin-api"]),
    ("gpu-agent-eft-rule", &["gpu-agent-plugin-api"]),
    // FIFO order: the fifo policy's rule and the core's built-in fallback.
    ("gpu-agent-fifo-rule", &["gpu-agent-plugin-api"]),
    (
        "gpu-agent-sa-search",
        &["gpu-agent-plugin-api", "gpu-agent-eft-rule"],
    ),
    (
        "gpu-agent-policy-fifo",
        &["gpu-agent-plugin-api", "gpu-agent-fifo-rule"],
    ),
    (
        "gpu-agent-policy-greedy-eft",
        &["gpu-agent-plugin-api", "gpu-agent-eft-rule"],
    ),
    (
        "gpu-agent-policy-sa-greedy",
        &["gpu-agent-plugin-api", "gpu-agent-sa-search"],
    ),
    ("gpu-agent-policy-sos", &["gpu-agent-plugin-api"]),
    // Plans MIG layouts with the planner; places like greedy-eft.
    (
        "gpu-agent-policy-mig-plan",
        &[
            "gpu-agent-plugin-api",
            "gpu-agent-eft-rule",
            "gpu-agent-catalogue",
            "gpu-agent-migplan",
        ],
    ),
    ("gpu-agent-policy-edf-hier", &["gpu-agent-plugin-api"]),
    // DVFS policies: Algorithm 1 from the shared DVFS library.
    (
        "gpu-agent-policy-edl",
        &["gpu-agent-plugin-api", "gpu-agent-dvfs"],
    ),
    (
        "gpu-agent-core",
        &[
            "gpu-agent-plugin-api",
            "gpu-agent-catalogue",
            "gpu-agent-fifo-rule",
        ],
    ),
    ("gpu-agent-backend", MIDDLE),
    ("gpu-agent-dbus", MIDDLE),
    // The host and profile readers, which the daemon uses without the
    // simulator.
    ("gpu-agent-hostspec", MIDDLE),
    (
        "gpu-agent-sim",
        &[
            "gpu-agent-dvfs",
            "gpu-agent-plugin-api",
            "gpu-agent-catalogue",
            "gpu-agent-fifo-rule",
            "gpu-agent-core",
            "gpu-agent-input",
            "gpu-agent-hostspec",
        ],
    ),
    // Plugin files and the policy objects made of them: the ABI only.
    ("gpu-agent-loader", &["gpu-agent-plugin-api"]),
    // mig-parted files: the catalogue's MIG tables and placement, plus YAML;
    // used by the daemon, gpuctl and plugin-free planners alike.
    (
        "gpu-agent-migconfig",
        &["gpu-agent-plugin-api", "gpu-agent-catalogue"],
    ),
    // The MIG planner: a plain library over the catalogue's MIG tables and
    // placement tree, used by gpuctl (`mig plan`) and the mig-plan policy,
    // so below the core.
    (
        "gpu-agent-migplan",
        &[
            "gpu-agent-plugin-api",
            "gpu-agent-catalogue",
            "gpu-agent-input",
        ],
    ),
    ("gpu-agent-manual", &[]),
    // Input errors, TOML and files written whole: below every reader.
    ("gpu-agent-input", &[]),
    // The daemon: every layer below it but the simulator.
    (
        "gpu-agent-daemon",
        &[
            "gpu-agent-dvfs",
            "gpu-agent-plugin-api",
            "gpu-agent-catalogue",
            "gpu-agent-fifo-rule",
            "gpu-agent-core",
            "gpu-agent-input",
            "gpu-agent-hostspec",
            "gpu-agent-backend",
            "gpu-agent-dbus",
            "gpu-agent-loader",
            "gpu-agent-migconfig",
            "gpu-agent-manual",
        ],
    ),
    ("gpu-agent-cli", TOP),
    // The stand-in libnvidia-ml.so.1 (tests only): the mock backend behind
    // NVML's C entry points, its host file read as --mock reads one. Nothing
    // depends on it: the e2e harness builds it and tests load it as NVML.
    ("gpu-agent-nvml-stand-in", STAND_IN),
];

/// What the stand-in NVML library may use: the backend (its mock), the
/// host-file reader, and what they use.
const STAND_IN: &[&str] = &[
    "gpu-agent-dvfs",
    "gpu-agent-plugin-api",
    "gpu-agent-catalogue",
    "gpu-agent-migplan",
    "gpu-agent-policy-fifo",
    "gpu-agent-core",
    "gpu-agent-backend",
    "gpu-agent-sim",
];

/// What the middle layer may use: the core and what the core uses.
const MIDDLE: &[&str] = &[
    "gpu-agent-dvfs",
    "gpu-agent-plugin-api",
    "gpu-agent-catalogue",
    "gpu-agent-migplan",
    "gpu-agent-fifo-rule",
    "gpu-agent-core",
    "gpu-agent-input",
];

/// What gpuctl's crate may use: every layer below them.
const TOP: &[&str] = &[
    "gpu-agent-dvfs",
    "gpu-agent-plugin-api",
    "gpu-agent-catalogue",
    "gpu-agent-fifo-rule",
    "gpu-agent-core",
    "gpu-agent-input",
    "gpu-agent-hostspec",
    "gpu-agent-backend",
    "gpu-agent-dbus",
    "gpu-agent-sim",
    "gpu-agent-loader",
    "gpu-agent-migconfig",
    "gpu-agent-manual",
    "gpu-agent-migplan",
];

/// The crates of the binaries: each is a library, and its binaries' `main.rs`
/// declare no module of their own, so that every part is in the library,
/// with its tests.
const THIN_BINARIES: &[&str] = &["gpu-agent-daemon", "gpu-agent-cli"];

/// The test crate, which may use everything.
const TESTS: &str = "gpu-agent-tests";

/// The only crates from outside the core may use: a deterministic state
/// machine needs no file, clock, process, logging or bus crate.
const CORE_EXTERNAL: &[&str] = &["serde"];

/// The crates held to [`CORE_EXTERNAL`]: the core and the catalogue it
/// re-exports.
const SANS_IO: &[&str] = &["gpu-agent-core", "gpu-agent-catalogue"];

/// The crates that may know D-Bus (design.md, invariant 5).
const DBUS_AWARE: &[&str] = &["gpu-agent-dbus", "gpu-agent-daemon", "gpu-agent-cli"];

/// The prefix of the policy plugins' crates: `cdylib`s the agent loads at
/// run time, which no other crate links (their root-module symbols would
/// clash; a rule two users share lives in `plugins/lib`).
const PLUGIN: &str = "gpu-agent-policy-";

/// A workspace crate's direct dependencies: (name, whether it is a
/// workspace crate).
type Graph = BTreeMap<String, Vec<(String, bool)>>;

/// `cargo metadata` of the workspace, without its dependencies.
fn metadata() -> Value {
    let out = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()))
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .args(["metadata", "--format-version", "1", "--no-deps"])
        .output()
        .expect("run cargo metadata");
    assert!(
        out.status.success(),
        "cargo metadata failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("cargo metadata prints JSON")
}

/// The workspace's crates and their direct dependencies, from `cargo metadata`.
fn workspace_graph() -> Graph {
    let meta = metadata();
    let packages = meta["packages"].as_array().expect("packages");
    let members: BTreeSet<&str> = packages
        .iter()
        .map(|p| p["name"].as_str().expect("package name"))
        .collect();
    packages
        .iter()
        .map(|p| {
            let deps = p["dependencies"]
                .as_array()
                .expect("dependencies")
                .iter()
                .map(|d| {
                    let name = d["name"].as_str().expect("dependency name");
                    (name.to_string(), members.contains(name))
                })
                .collect();
            (p["name"].as_str().expect("package name").to_string(), deps)
        })
        .collect()
}

/// Every arrow of `graph` that breaks the rules, as `from -> to: why`.
fn violations(graph: &Graph) -> Vec<String> {
    let allowed: BTreeMap<&str, &[&str]> = ALLOWED.iter().copied().collect();
    let mut found = Vec::new();
    for (krate, deps) in graph {
        if krate == TESTS {
            continue;
        }
        let Some(may) = allowed.get(krate.as_str()) else {
            found.push(format!(
                "{krate}: not placed in a layer (add it to ALLOWED in tests/e2e/layers.rs)"
            ));
            continue;
        };
        for (dep, internal) in deps {
            if *internal && !may.contains(&dep.as_str()) {
                found.push(format!("{krate} -> {dep}: an arrow against the layers"));
            }
            if *internal && dep.starts_with(PLUGIN) {
                found.push(format!(
                    "{krate} -> {dep}: a plugin is loaded, never linked"
                ));
            }
            if SANS_IO.contains(&krate.as_str())
                && !internal
                && !CORE_EXTERNAL.contains(&dep.as_str())
            {
                found.push(format!(
                    "{krate} -> {dep}: the sans-IO crates use no crate but {CORE_EXTERNAL:?}"
                ));
            }
            if dep == "zbus" && !DBUS_AWARE.contains(&krate.as_str()) {
                found.push(format!("{krate} -> {dep}: only {DBUS_AWARE:?} know D-Bus"));
            }
        }
    }
    found
}

#[test]
fn the_workspace_keeps_its_layers() {
    let graph = workspace_graph();
    for (krate, _) in ALLOWED {
        assert!(
            graph.contains_key(*krate),
            "{krate} is not in the workspace"
        );
    }
    assert_eq!(violations(&graph), Vec::<String>::new());
}

#[test]
fn a_wrong_arrow_is_caught() {
    let mut graph = workspace_graph();
    let mut add = |from: &str, to: &str| {
        graph
            .get_mut(from)
            .expect("a workspace crate")
            .push((to.to_string(), true))
    };
    add("gpu-agent-core", "gpu-agent-loader");
    add("gpu-agent-cli", "gpu-agent-daemon");
    add("gpu-agent-sim", "gpu-agent-backend");
    add("gpu-agent-core", "gpu-agent-policy-fifo");
    add("gpu-agent-loader", "gpu-agent-core");
    add("gpu-agent-migconfig", "gpu-agent-core");
    add("gpu-agent-daemon", "gpu-agent-sim");
    graph
        .get_mut("gpu-agent-sim")
        .expect("sim")
        .push(("zbus".to_string(), false));
    graph
        .get_mut("gpu-agent-core")
        .expect("core")
        .push(("log".to_string(), false));
    graph
        .get_mut("gpu-agent-catalogue")
        .expect("catalogue")
        .push(("libc".to_string(), false));
    graph.insert("gpu-agent-new".into(), Vec::new());
    assert_eq!(
        violations(&graph),
        vec![
            "gpu-agent-catalogue -> libc: the sans-IO crates use no crate but [\"serde\"]",
            "gpu-agent-cli -> gpu-agent-daemon: an arrow against the layers",
            "gpu-agent-core -> gpu-agent-loader: an arrow against the layers",
            "gpu-agent-core -> gpu-agent-policy-fifo: an arrow against the layers",
            "gpu-agent-core -> gpu-agent-policy-fifo: a plugin is loaded, never linked",
            "gpu-agent-core -> log: the sans-IO crates use no crate but [\"serde\"]",
            "gpu-agent-daemon -> gpu-agent-sim: an arrow against the layers",
            "gpu-agent-loader -> gpu-agent-core: an arrow against the layers",
            "gpu-agent-migconfig -> gpu-agent-core: an arrow against the layers",
            "gpu-agent-new: not placed in a layer (add it to ALLOWED in tests/e2e/layers.rs)",
            "gpu-agent-sim -> gpu-agent-backend: an arrow against the layers",
            "gpu-agent-sim -> zbus: only [\"gpu-agent-dbus\", \"gpu-agent-daemon\", \"gpu-agent-cli\"] know D-Bus",
        ]
    );
}

#[test]
fn the_binaries_are_thin_over_their_libraries() {
    let meta = metadata();
    let packages = meta["packages"].as_array().expect("packages");
    for krate in THIN_BINARIES {
        let package = packages
            .iter()
            .find(|p| p["name"] == *krate)
            .unwrap_or_else(|| panic!("{krate} is not in the workspace"));
        let targets = package["targets"].as_array().expect("targets");
        let kinds = |t: &Value| t["kind"].as_array().expect("kind").clone();
        assert!(
            targets.iter().any(|t| kinds(t).contains(&"lib".into())),
            "{krate} has no library"
        );
        for bin in targets.iter().filter(|t| kinds(t).contains(&"bin".into())) {
            let path = bin["src_path"].as_str().expect("src_path");
            let text = std::fs::read_to_string(path).expect("read the binary's source");
            let modules: Vec<&str> = text
                .lines()
                .filter(|l| l.starts_with("mod ") || l.starts_with("pub mod "))
                .collect();
            assert!(
                modules.is_empty(),
                "{path} declares {modules:?}: move them into {krate}'s library"
            );
        }
    }
}
