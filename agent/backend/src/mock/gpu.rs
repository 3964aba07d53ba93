//! One mock GPU: its controls, what runs on it, and the power and energy that
//! follow from them.
//!
//! Power follows formats.md §6 for the app profile of the task running, at the
//! clocks it runs at (locked clocks, else application clocks, else the
//! defaults), normalised to the default clocks. When that exceeds the power
//! limit the GPU throttles: the core clock drops to the highest supported clock
//! whose power fits (or the lowest clock). Idle, it draws the catalogue's idle
//! power. Under MIG each busy GPU instance adds its share (compute slices / 7)
//! of the app's power above idle. Energy is the integral of that piecewise-
//! constant power over the mock's clock, accumulated at every change.

use gpu_agent_plugin_api::{AppModel, Clocks};

use super::mig::MigState;
use crate::{ClockPair, ClockRange, GpuProcess};
use gpu_agent_core::apps;
use gpu_agent_core::catalogue::GpuModel;

/// Something running on a mock GPU, as an executor starts it.
#[derive(Debug, Clone)]
pub struct MockProcess {
    /// Process id.
    pub pid: u32,
    /// Device memory it holds, bytes.
    pub used_bytes: u64,
    /// Its DVFS profile (formats.md §6), which sets the power it draws.
    pub app: AppModel,
    /// The (GPU instance, compute instance) it runs in, under MIG.
    pub mig: Option<(u32, u32)>,
}

/// The controls a mock GPU has now: what a daemon changed and must restore.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Controls {
    /// Locked core clock range, as rounded.
    pub locked_core: Option<ClockRange>,
    /// Locked memory clock range, as rounded.
    pub locked_memory: Option<ClockRange>,
    /// Application clocks, when not the defaults.
    pub applications: Option<ClockPair>,
    /// Power limit, mW.
    pub power_limit_mw: u32,
}

/// State of one mock GPU.
#[derive(Debug)]
pub(super) struct MockGpu {
    pub model: &'static GpuModel,
    pub memory_bytes: u64,
    pub uuid: String,
    pub lost: bool,
    pub controls: Controls,
    pub processes: Vec<MockProcess>,
    pub mig: Option<MigState>,
    energy_mj: f64,
    last_t: f64,
}

impl MockGpu {
    pub fn new(model: &'static GpuModel, memory_bytes: u64, uuid: String, now: f64) -> MockGpu {
        MockGpu {
            model,
            memory_bytes,
            uuid,
            lost: false,
            controls: Controls {
                locked_core: None,
                locked_memory: None,
                applications: None,
                power_limit_mw: watts_to_mw(model.power_default_w),
            },
            processes: Vec::new(),
            mig: model.mig.map(MigState::new),
            energy_mj: 0.0,
            last_t: now,
        }
    }

    /// Accumulates energy up to `now`; call before any change of state.
    pub fn advance(&mut self, now: f64) {
        if now > self.last_t {
            self.energy_mj += self.power_w() * 1000.0 * (now - self.last_t);
            self.last_t = now;
        }
    }

    /// Back on the bus after it was lost: no processes, controls reset, and
    /// the time it was gone not counted.
    pub fn repair(&mut self, now: f64) {
        self.lost = false;
        self.processes.clear();
        self.reset();
        self.last_t = now;
    }

    pub fn energy_mj(&self) -> u64 {
        self.energy_mj as u64
    }

    pub fn busy(&self) -> bool {
        !self.processes.is_empty()
    }

    pub fn mig_enabled(&self) -> bool {
        self.mig.as_ref().is_some_and(MigState::enabled)
    }

    /// Every supported core clock at the memory clock `mem`, highest first.
    pub fn core_clocks_at(&self, mem: u32) -> Vec<u32> {
        self.model
            .clock_table
            .iter()
            .find(|t| t.mem_mhz == mem)
            .map(|t| t.core_clocks())
            .unwrap_or_default()
    }

    /// The clocks a busy GPU asks for, before power capping.
    fn requested(&self) -> ClockPair {
        let app = self.controls.applications.unwrap_or(ClockPair {
            core_mhz: self.model.core_default_mhz,
            mem_mhz: self.model.mem_default_mhz,
        });
        ClockPair {
            core_mhz: self
                .controls
                .locked_core
                .map_or(app.core_mhz, |r| r.max_mhz),
            mem_mhz: self
                .controls
                .locked_memory
                .map_or(app.mem_mhz, |r| r.max_mhz),
        }
    }

    /// Power (W) of `app` on the whole GPU at `clocks`.
    fn app_power_w(&self, app: &AppModel, clocks: ClockPair) -> f64 {
        let normalised = Clocks {
            core: f64::from(clocks.core_mhz) / f64::from(self.model.core_default_mhz),
            mem: f64::from(clocks.mem_mhz) / f64::from(self.model.mem_default_mhz),
        };
        apps::power_w(app, self.model, normalised)
    }

    /// Power (W) the GPU draws at `clocks` with what runs now.
    fn power_at(&self, clocks: ClockPair) -> f64 {
        let idle = self.model.idle_w;
        let hungriest = |procs: &mut dyn Iterator<Item = &MockProcess>| {
            procs
                .map(|p| self.app_power_w(&p.app, clocks))
                .fold(None, |m: Option<f64>, p| Some(m.map_or(p, |m| m.max(p))))
        };
        match &self.mig {
            Some(mig) if mig.enabled() => {
                let total = f64::from(mig.table().compute_slices);
                let mut extra = 0.0;
                for gi in mig.instances() {
                    let mut in_gi = self
                        .processes
                        .iter()
                        .filter(|p| p.mig.map(|(g, _)| g) == Some(gi.id));
                    if let Some(p) = hungriest(&mut in_gi) {
                        let slices = f64::from(gi.profile.compute_slices);
                        extra += (p - idle).max(0.0) * slices / total;
                    }
                }
                idle + extra
            }
            _ => hungriest(&mut self.processes.iter()).unwrap_or(idle),
        }
    }

    /// The clocks the GPU runs at now: the request, with the core clock
    /// throttled under the power limit while busy; the lowest clocks (or the
    /// locked minimum) while idle.
    pub fn effective(&self) -> ClockPair {
        if !self.busy() {
            return ClockPair {
                core_mhz: self
                    .controls
                    .locked_core
                    .map_or(self.model.core_min_mhz(), |r| r.min_mhz),
                mem_mhz: self
                    .controls
                    .locked_memory
                    .map_or(self.model.mem_min_mhz(), |r| r.min_mhz),
            };
        }
        let want = self.requested();
        let limit_w = f64::from(self.controls.power_limit_mw) / 1000.0;
        if self.power_at(want) <= limit_w {
            return want;
        }
        let table = self.core_clocks_at(want.mem_mhz);
        let core = table
            .iter()
            .copied()
            .filter(|&c| c <= want.core_mhz)
            .find(|&c| {
                self.power_at(ClockPair {
                    core_mhz: c,
                    ..want
                }) <= limit_w
            })
            .or_else(|| table.last().copied())
            .unwrap_or(want.core_mhz);
        ClockPair {
            core_mhz: core,
            ..want
        }
    }

    /// Power drawn now, W.
    pub fn power_w(&self) -> f64 {
        if self.busy() {
            self.power_at(self.effective())
        } else {
            self.model.idle_w
        }
    }

    pub fn used_bytes(&self) -> u64 {
        self.processes.iter().map(|p| p.used_bytes).sum()
    }

    /// Share of compute slices running something (%).
    pub fn busy_pct(&self) -> u32 {
        match &self.mig {
            Some(mig) if mig.enabled() => {
                let busy: u32 = mig
                    .instances()
                    .filter(|gi| {
                        self.processes
                            .iter()
                            .any(|p| p.mig.map(|m| m.0) == Some(gi.id))
                    })
                    .map(|gi| gi.profile.compute_slices)
                    .sum();
                busy * 100 / mig.table().compute_slices
            }
            _ => {
                if self.busy() {
                    100
                } else {
                    0
                }
            }
        }
    }

    pub fn process_list(&self) -> Vec<GpuProcess> {
        self.processes
            .iter()
            .map(|p| GpuProcess {
                pid: p.pid,
                used_bytes: Some(p.used_bytes),
                gpu_instance: p.mig.map(|m| m.0),
                compute_instance: p.mig.map(|m| m.1),
            })
            .collect()
    }

    /// Back to power-on state: controls at defaults; MIG mode as pending.
    pub fn reset(&mut self) {
        self.controls = Controls {
            locked_core: None,
            locked_memory: None,
            applications: None,
            power_limit_mw: watts_to_mw(self.model.power_default_w),
        };
        if let Some(mig) = &mut self.mig {
            mig.reset();
        }
    }
}

/// Watts to whole milliwatts.
pub(super) fn watts_to_mw(w: f64) -> u32 {
    (w * 1000.0).round() as u32
}
