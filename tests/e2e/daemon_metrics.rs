//! `/metrics`: a scrape of a daemon on the bundled mock host, in the
//! classic text format (checked by `promtool check metrics` where it is
//! installed; CI installs it) and in OpenMetrics for a scraper that asks;
//! every series labelled with the node (the host name, or `metrics_node`);
//! adopted Slurm jobs' energy by job id while they run and after.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::{Command, Stdio};
use std::time::Duration;

use gpu_agent_dbus::{AdoptSpec, TaskStatus};

use crate::daemon::{spec, wait_for, Daemon, Settings};

/// The response to `GET path` with `accept`: (head, body).
fn get(addr: &str, path: &str, accept: &str) -> (String, String) {
    let mut stream = TcpStream::connect(addr).expect("connect to metrics_listen");
    stream
        .set_read_timeout(Some(Duration::from_secs(30)))
        .unwrap();
    write!(
        stream,
        "GET {path} HTTP/1.1\r\nHost: {addr}\r\nAccept: {accept}\r\n\r\n"
    )
    .unwrap();
    let mut text = String::new();
    stream.read_to_string(&mut text).unwrap();
    let (head, body) = text.split_once("\r\n\r\n").expect("an HTTP response");
    (head.to_string(), body.to_string())
}

#[test]
fn daemon_metrics_scrape_passes_promtool() {
    let d = Daemon::start_with(Settings {
        config: Some("metrics_listen = \"127.0.0.1:0\"\n".into()),
        ..Settings::default()
    });
    let addr = metrics_addr(&d);
    let id = d.submit(&spec(10.0, 1.0, 60.0, 1.0)).expect("Submit");
    d.wait_state(&id, TaskStatus::Succeeded, Duration::from_secs(30));

    let (head, body) = get(&addr, "/metrics", "*/*");
    assert!(head.starts_with("HTTP/1.1 200 OK"), "{head}");
    assert!(head.contains("text/plain; version=0.0.4"), "{head}");
    // Without metrics_node, the node is the host's name.
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap();
    let node = format!("node=\"{}\"", host.trim());
    for line in [
        format!("gpu_agent_tasks{{{node},state=\"succeeded\"}} 1"),
        format!("gpu_agent_submit_duration_seconds_count{{{node}}} 1"),
        "# TYPE gpu_agent_policy_faults_total counter".into(),
        "# TYPE gpu_agent_gpu_energy_joules gauge".into(),
        format!("gpu_agent_gpu_power_watts{{{node},gpu=\"3\","),
    ] {
        assert!(body.contains(&line), "{line} not in the scrape:\n{body}");
    }
    for line in body.lines().filter(|l| !l.starts_with('#')) {
        assert!(line.contains(&node), "{line}: no {node}");
    }
    lint(&body);

    // Every series the shipped Grafana dashboard queries is in the scrape
    // (the Slurm jobs' once a job is adopted:
    // daemon_metrics_show_each_adopted_slurm_jobs_energy).
    let dashboard = std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../packaging/grafana/gpu-agent-dashboard.json"),
    )
    .unwrap();
    let mut names: Vec<&str> = dashboard
        .match_indices("gpu_agent_")
        .map(|(i, _)| {
            let rest = &dashboard[i..];
            let end = rest
                .find(|c: char| !(c.is_ascii_lowercase() || c == '_'))
                .unwrap_or(rest.len());
            &rest[..end]
        })
        .collect();
    names.retain(|name| !name.starts_with("gpu_agent_slurm_job_"));
    names.sort_unstable();
    names.dedup();
    assert!(names.len() >= 10, "{names:?}");
    for name in names {
        assert!(
            body.lines().any(|l| l.starts_with(name)),
            "the dashboard queries {name}, which the scrape lacks"
        );
    }

    let (head, body) = get(
        &addr,
        "/metrics",
        "application/openmetrics-text; version=1.0.0",
    );
    assert!(head.contains("application/openmetrics-text"), "{head}");
    assert!(body.ends_with("# EOF\n"), "{body}");
    let (head, _) = get(&addr, "/other", "*/*");
    assert!(head.starts_with("HTTP/1.1 404"), "{head}");
}

/// `promtool check metrics` passes `body` (where promtool is installed; CI
/// installs it).
fn lint(body: &str) {
    match Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
    {
        Ok(mut promtool) => {
            promtool
                .stdin
                .take()
                .unwrap()
                .write_all(body.as_bytes())
                .unwrap();
            let out = promtool.wait_with_output().unwrap();
            assert!(
                out.status.success(),
                "promtool check metrics: {}{}\n{body}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            );
        }
        Err(e) => {
            assert!(
                std::env::var_os("CI").is_none(),
                "CI installs promtool (.ci/run): {e}"
            );
            println!("promtool not installed ({e}); the scrape was not linted");
        }
    }
}

/// The address `/metrics` is served at, from `d`'s log.
fn metrics_addr(d: &Daemon) -> String {
    wait_for(
        "the metrics address in the log",
        Duration::from_secs(10),
        || {
            let log = d.stderr();
            // The last start's.
            let rest = log.rsplit_once("serving Prometheus metrics at http://")?.1;
            Some(rest.split_once("/metrics")?.0.to_string())
        },
    )
}

/// A daemon on a GPU split into two MIG instances (and a whole T4) shows
/// each instance as `mig_` series apart from its GPU's `gpu_` series, with
/// its index, GPU, UUID and profile, and the scrape lints clean.
#[test]
fn daemon_metrics_show_each_mig_instance() {
    let d = Daemon::start_with(Settings {
        config: Some("metrics_listen = \"127.0.0.1:0\"\nmetrics_node = \"gpu07\"\n".into()),
        host: Some(
            "[[gpu]]\nmodel = \"A100-SXM4-40GB\"\nspeed = 7\nmig = [\"3g.20gb@0\", \"3g.20gb@4\"]\n\
             [[gpu]]\nmodel = \"T4\"\nspeed = 1\n"
                .into(),
        ),
        ..Settings::default()
    });
    let addr = metrics_addr(&d);
    let (head, body) = get(&addr, "/metrics", "*/*");
    assert!(head.starts_with("HTTP/1.1 200 OK"), "{head}");
    for device in ["2", "3"] {
        let online = format!(
            "gpu_agent_mig_online{{node=\"gpu07\",device=\"{device}\",gpu=\"0\",uuid=\"MIG-"
        );
        let line = body
            .lines()
            .find(|l| l.starts_with(&online))
            .unwrap_or_else(|| panic!("{online} not in the scrape:\n{body}"));
        assert!(
            line.contains(",profile=\"3g.20gb\",health=\"ok\"} 1"),
            "{line}"
        );
        for family in ["gpu_agent_mig_busy", "gpu_agent_mig_memory_bytes"] {
            let series = format!("{family}{{node=\"gpu07\",device=\"{device}\",gpu=\"0\",");
            assert!(
                body.contains(&series),
                "{series} not in the scrape:\n{body}"
            );
        }
    }
    assert!(
        body.contains("gpu_agent_gpu_online{node=\"gpu07\",gpu=\"0\",")
            && !body.contains("gpu_agent_gpu_busy{node=\"gpu07\",gpu=\"2\""),
        "the split GPU is a gpu_ series, its instances are not:\n{body}"
    );
    lint(&body);
}

/// The value of the series whose line starts with `series` (name and
/// labels) in `body`, if there is one.
fn value(body: &str, series: &str) -> Option<f64> {
    body.lines()
        .find_map(|l| l.strip_prefix(series)?.strip_prefix(' '))
        .map(|v| v.parse().expect("a number"))
}

/// An adopted Slurm job's energy by its job id: while it runs, growing
/// with its GPU's counter; after its release, the energy its task
/// recorded and `running` 0. An adoption that is no Slurm job's has none.
/// The scrape lints clean, and every series the dashboard's job row
/// queries is in it.
#[test]
fn daemon_metrics_show_each_adopted_slurm_jobs_energy() {
    let d = Daemon::start_with(Settings {
        config: Some("metrics_listen = \"127.0.0.1:0\"\nmetrics_node = \"gpu07\"\n".into()),
        ..Settings::default()
    });
    let addr = metrics_addr(&d);
    let deadline = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs_f64()
        + 3600.0;
    let adopt = |gpu: u32, external_id: &str| {
        let spec = AdoptSpec {
            devices: vec![gpu],
            external_id: external_id.into(),
            owner_uid: 4321,
            app: "default".into(),
            deadline,
        };
        d.block_on(d.proxy().adopt(spec.to_dict())).expect("Adopt")
    };
    let job = adopt(1, "slurm:4242");
    let other = adopt(2, "pbs:17");
    let energy = format!(
        "gpu_agent_slurm_job_energy_joules{{node=\"gpu07\",slurm_job_id=\"4242\",task=\"{job}\"}}"
    );
    let running = format!(
        "gpu_agent_slurm_job_running{{node=\"gpu07\",slurm_job_id=\"4242\",task=\"{job}\"}}"
    );
    // The mock GPU draws power: its job's energy grows while it runs.
    let first = wait_for("the job's energy above 0", Duration::from_secs(30), || {
        let (_, body) = get(&addr, "/metrics", "*/*");
        value(&body, &energy).filter(|&j| j > 0.0)
    });
    let (_, body) = get(&addr, "/metrics", "*/*");
    assert_eq!(value(&body, &running), Some(1.0), "{body}");
    assert!(!body.contains(&other), "{other} is no Slurm job's:\n{body}");
    lint(&body);
    wait_for("the job's energy to grow", Duration::from_secs(30), || {
        let (_, body) = get(&addr, "/metrics", "*/*");
        value(&body, &energy).filter(|&j| j > first)
    });

    d.block_on(d.proxy().release(&job)).expect("Release");
    let recorded = d
        .wait_state(&job, TaskStatus::Succeeded, Duration::from_secs(30))
        .energy_j
        .expect("the job's energy");
    let (_, body) = get(&addr, "/metrics", "*/*");
    assert_eq!(value(&body, &running), Some(0.0), "{body}");
    let shown = value(&body, &energy).expect("the ended job's energy");
    assert!(
        (shown - recorded).abs() <= 1e-9 * recorded,
        "{shown} J shown, {recorded} J recorded"
    );
    lint(&body);
    let dashboard = std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../packaging/grafana/gpu-agent-dashboard.json"),
    )
    .unwrap();
    for name in [
        "gpu_agent_slurm_job_energy_joules",
        "gpu_agent_slurm_job_running",
    ] {
        assert!(dashboard.contains(name), "the dashboard lacks {name}");
    }
}

/// `Metrics()`.
fn dbus_metrics(d: &Daemon) -> gpu_agent_core::metrics::Metrics {
    gpu_agent_dbus::metrics_from_dict(&d.block_on(d.proxy().metrics()).unwrap()).expect("metrics")
}

/// `ListTasksPage`: the ids of the page, and the position to go on from.
fn page(d: &Daemon, state: &str, from: u64, limit: u32) -> (Vec<String>, u64) {
    let (tasks, next) = d
        .block_on(d.proxy().list_tasks_page(state, from, limit))
        .expect("ListTasksPage");
    let ids = tasks
        .iter()
        .map(|t| gpu_agent_dbus::TaskInfo::from_dict(t).unwrap().id)
        .collect();
    (ids, next)
}

/// The `gpu_agent_tasks` gauge for `state` in a scrape of `addr`.
fn tasks_gauge(addr: &str, state: &str) -> f64 {
    let (_, body) = get(addr, "/metrics", "text/plain");
    let series = format!(",state=\"{state}\"}} ");
    body.lines()
        .filter(|l| l.starts_with("gpu_agent_tasks{"))
        .find_map(|l| Some(l.split_once(series.as_str())?.1))
        .unwrap_or_else(|| panic!("no {series} in\n{body}"))
        .parse()
        .unwrap()
}

/// Ended tasks leave the daemon's memory for the store: they are still
/// served (GetTask, pages by state, a refused Cancel), counted (`Metrics()`,
/// `/metrics`) and summed alike after a restart, which reads the stored sums
/// (or, for a store from before them, sums the ended tasks once).
#[test]
fn daemon_serves_ended_tasks_from_the_store_and_keeps_their_sums_across_a_restart() {
    const TASKS: usize = 300;
    let mut d = Daemon::start_with(Settings {
        time_scale: 1000.0,
        config: Some("metrics_listen = \"127.0.0.1:0\"\n".into()),
        ..Settings::default()
    });
    let proxy = d.proxy();
    // One in ten cannot meet its deadline (1 model second of slack less
    // than its work), so that the sums are not all zero.
    for start in (0..TASKS).step_by(100) {
        let submits: Vec<_> = (start..start + 100)
            .map(|i| {
                let proxy = proxy.clone();
                let deadline = if i % 10 == 0 { 1.0 } else { 1e6 };
                d.spawn(async move { proxy.submit(spec(20.0, 1.0, deadline, 2.0).to_dict()).await })
            })
            .collect();
        for s in submits {
            d.block_on(s).unwrap().expect("Submit");
        }
    }
    let ended = d.wait_all_ended(Duration::from_secs(120));
    assert!(ended.iter().all(|t| t.state == TaskStatus::Succeeded));
    let before = dbus_metrics(&d);
    assert_eq!(before.tasks, TASKS);
    assert!(before.dmc >= TASKS / 10 && before.twt > 0.0, "{before:?}");
    assert_eq!(tasks_gauge(&metrics_addr(&d), "succeeded"), TASKS as f64);

    // The first task ended long ago: read back from the store.
    assert_eq!(d.task("t1").state, TaskStatus::Succeeded);
    let (name, message) = crate::daemon::dbus_error(d.block_on(proxy.cancel("t1")));
    assert_eq!(name, "org.gpuagent.Agent1.Error.NotCancellable");
    assert_eq!(message, "task t1 already succeeded");
    // Pages by state walk the store, with positions to go on from.
    assert_eq!(
        page(&d, "succeeded", 0, 2),
        (vec!["t1".into(), "t2".into()], 2)
    );
    assert_eq!(
        page(&d, "succeeded", 298, 5),
        (vec!["t299".into(), "t300".into()], 0)
    );
    assert_eq!(page(&d, "queued", 0, 10), (Vec::<String>::new(), 0));

    // A store from before the sums were stored: the first start sums the
    // ended tasks once (the same sums, up to the order of addition) and
    // stores them.
    let db = d.state_dir().join("state.db");
    let sums_stored = || sqlite(&db, "SELECT count(*) FROM meta WHERE key = 'tally'") == "1";
    // The metrics after a restart onto the store as `sql` (through the
    // sqlite3 shell) leaves it.
    let restart_after = |d: &mut Daemon, sql: &str| {
        d.terminate();
        sqlite(&db, sql);
        d.restart();
        dbus_metrics(d)
    };
    assert!(sums_stored());
    let summed = restart_after(&mut d, "DELETE FROM meta WHERE key = 'tally'");
    assert_eq!((summed.tasks, summed.dmc), (before.tasks, before.dmc));
    for (a, b) in [
        (summed.twt, before.twt),
        (summed.act, before.act),
        (summed.makespan, before.makespan),
        (summed.energy_j, before.energy_j),
    ] {
        assert!(
            (a - b).abs() <= 1e-9 * b.abs().max(1.0),
            "{summed:?} vs {before:?}"
        );
    }
    assert!(sums_stored());
    // Sums that no longer count the tasks stored as ended (an operator
    // pruned an old one) are made again from those tasks.
    let summed = restart_after(&mut d, "DELETE FROM tasks WHERE id = 't2'");
    assert_eq!(summed.tasks, TASKS - 1);
    // Then a restart reads the stored sums, not the ended tasks: an old
    // ended record, out of the client tokens' window and unreadable, changes
    // neither the start nor the sums.
    let after = restart_after(
        &mut d,
        "UPDATE tasks SET spec = 'not json', submitted = submitted - 2 * 86400 WHERE id = 't1'",
    );
    assert_eq!(
        (
            after.tasks,
            after.dmc,
            after.twt,
            after.act,
            after.makespan,
            after.energy_j
        ),
        (
            summed.tasks,
            summed.dmc,
            summed.twt,
            summed.act,
            summed.makespan,
            summed.energy_j
        )
    );
    assert_eq!(
        tasks_gauge(&metrics_addr(&d), "succeeded"),
        (TASKS - 1) as f64
    );
    // CountTasks, through busctl as a user would: every state listed, from
    // the counts (no task read).
    let counts = d.call("CountTasks", &[]);
    let counts = counts[0].as_object().expect("a{st}");
    assert_eq!(counts.len(), TaskStatus::ALL.len(), "{counts:?}");
    assert_eq!(counts["succeeded"], TASKS - 1);
    assert_eq!(counts["queued"], 0);
    // gpuctl status shows the same.
    let out = crate::daemon::gpuctl(&d, &["status", "--json"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let status: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(status["tasks"]["succeeded"], TASKS - 1, "{status}");
    assert_eq!(d.task("t150").state, TaskStatus::Succeeded);
    // Ids go on after the stored ones.
    assert_eq!(
        d.submit(&spec(1.0, 1.0, 60.0, 1.0)).expect("Submit"),
        "t301"
    );
}

/// What the sqlite3 shell prints for `sql` on `db`, as an operator would
/// look at a stopped daemon's state.
fn sqlite(db: &std::path::Path, sql: &str) -> String {
    let out = std::process::Command::new("sqlite3")
        .arg(db)
        .arg(sql)
        .output()
        .expect("sqlite3 runs");
    assert!(
        out.status.success(),
        "sqlite3: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap().trim().to_string()
}

/// The fleet scrape config of docs/metrics.md ("Many nodes": prometheus.yml
/// and its file_sd targets file) passes `promtool check config`, and every
/// PromQL query of that page and of the shipped dashboard (its variables
/// given values) passes `promtool check rules`.
#[test]
fn metrics_docs_scrape_config_and_queries_pass_promtool() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let doc = std::fs::read_to_string(root.join("docs/metrics.md")).unwrap();
    let fleet = doc
        .split_once("\n## Many nodes\n")
        .expect("metrics.md has Many nodes")
        .1;
    // The fenced blocks of `lang` in `text`.
    let blocks = |lang: &str| -> Vec<String> {
        fleet
            .split(&format!("```{lang}\n"))
            .skip(1)
            .map(|rest| {
                rest.split_once("```")
                    .expect("a closed block")
                    .0
                    .to_string()
            })
            .collect()
    };
    let yaml = blocks("yaml");
    let config = yaml
        .iter()
        .find(|b| b.starts_with("# prometheus.yml\n"))
        .expect("the prometheus.yml block");
    let targets = yaml
        .iter()
        .find(|b| b.starts_with("# /etc/prometheus/gpu-agent-nodes.yml"))
        .expect("the targets file block");
    let dir = tempfile::tempdir().unwrap();
    let targets_file = dir.path().join("gpu-agent-nodes.yml");
    std::fs::write(&targets_file, targets).unwrap();
    let config = config.replace(
        "/etc/prometheus/gpu-agent-nodes.yml",
        &targets_file.display().to_string(),
    );
    assert_ne!(&config, &yaml[0], "the config names the targets file");
    std::fs::write(dir.path().join("prometheus.yml"), config).unwrap();

    let dashboard: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(root.join("packaging/grafana/gpu-agent-dashboard.json")).unwrap(),
    )
    .unwrap();
    let mut queries: Vec<String> = dashboard["panels"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|p| p["targets"].as_array().cloned().unwrap_or_default())
        .map(|t| t["expr"].as_str().expect("an expr").to_string())
        .collect();
    assert!(queries.len() >= 12, "{queries:?}");
    for block in blocks("text") {
        queries.extend(
            block
                .lines()
                .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
                .map(String::from),
        );
    }
    let rules: String = queries
        .iter()
        .enumerate()
        .map(|(i, q)| {
            let q = q.replace("$node", ".*").replace("$__range", "1h");
            format!(
                "      - record: dashboard:query{i}\n        expr: {}\n",
                serde_json::to_string(&q).unwrap()
            )
        })
        .collect();
    std::fs::write(
        dir.path().join("rules.yml"),
        format!("groups:\n  - name: queries\n    rules:\n{rules}"),
    )
    .unwrap();

    for (what, args) in [
        ("config", ["check", "config", "prometheus.yml"]),
        ("rules", ["check", "rules", "rules.yml"]),
    ] {
        match Command::new("promtool")
            .args(args)
            .current_dir(dir.path())
            .output()
        {
            Ok(out) => assert!(
                out.status.success(),
                "promtool check {what}: {}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            ),
            Err(e) => {
                assert!(
                    std::env::var_os("CI").is_none(),
                    "CI installs promtool (.ci/run): {e}"
                );
                println!("promtool not installed ({e}); {what} not checked");
            }
        }
    }
}
