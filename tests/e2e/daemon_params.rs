//! Policy parameters on a running daemon, through `gpuctl` and `busctl`:
//! `[policies.NAME]` tables of agent.toml (at start and at `Reload`),
//! `SetPolicyWithParameters` (a bad key, type or value changes nothing),
//! `DescribePolicy`, the `PolicyParameters` property, and the given
//! parameters surviving a restart.

use std::process::Output;
use std::time::Duration;

use crate::daemon::{gpuctl, json_dict, wait_for, Daemon, Settings, AGENT};
use crate::harness::{artefacts, SA_GREEDY, SOS};

fn ok(d: &Daemon, out: &Output) -> String {
    assert!(
        out.status.success(),
        "gpuctl failed: {}\ngpu-agentd's stderr:\n{}",
        String::from_utf8_lossy(&out.stderr),
        d.stderr()
    );
    String::from_utf8_lossy(&out.stdout).to_string()
}

fn refused(out: &Output) -> String {
    assert!(!out.status.success(), "gpuctl succeeded unexpectedly");
    String::from_utf8_lossy(&out.stderr).trim().to_string()
}

/// The `PolicyParameters` property: key → (D-Bus type, value).
fn in_use(d: &Daemon) -> Vec<(String, String, String)> {
    let mut args = vec!["get-property"];
    args.extend_from_slice(&AGENT);
    args.push("PolicyParameters");
    let reply = d.busctl_json(&args);
    let mut rows: Vec<(String, String, String)> = json_dict(&reply["data"])
        .into_iter()
        .map(|(k, (t, v))| (k, t, v.to_string()))
        .collect();
    rows.sort();
    rows
}

fn row(k: &str, t: &str, v: &str) -> (String, String, String) {
    (k.into(), t.into(), v.into())
}

/// `busctl call ... SetPolicyWithParameters sa{sv} NAME N K T V ...`: the
/// error busctl printed, if any.
fn set_with(d: &Daemon, args: &[&str]) -> Result<(), String> {
    let mut all = vec!["call"];
    all.extend_from_slice(&AGENT);
    all.extend_from_slice(&["SetPolicyWithParameters", "sa{sv}"]);
    all.extend_from_slice(args);
    let out = d.busctl(&all);
    if out.status.success() {
        Ok(())
    } else {
        Err(String::from_utf8_lossy(&out.stderr).trim().to_string())
    }
}

/// Waits until the properties read `name` and `expected` (they follow a
/// change through the daemon's notices, just after its reply).
fn settles(d: &Daemon, name: &str, expected: &[(String, String, String)]) {
    wait_for(
        &format!("Policy {name} with {expected:?}"),
        Duration::from_secs(10),
        || (policy(d) == name && in_use(d) == expected).then_some(()),
    );
}

fn policy(d: &Daemon) -> String {
    let mut args = vec!["get-property"];
    args.extend_from_slice(&AGENT);
    args.push("Policy");
    d.busctl_json(&args)["data"]
        .as_str()
        .expect("a string")
        .to_string()
}

#[test]
fn daemon_policy_parameters_round_trip_and_survive_a_restart() {
    let mut d = Daemon::start_with(Settings {
        config: Some("[policies.sa-greedy]\nbudget_ms = 50\nseed = 3\n".into()),
        ..Settings::default()
    });
    for plugin in [SA_GREEDY, SOS] {
        std::fs::copy(artefacts().join(plugin), d.plugin_dir().join(plugin))
            .expect("install a plugin");
    }
    ok(&d, &gpuctl(&d, &["reload"]));

    // The table, then the given budget over it; gpuctl says what it did.
    let before = d.block_on(d.proxy().policy()).unwrap();
    assert_eq!(
        ok(
            &d,
            &gpuctl(
                &d,
                &["policy", "use", "sa-greedy", "--param", "budget_ms=20"],
            ),
        ),
        format!("policy sa-greedy with budget_ms=20 is active (was {before}); 0 waiting tasks moved to it\n")
    );
    let expected = vec![
        row("alpha", "d", "0.995"),
        row("budget_ms", "x", "20"),
        row("iterations", "x", "2000"),
        row("overload_iterations", "x", "500"),
        row("overload_pending", "x", "256"),
        row("seed", "x", "3"),
        row("t0", "s", "\"auto\""),
        row("window", "x", "8"),
    ];
    settles(&d, "sa-greedy", &expected);
    let shown = ok(&d, &gpuctl(&d, &["policy", "show", "sa-greedy"]));
    assert!(shown.starts_with("sa-greedy (active): "), "{shown}");
    let budget = shown
        .lines()
        .find(|l| l.starts_with("budget_ms"))
        .expect("a budget_ms row");
    let cells: Vec<&str> = budget.split_whitespace().take(5).collect();
    assert_eq!(cells, ["budget_ms", "integer", "20", "0", "an"], "{budget}");
    let json: serde_json::Value =
        serde_json::from_str(&ok(&d, &gpuctl(&d, &["policy", "show", "sos", "--json"]))).unwrap();
    assert_eq!(json["active"], false);
    let model = json["parameters"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["key"] == "model")
        .expect("sos has model")
        .clone();
    assert_eq!(model["type"], "choice");
    assert_eq!(model["default"], "baseline");
    assert_eq!(model["words"], serde_json::json!(["baseline", "paper"]));

    // Bad requests are refused naming the key, and change nothing.
    let err = set_with(&d, &["sa-greedy", "1", "budget", "u", "20"]).unwrap_err();
    assert!(
        err.contains(
            "policy sa-greedy: unknown parameter \"budget\" (it takes: seed, iterations, t0, alpha, budget_ms"
        ),
        "{err}"
    );
    let err = set_with(&d, &["sa-greedy", "1", "budget_ms", "b", "true"]).unwrap_err();
    assert!(
        err.contains("budget_ms: expected an integer >= 0 (integer), got true"),
        "{err}"
    );
    let err = refused(&gpuctl(
        &d,
        &["policy", "use", "sa-greedy", "--param", "alpha=1.5"],
    ));
    assert!(
        err.contains("InvalidArgument")
            && err.contains("alpha: expected a number in (0, 1), got \"1.5\""),
        "{err}"
    );
    assert_eq!(policy(&d), "sa-greedy");
    assert_eq!(in_use(&d), expected);

    // Typed values over busctl are as good as text.
    set_with(
        &d,
        &[
            "sa-greedy",
            "2",
            "budget_ms",
            "u",
            "20",
            "alpha",
            "d",
            "0.9",
        ],
    )
    .unwrap();
    let mut expected = expected;
    expected[0] = row("alpha", "d", "0.9");
    settles(&d, "sa-greedy", &expected);

    // The given parameters are stored with the policy's name.
    d.terminate();
    d.restart();
    settles(&d, "sa-greedy", &expected);

    // Reload reads the table again: the active policy is rebuilt with it,
    // the given parameters still over it; a bad table changes nothing.
    let config = d.config_file();
    std::fs::write(&config, "[policies.sa-greedy]\nbudget_ms = 50\nseed = 9\n").unwrap();
    ok(&d, &gpuctl(&d, &["reload"]));
    expected[5] = row("seed", "x", "9");
    settles(&d, "sa-greedy", &expected);
    std::fs::write(&config, "[policies.sa-greedy]\nseed = -1\n").unwrap();
    let err = refused(&gpuctl(&d, &["reload"]));
    assert!(
        err.contains(&format!(
            "{}:2: policies.sa-greedy.seed: expected an integer >= 0, got \"-1\"",
            config.display()
        )),
        "{err}"
    );
    assert_eq!(in_use(&d), expected);
}
