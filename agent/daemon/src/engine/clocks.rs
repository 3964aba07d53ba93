//! GPU clock locks and resets, done off the engine thread: a clock call
//! can be slow on a real driver (and is, many times over, on a host with
//! many GPUs), and the engine must keep answering and feeding the
//! watchdog meanwhile (the same reason the MIG sequence runs on a
//! `mig_apply::Maker`).
//!
//! Each physical GPU has a worker thread, started at its first job, that
//! does that GPU's jobs in the order the engine sent them (an idle lock's
//! reset before the next task's lock). The engine records a control before
//! it sends the job that sets it and clears the record when it sends the
//! reset (invariant 16), as before. A task's run starts only once its
//! clocks are locked: the worker reports each task's lock back as a request
//! (`Request::ClocksLocked`), as a process's exit comes back, and the
//! engine launches the task when its last GPU has reported.
//!
//! A stop waits at most [`STOP_WAIT`] for the workers to finish their jobs
//! (skipping the locks still queued: only resets matter then); a GPU whose
//! call has not returned by then has its controls recorded again, so that
//! the next start restores them.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};

use gpu_agent_backend::{BackendError, ClockRange, GpuBackend, SupportedClocks};
use gpu_agent_plugin_api::TaskKey;

use super::Request;

/// The controls the daemon sets, as recorded in the store.
pub(super) const LOCKED_CORE: &str = "locked_core_clocks";
pub(super) const LOCKED_MEMORY: &str = "locked_memory_clocks";

/// How long a stop waits for the clock workers to finish their jobs.
pub(super) const STOP_WAIT: Duration = Duration::from_secs(5);

/// One thing to do to a GPU's clocks.
pub(super) enum Job {
    /// Lock the core clock at `core_mhz` and, when given, the memory clock
    /// at `mem_mhz`; then report `task`'s lock, if it is a task's.
    Lock {
        core_mhz: u32,
        mem_mhz: Option<u32>,
        task: Option<TaskKey>,
    },
    /// Restore these controls (`LOCKED_CORE`, `LOCKED_MEMORY`, or a name a
    /// stored record gave, which is only logged).
    Reset(Vec<String>),
    /// Lock the clocks at the lowest the GPU supports (`idle_clocks =
    /// "min"`).
    LockLowest,
}

/// One GPU's worker.
struct Worker {
    jobs: mpsc::Sender<Job>,
}

/// The clock workers, one per GPU that had a job.
pub(super) struct Workers {
    backend: Arc<dyn GpuBackend>,
    /// Where task locks are reported (the engine's own requests).
    inbox: mpsc::Sender<Request>,
    gpus: BTreeMap<u32, Worker>,
    /// Set at a stop: queued locks are skipped.
    stopping: Arc<AtomicBool>,
    /// Each worker sends its GPU here as it ends.
    done_tx: mpsc::Sender<u32>,
    done_rx: mpsc::Receiver<u32>,
}

impl Workers {
    /// No worker yet; they work on `backend` and report to `inbox`.
    pub(super) fn new(backend: Arc<dyn GpuBackend>, inbox: mpsc::Sender<Request>) -> Workers {
        let (done_tx, done_rx) = mpsc::channel();
        Workers {
            backend,
            inbox,
            gpus: BTreeMap::new(),
            stopping: Arc::new(AtomicBool::new(false)),
            done_tx,
            done_rx,
        }
    }

    /// Hands `job` to GPU `gpu`'s worker, starting it if need be; where no
    /// thread can be started, the job is done here.
    pub(super) fn send(&mut self, gpu: u32, job: Job) {
        let job = match self.gpus.get(&gpu) {
            Some(w) => match w.jobs.send(job) {
                Ok(()) => return,
                Err(mpsc::SendError(job)) => job,
            },
            None => job,
        };
        let (tx, rx) = mpsc::channel::<Job>();
        let mut clocks = self.gpu_clocks(gpu);
        let done = self.done_tx.clone();
        let spawned = std::thread::Builder::new()
            .name(format!("clocks {gpu}"))
            .spawn(move || {
                for job in rx {
                    clocks.run(job);
                }
                let _ = done.send(gpu);
            });
        match spawned {
            Ok(_) => {
                let _ = tx.send(job);
                self.gpus.insert(gpu, Worker { jobs: tx });
            }
            Err(e) => {
                log::warn!("cannot start a thread for GPU {gpu}'s clocks ({e}); setting them on the engine thread");
                self.gpu_clocks(gpu).run(job);
            }
        }
    }

    /// What GPU `gpu`'s worker works with.
    fn gpu_clocks(&self, gpu: u32) -> GpuClocks {
        GpuClocks {
            gpu,
            backend: self.backend.clone(),
            inbox: self.inbox.clone(),
            stopping: self.stopping.clone(),
            mem_unsupported_said: false,
        }
    }

    /// At a stop: lets each worker finish its resets (skipping queued
    /// locks), waiting at most `wait` in all; returns the GPUs whose worker
    /// had not finished by then (its call is abandoned as it is).
    pub(super) fn finish(&mut self, wait: Duration) -> Vec<u32> {
        self.stopping.store(true, Ordering::Relaxed);
        let mut left: Vec<u32> = std::mem::take(&mut self.gpus).into_keys().collect();
        let deadline = Instant::now() + wait;
        while !left.is_empty() {
            let now = Instant::now();
            let Ok(gpu) = self
                .done_rx
                .recv_timeout(deadline.saturating_duration_since(now))
            else {
                break;
            };
            left.retain(|&g| g != gpu);
        }
        left
    }
}

/// What a worker does to its GPU.
struct GpuClocks {
    gpu: u32,
    backend: Arc<dyn GpuBackend>,
    inbox: mpsc::Sender<Request>,
    stopping: Arc<AtomicBool>,
    /// The log said once that its memory clock cannot be locked while idle.
    mem_unsupported_said: bool,
}

/// A range of one clock.
fn at(mhz: u32) -> ClockRange {
    ClockRange {
        min_mhz: mhz,
        max_mhz: mhz,
    }
}

impl GpuClocks {
    fn run(&mut self, job: Job) {
        let stopping = self.stopping.load(Ordering::Relaxed);
        match job {
            Job::Lock {
                core_mhz,
                mem_mhz,
                task,
            } => {
                if !stopping {
                    self.lock(core_mhz, mem_mhz);
                }
                if let Some(key) = task {
                    // The engine is gone only while the daemon exits.
                    let _ = self.inbox.send(Request::ClocksLocked { key });
                }
            }
            Job::Reset(controls) => {
                for control in controls {
                    self.reset(&control);
                }
            }
            Job::LockLowest if !stopping => self.lock_lowest(),
            Job::LockLowest => {}
        }
    }

    /// Locks the clocks at `core` (and `mem`) MHz (best effort).
    fn lock(&self, core: u32, mem: Option<u32>) {
        let gpu = self.gpu;
        if let Err(e) = self.backend.lock_core_clocks(gpu, at(core)) {
            log::warn!("cannot lock GPU {gpu}'s core clock at {core} MHz: {e}");
        }
        let Some(mem) = mem else {
            return;
        };
        if let Err(e) = self.backend.lock_memory_clocks(gpu, at(mem)) {
            match e {
                BackendError::NotSupported { .. } => log::warn!(
                    "GPU {gpu} cannot lock its memory clock ({e}); only its core clock is locked, so the task runs at the default memory clock"
                ),
                e => log::warn!("cannot lock GPU {gpu}'s memory clock at {mem} MHz: {e}"),
            }
        }
    }

    /// Restores one control (best effort: a failure is logged, never fatal).
    fn reset(&self, control: &str) {
        let gpu = self.gpu;
        let result = match control {
            LOCKED_CORE => self.backend.reset_core_clocks(gpu),
            LOCKED_MEMORY => self.backend.reset_memory_clocks(gpu),
            other => {
                log::warn!("GPU {gpu}: unknown control {other:?} in the state; left as it is");
                return;
            }
        };
        match result {
            Ok(()) => {}
            Err(BackendError::NotSupported { .. }) => {}
            Err(e) => log::warn!("cannot restore GPU {gpu}'s {control}: {e}"),
        }
    }

    /// Locks the clocks at the lowest the GPU supports (best effort); a
    /// GPU that cannot lock its memory clock gets its core clock locked,
    /// and the log says so once.
    fn lock_lowest(&mut self) {
        let gpu = self.gpu;
        let lowest = self
            .backend
            .supported_clocks(gpu)
            .map(|s| lowest_clocks(&s));
        let (core, mem) = match lowest {
            Ok(Some(lowest)) => lowest,
            Ok(None) => {
                log::warn!(
                    "GPU {gpu} lists no supported clocks; its idle clocks are left as they are"
                );
                return;
            }
            Err(e) => {
                log::warn!("cannot read GPU {gpu}'s supported clocks ({e}); its idle clocks are left as they are");
                return;
            }
        };
        if let Err(e) = self.backend.lock_core_clocks(gpu, at(core)) {
            log::warn!("cannot lock idle GPU {gpu}'s core clock at {core} MHz: {e}");
            return;
        }
        match self.backend.lock_memory_clocks(gpu, at(mem)) {
            Ok(()) => log::info!(
                "GPU {gpu} is idle: clocks locked at their lowest, core {core} MHz, memory {mem} MHz"
            ),
            Err(e @ BackendError::NotSupported { .. }) => {
                if !self.mem_unsupported_said {
                    self.mem_unsupported_said = true;
                    log::info!(
                        "GPU {gpu} cannot lock its memory clock ({e}); while idle only its core clock is locked at its lowest, {core} MHz"
                    );
                }
            }
            Err(e) => log::warn!("cannot lock idle GPU {gpu}'s memory clock at {mem} MHz: {e}"),
        }
    }
}

/// The lowest supported (core, memory) clocks, MHz: the lowest memory
/// clock, and the lowest core clock the GPU supports at any memory clock.
fn lowest_clocks(supported: &[SupportedClocks]) -> Option<(u32, u32)> {
    let mem = supported.iter().map(|s| s.mem_mhz).min()?;
    let core = supported.iter().flat_map(|s| s.core_mhz.iter()).min()?;
    Some((*core, mem))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_lowest_clocks_are_the_lowest_memory_and_the_lowest_core_anywhere() {
        let at = |mem_mhz, core: &[u32]| SupportedClocks {
            mem_mhz,
            core_mhz: core.to_vec(),
        };
        let table = [at(1215, &[1410, 1395, 345]), at(405, &[900, 420])];
        assert_eq!(lowest_clocks(&table), Some((345, 405)));
        assert_eq!(lowest_clocks(&[at(877, &[1380, 135])]), Some((135, 877)));
        assert_eq!(lowest_clocks(&[]), None);
        assert_eq!(lowest_clocks(&[at(877, &[])]), None);
    }
}
