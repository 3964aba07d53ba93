//! The layers of ARCHITECTURE.md, checked from `cargo metadata`: every arrow
//! between the workspace's crates points the allowed way, the core stays free
//! of I/O crates, only the D-Bus layers (and the tests, a client) know zbus, and no crate
//! links a plugin but the one the tests link for a benchmark.
//!
//! The allowed arrows are ARCHITECTURE.md's table of layers, read from it:
//! each crate may use the crates its row stands on and everything those may
//! use. The binaries' crates are libraries with a `main.rs` that declares no
//! module. A new crate fails here until it has a row in that table. The
//! crates that are workspaces of their own (the `python` plugin's, the
//! Python package's) are held to the same table.

use std::collections::{BTreeMap, BTreeSet};
use std::process::Command;

use serde_json::Value;

/// ARCHITECTURE.md, whose table of layers the workspace is held to.
const ARCHITECTURE: &str = include_str!("../../ARCHITECTURE.md");

/// The header row that starts the table of layers.
const HEADER: &str = "| crate | stands on | what it is |";

/// What the test crate's row stands on: every crate of an earlier row.
const EVERYTHING: &str = "everything";

/// The prefix the table leaves out of every crate's name.
const PREFIX: &str = "gpu-agent-";

/// Each crate and the workspace crates it may depend on (normal, build and
/// dev dependencies alike).
type Allowed = BTreeMap<String, BTreeSet<String>>;

/// The table of layers in `doc`: each crate (full name) and every crate it
/// may use, what its row stands on and all those may use. A row may stand
/// only on crates of earlier rows (the table starts at the bottom layer), so
/// the layers have no cycle.
fn layers(doc: &str) -> Result<Allowed, String> {
    let mut rows = doc
        .lines()
        .skip_while(|l| l.trim() != HEADER)
        .skip(2)
        .take_while(|l| l.starts_with('|'))
        .peekable();
    if rows.peek().is_none() {
        return Err(format!("no table of layers (a table headed {HEADER})"));
    }
    let name = |cell: &str| format!("{PREFIX}{}", cell.trim().trim_matches('`'));
    let mut allowed = Allowed::new();
    for row in rows {
        let cells: Vec<&str> = row.trim().trim_matches('|').split('|').collect();
        let [krate, stands_on, _] = cells[..] else {
            return Err(format!("{row}: not three cells"));
        };
        let krate = name(krate);
        let mut may = BTreeSet::new();
        if stands_on.trim() == EVERYTHING {
            may.extend(allowed.keys().cloned());
        } else {
            for below in stands_on.split(',').filter(|c| !c.trim().is_empty()) {
                let below = name(below);
                let Some(under) = allowed.get(&below) else {
                    return Err(format!(
                        "{krate} stands on {below}, which no earlier row names"
                    ));
                };
                may.extend(under.iter().cloned());
                may.insert(below);
            }
        }
        allowed.insert(krate, may);
    }
    Ok(allowed)
}

/// The crates of the binaries: each is a library, and its binaries' `main.rs`
/// declare no module of their own, so that every part is in the library,
/// with its tests.
const THIN_BINARIES: &[&str] = &["gpu-agent-daemon", "gpu-agent-cli"];

/// The only crates from outside the core may use: a deterministic state
/// machine needs no file, clock, process, logging or bus crate.
const CORE_EXTERNAL: &[&str] = &["serde"];

/// The crates held to [`CORE_EXTERNAL`]: the core and the catalogue it
/// re-exports.
const SANS_IO: &[&str] = &["gpu-agent-core", "gpu-agent-catalogue"];

/// The crates that may know D-Bus (ARCHITECTURE.md, invariant 1): the
/// daemon, gpuctl, the layer between them, and the end-to-end tests, which
/// call the daemon as any client does.
const DBUS_AWARE: &[&str] = &[
    "gpu-agent-dbus",
    "gpu-agent-daemon",
    "gpu-agent-cli",
    "gpu-agent-tests",
];

/// The prefix of the policy plugins' crates: `cdylib`s the agent loads at
/// run time, which no other crate links (their root-module symbols would
/// clash; a rule two users share lives in `plugins/lib`).
const PLUGIN: &str = "gpu-agent-policy-";

/// The one plugin a crate links, and which: the tests link edf-hier's rlib
/// for the benchmark of its group MILP (`tests/benches/edf_hier.rs`); a
/// second plugin beside it would clash with it.
const LINKED_PLUGIN: (&str, &str) = ("gpu-agent-tests", "gpu-agent-policy-edf-hier");

/// A workspace crate's direct dependencies: (name, whether it is a
/// workspace crate).
type Graph = BTreeMap<String, Vec<(String, bool)>>;

/// The workspaces the table holds, by manifest (relative to tests/): the
/// main one, and the `python` plugin's and the Python package's, kept
/// apart so that the main one builds without Python.
const WORKSPACES: &[&str] = &[
    "../Cargo.toml",
    "../plugins/python/Cargo.toml",
    "../python/Cargo.toml",
];

/// `cargo metadata` of the workspace of `manifest`, without its dependencies.
fn metadata(manifest: &str) -> Value {
    let out = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()))
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .args(["metadata", "--format-version", "1", "--no-deps"])
        .args(["--manifest-path", manifest])
        .output()
        .expect("run cargo metadata");
    assert!(
        out.status.success(),
        "cargo metadata failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("cargo metadata prints JSON")
}

/// The workspaces' crates and their direct dependencies, from `cargo metadata`.
fn workspace_graph() -> Graph {
    let metas: Vec<Value> = WORKSPACES.iter().map(|m| metadata(m)).collect();
    let packages: Vec<&Value> = metas
        .iter()
        .flat_map(|meta| meta["packages"].as_array().expect("packages"))
        .collect();
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

/// Every arrow of `graph` that breaks the rules of `allowed`, as `from -> to: why`.
fn violations(graph: &Graph, allowed: &Allowed) -> Vec<String> {
    let mut found = Vec::new();
    for (krate, deps) in graph {
        let Some(may) = allowed.get(krate) else {
            found.push(format!(
                "{krate}: not placed in a layer (give it a row in ARCHITECTURE.md's table of layers)"
            ));
            continue;
        };
        for (dep, internal) in deps {
            if *internal && !may.contains(dep) {
                found.push(format!("{krate} -> {dep}: an arrow against the layers"));
            }
            if *internal
                && dep.starts_with(PLUGIN)
                && (krate.as_str(), dep.as_str()) != LINKED_PLUGIN
            {
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
    let allowed = layers(ARCHITECTURE).expect("ARCHITECTURE.md's table of layers");
    for krate in allowed.keys() {
        assert!(graph.contains_key(krate), "{krate} is not in the workspace");
    }
    assert_eq!(violations(&graph, &allowed), Vec::<String>::new());
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
    add("gpu-agent-python", "gpu-agent-daemon");
    add("gpu-agent-daemon", "gpu-agent-tests");
    add("gpu-agent-tests", "gpu-agent-policy-sos");
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
    let allowed = layers(ARCHITECTURE).expect("ARCHITECTURE.md's table of layers");
    assert_eq!(
        violations(&graph, &allowed),
        vec![
            "gpu-agent-catalogue -> libc: the sans-IO crates use no crate but [\"serde\"]",
            "gpu-agent-cli -> gpu-agent-daemon: an arrow against the layers",
            "gpu-agent-core -> gpu-agent-loader: an arrow against the layers",
            "gpu-agent-core -> gpu-agent-policy-fifo: an arrow against the layers",
            "gpu-agent-core -> gpu-agent-policy-fifo: a plugin is loaded, never linked",
            "gpu-agent-core -> log: the sans-IO crates use no crate but [\"serde\"]",
            "gpu-agent-daemon -> gpu-agent-sim: an arrow against the layers",
            "gpu-agent-daemon -> gpu-agent-tests: an arrow against the layers",
            "gpu-agent-loader -> gpu-agent-core: an arrow against the layers",
            "gpu-agent-migconfig -> gpu-agent-core: an arrow against the layers",
            "gpu-agent-new: not placed in a layer (give it a row in ARCHITECTURE.md's table of layers)",
            "gpu-agent-python -> gpu-agent-daemon: an arrow against the layers",
            "gpu-agent-sim -> gpu-agent-backend: an arrow against the layers",
            "gpu-agent-sim -> zbus: only [\"gpu-agent-dbus\", \"gpu-agent-daemon\", \"gpu-agent-cli\", \"gpu-agent-tests\"] know D-Bus",
            "gpu-agent-tests -> gpu-agent-policy-sos: a plugin is loaded, never linked",
        ]
    );
}

/// The layers are ARCHITECTURE.md's table: a row taken out of it leaves its
/// crate unplaced, a row that stands on a later one (a cycle, or a picture
/// out of order) is refused, and so is a document without the table.
#[test]
fn the_layers_are_architecture_mds_table() {
    let graph = workspace_graph();
    let without_daemon: String = ARCHITECTURE
        .lines()
        .filter(|l| !l.starts_with("| `daemon` |"))
        .map(|l| format!("{l}\n"))
        .collect();
    let allowed = layers(&without_daemon).expect("the table less a row");
    assert_eq!(
        violations(&graph, &allowed),
        [
            "gpu-agent-daemon: not placed in a layer (give it a row in ARCHITECTURE.md's table of layers)",
            // The tests stand on everything placed, which is no longer the daemon.
            "gpu-agent-tests -> gpu-agent-daemon: an arrow against the layers",
        ]
    );
    let core_on_sim = ARCHITECTURE.replace(
        "| `core` | `catalogue`, `fifo-rule` |",
        "| `core` | `catalogue`, `fifo-rule`, `sim` |",
    );
    assert_ne!(
        core_on_sim, ARCHITECTURE,
        "the core's row as the test knows it"
    );
    assert_eq!(
        layers(&core_on_sim),
        Err("gpu-agent-core stands on gpu-agent-sim, which no earlier row names".into())
    );
    assert_eq!(
        layers("# Architecture\n"),
        Err(format!("no table of layers (a table headed {HEADER})"))
    );
}

/// Each locked package of `lock` (a Cargo.lock's text): name and version.
fn locked(lock: &str) -> BTreeSet<(String, String)> {
    let lock: toml::Table = lock.parse().expect("a Cargo.lock is TOML");
    lock["package"]
        .as_array()
        .expect("[[package]]")
        .iter()
        .map(|p| {
            let field = |k: &str| p[k].as_str().expect("name and version").to_string();
            (field("name"), field("version"))
        })
        .collect()
}

/// The packages of `sub` locked at a version `main` does not lock while it
/// locks the package: a second version of a dependency the project uses.
fn versions_apart(main: &str, sub: &str) -> Vec<String> {
    let main = locked(main);
    locked(sub)
        .into_iter()
        .filter(|(name, version)| {
            main.iter().any(|(n, _)| n == name) && !main.contains(&(name.clone(), version.clone()))
        })
        .map(|(name, version)| {
            let ours: Vec<&str> = main
                .iter()
                .filter(|(n, _)| *n == name)
                .map(|(_, v)| v.as_str())
                .collect();
            format!("{name} {version} (the workspace locks {})", ours.join(", "))
        })
        .collect()
}

/// The workspaces of their own (the `python` plugin's, the Python
/// package's) lock every dependency they share with the main workspace at
/// the main workspace's version, and their locks are up to date (a crate
/// of the main workspace they build on that gains a dependency needs
/// `cargo update --manifest-path M --workspace`).
#[test]
fn the_workspaces_of_their_own_lock_the_main_versions() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let read = |rel: &str| std::fs::read_to_string(root.join(rel)).expect("read a Cargo.lock");
    let main = read("Cargo.lock");
    for manifest in &WORKSPACES[1..] {
        let lock = manifest
            .trim_start_matches("../")
            .replace("Cargo.toml", "Cargo.lock");
        assert_eq!(
            versions_apart(&main, &read(&lock)),
            Vec::<String>::new(),
            "{lock}"
        );
        let out = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()))
            .current_dir(env!("CARGO_MANIFEST_DIR"))
            .args(["metadata", "--format-version", "1", "--locked"])
            .args(["--manifest-path", manifest])
            .output()
            .expect("run cargo metadata");
        assert!(
            out.status.success(),
            "{lock} is out of date: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let apart = "[[package]]\nname = \"serde\"\nversion = \"0.9.0\"\n\n\
                 [[package]]\nname = \"only-here\"\nversion = \"1.0.0\"\n";
    let main = "[[package]]\nname = \"serde\"\nversion = \"1.0.0\"\n";
    assert_eq!(
        versions_apart(main, apart),
        ["serde 0.9.0 (the workspace locks 1.0.0)"]
    );
}

#[test]
fn the_binaries_are_thin_over_their_libraries() {
    let meta = metadata(WORKSPACES[0]);
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
