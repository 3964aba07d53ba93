//! The published SOS software scheduler, tick by tick: a port of the state
//! machine of achieve-lab/TRETS_Software_SOS_Implementation, `c_scheduler`
//! (`cost_calculator.cpp`, `job_info_update.cpp`, `virtual_fifo.cpp`, and the
//! admission loop of `ext_mem_interface.cpp`), in its integer types.
//!
//! Per device: a cost table of [`SLOTS`] entries (a job's remaining expected
//! time, remaining weight and integer ratio w / p), an alpha table (ticks left
//! before the job leaves), and the virtual schedule itself (a queue of
//! [`SLOTS`] job ids, its head doing virtual work). Each tick runs the three
//! stages in the baseline's order, each seeing what the previous tick left:
//!
//! 1. cost: the job chosen last tick enters the cost table; the change the
//!    alpha stage decided last tick is applied (the head's remaining time
//!    drops by 1 and its weight by its ratio, or a leaving job's entry is
//!    cleared); then the newcomer's cost on each device is
//!    `w (p + Σ_{ratio_K > ratio} p_K) + p Σ_{ratio_K <= ratio} w_K`, and it
//!    goes to the cheapest device whose queue was not full, ties to the lowest
//!    index, except that when all devices cost the same they take turns.
//! 2. alpha: the head's counter drops by 1; at 0 it leaves (pop).
//! 3. queue: the newcomer enters at the count of jobs with a greater ratio;
//!    the popped head leaves for the device's local queue.
//!
//! The baseline's quirks are kept, because its decisions depend on them: a
//! change the alpha stage decided is applied again every tick until a new one
//! replaces it (so a queue that emptied clears and frees its last job's entry
//! again each tick, and a later job given the same id loses its entry), and
//! job ids are reused (1..=109, restarting at each batch; without batches
//! they are not reused).
//!
//! Speed (the decisions are the baseline's to the tick; only the work to
//! reach them differs): idle stretches run in one step per device, none on a
//! device they cannot change, and only when the device next changes; each
//! device keeps the tick its head leaves at, and the model the least of them
//! and whether the first waiting job can be admitted, so the next event costs
//! no search; each device keeps which entries of its tables belong to the
//! pending change's job and to the head (bit masks), so a tick scans no
//! table; the cost table is kept by column, padded to [`LANES`], so that a
//! newcomer's sums compile to branch-free code, and a tick without a newcomer
//! computes none; waiting jobs' ticks on each device share one buffer.

use std::collections::VecDeque;

/// Entries per device: the baseline's `JOBS_PER_MACHINE`.
pub const SLOTS: usize = 10;
/// The address stacks' size (`JOBS_PER_MACHINE + 1`).
const STACK: usize = SLOTS + 1;
/// The cost table's columns, padded with empty entries (ratio 0, weight 0:
/// behind every newcomer, adding nothing) to a whole number of vectors.
const LANES: usize = 16;

/// A job's weight and size as the baseline holds them (its ticks on each
/// device come beside it, as [`OnDevice`]s).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Job {
    /// Weight (`uint8_t`).
    pub weight: u8,
    /// Devices it needs at once (the baseline's jobs need 1). A gang goes,
    /// one copy each, to the `gpus` cheapest devices that can hold it (ties
    /// to the lower index) and leaves once its last copy has.
    pub gpus: usize,
}

/// A job on one device.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OnDevice {
    /// Expected ticks (`uint8_t`, at least 1).
    pub p: u8,
    /// Ticks at the head of the device's virtual schedule before it leaves.
    pub alpha: u8,
    /// Whether the device can hold it (the baseline's all can).
    pub fits: bool,
}

/// A cost-table entry: a job's remaining expected ticks and weight, and its
/// ratio w / p.
#[derive(Debug, Clone, Copy, Default)]
struct CostEntry {
    job: u32,
    proc: u8,
    weight: u8,
    wspt: u8,
}

/// The cost table, by column ([`LANES`] wide; entries past [`SLOTS`] stay
/// empty).
#[derive(Debug, Clone)]
struct CostTable {
    job: [u32; LANES],
    proc: [u8; LANES],
    weight: [u8; LANES],
    wspt: [u8; LANES],
}

impl CostTable {
    fn new() -> CostTable {
        CostTable {
            job: [0; LANES],
            proc: [0; LANES],
            weight: [0; LANES],
            wspt: [0; LANES],
        }
    }

    fn set(&mut self, j: usize, e: CostEntry) {
        self.job[j] = e.job;
        self.proc[j] = e.proc;
        self.weight[j] = e.weight;
        self.wspt[j] = e.wspt;
    }

    /// (Σ p of the entries whose ratio is above `ratio`, Σ w of the others,
    /// how many are above): the baseline's loop over its table, as masked
    /// columns (LLVM compiles these to branch-free vector code).
    fn sums(&self, ratio: u8) -> (u32, u32, u8) {
        let above: [u8; LANES] =
            std::array::from_fn(|j| 0u8.wrapping_sub(u8::from(self.wspt[j] > ratio)));
        let high: [u8; LANES] = std::array::from_fn(|j| self.proc[j] & above[j]);
        let low: [u8; LANES] = std::array::from_fn(|j| self.weight[j] & !above[j]);
        let ahead: [u8; LANES] = std::array::from_fn(|j| above[j] & 1);
        (
            u32::from(column_sum(&high)),
            u32::from(column_sum(&low)),
            column_sum(&ahead) as u8,
        )
    }
}

/// Σ `column` (at most [`LANES`] · 255: no overflow). Not inlined: on its
/// own LLVM sums the column in a few vector instructions, and inlined three
/// times into [`CostTable::sums`] it no longer does.
#[inline(never)]
fn column_sum(column: &[u8; LANES]) -> u16 {
    column.iter().map(|&x| u16::from(x)).sum()
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
enum Op {
    #[default]
    Update,
    Invalidate,
}

/// The baseline's ring of free table addresses (`stack_handler_*`).
#[derive(Debug, Clone)]
struct Addresses {
    ring: [u8; STACK],
    head: usize,
    tail: usize,
}

impl Addresses {
    fn new() -> Addresses {
        let mut ring = [0u8; STACK];
        for (i, r) in ring.iter_mut().enumerate().take(SLOTS) {
            *r = i as u8;
        }
        Addresses {
            ring,
            head: 0,
            tail: SLOTS,
        }
    }

    /// Whether a push would be dropped (the baseline's full-stack test).
    fn is_full(&self) -> bool {
        if self.tail == SLOTS {
            self.head == 0
        } else {
            self.tail + 1 == self.head
        }
    }

    fn push(&mut self, address: u8) {
        if self.is_full() {
            return;
        }
        self.ring[self.tail] = address;
        self.tail = if self.tail == SLOTS { 0 } else { self.tail + 1 };
    }

    fn pop(&mut self) -> Option<usize> {
        if self.head == self.tail {
            return None;
        }
        let address = self.ring[self.head] as usize;
        self.head = if self.head == SLOTS { 0 } else { self.head + 1 };
        Some(address)
    }
}

/// The lanes of `column` that hold `job`, as a bit mask (bit j: lane j);
/// branch-free over all [`LANES`].
fn lanes_of(column: &[u32; LANES], job: u32) -> u16 {
    column
        .iter()
        .enumerate()
        .fold(0, |mask, (j, &x)| mask | (u16::from(x == job) << j))
}

/// The lanes set in `mask`, in increasing order.
fn lanes(mut mask: u16) -> impl Iterator<Item = usize> {
    std::iter::from_fn(move || {
        (mask != 0).then(|| {
            let j = mask.trailing_zeros() as usize;
            mask &= mask - 1;
            j
        })
    })
}

/// The alpha table: per entry a job id (0: free) and its ticks left at the
/// head, by column ([`LANES`] wide; entries past [`SLOTS`] stay free).
#[derive(Debug, Clone)]
struct AlphaTable {
    job: [u32; LANES],
    left: [u8; LANES],
}

/// One device's state.
///
/// Two masks spare the scans of the baseline's loops over its tables:
/// `change_lanes` holds the cost-table entries of the pending change's job,
/// `head_lanes` the alpha-table entries of the head. Only what changes a
/// table's job ids, the head or the change updates them.
#[derive(Debug, Clone)]
struct Machine {
    cost: CostTable,
    cost_free: Addresses,
    /// The job chosen last tick, entering the cost table this tick.
    incoming: Option<CostEntry>,
    /// The alpha stage's last change: (job, op); job 0 is none.
    change: (u32, Op),
    /// The cost-table entries whose job is `change`'s (none for job 0).
    change_lanes: u16,
    alpha: AlphaTable,
    /// The alpha-table entries whose job is the head (none without a head).
    head_lanes: u16,
    alpha_free: Addresses,
    queue: [u32; SLOTS],
    count: usize,
    full: bool,
    /// The tick at which the head leaves if nothing new arrives
    /// ([`Machine::ticks_to_pop`] ticks after it was last computed): kept
    /// up to date by [`TickModel::step`], and unchanged by idle ticks.
    leaves_at: Option<u64>,
    /// Whether idle ticks change nothing here (no head, nothing incoming,
    /// and the pending change is none or a clearing already done with the
    /// address ring full); only [`TickModel::step`] changes that.
    quiet: bool,
}

impl Machine {
    fn new() -> Machine {
        Machine {
            cost: CostTable::new(),
            cost_free: Addresses::new(),
            incoming: None,
            change: (0, Op::Update),
            change_lanes: 0,
            alpha: AlphaTable {
                job: [0; LANES],
                left: [0; LANES],
            },
            head_lanes: 0,
            alpha_free: Addresses::new(),
            queue: [0; SLOTS],
            count: 0,
            full: false,
            leaves_at: None,
            quiet: false,
        }
    }

    /// The head of the virtual schedule (0: none).
    fn top(&self) -> u32 {
        self.queue[0]
    }

    /// Sets the pending change, and the entries it applies to.
    fn set_change(&mut self, change: (u32, Op)) {
        if change.0 != self.change.0 {
            self.change_lanes = if change.0 == 0 {
                0
            } else {
                lanes_of(&self.cost.job, change.0)
            };
        }
        self.change = change;
    }

    /// Recomputes which alpha-table entries are the head's, after the head
    /// or the table's job ids changed.
    fn find_head(&mut self) {
        let top = self.top();
        self.head_lanes = if top == 0 {
            0
        } else {
            lanes_of(&self.alpha.job, top)
        };
    }

    /// Stage 1's bookkeeping on this device: the incoming job enters, the
    /// last change is applied.
    fn settle(&mut self) {
        self.enter_incoming();
        self.apply_change();
    }

    /// Stage 1's cost, after [`Machine::settle`]: (cost, position) of a
    /// newcomer of weight `w` and expected ticks `p`. (The baseline applies
    /// the change entry by entry as it sums; a change touches only its own
    /// entry, so applying it first gives the same sums.)
    fn cost(&self, w: u8, p: u8) -> (u32, u8) {
        let ratio = w.checked_div(p).unwrap_or(0);
        let (high, low, position) = self.cost.sums(ratio);
        let (w, p) = (u32::from(w), u32::from(p));
        (w * (p + high) + p * low, position)
    }

    /// The job chosen last tick takes a free cost-table address.
    fn enter_incoming(&mut self) {
        if let Some(entry) = self.incoming.take() {
            // The baseline stops when no address is free; it never happens
            // with at most SLOTS jobs per device, short of the reuse quirk.
            if let Some(a) = self.cost_free.pop() {
                self.cost.set(a, entry);
                let bit = 1 << a;
                if entry.job == self.change.0 {
                    self.change_lanes |= bit;
                } else {
                    self.change_lanes &= !bit;
                }
            }
        }
    }

    /// The pending change, once, to every entry of its job (in address
    /// order, as the baseline's loop over its table).
    fn apply_change(&mut self) {
        let t = &mut self.cost;
        match self.change.1 {
            Op::Update => {
                for j in lanes(self.change_lanes) {
                    t.proc[j] = t.proc[j].wrapping_sub(1);
                    t.weight[j] = t.weight[j].wrapping_sub(t.wspt[j]);
                }
            }
            Op::Invalidate => {
                for j in lanes(self.change_lanes) {
                    t.proc[j] = 0;
                    t.weight[j] = 0;
                    t.wspt[j] = 0;
                    self.cost_free.push(j as u8);
                }
            }
        }
    }

    /// Stage 2: the head's counter; returns whether it leaves.
    fn alpha_stage(&mut self, newcomer: Option<(u32, u8)>) -> bool {
        let top = self.top();
        let mut pop = false;
        if top != 0 && self.head_lanes != 0 {
            // Every entry of the head counts down; the last decides.
            let mut op = Op::Update;
            for i in lanes(self.head_lanes) {
                self.alpha.left[i] = self.alpha.left[i].wrapping_sub(1);
                pop = self.alpha.left[i] == 0;
                if pop {
                    self.alpha.job[i] = 0;
                    self.alpha_free.push(i as u8);
                    op = Op::Invalidate;
                } else {
                    op = Op::Update;
                }
            }
            self.set_change((top, op));
        }
        if let Some((job, alpha)) = newcomer {
            if let Some(a) = self.alpha_free.pop() {
                self.alpha.job[a] = job;
                self.alpha.left[a] = alpha;
            }
        }
        pop
    }

    /// Stage 3: the queue; returns the job that left, if any.
    fn queue_stage(&mut self, newcomer: Option<(u32, u8)>, pop: bool) -> Option<u32> {
        if newcomer.is_none() && !pop {
            return None;
        }
        let before = self.queue;
        match newcomer {
            Some((job, position)) => {
                // Never past the end (the baseline would lose the job).
                let at = (position as usize).min(SLOTS - 1);
                if pop {
                    // The head leaves as the newcomer enters: shift left up to
                    // the newcomer's place.
                    let at = at.saturating_sub(1);
                    self.queue[..at].copy_from_slice(&before[1..=at]);
                    self.queue[at] = job;
                } else {
                    self.queue[at + 1..].copy_from_slice(&before[at..SLOTS - 1]);
                    self.queue[at] = job;
                }
                self.count += 1;
            }
            None if pop => {
                self.queue[..SLOTS - 1].copy_from_slice(&before[1..]);
                self.queue[SLOTS - 1] = 0;
            }
            None => {}
        }
        let popped = pop.then(|| {
            self.count -= 1;
            before[0]
        });
        self.full = self.count == SLOTS;
        popped.filter(|&j| j != 0)
    }

    /// After a tick `tick` in which the head or the alpha table changed:
    /// finds the head's entries and sets [`Machine::leaves_at`].
    fn refresh_head(&mut self, tick: u64) {
        self.find_head();
        self.leaves_at = self.ticks_to_pop().map(|n| tick + n);
    }

    /// Ticks until the head leaves (when nothing new arrives), if it has one.
    fn ticks_to_pop(&self) -> Option<u64> {
        if self.head_lanes == 0 {
            return None;
        }
        // The alpha stage's last entry of the head decides.
        let last = 15 - self.head_lanes.leading_zeros() as usize;
        Some(match self.alpha.left[last] {
            0 => 256,
            left => u64::from(left),
        })
    }

    /// `n` ticks in which no job arrives and none leaves, at once.
    fn idle(&mut self, n: u64) {
        if n == 0 || self.quiet {
            return;
        }
        self.enter_incoming();
        // Whether the alpha stage counts the head down.
        debug_assert_eq!(self.leaves_at.is_some(), self.head_lanes != 0);
        if self.leaves_at.is_some() {
            // The pending change applies at the first tick; from then on the
            // alpha stage asks, each tick, for the head's update.
            let head = (self.top(), Op::Update);
            if self.change == head {
                self.repeat_change(n);
            } else {
                self.repeat_change(1);
                self.set_change(head);
                self.repeat_change(n - 1);
            }
            let r = (n % 256) as u8;
            for i in lanes(self.head_lanes) {
                self.alpha.left[i] = self.alpha.left[i].wrapping_sub(r);
            }
        } else {
            // Nothing changes the pending change: it applies every tick.
            self.repeat_change(n);
            // Repeating it again would change nothing.
            self.quiet = self.incoming.is_none()
                && match self.change {
                    (0, _) => true,
                    (_, Op::Invalidate) => self.cost_free.is_full(),
                    (_, Op::Update) => false,
                };
        }
    }

    /// Applies the pending change `n` times, as `n` ticks' cost stages do.
    fn repeat_change(&mut self, n: u64) {
        if self.change_lanes == 0 || n == 0 {
            return;
        }
        match self.change.1 {
            Op::Update => {
                let r = (n % 256) as u8;
                let t = &mut self.cost;
                for j in lanes(self.change_lanes) {
                    t.proc[j] = t.proc[j].wrapping_sub(r);
                    t.weight[j] = t.weight[j].wrapping_sub(t.wspt[j].wrapping_mul(r));
                }
            }
            Op::Invalidate => {
                // Clearing is idempotent, so after the first time only the
                // pushes of the cleared addresses change anything, until the
                // ring is full (after at most STACK pushes).
                for _ in 0..n.min(STACK as u64 + 1) {
                    self.apply_change();
                    if self.cost_free.is_full() {
                        break;
                    }
                }
            }
        }
    }

    /// Whether the masks agree with the tables (for debug assertions).
    fn masks_agree(&self) -> bool {
        let change = if self.change.0 == 0 {
            0
        } else {
            lanes_of(&self.cost.job, self.change.0)
        };
        let head = if self.top() == 0 {
            0
        } else {
            lanes_of(&self.alpha.job, self.top())
        };
        change == self.change_lanes && head == self.head_lanes
    }
}

/// A job that left its virtual schedule(s): the caller's key and its devices.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Left<K> {
    /// The tick it left at.
    pub tick: u64,
    /// The caller's key.
    pub key: K,
    /// Its devices, in index order (one but for a gang).
    pub devices: Vec<u32>,
}

/// A job in flight: its key, its devices, and its copies still in virtual
/// schedules.
#[derive(Debug, Clone)]
struct InFlight<K> {
    key: K,
    devices: Vec<u32>,
    copies: usize,
}

/// A job waiting for admission; its [`OnDevice`]s are the next ones in
/// [`TickModel::on`].
#[derive(Debug, Clone)]
struct Waiting<K> {
    release: u64,
    key: K,
    job: Job,
    /// Its least alpha on a device that can hold it (at least 1; 255 where
    /// none can, which holds it back anyway).
    soonest: u8,
}

/// The baseline's scheduler and admission loop.
#[derive(Debug, Clone)]
pub struct TickModel<K> {
    machines: Vec<Machine>,
    /// The device whose turn it is when all cost the same.
    turn: usize,
    /// The next tick to run.
    tick: u64,
    /// The devices' own next tick: the idle ticks from it to `tick` are
    /// run at once when the devices next change (running them in one
    /// stretch or several is the same).
    settled: u64,
    /// Jobs not yet admitted, in arrival order.
    waiting: VecDeque<Waiting<K>>,
    /// Their ticks on each device, job after job from `on[on_start]` (one
    /// allocation for all; the admitted jobs' ticks before `on_start` are
    /// dropped now and then).
    on: Vec<OnDevice>,
    on_start: usize,
    /// Whether every queue was full after the last tick.
    all_full: bool,
    /// Jobs per batch (0: no batches).
    batch: usize,
    /// Jobs admitted in the current batch.
    admitted: usize,
    /// Jobs admitted and not yet left.
    in_flight: usize,
    /// The id the next job gets, and how many ids there are.
    next_id: u32,
    ids: u32,
    /// Each id in flight (hashbrown's default hasher: ids are ours, not an
    /// adversary's, so SipHash's protection buys nothing here).
    keys: hashbrown::HashMap<u32, InFlight<K>>,
    /// The first tick at which a head leaves, if any: the least
    /// `leaves_at`, kept by [`TickModel::step`].
    pops: Option<u64>,
    /// The release of the first waiting job if nothing but its release holds
    /// it back, kept by whatever changes that ([`TickModel::refresh_front`]).
    front: Option<u64>,
    /// Scratch: the newcomer's ticks on each device.
    newcomer: Vec<OnDevice>,
    /// Scratch: each device's (cost, position) for the newcomer.
    costs: Vec<(u32, u8)>,
}

impl<K: Copy> TickModel<K> {
    /// A model of `devices` devices, admitting `batch` jobs at a time (0: no
    /// batches), starting at `tick`.
    pub fn new(devices: usize, batch: usize, tick: u64) -> TickModel<K> {
        // The baseline's ids: MEM_DATA_SIZE + 9 of them, restarting at each
        // batch, which only begins once the last has left: no two jobs in
        // flight share one. Without batches a job may wait in a virtual
        // schedule while any number of others pass it, so ids are not reused.
        let ids = if batch > 0 {
            u32::try_from(batch).map_or(u32::MAX, |b| b.saturating_add(9))
        } else {
            u32::MAX
        };
        TickModel {
            machines: (0..devices).map(|_| Machine::new()).collect(),
            turn: 0,
            tick,
            settled: tick,
            waiting: VecDeque::new(),
            on: Vec::new(),
            on_start: 0,
            all_full: false,
            batch,
            admitted: 0,
            in_flight: 0,
            next_id: 1,
            ids,
            keys: Default::default(),
            pops: None,
            front: None,
            newcomer: Vec::with_capacity(devices),
            costs: vec![(0, 0); devices],
        }
    }

    /// The next tick to run.
    pub fn tick(&self) -> u64 {
        self.tick
    }

    /// A job released at `release` (admitted in arrival order, one per
    /// tick), with its ticks `on` each device, by device index (devices
    /// past the model's, added since it was made, are not its).
    pub fn arrive(&mut self, release: u64, key: K, job: Job, on: &[OnDevice]) {
        let on = &on[..self.machines.len()];
        let soonest = on
            .iter()
            .filter(|on| on.fits)
            .map(|on| on.alpha.max(1))
            .min()
            .unwrap_or(u8::MAX);
        self.on.extend_from_slice(on);
        debug_assert_eq!(
            self.on.len() - self.on_start,
            (self.waiting.len() + 1) * self.machines.len()
        );
        self.waiting.push_back(Waiting {
            release,
            key,
            job,
            soonest,
        });
        if self.waiting.len() == 1 {
            self.refresh_front();
        }
    }

    /// Drops `key` if it is still waiting for admission.
    pub fn withdraw_waiting(&mut self, key: K)
    where
        K: PartialEq,
    {
        if let Some(k) = self.waiting.iter().position(|w| w.key == key) {
            self.waiting.remove(k);
            let from = self.on_start + k * self.machines.len();
            self.on.drain(from..from + self.machines.len());
            self.refresh_front();
        }
    }

    /// How many devices it models.
    pub fn devices(&self) -> usize {
        self.machines.len()
    }

    /// Sets [`TickModel::front`], after the first waiting job or what holds
    /// it back changed.
    fn refresh_front(&mut self) {
        self.front = self.unheld_release();
    }

    /// The first waiting job's release, unless something else holds it back:
    /// every queue full, its batch waiting for the last to leave, or fewer
    /// devices that can hold it with room than it needs.
    fn unheld_release(&self) -> Option<u64> {
        let w = self.waiting.front()?;
        if self.all_full || !(self.batch == 0 || self.admitted < self.batch || self.in_flight == 0)
        {
            return None;
        }
        let open = self
            .machines
            .iter()
            .zip(&self.on[self.on_start..])
            .filter(|(m, on)| on.fits && !m.full)
            .count();
        (open >= w.job.gpus.max(1)).then_some(w.release)
    }

    /// The next tick at which a job can leave or be admitted, if any.
    pub fn next_event(&self) -> Option<u64> {
        debug_assert!(self
            .machines
            .iter()
            .all(|m| m.masks_agree()
                && m.leaves_at == m.ticks_to_pop().map(|n| self.settled + n - 1)));
        debug_assert_eq!(
            self.pops,
            self.machines.iter().filter_map(|m| m.leaves_at).min()
        );
        debug_assert_eq!(self.front, self.unheld_release());
        let admit = self.front.map(|release| release.max(self.tick));
        match (self.pops, admit) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// The earliest tick at which a job can leave, as far as the jobs known
    /// now tell (at or before the next departure, if any): a head leaves at
    /// its `leaves_at`, unless a newcomer displaces it (later, then), and a
    /// job admitted at tick t, which no earlier than the jobs ahead of it and
    /// one per tick, leaves no sooner than t + its least alpha (at least 1).
    /// No admission is possible, and so none counts, while the first waiting
    /// job is held back: only a departure changes that.
    pub fn next_departure(&self) -> Option<u64> {
        let mut soonest = self.pops;
        if self.front.is_none() {
            return soonest;
        }
        let mut admit = self.tick;
        for w in &self.waiting {
            admit = admit.max(w.release);
            if soonest.is_some_and(|s| s <= admit + 1) {
                break;
            }
            let leaves = admit + u64::from(w.soonest);
            soonest = Some(soonest.map_or(leaves, |s| s.min(leaves)));
            admit += 1;
        }
        soonest
    }

    /// Runs every tick before `end` at which a job can leave or be admitted,
    /// and the idle ticks between them, as wake-ups at each of those ticks
    /// would have; the idle ticks after the last of them are left to run.
    pub fn run_events_before(&mut self, end: u64, mut left: impl FnMut(Left<K>)) {
        while let Some(tick) = self.next_event().filter(|&t| t < end) {
            self.idle_until(tick);
            self.step(&mut left);
        }
    }

    /// Runs every tick up to `last` (inclusive), reporting jobs that leave.
    pub fn run_until(&mut self, last: u64, mut left: impl FnMut(Left<K>)) {
        while let Some(tick) = self.next_event().filter(|&t| t <= last) {
            self.idle_until(tick);
            self.step(&mut left);
        }
        self.idle_until(last.saturating_add(1));
    }

    /// Passes the idle ticks before `tick`, in which no job arrives and none
    /// leaves (the devices run them when they next change).
    fn idle_until(&mut self, tick: u64) {
        self.tick = self.tick.max(tick);
    }

    /// One tick, as the baseline's `schedule_jobs` loop runs it.
    fn step(&mut self, left: &mut impl FnMut(Left<K>)) {
        let tick = self.tick;
        let idle = tick - self.settled;
        if idle > 0 {
            for m in &mut self.machines {
                m.idle(idle);
            }
        }
        let newcomer = self.admit(tick);
        for m in &mut self.machines {
            m.settle();
        }
        if let Some((id, key, job)) = newcomer {
            self.place(id, key, job);
        }
        let mut all_full = true;
        let mut pops = None;
        for (d, m) in self.machines.iter_mut().enumerate() {
            // The devices the newcomer went to are those with a job incoming.
            let mine = newcomer
                .filter(|_| m.incoming.is_some())
                .map(|(id, _, _)| (id, self.newcomer[d].alpha, self.costs[d].1));
            let pop = m.alpha_stage(mine.map(|(id, alpha, _)| (id, alpha)));
            if let Some(id) = m.queue_stage(mine.map(|(id, _, at)| (id, at)), pop) {
                if let hashbrown::hash_map::Entry::Occupied(mut f) = self.keys.entry(id) {
                    f.get_mut().copies -= 1;
                    if f.get().copies == 0 {
                        let f = f.remove();
                        self.in_flight -= 1;
                        left(Left {
                            tick,
                            key: f.key,
                            devices: f.devices,
                        });
                    }
                }
            }
            // Otherwise the head is the same and one tick nearer its end.
            if mine.is_some() || pop {
                m.refresh_head(tick);
            }
            m.quiet = false;
            all_full &= m.full;
            pops = match (pops, m.leaves_at) {
                (Some(a), Some(b)) => Some(u64::min(a, b)),
                (a, b) => a.or(b),
            };
        }
        self.all_full = all_full;
        self.pops = pops;
        self.refresh_front();
        self.tick += 1;
        self.settled = self.tick;
    }

    /// The job admitted at `tick`, if any: its id, key and job; its ticks on
    /// each device go to [`TickModel::newcomer`].
    fn admit(&mut self, tick: u64) -> Option<(u32, K, Job)> {
        if self.front.is_none_or(|release| release > tick) {
            return None;
        }
        if self.batch > 0 && self.admitted == self.batch {
            self.admitted = 0;
            self.next_id = 1;
        }
        let w = self.waiting.pop_front().expect("admissible");
        let end = self.on_start + self.machines.len();
        self.newcomer.clear();
        self.newcomer
            .extend_from_slice(&self.on[self.on_start..end]);
        self.on_start = end;
        if self.on_start == self.on.len() {
            self.on.clear();
            self.on_start = 0;
        } else if self.on_start > self.on.len() / 2 {
            self.on.drain(..self.on_start);
            self.on_start = 0;
        }
        let id = self.next_id;
        self.next_id = if id == self.ids { 1 } else { id + 1 };
        self.admitted += 1;
        self.in_flight += 1;
        Some((id, w.key, w.job))
    }

    /// Stage 1's choice, after every device settled: the newcomer `id`'s
    /// cost on each open device, its device(s), where it is incoming; it is
    /// in flight from then on.
    fn place(&mut self, id: u32, key: K, job: Job) {
        let n = self.machines.len();
        let on = &self.newcomer;
        let open = |m: &Machine, on: &OnDevice| on.fits && !m.full;
        for (d, (m, on)) in self.machines.iter().zip(on).enumerate() {
            if open(m, on) {
                self.costs[d] = m.cost(job.weight, on.p);
            }
        }
        let costs = &self.costs;
        let mut devices = if job.gpus <= 1 {
            let (mut best, mut least, mut equal) = (0usize, u32::MAX, 1usize);
            for d in 0..n {
                if !open(&self.machines[d], &on[d]) {
                    continue;
                }
                if costs[d].0 < least {
                    best = d;
                    least = costs[d].0;
                } else if costs[d].0 == costs[best].0 {
                    equal += 1;
                }
            }
            if equal == n {
                best = self.turn;
                self.turn = (self.turn + 1) % n;
            }
            vec![best as u32]
        } else {
            let mut cheapest: Vec<u32> = (0..n)
                .filter(|&d| open(&self.machines[d], &on[d]))
                .map(|d| d as u32)
                .collect();
            cheapest.sort_by_key(|&d| (costs[d as usize].0, d));
            cheapest.truncate(job.gpus);
            cheapest
        };
        devices.sort_unstable();
        for &d in &devices {
            let (w, p) = (job.weight, on[d as usize].p);
            self.machines[d as usize].incoming = Some(CostEntry {
                job: id,
                proc: p,
                weight: w,
                wspt: w / p,
            });
        }
        self.keys.insert(
            id,
            InFlight {
                key,
                copies: devices.len(),
                devices,
            },
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every tick by [`TickModel::step`], none skipped.
    fn literal(m: &mut TickModel<usize>, last: u64) -> Vec<Left<usize>> {
        let mut out = Vec::new();
        while m.tick <= last {
            m.step(&mut |l| out.push(l));
        }
        out
    }

    /// A job as a test hands it over: release tick, job, ticks on each device.
    type Arrival = (u64, Job, Vec<OnDevice>);

    /// `n` jobs on `devices` devices from a small linear congruential stream.
    fn jobs(seed: u64, n: usize, devices: usize) -> Vec<Arrival> {
        let mut x = seed;
        let mut next = |m: u64| {
            x = x
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            (x >> 33) % m
        };
        let mut release = 0;
        (0..n)
            .map(|_| {
                release += next(4);
                let p: Vec<u8> = (0..devices).map(|_| 1 + next(40) as u8).collect();
                let fits: Vec<bool> = (0..devices).map(|_| next(8) != 0).collect();
                let holding = fits.iter().filter(|&&f| f).count();
                // As the policy makes them: a job some devices can hold, a gang
                // of 2 now and then where two can.
                let gpus = if holding >= 2 && next(6) == 0 { 2 } else { 1 };
                let mut fits = fits;
                if holding == 0 {
                    fits[0] = true;
                }
                let job = Job {
                    weight: next(256) as u8,
                    gpus,
                };
                let on = p
                    .iter()
                    .zip(&fits)
                    .map(|(&p, &fits)| OnDevice {
                        p,
                        alpha: (p * 3 / 5).max(1),
                        fits,
                    })
                    .collect();
                (release, job, on)
            })
            .collect()
    }

    #[test]
    fn skipping_idle_ticks_changes_nothing() {
        for (seed, batch) in [(1, 0), (2, 5), (3, 100), (4, 7)] {
            let mut lazy = TickModel::new(3, batch, 0);
            let mut every = TickModel::new(3, batch, 0);
            for (k, (release, job, on)) in jobs(seed, 300, 3).into_iter().enumerate() {
                lazy.arrive(release, k, job, &on);
                every.arrive(release, k, job, &on);
            }
            let mut left = Vec::new();
            // In uneven stretches, as events would cut them.
            let mut last = 0;
            while last < 20_000 {
                last += 1 + last % 37;
                lazy.run_until(last, |l| left.push(l));
            }
            assert_eq!(left, literal(&mut every, last), "seed {seed}");
            assert!(left.len() > 250, "seed {seed}: {} left", left.len());
        }
    }

    /// Drives a model as the policy does: each job's arrival is an event at
    /// its release tick (before that tick's wake-up), and the wake-ups are
    /// those `wake` asks for after each call (a timer asked for earlier still
    /// fires). Returns the jobs that left and the number of calls; panics if
    /// a job leaves at a tick without a wake-up.
    fn woken(
        jobs: Vec<Arrival>,
        batch: usize,
        wake: fn(&TickModel<usize>) -> Option<u64>,
    ) -> (Vec<Left<usize>>, usize) {
        let mut m = TickModel::new(3, batch, 0);
        let mut timers = std::collections::BTreeSet::new();
        let mut arrivals = jobs.into_iter().enumerate().peekable();
        let (mut left, mut calls) = (Vec::new(), 0);
        let unwoken = |l: Left<usize>| panic!("{l:?} left without a wake-up");
        loop {
            let arrival = arrivals.peek().map(|(_, (release, _, _))| *release);
            let timer = timers.first().copied();
            match timer.filter(|&t| arrival.is_none_or(|r| t < r)) {
                None => {
                    let Some((k, (r, job, on))) = arrivals.next() else {
                        break;
                    };
                    m.run_events_before(r, unwoken);
                    m.arrive(r, k, job, &on);
                    m.run_until(r.saturating_sub(1), unwoken);
                }
                Some(t) => {
                    timers.remove(&t);
                    m.run_events_before(t, unwoken);
                    m.run_until(t, |l| {
                        assert_eq!(l.tick, t);
                        left.push(l);
                    });
                }
            }
            calls += 1;
            timers.extend(wake(&m));
        }
        (left, calls)
    }

    #[test]
    fn woken_only_where_a_job_can_leave_every_job_leaves_on_time() {
        for (seed, batch) in [(5, 0), (6, 5), (7, 100), (8, 7)] {
            let jobs = jobs(seed, 300, 3);
            let mut every = TickModel::new(3, batch, 0);
            for (k, (release, job, on)) in jobs.iter().enumerate() {
                every.arrive(*release, k, *job, on);
            }
            let (left, calls) = woken(jobs.clone(), batch, TickModel::next_departure);
            assert_eq!(left.len(), 300, "seed {seed}");
            let last = left.last().expect("left").tick;
            assert_eq!(left, literal(&mut every, last), "seed {seed}");
            // Woken also where a job is admitted: the same, with more calls.
            let (left_too, more) = woken(jobs, batch, TickModel::next_event);
            assert_eq!(left, left_too, "seed {seed}");
            assert!(
                calls < more,
                "seed {seed}: {calls} calls, {more} waking at admissions"
            );
        }
    }

    #[test]
    fn the_cheapest_device_takes_a_job_and_it_leaves_after_its_alpha_ticks() {
        // Device 0 is empty: cost w·p = 2·4 = 8 there, 2·6 = 12 on device 1.
        let mut m = TickModel::new(2, 0, 0);
        m.arrive(
            0,
            7,
            Job { weight: 2, gpus: 1 },
            &[
                OnDevice {
                    p: 4,
                    alpha: 2,
                    fits: true,
                },
                OnDevice {
                    p: 6,
                    alpha: 3,
                    fits: true,
                },
            ],
        );
        let mut left = Vec::new();
        m.run_until(10, |l| left.push(l));
        // Admitted at tick 0, the head from tick 1: its counter reaches 0 at
        // tick 2.
        assert_eq!(
            left,
            [Left {
                tick: 2,
                key: 7,
                devices: vec![0]
            }]
        );
        assert_eq!(m.next_event(), None);
    }
}
