//! Why a task that is not running waits, and when the current plan starts
//! it: what `gpuctl tasks` shows beside a waiting task.

use gpu_agent_plugin_api::{Device, TaskKey, TaskState};

use super::{projection, slot_view, Core};

/// Why a task waits, as far as the core knows (the driver knows why a
/// device is offline).
#[derive(Debug, Clone, PartialEq)]
pub enum Waiting {
    /// In the local queue of `device` (of each of its devices, for a gang).
    Queued {
        /// The device it waits on: the first of its devices that is not
        /// free for it.
        device: u32,
        /// The task before it there, queued or running (`None`: it is
        /// next on `device`, which is free).
        behind: Option<TaskKey>,
        /// When the current plan starts it (each run taking its expected
        /// time), in the core's time.
        start: f64,
    },
    /// In the pending queue, not placed by the policy yet. The devices that
    /// could hold it by their memory and model, online or not.
    Pending {
        /// Those offline (drained, failed, held by adopted work, or
        /// changing their MIG layout).
        offline: Vec<u32>,
        /// Those online and running or holding queued work.
        busy: Vec<u32>,
        /// Those online and idle with an empty queue.
        idle: Vec<u32>,
    },
}

impl Core {
    /// Why `key` waits at `now`: `None` unless it is pending or queued.
    pub fn waiting(&self, key: TaskKey, now: f64) -> Option<Waiting> {
        let task = self.tasks.get(key)?;
        let now = now.max(self.now);
        match task.state {
            TaskState::Queued => {
                let placement = self.tasks.placement(key);
                let (device, behind) = placement
                    .devices
                    .iter()
                    .map(|&d| {
                        let slot = &self.slots[d as usize];
                        let queue = slot.live_queue();
                        let at = queue.iter().position(|&k| k == key);
                        let behind = match at {
                            Some(0) | None => slot.running,
                            Some(i) => Some(queue[i - 1]),
                        };
                        (d, behind)
                    })
                    .find(|(_, behind)| behind.is_some())
                    .unwrap_or((placement.devices[0], None));
                let start = projection::start_of(&self.slots, &self.tasks, now, key)?;
                Some(Waiting::Queued {
                    device,
                    behind,
                    start,
                })
            }
            TaskState::Pending => {
                let (mut offline, mut busy, mut idle) = (Vec::new(), Vec::new(), Vec::new());
                for slot in self.slots.iter().filter(|s| s.spec.schedulable()) {
                    let view = Device {
                        online: true,
                        ..slot_view(slot, now)
                    };
                    if !task.gpu_counts().any(|g| task.fits_as(&view, g)) {
                        continue;
                    }
                    let d = slot.spec.index;
                    if !slot.online {
                        offline.push(d);
                    } else if slot.running.is_some() || !slot.live_queue().is_empty() {
                        busy.push(d);
                    } else {
                        idle.push(d);
                    }
                }
                Some(Waiting::Pending {
                    offline,
                    busy,
                    idle,
                })
            }
            TaskState::Running | TaskState::Done | TaskState::Rejected => None,
        }
    }
}
