//! A task's output for `ReadOutput`: where it went, and a piece of it.

use std::path::{Path, PathBuf};
use std::process::Command;

use gpu_agent_dbus::TaskInfo;

use crate::exec;

/// Where a task's output is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Source {
    /// Its `output` file, read as its owner (the daemon never reads a file
    /// with more rights than the owner has: the owner chose the path).
    UserFile {
        /// The file.
        path: PathBuf,
        /// Its task's owner.
        owner: u32,
    },
    /// The daemon's own log file of a task submitted without `output`.
    DaemonFile(PathBuf),
    /// The journal, under systemd, for a task submitted without `output`.
    Journal(String),
}

impl Source {
    /// Where `task`'s output went, with the daemon's log directory
    /// `log_dir` (`None`: under systemd, the journal).
    pub fn of(task: &TaskInfo, log_dir: Option<&Path>) -> Source {
        match log_dir {
            _ if !task.spec.output.is_empty() => Source::UserFile {
                path: PathBuf::from(&task.spec.output),
                owner: task.owner_uid,
            },
            Some(dir) => Source::DaemonFile(dir.join(format!("{}.log", task.id))),
            None => Source::Journal(task.id.clone()),
        }
    }

    /// Up to `limit` bytes from byte `offset`.
    pub fn read(&self, offset: u64, limit: usize) -> Result<Vec<u8>, String> {
        match self {
            Source::UserFile { path, owner } => {
                exec::read_as_user(*owner, path, offset, limit).map_err(|e| e.to_string())
            }
            Source::DaemonFile(path) => exec::read_at(path, offset, limit)
                .map_err(|e| format!("cannot read {}: {e}", path.display())),
            Source::Journal(id) => {
                let all = journal(id)?;
                let from = usize::try_from(offset).unwrap_or(usize::MAX).min(all.len());
                Ok(all[from..all.len().min(from + limit)].to_vec())
            }
        }
    }
}

/// The lines the daemon logged for task `id`, one a line: `journalctl`
/// matching on the daemon's process name (a field journald sets itself, so
/// no other program's `TASK_ID` entries mix in) and the task.
fn journal(id: &str) -> Result<Vec<u8>, String> {
    let out = Command::new("journalctl")
        .args(["--no-pager", "--quiet", "--output=cat", "_COMM=gpu-agentd"])
        .arg(format!("TASK_ID={id}"))
        .output()
        .map_err(|e| format!("cannot run journalctl: {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "journalctl failed ({}): {}",
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    Ok(out.stdout)
}

#[cfg(test)]
mod tests {
    use super::*;
    use gpu_agent_dbus::{SubmitSpec, TaskStatus};

    fn task(output: &str) -> TaskInfo {
        TaskInfo {
            id: "t3".into(),
            state: TaskStatus::Running,
            owner_uid: 1000,
            devices: vec![0],
            submitted: 0.0,
            started: None,
            finished: None,
            exit_code: None,
            energy_j: None,
            reason: None,
            spec: SubmitSpec {
                command: vec!["true".into()],
                output: output.into(),
                ..SubmitSpec::default()
            },
            clocks: None,
            waiting: None,
        }
    }

    #[test]
    fn the_output_file_wins_then_the_daemons_log() {
        let logs = Path::new("/var/lib/gpu-agent/logs");
        assert_eq!(
            Source::of(&task("/p/gpu-agent-t3.out"), Some(logs)),
            Source::UserFile {
                path: "/p/gpu-agent-t3.out".into(),
                owner: 1000
            }
        );
        assert_eq!(
            Source::of(&task(""), Some(logs)),
            Source::DaemonFile(logs.join("t3.log"))
        );
        assert_eq!(Source::of(&task(""), None), Source::Journal("t3".into()));
    }

    #[test]
    fn a_daemon_file_reads_in_pieces_and_a_missing_one_is_empty() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t3.log");
        let source = Source::DaemonFile(path.clone());
        assert_eq!(source.read(0, 10), Ok(vec![]));
        std::fs::write(&path, "hello world").unwrap();
        assert_eq!(source.read(0, 5).unwrap(), b"hello");
        assert_eq!(source.read(6, 100).unwrap(), b"world");
        assert_eq!(source.read(50, 100).unwrap(), b"");
    }
}
