//! A person's first task: `gpuctl submit -- CMD` typed in a project
//! directory runs there, as its user, with the user's environment, and its
//! output lands beside it (sbatch's habits).
//!
//! The clients run as a test user through `setpriv` (see daemon_access.rs),
//! so these tests need root.

use std::fs;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::Duration;

use gpu_agent_dbus::TaskStatus;

use crate::daemon::{unique, Daemon};
use crate::daemon_access::{root_or_skip, users, As};
use crate::harness::artefacts;

const FINISH: Duration = Duration::from_secs(20);

/// A directory for the test under /tmp that every user may enter, removed
/// when dropped.
struct Scratch(PathBuf);

impl Scratch {
    fn new(test: &str) -> Scratch {
        let dir = Path::new("/tmp").join(unique(test));
        fs::DirBuilder::new()
            .mode(0o755)
            .create(&dir)
            .expect("a scratch directory");
        fs::set_permissions(&dir, fs::Permissions::from_mode(0o755)).unwrap();
        Scratch(dir)
    }

    /// A directory `name` in it owned by `who` with `mode`.
    fn dir(&self, name: &str, who: As, mode: u32) -> PathBuf {
        let dir = self.0.join(name);
        fs::create_dir_all(&dir).unwrap();
        std::os::unix::fs::chown(&dir, Some(who.uid), Some(who.gid)).unwrap();
        fs::set_permissions(&dir, fs::Permissions::from_mode(mode)).unwrap();
        dir
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.0);
    }
}

/// `sh -c SCRIPT` as `who` in `dir`, with `path` as its PATH and the bus's
/// address; `$GPUCTL` is gpuctl.
fn shell_as(d: &Daemon, who: As, dir: &Path, path: &str, script: &str) -> Output {
    Command::new("setpriv")
        .arg(format!("--reuid={}", who.uid))
        .arg(format!("--regid={}", who.gid))
        .arg("--init-groups")
        .args(["/bin/sh", "-c", script])
        .current_dir(dir)
        .env_clear()
        .env("PATH", path)
        .env("GPUCTL", artefacts().join("gpuctl"))
        .env("DBUS_SESSION_BUS_ADDRESS", d.address())
        .env("NO_COLOR", "1")
        .output()
        .expect("run setpriv")
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// The id a successful `gpuctl submit` printed.
fn submitted(out: &Output) -> String {
    assert!(
        out.status.success(),
        "gpuctl submit failed ({}): {}",
        out.status,
        text(&out.stderr)
    );
    text(&out.stdout).trim().to_string()
}

const SYSTEM_PATH: &str = "/usr/sbin:/usr/bin:/sbin:/bin";

#[test]
fn daemon_submit_runs_where_and_as_it_was_typed() {
    if !root_or_skip("daemon_submit_runs_where_and_as_it_was_typed") {
        return;
    }
    let who = users().member;
    let scratch = Scratch::new("first-task");
    let proj = scratch.dir("proj", who, 0o755);
    let bin = scratch.dir("proj/bin", who, 0o755);
    let tool = bin.join("mytool");
    fs::write(
        &tool,
        "#!/bin/sh\necho \"mytool says $1 in $(pwd)\"\necho \"$1\" > result.txt\necho careful >&2\n",
    )
    .unwrap();
    fs::set_permissions(&tool, fs::Permissions::from_mode(0o755)).unwrap();
    let d = Daemon::start();

    // mytool is only on the user's PATH; the umask is the user's shell's.
    let path = format!("{}:{SYSTEM_PATH}", bin.display());
    let out = shell_as(
        &d,
        who,
        &proj,
        &path,
        "umask 027; exec \"$GPUCTL\" submit --session -- mytool arg",
    );
    let id = submitted(&out);
    let task = d.wait_state(&id, TaskStatus::Succeeded, FINISH);
    assert_eq!(task.spec.workdir, proj.to_str().unwrap());
    assert_eq!(task.spec.deadline, None);

    let result = proj.join("result.txt");
    assert_eq!(fs::read_to_string(&result).unwrap(), "arg\n");
    let output = proj.join(format!("gpu-agent-{id}.out"));
    assert_eq!(task.spec.output, output.to_str().unwrap());
    assert_eq!(
        fs::read_to_string(&output).unwrap(),
        format!("mytool says arg in {}\ncareful\n", proj.display())
    );
    for file in [&result, &output] {
        let meta = fs::metadata(file).unwrap();
        assert_eq!(
            (meta.uid(), meta.gid()),
            (who.uid, who.gid),
            "{}",
            file.display()
        );
        assert_eq!(
            meta.permissions().mode() & 0o777,
            0o640,
            "{}",
            file.display()
        );
    }
    // Nothing went to the daemon's own log.
    assert!(!d
        .state_dir()
        .join("logs")
        .join(format!("{id}.log"))
        .exists());

    // gpuctl logs prints it to its owner, the id with or without its t.
    let printed = format!("mytool says arg in {}\ncareful\n", proj.display());
    let number = id.trim_start_matches('t');
    for (args, expected) in [
        (format!("logs {id}"), printed.as_str()),
        (format!("logs {number}"), printed.as_str()),
        (format!("logs --tail 1 {id}"), "careful\n"),
    ] {
        let out = shell_as(
            &d,
            who,
            &proj,
            &path,
            &format!("exec \"$GPUCTL\" {args} --session"),
        );
        assert!(out.status.success(), "{args}: {}", text(&out.stderr));
        assert_eq!(text(&out.stdout), expected, "{args}");
    }
    // gpuctl task says where it went.
    let out = shell_as(
        &d,
        who,
        &proj,
        &path,
        &format!("exec \"$GPUCTL\" task {id} --session"),
    );
    assert!(
        text(&out.stdout).contains(&format!("output     {}\n", output.display())),
        "{}",
        text(&out.stdout)
    );
    // Anyone else is refused by the daemon, however the file's mode is set.
    let outsider = users().outsider;
    let out = shell_as(
        &d,
        outsider,
        &proj,
        SYSTEM_PATH,
        &format!("exec \"$GPUCTL\" logs {id} --session"),
    );
    assert!(!out.status.success());
    assert_eq!(
        text(&out.stderr),
        format!(
            "gpuctl: error: org.gpuagent.Agent1.Error.AccessDenied: task {id} belongs to uid {}; \
             only its owner or an admin may read its output\n",
            who.uid
        )
    );
    assert!(out.stdout.is_empty());
}

#[test]
fn daemon_logs_follows_a_task_until_it_ends() {
    if !root_or_skip("daemon_logs_follows_a_task_until_it_ends") {
        return;
    }
    let who = users().member;
    let scratch = Scratch::new("follow");
    let proj = scratch.dir("proj", who, 0o755);
    let d = Daemon::start();
    // The second line comes once the follower is following: the task waits
    // for the test's go.
    let script = "exec \"$GPUCTL\" submit --session -- /bin/sh -c \
                  'echo one; while [ ! -e go ]; do sleep 0.05; done; echo two'";
    let id = submitted(&shell_as(&d, who, &proj, SYSTEM_PATH, script));
    d.wait_state(&id, TaskStatus::Running, FINISH);
    let follower = Command::new("setpriv")
        .arg(format!("--reuid={}", who.uid))
        .arg(format!("--regid={}", who.gid))
        .arg("--init-groups")
        .arg(artefacts().join("gpuctl"))
        .args(["logs", "-f", &id, "--session"])
        .env_clear()
        .env("DBUS_SESSION_BUS_ADDRESS", d.address())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("gpuctl logs -f");
    let output = proj.join(format!("gpu-agent-{id}.out"));
    crate::daemon::wait_for("the first line", FINISH, || {
        (fs::read_to_string(&output).unwrap_or_default() == "one\n").then_some(())
    });
    fs::write(proj.join("go"), "").unwrap();
    let out = follower.wait_with_output().unwrap();
    assert!(out.status.success());
    assert_eq!(text(&out.stdout), "one\ntwo\n");
    assert_eq!(d.task(&id).state, TaskStatus::Succeeded);
}

#[test]
fn daemon_cancel_names_each_task_it_could_not_cancel() {
    let d = Daemon::start();
    let short = d.submit(&crate::daemon::spec(1.0, 1.0, 60.0, 1.0)).unwrap();
    d.wait_state(&short, TaskStatus::Succeeded, FINISH);
    let long: Vec<String> = (0..2)
        .map(|_| d.submit(&crate::daemon::spec(1e6, 1.0, 60.0, 1.0)).unwrap())
        .collect();
    let out = crate::daemon::gpuctl(&d, &["cancel", &long[0], &short, &long[1]]);
    assert_eq!(out.status.code(), Some(4), "{}", text(&out.stderr));
    assert_eq!(
        text(&out.stderr),
        format!(
            "gpuctl: {short} not cancelled: org.gpuagent.Agent1.Error.NotCancellable: \
             task {short} already succeeded\n\
             gpuctl: error: 1 of 3 tasks not cancelled: {short}\n"
        )
    );
    for id in &long {
        assert_eq!(d.task(id).state, TaskStatus::Cancelled, "{id}");
    }
    // Ids without their t, all cancellable: success.
    let more: Vec<String> = (0..2)
        .map(|_| d.submit(&crate::daemon::spec(1e6, 1.0, 60.0, 1.0)).unwrap())
        .collect();
    let numbers: Vec<&str> = more.iter().map(|id| id.trim_start_matches('t')).collect();
    let out = crate::daemon::gpuctl(&d, &["cancel", numbers[0], numbers[1]]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    for id in &more {
        assert_eq!(d.task(id).state, TaskStatus::Cancelled, "{id}");
    }
}

#[test]
fn daemon_submit_refuses_a_directory_the_user_cannot_enter() {
    if !root_or_skip("daemon_submit_refuses_a_directory_the_user_cannot_enter") {
        return;
    }
    let who = users().member;
    let scratch = Scratch::new("closed-dir");
    let proj = scratch.dir("proj", who, 0o755);
    let root = As { uid: 0, gid: 0 };
    let closed = scratch.dir("closed", root, 0o700);
    let d = Daemon::start();

    let out = shell_as(
        &d,
        who,
        &proj,
        SYSTEM_PATH,
        &format!(
            "exec \"$GPUCTL\" submit --session --chdir {} -- true",
            closed.display()
        ),
    );
    assert!(!out.status.success());
    assert_eq!(
        text(&out.stderr),
        format!(
            "gpuctl: error: org.gpuagent.Agent1.Error.InvalidArgument: key \"workdir\": user {} \
             cannot enter the working directory {}: Permission denied (os error 13)\n",
            crate::daemon_access::MEMBER,
            closed.display()
        )
    );
    assert!(d.tasks().is_empty(), "nothing is stored for a refused task");

    // A relative --chdir is from the current directory.
    let sub = scratch.dir("proj/sub", who, 0o755);
    let out = shell_as(
        &d,
        who,
        &proj,
        SYSTEM_PATH,
        "exec \"$GPUCTL\" submit --session --chdir sub -- pwd",
    );
    let id = submitted(&out);
    d.wait_state(&id, TaskStatus::Succeeded, FINISH);
    let output = sub.join(format!("gpu-agent-{id}.out"));
    assert_eq!(
        fs::read_to_string(output).unwrap(),
        format!("{}\n", proj.join("sub").display())
    );

    // A pattern: the name, the user, a %% that stays a % in the file's name
    // (and in gpuctl task, which reads the stored name as it is).
    let out = shell_as(
        &d,
        who,
        &proj,
        SYSTEM_PATH,
        "exec \"$GPUCTL\" submit --session --name probe --output '%x-%u-100%%.txt' -- pwd",
    );
    let id = submitted(&out);
    d.wait_state(&id, TaskStatus::Succeeded, FINISH);
    let file = proj.join(format!("probe-{}-100%.txt", crate::daemon_access::MEMBER));
    assert!(file.exists(), "{} is missing", file.display());
    let out = shell_as(
        &d,
        who,
        &proj,
        SYSTEM_PATH,
        &format!("exec \"$GPUCTL\" task {id} --session"),
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(
        text(&out.stdout).contains(&format!("output     {}\n", file.display())),
        "{}",
        text(&out.stdout)
    );
}

#[test]
fn daemon_submit_passes_the_environment_as_export_says() {
    if !root_or_skip("daemon_submit_passes_the_environment_as_export_says") {
        return;
    }
    let who = users().member;
    let scratch = Scratch::new("export");
    let proj = scratch.dir("proj", who, 0o755);
    let d = Daemon::start();
    let env_of = |export: &str| {
        let script = format!(
            "FOO='bar baz' CUDA_VISIBLE_DEVICES=spoofed exec \"$GPUCTL\" submit --session \
             --export {export} --output {export}.env -- /usr/bin/env"
        );
        let id = submitted(&shell_as(&d, who, &proj, SYSTEM_PATH, &script));
        d.wait_state(&id, TaskStatus::Succeeded, FINISH);
        let env = fs::read_to_string(proj.join(format!("{export}.env"))).unwrap();
        let mut names: Vec<(String, String)> = env
            .lines()
            .map(|l| {
                let (k, v) = l.split_once('=').unwrap();
                (k.to_string(), v.to_string())
            })
            .collect();
        names.sort();
        (id, names)
    };

    // ALL, the default: the caller's variables, the agent's GPU ones over them.
    let (id, all) = env_of("ALL");
    let get = |env: &[(String, String)], name: &str| {
        env.iter().find(|(k, _)| k == name).map(|(_, v)| v.clone())
    };
    assert_eq!(get(&all, "FOO").as_deref(), Some("bar baz"));
    assert_eq!(get(&all, "PATH").as_deref(), Some(SYSTEM_PATH));
    assert_eq!(get(&all, "GPU_AGENT_TASK_ID"), Some(id));
    let visible = get(&all, "CUDA_VISIBLE_DEVICES").unwrap();
    assert!(visible.starts_with("GPU-"), "{visible}");

    // NONE: the clean environment of before.
    let (_, none) = env_of("NONE");
    let names: Vec<&str> = none.iter().map(|(k, _)| k.as_str()).collect();
    assert_eq!(
        names,
        [
            "CUDA_VISIBLE_DEVICES",
            "GPU_AGENT_TASK_ID",
            "HOME",
            "LOGNAME",
            "PATH",
            "SHELL",
            "USER"
        ]
    );
    assert_eq!(
        get(&none, "PATH").as_deref(),
        Some("/usr/local/bin:/usr/bin:/bin")
    );
}

/// gpuctl with `args` and the environment `vars` only (plus PATH).
fn gpuctl_env(args: &[&str], vars: &[(&str, &str)]) -> Output {
    Command::new(artefacts().join("gpuctl"))
        .args(args)
        .env_clear()
        .env("PATH", SYSTEM_PATH)
        .envs(vars.iter().copied())
        .output()
        .expect("run gpuctl")
}

#[test]
fn cli_exit_statuses_say_what_happened() {
    let d = Daemon::start();
    let bus = [("DBUS_SESSION_BUS_ADDRESS", d.address())];
    let code = |out: &Output| (out.status.code(), text(&out.stderr));
    // 0: --session before the command, after it, or GPU_AGENT_BUS.
    for (args, vars) in [
        (vec!["--session", "status"], bus.to_vec()),
        (vec!["status", "--session"], bus.to_vec()),
        (vec!["status"], vec![bus[0], ("GPU_AGENT_BUS", "session")]),
        (vec!["status"], vec![("GPU_AGENT_BUS", d.address())]),
    ] {
        assert_eq!(
            code(&gpuctl_env(&args, &vars)),
            (Some(0), String::new()),
            "{args:?} {vars:?}"
        );
    }
    // 1: a negative answer.
    let config = Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/mig-config.yaml");
    let config = config.to_str().unwrap();
    let assert = ["--session", "mig", "assert", "-f", config, "-c", "balanced"];
    let out = gpuctl_env(&assert, &bus);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
    // 2: usage, on the command line or in GPU_AGENT_BUS.
    assert_eq!(
        gpuctl_env(&["submit", "--bogus"], &bus).status.code(),
        Some(2)
    );
    let out = gpuctl_env(&["status"], &[("GPU_AGENT_BUS", "sesion")]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
    // 3: no daemon there (mig assert too: not 1, which would read "differs").
    let nowhere = [("GPU_AGENT_BUS", "unix:path=/nonexistent/gpu-agent-bus")];
    for args in [&["status"][..], &assert[1..]] {
        let (status, stderr) = code(&gpuctl_env(args, &nowhere));
        assert_eq!(status, Some(3), "{args:?}: {stderr}");
        assert!(
            stderr.contains("cannot connect to the bus at unix:path=/nonexistent/gpu-agent-bus"),
            "{stderr}"
        );
    }
    // 4: the daemon answered an error.
    let (status, stderr) = code(&gpuctl_env(&["--session", "task", "999"], &bus));
    assert_eq!(status, Some(4));
    assert_eq!(
        stderr,
        "gpuctl: error: org.gpuagent.Agent1.Error.NoSuchTask: no task \"t999\"\n"
    );
}

#[test]
fn cli_a_refused_caller_exits_3() {
    if !root_or_skip("cli_a_refused_caller_exits_3") {
        return;
    }
    let outsider = users().outsider;
    let scratch = Scratch::new("refused");
    let d = Daemon::start();
    let out = shell_as(
        &d,
        outsider,
        &scratch.0,
        SYSTEM_PATH,
        "exec \"$GPUCTL\" --session submit -- true",
    );
    assert_eq!(out.status.code(), Some(3), "{}", text(&out.stderr));
    assert!(
        text(&out.stderr).starts_with("gpuctl: error: org.gpuagent.Agent1.Error.AccessDenied: "),
        "{}",
        text(&out.stderr)
    );
}
