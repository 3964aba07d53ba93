//! Benchmark of `gpu-agentd` through a real bus (not a timed test).
//!
//! Starts a private dbus-daemon and the release `gpu-agentd` on the mock host
//! (4 GPUs, durable SQLite state in a temporary directory, time scale 1000:
//! a task of workload 1 runs 1 ms on a GPU of speed 1), then measures:
//! - `Submit` round-trip latency from one client, side by side with
//!   `org.freedesktop.DBus.Peer.Ping` to the same daemon (the bus and zbus
//!   without any of the agent's work) as the baseline;
//! - under a backlog: 8 clients submitting 50,000 tasks while the earlier
//!   ones run and finish (the GPUs drain about 2,850 a second, so the
//!   backlog grows), then the same clients pinging as often: rate and p99
//!   of each, side by side;
//! - the daemon's idle CPU and resident memory: fresh, after 50,000
//!   finished tasks, after listing them all page by page, and the same
//!   after 500,000 (`DAEMON_BENCH_LONG=0` skips the 500,000); the peak.
//!   `DAEMON_BENCH_RUNS=N` makes N latency and backlog runs (default 3);
//! - the CPU each process (daemon, bus, clients) spends per call under the
//!   backlog, and the disk's own `fdatasync` latency (the floor under a
//!   durable reply).
//!
//! Run with `bench/daemon.sh` (it builds the release binaries first);
//! `DAEMON_BENCH_BIN_DIR=DIR` runs another build's `gpu-agentd` and fifo
//! plugin from DIR instead (a baseline side by side).

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use gpu_agent_dbus::private_bus::PrivateBus;
use gpu_agent_dbus::{Agent1Proxy, Dict, SubmitSpec, BUS_NAME};
use zbus::fdo::PeerProxy;

const LATENCY_CALLS: usize = 2000;
const CLIENTS: usize = 8;
/// Submissions per backlog run, over all clients.
const BACKLOG_TASKS: usize = 50_000;
/// Finished tasks at the long mark.
const LONG_TASKS: usize = 500_000;
const IDLE_SECONDS: u64 = 10;
/// Appends timed by `fdatasync_floor`.
const SYNC_SAMPLES: usize = 1000;

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

/// Latency (p50, p99, ms) of `SYNC_SAMPLES` appends of 4 KiB to a file in
/// `dir`, each followed by an `fdatasync`: the floor under a durable reply
/// on this disk, as the daemon's WAL sees it.
fn fdatasync_floor(dir: &Path) -> (f64, f64) {
    use std::io::Write;
    let path = dir.join("fdatasync-probe");
    let mut file = std::fs::File::create(&path).unwrap();
    let page = [0x5au8; 4096];
    let mut ms = Vec::with_capacity(SYNC_SAMPLES);
    for _ in 0..SYNC_SAMPLES {
        let t = Instant::now();
        file.write_all(&page).unwrap();
        file.sync_data().unwrap();
        ms.push(t.elapsed().as_secs_f64() * 1e3);
    }
    std::fs::remove_file(path).unwrap();
    ms.sort_by(f64::total_cmp);
    (percentile(&ms, 0.5), percentile(&ms, 0.99))
}

/// The daemon's CPU use (%) over `IDLE_SECONDS` after 2 s of quiet, and its RSS (MiB).
async fn idle(pid: u32) -> (f64, f64) {
    tokio::time::sleep(Duration::from_secs(2)).await;
    let cpu0 = cpu_seconds(pid);
    tokio::time::sleep(Duration::from_secs(IDLE_SECONDS)).await;
    let cpu = (cpu_seconds(pid) - cpu0) / IDLE_SECONDS as f64 * 100.0;
    (cpu, status_mib(pid, "VmRSS:"))
}

/// What one client does `n` times: a `Submit` or a `Peer.Ping`.
#[derive(Clone)]
enum Call {
    Submit(Agent1Proxy<'static>, Dict),
    Ping(PeerProxy<'static>),
}

impl Call {
    async fn once(&self) {
        match self {
            Call::Submit(agent, spec) => {
                agent.submit(spec.clone()).await.unwrap();
            }
            Call::Ping(peer) => peer.ping().await.unwrap(),
        }
    }
}

/// `calls` run concurrently, `n` times each: (calls per second, p99 ms,
/// CPU microseconds per call of each of `pids`: the daemon, the bus, this process).
async fn concurrently(calls: Vec<Call>, n: usize, pids: [u32; 3]) -> (f64, f64, [f64; 3]) {
    let cpu0 = pids.map(cpu_seconds);
    let t = Instant::now();
    let handles: Vec<_> = calls
        .into_iter()
        .map(|call| {
            tokio::spawn(async move {
                let mut ms = Vec::with_capacity(n);
                for _ in 0..n {
                    let t = Instant::now();
                    call.once().await;
                    ms.push(t.elapsed().as_secs_f64() * 1e3);
                }
                ms
            })
        })
        .collect();
    let mut ms = Vec::new();
    for h in handles {
        ms.extend(h.await.unwrap());
    }
    let rate = ms.len() as f64 / t.elapsed().as_secs_f64();
    let cpu1 = pids.map(cpu_seconds);
    let per_call = std::array::from_fn(|i| (cpu1[i] - cpu0[i]) / ms.len() as f64 * 1e6);
    ms.sort_by(f64::total_cmp);
    (rate, percentile(&ms, 0.99), per_call)
}

/// Tasks not yet ended.
async fn waiting(agent: &Agent1Proxy<'_>) -> usize {
    let mut n = 0;
    for state in ["queued", "assigned", "running"] {
        n += agent.all_tasks(state).await.unwrap().len();
    }
    n
}

/// Waits until every task has ended, saying how it goes on stderr.
async fn drain(agent: &Agent1Proxy<'_>) {
    let give_up = Instant::now() + Duration::from_secs(1800);
    loop {
        let left = waiting(agent).await;
        if left == 0 {
            return;
        }
        assert!(
            Instant::now() < give_up,
            "{left} tasks still waiting after 30 min"
        );
        eprint!("\rdraining: {left} tasks waiting   ");
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}

/// A task that runs a microsecond: it leaves no backlog behind.
fn tiny() -> Dict {
    SubmitSpec::new(0.001, 1.0, 600.0, 1.0).to_dict()
}

/// Submits `n` tiny tasks from `clients`, then waits for them to end.
async fn run_through(
    agent: &Agent1Proxy<'_>,
    clients: &[Agent1Proxy<'static>],
    n: usize,
    pids: [u32; 3],
) {
    let spec = tiny();
    let mut done = 0;
    while done < n {
        let per_client = ((n - done).min(50_000) / clients.len()).max(1);
        let calls = clients
            .iter()
            .map(|c| Call::Submit(c.clone(), spec.clone()))
            .collect();
        concurrently(calls, per_client, pids).await;
        done += per_client * clients.len();
        eprint!("\rsubmitted {done} of {n}   ");
        drain(agent).await;
    }
    eprintln!();
}

/// RSS (MiB) after listing every task page by page.
async fn rss_after_listing(agent: &Agent1Proxy<'_>, pid: u32) -> f64 {
    agent.all_tasks("").await.unwrap();
    tokio::time::sleep(Duration::from_secs(2)).await;
    status_mib(pid, "VmRSS:")
}

fn main() {
    // DAEMON_BENCH_BIN_DIR: another build's gpu-agentd and fifo plugin (a
    // baseline to compare with); target/release by default.
    let release = std::env::var_os("DAEMON_BENCH_BIN_DIR")
        .map_or_else(|| root().join("target/release"), PathBuf::from);
    let daemon_bin = release.join("gpu-agentd");
    assert!(
        daemon_bin.exists(),
        "{} is missing: run bench/daemon.sh (it builds the release binaries)",
        daemon_bin.display()
    );
    let long = std::env::var("DAEMON_BENCH_LONG").map_or(true, |v| v != "0");
    let runs: usize = std::env::var("DAEMON_BENCH_RUNS").map_or(3, |v| {
        v.parse()
            .ok()
            .filter(|&n| n > 0)
            .expect("DAEMON_BENCH_RUNS is a count of runs, 1 or more")
    });
    let bus = PrivateBus::start().expect("private bus");
    let state = tempfile::tempdir_in(root().join("target")).unwrap();
    let (sync_p50, sync_p99) = fdatasync_floor(state.path());
    let plugins = tempfile::tempdir().unwrap();
    std::fs::copy(
        release.join("libgpu_agent_policy_fifo.so"),
        plugins.path().join("libgpu_agent_policy_fifo.so"),
    )
    .expect("release fifo plugin (run bench/daemon.sh)");
    let daemon = Daemon(
        Command::new(&daemon_bin)
            .args(["--session", "--policy", "fifo", "--time-scale", "1000"])
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
    let pids = [pid, bus.pid(), std::process::id()];
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
        let peer_of = |conn: zbus::Connection| async move {
            PeerProxy::builder(&conn)
                .destination(BUS_NAME)
                .unwrap()
                .path(gpu_agent_dbus::AGENT_PATH)
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
        let peer = peer_of(conn.clone()).await;
        let tiny = tiny();
        for _ in 0..200 {
            agent.submit(tiny.clone()).await.unwrap();
            peer.ping().await.unwrap();
        }

        let (mut submit_p50, mut submit_p99, mut ping_p50, mut ping_p99) =
            (Vec::new(), Vec::new(), Vec::new(), Vec::new());
        for _ in 0..runs {
            let mut submit = Vec::with_capacity(LATENCY_CALLS);
            let mut ping = Vec::with_capacity(LATENCY_CALLS);
            for _ in 0..LATENCY_CALLS {
                let t = Instant::now();
                agent.submit(tiny.clone()).await.unwrap();
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
        drain(&agent).await;

        let mut clients = Vec::new();
        let mut peers = Vec::new();
        for _ in 0..CLIENTS {
            let conn = connect().await;
            clients.push(Agent1Proxy::new(&conn).await.unwrap());
            peers.push(peer_of(conn).await);
        }
        // Workload 1: 1 ms on a GPU of speed 1 at time scale 1000, so the
        // four GPUs (speeds 1, 1, 0.6, 0.25) end about 2,850 tasks a second
        // and the backlog grows while the clients submit.
        let unit = SubmitSpec::new(1.0, 1.0, 600.0, 1.0).to_dict();
        let per_client = BACKLOG_TASKS / CLIENTS;
        let (mut submit_rate, mut submit_tail, mut ping_rate, mut ping_tail, mut backlog) =
            (Vec::new(), Vec::new(), Vec::new(), Vec::new(), Vec::new());
        let (mut submit_cpu, mut ping_cpu) = (Vec::new(), Vec::new());
        for run in 0..runs {
            eprintln!("backlog run {} of {runs}", run + 1);
            let calls = clients
                .iter()
                .map(|c| Call::Submit(c.clone(), unit.clone()))
                .collect();
            let (rate, p99, cpu) = concurrently(calls, per_client, pids).await;
            submit_rate.push(rate);
            submit_tail.push(p99);
            submit_cpu.push(cpu);
            backlog.push(waiting(&agent).await as f64);
            let calls = peers.iter().map(|p| Call::Ping(p.clone())).collect();
            let (rate, p99, cpu) = concurrently(calls, per_client, pids).await;
            ping_rate.push(rate);
            ping_tail.push(p99);
            ping_cpu.push(cpu);
            drain(&agent).await;
        }
        eprintln!();
        let finished = 200 + runs * (LATENCY_CALLS + CLIENTS * per_client);
        let (mid_cpu, mid_rss) = idle(pid).await;
        let mid_listed = rss_after_listing(&agent, pid).await;
        let long_rss = if long {
            run_through(&agent, &clients, LONG_TASKS.saturating_sub(finished), pids).await;
            let (_, rss) = idle(pid).await;
            Some((rss, rss_after_listing(&agent, pid).await))
        } else {
            None
        };
        drop(clients);

        println!("gpu-agentd through a private dbus-daemon, mock host (4 GPUs), time scale 1000, SQLite WAL, one fdatasync per engine round");
        println!("{runs} runs; medians of the per-run figures\n");
        println!("| measure | Submit | baseline: Peer.Ping | ratio |");
        println!("|---|---|---|---|");
        let (s50, p50) = (median(submit_p50), median(ping_p50));
        let (s99, p99) = (median(submit_p99), median(ping_p99));
        println!("| one client: round trip p50, ms ({LATENCY_CALLS} calls/run) | {s50:.3} | {p50:.3} | {:.2}x |", s50 / p50);
        println!("| one client: round trip p99, ms | {s99:.3} | {p99:.3} | {:.2}x |", s99 / p99);
        let (sr, pr) = (median(submit_rate), median(ping_rate));
        let (st, pt) = (median(submit_tail), median(ping_tail));
        println!(
            "| {CLIENTS} clients x {per_client} under a backlog: calls/s | {sr:.0} | {pr:.0} | {:.2}x |",
            sr / pr
        );
        println!("| {CLIENTS} clients under a backlog: p99, ms | {st:.2} | {pt:.2} | {:.2}x |", st / pt);
        let cpu_median = |runs: &[[f64; 3]], i: usize| median(runs.iter().map(|c| c[i]).collect());
        for (i, who) in ["gpu-agentd", "dbus-daemon", "the clients"].iter().enumerate() {
            let (s, p) = (cpu_median(&submit_cpu, i), cpu_median(&ping_cpu, i));
            println!("| {CLIENTS} clients under a backlog: CPU of {who} per call, us | {s:.0} | {p:.0} | {:.2}x |", s / p);
        }
        println!("| 4 KiB append + fdatasync on the state's disk, before the daemon starts: p50 / p99, ms | {sync_p50:.2} / {sync_p99:.2} | | |");
        println!("| backlog when the submissions ended, tasks | {:.0} | | |", median(backlog));
        println!("| idle CPU over {IDLE_SECONDS} s, fresh / after {finished} tasks, % | {fresh_cpu:.3} / {mid_cpu:.3} | | |");
        println!("| RSS, fresh, MiB | {fresh_rss:.1} | | |");
        println!("| RSS after {finished} finished tasks / after listing them all, MiB | {mid_rss:.1} / {mid_listed:.1} | | |");
        if let Some((rss, listed)) = long_rss {
            println!("| RSS after {LONG_TASKS} finished tasks / after listing them all, MiB | {rss:.1} / {listed:.1} | | |");
        }
        println!("| RSS peak, MiB | {:.1} | | |", status_mib(pid, "VmHWM:"));
    });
    drop(daemon);
}
