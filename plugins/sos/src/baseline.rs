//! `model = baseline`: the policy around [`TickModel`], the published
//! software scheduler's tick-by-tick state machine.
//!
//! Time is cut into ticks of `tick_s` seconds; task K's expected time on
//! device i is p_iK = its run time there in ticks (rounded, 1 to 255), its
//! weight rounded to 0..=255, and it leaves device i's virtual schedule after
//! floor(alpha · p_iK) ticks at its head (at least 1). Tasks are admitted in
//! arrival order, at most one per tick, and in batches of `batch` (the next
//! batch once every task of the last has left; 0: no batches).
//!
//! Ticks run lazily: at each event, every tick before the event's time (and
//! at a wake-up, the tick at its time too, which in the simulator comes after
//! that instant's arrivals) runs. A task that leaves joins the end of its
//! device's local queue then, so the policy asks to be woken where a task can
//! leave ([`TickModel::next_departure`]); a tick where one is only admitted
//! decides nothing and runs at the next event, before the event's task
//! arrives or is withdrawn, as a wake-up at that tick would have run it. The
//! decisions are the same as with a wake-up at every tick where a task is
//! admitted or leaves, in fewer calls; while a task is held back for an
//! offline device, the policy is woken at each of those ticks, as each call
//! retries it.
//!
//! Beyond the baseline, which has none of these: a device that cannot hold a
//! task (memory, run time, offline) counts as full for it; a task that too
//! few devices could ever hold is refused; a gang of k goes, one copy each,
//! to the k cheapest devices that can hold it and joins their local queues
//! once its last copy has left; a task cancelled before
//! admission is dropped, one cancelled in a virtual schedule keeps its place
//! until it would have left; a task leaving for an offline device waits for
//! it, unless it changes while offline (a MIG instance a layout change
//! retired): then it is admitted again; a task the core sends back to the
//! pending queue (a drain, an overrun) is admitted again at the end; when a
//! device comes back online or devices are added (MIG instances made at run
//! time), the model starts again from the pending queue, in arrival order.

use gpu_agent_plugin_api::{
    abi_stable::std_types::ROption, Decision, Event, PolicyImpl, TaskKey, TaskState, View,
};

use crate::returned::Placed;
use crate::ticks::{Job, Left, OnDevice, TickModel};

/// Lets a time that is a whole number of ticks in exact arithmetic count as
/// one in floating point.
const EPS: f64 = 1e-9;

/// The baseline policy.
#[derive(Debug)]
pub struct Baseline {
    /// The alpha stage's ticks for each expected time p (1..=255):
    /// floor(alpha · p), at least 1.
    alpha_ticks: [u8; 256],
    tick_s: f64,
    batch: usize,
    model: Option<TickModel<TaskKey>>,
    /// Tasks that left their virtual schedules, waiting while one of their
    /// devices is offline: (task, devices).
    held: Vec<(TaskKey, Vec<u32>)>,
    /// The last wake-up asked for.
    asked: Option<f64>,
    /// Tasks it assigned, to offer again if the core sends them back.
    placed: Placed,
    /// Whether each device was online, as of the model's making and the
    /// `DeviceChanged` events since.
    online: Vec<bool>,
    /// Scratch: the tasks leaving their virtual schedules in one call.
    left: Vec<Left<TaskKey>>,
    /// Scratch: a task's ticks on each device.
    on: Vec<OnDevice>,
}

impl Baseline {
    /// A policy with `alpha` in (0, 1], ticks of `tick_s` > 0 seconds, and
    /// batches of `batch` tasks (0: none).
    pub fn new(alpha: f64, tick_s: f64, batch: usize) -> Baseline {
        Baseline {
            alpha_ticks: std::array::from_fn(|p| {
                floor_to_u8(alpha * f64::from(p as u8) + EPS).max(1)
            }),
            tick_s,
            batch,
            model: None,
            held: Vec::new(),
            asked: None,
            placed: Placed::default(),
            online: Vec::new(),
            left: Vec::new(),
            on: Vec::new(),
        }
    }

    /// The task as the baseline holds it, with its ticks on each device in
    /// [`Baseline::on`], or why it cannot be placed.
    fn job(&mut self, view: &View<'_>, key: TaskKey) -> Result<Job, String> {
        let task = view.task(key);
        let mut ever = 0;
        let (alpha_ticks, tick_s) = (&self.alpha_ticks, self.tick_s);
        self.on.clear();
        self.on.extend(view.devices.iter().map(|d| {
            let runtime = task.runtime_on(d);
            let holds =
                d.memory_gb >= task.mem_gb && runtime.is_finite() && d.takes_gang_of(task.gpus);
            ever += usize::from(holds);
            let p = if runtime.is_finite() {
                round_to_u8(runtime / tick_s).max(1)
            } else {
                u8::MAX
            };
            OnDevice {
                p,
                alpha: alpha_ticks[usize::from(p)],
                fits: holds && d.online,
            }
        }));
        let job = Job {
            weight: round_to_u8(task.weight),
            gpus: task.gpus as usize,
        };
        if ever >= job.gpus {
            Ok(job)
        } else {
            Err(format!(
                "too few devices can hold this task (it needs {}, {ever} can)",
                job.gpus
            ))
        }
    }

    /// Hands task `key` to the model, or refuses it.
    fn arrive(&mut self, view: &View<'_>, key: TaskKey, out: &mut Vec<Decision>) {
        match self.job(view, key) {
            Ok(job) => {
                let release = ceil_to_u64(view.task(key).arrival / self.tick_s - EPS);
                self.model
                    .as_mut()
                    .expect("made first")
                    .arrive(release, key, job, &self.on);
            }
            Err(reason) => out.push(Decision::Reject {
                task: key,
                reason: reason.into(),
            }),
        }
    }

    /// Joins `key` to the end of its devices' local queues, or hands the
    /// devices back to be held while one is offline; a task no longer
    /// pending (cancelled) is dropped.
    fn assign(
        view: &View<'_>,
        key: TaskKey,
        devices: Vec<u32>,
        out: &mut Vec<Decision>,
    ) -> Result<(), Vec<u32>> {
        if view.task(key).state != TaskState::Pending {
            return Ok(());
        }
        if devices.iter().any(|&d| !view.devices[d as usize].online) {
            return Err(devices);
        }
        out.push(Decision::Assign {
            task: key,
            devices: devices.into(),
            position: ROption::RNone,
            clocks: ROption::RNone,
        });
        Ok(())
    }
}

/// `x.round()` clamped to 0..=255, for a finite `x` (exact, without libm's
/// `round`, which baseline x86-64 lacks as an instruction): below 255 the
/// integer part is exact and so is the fraction left.
fn round_to_u8(x: f64) -> u8 {
    if x >= 255.0 {
        return u8::MAX;
    }
    // 0 for a negative x, whose rounding clamps to 0 too.
    let whole = x as u8;
    whole + u8::from(x - f64::from(whole) >= 0.5)
}

/// `x.floor()` clamped to 0..=255, for a finite `x` (the cast truncates, and
/// saturates).
fn floor_to_u8(x: f64) -> u8 {
    x as u8
}

/// `x.floor()`, at least 0, as an integer (saturating), without libm.
fn floor_to_u64(x: f64) -> u64 {
    x as u64
}

/// `x.ceil()`, at least 0, as an integer (saturating), without libm.
fn ceil_to_u64(x: f64) -> u64 {
    let whole = x as u64;
    whole.saturating_add(u64::from((whole as f64) < x))
}

impl PolicyImpl for Baseline {
    fn on_event(&mut self, view: &View<'_>, event: &Event) -> Result<Vec<Decision>, String> {
        let ticks = view.now / self.tick_s;
        // The first tick at or after now.
        let now_tick = ceil_to_u64(ticks - EPS);
        let mut out = Vec::new();
        // A model of every device: made at the first call, and made again,
        // every pending task admitted anew, when devices were added (MIG
        // instances made at run time) or one came back online (which
        // devices can hold a task is fixed when it is admitted).
        // A device comes online only with a `DeviceChanged` of its own.
        let came_back = match *event {
            Event::DeviceChanged { device } => {
                let online = view.devices[device as usize].online;
                let was = self
                    .online
                    .get_mut(device as usize)
                    .map(|o| std::mem::replace(o, online));
                online && was == Some(false)
            }
            _ => false,
        };
        let fresh =
            came_back || self.model.as_ref().map(TickModel::devices) != Some(view.devices.len());
        if fresh {
            self.online.clear();
            self.online.extend(view.devices.iter().map(|d| d.online));
            self.model = Some(TickModel::new(view.devices.len(), self.batch, now_tick));
            self.held.clear();
            for &key in view.pending.iter() {
                self.arrive(view, key, &mut out);
            }
        }
        // The ticks before now at which a task was admitted (or left): a
        // wake-up at each would have run them before this event.
        let model = self.model.as_mut().expect("made");
        let left = &mut self.left;
        model.run_events_before(now_tick, |l| left.push(l));
        match *event {
            _ if fresh => {
                // Every pending task was admitted anew.
                self.placed.returned(view);
            }
            Event::Arrived { task } => self.arrive(view, task, &mut out),
            Event::Activated => {
                for &key in view.pending.iter() {
                    self.arrive(view, key, &mut out);
                }
            }
            Event::Finished { task, ok } => {
                self.placed.finished(task);
                if !ok {
                    self.model.as_mut().expect("made").withdraw_waiting(task);
                }
            }
            Event::DeviceChanged { device } => {
                // Tasks the core sent back are admitted again, and so are
                // those held for this device if it changed while offline
                // (a MIG instance a layout change retired).
                for key in self.placed.returned(view) {
                    self.arrive(view, key, &mut out);
                }
                if !view.devices[device as usize].online {
                    let (again, keep) = std::mem::take(&mut self.held)
                        .into_iter()
                        .partition(|(_, devices)| devices.contains(&device));
                    self.held = keep;
                    for (key, _) in again {
                        self.arrive(view, key, &mut out);
                    }
                }
            }
            _ => {}
        }
        // Tasks held back first, as they left first.
        if !self.held.is_empty() {
            for (key, devices) in std::mem::take(&mut self.held) {
                if let Err(devices) = Baseline::assign(view, key, devices, &mut out) {
                    self.held.push((key, devices));
                }
            }
        }
        // The ticks before now; at a wake-up, now's tick too.
        let end = if matches!(event, Event::Timer) {
            floor_to_u64(ticks + EPS) + 1
        } else {
            now_tick
        };
        let model = self.model.as_mut().expect("made");
        let left = &mut self.left;
        if end > model.tick() {
            model.run_until(end - 1, |l| left.push(l));
        }
        for l in left.drain(..) {
            if let Err(devices) = Baseline::assign(view, l.key, l.devices, &mut out) {
                self.held.push((l.key, devices));
            }
        }
        // Woken where a task can leave; ticks where one is only admitted
        // decide nothing and run at the next event. While a task is held,
        // at every tick where one is admitted too, as each event retries it.
        let wake = if self.held.is_empty() {
            model.next_departure()
        } else {
            model.next_event()
        };
        if let Some(tick) = wake {
            let time = tick as f64 * self.tick_s;
            if self.asked != Some(time) {
                out.push(Decision::WakeAt { time });
                self.asked = Some(time);
            }
        }
        self.placed.note(&out);
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn integer_rounding_agrees_with_libm() {
        // Halves, their neighbours, the clamps and a dense grid.
        let mut xs: Vec<f64> = (-600..=600).map(|i| f64::from(i) * 0.5).collect();
        for &x in &xs.clone() {
            xs.extend([x.next_up(), x.next_down(), x + 1e-9, x - 1e-9]);
        }
        xs.extend((0..100_000).map(|i| f64::from(i) * 0.003_1 - 10.0));
        xs.extend([0.0, -0.0, 1e300, -1e300, 0.49999999999999994]);
        for x in xs {
            assert_eq!(
                round_to_u8(x),
                x.round().clamp(0.0, 255.0) as u8,
                "round {x}"
            );
            assert_eq!(
                floor_to_u8(x),
                x.floor().clamp(0.0, 255.0) as u8,
                "floor {x}"
            );
            assert_eq!(floor_to_u64(x), x.floor().max(0.0) as u64, "floor {x}");
            assert_eq!(ceil_to_u64(x), x.ceil().max(0.0) as u64, "ceil {x}");
        }
    }
}
