//! The DVFS paper's cluster model run on files (docs/dvfs.md §3, §6): a
//! host with a `[cluster]` table (formats.md §2), a trace and its profiles,
//! as `gpuctl trace gen dvfs-paper` writes them and `gpuctl simulate` reads
//! them; and the writer of those files.
//!
//! One slot of the model is one second of the trace, so energy in W·slot is
//! J. The tasks' profiles come from their `app` (formats.md §6), with `d` and
//! `t0` scaled so that d + t0 is the task's run time at default clocks
//! (`workload / speed`, or `runtimes`); clocks are the model's normalised
//! ones, not rounded to a clock table (the paper's GPUs are abstract).

use std::fmt::Write as _;

use gpu_agent_core::apps::power_model;
use gpu_agent_core::host::Host;
use gpu_agent_core::metrics::{Completed, EnergySplit, Metrics};
use gpu_agent_dvfs::cluster::{self, Algo, Config, OnlineAlgo, Outcome, Task};
use gpu_agent_dvfs::Profile;

use crate::dvfs_paper::Mode;
use crate::input::host::ClusterSpec;
use crate::input::trace::Trace;
use crate::input::InputError;

/// How tasks are placed: `edl`'s `rule`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Rule {
    /// One of the offline rules, or EDL online.
    Algo(Algo),
    /// The paper's BIN (online only): EDF-WF at slot 0, then first fit.
    BinPack,
}

/// A run of the cluster model with DVFS and its no-DVFS baseline.
#[derive(Debug, Clone)]
pub struct ClusterRun {
    /// The metrics of the DVFS run (formats.md §4), baseline set.
    pub metrics: Metrics,
    /// The DVFS run.
    pub dvfs: Outcome,
    /// The same rule at default clocks.
    pub baseline: Outcome,
}

/// The model's tasks for `trace` (time in seconds = slots), in the trace's
/// order; a gang task or a task of zero length is refused with its line.
pub fn tasks(host: &Host, trace: &Trace, path: &std::path::Path) -> Result<Vec<Task>, InputError> {
    let device = &host.devices[0];
    trace
        .tasks
        .iter()
        .map(|t| {
            let s = &t.spec;
            if s.gpus != 1 {
                return Err(InputError::at(
                    path,
                    Some(t.line),
                    Some("column gpus".into()),
                    "the cluster model runs one GPU per task",
                ));
            }
            let length = s
                .runtimes
                .first()
                .copied()
                .unwrap_or(s.workload / device.speed);
            let app = &s.app;
            let k = length / (app.d + app.t0);
            let power = power_model(app, device.model);
            Ok(Task {
                profile: Profile {
                    p0: power.p0,
                    gamma: power.gamma,
                    c: power.c,
                    delta: app.delta,
                    d: app.d * k,
                    t0: app.t0 * k,
                },
                arrival: s.arrival,
                deadline: s.deadline,
            })
        })
        .collect()
}

/// Runs `tasks` (with their `weights`, for the metrics) on the cluster of
/// `host` and `spec` under `rule`: offline (every arrival at 0, servers stay
/// on) without `sleep_after`, online with it.
pub fn run(
    host: &Host,
    spec: &ClusterSpec,
    tasks: &[Task],
    weights: &[f64],
    rule: Rule,
    theta: f64,
    options: gpu_agent_dvfs::Options,
) -> Result<ClusterRun, String> {
    let cfg = Config {
        pairs_per_server: host.devices.len(),
        idle_w: spec.idle_w,
        turn_on: spec.turn_on_j,
        dvfs: true,
        theta,
        options,
    };
    let mut order: Vec<usize> = (0..tasks.len()).collect();
    order.sort_by(|&a, &b| tasks[a].arrival.total_cmp(&tasks[b].arrival));
    let sorted: Vec<Task> = order.iter().map(|&i| tasks[i]).collect();
    let go = |c: &Config| -> Result<Outcome, String> {
        match (spec.sleep_after, rule) {
            (None, Rule::BinPack) => Err(
                "rule bin-pack is the paper's online BIN: give the [cluster] a sleep_after".into(),
            ),
            (None, Rule::Algo(a)) => {
                if let Some(t) = sorted.iter().find(|t| t.arrival != 0.0) {
                    return Err(format!(
                        "a [cluster] without sleep_after runs the offline model, where every task arrives at 0 (one arrives at {})",
                        t.arrival
                    ));
                }
                Ok(cluster::offline(&sorted, a, c))
            }
            (Some(rho), rule) => {
                let a = match rule {
                    Rule::Algo(Algo::Edl) => OnlineAlgo::Edl,
                    Rule::BinPack => OnlineAlgo::Bin,
                    Rule::Algo(other) => {
                        return Err(format!(
                            "rule {}: the online model (a [cluster] with sleep_after) runs edl or bin-pack",
                            other.name()
                        ))
                    }
                };
                Ok(cluster::online(&sorted, a, c, spec.servers, rho))
            }
        }
    };
    let dvfs = go(&cfg)?;
    let baseline = go(&Config { dvfs: false, ..cfg })?;
    let done: Vec<Completed> = dvfs
        .placed
        .iter()
        .map(|p| Completed {
            arrival: sorted[p.task].arrival,
            deadline: sorted[p.task].deadline,
            weight: weights.get(order[p.task]).copied().unwrap_or(1.0),
            start: p.start,
            end: p.end,
            devices: 1,
        })
        .collect();
    let gpus = spec.servers * cfg.pairs_per_server;
    let mut metrics = Metrics::compute("edl", tasks.len(), Vec::new(), &done, gpus, |_, _| {
        EnergySplit {
            run_j: dvfs.run,
            idle_j: dvfs.idle,
            overhead_j: dvfs.overhead,
        }
    });
    metrics.set_baseline(baseline.total());
    Ok(ClusterRun {
        metrics,
        dvfs,
        baseline,
    })
}

/// The three files of a generated experiment.
#[derive(Debug, Clone, PartialEq)]
pub struct Files {
    /// Host description with its `[cluster]` table (formats.md §2).
    pub host: String,
    /// Trace (formats.md §1): one task a row, `app` naming its profile.
    pub trace: String,
    /// One profile per task (formats.md §6).
    pub apps: String,
}

/// The cluster a generated host describes.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Layout {
    /// m.
    pub servers: usize,
    /// l.
    pub gpus_per_server: usize,
    /// Idle power of a GPU, W.
    pub idle_w: f64,
    /// Δ, J per server turn-on.
    pub turn_on_j: f64,
    /// ρ, written for the online mode only.
    pub sleep_after: u32,
    /// The catalogue model the host names (its idle power is overridden).
    pub model: &'static str,
}

/// `tasks` (from [`crate::dvfs_paper::generate`]) as files; `header` heads
/// each file as `#` comments (how they were made).
pub fn files(mode: Mode, tasks: &[Task], layout: &Layout, header: &str) -> Files {
    let comment: String = header.lines().map(|l| format!("# {l}\n")).collect();
    let mut host = comment.clone();
    let _ = write!(
        host,
        "[cluster]\nservers = {}\nidle_w = {:?}\nturn_on_j = {:?}\n",
        layout.servers, layout.idle_w, layout.turn_on_j
    );
    if mode == Mode::Online {
        let _ = writeln!(host, "sleep_after = {}", layout.sleep_after);
    }
    let _ = write!(
        host,
        "\n[[gpu]]\nmodel = {:?}\ncount = {}\nspeed = 1.0\n",
        layout.model, layout.gpus_per_server
    );
    let mut trace = comment.clone();
    trace.push_str("id,arrival,workload,mem_gb,deadline,weight,app\n");
    let mut apps = comment;
    for (i, t) in tasks.iter().enumerate() {
        let p = &t.profile;
        let _ = writeln!(
            trace,
            "t{i},{},{},0,{},1,t{i}",
            t.arrival,
            p.d + p.t0,
            t.deadline
        );
        let _ = write!(
            apps,
            "\n[[app]]\nname = \"t{i}\"\np0 = {:?}\ngamma = {:?}\nc = {:?}\ndelta = {:?}\nd = {:?}\nt0 = {:?}\n",
            p.p0, p.gamma, p.c, p.delta, p.d, p.t0
        );
    }
    Files { host, trace, apps }
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use gpu_agent_dvfs::{Options, Search};

    use super::*;
    use crate::dvfs_paper::generate;
    use crate::input::{apps, host};

    const LAYOUT: Layout = Layout {
        servers: 512,
        gpus_per_server: 4,
        idle_w: 37.0,
        turn_on_j: 200.0,
        sleep_after: 2,
        model: "A100-SXM4-40GB",
    };

    /// The generated files read back and run.
    fn round_trip(
        mode: Mode,
        util: f64,
        seed: u64,
        rule: Rule,
        opts: Options,
    ) -> (ClusterRun, Vec<Task>) {
        let set = generate(mode, util, seed);
        let f = files(mode, &set, &LAYOUT, "test");
        let (h, spec) = host::parse_with_cluster(Path::new("h.toml"), &f.host).unwrap();
        let lib = apps::parse(Path::new("a.toml"), &f.apps).unwrap();
        let trace = Trace::parse(Path::new("t.csv"), f.trace.as_bytes(), &h, &lib).unwrap();
        let read = tasks(&h, &trace, Path::new("t.csv")).unwrap();
        (
            run(&h, &spec.unwrap(), &read, &[], rule, 0.9, opts).unwrap(),
            set,
        )
    }

    fn cfg(dvfs: bool, opts: Options) -> Config {
        Config {
            pairs_per_server: 4,
            idle_w: 37.0,
            turn_on: 200.0,
            dvfs,
            theta: 0.9,
            options: opts,
        }
    }

    #[test]
    fn files_reproduce_the_paper_model_exactly_offline() {
        let opts = Options {
            search: Search::Code,
            compat: true,
            ..Options::default()
        };
        for rule in [Algo::Edl, Algo::EdfBf, Algo::LptFf] {
            let (got, set) = round_trip(Mode::Offline, 0.2, 5, Rule::Algo(rule), opts);
            // The tasks read back are the generated ones, bit for bit.
            let want = cluster::offline(&set, rule, &cfg(true, opts));
            let base = cluster::offline(&set, rule, &cfg(false, opts));
            assert_eq!(got.dvfs, want);
            assert_eq!(got.baseline, base);
            let m = &got.metrics;
            assert_eq!(m.energy_j, want.total());
            assert_eq!(
                (m.energy_run_j, m.energy_idle_j, m.energy_overhead_j),
                (want.run, want.idle, want.overhead)
            );
            assert!(want.overhead > 0.0 && want.idle > 0.0);
            assert_eq!(m.energy_baseline_j, base.total());
            assert_eq!(m.energy_saving, 1.0 - want.total() / base.total());
            assert_eq!(m.dmc, want.misses);
            assert_eq!(m.tasks, set.len());
        }
    }

    #[test]
    fn files_reproduce_the_paper_model_exactly_online() {
        let opts = Options::default();
        let (got, set) = round_trip(Mode::Online, 0.1, 2, Rule::Algo(Algo::Edl), opts);
        let want = cluster::online(&set, OnlineAlgo::Edl, &cfg(true, opts), 512, 2);
        assert_eq!(got.dvfs, want);
        assert_eq!(got.metrics.energy_overhead_j, want.overhead);
        assert!(want.turn_ons > 0);
        let (bin, _) = round_trip(Mode::Online, 0.1, 2, Rule::BinPack, opts);
        assert_eq!(
            bin.dvfs,
            cluster::online(&set, OnlineAlgo::Bin, &cfg(true, opts), 512, 2)
        );
    }

    #[test]
    fn refuses_what_the_model_cannot_run() {
        let set = generate(Mode::Offline, 0.01, 1);
        let f = files(Mode::Offline, &set, &LAYOUT, "test");
        let (h, spec) = host::parse_with_cluster(Path::new("h.toml"), &f.host).unwrap();
        let spec = spec.unwrap();
        assert_eq!(spec.sleep_after, None);
        // The trace's weights reach the metrics.
        let edl = Rule::Algo(Algo::Edl);
        let one = run(&h, &spec, &set, &[], edl, 1.0, Options::default()).unwrap();
        let twice = vec![2.0; set.len()];
        let two = run(&h, &spec, &set, &twice, edl, 1.0, Options::default()).unwrap();
        assert!(one.metrics.twct > 0.0);
        assert_eq!(two.metrics.twct, 2.0 * one.metrics.twct);
        let mut late = set.clone();
        late[3].arrival = 1.5;
        let err = run(
            &h,
            &spec,
            &late,
            &[],
            Rule::Algo(Algo::Edl),
            1.0,
            Options::default(),
        )
        .unwrap_err();
        assert!(err.contains("one arrives at 1.5"), "{err}");
        let err = run(&h, &spec, &set, &[], Rule::BinPack, 1.0, Options::default()).unwrap_err();
        assert!(err.contains("online BIN"), "{err}");
        let online = ClusterSpec {
            sleep_after: Some(2),
            ..spec
        };
        let err = run(
            &h,
            &online,
            &set,
            &[],
            Rule::Algo(Algo::EdfWf),
            1.0,
            Options::default(),
        )
        .unwrap_err();
        assert!(err.starts_with("rule edf-wf: the online model"), "{err}");
        let lib = apps::parse(Path::new("a.toml"), &f.apps).unwrap();
        // The first task as a gang of 2.
        let gang: String = f
            .trace
            .lines()
            .map(|l| match l {
                "id,arrival,workload,mem_gb,deadline,weight,app" => format!("{l},gpus\n"),
                l if l.starts_with("t0,") => format!("{l},2\n"),
                l if l.starts_with('#') => format!("{l}\n"),
                l => format!("{l},1\n"),
            })
            .collect();
        let trace = Trace::parse(Path::new("t.csv"), gang.as_bytes(), &h, &lib).unwrap();
        let err = tasks(&h, &trace, Path::new("t.csv"))
            .unwrap_err()
            .to_string();
        assert_eq!(
            err,
            "t.csv:3: column gpus: the cluster model runs one GPU per task"
        );
    }
}
