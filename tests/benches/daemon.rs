//! Benchmark of `gpu-agentd` through a real bus (not a timed test).
//!
//! Starts a private dbus-daemon and the release `gpu-agentd` on the mock host
//! (durable SQLite state in a temporary directory), then measures:
//! - `Submit` round-trip latency from one client, side by side with
//!   `org.freedesktop.DBus.Peer.Ping` to the same daemon (the bus and zbus
//!   without any of the agent's work) as the baseline;
//! - sustained submissions per second from 8 concurrent clients;
//! - the daemon's idle CPU and resident memory, fresh and once the work has
//!   drained.
//!
//! Run with `bench/daemon.sh` (it builds the release binaries first).

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use gpu_agent_dbus::private_bus::PrivateBus;
use gpu_agent_dbus::{Agent1Proxy, SubmitSpec, BUS_NAME};

const RUNS: usize = 5;
const LATENCY_CALLS: usize = 2000;
const CLIENTS: usize = 8;
const CALLS_PER_CLIENT: usize = 1000;
const IDLE_SECONDS: u64 = 10;

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_path_buf()
}

struct Daemon(Child);

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    sorted[((sorted.len() - 1) as f64 * p).round() as usize]
}

fn median(mut xs: Vec<f64>) -> f64 {
    xs.sort_by(f64::total_cmp);
    xs[xs.len() / 2]
}

/// utime + stime of `pid`, seconds.
fn cpu_seconds(pid: u32) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    let after_comm = &stat[stat.rfind(')').unwrap() + 2..];
    let fields: Vec<&str> = after_comm.split_whitespace().collect();
    // Fields 14 and 15 of stat; 12 and 13 after the command name.
    let ticks: f64 = fields[11].parse::<f64>().unwrap() + fields[12].parse::<f64>().unwrap();
    ticks
        / nix::unistd::sysconf(nix::unistd::SysconfVar::CLK_TCK)
            .unwrap()
            .unwrap() as f64
}

/// A `/proc/<pid>/status` field in MiB.
fn status_mib(pid: u32, field: &str) -> f64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let line = status.lines().find(|l| l.starts_with(field)).unwrap();
    let kb: f64 = line.split_whitespace().nth(1).unwrap().parse().unwrap();
    kb / 1024.0
}

/// The daemon's CPU use (%) over `IDLE_SECONDS` after 2 s of quiet, and its RSS (MiB).
async fn idle(pid: u32) -> (f64, f64) {
    tokio::time::sleep(Duration::from_secs(2)).await;
    let cpu0 = cpu_seconds(pid);
    tokio::time::sleep(Duration::from_secs(IDLE_SECONDS)).await;
    let cpu = (cpu_seconds(pid) - cpu0) / IDLE_SECONDS as f64 * 100.0;
    (cpu, status_mib(pid, "VmRSS:"))
}

fn main() {
    let release = root().join("target/release");
    let daemon_bin = release.join("gpu-agentd");
    assert!(
        daemon_bin.exists(),
        "{} is missing: run bench/daemon.sh (it builds the release binaries)",
        daemon_bin.display()
    );
    let bus = PrivateBus::start().expect("private bus");
    let state = tempfile::tempdir_in(root().join("target")).unwrap();
    let plugins = tempfile::tempdir().unwrap();
    std::fs::copy(
        release.join("libgpu_agent_policy_fifo.so"),
        plugins.path().join("libgpu_agent_policy_fifo.so"),
    )
    .expect("release fifo plugin (run bench/daemon.sh)");
    let daemon = Daemon(
        Command::new(&daemon_bin)
            .args(["--session", "--policy", "fifo", "--time-scale", "1000000"])
            .arg("--mock")
            .arg(root().join("examples/host.toml"))
            .arg("--state-dir")
            .arg(state.path())
            .arg("--plugin-dir")
            .arg(plugins.path())
            .env("DBUS_SESSION_BUS_ADDRESS", bus.address())
            .env("GPU_AGENT_LOG", "warn")
            .stdin(Stdio::null())
            .spawn()
            .expect("gpu-agentd starts"),
    );
    let pid = daemon.0.id();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let connect = || async {
            zbus::connection::Builder::address(bus.address())
                .unwrap()
                .build()
                .await
                .unwrap()
        };
        let conn = connect().await;
        let dbus = zbus::fdo::DBusProxy::new(&conn).await.unwrap();
        let deadline = Instant::now() + Duration::from_secs(20);
        while !dbus.name_has_owner(BUS_NAME.try_into().unwrap()).await.unwrap() {
            assert!(Instant::now() < deadline, "gpu-agentd did not appear on the bus");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let agent = Agent1Proxy::new(&conn).await.unwrap();
        let (fresh_cpu, fresh_rss) = idle(pid).await;
        let peer = zbus::fdo::PeerProxy::builder(&conn)
            .destination(BUS_NAME)
            .unwrap()
            .path(gpu_agent_dbus::AGENT_PATH)
            .unwrap()
            .build()
            .await
            .unwrap();
        let spec = SubmitSpec::new(1.0, 1.0, 600.0, 1.0).to_dict();
        for _ in 0..200 {
            agent.submit(spec.clone()).await.unwrap();
            peer.ping().await.unwrap();
        }

        let (mut submit_p50, mut submit_p99, mut ping_p50, mut ping_p99) =
            (Vec::new(), Vec::new(), Vec::new(), Vec::new());
        for _ in 0..RUNS {
            let mut submit = Vec::with_capacity(LATENCY_CALLS);
            let mut ping = Vec::with_capacity(LATENCY_CALLS);
            for _ in 0..LATENCY_CALLS {
                let t = Instant::now();
                agent.submit(spec.clone()).await.unwrap();
                submit.push(t.elapsed().as_secs_f64() * 1e3);
                let t = Instant::now();
                peer.ping().await.unwrap();
                ping.push(t.elapsed().as_secs_f64() * 1e3);
            }
            submit.sort_by(f64::total_cmp);
            ping.sort_by(f64::total_cmp);
            submit_p50.push(percentile(&submit, 0.5));
            submit_p99.push(percentile(&submit, 0.99));
            ping_p50.push(percentile(&ping, 0.5));
            ping_p99.push(percentile(&ping, 0.99));
        }

        let mut clients = Vec::new();
        for _ in 0..CLIENTS {
            let conn = connect().await;
            clients.push(Agent1Proxy::new(&conn).await.unwrap());
        }
        let mut rates = Vec::new();
        for _ in 0..RUNS {
            let t = Instant::now();
            let mut handles = Vec::new();
            for client in &clients {
                let (client, spec) = (client.clone(), spec.clone());
                handles.push(tokio::spawn(async move {
                    for _ in 0..CALLS_PER_CLIENT {
                        client.submit(spec.clone()).await.unwrap();
                    }
                }));
            }
            for h in handles {
                h.await.unwrap();
            }
            rates.push((CLIENTS * CALLS_PER_CLIENT) as f64 / t.elapsed().as_secs_f64());
        }
        let submitted = 200 + RUNS * (LATENCY_CALLS + CLIENTS * CALLS_PER_CLIENT);

        // Let the work drain, then watch the daemon do nothing.
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let waiting = agent.list_tasks("queued").await.unwrap().len()
                + agent.list_tasks("assigned").await.unwrap().len()
                + agent.list_tasks("running").await.unwrap().len();
            if waiting == 0 {
                break;
            }
            assert!(Instant::now() < deadline, "{waiting} tasks still waiting");
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        drop(clients);
        let (loaded_cpu, loaded_rss) = idle(pid).await;

        println!("gpu-agentd through a private dbus-daemon, mock host (4 GPUs), SQLite WAL synchronous=FULL");
        println!("{RUNS} runs; medians of the per-run figures; {submitted} tasks submitted in all\n");
        println!("| measure | Submit | baseline: Peer.Ping | ratio |");
        println!("|---|---|---|---|");
        let (s50, p50) = (median(submit_p50), median(ping_p50));
        let (s99, p99) = (median(submit_p99), median(ping_p99));
        println!("| round trip p50, ms ({LATENCY_CALLS} calls/run) | {s50:.3} | {p50:.3} | {:.2}x |", s50 / p50);
        println!("| round trip p99, ms | {s99:.3} | {p99:.3} | {:.2}x |", s99 / p99);
        println!(
            "| submissions/s, {CLIENTS} clients x {CALLS_PER_CLIENT} | {:.0} | | |",
            median(rates)
        );
        println!("| idle CPU over {IDLE_SECONDS} s, fresh / after the load, % | {fresh_cpu:.3} / {loaded_cpu:.3} | | |");
        println!("| RSS idle, fresh / after the load, MiB | {fresh_rss:.1} / {loaded_rss:.1} | | |");
        println!("| RSS peak, MiB | {:.1} | | |", status_mib(pid, "VmHWM:"));
    });
    drop(daemon);
}
