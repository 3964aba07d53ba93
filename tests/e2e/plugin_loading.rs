//! Loading plugin files: good ones, garbage, foreign libraries, another ABI
//! version, duplicates, and a policy that panics.

use gpu_agent_loader::{Plugin, PluginError, Registry};
use gpu_agent_plugin_api::ParamType;

use crate::harness::{self, failure, success, Sim, ABI_MISMATCH, FIFO, GREEDY_EFT, PANICKY};

/// Some shared library of the system that is not a gpu-agent plugin.
fn foreign_library() -> std::path::PathBuf {
    [
        "/lib/x86_64-linux-gnu",
        "/usr/lib/x86_64-linux-gnu",
        "/lib/aarch64-linux-gnu",
        "/usr/lib64",
        "/lib64",
    ]
    .iter()
    .map(|d| std::path::Path::new(d).join("libm.so.6"))
    .find(|p| p.exists())
    .expect("libm.so.6 somewhere on the system")
}

fn reason_for<'a>(failures: &'a [PluginError], file: &str) -> &'a str {
    failures
        .iter()
        .find_map(|f| match f {
            PluginError::Load { path, reason } if path.ends_with(file) => Some(reason.as_str()),
            _ => None,
        })
        .unwrap_or_else(|| panic!("no failure reported for {file}"))
}

#[test]
fn good_plugins_load_and_bad_files_are_reported_with_path_and_reason() {
    let dir = harness::plugin_dir(&[FIFO, GREEDY_EFT, ABI_MISMATCH]);
    std::fs::write(
        dir.path().join("garbage.so"),
        b"\x7fELF but not really a library",
    )
    .unwrap();
    std::fs::copy(foreign_library(), dir.path().join("libforeign.so")).unwrap();
    std::fs::copy(dir.path().join(FIFO), dir.path().join("zz-second-fifo.so")).unwrap();
    std::fs::write(dir.path().join("README.txt"), "not a plugin").unwrap();

    let registry = Registry::load_dir(dir.path()).expect("directory is readable");
    let names: Vec<_> = registry.plugins.iter().map(|p| p.name()).collect();
    assert_eq!(names, vec!["fifo", "greedy-eft"]);
    assert_eq!(
        registry.failures.len(),
        4,
        "garbage, foreign, ABI mismatch, duplicate: {:?}",
        registry
            .failures
            .iter()
            .map(|f| f.to_string())
            .collect::<Vec<_>>()
    );

    let garbage = reason_for(&registry.failures, "garbage.so");
    assert!(
        garbage.starts_with("cannot open as a shared library: "),
        "{garbage}"
    );
    let foreign = reason_for(&registry.failures, "libforeign.so");
    assert!(
        foreign.starts_with("not a gpu-agent policy plugin (no "),
        "{foreign}"
    );
    assert_eq!(
        reason_for(&registry.failures, ABI_MISMATCH),
        "built against plugin API 0.0.1, incompatible with this agent's 0.1.0"
    );
    assert_eq!(
        reason_for(&registry.failures, "zz-second-fifo.so"),
        "policy \"fifo\" is already provided by an earlier file"
    );
    for f in &registry.failures {
        assert!(
            f.to_string().starts_with(&dir.path().display().to_string()),
            "error names the file: {f}"
        );
    }
}

#[test]
fn a_missing_file_or_directory_is_an_error_naming_it() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("nope.so");
    let err = Plugin::load(&missing).err().expect("missing file fails");
    assert!(
        err.to_string().starts_with(&missing.display().to_string()),
        "{err}"
    );
    let err = Registry::load_dir(&dir.path().join("nowhere"))
        .err()
        .expect("missing dir fails");
    assert!(
        err.to_string().starts_with("cannot read plugin directory"),
        "{err}"
    );
}

#[test]
fn metadata_and_parameters_cross_the_boundary() {
    let dir = harness::plugin_dir(&[FIFO, PANICKY]);
    let registry = Registry::load_dir(dir.path()).unwrap();
    let fifo = registry.find("fifo").unwrap();
    assert!(fifo.description().contains("first come, first served"));
    assert_eq!(fifo.parameter_names().count(), 0);
    let err = fifo
        .instantiate(&[("seed".into(), "1".into())])
        .err()
        .unwrap();
    assert_eq!(
        err.to_string(),
        "policy fifo: unknown parameter \"seed\" (it takes: none)"
    );

    let panicky = registry.find("panicky").unwrap();
    assert_eq!(
        panicky.parameter_names().collect::<Vec<_>>(),
        vec!["panic_in_new"]
    );
    // Types cross the boundary, and a value of the wrong type is refused
    // before the plugin is asked to build anything.
    let info = panicky.parameters()[0];
    assert_eq!(info.kind, ParamType::Bool);
    assert_eq!(info.default.as_str(), "false");
    let err = panicky
        .instantiate(&[("panic_in_new".into(), "maybe".into())])
        .err()
        .unwrap();
    assert_eq!(
        err.to_string(),
        "policy panicky: panic_in_new: expected true or false, got \"maybe\""
    );
    let err = panicky
        .instantiate(&[("panic_in_new".into(), "true".into())])
        .err()
        .unwrap();
    assert_eq!(
        err.to_string(),
        "policy panicky: panicked: asked to panic in new"
    );

    let err = registry.find("sos").err().unwrap();
    assert_eq!(
        err.to_string(),
        "unknown policy \"sos\"; available: fifo, panicky"
    );
}

#[test]
fn a_panicking_policy_is_reported_and_fifo_carries_on_without_losing_a_task() {
    // panicky queues t1 on device 0 (0..10); boom makes it panic on arrival.
    // FIFO then takes boom (device 1 is free at 1: 1..3) and t3 (device 1 at 3: 3..4).
    let sim = Sim::new(
        &[FIFO, PANICKY],
        "[[gpu]]\nmodel = \"T4\"\ncount = 2\nspeed = 1\n",
        "id,arrival,workload,mem_gb,deadline,weight\nt1,0,10,1,100,1\nboom,1,2,1,100,1\nt3,2,1,1,100,1\n",
    );
    let schedule = sim.path("schedule.csv");
    let out = sim.run(&["--policy", "panicky", "--json", "--schedule", &schedule]);
    let stdout = success(&out);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("policy panicky failed: panicked: task boom makes this policy panic; continuing with the built-in FIFO order"),
        "{stderr}"
    );
    let metrics: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(metrics["tasks"], 3);
    assert_eq!(metrics["makespan"], 10.0);
    assert_eq!(
        std::fs::read_to_string(&schedule).unwrap(),
        "id,gpu,start,end,core_mhz,mem_mhz,energy_j,v,fc,fm,t,p,default_energy_j,class,readjusted,device\n\
         t1,0,0,10,1590,5001,700,1,1,1,10,70,700,,,0\n\
         boom,1,1,3,1590,5001,140,1,1,1,2,70,140,,,1\n\
         t3,1,3,4,1590,5001,70,1,1,1,1,70,70,,,1\n"
    );
}

#[test]
fn gpuctl_warns_about_broken_plugins_and_still_runs() {
    let sim = Sim::new(
        &[FIFO, ABI_MISMATCH],
        "[[gpu]]\nmodel = \"T4\"\nspeed = 1\n",
        "id,arrival,workload,mem_gb,deadline,weight\na,0,1,1,1,1\n",
    );
    let out = sim.run(&["--policy", "fifo"]);
    success(&out);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("gpuctl: warn: skipping plugin ") && stderr.contains(ABI_MISMATCH),
        "{stderr}"
    );

    let out = sim.run(&["--policy", "old"]);
    assert!(failure(&out).contains("gpuctl: error: unknown policy \"old\"; available: fifo"));
}

/// A plugin directory that is not there: the error names it and says why
/// once (the io error was printed twice, once in the message and once as
/// its source).
#[test]
fn gpuctl_names_a_missing_plugin_directory_and_its_cause_once() {
    let sim = Sim::new(
        &[FIFO],
        "[[gpu]]\nmodel = \"T4\"\nspeed = 1\n",
        "id,arrival,workload,mem_gb,deadline,weight\na,0,1,1,1,1\n",
    );
    let out = harness::gpuctl(&[
        "simulate",
        "--host",
        &sim.path("host.toml"),
        "--trace",
        &sim.path("trace.csv"),
        "--policy",
        "fifo",
        "--plugin-dir",
        "/nonexistent/plugins",
    ]);
    assert_eq!(
        failure(&out),
        "gpuctl: error: cannot read plugin directory /nonexistent/plugins: \
         No such file or directory (os error 2)\n"
    );
}
