//! The daemon's modules import one another without a circle (issue 31):
//! each top-level module of `agent/daemon/src` (the engine counted as one,
//! `engine/`) is read for the modules it names (`crate::NAME`, and
//! `super::NAME` outside the engine), and the graph must have no cycle, so
//! that a leaf such as `telemetry.rs` or `states.rs` stays one. Test modules
//! (`tests.rs`, `#[cfg(test)]` blocks) are left out: tests may use anything.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

/// The modules `source` names, by `prefix` (`crate::` or `super::`).
fn named(source: &str, prefix: &str, into: &mut BTreeSet<String>) {
    for (at, _) in source.match_indices(prefix) {
        let name: String = source[at + prefix.len()..]
            .chars()
            .take_while(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == '_')
            .collect();
        if !name.is_empty() {
            into.insert(name);
        }
    }
}

/// Each top-level module and the modules it imports.
fn imports(src: &Path) -> BTreeMap<String, BTreeSet<String>> {
    let mut graph: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    let mut files = Vec::new();
    for dir in [src.to_path_buf(), src.join("engine")] {
        for entry in std::fs::read_dir(&dir).expect("read the daemon's sources") {
            let path = entry.expect("a directory entry").path();
            if path.extension().is_some_and(|e| e == "rs") {
                files.push(path);
            }
        }
    }
    for path in files {
        let stem = path.file_stem().and_then(|s| s.to_str()).expect("a name");
        let in_engine = path.parent().is_some_and(|p| p.ends_with("engine"));
        let module = if in_engine { "engine" } else { stem };
        if ["lib", "main", "tests"].contains(&module) {
            continue;
        }
        let text = std::fs::read_to_string(&path).expect("read a source file");
        let code = text.split("#[cfg(test)]").next().unwrap_or_default();
        let names = graph.entry(module.to_string()).or_default();
        named(code, "crate::", names);
        if !in_engine {
            named(code, "super::", names);
        }
    }
    let modules: BTreeSet<String> = graph.keys().cloned().collect();
    for (module, names) in graph.iter_mut() {
        names.retain(|n| n != module && modules.contains(n));
    }
    graph
}

/// A cycle through `graph`, if any, as the modules on it.
fn cycle(graph: &BTreeMap<String, BTreeSet<String>>) -> Option<Vec<String>> {
    fn visit(
        graph: &BTreeMap<String, BTreeSet<String>>,
        module: &str,
        path: &mut Vec<String>,
        done: &mut BTreeSet<String>,
    ) -> Option<Vec<String>> {
        if let Some(at) = path.iter().position(|m| m == module) {
            let mut found = path[at..].to_vec();
            found.push(module.to_string());
            return Some(found);
        }
        if done.contains(module) {
            return None;
        }
        path.push(module.to_string());
        for next in graph.get(module).into_iter().flatten() {
            if let Some(found) = visit(graph, next, path, done) {
                return Some(found);
            }
        }
        path.pop();
        done.insert(module.to_string());
        None
    }
    let mut done = BTreeSet::new();
    graph
        .keys()
        .find_map(|m| visit(graph, m, &mut Vec::new(), &mut done))
}

#[test]
fn daemon_modules_import_one_another_without_a_circle() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("../agent/daemon/src");
    let graph = imports(&src);
    assert!(graph.contains_key("engine") && graph.contains_key("service"));
    assert_eq!(cycle(&graph), None, "{graph:#?}");
    for leaf in ["telemetry", "states"] {
        assert_eq!(graph[leaf], BTreeSet::new(), "{leaf} imports nothing");
    }
    // The check sees a circle: the one the engine's Telemetry import closed.
    let mut old = graph.clone();
    old.get_mut("engine").unwrap().insert("exporter".into());
    old.get_mut("devices").unwrap().insert("service".into());
    assert!(cycle(&old).is_some(), "{old:#?}");
}
