//! Real runs: a task with a command runs as a process of its owner
//! (`crate::exec`), whose exit comes back to the engine as
//! [`Request::Exited`].

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::mpsc;
use std::time::Duration;

use gpu_agent_dbus::TaskInfo;
use gpu_agent_plugin_api::TaskKey;

use super::executor::{AtStop, Cancelled, Executor, MockLoad, Start};
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
    /// Each started process's (group) id.
    pids: HashMap<TaskKey, u32>,
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
            pids: HashMap::new(),
        }
    }
}

impl Executor for Processes {
    fn start(&mut self, start: Start<'_>, unsaved: &mut Vec<Op>) -> Result<(), String> {
        let Start { key, task, app, .. } = start;
        let launch = Launch {
            task_id: task.id.clone(),
            argv: task.spec.command.clone(),
            env: task.spec.env.clone(),
            uid: task.owner_uid,
            visible_devices: task
                .devices
                .iter()
                .map(|&d| targets::get(&self.targets, d).map_or_else(String::new, |t| t.uuid))
                .collect(),
            log: match &self.log_dir {
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
            e.to_string()
        })?;
        self.pids.insert(key, pid);
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
        Ok(())
    }

    fn cancel(&mut self, key: TaskKey, grace: Duration) -> Cancelled {
        match self.pids.get(&key) {
            Some(&pid) => {
                exec::kill_group(pid, grace, &self.rt);
                Cancelled::Signalled
            }
            None => Cancelled::Ended,
        }
    }

    fn release(&mut self, key: TaskKey, task: &TaskInfo, ops: &mut Vec<Op>) {
        if let Some(pid) = self.pids.remove(&key) {
            self.gpus.end(pid, &task.devices);
            ops.push(Op::ClearProcess {
                task: task.id.clone(),
            });
        }
    }

    fn at_stop(&self, key: TaskKey, keep: bool) -> AtStop {
        match self.pids.get(&key) {
            Some(_) if keep => AtStop::Keep,
            Some(&pid) => AtStop::End(Some(pid)),
            None => AtStop::End(None),
        }
    }
}
