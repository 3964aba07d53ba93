//! What the plugin does at the end of a job's step, on the node: asks
//! gpu-agentd (through `gpuctl`) for the task it adopted for the job and
//! the task's GPU energy so far, and writes both into the job's
//! AdminComment (through `scontrol update`). Each command is bounded by the
//! scripts' `GPU_AGENT_TIMEOUT`; nothing here fails the job.

use std::fmt;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use wait_timeout::ChildExt;

/// The PATH the commands run with: slurmstepd's environment may have none
/// (as the scripts' common.sh).
const PATH: &str = "/usr/sbin:/usr/bin:/sbin:/bin";
/// The settings file when plugstack.conf names none (the scripts' default).
const ENV_FILE: &str = "/etc/gpu-agent/slurm.env";
/// How long reading the settings file may take.
const SETTINGS_TIMEOUT: Duration = Duration::from_secs(5);

/// Why the job's energy was not written.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// plugstack.conf gives the plugin an argument it does not take.
    #[error("plugstack.conf: unknown argument {0:?}; the plugin takes env=FILE")]
    Argument(String),
    /// A command could not run, failed or did not answer in time.
    #[error("{command}: {why}")]
    Command { command: String, why: String },
    /// The settings file's values or gpuctl's answer are not what they must be.
    #[error("{0}")]
    Answer(String),
}

/// The plugin's arguments on its plugstack.conf line.
#[derive(Debug, PartialEq)]
pub struct Args {
    /// `env=FILE`: the scripts' settings file (docs/slurm.md, Installing).
    pub env_file: PathBuf,
}

impl Args {
    /// Reads `env=FILE`; without it, `/etc/gpu-agent/slurm.env`.
    pub fn parse<'a>(args: impl IntoIterator<Item = &'a str>) -> Result<Args, Error> {
        let mut env_file = PathBuf::from(ENV_FILE);
        for arg in args {
            match arg.strip_prefix("env=") {
                Some(file) if !file.is_empty() => env_file = file.into(),
                _ => return Err(Error::Argument(arg.to_string())),
            }
        }
        Ok(Args { env_file })
    }
}

/// The scripts' settings, from the same file.
#[derive(Debug, PartialEq)]
pub struct Settings {
    /// `GPU_AGENT_GPUCTL`: the gpuctl to run.
    pub gpuctl: String,
    /// `DBUS_SYSTEM_BUS_ADDRESS`: the agent's bus, empty for the system bus.
    pub bus: String,
    /// `GPU_AGENT_TIMEOUT`: how long each command may take.
    pub timeout: Duration,
    /// The scontrol to run (`scontrol` on [`PATH`]).
    pub scontrol: String,
}

impl Settings {
    /// Reads `env_file` as the scripts do, with `sh` (it is a shell
    /// fragment), over their defaults; a file that is missing or
    /// unreadable leaves the defaults, as in the scripts.
    pub fn read(env_file: &Path) -> Result<Settings, Error> {
        let script = r#"GPU_AGENT_GPUCTL=gpuctl
GPU_AGENT_TIMEOUT=10
if [ -r "$1" ]; then . "$1" >/dev/null 2>&1; fi
printf '%s\n' "$GPU_AGENT_GPUCTL" "${DBUS_SYSTEM_BUS_ADDRESS:-}" "$GPU_AGENT_TIMEOUT""#;
        let mut sh = Command::new("/bin/sh");
        sh.args(["-c", script, "sh"])
            .arg(env_file)
            .env("PATH", PATH)
            .env_remove("DBUS_SYSTEM_BUS_ADDRESS");
        let out = run(&mut sh, "sh (reading the settings)", SETTINGS_TIMEOUT)?;
        Settings::parse(&out, env_file)
    }

    /// The three lines [`Settings::read`]'s shell prints.
    fn parse(out: &str, env_file: &Path) -> Result<Settings, Error> {
        let mut lines = out.lines();
        let (Some(gpuctl), Some(bus), Some(timeout)) = (lines.next(), lines.next(), lines.next())
        else {
            return Err(Error::Answer(format!(
                "{}: expected three settings, read {out:?}",
                env_file.display()
            )));
        };
        let timeout = timeout
            .trim()
            .parse::<u64>()
            .ok()
            .filter(|&s| s > 0)
            .ok_or_else(|| {
                Error::Answer(format!(
                    "{}: GPU_AGENT_TIMEOUT={timeout:?} is not a whole number of seconds above 0",
                    env_file.display()
                ))
            })?;
        Ok(Settings {
            gpuctl: gpuctl.to_string(),
            bus: bus.to_string(),
            timeout: Duration::from_secs(timeout),
            scontrol: "scontrol".into(),
        })
    }
}

impl Settings {
    /// `gpuctl ARGS` on the agent's bus.
    fn gpuctl(&self, args: &[&str]) -> Command {
        let mut gpuctl = Command::new(&self.gpuctl);
        gpuctl.args(args).env("PATH", PATH);
        if !self.bus.is_empty() {
            gpuctl.env("DBUS_SYSTEM_BUS_ADDRESS", &self.bus);
        }
        gpuctl
    }

    /// `scontrol ARGS`.
    fn scontrol(&self, args: &[&str]) -> Command {
        let mut scontrol = Command::new(&self.scontrol);
        scontrol.args(args).env("PATH", PATH);
        scontrol
    }
}

/// A job's adopted task, as gpuctl shows it.
#[derive(Debug, PartialEq)]
pub struct Adopted {
    /// The agent's task id (`t12`).
    pub task: String,
    /// Its GPU energy so far, J, when the agent could read its counters.
    pub energy_j: Option<f64>,
}

impl Adopted {
    /// The running task whose external id is `slurm:JOB` in `gpuctl tasks
    /// --state running --json`'s answer, if any.
    pub fn find(json: &str, job: u32) -> Result<Option<Adopted>, Error> {
        let tasks: serde_json::Value = serde_json::from_str(json)
            .map_err(|e| Error::Answer(format!("gpuctl tasks --json: not JSON ({e}): {json:?}")))?;
        let Some(tasks) = tasks.as_array() else {
            return Err(Error::Answer(format!(
                "gpuctl tasks --json: expected an array of tasks, got {json:?}"
            )));
        };
        let external = format!("slurm:{job}");
        let Some(task) = tasks
            .iter()
            .find(|t| t["spec"]["external_id"].as_str() == Some(&external))
        else {
            return Ok(None);
        };
        let Some(id) = task["id"].as_str() else {
            return Err(Error::Answer(format!(
                "gpuctl tasks --json: the task of {external} has no id: {task}"
            )));
        };
        Ok(Some(Adopted {
            task: id.to_string(),
            energy_j: task["energy_j"].as_f64(),
        }))
    }

    /// What the plugin writes into the job's AdminComment: the prolog's
    /// `gpu_agent_task=ID`, and the energy.
    pub fn admin_comment(&self, energy_j: f64) -> String {
        format!("gpu_agent_task={} gpu_energy_j={energy_j:.1}", self.task)
    }
}

/// What became of a job's energy.
#[derive(Debug, PartialEq)]
pub enum Outcome {
    /// Written into its AdminComment.
    Written(String),
    /// The job has no adopted task (no GPUs, or its prolog did not adopt them).
    NotAdopted,
    /// The agent has no energy reading for the task.
    NoEnergy(String),
    /// slurmctld had ended the job before its step ended (scancel, its
    /// time limit) and refuses updates of an ended job: the plugin released
    /// the task with that end, which the epilog cannot always tell.
    Released {
        /// The agent's task.
        task: String,
        /// `cancelled` or `timeout` (`gpuctl release --end`).
        end: &'static str,
        /// Its GPU energy, J, as the agent recorded it.
        energy_j: Option<f64>,
    },
}

impl fmt::Display for Outcome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Outcome::Written(comment) => write!(f, "AdminComment={comment}"),
            Outcome::NotAdopted => write!(f, "not adopted by gpu-agentd; nothing to write"),
            Outcome::NoEnergy(task) => write!(
                f,
                "gpu-agent task {task} has no energy reading; AdminComment left as it is"
            ),
            Outcome::Released {
                task,
                end,
                energy_j,
            } => write!(
                f,
                "slurmctld ended the job before its step ended, so its AdminComment cannot \
                 be written; gpu-agent task {task} released as {end}: gpu_energy_j={}",
                energy_j.map_or("unknown".into(), |j| format!("{j:.1}"))
            ),
        }
    }
}

/// Asks the agent for job `job`'s task and energy and writes them into the
/// job's AdminComment.
pub fn record(settings: &Settings, job: u32) -> Result<Outcome, Error> {
    let mut gpuctl = settings.gpuctl(&["tasks", "--state", "running", "--json"]);
    let json = run(
        &mut gpuctl,
        "gpuctl tasks --state running --json",
        settings.timeout,
    )?;
    let Some(adopted) = Adopted::find(&json, job)? else {
        return Ok(Outcome::NotAdopted);
    };
    let Some(energy_j) = adopted.energy_j else {
        return Ok(Outcome::NoEnergy(adopted.task));
    };
    let comment = adopted.admin_comment(energy_j);
    let mut scontrol = settings.scontrol(&["update", &format!("JobId={job}")]);
    scontrol.arg(format!("AdminComment={comment}"));
    match run(&mut scontrol, "scontrol update", settings.timeout) {
        Ok(_) => Ok(Outcome::Written(comment)),
        // slurmctld ended the job (it sets the end before it signals the
        // steps): how, its Reason says, as the epilog reads it.
        Err(Error::Command { why, .. }) if why.contains("already finished") => {
            let mut show = settings.scontrol(&["show", "job", &job.to_string()]);
            let shown = run(&mut show, "scontrol show job", settings.timeout)?;
            let end = if shown.split_whitespace().any(|w| w == "Reason=TimeLimit") {
                "timeout"
            } else {
                "cancelled"
            };
            let mut release = settings.gpuctl(&["release", &adopted.task, "--end", end, "--json"]);
            let json = run(&mut release, "gpuctl release", settings.timeout)?;
            let released: serde_json::Value = serde_json::from_str(&json).map_err(|e| {
                Error::Answer(format!("gpuctl release --json: not JSON ({e}): {json:?}"))
            })?;
            Ok(Outcome::Released {
                task: adopted.task,
                end,
                energy_j: released["energy_j"].as_f64(),
            })
        }
        Err(e) => Err(e),
    }
}

/// Runs `command` (shown as `shown`) for at most `timeout`: its standard
/// output when it succeeds; its standard error or exit status when it
/// fails; killed when it takes longer.
fn run(command: &mut Command, shown: &str, timeout: Duration) -> Result<String, Error> {
    let failed = |why: String| Error::Command {
        command: shown.to_string(),
        why,
    };
    let mut child = command
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| failed(e.to_string()))?;
    // Both pipes read off this thread's wait, so that a long answer cannot
    // block the command on a full pipe.
    let mut stdout = child.stdout.take().expect("piped");
    let mut stderr = child.stderr.take().expect("piped");
    let out = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = stdout.read_to_string(&mut s);
        s
    });
    let err = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = stderr.read_to_string(&mut s);
        s
    });
    let status = match child.wait_timeout(timeout) {
        Ok(Some(status)) => status,
        Ok(None) => {
            let _ = child.kill();
            let _ = child.wait();
            return Err(failed(format!(
                "no answer within {} s",
                timeout.as_secs_f64()
            )));
        }
        Err(e) => return Err(failed(e.to_string())),
    };
    let out = out.join().unwrap_or_default();
    let err = err.join().unwrap_or_default();
    if status.success() {
        Ok(out)
    } else {
        Err(failed(match err.trim() {
            "" => format!("failed ({status})"),
            err => format!("failed ({status}): {err}"),
        }))
    }
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::PermissionsExt;

    use super::*;

    /// A running adopted task and one of the agent's own, as `gpuctl tasks
    /// --state running --json` prints them (fields the plugin does not read
    /// left out).
    const TASKS: &str = r#"[
        {"id": "t3", "state": "running", "energy_j": null, "spec": {"external_id": ""}},
        {"id": "t7", "state": "running", "energy_j": 5123.456, "spec": {"external_id": "slurm:42"}}
    ]"#;

    /// An executable shell script `name` in `dir`.
    fn script(dir: &Path, name: &str, body: &str) -> String {
        let path = dir.join(name);
        std::fs::write(&path, format!("#!/bin/sh\n{body}\n")).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
        path.display().to_string()
    }

    /// Settings running `gpuctl` and `scontrol` from `dir`, which record
    /// their arguments and environment in `dir/calls`.
    fn fake(dir: &Path, gpuctl: &str, scontrol: &str) -> Settings {
        let calls = dir.join("calls").display().to_string();
        Settings {
            gpuctl: script(
                dir,
                "gpuctl",
                &format!("echo \"gpuctl $* bus=$DBUS_SYSTEM_BUS_ADDRESS\" >> {calls}\n{gpuctl}"),
            ),
            bus: "unix:path=/run/agent.sock".into(),
            timeout: Duration::from_secs(10),
            scontrol: script(
                dir,
                "scontrol",
                &format!("echo \"scontrol $*\" >> {calls}\n{scontrol}"),
            ),
        }
    }

    #[test]
    fn arguments_name_the_settings_file_and_nothing_else() {
        assert_eq!(
            Args::parse([]).unwrap().env_file,
            Path::new("/etc/gpu-agent/slurm.env")
        );
        assert_eq!(
            Args::parse(["env=/srv/slurm.env"]).unwrap().env_file,
            Path::new("/srv/slurm.env")
        );
        for bad in ["env=", "timeout=3", "/srv/slurm.env"] {
            let e = Args::parse([bad]).unwrap_err();
            assert_eq!(
                e.to_string(),
                format!("plugstack.conf: unknown argument {bad:?}; the plugin takes env=FILE")
            );
        }
    }

    #[test]
    fn settings_are_the_scripts_read_by_sh() {
        let dir = tempfile::tempdir().unwrap();
        let none = Settings::read(&dir.path().join("missing.env")).unwrap();
        assert_eq!(
            none,
            Settings {
                gpuctl: "gpuctl".into(),
                bus: String::new(),
                timeout: Duration::from_secs(10),
                scontrol: "scontrol".into(),
            }
        );
        let file = dir.path().join("slurm.env");
        std::fs::write(
            &file,
            "# a shell fragment\nDBUS_SYSTEM_BUS_ADDRESS='unix:path=/run/a b'\nGPU_AGENT_GPUCTL=/opt/gpuctl\nGPU_AGENT_TIMEOUT=$((2 + 1))\necho noise\n",
        )
        .unwrap();
        let read = Settings::read(&file).unwrap();
        assert_eq!(read.gpuctl, "/opt/gpuctl");
        assert_eq!(read.bus, "unix:path=/run/a b");
        assert_eq!(read.timeout, Duration::from_secs(3));

        std::fs::write(&file, "GPU_AGENT_TIMEOUT=ten\n").unwrap();
        let e = Settings::read(&file).unwrap_err();
        assert_eq!(
            e.to_string(),
            format!(
                "{}: GPU_AGENT_TIMEOUT=\"ten\" is not a whole number of seconds above 0",
                file.display()
            )
        );
    }

    #[test]
    fn the_jobs_task_is_found_by_its_external_id() {
        assert_eq!(
            Adopted::find(TASKS, 42).unwrap(),
            Some(Adopted {
                task: "t7".into(),
                energy_j: Some(5123.456)
            })
        );
        assert_eq!(Adopted::find(TASKS, 4).unwrap(), None);
        assert_eq!(Adopted::find("[]", 42).unwrap(), None);
        let e = Adopted::find("{}", 42).unwrap_err();
        assert_eq!(
            e.to_string(),
            "gpuctl tasks --json: expected an array of tasks, got \"{}\""
        );
        assert!(Adopted::find("Error: no bus", 42)
            .unwrap_err()
            .to_string()
            .starts_with("gpuctl tasks --json: not JSON"));
    }

    #[test]
    fn the_energy_goes_into_the_admin_comment_beside_the_task() {
        let dir = tempfile::tempdir().unwrap();
        let settings = fake(dir.path(), &format!("echo '{TASKS}'"), "");
        assert_eq!(
            record(&settings, 42).unwrap(),
            Outcome::Written("gpu_agent_task=t7 gpu_energy_j=5123.5".into())
        );
        let calls = std::fs::read_to_string(dir.path().join("calls")).unwrap();
        assert_eq!(
            calls,
            "gpuctl tasks --state running --json bus=unix:path=/run/agent.sock\n\
             scontrol update JobId=42 AdminComment=gpu_agent_task=t7 gpu_energy_j=5123.5\n"
        );
        // Another job: not adopted, nothing written.
        assert_eq!(record(&settings, 43).unwrap(), Outcome::NotAdopted);
        let calls = std::fs::read_to_string(dir.path().join("calls")).unwrap();
        assert_eq!(
            calls.lines().filter(|l| l.starts_with("scontrol")).count(),
            1
        );
    }

    #[test]
    fn a_job_slurm_ended_first_is_released_with_its_end() {
        let dir = tempfile::tempdir().unwrap();
        // gpuctl: the tasks, or the released task; scontrol: an update of an
        // ended job refused, and the job with `reason`.
        let gpuctl = format!(
            "case $1 in tasks) echo '{TASKS}' ;; release) echo '{{\"id\":\"t7\",\"state\":\"cancelled\",\"energy_j\":6000.25}}' ;; esac"
        );
        let scontrol = |reason: &str| {
            format!(
                "case $1 in update) echo 'slurm_update error: Job has already finished' >&2; exit 1 ;; \
                 show) echo 'JobId=42 JobName=job.sh'; echo '   JobState=COMPLETING Reason={reason} Dependency=(null)' ;; esac"
            )
        };
        let cancelled = fake(dir.path(), &gpuctl, &scontrol("None"));
        let outcome = record(&cancelled, 42).unwrap();
        assert_eq!(
            outcome,
            Outcome::Released {
                task: "t7".into(),
                end: "cancelled",
                energy_j: Some(6000.25)
            }
        );
        assert_eq!(
            outcome.to_string(),
            "slurmctld ended the job before its step ended, so its AdminComment cannot be \
             written; gpu-agent task t7 released as cancelled: gpu_energy_j=6000.2"
        );
        let calls = std::fs::read_to_string(dir.path().join("calls")).unwrap();
        assert_eq!(
            calls.lines().skip(2).collect::<Vec<_>>(),
            [
                "scontrol show job 42",
                "gpuctl release t7 --end cancelled --json bus=unix:path=/run/agent.sock"
            ]
        );
        let timed_out = fake(dir.path(), &gpuctl, &scontrol("TimeLimit"));
        assert!(matches!(
            record(&timed_out, 42).unwrap(),
            Outcome::Released { end: "timeout", .. }
        ));
    }

    #[test]
    fn an_update_refused_otherwise_or_an_agent_away_is_said_and_nothing_else() {
        let dir = tempfile::tempdir().unwrap();
        let refused = fake(
            dir.path(),
            &format!("echo '{TASKS}'"),
            "echo 'slurm_update error: Access/permission denied' >&2; exit 1",
        );
        assert_eq!(
            record(&refused, 42).unwrap_err().to_string(),
            "scontrol update: failed (exit status: 1): slurm_update error: Access/permission denied"
        );
        let away = fake(
            dir.path(),
            "echo 'cannot reach gpu-agentd' >&2; exit 69",
            "",
        );
        assert_eq!(
            record(&away, 42).unwrap_err().to_string(),
            "gpuctl tasks --state running --json: failed (exit status: 69): cannot reach gpu-agentd"
        );
        let missing = Settings {
            gpuctl: dir.path().join("nowhere").display().to_string(),
            ..fake(dir.path(), "", "")
        };
        assert!(record(&missing, 42)
            .unwrap_err()
            .to_string()
            .starts_with("gpuctl tasks --state running --json: No such file"));
    }

    #[test]
    fn a_command_that_hangs_is_cut_off_at_the_timeout() {
        let dir = tempfile::tempdir().unwrap();
        let hangs = Settings {
            timeout: Duration::from_secs(1),
            ..fake(dir.path(), "exec sleep 600", "")
        };
        assert_eq!(
            record(&hangs, 42).unwrap_err().to_string(),
            "gpuctl tasks --state running --json: no answer within 1 s"
        );
    }
}
