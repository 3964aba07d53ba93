//! The offline simulator: replays a trace through the scheduler core with a
//! virtual clock and an event heap.
//!
//! At equal times, finishes come first (they free devices), then arrivals in
//! trace order, then policy wake-ups, then overrun checks. A task runs its
//! modelled time, or, with the trace's `actual` column, `actual / workload`
//! times it while the core plans with the estimate (and hears of an overrun
//! at the expected end, as the daemon's core does); it draws the DVFS model's power for its app at its clocks, and an idle device
//! draws its catalogue idle power (a MIG instance: compute slices / 7 of
//! both, its GPU the idle share of the slices no instance holds).
//!
//! Policies may change MIG layouts (`Decision::MigLayout`, docs/mig.md §6.4): the
//! replay's core allows it, drains the GPU, and once nothing runs there the
//! simulator makes the layout [`Options::mig_delay_s`] later (at once by
//! default) and brings the new devices online (`Core::mig_applied`). Every
//! change is reported ([`MigChange`]).

use std::sync::Arc;

use gpu_agent_plugin_api::abi_stable::{
    sabi_trait::TD_Opaque,
    std_types::{RResult, RString, RVec},
};
use gpu_agent_plugin_api::{
    Clocks, DecisionNe, EventNe, Policy, PolicyBox, Policy_TO, TaskKey, View,
};

use gpu_agent_core::agenda::Agenda;
use gpu_agent_core::apps::power_w;
use gpu_agent_core::host::{DeviceSpec, Host};
use gpu_agent_core::metrics::{self, Completed, Metrics, Rejection, Totals};
use gpu_agent_core::policy::PolicyInstance;
use gpu_agent_core::{Action, Core, Input};

use crate::input::trace::Trace;
use crate::schedule::ScheduleRow;
use crate::stopwatch::{Stopwatch, Tally};
use crate::stream::{Arrival, Cut, Stream};

/// Why a simulation could not finish.
#[derive(Debug, thiserror::Error)]
pub enum SimError {
    /// Tasks were left that nothing would ever start.
    #[error("{policy}: {count} task(s) could never start (first: {first})")]
    Stranded {
        /// Policy in charge at the end.
        policy: String,
        /// How many.
        count: usize,
        /// The first one's id.
        first: String,
    },
}

/// How the simulator carries out what the core asks, and what it keeps.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Options {
    /// Seconds a MIG layout change takes once its GPU is drained (the
    /// driver's destroy and create calls; 0: at once).
    pub mig_delay_s: f64,
    /// Whether to keep the schedule ([`Outcome::schedule`], a row per task
    /// and device); without it the outcome's schedule is empty and the rest
    /// is the same (default: kept).
    pub schedule: bool,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            mig_delay_s: 0.0,
            schedule: true,
        }
    }
}

/// One MIG layout change a policy asked for and the simulator made.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct MigChange {
    /// The physical GPU.
    pub gpu: u32,
    /// Its new layout, `PROFILE@START` comma-separated (empty: whole, MIG
    /// off).
    pub layout: String,
    /// When the policy asked for it (the drain began), seconds.
    pub asked_s: f64,
    /// When the new layout took tasks, seconds.
    pub applied_s: f64,
    /// Its new devices (the GPU itself when whole).
    pub devices: Vec<u32>,
}

/// The result of replaying a trace under one policy.
#[derive(Debug, Clone)]
pub struct Outcome {
    /// Metrics over the run.
    pub metrics: Metrics,
    /// One row per task and device, in start order.
    pub schedule: Vec<ScheduleRow>,
    /// Policy faults that made the core fall back to FIFO, as `policy: reason`.
    pub faults: Vec<String>,
    /// Time spent deciding.
    pub scheduling: SchedulingTime,
    /// Whether any task ran at other than default clocks (else the run is
    /// its own no-DVFS baseline).
    pub dvfs: bool,
    /// The MIG layout changes made, in the order they were applied.
    pub mig_changes: Vec<MigChange>,
    /// The devices at the end: the host's, and every MIG instance a change
    /// made (retired ones included; indices are never reused).
    pub devices: Vec<DeviceSpec>,
}

/// The wall time the scheduler core (the policy included) took over a replay:
/// the only part of a simulation that is not deterministic.
#[derive(Debug, Clone, Copy, Default, PartialEq, serde::Serialize)]
pub struct SchedulingTime {
    /// Wall time inside the core's submit and handle calls, seconds.
    pub wall_s: f64,
    /// The part of `wall_s` spent inside the policy's `on_event` calls (the
    /// policy's own work, through the plugin boundary; not the built-in FIFO
    /// after a fault), seconds.
    pub policy_s: f64,
    /// Decision points: calls into the core (arrivals, finishes, wake-ups).
    pub decision_points: u64,
}

impl SchedulingTime {
    /// Decision points per second of scheduling time.
    pub fn decisions_per_s(&self) -> f64 {
        self.decision_points as f64 / self.wall_s
    }
}

/// The policy as the core sees it, its calls timed.
struct Timed {
    inner: PolicyBox,
    tally: Tally,
}

impl Timed {
    /// `policy` with its calls timed, and the tally they add up in.
    fn wrap(policy: PolicyInstance) -> (PolicyInstance, Tally) {
        let tally = Tally::default();
        let timed = PolicyInstance {
            name: policy.name,
            policy: Policy_TO::from_value(
                Timed {
                    inner: policy.policy,
                    tally: tally.clone(),
                },
                TD_Opaque,
            ),
            abandoned: policy.abandoned,
        };
        (timed, tally)
    }
}

impl Policy for Timed {
    fn on_event(&mut self, view: &View<'_>, event: &EventNe) -> RResult<RVec<DecisionNe>, RString> {
        self.tally.time(|| self.inner.on_event(view, event))
    }
}

/// What is due: at equal times finishes come first (they free devices), then
/// arrivals (which are not in the agenda: they come from the trace, ranked
/// [`ARRIVAL_RANK`]), then wake-ups; equal ranks in the order they were added.
#[derive(Debug, PartialEq, Eq, PartialOrd, Ord)]
struct Due {
    rank: u8,
    seq: u64,
    what: What,
}

#[derive(Debug, PartialEq, Eq, PartialOrd, Ord)]
enum What {
    Finish(TaskKey),
    /// A drained GPU's new layout is made.
    MigApplied(u32),
    Timer,
    /// A task's expected end: still running then, it overran.
    Check(TaskKey),
}

impl What {
    fn rank(&self) -> u8 {
        match self {
            What::Finish(_) | What::MigApplied(_) => 0,
            What::Timer => 2,
            What::Check(_) => 3,
        }
    }
}

const ARRIVAL_RANK: u8 = 1;

/// Replays `trace` on `host` under `policy` with the default [`Options`];
/// `progress` is told how many tasks have arrived so far.
pub fn simulate(
    host: &Host,
    trace: &Trace,
    policy: PolicyInstance,
    progress: impl FnMut(usize),
) -> Result<Outcome, SimError> {
    simulate_with(host, trace, policy, &Options::default(), progress)
}

/// [`simulate`] with `options`.
pub fn simulate_with(
    host: &Host,
    trace: &Trace,
    policy: PolicyInstance,
    options: &Options,
    progress: impl FnMut(usize),
) -> Result<Outcome, SimError> {
    let tasks = InOrder::new(trace);
    replay(host, tasks, policy, false, options, progress).map_err(Stop::sim)
}

/// [`simulate_with`] on a trace as it is read ([`crate::stream::read`]):
/// `None` when the stream is cut (the trace is bad, or not in arrival
/// order: its reader's result says which; the outcome of the rows read so
/// far is dropped).
pub fn simulate_stream(
    host: &Host,
    stream: Stream<'_>,
    policy: PolicyInstance,
    options: &Options,
    progress: impl FnMut(usize),
) -> Result<Option<Outcome>, SimError> {
    match replay(host, stream, policy, false, options, progress) {
        Ok(outcome) => Ok(Some(outcome)),
        Err(Stop::Cut) => Ok(None),
        Err(Stop::Sim(e)) => Err(e),
    }
}

/// Sets `outcome`'s no-DVFS baseline, the one definition of
/// `energy_baseline_j` and `energy_saving` (formats.md §4) that every
/// simulated column uses: when a task of `outcome` ran at other than default
/// clocks, `trace` is replayed under a fresh policy (`fresh`, with the run's
/// parameters) whose devices accept their default clocks only
/// ([`Core::at_default_clocks`]), so that a DVFS policy keeping to its
/// devices' clock ranges runs its own rules without DVFS, and that replay's
/// energy is the baseline; otherwise the run is its own baseline. Returns the
/// baseline replay's policy faults.
pub fn set_dvfs_baseline<E: From<SimError>>(
    host: &Host,
    trace: &Trace,
    outcome: &mut Outcome,
    fresh: impl FnOnce() -> Result<PolicyInstance, E>,
    options: &Options,
) -> Result<Vec<String>, E> {
    if !outcome.dvfs {
        return Ok(Vec::new());
    }
    let options = Options {
        schedule: false,
        ..*options
    };
    let base =
        replay(host, InOrder::new(trace), fresh()?, true, &options, |_| {}).map_err(Stop::sim)?;
    outcome.metrics.set_baseline(base.metrics.energy_j);
    Ok(base.faults)
}

/// Why a replay stopped short.
enum Stop {
    Sim(SimError),
    /// Its tasks' stream was cut.
    Cut,
}

impl Stop {
    /// The error of a replay whose tasks cannot be cut off.
    fn sim(self) -> SimError {
        match self {
            Stop::Sim(e) => e,
            Stop::Cut => unreachable!("a trace in memory is never cut"),
        }
    }
}

/// Where a replay's tasks come from, in arrival order, ties in trace order.
trait Arrivals {
    /// The next task's arrival, `None` after the last.
    fn peek(&mut self) -> Result<Option<f64>, Cut>;
    /// The task [`Arrivals::peek`] saw.
    fn take(&mut self) -> Arrival;
    /// Schedule rows to make room for (a row per device of each task).
    fn rows(&self) -> usize;
}

/// A trace in memory.
struct InOrder<'a> {
    trace: &'a Trace,
    order: Vec<usize>,
    next: usize,
}

impl InOrder<'_> {
    fn new(trace: &Trace) -> InOrder<'_> {
        InOrder {
            order: arrival_order(trace),
            trace,
            next: 0,
        }
    }
}

impl Arrivals for InOrder<'_> {
    fn peek(&mut self) -> Result<Option<f64>, Cut> {
        Ok(self
            .order
            .get(self.next)
            .map(|&i| self.trace.tasks[i].spec.arrival))
    }

    fn take(&mut self) -> Arrival {
        let task = &self.trace.tasks[self.order[self.next]];
        self.next += 1;
        Arrival {
            spec: task.spec.clone(),
            actual: task.actual,
        }
    }

    fn rows(&self) -> usize {
        self.trace
            .tasks
            .iter()
            .map(|t| t.spec.alt_gpus.iter().fold(t.spec.gpus, |a, &b| a.max(b)) as usize)
            .sum()
    }
}

impl Arrivals for Stream<'_> {
    fn peek(&mut self) -> Result<Option<f64>, Cut> {
        Stream::peek(self)
    }

    fn take(&mut self) -> Arrival {
        Stream::take(self)
    }

    fn rows(&self) -> usize {
        // Unknown: the rows grow as they come.
        0
    }
}

/// The replay of [`simulate`]; `default_clocks` limits every device to its
/// default clocks.
fn replay(
    host: &Host,
    mut tasks: impl Arrivals,
    policy: PolicyInstance,
    default_clocks: bool,
    options: &Options,
    mut progress: impl FnMut(usize),
) -> Result<Outcome, Stop> {
    let policy_name = policy.name.clone();
    let (policy, in_policy) = Timed::wrap(policy);
    let mut core = Core::new(host.devices.clone(), policy).allowing_mig_policy(true);
    if default_clocks {
        core = core.at_default_clocks();
    }
    let mut run = Run::new(host, options, tasks.rows());
    // Tasks submitted so far; the core numbers them in this order (their
    // keys), which is the arrival order, ties in trace order.
    let mut next = 0;
    let mut clock = Stopwatch::new();
    loop {
        let arrival = tasks.peek().map_err(|Cut| Stop::Cut)?;
        let agenda_first = run
            .agenda
            .peek()
            .is_some_and(|(at, due)| arrival.is_none_or(|a| (at, due.rank) < (a, ARRIVAL_RANK)));
        let (now, actions) =
            if let Some((at, due)) = agenda_first.then(|| run.agenda.pop()).flatten() {
                let input = match due.what {
                    What::Finish(task) => Input::Finished { task, ok: true },
                    What::Timer => {
                        run.timers.remove(&at.to_bits());
                        Input::Timer
                    }
                    What::Check(task) => Input::Overran { task },
                    What::MigApplied(gpu) => {
                        run.now = at;
                        let actions = clock.time(|| run.mig_applied(&mut core, gpu));
                        run.apply(&mut core, actions);
                        continue;
                    }
                };
                (at, clock.time(|| core.handle(at, input)))
            } else if let Some(a) = arrival {
                let Arrival { spec, actual } = tasks.take();
                // True run time / modelled run time, by core key.
                run.factors
                    .push(actual.map_or(1.0, |actual| actual / spec.workload));
                next += 1;
                progress(next);
                (a, clock.time(|| core.submit(a, spec).1))
            } else if core.unfinished() > 0 {
                let actions = clock.time(|| core.handle(run.now, Input::Stalled));
                stranded(&core, &actions)?;
                (run.now, actions)
            } else {
                break;
            };
        run.now = now;
        run.apply(&mut core, actions);
    }
    let scheduling = SchedulingTime {
        wall_s: clock.total().as_secs_f64(),
        policy_s: clock.wall(in_policy.ticks()).as_secs_f64(),
        decision_points: clock.calls(),
    };
    // A split GPU runs nothing itself: its MIG instances are the devices.
    Ok(run.outcome(&policy_name, next, schedulable(&host.devices), scheduling))
}

/// The error of a replay stalled with tasks left, when the core's answer
/// to `Stalled` (`actions`) neither starts, wakes nor refuses anything.
fn stranded(core: &Core, actions: &[Action]) -> Result<(), Stop> {
    if actions.iter().any(|a| {
        matches!(
            a,
            Action::Start { .. } | Action::WakeAt { .. } | Action::Reject { .. }
        )
    }) {
        return Ok(());
    }
    let first = core
        .pending()
        .first()
        .and_then(|&k| core.task(k))
        .map(|t| t.id.to_string())
        .unwrap_or_default();
    Err(Stop::Sim(SimError::Stranded {
        policy: core.policy_name().into(),
        count: core.unfinished(),
        first,
    }))
}

/// The trace's rows in arrival order, ties in trace order: the rows' own
/// order when they are in it already (as most traces are), else a sort of
/// (arrival, row) pairs, which reads each row once.
fn arrival_order(trace: &Trace) -> Vec<usize> {
    let arrival = |i: usize| trace.tasks[i].spec.arrival;
    let in_order = (1..trace.tasks.len()).all(|i| arrival(i - 1).total_cmp(&arrival(i)).is_le());
    if in_order {
        return (0..trace.tasks.len()).collect();
    }
    let mut keyed: Vec<(f64, usize)> = (0..trace.tasks.len()).map(|i| (arrival(i), i)).collect();
    keyed.sort_unstable_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
    keyed.into_iter().map(|(_, i)| i).collect()
}

/// Each device's name ([`DeviceSpec::label`]), made once and shared by its
/// schedule rows.
fn labels(devices: &[DeviceSpec]) -> Vec<Arc<str>> {
    devices.iter().map(|d| d.label().into()).collect()
}

/// How many of `devices` take tasks (whole GPUs and MIG instances).
fn schedulable(devices: &[DeviceSpec]) -> usize {
    devices.iter().filter(|d| d.schedulable()).count()
}

/// The simulator's bookkeeping while it runs.
struct Run {
    /// The devices as the core has them (MIG instances made included).
    devices: Vec<DeviceSpec>,
    /// Their names, as schedule rows show them.
    labels: Vec<Arc<str>>,
    /// Seconds a layout change takes once its GPU is drained.
    mig_delay_s: f64,
    /// The layout changes made.
    mig_changes: Vec<MigChange>,
    /// (since when, how many) devices took tasks, a row per layout change.
    counts: Vec<(f64, usize)>,
    /// (GPU, when) of each drain for a layout change not yet made.
    asked: Vec<(u32, f64)>,
    /// Idle watt-seconds busy devices took from their GPUs' idle power
    /// (catalogue idle power times share times run time).
    idle_share_s: f64,
    now: f64,
    agenda: Agenda<Due>,
    /// Agenda items added so far.
    seq: u64,
    /// Wake-up times in the agenda (as bits), so each is delivered once.
    timers: hashbrown::HashSet<u64>,
    schedule: Vec<ScheduleRow>,
    /// Whether rows go into `schedule`.
    keep_schedule: bool,
    /// Energy drawn running tasks so far (the rows' `energy_j` added up in
    /// row order), J.
    busy_j: f64,
    /// The metrics' sums over the tasks started so far.
    totals: Totals,
    rejected: Vec<Rejection>,
    faults: Vec<String>,
    /// Seconds each device spent running tasks.
    busy_s: Vec<f64>,
    /// Per task: how much longer (or shorter) it really runs than modelled.
    factors: Vec<f64>,
    /// Whether a task ran at other than default clocks.
    dvfs: bool,
}

impl Run {
    /// A replay on `host`'s devices before any task, with room for the
    /// schedule rows of about `rows` tasks when `options` keeps them.
    fn new(host: &Host, options: &Options, rows: usize) -> Run {
        Run {
            devices: host.devices.clone(),
            labels: labels(&host.devices),
            mig_delay_s: options.mig_delay_s,
            mig_changes: Vec::new(),
            counts: vec![(f64::NEG_INFINITY, schedulable(&host.devices))],
            asked: Vec::new(),
            idle_share_s: 0.0,
            now: 0.0,
            agenda: Agenda::new(),
            seq: 0,
            timers: hashbrown::HashSet::new(),
            // A row per device of each task that runs (each starts once).
            schedule: Vec::with_capacity(if options.schedule { rows } else { 0 }),
            keep_schedule: options.schedule,
            // Added up as the rows' energies would be.
            busy_j: std::iter::empty::<f64>().sum(),
            totals: Totals::default(),
            rejected: Vec::new(),
            faults: Vec::new(),
            busy_s: vec![0.0; host.devices.len()],
            dvfs: false,
            factors: Vec::new(),
        }
    }

    /// The outcome of the finished replay of `policy` over `submitted`
    /// tasks on a host of `devices` schedulable devices.
    fn outcome(
        mut self,
        policy: &str,
        submitted: usize,
        devices: usize,
        scheduling: SchedulingTime,
    ) -> Outcome {
        let rejected = std::mem::take(&mut self.rejected);
        let changed = !self.mig_changes.is_empty();
        let energy = |from: f64, to: f64| {
            if changed {
                // Layouts changed: each GPU idles at its catalogue power over
                // the span, less its busy devices' shares of it while they ran.
                let gpus_w: f64 = self
                    .devices
                    .iter()
                    .filter(|d| d.mig().is_none())
                    .map(|d| d.model.idle_w)
                    .sum();
                metrics::EnergySplit {
                    run_j: self.busy_j,
                    idle_j: (gpus_w * (to - from) - self.idle_share_s).max(0.0),
                    overhead_j: 0.0,
                }
            } else {
                metrics::energy_with_idle(&self.devices, &self.busy_s, self.busy_j, from, to)
            }
        };
        let mut metrics =
            Metrics::from_totals(policy, submitted, rejected, &self.totals, devices, energy);
        if changed {
            metrics.utilization = self
                .utilization(metrics.makespan)
                .unwrap_or(metrics.utilization);
        }
        Outcome {
            metrics,
            schedule: self.schedule,
            faults: self.faults,
            scheduling,
            dvfs: self.dvfs,
            mig_changes: self.mig_changes,
            devices: self.devices,
        }
    }

    /// Busy device-seconds over the device-seconds there were from the
    /// first arrival to `makespan` (the devices' count changed with the
    /// layouts); `None` when there were none.
    fn utilization(&self, makespan: f64) -> Option<f64> {
        let (from, to) = (self.totals.first_arrival, makespan);
        let mut device_s = 0.0;
        for (k, &(since, count)) in self.counts.iter().enumerate() {
            let until = self.counts.get(k + 1).map_or(to, |c| c.0);
            device_s += count as f64 * (until.min(to) - since.max(from)).max(0.0);
        }
        (device_s > 0.0).then(|| self.totals.busy / device_s)
    }

    fn push(&mut self, at: f64, what: What) {
        self.seq += 1;
        let due = Due {
            rank: what.rank(),
            seq: self.seq,
            what,
        };
        self.agenda.push(at, due);
    }

    /// GPU `gpu`'s new layout is made: the core takes it and brings its
    /// devices online; the change is recorded.
    fn mig_applied(&mut self, core: &mut Core, gpu: u32) -> Vec<Action> {
        let done = core
            .mig_applied(self.now, gpu)
            .expect("the core asked for this layout once the GPU was drained");
        self.devices = core.devices().cloned().collect();
        self.labels = labels(&self.devices);
        self.busy_s.resize(self.devices.len(), 0.0);
        self.counts.push((self.now, schedulable(&self.devices)));
        let asked = self.asked.iter().position(|&(g, _)| g == gpu);
        let asked_s = asked.map_or(self.now, |k| self.asked.swap_remove(k).1);
        let layout = done
            .devices
            .iter()
            .filter_map(|&d| self.devices[d as usize].mig())
            .map(|m| format!("{}@{}", m.profile.name, m.start))
            .collect::<Vec<_>>()
            .join(",");
        self.mig_changes.push(MigChange {
            gpu,
            layout,
            asked_s,
            applied_s: self.now,
            devices: done.devices,
        });
        done.actions
    }

    /// Carries out the actions of one core call. Layouts to make at once are
    /// made after the rest, so that every action is carried out before the
    /// core's next call (which may drop the tasks that ended in this one).
    fn apply(&mut self, core: &mut Core, actions: Vec<Action>) {
        let mut drained = Vec::new();
        for action in actions {
            match action {
                Action::Start {
                    task,
                    devices,
                    clocks,
                    runtime,
                } => {
                    let t = core.task(task).expect("a started task is held");
                    let planned = runtime;
                    let runtime = planned * self.factors[task as usize];
                    let (start, end) = (self.now, self.now + runtime);
                    if runtime > planned {
                        self.push(start + planned, What::Check(task));
                    }
                    self.dvfs |= clocks != Clocks::DEFAULT;
                    let dvfs = core.dvfs(task);
                    for &d in &devices {
                        let device = &self.devices[d as usize];
                        let (model, share) = (device.model, device.power_share());
                        self.busy_s[d as usize] += runtime;
                        self.idle_share_s += model.idle_w * share * runtime;
                        let power = power_w(&t.app, model, clocks) * share;
                        self.busy_j += power * runtime;
                        if !self.keep_schedule {
                            continue;
                        }
                        let (core_mhz, mem_mhz) = model.clocks_mhz(clocks);
                        self.schedule.push(ScheduleRow {
                            id: t.id.to_string(),
                            gpu: d,
                            device: self.labels[d as usize].clone(),
                            start,
                            end,
                            core_mhz,
                            mem_mhz,
                            energy_j: power * runtime,
                            clocks,
                            runtime: planned,
                            power_w: power,
                            default_energy_j: power_w(&t.app, model, Clocks::DEFAULT)
                                * share
                                * runtime
                                / t.app.time_factor(clocks),
                            dvfs,
                        });
                    }
                    self.totals.add(&Completed {
                        arrival: t.arrival,
                        deadline: t.deadline,
                        weight: t.weight,
                        start,
                        end,
                        devices: devices.len(),
                    });
                    self.push(end, What::Finish(task));
                }
                Action::Reject { task, reason } => {
                    self.rejected.push(Rejection {
                        id: core
                            .task(task)
                            .expect("a task rejected by this call is held")
                            .id
                            .to_string(),
                        reason,
                    });
                }
                Action::Overrunning { task, until } => self.push(until, What::Check(task)),
                Action::Interrupt { .. } => {
                    unreachable!("the replay never takes a device offline")
                }
                Action::WakeAt { time } => {
                    if self.timers.insert(time.to_bits()) {
                        self.push(time, What::Timer);
                    }
                }
                Action::PolicyFault { policy, reason } => {
                    log::warn!(
                        "policy {policy} failed: {reason}; continuing with the built-in FIFO order"
                    );
                    self.faults.push(format!("{policy}: {reason}"));
                }
                // The replay reports starts, not placements.
                Action::Assigned { .. } => {}
                // The replay holds no GPU's layout.
                Action::MigHeld { .. } => {}
                Action::MigDraining { gpu, .. } => self.asked.push((gpu, self.now)),
                Action::ApplyMigLayout { gpu, .. } => {
                    if self.mig_delay_s > 0.0 {
                        self.push(self.now + self.mig_delay_s, What::MigApplied(gpu));
                    } else {
                        drained.push(gpu);
                    }
                }
            }
        }
        for gpu in drained {
            let actions = self.mig_applied(core, gpu);
            self.apply(core, actions);
        }
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;
    use gpu_agent_core::apps::AppLibrary;

    /// A host from the text of a host file.
    fn host(text: &str) -> Host {
        crate::input::host::parse(Path::new("host.toml"), text).unwrap()
    }

    /// A trace over `host` from the text of a trace file (built-in profiles).
    fn trace(host: &Host, text: &[u8]) -> Trace {
        Trace::parse(Path::new("t.csv"), text, host, &AppLibrary::default()).unwrap()
    }

    /// Rows go to the core by arrival, ties in trace order.
    #[test]
    fn rows_are_submitted_by_arrival_ties_in_trace_order() {
        let host = host("[[gpu]]\nmodel = \"T4\"\nspeed = 1\n");
        let arriving = |arrivals: &[f64]| {
            let mut text = String::from("id,arrival,workload,mem_gb,deadline,weight\n");
            for (i, a) in arrivals.iter().enumerate() {
                text.push_str(&format!("t{i},{a},1,1,9,1\n"));
            }
            trace(&host, text.as_bytes())
        };
        assert_eq!(
            arrival_order(&arriving(&[0.0, 1.0, 1.0, 2.5])),
            [0, 1, 2, 3]
        );
        assert_eq!(
            arrival_order(&arriving(&[3.0, 1.0, 2.0, 1.0, 0.5, 3.0, 1.0])),
            [4, 1, 3, 6, 2, 0, 5]
        );
        assert!(arrival_order(&arriving(&[])).is_empty());
    }

    /// Without the schedule the metrics are the same, to the bit.
    #[test]
    fn metrics_do_not_depend_on_keeping_the_schedule() {
        let host = host("[[gpu]]\nmodel = \"T4\"\ncount = 2\nspeed = 1\n[[gpu]]\nmodel = \"V100-SXM2-32GB\"\nspeed = 0.6\n");
        let mut text = String::from("id,arrival,workload,mem_gb,deadline,weight,gpus\n");
        for i in 0..200 {
            let gpus = if i % 7 == 0 { 2 } else { 1 };
            text.push_str(&format!(
                "t{i},{},{},4,{},{},{gpus}\n",
                f64::from(i) * 0.37,
                1.0 + f64::from(i % 13) * 0.71,
                f64::from(i) * 0.37 + 5.0,
                1 + i % 3
            ));
        }
        let trace = trace(&host, text.as_bytes());
        let run = |schedule| {
            simulate_with(
                &host,
                &trace,
                gpu_agent_core::policy::builtin_fifo(),
                &Options {
                    schedule,
                    ..Options::default()
                },
                |_| {},
            )
            .unwrap()
        };
        let (with, without) = (run(true), run(false));
        assert_eq!(with.schedule.len(), 200 + 29);
        assert!(without.schedule.is_empty());
        assert_eq!(with.metrics, without.metrics);
        assert_eq!(
            with.metrics.energy_j.to_bits(),
            without.metrics.energy_j.to_bits()
        );
        assert!(with.metrics.energy_run_j > 0.0);
        assert_eq!(
            with.metrics.energy_run_j,
            with.schedule.iter().map(|r| r.energy_j).sum::<f64>()
        );
    }

    /// With `actual`, a task that really runs ten times its estimate hands
    /// the tasks queued behind it back to the policy at its expected end,
    /// which runs them on the other device.
    #[test]
    fn an_overrunning_task_does_not_strand_its_queue() {
        let host = host("[[gpu]]\nmodel = \"T4\"\ncount = 2\nspeed = 1\n");
        let text = "id,arrival,workload,mem_gb,deadline,weight,actual\n\
                    a,0,1,1,100,1,10\nx,0,1.95,1,100,1,\nb,0,0.3,1,100,1,\n\
                    c,0,0.3,1,100,1,\nd,0,0.3,1,100,1,\n";
        let trace = trace(&host, text.as_bytes());
        let out = simulate(
            &host,
            &trace,
            gpu_agent_core::policy::builtin_fifo(),
            |_| {},
        )
        .unwrap();
        let row = |id: &str| out.schedule.iter().find(|r| r.id == id).unwrap();
        assert_eq!((row("a").gpu, row("a").end), (0, 10.0));
        for (id, start) in [("b", 1.95), ("d", 2.25), ("c", 2.55)] {
            assert_eq!(row(id).gpu, 1, "{id}");
            assert!((row(id).start - start).abs() < 1e-9, "{id}: {:?}", row(id));
        }
        assert_eq!(out.metrics.makespan, 10.0);
        assert!(out.metrics.twct.is_finite() && out.metrics.energy_j.is_finite());
    }
}
