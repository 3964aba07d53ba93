//! Building the artefacts under test and running them.

use std::{
    path::{Path, PathBuf},
    process::{Command, Output},
    sync::OnceLock,
};

/// The plugin files the product ships.
pub const FIFO: &str = "libgpu_agent_policy_fifo.so";
pub const GREEDY_EFT: &str = "libgpu_agent_policy_greedy_eft.so";
pub const SOS: &str = "libgpu_agent_policy_sos.so";
pub const SA_GREEDY: &str = "libgpu_agent_policy_sa_greedy.so";
pub const EDF_HIER: &str = "libgpu_agent_policy_edf_hier.so";
pub const EDL: &str = "libgpu_agent_policy_edl.so";
pub const MIG_PLAN: &str = "libgpu_agent_policy_mig_plan.so";
/// Every shipped policy plugin: (crate, file).
pub const SHIPPED: &[(&str, &str)] = &[
    ("gpu-agent-policy-fifo", FIFO),
    ("gpu-agent-policy-greedy-eft", GREEDY_EFT),
    ("gpu-agent-policy-sos", SOS),
    ("gpu-agent-policy-sa-greedy", SA_GREEDY),
    ("gpu-agent-policy-edf-hier", EDF_HIER),
    ("gpu-agent-policy-edl", EDL),
    ("gpu-agent-policy-mig-plan", MIG_PLAN),
];
/// The `python` policy plugin (plugins/python, a workspace of its own).
pub const PYTHON: &str = "libgpu_agent_policy_python.so";
/// Fixture plugins (tests/fixture-plugins, never part of the product).
pub const PANICKY: &str = "libfixture_panicky.so";
pub const HANGING: &str = "libfixture_hanging.so";
pub const ABI_MISMATCH: &str = "libfixture_abi_mismatch.so";

/// The directory holding freshly built `gpuctl`, `gpu-agentd` and plugin files.
///
/// They are built into a target directory of their own (`<target>/e2e`): a
/// cdylib that `cargo test` rebuilt in the shared one is not always copied up
/// to where `cargo build` puts it, so a shared directory could serve a stale file.
pub fn artefacts() -> &'static Path {
    static BUILT: OnceLock<PathBuf> = OnceLock::new();
    BUILT.get_or_init(|| {
        // This test runs from <target>/<profile>/deps/.
        let exe = std::env::current_exe().expect("test executable path");
        let test_profile_dir = exe
            .parent()
            .and_then(Path::parent)
            .expect("profile directory");
        let profile = test_profile_dir
            .file_name()
            .and_then(|n| n.to_str())
            .expect("profile name");
        let target_dir = test_profile_dir
            .parent()
            .expect("target directory")
            .join("e2e");
        let root = Path::new(env!("CARGO_MANIFEST_DIR"))
            .parent()
            .expect("workspace root");
        // The binaries, and the plugins' libraries (their cdylibs).
        let product = [
            "build",
            "--quiet",
            "--bins",
            "--lib",
            "-p",
            "gpu-agent-cli",
            "-p",
            "gpu-agent-daemon",
        ]
        .into_iter()
        .chain(SHIPPED.iter().flat_map(|&(krate, _)| ["-p", krate]))
        // The stand-in NVML library (tests/nvml-stand-in).
        .chain(["-p", "gpu-agent-nvml-stand-in"])
        // The crash and hang hooks the tests use (agent/daemon/src/test_hooks.rs).
        .chain(["--features", "gpu-agent-daemon/test-hooks"]);
        cargo_build(root, product, &target_dir, profile);
        install_nvml_fake(&target_dir.join(profile));
        // The fixtures are a workspace of their own (see its Cargo.toml),
        // built into the same directory so that they share the dependencies.
        let fixtures = root.join("tests/fixture-plugins/Cargo.toml");
        let fixtures = ["build", "--quiet", "--locked", "--manifest-path"]
            .into_iter()
            .chain([fixtures.to_str().expect("utf-8 path")]);
        cargo_build(root, fixtures, &target_dir, profile);
        target_dir.join(profile)
    })
}

/// Builds the `python` policy plugin (plugins/python, which links libpython)
/// into the artefacts' directory, once, and says whether it is there as
/// [`PYTHON`]. Where Python's embedding files are missing (no
/// `python3-config`: python3-dev is not installed) it is not built, and
/// this says on stderr that `test` is skipped. A build that fails anyway
/// fails the test.
pub fn python_plugin(test: &str) -> bool {
    static BUILT: OnceLock<bool> = OnceLock::new();
    let built = *BUILT.get_or_init(|| {
        let embeddable = Command::new("python3-config")
            .args(["--embed", "--ldflags"])
            .output()
            .is_ok_and(|out| out.status.success());
        if !embeddable {
            return false;
        }
        build_in_artefacts("plugins/python/Cargo.toml");
        true
    });
    if !built {
        eprintln!(
            "{test}: skipped: the python policy plugin cannot be built here \
             (no python3-config: install python3-dev)"
        );
    }
    built
}

/// gpu-agent's SPANK plugin (packaging/slurm/spank, a workspace of its own
/// built against the installed Slurm headers), built into the artefacts'
/// directory, once: the path of its `.so`.
pub fn spank_plugin() -> PathBuf {
    static BUILT: OnceLock<PathBuf> = OnceLock::new();
    BUILT
        .get_or_init(|| {
            build_in_artefacts("packaging/slurm/spank/Cargo.toml");
            artefacts().join("libgpu_agent_spank.so")
        })
        .clone()
}

/// Builds the workspace of its own whose manifest is `manifest` (from the
/// repository's root) into the artefacts' directory, sharing their
/// dependencies; fails the test if it fails.
fn build_in_artefacts(manifest: &str) {
    let dir = artefacts();
    let profile = dir.file_name().and_then(|n| n.to_str()).expect("profile");
    let root = Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("workspace root");
    let manifest = root.join(manifest);
    let args = ["build", "--quiet", "--locked", "--manifest-path"]
        .into_iter()
        .chain([manifest.to_str().expect("utf-8 path")]);
    cargo_build(root, args, dir.parent().expect("target directory"), profile);
}

/// The directory holding the stand-in NVML library as `libnvidia-ml.so.1`
/// (tests/nvml-stand-in): a process with `LD_LIBRARY_PATH` here and
/// `NVML_FAKE_HOST` naming a host file loads it as the driver's.
pub fn nvml_fake() -> PathBuf {
    artefacts().join(NVML_FAKE)
}

/// Where [`nvml_fake`] is, under the artefacts' directory.
const NVML_FAKE: &str = "nvml-fake";

/// Puts the freshly built stand-in at `<dir>/nvml-fake/libnvidia-ml.so.1`:
/// written beside it and renamed into place, so that a process still running
/// on the old file keeps its copy.
fn install_nvml_fake(dir: &Path) {
    let fake = dir.join(NVML_FAKE);
    std::fs::create_dir_all(&fake).expect("create the nvml-fake directory");
    let staged = fake.join(format!(".libnvidia-ml.so.1.{}", std::process::id()));
    std::fs::copy(dir.join("libgpu_agent_nvml_stand_in.so"), &staged)
        .expect("copy the stand-in NVML library");
    std::fs::rename(&staged, fake.join("libnvidia-ml.so.1")).expect("install libnvidia-ml.so.1");
}

/// Runs `cargo ARGS --target-dir TARGET_DIR` in `root` for `profile`, and
/// fails the test if it fails.
fn cargo_build<'a>(
    root: &Path,
    args: impl IntoIterator<Item = &'a str>,
    target_dir: &Path,
    profile: &str,
) {
    let mut cmd = cargo(root, args, target_dir, profile);
    let status = cmd.status().expect("run cargo build");
    assert!(status.success(), "{cmd:?} failed");
}

/// `cargo ARGS --target-dir TARGET_DIR` in `root`, for `profile`.
fn cargo<'a>(
    root: &Path,
    args: impl IntoIterator<Item = &'a str>,
    target_dir: &Path,
    profile: &str,
) -> Command {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let mut cmd = Command::new(cargo);
    cmd.current_dir(root)
        .args(args)
        .arg("--target-dir")
        .arg(target_dir);
    match profile {
        "debug" => {}
        "release" => {
            cmd.arg("--release");
        }
        other => {
            cmd.args(["--profile", other]);
        }
    }
    cmd
}

/// `cargo ARGS` in the workspace, for this test's profile, into the
/// artefacts' target directory (which then shares their dependencies).
pub fn cargo_in_artefacts(args: &[&str]) -> Command {
    let dir = artefacts();
    let profile = dir.file_name().and_then(|n| n.to_str()).expect("profile");
    let root = Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("workspace root");
    // `cargo test ARGS -- TEST_ARGS`: the target directory goes before `--`.
    let split = args.iter().position(|&a| a == "--").unwrap_or(args.len());
    let mut cmd = cargo(
        root,
        args[..split].iter().copied(),
        dir.parent().expect("target directory"),
        profile,
    );
    cmd.args(&args[split..]);
    cmd
}

/// A fresh directory holding copies of the named plugin files.
pub fn plugin_dir(files: &[&str]) -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("temp dir");
    for f in files {
        std::fs::copy(artefacts().join(f), dir.path().join(f)).expect("copy plugin");
    }
    dir
}

/// Runs `gpuctl` with `args`.
pub fn gpuctl(args: &[&str]) -> Output {
    Command::new(artefacts().join("gpuctl"))
        .args(args)
        .env("NO_COLOR", "1")
        .output()
        .expect("run gpuctl")
}

/// Writes `text` to `name` in `dir` and returns the path as a string.
pub fn write(dir: &Path, name: &str, text: &str) -> String {
    let path = dir.join(name);
    std::fs::write(&path, text).expect("write input file");
    path.to_str().expect("utf-8 path").to_string()
}

/// stdout as text, asserting success.
pub fn success(out: &Output) -> String {
    assert!(
        out.status.success(),
        "gpuctl failed: {}\nstderr:\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout.clone()).expect("utf-8 stdout")
}

/// stderr as text, asserting failure.
pub fn failure(out: &Output) -> String {
    assert!(
        !out.status.success(),
        "gpuctl succeeded unexpectedly:\n{}",
        String::from_utf8_lossy(&out.stdout)
    );
    assert!(
        out.stdout.is_empty(),
        "a failed run printed results: {}",
        String::from_utf8_lossy(&out.stdout)
    );
    String::from_utf8(out.stderr.clone()).expect("utf-8 stderr")
}

/// A `gpuctl simulate` set-up: input files in a scratch directory and a
/// plugin directory holding the named plugin files.
pub struct Sim {
    /// Scratch directory for inputs and outputs.
    pub work: tempfile::TempDir,
    /// The plugin directory.
    pub plugins: tempfile::TempDir,
    /// Path of the host file.
    pub host: String,
    /// Path of the trace file.
    pub trace: String,
}

impl Sim {
    /// Writes `host` and `trace` and gathers `plugins`.
    pub fn new(plugins: &[&str], host: &str, trace: &str) -> Sim {
        let work = tempfile::tempdir().expect("temp dir");
        let host = write(work.path(), "host.toml", host);
        let trace = write(work.path(), "trace.csv", trace);
        Sim {
            plugins: plugin_dir(plugins),
            work,
            host,
            trace,
        }
    }

    /// A path in the scratch directory.
    pub fn path(&self, name: &str) -> String {
        self.work
            .path()
            .join(name)
            .to_str()
            .expect("utf-8 path")
            .to_string()
    }

    /// Runs `gpuctl simulate --host H --trace T ARGS... --plugin-dir P`.
    pub fn run(&self, args: &[&str]) -> Output {
        let mut all = vec!["simulate", "--host", &self.host, "--trace", &self.trace];
        all.extend_from_slice(args);
        all.extend_from_slice(&[
            "--plugin-dir",
            self.plugins.path().to_str().expect("utf-8 path"),
        ]);
        gpuctl(&all)
    }
}
