//! Puts the shipped policy plugins (each `plugins/*` crate, found as
//! packaging/build.sh finds them, `python` included) into
//! `gpu_agent/plugins/`, which maturin packs into the wheel beside the
//! native module: `pip install ./python` gives a package that finds them
//! with no other step.
//!
//! They are built in release mode in a target directory of their own
//! (`python-plugins` beside this build's profile directories: a nested
//! build in this build's own directory would wait on its lock), those of
//! the main workspace at once and one with a workspace of its own
//! (`plugins/python`) by its manifest, unless `GPU_AGENT_PLUGINS_BUILT`
//! names a directory that holds them all already (`.ci/run`: the main
//! workspace's `target/release`).

use std::path::{Path, PathBuf};
use std::process::Command;

fn main() {
    let here = PathBuf::from(std::env::var_os("CARGO_MANIFEST_DIR").expect("set by cargo"));
    let root = here
        .parent()
        .expect("python/ is in the repository")
        .to_path_buf();
    for watched in ["plugins", "plugin-api", "agent", "Cargo.toml", "Cargo.lock"] {
        println!("cargo:rerun-if-changed={}", root.join(watched).display());
    }
    println!("cargo:rerun-if-env-changed=GPU_AGENT_PLUGINS_BUILT");
    let plugins = plugin_crates(&root);
    let built = match std::env::var_os("GPU_AGENT_PLUGINS_BUILT") {
        Some(dir) => PathBuf::from(dir),
        None => build(&root, &plugins),
    };
    let dest = here.join("gpu_agent").join("plugins");
    if dest.exists() {
        std::fs::remove_dir_all(&dest)
            .unwrap_or_else(|e| panic!("cannot empty {}: {e}", dest.display()));
    }
    std::fs::create_dir_all(&dest)
        .unwrap_or_else(|e| panic!("cannot make {}: {e}", dest.display()));
    for plugin in &plugins {
        let from = built.join(&plugin.file);
        std::fs::copy(&from, dest.join(&plugin.file))
            .unwrap_or_else(|e| panic!("cannot copy the plugin {}: {e}", from.display()));
    }
}

/// A plugin crate: its package name, the file its cdylib becomes, and its
/// manifest when it is a workspace of its own.
struct Crate {
    package: String,
    file: String,
    own_workspace: Option<PathBuf>,
}

/// Each plugin crate.
fn plugin_crates(root: &Path) -> Vec<Crate> {
    let mut manifests: Vec<PathBuf> = std::fs::read_dir(root.join("plugins"))
        .expect("plugins/ is readable")
        .map(|e| e.expect("plugins/ is readable").path().join("Cargo.toml"))
        .filter(|m| m.is_file())
        .collect();
    manifests.sort();
    manifests
        .iter()
        .map(|manifest| {
            let text = std::fs::read_to_string(manifest).expect("a readable manifest");
            let table: toml::Table = text.parse().expect("a valid manifest");
            let name = |section: &str| {
                table
                    .get(section)
                    .and_then(|s| s.get("name"))
                    .and_then(|n| n.as_str())
                    .map(str::to_string)
            };
            let package = name("package").expect("a [package] name");
            let lib = name("lib").unwrap_or_else(|| package.replace('-', "_"));
            Crate {
                package,
                file: format!("lib{lib}.so"),
                own_workspace: table.contains_key("workspace").then(|| manifest.clone()),
            }
        })
        .collect()
}

/// Builds `plugins` in release mode; the directory their files are in.
fn build(root: &Path, plugins: &[Crate]) -> PathBuf {
    let out = PathBuf::from(std::env::var_os("OUT_DIR").expect("set by cargo"));
    // OUT_DIR is TARGET/PROFILE/build/PACKAGE-HASH/out.
    let target = out
        .ancestors()
        .nth(4)
        .unwrap_or(&out)
        .join("python-plugins");
    let main: Vec<&str> = plugins
        .iter()
        .filter(|p| p.own_workspace.is_none())
        .map(|p| p.package.as_str())
        .collect();
    cargo(&root.join("Cargo.toml"), &main, &target);
    for plugin in plugins {
        if let Some(manifest) = &plugin.own_workspace {
            cargo(manifest, &[&plugin.package], &target);
        }
    }
    target.join("release")
}

/// `cargo build --release` of `packages` of the workspace of `manifest`
/// into `target`, as that workspace builds them, not as this extension
/// module (maturin's settings for it left out but the Python to build for).
fn cargo(manifest: &Path, packages: &[&str], target: &Path) {
    let mut command = Command::new(std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into()));
    command
        .args(["build", "--release", "--locked", "--manifest-path"])
        .arg(manifest)
        .arg("--target-dir")
        .arg(target);
    for package in packages {
        command.arg("--package").arg(package);
    }
    for (key, _) in std::env::vars_os() {
        if key.to_string_lossy().starts_with("PYO3_") && key != "PYO3_PYTHON" {
            command.env_remove(&key);
        }
    }
    let status = command
        .status()
        .unwrap_or_else(|e| panic!("cannot run cargo to build the plugins: {e}"));
    assert!(
        status.success(),
        "building the plugins of {} failed: {status}",
        manifest.display()
    );
}
