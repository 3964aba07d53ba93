//! Real runs: a task with a command runs as a process of its owner
//! (`crate::exec`), whose exit comes back to the engine as
//! [`Request::Exited`].

use std::path::PathBuf;
use std::sync::mpsc;
use std::time::Duration;

use gpu_agent_dbus::TaskInfo;
use gpu_agent_plugin_api::TaskKey;

use super::executor::{AtStop, Cancelled, Executor, Handle, MockLoad, NotStarted, Start};
use super::Request;
use crate::exec::{self, Launch, LogSink};
use crate::layout::{self as targets, Targets};
use crate::store::Op;

/// The task processes this daemon started.
pub(super) struct Processes {
    /// The runtime processes are awaited on.
    rt: tokio::runtime::Handle,
    /// Where exits are reported: the engine's own channel.
    inbox: mpsc::Sender<Request>,
    /// Task output files go here; `None`: to the journal.
    log_dir: Option<PathBuf>,
    /// Each device's UUID (`GPU-…`, `MIG-…`), for `CUDA_VISIBLE_DEVICES`.
    targets: Targets,
    gpus: MockLoad,
}

impl Processes {
    /// No processes yet.
    pub(super) fn new(
        rt: tokio::runtime::Handle,
        inbox: mpsc::Sender<Request>,
        log_dir: Option<PathBuf>,
        targets: Targets,
        gpus: MockLoad,
    ) -> Processes {
        Processes {
            rt,
            inbox,
            log_dir,
            targets,
            gpus,
        }
    }
}

/// Each of `devices`' UUIDs, for `CUDA_VISIBLE_DEVICES`; an error naming
/// the first device whose UUID is unknown (never an empty entry, which
/// would show the task no GPU, or every GPU).
fn visible_devices(targets: &Targets, devices: &[u32]) -> Result<Vec<String>, String> {
    devices
        .iter()
        .map(|&d| match targets::get(targets, d) {
            Some(t) if !t.uuid.is_empty() => Ok(t.uuid),
            _ => Err(format!(
                "not launched: device {d}'s UUID could not be read from the GPU driver, \
                 so CUDA_VISIBLE_DEVICES cannot name it"
            )),
        })
        .collect()
}

impl Executor for Processes {
    fn start(&mut self, start: Start<'_>, unsaved: &mut Vec<Op>) -> Result<Handle, NotStarted> {
        let Start { key, task, app, .. } = start;
        let visible_devices = visible_devices(&self.targets, &task.devices).map_err(|e| {
            log::warn!("task {}: {e}", task.id);
            NotStarted::failed(e)
        })?;
        let launch = Launch {
            task_id: task.id.clone(),
            argv: task.spec.command.clone(),
            env: task.spec.env.clone(),
            uid: task.owner_uid,
            visible_devices,
            workdir: (!task.spec.workdir.is_empty()).then(|| PathBuf::from(&task.spec.workdir)),
            umask: task.spec.umask,
            log: match &self.log_dir {
                // Stored expanded: see `Engine::accept`.
                _ if !task.spec.output.is_empty() => LogSink::User {
                    output: PathBuf::from(&task.spec.output),
                    error: (!task.spec.error.is_empty()).then(|| PathBuf::from(&task.spec.error)),
                    journal: self.log_dir.is_none(),
                },
                Some(dir) => LogSink::File(dir.join(format!("{}.log", task.id))),
                None => LogSink::Journal,
            },
        };
        let inbox = self.inbox.clone();
        let pid = exec::spawn(launch, &self.rt, move |exit| {
            // The engine is gone only while the daemon exits.
            let _ = inbox.send(Request::Exited { key, exit });
        })
        .map_err(|e| {
            log::warn!("task {}: {e}", task.id);
            NotStarted {
                reason: e.to_string(),
                short_of_descriptors: e.short_of_descriptors(),
            }
        })?;
        // Stored right after this round, so that a restart after a crash can
        // end the process instead of running it twice.
        unsaved.push(Op::RecordProcess {
            task: task.id.clone(),
            pgid: pid,
        });
        log::info!(
            "task {} started as process {pid} on device(s) {:?}",
            task.id,
            task.devices
        );
        self.gpus.start(pid, task, app);
        Ok(Handle::Process(pid))
    }

    fn cancel(&mut self, handle: Handle, grace: Duration) -> Cancelled {
        match handle {
            Handle::Process(pid) => {
                exec::kill_group(pid, grace, &self.rt);
                Cancelled::Signalled
            }
            Handle::Modelled(_) => Cancelled::Ended,
        }
    }

    fn release(&mut self, _key: TaskKey, handle: Handle, task: &TaskInfo, ops: &mut Vec<Op>) {
        if let Handle::Process(pid) = handle {
            self.gpus.end(pid, &task.devices);
            ops.push(Op::ClearProcess {
                task: task.id.clone(),
            });
        }
    }

    fn at_stop(&self, handle: Handle, keep: bool) -> AtStop {
        match handle {
            Handle::Process(_) if keep => AtStop::Keep,
            Handle::Process(pid) => AtStop::End(Some(pid)),
            Handle::Modelled(_) => AtStop::End(None),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, RwLock};

    use super::visible_devices;
    use crate::layout::{Target, Targets};

    #[test]
    fn a_device_without_a_uuid_is_refused_not_left_empty() {
        let target = |gpu, uuid: &str| Target {
            gpu,
            uuid: uuid.into(),
            mig: None,
        };
        let targets: Targets = Arc::new(RwLock::new(vec![
            target(0, "GPU-0a1b"),
            target(0, ""),
            target(0, "MIG-2c3d"),
        ]));
        assert_eq!(
            visible_devices(&targets, &[2, 0]),
            Ok(vec!["MIG-2c3d".to_string(), "GPU-0a1b".to_string()])
        );
        assert_eq!(visible_devices(&targets, &[]), Ok(vec![]));
        for devices in [&[0, 1][..], &[1], &[7]] {
            let bad = devices.iter().find(|&&d| d != 0).unwrap();
            let err = visible_devices(&targets, devices).unwrap_err();
            assert!(
                err.starts_with(&format!("not launched: device {bad}'s UUID")),
                "{err}"
            );
        }
    }
}
