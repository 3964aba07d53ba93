//! The process executor: runs a task's command as its owner, in its own
//! process group, with the task's GPUs in `CUDA_VISIBLE_DEVICES`.
//!
//! The daemon's engine calls [`spawn`] and [`kill_group`] from a plain thread
//! that holds a [`tokio::runtime::Handle`]; the waiting and the forwarding of
//! output happen on that runtime, which needs its I/O and time drivers
//! (`enable_all`): tokio reaps children on `SIGCHLD`.
//!
//! - The child runs as the task's uid, with that user's primary gid and
//!   supplementary groups, in the task's working directory, entered as that
//!   user (without one, the user's home directory, `/` when it does not
//!   exist), with a clean environment: `HOME`, `USER`, `LOGNAME`, `SHELL`, a
//!   fixed `PATH`, then the task's own variables, then `CUDA_VISIBLE_DEVICES`
//!   and `GPU_AGENT_TASK_ID`. Nothing of the daemon's environment leaks.
//! - It leads its own process group (pgid == pid), so [`kill_group`] reaches
//!   everything it started; stdin is `/dev/null`.
//! - Its stdout and stderr go to a log file, or line by line to the `log`
//!   crate with a `task_id` key-value, which systemd-journal-logger writes as
//!   the journal field `TASK_ID`, or to files of the task's user, opened as
//!   that user (and also to the `log` crate under the journal).
//! - What the daemon does as the task's user before the process exists
//!   (entering its working directory, opening its output) runs on a thread
//!   of its own with the user's file-system credentials ([`as_user`]), so
//!   the kernel checks the user's permissions, not root's.

use std::collections::BTreeMap;
use std::ffi::CString;
use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::OpenOptionsExt;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{ExitStatus, Stdio};
use std::sync::Arc;
use std::time::Duration;

use nix::errno::Errno;
use nix::sys::signal::{killpg, Signal};
use nix::unistd::{Gid, Pid, Uid, User};
use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncReadExt, BufReader};
use tokio::process::Command;
use tokio::runtime::Handle;

/// The `log` target of the lines a task writes (journal field `TARGET`).
pub const LOG_TARGET: &str = "task";

/// `PATH` in every task's environment, unless the task sets its own.
const TASK_PATH: &str = "/usr/local/bin:/usr/bin:/bin";

/// Longest line forwarded as one journal entry (journald's default `LineMax`);
/// a longer line is split.
const MAX_LINE: u64 = 48 * 1024;

/// How long, after the process has exited, the waiter still waits for the end
/// of its output before reporting the exit. Only processes the task left
/// behind, still holding its stdout or stderr, make it wait that long.
const DRAIN_GRACE: Duration = Duration::from_millis(500);

/// Where a task's stdout and stderr go.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LogSink {
    /// Each line through the `log` crate (target [`LOG_TARGET`], key-value
    /// `task_id`): stdout lines at info, stderr lines at warn.
    Journal,
    /// Appended to this file (created with mode 0640, with its parent
    /// directory, and owned by the task's user when the daemon is root).
    File(PathBuf),
    /// Appended to files the task's user opens (created under the task's
    /// umask, mode 0666 before it; paths relative to the working
    /// directory): stdout to `output`, stderr to `error` or with stdout.
    /// With `journal`, each line also goes as for [`LogSink::Journal`].
    User {
        /// Stdout's file (and stderr's without `error`).
        output: PathBuf,
        /// Stderr's file.
        error: Option<PathBuf>,
        /// Whether the lines also go to the `log` crate.
        journal: bool,
    },
}

/// What to run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Launch {
    /// The task's id, given to the process as `GPU_AGENT_TASK_ID`.
    pub task_id: String,
    /// The command and its arguments; must not be empty.
    pub argv: Vec<String>,
    /// The user's extra environment, applied over the base environment.
    pub env: BTreeMap<String, String>,
    /// Run as this user.
    pub uid: u32,
    /// GPU or MIG UUIDs, comma-joined into `CUDA_VISIBLE_DEVICES` (empty
    /// when the task has none, which hides every GPU).
    pub visible_devices: Vec<String>,
    /// The working directory, entered as the user (`None`: the user's home
    /// directory, or `/` when it does not exist).
    pub workdir: Option<PathBuf>,
    /// The file mode creation mask (`None`: the daemon's).
    pub umask: Option<u32>,
    /// Where stdout and stderr go.
    pub log: LogSink,
}

/// How a process ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Exit {
    /// It exited with this code. `-1` when its status could not be read.
    Code(i32),
    /// A signal with this number ended it.
    Signal(i32),
}

impl Exit {
    /// The code a shell would report: the exit code, or 128 + the signal.
    pub fn exit_code(&self) -> i32 {
        match *self {
            Exit::Code(code) => code,
            Exit::Signal(signal) => 128 + signal,
        }
    }

    /// Whether the process exited with code 0.
    pub fn success(&self) -> bool {
        *self == Exit::Code(0)
    }

    fn from_status(status: ExitStatus) -> Exit {
        match (status.code(), status.signal()) {
            (Some(code), _) => Exit::Code(code),
            (None, Some(signal)) => Exit::Signal(signal),
            (None, None) => Exit::Code(-1),
        }
    }
}

/// Why a task's process could not be started.
#[derive(Debug, thiserror::Error)]
pub enum ExecError {
    /// The command has no program.
    #[error("task {task_id}: the command is empty")]
    EmptyCommand {
        /// The task.
        task_id: String,
    },
    /// An environment variable the process cannot be given.
    #[error("environment variable {name:?}: {reason}")]
    Environment {
        /// The variable's name.
        name: String,
        /// What is wrong with it.
        reason: &'static str,
    },
    /// No passwd entry for the uid.
    #[error("no user with uid {uid}")]
    NoSuchUser {
        /// The task's uid.
        uid: u32,
    },
    /// The passwd database could not be read.
    #[error("cannot look up the user with uid {uid}: {cause}")]
    UserLookup {
        /// The task's uid.
        uid: u32,
        /// Why.
        cause: Errno,
    },
    /// The user's supplementary groups could not be read.
    #[error("cannot read the groups of user {user}: {cause}")]
    Groups {
        /// The user's name.
        user: String,
        /// Why.
        cause: Errno,
    },
    /// The daemon is not root and the task belongs to another user.
    #[error("cannot run a task as uid {uid}: the daemon runs as uid {daemon_uid}, not as root")]
    CannotSwitchUser {
        /// The daemon's effective uid.
        daemon_uid: u32,
        /// The task's uid.
        uid: u32,
    },
    /// The user cannot enter the working directory.
    #[error("user {user} cannot enter the working directory {}: {cause}", path.display())]
    Workdir {
        /// The directory.
        path: PathBuf,
        /// The task's user.
        user: String,
        /// Why.
        cause: io::Error,
    },
    /// The user cannot create or open an output file.
    #[error("user {user} cannot open the output file {}: {cause}", path.display())]
    Output {
        /// The file.
        path: PathBuf,
        /// The task's user.
        user: String,
        /// Why.
        cause: io::Error,
    },
    /// The log file could not be created or opened.
    #[error("cannot open the task log {}: {cause}", path.display())]
    Log {
        /// The log file.
        path: PathBuf,
        /// Why.
        cause: io::Error,
    },
    /// The program could not be started (not found, not executable, or the
    /// switch to the task's user failed).
    #[error("cannot start {program}: {cause}")]
    Spawn {
        /// The program (`argv[0]`).
        program: String,
        /// Why.
        cause: io::Error,
    },
}

impl ExecError {
    /// Whether it failed for want of file descriptors (`EMFILE`: the
    /// daemon's limit; `ENFILE`: the system's), which a later try may have.
    pub fn short_of_descriptors(&self) -> bool {
        let short = |errno: i32| errno == libc::EMFILE || errno == libc::ENFILE;
        match self {
            ExecError::UserLookup { cause, .. } | ExecError::Groups { cause, .. } => {
                short(*cause as i32)
            }
            ExecError::Workdir { cause, .. }
            | ExecError::Output { cause, .. }
            | ExecError::Log { cause, .. }
            | ExecError::Spawn { cause, .. } => cause.raw_os_error().is_some_and(short),
            ExecError::EmptyCommand { .. }
            | ExecError::Environment { .. }
            | ExecError::NoSuchUser { .. }
            | ExecError::CannotSwitchUser { .. } => false,
        }
    }
}

/// The credentials the child switches to (only when the daemon is root).
struct Credentials {
    uid: Uid,
    gid: Gid,
    groups: Vec<Gid>,
}

/// The user with `uid` and the credentials to take on for them: `None` when
/// the daemon is that user; an error when it is neither root nor them.
fn credentials(uid: u32) -> Result<(User, Option<Credentials>), ExecError> {
    let user = User::from_uid(Uid::from_raw(uid))
        .map_err(|cause| ExecError::UserLookup { uid, cause })?
        .ok_or(ExecError::NoSuchUser { uid })?;
    let daemon_uid = Uid::effective();
    let credentials = if daemon_uid.is_root() {
        let name = CString::new(user.name.as_str()).map_err(|_| ExecError::Groups {
            user: user.name.clone(),
            cause: Errno::EINVAL,
        })?;
        let groups =
            nix::unistd::getgrouplist(&name, user.gid).map_err(|cause| ExecError::Groups {
                user: user.name.clone(),
                cause,
            })?;
        Some(Credentials {
            uid: user.uid,
            gid: user.gid,
            groups,
        })
    } else if daemon_uid == user.uid {
        None
    } else {
        return Err(ExecError::CannotSwitchUser {
            daemon_uid: daemon_uid.as_raw(),
            uid,
        });
    };
    Ok((user, credentials))
}

/// Runs `work` on a thread of its own that has its own working directory
/// and umask and, with `credentials`, the user's file-system uid, gid and
/// groups: the kernel then checks each path `work` opens or enters as it
/// would for the user (root's overrides do not apply). The daemon's other
/// threads are untouched.
fn as_user<T: Send>(
    credentials: Option<&Credentials>,
    work: impl FnOnce() -> io::Result<T> + Send,
) -> io::Result<T> {
    std::thread::scope(|scope| {
        let thread = scope.spawn(|| {
            // SAFETY: unshare, setgroups (the raw system call: glibc's
            // wrapper would change every thread's groups), setfsgid and
            // setfsuid only change this thread's own state, which ends with
            // it; `groups` outlives the call.
            unsafe {
                if libc::unshare(libc::CLONE_FS) != 0 {
                    return Err(io::Error::last_os_error());
                }
                if let Some(c) = credentials {
                    let groups: Vec<libc::gid_t> = c.groups.iter().map(|g| g.as_raw()).collect();
                    if libc::syscall(libc::SYS_setgroups, groups.len(), groups.as_ptr()) != 0 {
                        return Err(io::Error::last_os_error());
                    }
                    libc::setfsgid(c.gid.as_raw());
                    libc::setfsuid(c.uid.as_raw());
                    // They report no failure: read them back (an invalid id
                    // changes nothing and answers the current one).
                    if libc::setfsuid(u32::MAX) as u32 != c.uid.as_raw()
                        || libc::setfsgid(u32::MAX) as u32 != c.gid.as_raw()
                    {
                        return Err(io::Error::from(io::ErrorKind::PermissionDenied));
                    }
                }
            }
            work()
        });
        thread
            .join()
            .unwrap_or_else(|_| Err(io::Error::other("the thread acting as the user panicked")))
    })
}

/// Checks that user `uid` can enter `dir` (as a task's working directory),
/// by entering it as the user.
pub fn check_workdir(uid: u32, dir: &Path) -> Result<(), ExecError> {
    let (user, credentials) = credentials(uid)?;
    enter(credentials.as_ref(), &user.name, dir)
}

/// Enters `dir` as `user`, to see that they can.
fn enter(credentials: Option<&Credentials>, user: &str, dir: &Path) -> Result<(), ExecError> {
    as_user(credentials, || std::env::set_current_dir(dir)).map_err(|cause| ExecError::Workdir {
        path: dir.to_owned(),
        user: user.to_owned(),
        cause,
    })
}

/// Up to `limit` bytes of `path` from `offset`, read as user `uid`: what
/// the user could read of it, never more (a file that does not exist yet
/// reads as empty).
pub fn read_as_user(
    uid: u32,
    path: &Path,
    offset: u64,
    limit: usize,
) -> Result<Vec<u8>, ExecError> {
    let (user, credentials) = credentials(uid)?;
    as_user(credentials.as_ref(), || read_at(path, offset, limit)).map_err(|cause| {
        ExecError::Output {
            path: path.to_owned(),
            user: user.name,
            cause,
        }
    })
}

/// Up to `limit` bytes of `path` from `offset` (empty when it does not exist).
pub fn read_at(path: &Path, offset: u64, limit: usize) -> io::Result<Vec<u8>> {
    use std::io::{Read, Seek, SeekFrom};
    let mut file = match File::open(path) {
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
        other => other?,
    };
    file.seek(SeekFrom::Start(offset))?;
    let mut data = Vec::new();
    file.take(limit as u64).read_to_end(&mut data)?;
    Ok(data)
}

/// Opens (creating) `path` for appending as the user, from `workdir` when
/// relative, under `umask` (mode 0666 before it).
fn open_as_user(
    credentials: Option<&Credentials>,
    user: &str,
    workdir: &Path,
    umask: Option<u32>,
    path: &Path,
) -> Result<File, ExecError> {
    as_user(credentials, || {
        std::env::set_current_dir(workdir)?;
        if let Some(mask) = umask {
            nix::sys::stat::umask(nix::sys::stat::Mode::from_bits_truncate(mask));
        }
        OpenOptions::new()
            .create(true)
            .append(true)
            .mode(0o666)
            .custom_flags(nix::libc::O_NOCTTY)
            .open(path)
    })
    .map_err(|cause| ExecError::Output {
        path: workdir.join(path),
        user: user.to_owned(),
        cause,
    })
}

/// Spawns the task's process in its own process group (pgid == pid) and
/// returns its pid.
///
/// `on_exit` is called exactly once, from a task on `rt`, when the process
/// has ended and its output has been forwarded (for [`LogSink::Journal`],
/// waiting at most half a second after the exit for output still held open
/// by processes it left behind; their later lines are still forwarded). When
/// `spawn` returns `Err`, nothing was started and `on_exit` is never called.
///
/// When the daemon is root the process runs as `launch.uid` with that user's
/// groups; otherwise `launch.uid` must be the daemon's own uid.
pub fn spawn(
    launch: Launch,
    rt: &Handle,
    on_exit: impl FnOnce(Exit) + Send + 'static,
) -> Result<u32, ExecError> {
    let Launch {
        task_id,
        argv,
        env,
        uid,
        visible_devices,
        workdir,
        umask,
        log: sink,
    } = launch;
    let Some((program, args)) = argv.split_first() else {
        return Err(ExecError::EmptyCommand { task_id });
    };
    check_env(&env)?;

    let (user, credentials) = credentials(uid)?;
    let home = if user.dir.is_dir() {
        user.dir.clone()
    } else {
        PathBuf::from("/")
    };
    let workdir_c = match &workdir {
        Some(dir) => {
            enter(credentials.as_ref(), &user.name, dir)?;
            Some(
                CString::new(dir.as_os_str().as_bytes()).map_err(|_| ExecError::Workdir {
                    path: dir.clone(),
                    user: user.name.clone(),
                    cause: io::Error::from(io::ErrorKind::InvalidInput),
                })?,
            )
        }
        None => None,
    };

    let mut command = Command::new(program);
    command
        .args(args)
        .env_clear()
        .env("HOME", &user.dir)
        .env("USER", &user.name)
        .env("LOGNAME", &user.name)
        .env("SHELL", &user.shell)
        .env("PATH", TASK_PATH)
        .envs(&env)
        .env("CUDA_VISIBLE_DEVICES", visible_devices.join(","))
        .env("GPU_AGENT_TASK_ID", &task_id)
        .process_group(0)
        .stdin(Stdio::null());
    if workdir_c.is_none() {
        command.current_dir(&home);
    }
    // The user's output files, for the lines the daemon forwards.
    let mut copies: [Option<Arc<File>>; 2] = [None, None];
    match &sink {
        LogSink::Journal => {
            command.stdout(Stdio::piped()).stderr(Stdio::piped());
        }
        LogSink::File(path) => {
            let owner = credentials.as_ref().map(|c| (c.uid, c.gid));
            let file = open_log(path, owner)?;
            let copy = file.try_clone().map_err(|cause| ExecError::Log {
                path: path.clone(),
                cause,
            })?;
            command.stdout(file).stderr(copy);
        }
        LogSink::User {
            output,
            error,
            journal,
        } => {
            let from = workdir.as_deref().unwrap_or(&home);
            let open = |path| open_as_user(credentials.as_ref(), &user.name, from, umask, path);
            let out = open(output)?;
            let err = match error {
                Some(path) => open(path)?,
                None => out.try_clone().map_err(|cause| ExecError::Output {
                    path: from.join(output),
                    user: user.name.clone(),
                    cause,
                })?,
            };
            if *journal {
                command.stdout(Stdio::piped()).stderr(Stdio::piped());
                copies = [Some(Arc::new(out)), Some(Arc::new(err))];
            } else {
                command.stdout(out).stderr(err);
            }
        }
    }
    let ids = credentials.map(|Credentials { uid, gid, groups }| (uid, gid, groups));
    // SAFETY: the closure runs in the forked child before exec. It only
    // makes the setgroups, setgid, setuid, chdir and umask system calls on
    // data prepared before the fork, and allocates nothing.
    unsafe {
        command.pre_exec(move || {
            if let Some((uid, gid, groups)) = &ids {
                nix::unistd::setgroups(groups)?;
                nix::unistd::setgid(*gid)?;
                nix::unistd::setuid(*uid)?;
            }
            // Entered as the user, after the switch.
            if let Some(dir) = &workdir_c {
                if libc::chdir(dir.as_ptr()) != 0 {
                    return Err(io::Error::last_os_error());
                }
            }
            if let Some(mask) = umask {
                libc::umask(mask as libc::mode_t);
            }
            Ok(())
        });
    }

    // The child must be registered with the runtime that reaps it.
    let _runtime = rt.enter();
    let mut child = command.spawn().map_err(|cause| ExecError::Spawn {
        program: program.clone(),
        cause,
    })?;
    let pid = child
        .id()
        .expect("a child that was just spawned has not been waited for");

    let task_id: Arc<str> = task_id.into();
    let [out_copy, err_copy] = copies;
    let forwarders: Vec<_> = [
        child
            .stdout
            .take()
            .map(|out| rt.spawn(forward(out, task_id.clone(), log::Level::Info, out_copy))),
        child
            .stderr
            .take()
            .map(|err| rt.spawn(forward(err, task_id.clone(), log::Level::Warn, err_copy))),
    ]
    .into_iter()
    .flatten()
    .collect();

    rt.spawn(async move {
        let exit = match child.wait().await {
            Ok(status) => Exit::from_status(status),
            Err(error) => {
                log::error!("task {task_id}: cannot read the exit status of pid {pid}: {error}");
                Exit::Code(-1)
            }
        };
        let drained = async {
            for forwarder in forwarders {
                // A forwarder that panicked has nothing more to forward.
                let _ = forwarder.await;
            }
        };
        if tokio::time::timeout(DRAIN_GRACE, drained).await.is_err() {
            log::debug!("task {task_id}: processes it left behind still hold its output");
        }
        on_exit(exit);
    });
    Ok(pid)
}

/// Cancels a running task: SIGTERM to its whole process group now, SIGKILL
/// to the group after `grace` if the group still has a member by then.
///
/// `pid` is the pid [`spawn`] returned, and must belong to a task that is
/// still running (or has not yet been reported ended): a pid reused by
/// another process group would be signalled. Never blocks the caller; a group
/// that no longer exists is not an error.
pub fn kill_group(pid: u32, grace: Duration, rt: &Handle) {
    let Some(pgid) = task_group(pid) else {
        log::error!("refusing to signal process group {pid}: not a task's group");
        return;
    };
    if !signal_group(pgid, Signal::SIGTERM) {
        return;
    }
    rt.spawn(async move {
        tokio::time::sleep(grace).await;
        if killpg(pgid, None).is_ok() {
            signal_group(pgid, Signal::SIGKILL);
        }
    });
}

/// Ends task process groups before the daemon exits: SIGTERM to each now,
/// SIGKILL to those that still have a member after `grace`. Blocks until
/// every group is gone or the grace is over.
pub fn end_groups(pids: &[u32], grace: Duration) {
    let mut alive: Vec<Pid> = pids
        .iter()
        .filter_map(|&pid| task_group(pid))
        .filter(|&pgid| signal_group(pgid, Signal::SIGTERM))
        .collect();
    let deadline = std::time::Instant::now() + grace;
    while !alive.is_empty() && std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
        alive.retain(|&pgid| killpg(pgid, None).is_ok());
    }
    for pgid in alive {
        log::warn!("process group {pgid} outlived SIGTERM by {grace:?}; sending SIGKILL");
        signal_group(pgid, Signal::SIGKILL);
    }
}

/// Whether process `pid` still runs the task `task_id` (its environment
/// says so): a recorded pid may have been reused since.
pub fn runs_task(pid: u32, task_id: &str) -> bool {
    let marker = format!("GPU_AGENT_TASK_ID={task_id}");
    std::fs::read(format!("/proc/{pid}/environ"))
        .is_ok_and(|env| env.split(|&b| b == 0).any(|var| var == marker.as_bytes()))
}

/// The process group a task's pid leads, or `None` for a pid no task can
/// have: `killpg(0)` would signal the daemon's own group, `killpg(1)` every
/// process.
fn task_group(pid: u32) -> Option<Pid> {
    i32::try_from(pid)
        .ok()
        .filter(|&raw| raw > 1)
        .map(Pid::from_raw)
}

/// Sends `signal` to the group; whether the group still existed.
fn signal_group(pgid: Pid, signal: Signal) -> bool {
    match killpg(pgid, signal) {
        Ok(()) => true,
        Err(Errno::ESRCH) => false,
        Err(error) => {
            log::warn!("cannot send {signal} to process group {pgid}: {error}");
            true
        }
    }
}

/// Refuses variables `execve` cannot pass on as given.
fn check_env(env: &BTreeMap<String, String>) -> Result<(), ExecError> {
    for (name, value) in env {
        let reason = if name.is_empty() {
            "the name is empty"
        } else if name.contains('=') {
            "the name contains '='"
        } else if name.contains('\0') || value.contains('\0') {
            "contains a NUL byte"
        } else {
            continue;
        };
        return Err(ExecError::Environment {
            name: name.clone(),
            reason,
        });
    }
    Ok(())
}

/// Opens (creating it and its directory) the log file for appending, and
/// hands it to `owner` when given.
fn open_log(path: &Path, owner: Option<(Uid, Gid)>) -> Result<File, ExecError> {
    let error = |cause| ExecError::Log {
        path: path.to_owned(),
        cause,
    };
    if let Some(dir) = path.parent().filter(|dir| !dir.as_os_str().is_empty()) {
        fs::create_dir_all(dir).map_err(error)?;
    }
    let file = OpenOptions::new()
        .create(true)
        .append(true)
        .mode(0o640)
        // The daemon may be root: never follow a link planted in its place.
        .custom_flags(nix::libc::O_NOFOLLOW)
        .open(path)
        .map_err(error)?;
    if let Some((uid, gid)) = owner {
        std::os::unix::fs::fchown(&file, Some(uid.as_raw()), Some(gid.as_raw())).map_err(error)?;
    }
    Ok(file)
}

/// Forwards each line of `stream` to the `log` crate at `level`, tagged with
/// the task's id, and as it came to `copy` when given, until the stream ends.
async fn forward(
    stream: impl AsyncRead + Unpin,
    task_id: Arc<str>,
    level: log::Level,
    copy: Option<Arc<File>>,
) {
    let mut reader = BufReader::new(stream);
    let mut line = Vec::new();
    loop {
        line.clear();
        match (&mut reader)
            .take(MAX_LINE)
            .read_until(b'\n', &mut line)
            .await
        {
            Ok(0) => return,
            Ok(_) => {
                if let Some(file) = &copy {
                    // A local file's append: short, and the line must stay
                    // in order with the next one.
                    if let Err(error) = (&**file).write_all(&line) {
                        log::warn!("task {task_id}: cannot write its output file: {error}");
                    }
                }
                if line.last() == Some(&b'\n') {
                    line.pop();
                }
                let text = String::from_utf8_lossy(&line);
                log::log!(target: LOG_TARGET, level, task_id = &*task_id; "{text}");
            }
            Err(error) => {
                log::warn!("task {task_id}: cannot read its output: {error}");
                return;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    use std::sync::mpsc::{self, Receiver, RecvTimeoutError};
    use std::sync::{Mutex, Once};
    use std::time::Instant;
    use tokio::runtime::{Builder, Runtime};

    /// Long enough for any process the tests start to be reported.
    const REPORT: Duration = Duration::from_secs(10);

    #[test]
    fn only_a_want_of_descriptors_is_worth_another_try() {
        let log = |errno| ExecError::Log {
            path: "/var/lib/gpu-agent/logs/t1.log".into(),
            cause: io::Error::from_raw_os_error(errno),
        };
        assert!(log(libc::EMFILE).short_of_descriptors());
        assert!(log(libc::ENFILE).short_of_descriptors());
        assert!(!log(libc::ENOSPC).short_of_descriptors());
        let spawn = ExecError::Spawn {
            program: "true".into(),
            cause: io::Error::from_raw_os_error(libc::EMFILE),
        };
        assert!(spawn.short_of_descriptors());
        assert!(ExecError::Groups {
            user: "ada".into(),
            cause: Errno::EMFILE
        }
        .short_of_descriptors());
        assert!(!ExecError::NoSuchUser { uid: 7 }.short_of_descriptors());
    }

    fn runtime() -> Runtime {
        Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap()
    }

    fn sh(task_id: &str, script: &str, log: LogSink) -> Launch {
        Launch {
            task_id: task_id.to_owned(),
            argv: vec!["/bin/sh".into(), "-c".into(), script.into()],
            env: BTreeMap::new(),
            uid: Uid::effective().as_raw(),
            visible_devices: Vec::new(),
            workdir: None,
            umask: None,
            log,
        }
    }

    /// Spawns `launch` from this (non-runtime) thread; the receiver gets the exit.
    fn start(launch: Launch, rt: &Runtime) -> Result<(u32, Receiver<Exit>), ExecError> {
        let (tx, rx) = mpsc::channel();
        let pid = spawn(launch, rt.handle(), move |exit| tx.send(exit).unwrap())?;
        Ok((pid, rx))
    }

    /// The exit `on_exit` reported, checking it was called only once.
    fn exit_of(rx: &Receiver<Exit>) -> Exit {
        let exit = rx.recv_timeout(REPORT).expect("on_exit was called");
        // `on_exit` has been consumed, so the channel's only sender is gone.
        assert_eq!(rx.recv_timeout(REPORT), Err(RecvTimeoutError::Disconnected));
        exit
    }

    fn run(launch: Launch) -> Exit {
        let rt = runtime();
        let (_, rx) = start(launch, &rt).unwrap();
        exit_of(&rx)
    }

    fn poll(what: &str, mut done: impl FnMut() -> bool) {
        let deadline = Instant::now() + REPORT;
        while !done() {
            assert!(Instant::now() < deadline, "timed out waiting for {what}");
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    fn lines(path: &Path) -> Vec<String> {
        fs::read_to_string(path)
            .unwrap_or_default()
            .lines()
            .map(str::to_owned)
            .collect()
    }

    /// Whether the process has ended (gone, or a zombie nobody reaped yet).
    fn ended(pid: i32) -> bool {
        match fs::read_to_string(format!("/proc/{pid}/stat")) {
            Err(_) => true,
            Ok(stat) => stat
                .rsplit_once(") ")
                .is_some_and(|(_, rest)| rest.starts_with('Z')),
        }
    }

    #[test]
    fn exit_codes_and_signals_are_mapped() {
        let dir = tempfile::tempdir().unwrap();
        let log = LogSink::File(dir.path().join("t.log"));
        let code = run(sh("t-code", "exit 3", log.clone()));
        assert_eq!(code, Exit::Code(3));
        assert_eq!(code.exit_code(), 3);
        assert!(!code.success());

        let signal = run(sh("t-signal", "kill -TERM $$", log.clone()));
        assert_eq!(signal, Exit::Signal(15));
        assert_eq!(signal.exit_code(), 143);
        assert!(!signal.success());

        let ok = run(sh("t-ok", "true", log));
        assert_eq!(ok, Exit::Code(0));
        assert!(ok.success());
    }

    #[test]
    fn environment_is_clean_and_devices_and_task_id_win() {
        static DAEMON_ENV: Once = Once::new();
        // The daemon's own session bus must not reach tasks.
        DAEMON_ENV.call_once(|| std::env::set_var("DBUS_SESSION_BUS_ADDRESS", "unix:path=/leak"));
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("env.log");
        let mut launch = sh("t-env", "", LogSink::File(path.clone()));
        launch.argv = vec!["/usr/bin/env".into()];
        launch.env = [
            ("FOO", "bar baz"),
            ("PATH", "/opt/x/bin:/usr/bin"),
            ("CUDA_VISIBLE_DEVICES", "spoofed"),
            ("GPU_AGENT_TASK_ID", "spoofed"),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect();
        launch.visible_devices = vec!["GPU-0a1b".into(), "MIG-2c3d".into()];
        assert_eq!(run(launch), Exit::Code(0));

        let user = User::from_uid(Uid::effective()).unwrap().unwrap();
        let got: BTreeMap<String, String> = lines(&path)
            .iter()
            .map(|line| {
                let (k, v) = line.split_once('=').unwrap();
                (k.to_owned(), v.to_owned())
            })
            .collect();
        let expected: BTreeMap<String, String> = [
            ("HOME", user.dir.to_str().unwrap()),
            ("USER", &user.name),
            ("LOGNAME", &user.name),
            ("SHELL", user.shell.to_str().unwrap()),
            ("PATH", "/opt/x/bin:/usr/bin"),
            ("FOO", "bar baz"),
            ("CUDA_VISIBLE_DEVICES", "GPU-0a1b,MIG-2c3d"),
            ("GPU_AGENT_TASK_ID", "t-env"),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect();
        assert_eq!(got, expected);

        // No devices: CUDA sees none; the default PATH; in the user's home.
        let path = dir.path().join("none.log");
        let script = r#"echo "[$CUDA_VISIBLE_DEVICES]" "$PATH"; pwd"#;
        assert_eq!(
            run(sh("t-none", script, LogSink::File(path.clone()))),
            Exit::Code(0)
        );
        let home = if user.dir.is_dir() {
            user.dir.to_str().unwrap()
        } else {
            "/"
        };
        assert_eq!(lines(&path), ["[] /usr/local/bin:/usr/bin:/bin", home]);
    }

    #[test]
    fn bad_environment_names_are_refused() {
        let rt = runtime();
        for (name, value) in [("A=B", "1"), ("", "1"), ("NUL", "a\0b")] {
            let mut launch = sh("t-badenv", "true", LogSink::Journal);
            launch.env.insert(name.into(), value.into());
            match start(launch, &rt) {
                Err(ExecError::Environment { name: got, .. }) => assert_eq!(got, name),
                other => panic!("{name:?}: expected an Environment error, got {other:?}"),
            }
        }
    }

    #[test]
    fn file_sink_appends_stdout_and_stderr() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("logs/tasks/t-file.log");
        for _ in 0..2 {
            let launch = sh(
                "t-file",
                "echo out; echo err >&2",
                LogSink::File(path.clone()),
            );
            assert_eq!(run(launch), Exit::Code(0));
        }
        assert_eq!(lines(&path), ["out", "err", "out", "err"]);
        let meta = fs::metadata(&path).unwrap();
        assert_eq!(meta.permissions().mode() & 0o777, 0o640);
        assert_eq!(meta.uid(), Uid::effective().as_raw());
    }

    #[test]
    fn runs_as_the_tasks_user_with_its_groups() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("user.log");
        let mut launch = sh(
            "t-user",
            "id -u; id -g; id -G; pwd",
            LogSink::File(path.clone()),
        );
        if !Uid::effective().is_root() {
            // Not root: another user's task (root's, which always exists) is refused.
            launch.uid = 0;
            match start(launch, &runtime()) {
                Err(error @ ExecError::CannotSwitchUser { daemon_uid, uid }) => {
                    assert_eq!((daemon_uid, uid), (Uid::effective().as_raw(), 0));
                    assert!(error.to_string().contains("uid 0"), "{error}");
                }
                other => panic!("expected CannotSwitchUser, got {other:?}"),
            }
            return;
        }
        let nobody = User::from_name("nobody")
            .unwrap()
            .expect("a user named nobody");
        launch.uid = nobody.uid.as_raw();
        // The daemon's own supplementary groups must not reach the task.
        nix::unistd::setgroups(&[Gid::from_raw(0)]).unwrap();
        assert_eq!(run(launch), Exit::Code(0));
        let out = lines(&path);
        assert_eq!(out.len(), 4, "{out:?}");
        assert_eq!(out[0], nobody.uid.to_string());
        assert_eq!(out[1], nobody.gid.to_string());
        let name = CString::new(nobody.name.as_str()).unwrap();
        let mut expected: Vec<String> = nix::unistd::getgrouplist(&name, nobody.gid)
            .unwrap()
            .iter()
            .map(|gid| gid.to_string())
            .collect();
        let mut got: Vec<String> = out[2].split_whitespace().map(str::to_owned).collect();
        expected.sort();
        expected.dedup();
        got.sort();
        got.dedup();
        assert_eq!(got, expected, "supplementary groups");
        let home = if nobody.dir.is_dir() {
            nobody.dir.to_str().unwrap()
        } else {
            "/"
        };
        assert_eq!(out[3], home);
        let meta = fs::metadata(&path).unwrap();
        assert_eq!(
            (meta.uid(), meta.gid()),
            (nobody.uid.as_raw(), nobody.gid.as_raw())
        );
    }

    /// A directory only root may enter, and one `nobody` may write in.
    fn nobodys_dirs() -> (tempfile::TempDir, PathBuf, PathBuf) {
        let dir = tempfile::tempdir().unwrap();
        fs::set_permissions(dir.path(), fs::Permissions::from_mode(0o755)).unwrap();
        let closed = dir.path().join("closed");
        fs::create_dir(&closed).unwrap();
        fs::set_permissions(&closed, fs::Permissions::from_mode(0o700)).unwrap();
        let open = dir.path().join("open");
        fs::create_dir(&open).unwrap();
        fs::set_permissions(&open, fs::Permissions::from_mode(0o777)).unwrap();
        (dir, closed, open)
    }

    #[test]
    fn the_working_directory_is_entered_as_the_user() {
        if !Uid::effective().is_root() {
            return;
        }
        let nobody = User::from_name("nobody")
            .unwrap()
            .expect("a user named nobody");
        let (_dir, closed, open) = nobodys_dirs();
        // Root could enter it; nobody cannot, and is told so.
        match check_workdir(nobody.uid.as_raw(), &closed) {
            Err(error @ ExecError::Workdir { .. }) => assert_eq!(
                error.to_string(),
                format!(
                    "user nobody cannot enter the working directory {}: Permission denied (os error 13)",
                    closed.display()
                )
            ),
            other => panic!("expected a Workdir error, got {other:?}"),
        }
        assert!(check_workdir(nobody.uid.as_raw(), &open).is_ok());
        // The daemon's own working directory did not move.
        assert_ne!(std::env::current_dir().unwrap(), open);

        let mut launch = sh("t-closed", "pwd", LogSink::Journal);
        launch.uid = nobody.uid.as_raw();
        launch.workdir = Some(closed);
        assert!(matches!(
            start(launch, &runtime()),
            Err(ExecError::Workdir { .. })
        ));

        // In a directory it may enter, its output files are its own, made
        // under its umask, relative to the working directory.
        let mut launch = sh(
            "t-open",
            "pwd; umask; echo oops >&2",
            LogSink::User {
                output: PathBuf::from("out.txt"),
                error: Some(PathBuf::from("err.txt")),
                journal: false,
            },
        );
        launch.uid = nobody.uid.as_raw();
        launch.workdir = Some(open.clone());
        launch.umask = Some(0o027);
        assert_eq!(run(launch), Exit::Code(0));
        assert_eq!(
            lines(&open.join("out.txt")),
            [open.to_str().unwrap(), "0027"]
        );
        assert_eq!(lines(&open.join("err.txt")), ["oops"]);
        for name in ["out.txt", "err.txt"] {
            let meta = fs::metadata(open.join(name)).unwrap();
            assert_eq!(meta.uid(), nobody.uid.as_raw(), "{name}");
            assert_eq!(meta.permissions().mode() & 0o777, 0o640, "{name}");
        }
    }

    #[test]
    fn an_output_file_the_user_may_not_write_is_refused() {
        if !Uid::effective().is_root() {
            return;
        }
        let nobody = User::from_name("nobody")
            .unwrap()
            .expect("a user named nobody");
        let (_dir, closed, open) = nobodys_dirs();
        // Root may write there; nobody may not, even by an absolute path.
        let target = closed.join("planted");
        let mut launch = sh(
            "t-planted",
            "echo x",
            LogSink::User {
                output: target.clone(),
                error: None,
                journal: false,
            },
        );
        launch.uid = nobody.uid.as_raw();
        launch.workdir = Some(open);
        match start(launch, &runtime()) {
            Err(error @ ExecError::Output { .. }) => assert!(
                error.to_string().starts_with(&format!(
                    "user nobody cannot open the output file {}: Permission denied",
                    target.display()
                )),
                "{error}"
            ),
            other => panic!("expected an Output error, got {other:?}"),
        }
        assert!(!target.exists());
    }

    #[test]
    fn under_the_journal_the_output_file_gets_every_line_too() {
        let dir = tempfile::tempdir().unwrap();
        let mut launch = sh(
            "t-both",
            "echo one; echo two >&2; echo three",
            LogSink::User {
                output: PathBuf::from("both.out"),
                error: None,
                journal: true,
            },
        );
        launch.workdir = Some(dir.path().to_owned());
        assert_eq!(run(launch), Exit::Code(0));
        let mut got = lines(&dir.path().join("both.out"));
        got.sort();
        assert_eq!(got, ["one", "three", "two"]);
        assert_eq!(captured("t-both", log::Level::Info), ["one", "three"]);
        assert_eq!(captured("t-both", log::Level::Warn), ["two"]);
    }

    #[test]
    fn unknown_users_are_refused() {
        let mut launch = sh("t-nouser", "true", LogSink::Journal);
        launch.uid = 3_999_999_999;
        match start(launch, &runtime()) {
            Err(error @ ExecError::NoSuchUser { uid: 3_999_999_999 }) => {
                assert!(error.to_string().contains("3999999999"), "{error}");
            }
            other => panic!("expected NoSuchUser, got {other:?}"),
        }
    }

    #[test]
    fn kill_group_terminates_child_and_grandchild() {
        let rt = runtime();
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("kill.log");
        let script = "sleep 100 & echo $!; sleep 100; wait";
        let (pid, rx) = start(sh("t-kill", script, LogSink::File(path.clone())), &rt).unwrap();
        poll("the grandchild's pid", || lines(&path).len() == 1);
        let grandchild: i32 = lines(&path)[0].parse().unwrap();
        assert!(!ended(grandchild));

        let asked = Instant::now();
        // A grace far beyond the test: SIGTERM alone must do it.
        kill_group(pid, Duration::from_secs(60), rt.handle());
        assert_eq!(exit_of(&rx), Exit::Signal(15));
        assert!(asked.elapsed() < Duration::from_secs(2));
        poll("the grandchild to end", || ended(grandchild));
    }

    #[test]
    fn kill_group_escalates_to_sigkill_after_the_grace() {
        let rt = runtime();
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("trap.log");
        let script = "trap '' TERM; echo ready; sleep 100";
        let (pid, rx) = start(sh("t-trap", script, LogSink::File(path.clone())), &rt).unwrap();
        poll("the TERM trap", || lines(&path) == ["ready"]);

        let asked = Instant::now();
        kill_group(pid, Duration::from_millis(200), rt.handle());
        assert_eq!(exit_of(&rx), Exit::Signal(9));
        let took = asked.elapsed();
        assert!(took >= Duration::from_millis(200), "killed after {took:?}");
        assert!(took < Duration::from_secs(2), "killed after {took:?}");
    }

    #[test]
    fn kill_group_of_a_finished_task_is_harmless() {
        let rt = runtime();
        let dir = tempfile::tempdir().unwrap();
        let launch = sh("t-done", "true", LogSink::File(dir.path().join("done.log")));
        let (pid, rx) = start(launch, &rt).unwrap();
        assert_eq!(exit_of(&rx), Exit::Code(0));
        kill_group(pid, Duration::ZERO, rt.handle());
    }

    #[test]
    fn only_task_groups_are_signalled() {
        // Never the daemon's own group (0), nor every process (1 or -1).
        for pid in [0, 1, u32::MAX, 1 << 31] {
            assert_eq!(task_group(pid), None, "{pid}");
        }
        assert_eq!(task_group(2), Some(Pid::from_raw(2)));
        assert_eq!(task_group(i32::MAX as u32), Some(Pid::from_raw(i32::MAX)));
    }

    #[test]
    fn programs_that_cannot_start_are_errors_and_never_reported() {
        let rt = runtime();
        let dir = tempfile::tempdir().unwrap();
        let not_executable = dir.path().join("script.sh");
        fs::write(&not_executable, "#!/bin/sh\n").unwrap();
        fs::set_permissions(&not_executable, fs::Permissions::from_mode(0o644)).unwrap();
        let missing = "/nonexistent/gpu-agent-test-program".to_owned();
        for program in [missing, not_executable.to_str().unwrap().to_owned()] {
            let mut launch = sh("t-missing", "", LogSink::Journal);
            launch.argv = vec![program.clone(), "arg".into()];
            let (tx, rx) = mpsc::channel();
            match spawn(launch, rt.handle(), move |exit| tx.send(exit).unwrap()) {
                Err(error @ ExecError::Spawn { .. }) => {
                    assert!(error.to_string().contains(&program), "{error}");
                }
                other => panic!("{program}: expected a Spawn error, got {other:?}"),
            }
            // `on_exit` was dropped without being called.
            assert_eq!(rx.recv_timeout(REPORT), Err(RecvTimeoutError::Disconnected));
        }

        let mut launch = sh("t-empty", "", LogSink::Journal);
        launch.argv.clear();
        assert!(matches!(
            start(launch, &rt),
            Err(ExecError::EmptyCommand { task_id }) if task_id == "t-empty"
        ));
    }

    /// Collects the records of target [`LOG_TARGET`]: (task_id, level, message).
    struct Capture(Mutex<Vec<(String, log::Level, String)>>);

    impl log::Log for Capture {
        fn enabled(&self, _: &log::Metadata) -> bool {
            true
        }

        fn log(&self, record: &log::Record) {
            if record.target() != LOG_TARGET {
                return;
            }
            let task_id = record
                .key_values()
                .get(log::kv::Key::from_str("task_id"))
                .map(|value| value.to_string())
                .unwrap_or_default();
            let entry = (task_id, record.level(), record.args().to_string());
            self.0.lock().unwrap().push(entry);
        }

        fn flush(&self) {}
    }

    static CAPTURE: Capture = Capture(Mutex::new(Vec::new()));

    /// The messages logged for `task_id` at `level`, in order.
    fn captured(task_id: &str, level: log::Level) -> Vec<String> {
        static INSTALL: Once = Once::new();
        INSTALL.call_once(|| {
            log::set_logger(&CAPTURE).expect("no other logger in the library's tests");
            log::set_max_level(log::LevelFilter::Info);
        });
        let records = CAPTURE.0.lock().unwrap();
        let records = records
            .iter()
            .filter(|(id, lvl, _)| id == task_id && *lvl == level);
        records.map(|(_, _, message)| message.clone()).collect()
    }

    #[test]
    fn journal_sink_forwards_lines_with_the_task_id() {
        assert!(captured("t-journal", log::Level::Info).is_empty());
        let script = r"echo hello
            head -c 50000 /dev/zero | tr '\000' a; echo
            echo oops >&2
            printf '\377\n'
            printf last";
        // Every line is logged before the exit is reported.
        assert_eq!(
            run(sh("t-journal", script, LogSink::Journal)),
            Exit::Code(0)
        );
        let long = 48 * 1024;
        let expected = [
            "hello".to_owned(),
            "a".repeat(long),
            "a".repeat(50_000 - long),
            "\u{FFFD}".to_owned(),
            "last".to_owned(),
        ];
        assert_eq!(captured("t-journal", log::Level::Info), expected);
        assert_eq!(captured("t-journal", log::Level::Warn), ["oops"]);
    }

    #[test]
    fn output_after_the_exit_is_drained_without_waiting_for_stragglers() {
        assert!(captured("t-left", log::Level::Info).is_empty());
        let rt = runtime();
        let script = "(sleep 0.1; echo late) & (sleep 5; echo never) & echo done";
        let asked = Instant::now();
        let (pid, rx) = start(sh("t-left", script, LogSink::Journal), &rt).unwrap();
        assert_eq!(exit_of(&rx), Exit::Code(0));
        let took = asked.elapsed();
        assert!(
            took < DRAIN_GRACE + Duration::from_secs(1),
            "reported after {took:?}"
        );
        assert_eq!(captured("t-left", log::Level::Info), ["done", "late"]);
        killpg(Pid::from_raw(pid as i32), Signal::SIGKILL).unwrap();
    }
}
