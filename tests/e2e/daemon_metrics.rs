//! `/metrics`: a scrape of a daemon on the bundled mock host, in the
//! classic text format (checked by `promtool check metrics` where it is
//! installed; CI installs it) and in OpenMetrics for a scraper that asks.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::{Command, Stdio};
use std::time::Duration;

use gpu_agent_dbus::TaskStatus;

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
    for line in [
        "gpu_agent_tasks{state=\"succeeded\"} 1",
        "gpu_agent_submit_duration_seconds_count 1",
        "# TYPE gpu_agent_policy_faults_total counter",
        "# TYPE gpu_agent_gpu_energy_joules gauge",
        "gpu_agent_gpu_power_watts{gpu=\"3\",",
    ] {
        assert!(body.contains(line), "{line} not in the scrape:\n{body}");
    }
    lint(&body);

    // Every series the shipped Grafana dashboard queries is in the scrape.
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
            let rest = log.split_once("serving Prometheus metrics at http://")?.1;
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
        config: Some("metrics_listen = \"127.0.0.1:0\"\n".into()),
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
        let online = format!("gpu_agent_mig_online{{device=\"{device}\",gpu=\"0\",uuid=\"MIG-");
        let line = body
            .lines()
            .find(|l| l.starts_with(&online))
            .unwrap_or_else(|| panic!("{online} not in the scrape:\n{body}"));
        assert!(
            line.contains(",profile=\"3g.20gb\",health=\"ok\"} 1"),
            "{line}"
        );
        for family in ["gpu_agent_mig_busy", "gpu_agent_mig_memory_bytes"] {
            let series = format!("{family}{{device=\"{device}\",gpu=\"0\",");
            assert!(
                body.contains(&series),
                "{series} not in the scrape:\n{body}"
            );
        }
    }
    assert!(
        body.contains("gpu_agent_gpu_online{gpu=\"0\",")
            && !body.contains("gpu_agent_gpu_busy{gpu=\"2\""),
        "the split GPU is a gpu_ series, its instances are not:\n{body}"
    );
    lint(&body);
}
