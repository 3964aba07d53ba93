//! Under Slurm (issue 19): a real `munged`, `slurmctld` and `slurmd` on
//! loopback run `sbatch` jobs through the shipped prolog and epilog
//! (packaging/slurm) against a `gpu-agentd` on mock GPUs running `edl`.
//! While a job runs its GPU shows the clocks the agent chose; after it,
//! default clocks again and its energy in the agent's task (named in the
//! job's AdminComment); two jobs run at once on two GPUs; a job whose prolog
//! cannot reach the agent still runs to completion, the reason in the log;
//! a time-limit kill and a failure are recorded as such; an
//! adoption whose epilog never reached the agent (gpu-agentd killed, or the
//! bus wrong for the epilog alone) ends when Slurm says its job ended. With
//! the SPANK plugin (packaging/slurm/spank) in plugstack.conf, a job's
//! energy is in its AdminComment after it, scancel and a time-limit kill
//! are recorded as such by the plugin, and with the agent stopped jobs
//! still complete. A job on a MIG instance is adopted on the instance
//! (Slurm's view of the GPUs from its fake_gpus.conf, as AutoDetect=nvml
//! gives it); a job that asked `--gpu-freq` is adopted without the agent's
//! clocks.
//!
//! Needs root (slurmd runs prologs as root) and the Slurm and munge
//! programs (`.ci/run` installs them); without them the test says
//! "skipped: ..." and passes.
//!
//! Slurm 22.05 drops a `gpu` GRES without device files ("Removing file-less
//! GPU"), so gres.conf names stand-in files: symbolic links to /dev/null,
//! one per GPU (docs/slurm.md).

use std::fs;
use std::io::Read;
use std::net::TcpListener;
use std::os::unix::fs::{symlink, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use gpu_agent_dbus::{TaskInfo, TaskStatus};
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;

use crate::daemon::{gpuctl, spec, wait_for, Daemon, Settings};
use crate::daemon_adopt::{adopt_daemon_in, adopt_daemon_with, core_clock, shows};
use crate::harness::{artefacts, success};

const LIMIT: Duration = Duration::from_secs(30);
/// The programs the test runs besides the project's own.
const TOOLS: [&str; 8] = [
    "munged",
    "slurmctld",
    "slurmd",
    "sbatch",
    "scontrol",
    "scancel",
    "squeue",
    "dbus-daemon",
];

/// Why the test cannot run here, if it cannot.
fn skip_reason() -> Option<String> {
    if !nix::unistd::Uid::effective().is_root() {
        return Some("not root (slurmd runs its prolog and epilog as root)".into());
    }
    let missing: Vec<&str> = TOOLS
        .into_iter()
        .filter(|tool| which(tool).is_none())
        .collect();
    (!missing.is_empty()).then(|| {
        format!(
            "not installed: {} (apt-get install slurmctld slurmd slurm-client munge)",
            missing.join(", ")
        )
    })
}

/// `program` on PATH or in the sbin directories.
fn which(program: &str) -> Option<PathBuf> {
    let path = std::env::var("PATH").unwrap_or_default();
    let found = path
        .split(':')
        .chain(["/usr/sbin", "/sbin"])
        .map(|dir| Path::new(dir).join(program))
        .find(|p| p.is_file());
    found
}

/// A port nothing listens on now.
fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port()
}

/// A one-node Slurm cluster in a directory of its own: munged, slurmctld
/// and slurmd in the foreground, killed (jobs first) when dropped.
struct Slurm {
    dir: tempfile::TempDir,
    daemons: Vec<(&'static str, Child)>,
}

/// A node's GPUs as slurmd finds them; `{dir}` stands for the cluster's
/// directory.
struct Gpus {
    /// slurm.conf's `Gres=` of the node.
    gres: String,
    /// gres.conf.
    gres_conf: String,
    /// Slurm's `fake_gpus.conf` (its stand-in for what `AutoDetect=nvml`
    /// finds on a host, read by gres/gpu whenever the file exists): one
    /// `TYPE|CPUS|CPU_RANGE|LINKS|FILES|UNIQUE_ID|FLAGS` line per device
    /// (`{cpus}`: the node's `CPUS|CPU_RANGE`).
    detected: Option<String>,
    /// The stand-in device files (links to /dev/null) under `{dir}/dev`.
    files: Vec<String>,
}

impl Gpus {
    /// `count` whole GPUs from gres.conf's `File=` lines.
    fn whole(count: usize) -> Gpus {
        Gpus {
            gres: format!("gpu:{count}"),
            gres_conf: format!(
                "NodeName=localhost Name=gpu File={{dir}}/dev/gpu[0-{}]\n",
                count - 1
            ),
            detected: None,
            files: (0..count).map(|gpu| format!("gpu{gpu}")).collect(),
        }
    }
}

impl Slurm {
    /// Starts a cluster whose node has `gpus` GPUs, with the shipped prolog
    /// and epilog reading their settings from `env_file`; waits until the
    /// node is idle.
    fn start(gpus: usize, env_file: &Path) -> Slurm {
        Slurm::start_with(&Gpus::whole(gpus), env_file, "")
    }

    /// [`Slurm::start`] on the node's `gpus`, with `plugstack` as its
    /// plugstack.conf (SPANK plugins).
    fn start_with(gpus: &Gpus, env_file: &Path, plugstack: &str) -> Slurm {
        let mut slurm = Slurm {
            dir: tempfile::tempdir().expect("temp dir"),
            daemons: Vec::new(),
        };
        let dir = slurm.dir.path().to_path_buf();
        let path = |name: &str| dir.join(name).display().to_string();
        for sub in ["state", "spool", "dev/nvidia-caps"] {
            fs::create_dir_all(dir.join(sub)).expect("make a directory");
        }

        let key = dir.join("munge.key");
        let mut random = Vec::new();
        fs::File::open("/dev/urandom")
            .and_then(|f| f.take(1024).read_to_end(&mut random))
            .expect("read /dev/urandom");
        fs::write(&key, random).expect("write the munge key");
        fs::set_permissions(&key, fs::Permissions::from_mode(0o400)).expect("chmod the key");
        let munge_socket = path("munge.socket");
        slurm.spawn(
            "munged",
            Command::new(which("munged").unwrap()).args([
                "--foreground",
                "--force",
                &format!("--socket={munge_socket}"),
                &format!("--key-file={}", key.display()),
                &format!("--pid-file={}", path("munged.pid")),
                &format!("--log-file={}", path("munged.log")),
                &format!("--seed-file={}", path("munged.seed")),
            ]),
        );
        wait_for("munged's socket", LIMIT, || {
            Path::new(&munge_socket).exists().then_some(())
        });

        // The node as slurmd sees this machine (CPUs, sockets, memory).
        let out = Command::new(which("slurmd").unwrap())
            .arg("-C")
            .output()
            .expect("slurmd -C");
        let hardware = String::from_utf8_lossy(&out.stdout)
            .lines()
            .next()
            .unwrap_or_default()
            .split_whitespace()
            .filter(|word| !word.starts_with("NodeName="))
            .collect::<Vec<_>>()
            .join(" ");
        // `{cpus}`: the node's CPUs as fake_gpus.conf gives a GPU's
        // affinity (count|range).
        let cpus: usize = field(&hardware, "CPUs")
            .and_then(|n| n.parse().ok())
            .expect("slurmd -C says CPUs=");
        let here = |text: &str| {
            text.replace("{dir}", &dir.display().to_string())
                .replace("{cpus}", &format!("{cpus}|0-{}", cpus - 1))
        };
        for file in &gpus.files {
            symlink("/dev/null", dir.join("dev").join(file)).expect("a GPU stand-in");
        }
        fs::write(dir.join("gres.conf"), here(&gpus.gres_conf)).expect("write gres.conf");
        if let Some(detected) = &gpus.detected {
            fs::write(dir.join("fake_gpus.conf"), here(detected)).expect("write fake_gpus.conf");
        }
        // The shipped scripts, told where their settings are.
        let scripts = Path::new(env!("CARGO_MANIFEST_DIR"))
            .parent()
            .expect("workspace root")
            .join("packaging/slurm");
        for script in ["prolog", "epilog"] {
            let wrapper = dir.join(script);
            fs::write(
                &wrapper,
                format!(
                    "#!/bin/sh\nGPU_AGENT_SLURM_ENV={} exec {}\n",
                    env_file.display(),
                    scripts.join(script).display()
                ),
            )
            .expect("write a wrapper");
            fs::set_permissions(&wrapper, fs::Permissions::from_mode(0o755)).expect("chmod");
        }
        let conf = format!(
            "ClusterName=gpuagent{port}
SlurmctldHost=localhost
SlurmctldPort={port}
SlurmdPort={slurmd_port}
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket={munge_socket}
CredType=cred/munge
StateSaveLocation={state}
SlurmdSpoolDir={spool}
SlurmctldPidFile={ctld_pid}
SlurmdPidFile={slurmd_pid}
SlurmctldLogFile={ctld_log}
SlurmdLogFile={slurmd_log}
SlurmdDebug=debug2
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
GresTypes=gpu
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
MpiDefault=none
ReturnToService=2
Prolog={prolog}
Epilog={epilog}
PlugStackConfig={plugstack}
NodeName=localhost {hardware} Gres={gres} State=UNKNOWN
PartitionName=debug Nodes=localhost Default=YES MaxTime=INFINITE State=UP
",
            port = free_port(),
            slurmd_port = free_port(),
            state = path("state"),
            spool = path("spool"),
            ctld_pid = path("slurmctld.pid"),
            slurmd_pid = path("slurmd.pid"),
            ctld_log = path("slurmctld.log"),
            slurmd_log = path("slurmd.log"),
            prolog = path("prolog"),
            epilog = path("epilog"),
            plugstack = path("plugstack.conf"),
            gres = gpus.gres,
        );
        fs::write(dir.join("plugstack.conf"), plugstack).expect("write plugstack.conf");
        // The test's plugins (proctrack/linuxproc, task/none) use no cgroup,
        // but slurmd 22.05 loads the cgroup plugin at start all the same,
        // and its default (autodetect) fails where no cgroup filesystem is
        // mounted, as in some containers: name the v1 plugin, which mounts
        // and reads nothing until a controller is used.
        fs::write(dir.join("cgroup.conf"), "CgroupPlugin=cgroup/v1\n").expect("write cgroup.conf");
        fs::write(dir.join("slurm.conf"), conf).expect("write slurm.conf");
        let conf = path("slurm.conf");
        slurm.spawn(
            "slurmctld",
            Command::new(which("slurmctld").unwrap()).args(["-D", "-i", "-f", &conf]),
        );
        slurm.spawn(
            "slurmd",
            Command::new(which("slurmd").unwrap()).args(["-D", "-f", &conf, "-N", "localhost"]),
        );
        let deadline = Instant::now() + LIMIT;
        while slurm.node_state() != "IDLE" {
            assert!(
                Instant::now() < deadline,
                "the node is not idle after {LIMIT:?}\n{}",
                slurm.diagnosis()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
        slurm
    }

    /// What the cluster says about itself: the node as scontrol shows it,
    /// each daemon's exit status if it exited, and the end of each log.
    fn diagnosis(&mut self) -> String {
        let node = self.run("scontrol", &["show", "node", "localhost"]);
        let mut text = format!(
            "scontrol show node: {}{}",
            String::from_utf8_lossy(&node.stdout),
            String::from_utf8_lossy(&node.stderr)
        );
        for (name, child) in &mut self.daemons {
            if let Ok(Some(status)) = child.try_wait() {
                text += &format!("{name} exited: {status}\n");
            }
        }
        for log in [
            "munged.out",
            "munged.log",
            "slurmctld.out",
            "slurmctld.log",
            "slurmd.out",
            "slurmd.log",
        ] {
            let all = fs::read_to_string(self.dir.path().join(log)).unwrap_or_default();
            let lines: Vec<&str> = all.lines().collect();
            let tail = lines[lines.len().saturating_sub(40)..].join("\n");
            text += &format!("--- {log} (last 40 lines)\n{tail}\n");
        }
        text
    }

    /// Starts a daemon of the cluster, its output in `<name>.out`.
    fn spawn(&mut self, name: &'static str, command: &mut Command) {
        let out = fs::File::create(self.dir.path().join(format!("{name}.out"))).expect("log file");
        let child = command
            .env("SLURM_CONF", self.dir.path().join("slurm.conf"))
            .stdin(Stdio::null())
            .stdout(out.try_clone().expect("dup"))
            .stderr(out)
            .spawn()
            .unwrap_or_else(|e| panic!("{name} starts: {e}"));
        self.daemons.push((name, child));
    }

    /// Runs a Slurm client against this cluster.
    fn run(&self, program: &str, args: &[&str]) -> Output {
        Command::new(which(program).unwrap_or_else(|| program.into()))
            .args(args)
            .env("SLURM_CONF", self.dir.path().join("slurm.conf"))
            .output()
            .unwrap_or_else(|e| panic!("run {program}: {e}"))
    }

    /// Submits a job that holds its GPUs until [`Slurm::finish`] or
    /// [`Slurm::fail`] (180 s at most); returns its id.
    fn sbatch(&self, args: &[&str]) -> u32 {
        let script = self.dir.path().join("job.sh");
        fs::write(
            &script,
            format!(
                "#!/bin/sh\ntouch {dir}/started-$SLURM_JOB_ID\ni=0\nwhile [ ! -e {dir}/go-$SLURM_JOB_ID ] && [ $i -lt 1800 ]; do sleep 0.1; i=$((i + 1)); done\necho \"job $SLURM_JOB_ID ran on GPUs $SLURM_JOB_GPUS ($CUDA_VISIBLE_DEVICES)\"\nexit $(cat {dir}/go-$SLURM_JOB_ID)\n",
                dir = self.dir.path().display()
            ),
        )
        .expect("write the job script");
        let output = format!("--output={}/job-%j.out", self.dir.path().display());
        let chdir = format!("--chdir={}", self.dir.path().display());
        let mut all = vec!["--parsable", output.as_str(), chdir.as_str()];
        all.extend_from_slice(args);
        all.push(script.to_str().expect("utf-8 path"));
        let out = self.run("sbatch", &all);
        assert!(
            out.status.success(),
            "sbatch {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout)
            .trim()
            .parse()
            .expect("sbatch --parsable prints the job id")
    }

    /// Waits until job `id`'s script runs.
    fn wait_started(&self, id: u32) {
        let started = self.dir.path().join(format!("started-{id}"));
        wait_for(&format!("job {id}'s script to run"), LIMIT, || {
            started.exists().then_some(())
        });
    }

    /// Lets job `id` end (exit status 0).
    fn finish(&self, id: u32) {
        self.fail(id, 0);
    }

    /// Lets job `id` end with exit status `code`.
    fn fail(&self, id: u32, code: u8) {
        fs::write(self.dir.path().join(format!("go-{id}")), code.to_string())
            .expect("write the go file");
    }

    /// `scontrol show job ID`.
    fn show_job(&self, id: u32) -> String {
        let out = self.run("scontrol", &["show", "job", &id.to_string()]);
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// Waits until job `id` is in `state` (and its epilog is done: not
    /// COMPLETING); returns `scontrol show job`.
    fn wait_job(&self, id: u32, state: &str) -> String {
        self.wait_job_for(id, state, LIMIT)
    }

    /// [`Slurm::wait_job`], at most `limit`.
    fn wait_job_for(&self, id: u32, state: &str, limit: Duration) -> String {
        wait_for(&format!("job {id} to be {state}"), limit, || {
            let job = self.show_job(id);
            (field(&job, "JobState").as_deref() == Some(state)
                && !self.node_state().contains("COMPLETING"))
            .then_some(job)
        })
    }

    fn node_state(&self) -> String {
        let node = self.run("scontrol", &["show", "node", "localhost"]);
        field(&String::from_utf8_lossy(&node.stdout), "State").unwrap_or_default()
    }

    /// What slurmd logged (the prolog's and epilog's stderr included).
    fn slurmd_log(&self) -> String {
        fs::read_to_string(self.dir.path().join("slurmd.log")).unwrap_or_default()
    }

    /// Job `id`'s output file.
    fn job_output(&self, id: u32) -> String {
        fs::read_to_string(self.dir.path().join(format!("job-{id}.out"))).unwrap_or_default()
    }
}

impl Drop for Slurm {
    fn drop(&mut self) {
        // Jobs first (their steps are slurmd's children), then the daemons.
        let _ = self.run("scancel", &["--user=root"]);
        for (_, child) in self.daemons.iter_mut().rev() {
            let _ = kill(Pid::from_raw(child.id() as i32), Signal::SIGTERM);
            let deadline = Instant::now() + Duration::from_secs(5);
            while Instant::now() < deadline && matches!(child.try_wait(), Ok(None)) {
                std::thread::sleep(Duration::from_millis(20));
            }
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// `KEY=VALUE`'s value in `scontrol show` output.
fn field(text: &str, key: &str) -> Option<String> {
    let needle = format!("{key}=");
    text.split_whitespace()
        .find_map(|word| word.strip_prefix(&needle))
        .map(str::to_string)
}

/// The agent's task adopted for Slurm job `job`, once it runs.
fn adopted(d: &Daemon, job: u32) -> TaskInfo {
    let external = format!("slurm:{job}");
    wait_for(&format!("job {job} adopted"), LIMIT, || {
        d.tasks()
            .into_iter()
            .find(|t| t.spec.external_id == external && t.state == TaskStatus::Running)
    })
}

/// The milliseconds the `script` of `job` logged it took.
fn took_ms(log: &str, script: &str, job: u32) -> Option<u64> {
    let prefix = format!("gpu-agent: slurm {script} job {job}: ");
    let line = log
        .lines()
        .find(|l| l.contains(&prefix) && l.contains(" ms)"))?;
    let before = line.rsplit_once(" ms)")?.0;
    before
        .rsplit(|c: char| !c.is_ascii_digit())
        .next()?
        .parse()
        .ok()
}

/// Writes, in `dir`, the scripts' settings file for an agent on `bus`;
/// returns its path.
fn env_in(dir: &Path, bus: &str) -> PathBuf {
    let file = dir.join("slurm.env");
    write_env(&file, bus);
    file
}

/// Writes the scripts' settings `file` for an agent on `bus`.
fn write_env(file: &Path, bus: &str) {
    fs::write(
        file,
        format!(
            "DBUS_SYSTEM_BUS_ADDRESS='{bus}'\nGPU_AGENT_GPUCTL='{}'\n",
            artefacts().join("gpuctl").display()
        ),
    )
    .expect("write slurm.env");
}

#[test]
fn slurm_jobs_run_at_the_agents_clocks_and_never_fail_for_it() {
    if let Some(why) = skip_reason() {
        eprintln!("skipped: {why}");
        return;
    }
    // Real time: the jobs run in it, and the energy is a real job's.
    let d = adopt_daemon_with("", 1.0);
    let idle = [core_clock(&d, 0), core_clock(&d, 1)];
    let settings = tempfile::tempdir().expect("temp dir");
    let env_file = env_in(settings.path(), d.address());
    let slurm = Slurm::start(2, &env_file);

    // One job: its GPU at the chosen clocks while it runs.
    let job = slurm.sbatch(&[
        "--gres=gpu:1",
        "--time=10",
        "--comment=gpu-agent:app=BlackScholes",
    ]);
    let task = adopted(&d, job);
    assert_eq!(task.spec.app, "BlackScholes");
    assert_eq!(task.owner_uid, 0);
    let [gpu] = task.devices[..] else {
        panic!("one GPU: {task:?}")
    };
    let clocks = task.clocks.clone().expect("the chosen clocks");
    assert_eq!(clocks.class.as_deref(), Some("energy"));
    wait_for("the job's GPU at the chosen clocks", LIMIT, || {
        shows(&d, gpu as usize, clocks.core_mhz).then_some(())
    });
    let during = core_clock(&d, gpu as usize);
    assert_ne!(during, idle[gpu as usize]);
    let running = slurm.show_job(job);
    assert_eq!(field(&running, "JobState").as_deref(), Some("RUNNING"));
    assert_eq!(
        field(&running, "AdminComment"),
        Some(format!("gpu_agent_task={}", task.id)),
        "{running}"
    );
    // After it: default clocks, the energy in the agent's task and the log.
    slurm.finish(job);
    let done = slurm.wait_job(job, "COMPLETED");
    assert_eq!(field(&done, "ExitCode").as_deref(), Some("0:0"));
    let released = d.wait_state(&task.id, TaskStatus::Succeeded, LIMIT);
    let energy = released.energy_j.expect("the job's energy");
    assert!(energy > 0.0, "{released:?}");
    wait_for("the job's GPU at default clocks", LIMIT, || {
        (core_clock(&d, gpu as usize) == idle[gpu as usize]).then_some(())
    });
    let log = slurm.slurmd_log();
    assert!(
        log.contains(&format!(
            "gpu-agent task {} released: gpu_energy_j={energy}",
            task.id
        )),
        "{log}"
    );
    let prolog_ms = took_ms(&log, "prolog", job).expect("the prolog's time");
    let epilog_ms = took_ms(&log, "epilog", job).expect("the epilog's time");
    eprintln!(
        "job {job}: GPU {gpu} at {during} MHz while it ran ({} MHz idle), \
         {energy:.1} J; prolog {prolog_ms} ms, epilog {epilog_ms} ms\n{done}",
        idle[gpu as usize]
    );

    // Two jobs at once, one GPU each.
    let jobs = [
        slurm.sbatch(&[
            "--gres=gpu:1",
            "--time=5",
            "--comment=gpu-agent:app=BlackScholes",
        ]),
        slurm.sbatch(&[
            "--gres=gpu:1",
            "--time=5",
            "--comment=gpu-agent:app=BlackScholes",
        ]),
    ];
    let tasks = jobs.map(|job| adopted(&d, job));
    let mut gpus: Vec<u32> = tasks.iter().flat_map(|t| t.devices.clone()).collect();
    gpus.sort_unstable();
    assert_eq!(gpus, [0, 1], "{tasks:?}");
    for t in &tasks {
        let mhz = t.clocks.as_ref().expect("clocks").core_mhz;
        let gpu = t.devices[0] as usize;
        wait_for("both GPUs at their jobs' clocks", LIMIT, || {
            shows(&d, gpu, mhz).then_some(())
        });
    }
    for (job, task) in jobs.iter().zip(&tasks) {
        slurm.finish(*job);
        slurm.wait_job(*job, "COMPLETED");
        d.wait_state(&task.id, TaskStatus::Succeeded, LIMIT);
    }
    wait_for("both GPUs at default clocks", LIMIT, || {
        (core_clock(&d, 0) == idle[0] && core_clock(&d, 1) == idle[1]).then_some(())
    });

    // An app the agent has no profile of: adopted anyway, default clocks.
    let job = slurm.sbatch(&["--gres=gpu:1", "--time=5", "--comment=gpu-agent:app=nope"]);
    let task = adopted(&d, job);
    assert_eq!(task.spec.app, "default");
    assert_eq!(task.clocks, None);
    slurm.finish(job);
    slurm.wait_job(job, "COMPLETED");
    d.wait_state(&task.id, TaskStatus::Succeeded, LIMIT);

    // The prolog cannot reach the agent: the job runs all the same.
    let nowhere = format!("unix:path={}", settings.path().join("no-bus").display());
    write_env(&env_file, &nowhere);
    let job = slurm.sbatch(&[
        "--gres=gpu:1",
        "--time=5",
        "--comment=gpu-agent:app=BlackScholes",
    ]);
    slurm.finish(job);
    let done = slurm.wait_job(job, "COMPLETED");
    assert_eq!(field(&done, "ExitCode").as_deref(), Some("0:0"), "{done}");
    assert!(
        slurm
            .job_output(job)
            .contains(&format!("job {job} ran on GPUs")),
        "{}",
        slurm.job_output(job)
    );
    let log = slurm.slurmd_log();
    assert!(
        log.contains(&format!(
            "gpu-agent: slurm prolog job {job}: cannot reach gpu-agentd"
        )),
        "{log}"
    );
    assert!(
        !slurm.node_state().contains("DRAIN"),
        "{}",
        slurm.node_state()
    );
    let external = format!("slurm:{job}");
    assert!(d.tasks().iter().all(|t| t.spec.external_id != external));
    let took = took_ms(&log, "prolog", job).expect("the prolog's time");
    eprintln!("job {job} (agent unreachable): prolog {took} ms");

    // What every adopted job's prolog and epilog took, for the record.
    for job in 1..job {
        eprintln!(
            "job {job}: prolog {:?} ms, epilog {:?} ms",
            took_ms(&log, "prolog", job),
            took_ms(&log, "epilog", job)
        );
    }
}

/// How long a `--time=1` job may take to be killed: its minute, and
/// slurmctld checks time limits every 30 s.
const TIME_LIMIT_KILL: Duration = Duration::from_secs(150);

#[test]
fn slurm_jobs_end_is_recorded_as_slurm_ended_them() {
    if let Some(why) = skip_reason() {
        eprintln!("skipped: {why}");
        return;
    }
    let d = adopt_daemon_with("", 1.0);
    let settings = tempfile::tempdir().expect("temp dir");
    let env_file = env_in(settings.path(), d.address());
    let slurm = Slurm::start(2, &env_file);
    let app = "--comment=gpu-agent:app=BlackScholes";

    // A time-limit kill on one GPU while the others end on the other.
    let timed_out = slurm.sbatch(&["--gres=gpu:1", "--time=1", app]);
    let timed_out_task = adopted(&d, timed_out);

    // (scancel is not here: whether the epilog sees it depends on when
    // slurmctld learns the job's signal; docs/slurm.md, Limits.)
    let failed = slurm.sbatch(&["--gres=gpu:1", "--time=5", app]);
    let task = adopted(&d, failed);
    slurm.fail(failed, 3);
    let done = slurm.wait_job(failed, "FAILED");
    assert_eq!(field(&done, "ExitCode").as_deref(), Some("3:0"), "{done}");
    d.wait_state(&task.id, TaskStatus::Failed, LIMIT);

    let completed = slurm.sbatch(&["--gres=gpu:1", "--time=5", app]);
    let task = adopted(&d, completed);
    slurm.finish(completed);
    slurm.wait_job(completed, "COMPLETED");
    d.wait_state(&task.id, TaskStatus::Succeeded, LIMIT);

    slurm.wait_job_for(timed_out, "TIMEOUT", TIME_LIMIT_KILL);
    let ended = d.wait_state(&timed_out_task.id, TaskStatus::Failed, LIMIT);
    assert_eq!(ended.reason.as_deref(), Some("timeout"), "{ended:?}");

    let log = slurm.slurmd_log();
    for (job, end) in [
        (failed, "failed"),
        (completed, "completed"),
        (timed_out, "timeout"),
    ] {
        let line = log
            .lines()
            .find(|l| l.contains(&format!("slurm epilog job {job}: gpu-agent task")))
            .unwrap_or_else(|| panic!("job {job}'s epilog line in {log}"));
        assert!(line.contains(&format!(" end={end} (")), "{line}");
        eprintln!("{line}");
    }
    assert!(
        !slurm.node_state().contains("DRAIN"),
        "{}",
        slurm.node_state()
    );
}

/// `[slurm]` settings that ask the test's cluster, through a wrapper in
/// `dir` written once the cluster runs ([`write_check_wrapper`]); until
/// then every check fails (Slurm cannot be asked). No periodic check
/// within the test: only the one at start and those before an `Adopt`.
fn check_settings(dir: &Path) -> String {
    format!(
        "[slurm]\ncheck_command = [{:?}, \"{{jobs}}\"]\ncheck_interval_s = 3600\n",
        dir.join("squeue").display().to_string()
    )
}

/// The check command of [`check_settings`]: the default one, on `slurm`.
fn write_check_wrapper(dir: &Path, slurm: &Slurm) {
    let wrapper = dir.join("squeue");
    fs::write(
        &wrapper,
        format!(
            "#!/bin/sh\nSLURM_CONF={} exec {} --noheader --states=all --format='%A %T' --jobs=\"$1\"\n",
            slurm.dir.path().join("slurm.conf").display(),
            which("squeue").expect("squeue").display()
        ),
    )
    .expect("write the squeue wrapper");
    fs::set_permissions(&wrapper, fs::Permissions::from_mode(0o755)).expect("chmod");
}

#[test]
fn slurm_adoption_ends_with_its_job_when_the_epilog_never_reached_the_agent() {
    if let Some(why) = skip_reason() {
        eprintln!("skipped: {why}");
        return;
    }
    let settings = tempfile::tempdir().expect("temp dir");
    let mut d = adopt_daemon_with(&check_settings(settings.path()), 1.0);
    let idle = core_clock(&d, 0);
    let env_file = env_in(settings.path(), d.address());
    // One GPU: the next job gets the GPU the dead job's adoption held.
    let slurm = Slurm::start(1, &env_file);
    write_check_wrapper(settings.path(), &slurm);
    let app = "--comment=gpu-agent:app=BlackScholes";

    // kill -9 during a job; the job ends; its epilog cannot reach the agent.
    let job = slurm.sbatch(&["--gres=gpu:1", "--time=1", app]);
    let task = adopted(&d, job);
    let mhz = task.clocks.as_ref().expect("clocks").core_mhz;
    wait_for("the job's clocks", LIMIT, || {
        shows(&d, 0, mhz).then_some(())
    });
    d.kill9();
    slurm.finish(job);
    slurm.wait_job(job, "COMPLETED");
    let log = slurm.slurmd_log();
    assert!(
        log.contains(&format!("slurm epilog job {job}: cannot reach gpu-agentd")),
        "{log}"
    );
    // The restart asks Slurm, which says the job ended: released.
    d.restart();
    let ended = d.wait_state(&task.id, TaskStatus::Succeeded, LIMIT);
    assert_eq!(
        ended.reason,
        Some(format!("completed: Slurm says job {job} ended")),
        "{ended:?}"
    );
    wait_for("the GPU at default clocks", LIMIT, || {
        (core_clock(&d, 0) == idle).then_some(())
    });
    let line = d
        .stderr()
        .lines()
        .find(|l| l.contains(&format!("task {} (slurm:{job}): released", task.id)))
        .map(str::to_string)
        .unwrap_or_else(|| panic!("the release in the log: {}", d.stderr()));
    eprintln!("{line}");

    // The next job on that GPU: its own adoption, clocks and energy.
    let next = slurm.sbatch(&["--gres=gpu:1", "--time=5", app]);
    let next_task = adopted(&d, next);
    assert_eq!(next_task.devices, [0]);
    let mhz = next_task.clocks.as_ref().expect("clocks").core_mhz;
    wait_for("the next job's clocks", LIMIT, || {
        shows(&d, 0, mhz).then_some(())
    });

    // A SIGTERM stop and start during it: still adopted, clocks locked again.
    d.terminate();
    d.restart();
    let kept = d.task(&next_task.id);
    assert_eq!(kept.state, TaskStatus::Running, "{kept:?}");
    wait_for("its clocks locked again", LIMIT, || {
        shows(&d, 0, mhz).then_some(())
    });
    slurm.finish(next);
    slurm.wait_job(next, "COMPLETED");
    let done = d.wait_state(&next_task.id, TaskStatus::Succeeded, LIMIT);
    assert!(done.energy_j.is_some_and(|j| j > 0.0), "{done:?}");

    // A job whose epilog alone cannot reach the agent: the next job's
    // adopt finds the GPU held, asks Slurm, and the GPU is its own.
    let third = slurm.sbatch(&["--gres=gpu:1", "--time=5", app]);
    let third_task = adopted(&d, third);
    let nowhere = format!("unix:path={}", settings.path().join("no-bus").display());
    write_env(&env_file, &nowhere);
    slurm.finish(third);
    slurm.wait_job(third, "COMPLETED");
    assert!(
        slurm.slurmd_log().contains(&format!(
            "slurm epilog job {third}: cannot reach gpu-agentd"
        )),
        "{}",
        slurm.slurmd_log()
    );
    assert_eq!(d.task(&third_task.id).state, TaskStatus::Running);
    write_env(&env_file, d.address());
    let fourth = slurm.sbatch(&["--gres=gpu:1", "--time=5", app]);
    let fourth_task = adopted(&d, fourth);
    assert_eq!(fourth_task.devices, [0]);
    let ended = d.task(&third_task.id);
    assert_eq!(ended.state, TaskStatus::Succeeded, "{ended:?}");
    assert_eq!(
        ended.reason,
        Some(format!("completed: Slurm says job {third} ended"))
    );
    let log = d.stderr();
    assert!(
        log.contains(&format!(
            "slurm:{fourth}: its GPUs [0] are adopted for Slurm job(s) [{third}]; asking Slurm"
        )),
        "{log}"
    );
    slurm.finish(fourth);
    slurm.wait_job(fourth, "COMPLETED");
    d.wait_state(&fourth_task.id, TaskStatus::Succeeded, LIMIT);
    for line in log.lines().filter(|l| l.contains("Slurm")) {
        eprintln!("{line}");
    }
    assert!(
        !slurm.node_state().contains("DRAIN"),
        "{}",
        slurm.node_state()
    );
}

/// The site's script of docs/slurm.md ("Rolling out and removing") that
/// slurm.conf names for `script` (prolog or epilog), as written there, with
/// the package's path replaced by `installed` and its settings in
/// `env_file`.
fn site_script(script: &str, installed: &Path, env_file: &Path) -> String {
    let doc = fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .parent()
            .expect("workspace root")
            .join("docs/slurm.md"),
    )
    .expect("read docs/slurm.md");
    let block = doc
        .split_once("\n## Rolling out and removing\n")
        .and_then(|(_, rest)| rest.split_once("```shell\n"))
        .and_then(|(_, rest)| rest.split_once("```"))
        .expect("slurm.md's site script")
        .0;
    let package = "/usr/lib/gpu-agent/slurm/prolog";
    assert!(
        block.starts_with("#!/bin/sh\n") && block.contains(package),
        "{block}"
    );
    block
        .replace(package, &installed.join(script).display().to_string())
        .replacen(
            "#!/bin/sh\n",
            &format!(
                "#!/bin/sh\nGPU_AGENT_SLURM_ENV={}\nexport GPU_AGENT_SLURM_ENV\n",
                env_file.display()
            ),
            1,
        )
}

/// Copies the package's Slurm scripts (packaging/slurm) into `dir`, as the
/// package installs them.
fn install_scripts(dir: &Path) {
    let scripts = Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("workspace root")
        .join("packaging/slurm");
    fs::create_dir_all(dir).expect("make the scripts' directory");
    for (script, mode) in [("prolog", 0o755), ("epilog", 0o755), ("common.sh", 0o644)] {
        fs::copy(scripts.join(script), dir.join(script)).expect("copy a script");
        fs::set_permissions(dir.join(script), fs::Permissions::from_mode(mode)).expect("chmod");
    }
}

/// Rollout and removal (docs/slurm.md, "Rolling out and removing"):
/// slurm.conf names the site's scripts, which run the package's where it
/// is installed. A job is adopted through them; then with gpuctl missing,
/// with gpu-agentd hanging (SIGSTOPped: every call cut off at
/// GPU_AGENT_TIMEOUT), with the package's scripts removed (a purge), and
/// with gpu-agentd stopped, each job completes with exit code 0, runs its
/// script, and the node is never drained. Then the site's prolog itself
/// removed: the node drains (Slurm 22.05), which the site's scripts avoid.
#[test]
fn slurm_jobs_complete_without_the_package_or_a_working_agent() {
    if let Some(why) = skip_reason() {
        eprintln!("skipped: {why}");
        return;
    }
    let mut d = adopt_daemon_with("", 1.0);
    let settings = tempfile::tempdir().expect("temp dir");
    let env_file = env_in(settings.path(), d.address());
    let slurm = Slurm::start(1, &env_file);
    let installed = settings.path().join("usr-lib-gpu-agent-slurm");
    install_scripts(&installed);
    for script in ["prolog", "epilog"] {
        let path = slurm.dir.path().join(script);
        fs::write(&path, site_script(script, &installed, &env_file)).expect("write");
        fs::set_permissions(&path, fs::Permissions::from_mode(0o755)).expect("chmod");
    }
    let app = "--comment=gpu-agent:app=BlackScholes";
    let gpuctl = artefacts().join("gpuctl");
    let settings_with = |gpuctl: &Path, timeout: u32| {
        fs::write(
            &env_file,
            format!(
                "DBUS_SYSTEM_BUS_ADDRESS='{}'\nGPU_AGENT_GPUCTL='{}'\nGPU_AGENT_TIMEOUT={timeout}\n",
                d.address(),
                gpuctl.display()
            ),
        )
        .expect("write slurm.env")
    };
    // A job that ends by itself: COMPLETED, exit code 0, its script run,
    // the node not drained; what the prolog logged, if anything.
    let completes = |job: u32, case: &str| -> Option<String> {
        slurm.finish(job);
        let done = slurm.wait_job(job, "COMPLETED");
        assert_eq!(
            field(&done, "ExitCode").as_deref(),
            Some("0:0"),
            "{case}: {done}"
        );
        assert!(
            slurm
                .job_output(job)
                .contains(&format!("job {job} ran on GPUs")),
            "{case}: {}",
            slurm.job_output(job)
        );
        let node = slurm.node_state();
        assert!(!node.contains("DRAIN"), "{case}: node {node}");
        let prefix = format!("gpu-agent: slurm prolog job {job}: ");
        let log = slurm.slurmd_log();
        let line = log.lines().find(|l| l.contains(&prefix)).map(String::from);
        eprintln!("{case}: job {job} COMPLETED, node {node}; prolog: {line:?}");
        line
    };

    // Installed, the agent up: adopted through the site's scripts.
    let job = slurm.sbatch(&["--gres=gpu:1", "--time=5", app]);
    let task = adopted(&d, job);
    let line = completes(job, "installed").expect("the prolog's line");
    assert!(
        line.contains(&format!("adopted as gpu-agent task {}", task.id)),
        "{line}"
    );
    d.wait_state(&task.id, TaskStatus::Succeeded, LIMIT);

    // gpuctl missing.
    settings_with(&settings.path().join("no-gpuctl"), 10);
    let job = slurm.sbatch(&["--gres=gpu:1", "--time=5", app]);
    let line = completes(job, "gpuctl missing").expect("the prolog's line");
    assert!(line.contains("cannot reach gpu-agentd"), "{line}");

    // gpu-agentd hangs: each call is cut off after GPU_AGENT_TIMEOUT.
    settings_with(&gpuctl, 2);
    let agent = Pid::from_raw(d.pid() as i32);
    kill(agent, Signal::SIGSTOP).expect("SIGSTOP gpu-agentd");
    let job = slurm.sbatch(&["--gres=gpu:1", "--time=5", app]);
    let hung = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        completes(job, "gpu-agentd hanging")
    }));
    kill(agent, Signal::SIGCONT).expect("SIGCONT gpu-agentd");
    let line = hung.unwrap_or_else(|e| std::panic::resume_unwind(e));
    let line = line.expect("the prolog's line");
    assert!(
        line.contains("cannot reach gpu-agentd: no answer within 2 s"),
        "{line}"
    );
    let log = slurm.slurmd_log();
    assert!(
        log.contains(&format!(
            "gpu-agent: slurm epilog job {job}: cannot reach gpu-agentd: no answer within 2 s"
        )),
        "{log}"
    );
    let external = format!("slurm:{job}");
    assert!(d.tasks().iter().all(|t| t.spec.external_id != external));

    // The package purged: the site's scripts find nothing to run.
    settings_with(&gpuctl, 10);
    fs::remove_dir_all(&installed).expect("remove the package's scripts");
    let job = slurm.sbatch(&["--gres=gpu:1", "--time=5", app]);
    assert_eq!(completes(job, "package removed"), None);

    // Installed again, gpu-agentd stopped.
    install_scripts(&installed);
    d.terminate();
    let job = slurm.sbatch(&["--gres=gpu:1", "--time=5", app]);
    let line = completes(job, "gpu-agentd stopped").expect("the prolog's line");
    assert!(line.contains("cannot reach gpu-agentd"), "{line}");
    for job in 1..=job {
        eprintln!(
            "job {job}: prolog {:?} ms, epilog {:?} ms",
            took_ms(&slurm.slurmd_log(), "prolog", job),
            took_ms(&slurm.slurmd_log(), "epilog", job)
        );
    }

    // Why slurm.conf names the site's scripts: a Prolog it names that is
    // missing drains the node and holds the job.
    fs::remove_file(slurm.dir.path().join("prolog")).expect("remove the site's prolog");
    let job = slurm.sbatch(&["--gres=gpu:1", "--time=5", app]);
    let node = wait_for("the node drained", LIMIT, || {
        let node = slurm.run("scontrol", &["show", "node", "localhost"]);
        let node = String::from_utf8_lossy(&node.stdout).into_owned();
        field(&node, "State")
            .is_some_and(|s| s.contains("DRAIN"))
            .then_some(node)
    });
    assert!(node.contains("Reason=Prolog error"), "{node}");
    eprintln!(
        "a missing Prolog: node {}, job {job} {}",
        slurm.node_state(),
        field(&slurm.show_job(job), "JobState").unwrap_or_default()
    );
}

/// Why the SPANK plugin cannot be built here, if it cannot.
fn spank_skip_reason() -> Option<String> {
    skip_reason().or_else(|| {
        (!Path::new("/usr/include/slurm/spank.h").is_file())
            .then(|| "not installed: the Slurm headers (apt-get install libslurm-dev)".into())
    })
}

#[test]
fn slurm_spank_plugin_writes_the_jobs_energy_into_its_admin_comment() {
    if let Some(why) = spank_skip_reason() {
        eprintln!("skipped: {why}");
        return;
    }
    let mut d = adopt_daemon_with("", 1.0);
    let settings = tempfile::tempdir().expect("temp dir");
    let env_file = env_in(settings.path(), d.address());
    // A copy, as the package installs it: removed at the end.
    let plugin = settings.path().join("gpu_agent_spank.so");
    fs::copy(crate::harness::spank_plugin(), &plugin).expect("copy the plugin");
    let plugstack = format!("optional {} env={}\n", plugin.display(), env_file.display());
    let slurm = Slurm::start_with(&Gpus::whole(2), &env_file, &plugstack);
    let app = "--comment=gpu-agent:app=BlackScholes";

    // A time-limit kill on one GPU while the other jobs run on the other.
    let timed_out = slurm.sbatch(&["--gres=gpu:1", "--time=1", app]);
    let timed_out_task = adopted(&d, timed_out);
    slurm.wait_started(timed_out);

    // A job that ends by itself: its energy in its AdminComment afterwards.
    let job = slurm.sbatch(&["--gres=gpu:1", "--time=5", app]);
    let task = adopted(&d, job);
    slurm.finish(job);
    let done = slurm.wait_job(job, "COMPLETED");
    let released = d.wait_state(&task.id, TaskStatus::Succeeded, LIMIT);
    assert_eq!(
        field(&done, "AdminComment"),
        Some(format!("gpu_agent_task={}", task.id)),
        "{done}"
    );
    let written: f64 = field(&done, "gpu_energy_j")
        .unwrap_or_else(|| panic!("gpu_energy_j in {done}"))
        .parse()
        .expect("a number of joules");
    // Written at the end of the job's step, before the epilog's release.
    let energy = released.energy_j.expect("the energy at release");
    assert!(
        written > 0.0 && written <= energy + 0.05,
        "{written} J, then {energy} J"
    );
    let log = slurm.slurmd_log();
    let line = log
        .lines()
        .find(|l| l.contains(&format!("gpu-agent: job {job} step batch: AdminComment=")))
        .unwrap_or_else(|| panic!("the plugin's line in {log}"));
    eprintln!(
        "{line}\n{}",
        done.lines()
            .find(|l| l.contains("AdminComment"))
            .unwrap_or("")
    );

    // scancel: slurmctld has ended the job before its step ends, so the
    // plugin records it as cancelled, whenever its exit signal reaches
    // slurmctld (the epilog alone records some scancels as completed).
    for _ in 0..3 {
        let job = slurm.sbatch(&["--gres=gpu:1", "--time=5", app]);
        let task = adopted(&d, job);
        slurm.wait_started(job);
        let out = slurm.run("scancel", &[&job.to_string()]);
        assert!(out.status.success(), "{out:?}");
        let done = slurm.wait_job(job, "CANCELLED");
        assert_eq!(field(&done, "gpu_energy_j"), None, "{done}");
        let ended = d.wait_state(&task.id, TaskStatus::Cancelled, LIMIT);
        assert!(ended.energy_j.is_some_and(|j| j > 0.0), "{ended:?}");
        let log = slurm.slurmd_log();
        let said = format!(
            "gpu-agent: job {job} step batch: slurmctld ended the job before its step ended, \
             so its AdminComment cannot be written; gpu-agent task {} released as cancelled",
            task.id
        );
        let line = log
            .lines()
            .find(|l| l.contains(&said))
            .unwrap_or_else(|| panic!("{said:?} in {log}"));
        eprintln!("{line}");
    }

    slurm.wait_job_for(timed_out, "TIMEOUT", TIME_LIMIT_KILL);
    let ended = d.wait_state(&timed_out_task.id, TaskStatus::Failed, LIMIT);
    assert_eq!(ended.reason.as_deref(), Some("timeout"), "{ended:?}");
    let said = format!(
        "gpu-agent: job {timed_out} step batch: slurmctld ended the job before its step ended, \
         so its AdminComment cannot be written; gpu-agent task {} released as timeout",
        timed_out_task.id
    );
    let log = slurm.slurmd_log();
    let line = log
        .lines()
        .find(|l| l.contains(&said))
        .unwrap_or_else(|| panic!("{said:?} in {log}"));
    eprintln!("{line}");

    // The agent stopped: the job completes all the same, the node stays up,
    // and the plugin says why it wrote nothing.
    d.terminate();
    let job = slurm.sbatch(&["--gres=gpu:1", "--time=5", app]);
    slurm.finish(job);
    let done = slurm.wait_job(job, "COMPLETED");
    assert_eq!(field(&done, "ExitCode").as_deref(), Some("0:0"), "{done}");
    assert_eq!(field(&done, "gpu_energy_j"), None, "{done}");
    let log = slurm.slurmd_log();
    let said = format!(
        "gpu-agent: job {job} step batch: GPU energy not written: gpuctl tasks --state running --json: failed"
    );
    let line = log
        .lines()
        .find(|l| l.contains(&said))
        .unwrap_or_else(|| panic!("{said:?} in {log}"));
    eprintln!("{line}");

    // The plugin's package purged while plugstack.conf still names it
    // (`optional`): jobs run all the same.
    fs::remove_file(&plugin).expect("remove the plugin");
    let job = slurm.sbatch(&["--gres=gpu:1", "--time=5", app]);
    slurm.finish(job);
    let done = slurm.wait_job(job, "COMPLETED");
    assert_eq!(field(&done, "ExitCode").as_deref(), Some("0:0"), "{done}");
    assert!(
        !slurm.node_state().contains("DRAIN"),
        "{}",
        slurm.node_state()
    );
}

/// Every device's UUID by index, as `gpuctl devices --json` lists them.
fn uuids(d: &Daemon) -> Vec<String> {
    let out = success(&gpuctl(d, &["devices", "--json"]));
    let devices: Vec<serde_json::Value> = serde_json::from_str(&out).expect("devices JSON");
    devices
        .iter()
        .map(|v| v["uuid"].as_str().expect("uuid").to_string())
        .collect()
}

/// GPU 0: a T4; GPU 1: an A100 split into two 3g.20gb, devices 2 and 3.
const MIG_HOST: &str = "[[gpu]]\nmodel = \"T4\"\nspeed = 1\n\
                        [[gpu]]\nmodel = \"A100-SXM4-40GB\"\nspeed = 7\n\
                        mig = [\"3g.20gb@0\", \"3g.20gb@4\"]\n";

#[test]
fn slurm_job_on_a_mig_instance_is_adopted_on_the_instance() {
    if let Some(why) = skip_reason() {
        eprintln!("skipped: {why}");
        return;
    }
    let d = adopt_daemon_in(Settings {
        host: Some(MIG_HOST.into()),
        time_scale: 1.0,
        ..Settings::default()
    });
    let uuid = uuids(&d);
    let settings = tempfile::tempdir().expect("temp dir");
    let env_file = env_in(settings.path(), d.address());
    // Slurm's view, as AutoDetect=nvml gives it: the T4 by index, each MIG
    // instance by its UUID. Its second 3g.20gb is one gpu-agentd does not
    // have (its UUID is not the agent's device 3's: a layout Slurm
    // detected before it changed).
    let stale = "MIG-00000000-0000-4000-8000-000000000000";
    let caps = |a: u32| {
        format!("{{dir}}/dev/nvidia1,{{dir}}/dev/nvidia-caps/nvidia-cap{a},{{dir}}/dev/nvidia-caps/nvidia-cap{}", a + 1)
    };
    let gpus = Gpus {
        gres: "gpu:t4:1,gpu:3g.20gb:2".into(),
        gres_conf: format!(
            "Name=gpu Type=t4 File={{dir}}/dev/nvidia0\n\
             Name=gpu Type=3g.20gb MultipleFiles={}\n\
             Name=gpu Type=3g.20gb MultipleFiles={}\n",
            caps(21),
            caps(30)
        ),
        detected: Some(format!(
            "t4|{{cpus}}|-1|{{dir}}/dev/nvidia0|(null)|nvidia_gpu_env\n\
             3g.20gb|{{cpus}}|(null)|{}|{}|nvidia_gpu_env\n\
             3g.20gb|{{cpus}}|(null)|{}|{stale}|nvidia_gpu_env\n",
            caps(21),
            uuid[2],
            caps(30),
        )),
        files: [
            "nvidia0",
            "nvidia1",
            "nvidia-caps/nvidia-cap21",
            "nvidia-caps/nvidia-cap22",
            "nvidia-caps/nvidia-cap30",
            "nvidia-caps/nvidia-cap31",
        ]
        .map(String::from)
        .to_vec(),
    };
    let slurm = Slurm::start_with(&gpus, &env_file, "");
    let app = "--comment=gpu-agent:app=BlackScholes";

    // Two jobs on the two 3g.20gb: the one on the agent's instance is
    // adopted there, the other's instance is logged and skipped.
    let jobs = [
        slurm.sbatch(&["--gres=gpu:3g.20gb:1", "--time=5", app]),
        slurm.sbatch(&["--gres=gpu:3g.20gb:1", "--time=5", app]),
    ];
    let (job, task) = wait_for("one of the jobs adopted", LIMIT, || {
        d.tasks().into_iter().find_map(|t| {
            jobs.into_iter()
                .find(|j| t.spec.external_id == format!("slurm:{j}"))
                .map(|j| (j, t))
        })
    });
    let other = jobs.into_iter().find(|&j| j != job).expect("two jobs");
    assert_eq!(task.state, TaskStatus::Running);
    assert_eq!(task.devices, [2], "{task:?}");
    assert_eq!(
        task.clocks, None,
        "a MIG instance's clocks are its GPU's: {task:?}"
    );
    let skipped = format!(
        "slurm prolog job {other}: Slurm's GPU {stale} is not one of gpu-agentd's: skipped"
    );
    wait_for("the other job's prolog", LIMIT, || {
        slurm.slurmd_log().contains(&skipped).then_some(())
    });
    // The agent's tasks that only an instance can hold (17 GB: more than
    // the T4's 16) run on the other instance only.
    let ids: Vec<String> = (0..3)
        .map(|_| d.submit(&spec(3.0, 17.0, 600.0, 1.0)).expect("Submit"))
        .collect();
    for id in &ids {
        let t = d.wait_state(id, TaskStatus::Succeeded, LIMIT);
        assert_eq!(t.devices, [3], "task {id} beside the adopted instance");
    }
    // The job's end releases the instance: its energy, and it takes work.
    for j in jobs {
        slurm.finish(j);
        slurm.wait_job(j, "COMPLETED");
    }
    assert!(
        slurm.job_output(job).contains(&format!("({})", uuid[2])),
        "{}",
        slurm.job_output(job)
    );
    let done = d.wait_state(&task.id, TaskStatus::Succeeded, LIMIT);
    assert!(done.energy_j.is_some_and(|j| j > 0.0), "{done:?}");
    let long: Vec<String> = (0..2)
        .map(|_| d.submit(&spec(1e6, 17.0, 1e7, 1.0)).expect("Submit"))
        .collect();
    let mut on: Vec<u32> = long
        .iter()
        .map(|id| d.wait_state(id, TaskStatus::Running, LIMIT).devices[0])
        .collect();
    on.sort_unstable();
    assert_eq!(on, [2, 3]);
    for id in &long {
        success(&gpuctl(&d, &["cancel", id]));
    }

    // A job on the T4: Slurm gives its index, which on a node with MIG is
    // not the agent's numbering: logged, not adopted, the job runs.
    let t4 = slurm.sbatch(&["--gres=gpu:t4:1", "--time=5", app]);
    slurm.finish(t4);
    slurm.wait_job(t4, "COMPLETED");
    let log = slurm.slurmd_log();
    assert!(
        log.contains(&format!(
            "slurm prolog job {t4}: Slurm's GPU 0 is an index on a node with MIG instances"
        )),
        "{log}"
    );
    let external = format!("slurm:{t4}");
    assert!(d.tasks().iter().all(|t| t.spec.external_id != external));
    assert!(
        !slurm.node_state().contains("DRAIN"),
        "{}",
        slurm.node_state()
    );
    for line in log
        .lines()
        .filter(|l| l.contains("gpu-agent: slurm prolog"))
    {
        eprintln!("{line}");
    }
}

#[test]
fn slurm_gpu_freq_jobs_keep_their_clocks() {
    if let Some(why) = skip_reason() {
        eprintln!("skipped: {why}");
        return;
    }
    let d = adopt_daemon_with("", 1.0);
    let idle = [core_clock(&d, 0), core_clock(&d, 1)];
    let settings = tempfile::tempdir().expect("temp dir");
    let env_file = env_in(settings.path(), d.address());
    let slurm = Slurm::start(2, &env_file);
    let app = "--comment=gpu-agent:app=BlackScholes";

    // --gpu-freq=low: adopted for its energy, its clocks Slurm's.
    let low = slurm.sbatch(&["--gres=gpu:1", "--time=5", "--gpu-freq=low", app]);
    let low_task = adopted(&d, low);
    assert_eq!(low_task.spec.app, "default");
    assert_eq!(low_task.clocks, None, "{low_task:?}");
    // (slurmd logs a prolog's output once it ended.)
    let asked = format!(
        "slurm prolog job {low}: the job asked --gpu-freq (gpu:low): its clocks are Slurm's; adopting with app default (energy only), not BlackScholes"
    );
    wait_for("the prolog's line", LIMIT, || {
        slurm.slurmd_log().contains(&asked).then_some(())
    });
    // Without it, on the other GPU: the agent's clocks.
    let own = slurm.sbatch(&["--gres=gpu:1", "--time=5", app]);
    let own_task = adopted(&d, own);
    let clocks = own_task.clocks.clone().expect("the agent's clocks");
    let gpu = own_task.devices[0] as usize;
    wait_for("the GPU at the agent's clocks", LIMIT, || {
        shows(&d, gpu, clocks.core_mhz).then_some(())
    });
    let low_gpu = low_task.devices[0] as usize;
    assert_eq!(core_clock(&d, low_gpu), idle[low_gpu]);
    for (job, task) in [(low, &low_task), (own, &own_task)] {
        slurm.finish(job);
        slurm.wait_job(job, "COMPLETED");
        let done = d.wait_state(&task.id, TaskStatus::Succeeded, LIMIT);
        assert!(done.energy_j.is_some_and(|j| j > 0.0), "{done:?}");
    }
}
