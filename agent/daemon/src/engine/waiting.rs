//! Why a task that has not started waits, in words, with its expected start:
//! the core's reading of its queues (`Core::waiting`) and the engine's of its
//! devices (health, MIG changes, adopted work), carried in the task
//! dictionary's `waiting` and `expected_start`.

use gpu_agent_core::scheduler::Waiting;
use gpu_agent_dbus::TaskWait;
use gpu_agent_plugin_api::TaskKey;

use super::Engine;
use crate::states::Health;

impl Engine {
    /// Why the task with core key `key` waits (`None` once it runs or ended).
    pub(super) fn waiting(&self, key: TaskKey) -> Option<TaskWait> {
        let now = self.time.model_now();
        Some(match self.core.waiting(key, now)? {
            Waiting::Queued {
                device,
                behind,
                start,
            } => TaskWait {
                reason: match behind.and_then(|k| self.tasks.get(k)) {
                    Some(ahead) => {
                        format!("queued on {} behind {}", self.device_name(device), ahead.id)
                    }
                    None => format!("next on {}", self.device_name(device)),
                },
                expected_start: Some(self.time.unix_of_model(start)),
            },
            Waiting::Pending {
                offline,
                busy,
                idle,
            } => {
                let gpus = self.core.task(key).map_or(1, |t| t.gpus) as usize;
                let mem_gb = self.core.task(key).map_or(0.0, |t| t.mem_gb);
                let mut why = Vec::new();
                if idle.len() >= gpus {
                    why.push(format!("waiting for policy {}", self.core.policy_name()));
                } else if !busy.is_empty() {
                    let need = if gpus > 1 {
                        format!("{gpus} devices")
                    } else {
                        "a device".into()
                    };
                    let with = if mem_gb > 0.0 {
                        format!(" with {mem_gb} GB")
                    } else {
                        String::new()
                    };
                    let names: Vec<String> = busy.iter().map(|&d| self.device_name(d)).collect();
                    why.push(format!(
                        "waiting for {need}{with} to be free ({} busy)",
                        names.join(", ")
                    ));
                }
                if idle.len() < gpus {
                    why.extend(offline.iter().map(|&d| self.offline_reason(d)));
                }
                if why.is_empty() {
                    why.push(format!("waiting for policy {}", self.core.policy_name()));
                }
                TaskWait {
                    reason: why.join("; "),
                    expected_start: None,
                }
            }
        })
    }

    /// How users name device `d`: `GPU 2`, or `device 9 (MIG on GPU 1)`.
    fn device_name(&self, d: u32) -> String {
        match self.devices.get(d as usize).and_then(|s| s.mig()) {
            Some(slot) => format!("device {d} (MIG on GPU {})", slot.parent),
            None => format!("GPU {d}"),
        }
    }

    /// Why offline device `d` takes no work: a MIG change of its GPU, work
    /// adopted on it, or its stored health.
    fn offline_reason(&self, d: u32) -> String {
        let name = self.device_name(d);
        let gpu = self
            .devices
            .get(d as usize)
            .and_then(|s| s.mig())
            .map_or(d, |slot| slot.parent);
        if let Some(change) = self.core.mig_change(gpu) {
            return format!("{name} {} for a MIG change", change.phase);
        }
        let adopted = self.tasks.adopted().find(|info| info.devices.contains(&d));
        if let Some(info) = adopted {
            let job = &info.spec.external_id;
            return match job.strip_prefix("slurm:") {
                Some(n) => format!("{name} held by Slurm job {n} ({})", info.id),
                None => format!("{name} held by adopted job {job} ({})", info.id),
            };
        }
        match self.health.get(d as usize) {
            Some(Health::Drained) => format!("{name} drained by an admin"),
            Some(h) => format!("{name} offline ({h})"),
            None => format!("{name} offline"),
        }
    }
}
