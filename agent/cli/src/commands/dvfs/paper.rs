//! `gpuctl dvfs paper`: the DVFS paper's experiments on its own cluster model
//! (docs/dvfs.md §3, §4): seeded task sets, each run with and without DVFS
//! under the same rule, the energy split and the saving.

use std::io::Write as _;

use anyhow::{bail, Context, Result};
use clap::ValueEnum;
use gpu_agent_dvfs::cluster::{self, Algo, Config, OnlineAlgo, Outcome};
use gpu_agent_dvfs::{Options, Search};
use gpu_agent_sim::atomic::AtomicFile;
use gpu_agent_sim::dvfs_paper::{generate, Mode};
use serde::Serialize;

use crate::output::emit_json;
use crate::table::{Align, Table};

const EXAMPLE: &str = "Examples (the paper's offline rows, l = 1, U = 1.0 and l = 16, U = 1.6; an online run):\n  gpuctl dvfs paper --gpus-per-server 1 --util 1.0 --sets 20 --compat\n  gpuctl dvfs paper --gpus-per-server 16 --util 1.6 --theta 1 --sets 20 --compat --json\n  gpuctl dvfs paper --mode online --gpus-per-server 16 --util 1.6 --sets 1 --schedule tasks.csv";

/// Run the DVFS paper's experiments: 2048 GPU-CPU pairs in servers of L,
/// seeded task sets placed by a rule with and without DVFS; print the mean
/// energy (run, idle, turn-on overhead, total; W x slot), servers turned on,
/// deadline misses and the saving.
///
/// Offline: int(2048 U) tasks at slot 0, servers stay on. Online: 819 tasks at
/// slot 0 and int(2048 U) more over slots 1 ... 1439; a server with no busy
/// pair for --rho slots turns off (rules: edl, bin).
///
/// Set s uses seed SEED + s. Without --compat the agent's rule applies: a task
/// that would miss its deadline at its optimal clocks is re-solved on it, and
/// a failed readjustment does not fit (no misses introduced by DVFS).
#[derive(clap::Args)]
#[command(after_help = EXAMPLE)]
pub struct PaperArgs {
    /// Offline (every task at slot 0) or online (arrivals over 1440 slots).
    #[arg(long, value_enum, default_value_t = ModeArg::Offline)]
    mode: ModeArg,
    /// GPU-CPU pairs per server (l).
    #[arg(long, value_name = "L", default_value_t = 1)]
    gpus_per_server: usize,
    /// Utilisation U: int(2048 U) tasks.
    #[arg(long, value_name = "U", default_value_t = 1.0)]
    util: f64,
    /// The placement rule.
    #[arg(long, value_enum, default_value_t = AlgoArg::Edl)]
    algo: AlgoArg,
    /// EDL's theta: readjust a task only into a slack above max(theta t, t_min).
    #[arg(long, default_value_t = 1.0)]
    theta: f64,
    /// Algorithm 1's search: the authors' grid or the paper's dense one.
    #[arg(long, default_value = "code", value_parser = ["code", "paper"])]
    search: String,
    /// Reproduce the authors' code, its deadline misses included.
    #[arg(long)]
    compat: bool,
    /// Task sets to average over.
    #[arg(long, value_name = "N", default_value_t = 20)]
    sets: u64,
    /// Seed of the first set.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Idle power of a pair, W (the paper: 24 W CPU + 13 W GPU).
    #[arg(long, value_name = "W", default_value_t = 37.0)]
    idle_w: f64,
    /// Energy of one server turn-on, W x slot.
    #[arg(long, value_name = "E", default_value_t = 200.0)]
    turn_on: f64,
    /// Online: idle slots after which a server turns off.
    #[arg(long, default_value_t = 2)]
    rho: u32,
    /// Write the DVFS run of the first set task by task (CSV): where and when
    /// each task ran, its class, whether it was readjusted, V, fc, fm, its
    /// time, power and energy, its energy at default clocks, and whether it
    /// missed its deadline.
    #[arg(long, value_name = "FILE.csv")]
    schedule: Option<std::path::PathBuf>,
    /// Print JSON instead of a table.
    #[arg(long)]
    json: bool,
}

/// The per-task columns of `--schedule` (docs/dvfs.md §6).
const SCHEDULE_HEADER: &str =
    "task,server,pair,start,end,deadline,class,readjusted,v,fc,fm,t,p,energy,energy_default,missed\n";

/// `out` as `--schedule` CSV, tasks in placement order.
fn schedule_csv(tasks: &[cluster::Task], out: &Outcome) -> String {
    let mut text = String::from(SCHEDULE_HEADER);
    for p in &out.placed {
        let task = &tasks[p.task];
        let s = p.point.setting;
        text.push_str(&format!(
            "{},{},{},{},{},{},{},{},{:.4},{:.6},{:.6},{},{},{},{},{}\n",
            p.task,
            p.server,
            p.pair,
            p.start,
            p.end,
            task.deadline,
            p.class.name(),
            p.readjusted,
            s.v,
            s.fc,
            s.fm,
            p.point.t,
            p.point.p,
            p.point.energy(),
            task.profile.default_point().energy(),
            p.end > task.deadline
        ));
    }
    text
}

#[derive(Clone, Copy, PartialEq, Eq, ValueEnum)]
enum ModeArg {
    Offline,
    Online,
}

#[derive(Clone, Copy, PartialEq, Eq, ValueEnum)]
enum AlgoArg {
    Edl,
    EdfBf,
    EdfWf,
    LptFf,
    /// Online only: EDF-WF at slot 0, then first fit.
    Bin,
}

impl From<AlgoArg> for Algo {
    fn from(a: AlgoArg) -> Algo {
        match a {
            AlgoArg::Edl => Algo::Edl,
            AlgoArg::EdfBf => Algo::EdfBf,
            AlgoArg::EdfWf => Algo::EdfWf,
            AlgoArg::LptFf | AlgoArg::Bin => Algo::LptFf,
        }
    }
}

/// Means over the sets of one configuration.
#[derive(Serialize, Default, Clone, Copy)]
struct Means {
    run: f64,
    idle: f64,
    overhead: f64,
    total: f64,
    turn_ons: f64,
    misses: f64,
    readjusted: f64,
    deadline_prior: f64,
}

impl Means {
    fn add(&mut self, o: &Outcome, n: f64) {
        self.run += o.run / n;
        self.idle += o.idle / n;
        self.overhead += o.overhead / n;
        self.total += o.total() / n;
        self.turn_ons += o.turn_ons as f64 / n;
        self.misses += o.misses as f64 / n;
        self.readjusted += o.placed.iter().filter(|p| p.readjusted).count() as f64 / n;
        self.deadline_prior += o
            .placed
            .iter()
            .filter(|p| p.class == gpu_agent_dvfs::Class::DeadlinePrior)
            .count() as f64
            / n;
    }
}

#[derive(Serialize)]
struct Report {
    mode: &'static str,
    gpus: usize,
    gpus_per_node: usize,
    util: f64,
    algo: &'static str,
    theta: f64,
    search: &'static str,
    compat: bool,
    sets: u64,
    seed: u64,
    tasks: usize,
    no_dvfs: Means,
    dvfs: Means,
    /// 1 − total(DVFS) / total(no DVFS), of the means.
    saving: f64,
}

/// Runs `gpuctl dvfs paper`.
pub fn run(args: PaperArgs) -> Result<()> {
    if !(args.util > 0.0 && args.util.is_finite()) {
        bail!("--util: expected a number > 0, got {}", args.util);
    }
    let pairs = gpu_agent_sim::dvfs_paper::PAIRS;
    if args.gpus_per_server == 0 || pairs / args.gpus_per_server * args.gpus_per_server != pairs {
        bail!(
            "--gpus-per-server: expected a divisor of 2048, got {}",
            args.gpus_per_server
        );
    }
    if args.sets == 0 {
        bail!("--sets: expected at least 1");
    }
    let online = match (args.mode, args.algo) {
        (ModeArg::Offline, AlgoArg::Bin) => bail!("--algo bin: online only"),
        (ModeArg::Offline, _) => None,
        (ModeArg::Online, AlgoArg::Edl) => Some(OnlineAlgo::Edl),
        (ModeArg::Online, AlgoArg::Bin) => Some(OnlineAlgo::Bin),
        (ModeArg::Online, _) => bail!("--algo: online runs edl or bin"),
    };
    let search = Search::parse(&args.search).expect("clap checked the search");
    let algo = Algo::from(args.algo);
    let algo_name = online.map_or(algo.name(), OnlineAlgo::name);
    let servers = pairs / args.gpus_per_server;
    let cfg = Config {
        pairs_per_server: args.gpus_per_server,
        idle_w: args.idle_w,
        turn_on: args.turn_on,
        dvfs: true,
        theta: args.theta,
        options: Options {
            search,
            compat: args.compat,
            ..Options::default()
        },
    };
    let off = Config { dvfs: false, ..cfg };
    let n = args.sets as f64;
    let (mut on_m, mut off_m) = (Means::default(), Means::default());
    let mut tasks = 0;
    let mut schedule = None;
    for s in 0..args.sets {
        let run = |c: &Config, set: &[cluster::Task]| match online {
            None => cluster::offline(set, algo, c),
            Some(a) => cluster::online(set, a, c, servers, args.rho),
        };
        let mode = if online.is_some() {
            Mode::Online
        } else {
            Mode::Offline
        };
        let set = generate(mode, args.util, args.seed + s);
        tasks = set.len();
        let outcome = run(&cfg, &set);
        if s == 0 && args.schedule.is_some() {
            schedule = Some(schedule_csv(&set, &outcome));
        }
        on_m.add(&outcome, n);
        off_m.add(&run(&off, &set), n);
    }
    let report = Report {
        mode: if online.is_some() {
            "online"
        } else {
            "offline"
        },
        gpus: gpu_agent_sim::dvfs_paper::PAIRS,
        gpus_per_node: args.gpus_per_server,
        util: args.util,
        algo: algo_name,
        theta: args.theta,
        search: search.name(),
        compat: args.compat,
        sets: args.sets,
        seed: args.seed,
        tasks,
        no_dvfs: off_m,
        dvfs: on_m,
        saving: 1.0 - on_m.total / off_m.total,
    };
    if let (Some(path), Some(text)) = (&args.schedule, schedule) {
        let mut file =
            AtomicFile::create(path).with_context(|| format!("cannot write {}", path.display()))?;
        file.file()
            .write_all(text.as_bytes())
            .and_then(|()| file.commit())
            .with_context(|| format!("cannot write {}", path.display()))?;
    }
    if args.json {
        return emit_json(&report);
    }
    let mut table = Table::with_header(&[
        ("", Align::Left),
        ("run M", Align::Right),
        ("idle M", Align::Right),
        ("overhead M", Align::Right),
        ("total M", Align::Right),
        ("turn-ons", Align::Right),
        ("misses", Align::Right),
        ("deadline-prior", Align::Right),
        ("readjusted", Align::Right),
    ]);
    for (name, m) in [("no DVFS", &off_m), ("DVFS", &on_m)] {
        table.row(vec![
            name.to_string(),
            format!("{:.2}", m.run / 1e6),
            format!("{:.2}", m.idle / 1e6),
            format!("{:.4}", m.overhead / 1e6),
            format!("{:.2}", m.total / 1e6),
            format!("{:.1}", m.turn_ons),
            format!("{:.1}", m.misses),
            format!("{:.1}", m.deadline_prior),
            format!("{:.1}", m.readjusted),
        ]);
    }
    crate::output::emit(&format!(
        "{} {}, {} tasks on 2048 pairs in servers of {}, theta {}, {} search{}; mean of {} sets:\n{}saving {:.1}%\n",
        algo_name,
        report.mode,
        tasks,
        args.gpus_per_server,
        args.theta,
        search.name(),
        if args.compat { ", compat" } else { "" },
        args.sets,
        table.render(),
        100.0 * report.saving
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_schedule_has_one_row_per_task_and_marks_misses() {
        let set = generate(Mode::Offline, 0.05, 1);
        let cfg = Config {
            pairs_per_server: 4,
            options: Options {
                compat: true,
                ..Options::default()
            },
            ..Config::default()
        };
        let out = cluster::offline(&set, Algo::Edl, &cfg);
        let text = schedule_csv(&set, &out);
        let mut lines = text.lines();
        assert_eq!(lines.next(), Some(SCHEDULE_HEADER.trim_end()));
        let rows: Vec<Vec<&str>> = lines.map(|l| l.split(',').collect()).collect();
        assert_eq!(rows.len(), set.len());
        assert!(rows.iter().all(|r| r.len() == 16));
        let missed = rows.iter().filter(|r| r[15] == "true").count();
        assert_eq!(missed, out.misses);
        let mut ids: Vec<usize> = rows.iter().map(|r| r[0].parse().unwrap()).collect();
        ids.sort();
        assert_eq!(ids, (0..set.len()).collect::<Vec<_>>());
    }
}
