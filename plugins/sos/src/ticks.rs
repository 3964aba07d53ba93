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
//! device they cannot change; each device keeps the tick its head leaves at,
//! so the next event is a minimum over devices; the cost table is kept by
//! column, padded to [`LANES`], so that a newcomer's sums compile to
//! branch-free code, and a tick without a newcomer computes none.

/// Entries per device: the baseline's `JOBS_PER_MACHINE`.
pub const SLOTS: usize = 10;
/// The address stacks' size (`JOBS_PER_MACHINE + 1`).
const STACK: usize = SLOTS + 1;
/// The cost table's columns, padded with empty entries (ratio 0, weight 0:
/// behind every newcomer, adding nothing) to a whole number of vectors.
const LANES: usize = 16;

/// A job's ticks and weight as the baseline holds them.
#[derive(Debug, Clone, PartialEq)]
pub struct Job {
    /// Weight (`uint8_t`).
    pub weight: u8,
    /// Its ticks on each device, by device index.
    pub on: Vec<OnDevice>,
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
    job: [u32; SLOTS],
    proc: [u8; LANES],
    weight: [u8; LANES],
    wspt: [u8; LANES],
}

impl CostTable {
    fn new() -> CostTable {
        CostTable {
            job: [0; SLOTS],
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
    /// column sums (a form LLVM compiles to branch-free vector code).
    fn sums(&self, ratio: u8) -> (u32, u32, u8) {
        let high = self.masked_sum(&self.proc, ratio, true);
        let low = self.masked_sum(&self.weight, ratio, false);
        let ahead = self.masked_sum(&[1; LANES], ratio, true);
        // At most LANES · 255 each: u16 lanes cannot overflow.
        (u32::from(high), u32::from(low), ahead as u8)
    }

    /// Σ `column` over the entries whose ratio is above `ratio` (or, with
    /// `above` false, not above).
    fn masked_sum(&self, column: &[u8; LANES], ratio: u8, above: bool) -> u16 {
        let mut kept = [0u16; LANES];
        for j in 0..LANES {
            if (self.wspt[j] > ratio) == above {
                kept[j] = u16::from(column[j]);
            }
        }
        kept.iter().fold(0, |sum, &x| sum.wrapping_add(x))
    }
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

/// One device's state.
#[derive(Debug, Clone)]
struct Machine {
    cost: CostTable,
    cost_free: Addresses,
    /// The job chosen last tick, entering the cost table this tick.
    incoming: Option<CostEntry>,
    /// The alpha stage's last change: (job, op); job 0 is none.
    change: (u32, Op),
    alpha: [(u32, u8); SLOTS],
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
            alpha: [(0, 0); SLOTS],
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

    /// Stage 1's bookkeeping on this device: the incoming job enters, the
    /// last change is applied.
    fn settle(&mut self) {
        self.enter_incoming();
        let job = self.change.0;
        if job != 0 {
            for j in 0..SLOTS {
                if self.cost.job[j] == job {
                    self.apply_change(j);
                }
            }
        }
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
            }
        }
    }

    fn apply_change(&mut self, j: usize) {
        let (job, op) = self.change;
        if job == 0 || job != self.cost.job[j] {
            return;
        }
        let t = &mut self.cost;
        match op {
            Op::Update => {
                t.proc[j] = t.proc[j].wrapping_sub(1);
                t.weight[j] = t.weight[j].wrapping_sub(t.wspt[j]);
            }
            Op::Invalidate => {
                t.proc[j] = 0;
                t.weight[j] = 0;
                t.wspt[j] = 0;
                self.cost_free.push(j as u8);
            }
        }
    }

    /// Stage 2: the head's counter; returns whether it leaves.
    fn alpha_stage(&mut self, newcomer: Option<(u32, u8)>) -> bool {
        let top = self.top();
        let mut pop = false;
        if top != 0 {
            for i in 0..SLOTS {
                if self.alpha[i].0 == top {
                    self.alpha[i].1 = self.alpha[i].1.wrapping_sub(1);
                    self.change.0 = top;
                    if self.alpha[i].1 == 0 {
                        self.alpha[i].0 = 0;
                        pop = true;
                        self.change.1 = Op::Invalidate;
                        self.alpha_free.push(i as u8);
                    } else {
                        pop = false;
                        self.change.1 = Op::Update;
                    }
                }
            }
        }
        if let Some((job, alpha)) = newcomer {
            if let Some(a) = self.alpha_free.pop() {
                self.alpha[a] = (job, alpha);
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

    /// Sets [`Machine::leaves_at`] from the state after tick `tick`.
    fn refresh_leaves_at(&mut self, tick: u64) {
        self.leaves_at = self.ticks_to_pop().map(|n| tick + n);
    }

    /// Ticks until the head leaves (when nothing new arrives), if it has one.
    fn ticks_to_pop(&self) -> Option<u64> {
        let top = self.top();
        if top == 0 {
            return None;
        }
        // The alpha stage changes the last matching entry; there is one.
        self.alpha.iter().rev().find(|a| a.0 == top).map(|a| {
            if a.1 == 0 {
                256
            } else {
                u64::from(a.1)
            }
        })
    }

    /// `n` ticks in which no job arrives and none leaves, at once.
    fn idle(&mut self, n: u64) {
        if n == 0 || self.quiet {
            return;
        }
        self.enter_incoming();
        let top = self.top();
        // Whether the alpha stage counts the head down.
        debug_assert_eq!(
            self.leaves_at.is_some(),
            top != 0 && self.alpha.iter().any(|a| a.0 == top)
        );
        if self.leaves_at.is_some() {
            // The pending change applies at the first tick; from then on the
            // alpha stage asks, each tick, for the head's update.
            let head = (top, Op::Update);
            if self.change == head {
                self.repeat_change(n);
            } else {
                self.repeat_change(1);
                self.change = head;
                self.repeat_change(n - 1);
            }
            let r = (n % 256) as u8;
            for a in self.alpha.iter_mut().filter(|a| a.0 == top) {
                a.1 = a.1.wrapping_sub(r);
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
        let (job, op) = self.change;
        if job == 0 || n == 0 {
            return;
        }
        match op {
            Op::Update => {
                let r = (n % 256) as u8;
                let t = &mut self.cost;
                for j in (0..SLOTS).filter(|&j| t.job[j] == job) {
                    t.proc[j] = t.proc[j].wrapping_sub(r);
                    t.weight[j] = t.weight[j].wrapping_sub(t.wspt[j].wrapping_mul(r));
                }
            }
            Op::Invalidate => {
                // Clearing is idempotent, so after the first time only the
                // pushes of the cleared addresses change anything, until the
                // ring is full (after at most STACK pushes).
                for _ in 0..n.min(STACK as u64 + 1) {
                    let mut any = false;
                    for j in 0..SLOTS {
                        if self.cost.job[j] == job {
                            any = true;
                            self.apply_change(j);
                        }
                    }
                    if !any || self.cost_free.is_full() {
                        break;
                    }
                }
            }
        }
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

/// The baseline's scheduler and admission loop.
#[derive(Debug, Clone)]
pub struct TickModel<K> {
    machines: Vec<Machine>,
    /// The device whose turn it is when all cost the same.
    turn: usize,
    /// The next tick to run.
    tick: u64,
    /// Jobs not yet admitted, in arrival order: (release tick, key, job).
    waiting: std::collections::VecDeque<(u64, K, Job)>,
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
            waiting: Default::default(),
            all_full: false,
            batch,
            admitted: 0,
            in_flight: 0,
            next_id: 1,
            ids,
            keys: Default::default(),
            costs: vec![(0, 0); devices],
        }
    }

    /// The next tick to run.
    pub fn tick(&self) -> u64 {
        self.tick
    }

    /// A job released at `release` (admitted in arrival order, one per tick).
    pub fn arrive(&mut self, release: u64, key: K, job: Job) {
        debug_assert_eq!(job.on.len(), self.machines.len());
        self.waiting.push_back((release, key, job));
    }

    /// Drops `key` if it is still waiting for admission.
    pub fn withdraw_waiting(&mut self, key: K)
    where
        K: PartialEq,
    {
        self.waiting.retain(|(_, k, _)| *k != key);
    }

    /// Whether the head of `waiting` may be admitted at `tick`.
    fn admissible(&self, tick: u64) -> bool {
        let Some((release, _, job)) = self.waiting.front() else {
            return false;
        };
        *release <= tick
            && !self.all_full
            && (self.batch == 0 || self.admitted < self.batch || self.in_flight == 0)
            && self
                .machines
                .iter()
                .zip(&job.on)
                .filter(|(m, on)| on.fits && !m.full)
                .count()
                >= job.gpus.max(1)
    }

    /// The next tick at which a job can leave or be admitted, if any.
    pub fn next_event(&self) -> Option<u64> {
        debug_assert!(self
            .machines
            .iter()
            .all(|m| m.leaves_at == m.ticks_to_pop().map(|n| self.tick + n - 1)));
        let pop = self.machines.iter().filter_map(|m| m.leaves_at).min();
        let admit = self
            .waiting
            .front()
            .filter(|_| self.admissible(u64::MAX))
            .map(|(release, _, _)| (*release).max(self.tick));
        match (pop, admit) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// Runs every tick up to `last` (inclusive), reporting jobs that leave.
    pub fn run_until(&mut self, last: u64, mut left: impl FnMut(Left<K>)) {
        while self.tick <= last {
            let next = self.next_event().unwrap_or(u64::MAX);
            if next > self.tick {
                let idle = next.min(last + 1) - self.tick;
                for m in &mut self.machines {
                    m.idle(idle);
                }
                self.tick += idle;
                if self.tick > last {
                    break;
                }
                // Idle ticks move no event: the next one is due now.
            }
            self.step(&mut left);
        }
    }

    /// One tick, as the baseline's `schedule_jobs` loop runs it.
    fn step(&mut self, left: &mut impl FnMut(Left<K>)) {
        let tick = self.tick;
        let newcomer = self.admit(tick);
        for m in &mut self.machines {
            m.settle();
        }
        if let Some((id, job)) = &newcomer {
            self.place(*id, job);
        }
        let mut all_full = true;
        for (d, m) in self.machines.iter_mut().enumerate() {
            // The devices the newcomer went to are those with a job incoming.
            let mine = newcomer
                .as_ref()
                .filter(|_| m.incoming.is_some())
                .map(|(id, job)| (*id, job.on[d].alpha, self.costs[d].1));
            let pop = m.alpha_stage(mine.map(|(id, alpha, _)| (id, alpha)));
            if let Some(id) = m.queue_stage(mine.map(|(id, _, at)| (id, at)), pop) {
                let last = self.keys.get_mut(&id).is_some_and(|f| {
                    f.copies -= 1;
                    f.copies == 0
                });
                if last {
                    let f = self.keys.remove(&id).expect("in flight");
                    self.in_flight -= 1;
                    left(Left {
                        tick,
                        key: f.key,
                        devices: f.devices,
                    });
                }
            }
            // Otherwise the head is the same and one tick nearer its end.
            if mine.is_some() || pop {
                m.refresh_leaves_at(tick);
            }
            m.quiet = false;
            all_full &= m.full;
        }
        self.all_full = all_full;
        self.tick += 1;
    }

    /// The job admitted at `tick`, if any, with its id.
    fn admit(&mut self, tick: u64) -> Option<(u32, Job)> {
        if !self.admissible(tick) {
            return None;
        }
        if self.batch > 0 && self.admitted == self.batch {
            self.admitted = 0;
            self.next_id = 1;
        }
        let (_, key, job) = self.waiting.pop_front().expect("admissible");
        let id = self.next_id;
        self.next_id = if id == self.ids { 1 } else { id + 1 };
        self.admitted += 1;
        self.in_flight += 1;
        self.keys.insert(
            id,
            InFlight {
                key,
                devices: Vec::new(),
                copies: 0,
            },
        );
        Some((id, job))
    }

    /// Stage 1's choice, after every device settled: the newcomer `id`'s
    /// cost on each open device, its device(s), where it is incoming.
    fn place(&mut self, id: u32, job: &Job) {
        let n = self.machines.len();
        let open = |m: &Machine, on: &OnDevice| on.fits && !m.full;
        for (d, (m, on)) in self.machines.iter().zip(&job.on).enumerate() {
            if open(m, on) {
                self.costs[d] = m.cost(job.weight, on.p);
            }
        }
        let costs = &self.costs;
        let mut devices = if job.gpus <= 1 {
            let (mut best, mut least, mut equal) = (0usize, u32::MAX, 1usize);
            for d in 0..n {
                if !open(&self.machines[d], &job.on[d]) {
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
                .filter(|&d| open(&self.machines[d], &job.on[d]))
                .map(|d| d as u32)
                .collect();
            cheapest.sort_by_key(|&d| (costs[d as usize].0, d));
            cheapest.truncate(job.gpus);
            cheapest
        };
        devices.sort_unstable();
        for &d in &devices {
            let (w, p) = (job.weight, job.on[d as usize].p);
            self.machines[d as usize].incoming = Some(CostEntry {
                job: id,
                proc: p,
                weight: w,
                wspt: w / p,
            });
        }
        let flight = self.keys.get_mut(&id).expect("just admitted");
        flight.copies = devices.len();
        flight.devices = devices;
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

    /// `n` jobs on `devices` devices from a small linear congruential stream.
    fn jobs(seed: u64, n: usize, devices: usize) -> Vec<(u64, Job)> {
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
                    on: p
                        .iter()
                        .zip(&fits)
                        .map(|(&p, &fits)| OnDevice {
                            p,
                            alpha: (p * 3 / 5).max(1),
                            fits,
                        })
                        .collect(),
                    gpus,
                };
                (release, job)
            })
            .collect()
    }

    #[test]
    fn skipping_idle_ticks_changes_nothing() {
        for (seed, batch) in [(1, 0), (2, 5), (3, 100), (4, 7)] {
            let mut lazy = TickModel::new(3, batch, 0);
            let mut every = TickModel::new(3, batch, 0);
            for (k, (release, job)) in jobs(seed, 300, 3).into_iter().enumerate() {
                lazy.arrive(release, k, job.clone());
                every.arrive(release, k, job);
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

    #[test]
    fn the_cheapest_device_takes_a_job_and_it_leaves_after_its_alpha_ticks() {
        // Device 0 is empty: cost w·p = 2·4 = 8 there, 2·6 = 12 on device 1.
        let mut m = TickModel::new(2, 0, 0);
        m.arrive(
            0,
            7,
            Job {
                weight: 2,
                on: vec![
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
                gpus: 1,
            },
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
