//! The paper's cluster model, offline (docs/dvfs.md §3.1–§3.3): m servers of
//! l GPU–CPU pairs, servers turned on as tasks need them, each pair running
//! its tasks back to back at fixed settings; energy split into run, idle and
//! turn-on overhead.
//!
//! Tasks are placed in deadline order (EDF) by EDL (shortest-pending pair,
//! θ-readjustment) or the baselines EDF-BF, EDF-WF and LPT-FF, each with
//! Algorithm 1 first when DVFS is on ([`Options`] decides `search` and
//! `compat`).

use crate::model::{Point, Profile};
use crate::solve::{Class, Options};

/// One task of the paper's model (time in slots).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Task {
    /// The task's own model: D and t0 in slots.
    pub profile: Profile,
    /// Arrival slot.
    pub arrival: f64,
    /// Deadline slot.
    pub deadline: f64,
}

/// A placement rule.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Algo {
    /// EDF order, the pair that is free first, θ-readjustment.
    Edl,
    /// EDF order, the fitting pair of largest load.
    EdfBf,
    /// EDF order, the fitting pair of smallest load.
    EdfWf,
    /// Longest task first, the first fitting pair.
    LptFf,
}

impl Algo {
    /// Every rule, in the order reports list them.
    pub const ALL: [Algo; 4] = [Algo::Edl, Algo::EdfBf, Algo::EdfWf, Algo::LptFf];

    /// The rule's name (`edl`, `edf-bf`, `edf-wf`, `lpt-ff`).
    pub fn name(self) -> &'static str {
        match self {
            Algo::Edl => "edl",
            Algo::EdfBf => "edf-bf",
            Algo::EdfWf => "edf-wf",
            Algo::LptFf => "lpt-ff",
        }
    }

    /// The rule called `name`.
    pub fn parse(name: &str) -> Option<Algo> {
        Algo::ALL.into_iter().find(|a| a.name() == name)
    }
}

/// The cluster and the run's switches.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Config {
    /// Pairs per server (l).
    pub pairs_per_server: usize,
    /// Idle power of a pair, W.
    pub idle_w: f64,
    /// Energy of one server turn-on (W·slot).
    pub turn_on: f64,
    /// Whether DVFS is on (off: every task at default clocks).
    pub dvfs: bool,
    /// EDL's θ: readjust only into a slack above max(θ·t̂, t_min).
    pub theta: f64,
    /// Algorithm 1's search and compat.
    pub options: Options,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            pairs_per_server: 1,
            idle_w: 37.0,
            turn_on: 200.0,
            dvfs: true,
            theta: 1.0,
            options: Options::default(),
        }
    }
}

/// Where one task ran and at what setting.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Placed {
    /// The task's index in the input.
    pub task: usize,
    /// Server (in turn-on order) and pair.
    pub server: usize,
    /// Pair within the server.
    pub pair: usize,
    /// Start and end slot.
    pub start: f64,
    /// End slot.
    pub end: f64,
    /// The setting, time and power it ran at.
    pub point: Point,
    /// Its class under Algorithm 1.
    pub class: Class,
    /// Whether θ-readjustment changed its setting.
    pub readjusted: bool,
}

/// Energy and outcome of a run.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Outcome {
    /// Σ t̂·P̂.
    pub run: f64,
    /// Idle pairs of on servers until each server's last finish.
    pub idle: f64,
    /// Turn-on energy.
    pub overhead: f64,
    /// Servers turned on.
    pub turn_ons: usize,
    /// Tasks that ended after their deadline.
    pub misses: usize,
    /// Every task's placement, in placement order.
    pub placed: Vec<Placed>,
}

impl Outcome {
    /// run + idle + overhead.
    pub fn total(&self) -> f64 {
        self.run + self.idle + self.overhead
    }
}

#[derive(Debug, Clone, Copy, Default)]
struct Pair {
    end: f64,
    /// Whole slots of work booked (Σ ceil(t̂)).
    tau: f64,
    load: f64,
}

/// The servers, their pairs, and what the run has spent.
struct Cluster<'a> {
    cfg: &'a Config,
    /// Every server's pairs (`m` servers, or as many as were turned on).
    pairs: Vec<Vec<Pair>>,
    /// Servers that are on, in turn-on order.
    on: Vec<usize>,
    /// Whether each server is on.
    is_on: Vec<bool>,
    out: Outcome,
}

impl<'a> Cluster<'a> {
    fn new(cfg: &'a Config, servers: usize) -> Self {
        Cluster {
            cfg,
            pairs: vec![vec![Pair::default(); cfg.pairs_per_server.max(1)]; servers],
            on: Vec::new(),
            is_on: vec![false; servers],
            out: Outcome::default(),
        }
    }

    /// Turns on the lowest-id server that is off (a new one if all are on).
    fn turn_on(&mut self) -> usize {
        let id = self.is_on.iter().position(|on| !on).unwrap_or_else(|| {
            self.pairs
                .push(vec![Pair::default(); self.cfg.pairs_per_server.max(1)]);
            self.is_on.push(false);
            self.pairs.len() - 1
        });
        self.is_on[id] = true;
        for p in &mut self.pairs[id] {
            *p = Pair::default();
        }
        self.on.push(id);
        self.out.turn_ons += 1;
        self.out.overhead += self.cfg.turn_on;
        id
    }

    /// Candidate pairs: those of on servers, in turn-on order then index.
    fn candidates(&self) -> Vec<(usize, usize)> {
        self.on
            .iter()
            .flat_map(|&s| (0..self.pairs[s].len()).map(move |k| (s, k)))
            .collect()
    }

    /// The pair `rule` picks for `task` at `now` (None: a new server), and the
    /// point it then runs at (θ-readjusted by EDL).
    fn pick(
        &self,
        rule: Algo,
        task: &Task,
        point: Point,
        now: f64,
    ) -> (Option<(usize, usize)>, Point, bool) {
        let o = &self.cfg.options;
        let cands = self.candidates();
        let pair = |c: &(usize, usize)| &self.pairs[c.0][c.1];
        let fits = |c: &(usize, usize)| task.deadline - pair(c).end.max(now) >= point.t;
        let found = match rule {
            Algo::Edl => {
                let Some(spt) = cands
                    .iter()
                    .copied()
                    .min_by(|a, b| pair(a).end.total_cmp(&pair(b).end))
                else {
                    return (None, point, false);
                };
                let slack = task.deadline - pair(&spt).end.max(now);
                if slack >= point.t {
                    Some(spt)
                } else {
                    let t_theta = (self.cfg.theta * point.t).max(o.t_min(&task.profile));
                    if self.cfg.dvfs && slack > t_theta {
                        if let Some(p) = o.readjust(&task.profile, point, slack) {
                            return (Some(spt), p, true);
                        }
                    }
                    None
                }
            }
            Algo::EdfBf => cands
                .iter()
                .copied()
                .filter(fits)
                .max_by(|a, b| pair(a).load.total_cmp(&pair(b).load)),
            Algo::EdfWf => cands
                .iter()
                .copied()
                .filter(fits)
                .min_by(|a, b| pair(a).load.total_cmp(&pair(b).load)),
            Algo::LptFf => cands.iter().copied().find(fits),
        };
        (found, point, false)
    }

    /// Places task `i` by `rule` at `now`, on a new server's pair 0 when no
    /// pair takes it.
    fn place(&mut self, i: usize, task: &Task, rule: Algo, start: (Point, Class), now: f64) {
        let (found, point, readjusted) = self.pick(rule, task, start.0, now);
        let (server, pair) = found.unwrap_or_else(|| (self.turn_on(), 0));
        self.put(i, task, (server, pair), point, start.1, readjusted, now);
    }

    /// Books task `i` on `at` at `point`.
    #[allow(clippy::too_many_arguments)]
    fn put(
        &mut self,
        i: usize,
        task: &Task,
        at: (usize, usize),
        point: Point,
        class: Class,
        readjusted: bool,
        now: f64,
    ) {
        let p = &mut self.pairs[at.0][at.1];
        let start = p.end.max(now);
        p.end = start + point.t;
        p.tau += point.t.ceil();
        p.load = p.load.max(p.tau / task.deadline);
        self.out.run += point.t * point.p;
        if p.end > task.deadline {
            self.out.misses += 1;
        }
        self.out.placed.push(Placed {
            task: i,
            server: at.0,
            pair: at.1,
            start,
            end: p.end,
            point,
            class,
            readjusted,
        });
    }
}

/// Step 1 of every rule: the point each task starts from, and its class.
fn initial(tasks: &[Task], cfg: &Config) -> Vec<(Point, Class)> {
    tasks
        .iter()
        .map(|t| {
            if cfg.dvfs {
                let c = cfg.options.choose(&t.profile, Some(t.deadline - t.arrival));
                (c.point, c.class)
            } else {
                let p = t.profile.default_point();
                let class = if p.t > t.deadline - t.arrival {
                    Class::DeadlinePrior
                } else {
                    Class::EnergyPrior
                };
                (p, class)
            }
        })
        .collect()
}

/// `order` sorted as `rule` takes tasks (stable): by deadline, or by
/// decreasing length for LPT-FF.
fn sort_for(rule: Algo, order: &mut [usize], tasks: &[Task], chosen: &[(Point, Class)]) {
    match rule {
        Algo::LptFf => order.sort_by(|&a, &b| chosen[b].0.t.total_cmp(&chosen[a].0.t)),
        _ => order.sort_by(|&a, &b| tasks[a].deadline.total_cmp(&tasks[b].deadline)),
    }
}

/// The offline run of `tasks` (all arriving at slot 0) under `algo`
/// (docs/dvfs.md §3.2, §3.3): servers are turned on as tasks need them
/// and stay on; idle energy counts whole booked slots up to each server's
/// last.
pub fn offline(tasks: &[Task], algo: Algo, cfg: &Config) -> Outcome {
    let chosen = initial(tasks, cfg);
    let mut order: Vec<usize> = (0..tasks.len()).collect();
    sort_for(algo, &mut order, tasks, &chosen);
    let mut c = Cluster::new(cfg, 0);
    for i in order {
        c.place(i, &tasks[i], algo, chosen[i], 0.0);
    }
    let mut out = c.out;
    for server in &c.pairs {
        let finish = server.iter().map(|p| p.tau).fold(0.0, f64::max);
        out.idle += cfg.idle_w * server.iter().map(|p| finish - p.tau).sum::<f64>();
    }
    out
}

/// The online rules (docs/dvfs.md §3.4).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OnlineAlgo {
    /// EDL at every slot.
    Edl,
    /// The paper's BIN: EDF-WF at slot 0, then first fit in EDF order.
    Bin,
}

impl OnlineAlgo {
    /// `edl` or `bin`.
    pub fn name(self) -> &'static str {
        match self {
            OnlineAlgo::Edl => "edl",
            OnlineAlgo::Bin => "bin",
        }
    }
}

/// The online run (docs/dvfs.md §3.4): `tasks` in arrival order over
/// slots, `servers` servers of `cfg.pairs_per_server` pairs, a server turned
/// off after `rho` slots with no busy pair. Each slot: idle pairs of on
/// servers cost `idle_w`; tasks finished by the slot leave; idle servers
/// wait, then turn off; arrivals are solved, sorted by deadline and placed.
/// With DVFS and `compat`, the energy-prior tasks of slot 0 go one per pair
/// onto newly turned-on servers first (the code's Q3).
pub fn online(tasks: &[Task], algo: OnlineAlgo, cfg: &Config, servers: usize, rho: u32) -> Outcome {
    let chosen = initial(tasks, cfg);
    let mut c = Cluster::new(cfg, servers);
    let mut wait = vec![0u32; servers];
    let mut next = 0;
    let mut t = 0.0f64;
    loop {
        // Step 1: idle energy, completions and waiting, server by server.
        let mut any_busy = false;
        for (s, wait) in wait.iter_mut().enumerate() {
            if !c.is_on[s] {
                continue;
            }
            // A pair is busy at slot start while its last task has not
            // completed: completion happens at the first slot ≥ its finish.
            let busy = c.pairs[s].iter().filter(|p| p.end > t - 1.0).count();
            let idle = c.pairs[s].len() - busy;
            c.out.idle += cfg.idle_w * idle as f64;
            let still = c.pairs[s].iter().any(|p| p.end > t);
            if busy > 0 {
                *wait = 0;
            } else {
                *wait += 1;
            }
            any_busy |= still;
            // Step 2: off after rho idle slots.
            if *wait >= rho && !still {
                c.on.retain(|&x| x != s);
                c.is_on[s] = false;
                *wait = 0;
            }
        }
        if next == tasks.len() && !any_busy {
            break;
        }
        // Step 3: arrivals of this slot.
        let first = next;
        while next < tasks.len() && tasks[next].arrival <= t {
            next += 1;
        }
        let mut order: Vec<usize> = (first..next).collect();
        order.sort_by(|&a, &b| tasks[a].deadline.total_cmp(&tasks[b].deadline));
        if t == 0.0 && cfg.dvfs && cfg.options.compat {
            let (fit, rest): (Vec<usize>, Vec<usize>) = order
                .iter()
                .partition(|&&i| tasks[i].arrival + chosen[i].0.t <= tasks[i].deadline);
            let l = cfg.pairs_per_server.max(1);
            for chunk in fit.chunks(l) {
                let s = c.turn_on();
                for (k, &i) in chunk.iter().enumerate() {
                    c.put(i, &tasks[i], (s, k), chosen[i].0, chosen[i].1, false, t);
                }
            }
            order = rest;
        }
        for i in order {
            let rule = match algo {
                OnlineAlgo::Edl => Algo::Edl,
                OnlineAlgo::Bin if t == 0.0 => Algo::EdfWf,
                OnlineAlgo::Bin => Algo::LptFf,
            };
            c.place(i, &tasks[i], rule, chosen[i], t);
        }
        t += 1.0;
    }
    c.out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::solve::Search;

    /// Table III's jobs with the worked example's deadlines (docs/dvfs.md §3.2).
    fn table3() -> Vec<Task> {
        [
            (0.0, 50.0),
            (1.0, 36.0),
            (0.5, 60.0),
            (0.8, 100.0),
            (0.2, 300.0),
        ]
        .iter()
        .map(|&(delta, deadline)| Task {
            profile: Profile {
                p0: 100.0,
                gamma: 0.0,
                c: 200.0,
                delta,
                d: 25.0,
                t0: 5.0,
            },
            arrival: 0.0,
            deadline,
        })
        .collect()
    }

    fn cfg(theta: f64) -> Config {
        Config {
            pairs_per_server: 2,
            theta,
            options: Options {
                search: Search::Paper,
                compat: true,
                ..Options::default()
            },
            ..Config::default()
        }
    }

    /// Jobs (1-based, as the paper names them) per (server, pair).
    fn layout(out: &Outcome) -> Vec<(usize, usize, Vec<usize>)> {
        let mut v: Vec<(usize, usize, Vec<usize>)> = Vec::new();
        for p in &out.placed {
            match v
                .iter_mut()
                .find(|(s, q, _)| (*s, *q) == (p.server, p.pair))
            {
                Some(e) => e.2.push(p.task + 1),
                None => v.push((p.server, p.pair, vec![p.task + 1])),
            }
        }
        v.sort();
        v
    }

    #[test]
    fn worked_example_theta_0_9() {
        let out = offline(&table3(), Algo::Edl, &cfg(0.9));
        assert_eq!(
            layout(&out),
            vec![(0, 0, vec![2, 4]), (0, 1, vec![1, 3, 5])],
            "{out:?}"
        );
        let j3 = out.placed.iter().find(|p| p.task == 2).unwrap();
        assert!(j3.readjusted);
        // Readjusted into 60 − 25.83 = 34.17, inside [31.90, 35.44].
        assert!(
            j3.point.t <= 60.0 - 25.83 + 0.01 && j3.point.t > 31.90,
            "{j3:?}"
        );
        assert_eq!(out.turn_ons, 1);
    }

    #[test]
    fn worked_example_theta_1() {
        // The code's rule: an unused pair of an on server has end 0, so J4
        // takes S22 and J5 follows J1. (The paper's SPT looks at occupied
        // pairs only, which gives S11(J2), S12(J1, J4), S21(J3, J5).)
        let out = offline(&table3(), Algo::Edl, &cfg(1.0));
        assert_eq!(
            layout(&out),
            vec![
                (0, 0, vec![2]),
                (0, 1, vec![1, 5]),
                (1, 0, vec![3]),
                (1, 1, vec![4])
            ],
            "{out:?}"
        );
        assert_eq!(out.turn_ons, 2);
        assert_eq!(out.overhead, 400.0);
        // J2 is deadline-prior and, in compat, runs late (Q1).
        assert_eq!(out.misses, 1);
        let fixed = Config {
            options: Options {
                compat: false,
                ..cfg(1.0).options
            },
            ..cfg(1.0)
        };
        assert_eq!(offline(&table3(), Algo::Edl, &fixed).misses, 0);
    }

    #[test]
    fn energy_adds_up_and_idle_counts_whole_slots() {
        let out = offline(&table3(), Algo::Edl, &cfg(1.0));
        let run: f64 = out.placed.iter().map(|p| p.point.energy()).sum();
        assert!((out.run - run).abs() < 1e-9);
        // Server 0: pair 0 books ceil(41.26) = 42, pair 1 ceil(25.83) +
        // ceil(30.86) = 26 + 31 = 57 → 15 idle slots. Server 1: ceil(35.44)
        // = 36 and ceil(39.10) = 40 → 4.
        assert!(
            (out.idle - 37.0 * (15.0 + 4.0)).abs() < 1e-9,
            "{}",
            out.idle
        );
        assert!((out.total() - out.run - out.idle - out.overhead).abs() < 1e-9);
    }

    #[test]
    fn baselines_place_every_task_once_and_meet_deadlines_without_compat() {
        let c = Config {
            options: Options {
                compat: false,
                ..cfg(1.0).options
            },
            ..cfg(1.0)
        };
        for algo in Algo::ALL {
            let out = offline(&table3(), algo, &c);
            let mut seen: Vec<usize> = out.placed.iter().map(|p| p.task).collect();
            seen.sort();
            assert_eq!(seen, vec![0, 1, 2, 3, 4], "{}", algo.name());
            assert_eq!(out.misses, 0, "{}", algo.name());
            // Tasks on one pair never overlap.
            for a in &out.placed {
                for b in &out.placed {
                    if a.task != b.task && (a.server, a.pair) == (b.server, b.pair) {
                        assert!(a.end <= b.start + 1e-9 || b.end <= a.start + 1e-9);
                    }
                }
            }
        }
    }

    fn plain(len: f64, arrival: f64, deadline: f64) -> Task {
        Task {
            profile: Profile {
                p0: 50.0,
                gamma: 25.0,
                c: 25.0,
                delta: 0.5,
                d: len,
                t0: 0.0,
            },
            arrival,
            deadline,
        }
    }

    #[test]
    fn online_by_hand_servers_sleep_after_rho_idle_slots() {
        // l = 1, two servers, no DVFS (P* = 100 W). A (0, 2.5 slots) runs on
        // server 0 and completes at slot 3; slots 4 and 5 are idle (2 x 37),
        // so server 0 turns off at slot 5, and B, arriving then, turns it on
        // again (lowest id). B completes at slot 6, the last.
        let c = Config {
            dvfs: false,
            ..Config::default()
        };
        let tasks = [plain(2.5, 0.0, 10.0), plain(1.0, 5.0, 20.0)];
        let out = online(&tasks, OnlineAlgo::Edl, &c, 2, 2);
        assert_eq!(out.turn_ons, 2);
        assert_eq!(out.overhead, 400.0);
        assert!((out.idle - 74.0).abs() < 1e-9, "{out:?}");
        assert!((out.run - 350.0).abs() < 1e-9, "{out:?}");
        assert_eq!((out.placed[1].server, out.placed[1].start), (0, 5.0));
        assert_eq!(out.misses, 0);
        // With rho = 3 the server stays on: B starts at once on it, one turn-on.
        let out = online(&tasks, OnlineAlgo::Edl, &c, 2, 3);
        assert_eq!(out.turn_ons, 1);
        assert!((out.idle - 74.0).abs() < 1e-9, "{out:?}");
    }

    #[test]
    fn online_places_every_task_once_without_overlap() {
        let c = Config {
            pairs_per_server: 2,
            ..cfg(1.0)
        };
        let c = Config {
            options: Options {
                compat: false,
                ..c.options
            },
            ..c
        };
        let mut tasks: Vec<Task> = table3();
        tasks.extend(table3().into_iter().map(|t| Task {
            arrival: 3.0,
            deadline: t.deadline + 3.0,
            ..t
        }));
        for algo in [OnlineAlgo::Edl, OnlineAlgo::Bin] {
            let out = online(&tasks, algo, &c, 4, 2);
            let mut seen: Vec<usize> = out.placed.iter().map(|p| p.task).collect();
            seen.sort();
            assert_eq!(seen, (0..tasks.len()).collect::<Vec<_>>());
            assert_eq!(out.misses, 0, "{}", algo.name());
            for p in &out.placed {
                assert!(p.start >= tasks[p.task].arrival);
            }
            for a in &out.placed {
                for b in &out.placed {
                    if a.task != b.task && (a.server, a.pair) == (b.server, b.pair) {
                        assert!(a.end <= b.start + 1e-9 || b.end <= a.start + 1e-9);
                    }
                }
            }
        }
    }
}
