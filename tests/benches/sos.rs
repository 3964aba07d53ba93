//! Benchmark of the `sos` policy on the published SOS workload (not a timed test).
//!
//! The workload is the one the TRETS/Hercules/STANNIC SOS papers benchmark on:
//! 10,000 jobs on 5 unrelated machines (`sim_5_machines.txt` of the published
//! SOS software, read from [`WORKLOAD`]; `SOS_WORKLOAD=PATH` reads another
//! copy). It is
//! converted as `gpuctl trace import sos` does (five identical devices, run
//! times from the jobs' `runtimes`) and replayed through the real scheduler
//! core by `sim::simulate`.
//!
//! For `sos` (alpha 0.6, as in the published runs) in both readings
//! (`model = baseline`, the default, and `model = paper`) and, side by side as
//! the reference, `greedy-eft`, over several runs (interleaved: run k of every
//! row before run k + 1 of any, so that machine noise hits every row alike) it
//! measures, with tasks placed per second from the medians:
//! - the scheduling work: the time spent inside the policy's `on_event` over
//!   the whole replay, as the core calls it through the plugin ABI (the plugin
//!   file is loaded in-process and a wrapper times each call with the CPU's
//!   time-stamp counter on x86_64, converted to seconds against the clock over
//!   the replay: a clock reading costs well over 100 ns on some virtual
//!   machines, as much as a decision). A call that takes over 1 ms was
//!   interrupted (the thread was descheduled; no call here does a thousandth
//!   of that work): it counts as the run's median call, and how many there
//!   were is printed;
//! - the whole replay (`sim::simulate`: the core, the event heap, metrics), as
//!   the thread's CPU time, and as wall time.
//!
//! Run with `cargo bench -p gpu-agent-tests --bench sos`. It builds the
//! release plugin files first, into `<target>/bench`: a plugin's rlib cannot
//! be linked here, since every plugin rlib defines the same root-module symbol
//! as the `fifo` rlib the agent links.
//!
//! The rows marked `(own thread)` run the same policy as the daemon does,
//! each call handed to the policy's thread and its answer awaited
//! (`gpu_agent_daemon::policy_thread`): their sched. work includes that
//! hand-off, so the difference to the row above is its cost.
//!
//! Environment: `SOS_BENCH_RUNS=N` runs each row N times (default 11);
//! `SOS_AGAINST=DIR` adds both sos rows for another build of the plugin,
//! `DIR/libgpu_agent_policy_sos.so` (say, main's, copied aside), to compare
//! before and after side by side.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use gpu_agent_core::policy::PolicyInstance;
use gpu_agent_core::{apps::AppLibrary, host::Host};
use gpu_agent_daemon::policy_thread;
use gpu_agent_loader::Plugin;
use gpu_agent_plugin_api::{
    abi_stable::{
        sabi_trait::TD_Opaque,
        std_types::{RResult, RString, RVec},
    },
    Decision, DecisionNe, EventNe, Policy, PolicyBox, Policy_TO, View,
};
use gpu_agent_sim as sim;
use gpu_agent_sim::import::sos;
use gpu_agent_sim::input::trace::Trace;

/// Runs per row, unless `SOS_BENCH_RUNS` says otherwise.
const RUNS: usize = 11;
const WORKLOAD: &str = "/work/shared/data/sos/sim_5_machines.txt";
/// The alpha of the published runs (their alpha_i = floor(0.6 p_i)).
const ALPHA: f64 = 0.6;

/// The SOS workload as `gpuctl trace import sos` converts it (docs/import.md).
fn sos_workload(path: &Path) -> (Host, Trace) {
    let (conversion, _) =
        sos::import(path, &sos::Options::default()).unwrap_or_else(|e| panic!("{e}"));
    conversion
        .read_back(&AppLibrary::default())
        .unwrap_or_else(|e| panic!("{e}"))
}

/// A cheap, steady tick count: the time-stamp counter.
#[cfg(target_arch = "x86_64")]
fn ticks() -> u64 {
    // SAFETY: RDTSC exists on every x86_64 CPU and only reads the counter.
    unsafe { std::arch::x86_64::_rdtsc() }
}

/// A steady tick count: nanoseconds since the first call.
#[cfg(not(target_arch = "x86_64"))]
fn ticks() -> u64 {
    static START: std::sync::OnceLock<Instant> = std::sync::OnceLock::new();
    START.get_or_init(Instant::now).elapsed().as_nanos() as u64
}

/// What the timing wrapper records.
#[derive(Default)]
struct Tally {
    /// Ticks spent in each call, in order.
    calls: Mutex<Vec<u64>>,
    /// Assign and Start decisions.
    placed: AtomicU64,
}

/// A policy object whose `on_event` calls are timed.
struct Timed {
    inner: PolicyBox,
    tally: Arc<Tally>,
}

impl Policy for Timed {
    fn on_event(&mut self, view: &View<'_>, event: &EventNe) -> RResult<RVec<DecisionNe>, RString> {
        let start = ticks();
        let answer = self.inner.on_event(view, event);
        let spent = ticks() - start;
        self.tally.calls.lock().unwrap().push(spent);
        if let RResult::ROk(decisions) = &answer {
            let placed = decisions
                .iter()
                .filter(|d| {
                    matches!(
                        d.as_enum(),
                        Ok(Decision::Assign { .. } | Decision::Start { .. })
                    )
                })
                .count();
            self.tally
                .placed
                .fetch_add(placed as u64, Ordering::Relaxed);
        }
        answer
    }
}

/// This thread's CPU time.
fn thread_cpu_time() -> Duration {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid timespec for the call to write.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    assert_eq!(rc, 0, "clock_gettime(CLOCK_THREAD_CPUTIME_ID)");
    Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
}

/// One replay's measurements.
struct Run {
    /// Scheduling work, interrupted calls counted as the median call.
    work: Duration,
    /// Calls that took over 1 ms.
    interrupted: usize,
    replay_cpu: Duration,
    replay_wall: Duration,
    calls: usize,
    placed: u64,
}

/// Builds the release plugin files into `<target>/bench` and loads `sos` and
/// `greedy-eft`.
fn plugins() -> (Plugin, Plugin) {
    // This benchmark runs from <target>/release/deps/.
    let exe = std::env::current_exe().unwrap();
    let target: PathBuf = exe.ancestors().nth(3).unwrap().join("bench");
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap();
    let status = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()))
        .current_dir(root)
        .args(["build", "--quiet", "--release", "--lib"])
        .args([
            "-p",
            "gpu-agent-policy-sos",
            "-p",
            "gpu-agent-policy-greedy-eft",
        ])
        .arg("--target-dir")
        .arg(&target)
        .status()
        .unwrap();
    assert!(status.success(), "cargo build of the plugins failed");
    let load = |file: &str| Plugin::load(&target.join("release").join(file)).unwrap();
    (
        load("libgpu_agent_policy_sos.so"),
        load("libgpu_agent_policy_greedy_eft.so"),
    )
}

fn replay(host: &Host, trace: &Trace, row: &Row) -> Run {
    let name = row.plugin.name();
    let tally = Arc::new(Tally::default());
    let inner = if row.on_thread {
        // As the daemon runs it; the budget never binds here.
        policy_thread::start(row.plugin, row.params.clone(), Duration::from_secs(60)).unwrap()
    } else {
        row.plugin.instantiate(&row.params).unwrap()
    };
    let timed = Timed {
        inner: inner.policy,
        tally: tally.clone(),
    };
    let instance = PolicyInstance {
        abandoned: inner.abandoned,
        ..PolicyInstance::new(name, Policy_TO::from_value(timed, TD_Opaque))
    };
    let (wall, cpu, first_tick) = (Instant::now(), thread_cpu_time(), ticks());
    let outcome = sim::simulate(host, trace, instance, |_| {}).unwrap();
    let replay_ticks = ticks() - first_tick;
    let (replay_cpu, replay_wall) = (thread_cpu_time() - cpu, wall.elapsed());
    assert!(outcome.faults.is_empty(), "{name}: {:?}", outcome.faults);
    assert_eq!(
        outcome.schedule.len(),
        trace.tasks.len(),
        "{name}: not every task ran"
    );
    let seconds_per_tick = replay_wall.as_secs_f64() / replay_ticks as f64;
    let mut calls = std::mem::take(&mut *tally.calls.lock().unwrap());
    let cutoff = (1e-3 / seconds_per_tick) as u64;
    calls.sort_unstable();
    let median = calls[calls.len() / 2];
    let interrupted = calls.iter().filter(|&&t| t > cutoff).count();
    let ticks: u64 = calls
        .iter()
        .map(|&t| if t > cutoff { median } else { t })
        .sum();
    Run {
        work: Duration::from_secs_f64(ticks as f64 * seconds_per_tick),
        interrupted,
        replay_cpu,
        replay_wall,
        calls: calls.len(),
        placed: tally.placed.load(Ordering::Relaxed),
    }
}

fn median(mut xs: Vec<Duration>) -> Duration {
    xs.sort();
    xs[xs.len() / 2]
}

/// What the two tick readings around each timed call cost.
fn tick_overhead() -> Duration {
    const N: u32 = 1_000_000;
    let start = Instant::now();
    let mut sink = 0;
    for _ in 0..N {
        sink += ticks().wrapping_sub(ticks());
    }
    std::hint::black_box(sink);
    start.elapsed() / N
}

/// One row of the table: a plugin file and its parameters.
struct Row {
    name: String,
    plugin: Plugin,
    params: Vec<(String, String)>,
    /// Whether each call is handed to the policy's own thread, as the
    /// daemon does (`gpu_agent_daemon::policy_thread`).
    on_thread: bool,
}

/// The sos rows (both models, alpha 0.6) of one build of the plugin.
fn sos_rows(plugin: &Plugin, build: &str) -> Vec<Row> {
    ["baseline", "paper"]
        .into_iter()
        .map(|model| Row {
            name: format!("sos {model}{build}"),
            plugin: *plugin,
            params: vec![
                ("alpha".to_string(), ALPHA.to_string()),
                ("model".to_string(), model.to_string()),
            ],
            on_thread: false,
        })
        .collect()
}

fn main() {
    let (sos, greedy_eft) = plugins();
    let path = std::env::var("SOS_WORKLOAD").unwrap_or_else(|_| WORKLOAD.into());
    let runs: usize = std::env::var("SOS_BENCH_RUNS").map_or(RUNS, |n| {
        n.parse()
            .ok()
            .filter(|&n| n > 0)
            .unwrap_or_else(|| panic!("SOS_BENCH_RUNS: expected a positive integer, got {n:?}"))
    });
    let (host, trace) = sos_workload(Path::new(&path));
    println!(
        "SOS workload {path}: {} jobs, {} devices",
        trace.tasks.len(),
        host.devices.len()
    );

    let mut rows = sos_rows(&sos, "");
    if let Ok(dir) = std::env::var("SOS_AGAINST") {
        let file = Path::new(&dir).join("libgpu_agent_policy_sos.so");
        let against = Plugin::load(&file).unwrap_or_else(|e| panic!("SOS_AGAINST: {e}"));
        rows.extend(sos_rows(&against, &format!(" [{dir}]")));
    }
    rows.push(Row {
        name: "greedy-eft".into(),
        plugin: greedy_eft,
        params: Vec::new(),
        on_thread: false,
    });
    // The daemon's way: each call handed to the policy's thread and awaited.
    let threaded: Vec<Row> = [&rows[0], rows.last().unwrap()]
        .into_iter()
        .map(|row| Row {
            name: format!("{} (own thread)", row.name),
            plugin: row.plugin,
            params: row.params.clone(),
            on_thread: true,
        })
        .collect();
    rows.extend(threaded);
    let width = rows.iter().map(|r| r.name.len()).max().unwrap_or(0).max(6);
    println!(
        "\n{:<width$} {:>7} {:>7} {:>15} {:>10} {:>15} {:>10} {:>15} {:>11}",
        "policy",
        "placed",
        "calls",
        "sched. work ms",
        "placed/s",
        "replay CPU ms",
        "placed/s",
        "replay wall ms",
        "interrupted"
    );
    let mut results: Vec<Vec<Run>> = rows.iter().map(|_| Vec::new()).collect();
    for _ in 0..runs {
        for (row, out) in rows.iter().zip(&mut results) {
            out.push(replay(&host, &trace, row));
        }
    }
    for (row, runs) in rows.iter().zip(&results) {
        let (placed, calls) = (runs[0].placed, runs[0].calls);
        let work = median(runs.iter().map(|r| r.work).collect());
        let cpu = median(runs.iter().map(|r| r.replay_cpu).collect());
        let wall = median(runs.iter().map(|r| r.replay_wall).collect());
        let interrupted: usize = runs.iter().map(|r| r.interrupted).sum();
        let ms = |d: Duration| d.as_secs_f64() * 1e3;
        let rate = |d: Duration| placed as f64 / d.as_secs_f64();
        println!(
            "{:<width$} {placed:>7} {calls:>7} {:>15.2} {:>10.0} {:>15.2} {:>10.0} {:>15.2} {:>11}",
            row.name,
            ms(work),
            rate(work),
            ms(cpu),
            rate(cpu),
            ms(wall),
            interrupted,
        );
    }
    println!(
        "\nMedians of {runs} runs. sched. work: time inside the policy's on_event \
         (two tick readings per call cost about {} ns); placed: Assign and Start \
         decisions; calls: on_event calls; interrupted: calls over 1 ms in all runs, \
         counted as the median call.",
        tick_overhead().as_nanos()
    );
}
