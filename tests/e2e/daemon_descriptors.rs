//! A flood of connections cannot starve task starts of file descriptors:
//! the `/metrics` listener serves a bounded number of connections at once
//! and drops idle ones, and a task that cannot start for want of a
//! descriptor waits again instead of failing.

use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

use gpu_agent_dbus::TaskStatus;

use crate::daemon::{spec, wait_for, Daemon, Settings};

const LIMIT: Duration = Duration::from_secs(60);
/// Connections the flood opens and holds, sending nothing (half-open
/// requests, as a scanner or a stuck scraper leaves them).
const FLOOD: usize = 400;
const TASKS: usize = 12;
/// Descriptors the daemon may open beyond those it holds at the start: one
/// more than the listener's cap on connections (16), too few for a start.
const SPARE: u64 = 17;

/// The daemon's open descriptors.
fn open_descriptors(pid: u32) -> u64 {
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .expect("the daemon's descriptors")
        .count() as u64
}

/// Sets the daemon's descriptor limit, soft and hard.
fn limit_descriptors(pid: u32, n: u64) {
    let limit = libc::rlimit {
        rlim_cur: n,
        rlim_max: n,
    };
    // SAFETY: `limit` is a valid rlimit; the old limit is not asked for.
    let rc = unsafe {
        libc::prlimit(
            pid as libc::pid_t,
            libc::RLIMIT_NOFILE,
            &limit,
            std::ptr::null_mut(),
        )
    };
    assert_eq!(rc, 0, "prlimit: {}", std::io::Error::last_os_error());
}

/// The address `/metrics` is served at, from `d`'s log.
fn metrics_addr(d: &Daemon) -> SocketAddr {
    wait_for("the metrics address in the log", LIMIT, || {
        let log = d.stderr();
        let rest = log.rsplit_once("serving Prometheus metrics at http://")?.1;
        rest.split_once("/metrics")?.0.parse().ok()
    })
}

#[test]
fn daemon_descriptors_a_connection_flood_fails_no_task() {
    let d = Daemon::start_with(Settings {
        config: Some("metrics_listen = \"127.0.0.1:0\"\n".into()),
        ..Settings::default()
    });
    let addr = metrics_addr(&d);
    // Room for a few task starts beyond what the daemon holds now, far
    // fewer than the flood.
    let pid = d.pid();
    limit_descriptors(pid, open_descriptors(pid) + SPARE);
    let flood: Vec<TcpStream> = (0..FLOOD)
        // Until the listen backlog is full too.
        .map_while(|_| TcpStream::connect_timeout(&addr, Duration::from_millis(200)).ok())
        .collect();
    assert!(flood.len() > 100, "only {} connections", flood.len());

    // Commands: each start opens its log file and pipes.
    let ids: Vec<String> = (0..TASKS)
        .map(|_| {
            let mut s = spec(1.0, 1.0, 1e6, 1.0);
            s.command = vec!["/bin/true".into()];
            d.submit(&s).expect("Submit")
        })
        .collect();
    // The connections the listener holds leave a starting task too few
    // descriptors: it waits again, and fails nothing.
    wait_for("a start that waited again", LIMIT, || {
        for id in &ids {
            let task = d.task(id);
            assert!(
                !task.state.is_terminal() || task.state == TaskStatus::Succeeded,
                "{id} ended {}: {:?}",
                task.state,
                task.reason
            );
        }
        d.stderr().contains("; it waits again in 1 s").then_some(())
    });
    println!(
        "{} connections held; {} task start(s) waited again so far",
        flood.len(),
        d.stderr().matches("; it waits again in 1 s").count()
    );
    // Once the flood ends, every task runs.
    drop(flood);
    for id in &ids {
        d.wait_state(id, TaskStatus::Succeeded, LIMIT);
    }
}
