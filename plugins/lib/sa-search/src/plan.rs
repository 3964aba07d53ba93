//! The planning model: an order of the pending tasks, list-scheduled by the
//! greedy earliest-finish rule on top of each device's availability, and its
//! cost; evaluated in full or, for a neighbour, from its first changed position.

use std::cmp::Ordering;

use gpu_agent_eft_rule::{choose, runtimes_into, Scratch};
use gpu_agent_plugin_api::{TaskKey, View};

/// One task to plan.
#[derive(Debug, Clone, PartialEq)]
pub struct PlanTask {
    /// Devices it needs at once.
    pub gpus: u32,
    /// Priority weight w.
    pub weight: f64,
    /// Absolute deadline d, seconds.
    pub deadline: f64,
    /// Run time on each device (`f64::INFINITY` where it cannot run).
    pub runtimes: Vec<f64>,
}

/// The cost of a plan: total weighted tardiness, ties broken by the total
/// weighted completion time. Compared lexicographically.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Cost {
    /// sum w_i max(0, c_i - d_i) over the planned tasks.
    pub twt: f64,
    /// sum w_i c_i over the planned tasks.
    pub wct: f64,
}

impl Cost {
    const ZERO: Cost = Cost { twt: 0.0, wct: 0.0 };

    /// Lexicographic order: `twt`, then `wct`.
    pub fn total_cmp(&self, other: &Cost) -> Ordering {
        self.twt
            .total_cmp(&other.twt)
            .then(self.wct.total_cmp(&other.wct))
    }

    fn add(self, task: &PlanTask, end: f64) -> Cost {
        Cost {
            twt: self.twt + task.weight * (end - task.deadline).max(0.0),
            wct: self.wct + task.weight * end,
        }
    }
}

/// Where and when a planned task runs.
#[derive(Debug, Clone, PartialEq)]
pub struct Placement {
    /// Its devices, ascending.
    pub devices: Vec<u32>,
    /// Planned start, seconds.
    pub start: f64,
    /// Planned completion, seconds.
    pub end: f64,
}

/// The tasks of one decision, numbered 0.. in the order given, and the
/// devices' state: the time and when each device is free.
#[derive(Debug, Clone)]
pub struct Problem {
    now: f64,
    avail: Vec<f64>,
    tasks: Vec<PlanTask>,
}

impl Problem {
    /// A problem at `now` on devices free from `avail[j]`; every task's
    /// `runtimes` has one entry per device.
    ///
    /// # Panics
    /// When a task's `runtimes` does not match the devices.
    pub fn new(now: f64, avail: Vec<f64>, tasks: Vec<PlanTask>) -> Problem {
        for (i, t) in tasks.iter().enumerate() {
            assert_eq!(
                t.runtimes.len(),
                avail.len(),
                "task {i}: one run time per device"
            );
        }
        Problem { now, avail, tasks }
    }

    /// The tasks `keys` of `view` on its devices (free from `available_at`).
    pub fn from_view(view: &View<'_>, keys: &[TaskKey]) -> Problem {
        let tasks = keys
            .iter()
            .map(|&key| {
                let task = view.task(key);
                let mut runtimes = Vec::with_capacity(view.devices.len());
                runtimes_into(view, task, &mut runtimes);
                PlanTask {
                    gpus: task.gpus,
                    weight: task.weight,
                    deadline: task.deadline,
                    runtimes,
                }
            })
            .collect();
        let avail = view.devices.iter().map(|d| d.available_at).collect();
        Problem::new(view.now, avail, tasks)
    }

    /// Number of tasks.
    pub fn len(&self) -> usize {
        self.tasks.len()
    }

    /// Whether there are no tasks.
    pub fn is_empty(&self) -> bool {
        self.tasks.is_empty()
    }

    /// Number of devices.
    pub fn devices(&self) -> usize {
        self.avail.len()
    }

    /// Task `i`.
    pub fn task(&self, i: usize) -> &PlanTask {
        &self.tasks[i]
    }

    /// The cost of list-scheduling `order` from scratch.
    pub fn cost(&self, order: &[u32]) -> Cost {
        let mut cost = Cost::ZERO;
        self.walk(order, |i, _, _, end| cost = cost.add(&self.tasks[i], end));
        cost
    }

    /// The plan of `order`: each task's placement in order, `None` for a task
    /// too few online devices can hold now (left out of the plan).
    pub fn plan(&self, order: &[u32]) -> Vec<Option<Placement>> {
        let mut by_task = vec![None; self.len()];
        self.walk(order, |i, devices, start, end| {
            by_task[i] = Some(Placement {
                devices: devices.to_vec(),
                start,
                end,
            })
        });
        order.iter().map(|&i| by_task[i as usize].take()).collect()
    }

    /// List-schedules `order`, telling `f` each placed task, its devices, start
    /// and completion.
    fn walk(&self, order: &[u32], mut f: impl FnMut(usize, &[u32], f64, f64)) {
        let mut avail = self.avail.clone();
        let mut scratch = Scratch::default();
        let mut chosen = Vec::new();
        for &i in order {
            let task = &self.tasks[i as usize];
            let Some(end) = choose(
                self.now,
                task.gpus,
                &task.runtimes,
                &avail,
                &mut scratch,
                &mut chosen,
            ) else {
                continue;
            };
            // The start as the rule computes it: the last of its devices to be free.
            let start = chosen
                .iter()
                .map(|&j| avail[j as usize])
                .fold(self.now, f64::max);
            for &j in &chosen {
                avail[j as usize] = end;
            }
            f(i as usize, &chosen, start, end);
        }
    }
}

/// Positions between two saved availability rows: a neighbour is evaluated
/// from the row at or before its first changed position, replaying at most
/// `STRIDE - 1` unchanged positions, and saving a row costs one copy of the
/// device vector per `STRIDE` positions instead of one per position.
const STRIDE: usize = 8;

/// Checkpoints of one order's list schedule: every device's availability
/// before positions 0, STRIDE, 2 STRIDE, ...; the cost before each position;
/// each position's completion (`NaN` when its task was left out).
#[derive(Debug, Clone)]
struct Checkpoints {
    /// One row of one entry per device for each multiple of STRIDE below n
    /// (at least one row).
    avail: Vec<f64>,
    /// n + 1 prefix costs.
    cost: Vec<Cost>,
    /// n completions.
    end: Vec<f64>,
}

/// An order and its checkpoints, so that a neighbour that agrees with it on
/// its first `from` positions is evaluated from about position `from` only.
#[derive(Debug)]
pub struct Evaluator<'p> {
    problem: &'p Problem,
    order: Vec<u32>,
    current: Checkpoints,
    candidate: Checkpoints,
    /// The availability while evaluating.
    work: Vec<f64>,
    scratch: Scratch,
    chosen: Vec<u32>,
}

impl<'p> Evaluator<'p> {
    /// Evaluates `order` (a permutation of `problem`'s tasks) in full.
    pub fn new(problem: &'p Problem, order: Vec<u32>) -> Evaluator<'p> {
        let (n, m) = (problem.len(), problem.devices());
        assert_eq!(order.len(), n, "an order of every task");
        let rows = n.div_ceil(STRIDE).max(1);
        let mut avail = vec![0.0; rows * m];
        avail[..m].copy_from_slice(&problem.avail);
        let checkpoints = Checkpoints {
            avail,
            cost: vec![Cost::ZERO; n + 1],
            end: vec![f64::NAN; n],
        };
        let mut evaluator = Evaluator {
            problem,
            order: Vec::new(),
            current: checkpoints.clone(),
            candidate: checkpoints,
            work: problem.avail.clone(),
            scratch: Scratch::default(),
            chosen: Vec::new(),
        };
        // From position 0 with no limit: a full evaluation.
        let mut order = order;
        evaluator.evaluate(&order, 0, f64::INFINITY);
        evaluator.accept(&mut order, 0);
        evaluator
    }

    /// The current order.
    pub fn order(&self) -> &[u32] {
        &self.order
    }

    /// The current order's cost.
    pub fn cost(&self) -> Cost {
        self.current.cost[self.order.len()]
    }

    /// The positions of the current order whose tasks are planned to finish
    /// after their deadlines, ascending, written into `out`.
    pub fn tardy_positions(&self, out: &mut Vec<usize>) {
        out.clear();
        out.extend(
            self.order
                .iter()
                .zip(&self.current.end)
                .enumerate()
                .filter(|(_, (&i, &end))| end > self.problem.tasks[i as usize].deadline)
                .map(|(pos, _)| pos),
        );
    }

    /// Places task `i` on `work`; returns its completion, or `None` when too
    /// few devices can hold it now.
    fn place(&mut self, i: u32) -> Option<f64> {
        let task = &self.problem.tasks[i as usize];
        let end = choose(
            self.problem.now,
            task.gpus,
            &task.runtimes,
            &self.work,
            &mut self.scratch,
            &mut self.chosen,
        )?;
        for &j in &self.chosen {
            self.work[j as usize] = end;
        }
        Some(end)
    }

    /// Evaluates `candidate`, an order that agrees with the current one before
    /// position `from`, from there on. Stops and returns `None` as soon as its
    /// total weighted tardiness exceeds `limit` (costs only grow along an
    /// order); otherwise returns its cost, the same bit for bit as
    /// [`Problem::cost`]. [`Evaluator::accept`] then makes it current without
    /// evaluating it again.
    pub fn evaluate(&mut self, candidate: &[u32], from: usize, limit: f64) -> Option<Cost> {
        let m = self.problem.devices();
        let base = from / STRIDE * STRIDE;
        self.work
            .copy_from_slice(&self.current.avail[base / STRIDE * m..][..m]);
        for &i in &candidate[base..from] {
            self.place(i);
        }
        let mut cost = self.current.cost[from];
        for (pos, &i) in candidate.iter().enumerate().skip(from) {
            if pos % STRIDE == 0 {
                self.candidate.avail[pos / STRIDE * m..][..m].copy_from_slice(&self.work);
            }
            let end = self.place(i);
            if let Some(end) = end {
                cost = cost.add(&self.problem.tasks[i as usize], end);
            }
            self.candidate.end[pos] = end.unwrap_or(f64::NAN);
            self.candidate.cost[pos + 1] = cost;
            if cost.twt > limit {
                return None;
            }
        }
        Some(cost)
    }

    /// Makes `candidate`, just evaluated by [`Evaluator::evaluate`] from `from`
    /// without stopping, the current order; `candidate` receives the previous
    /// current order (its buffer is reused).
    pub fn accept(&mut self, candidate: &mut Vec<u32>, from: usize) {
        let m = self.problem.devices();
        let (cur, cand) = (&mut self.current, &self.candidate);
        let row = from.div_ceil(STRIDE) * m;
        cur.avail[row..].copy_from_slice(&cand.avail[row..]);
        cur.cost[from + 1..].copy_from_slice(&cand.cost[from + 1..]);
        cur.end[from..].copy_from_slice(&cand.end[from..]);
        std::mem::swap(&mut self.order, candidate);
    }
}

#[cfg(test)]
pub(crate) mod tests;
