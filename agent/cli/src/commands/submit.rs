//! `gpuctl submit`: queue a task on the daemon.

use std::collections::BTreeMap;
use std::path::PathBuf;

use anyhow::{Context, Result};
use gpu_agent_dbus::SubmitSpec;

use crate::client::{block_on, BusArgs, Client};
use crate::clock::Clock;
use crate::output::emit;
use crate::units::{self, parse_duration, FromNow};

/// Queue a task on gpu-agentd and print its id.
///
/// As sbatch does, the command runs in the current directory (--chdir to
/// choose another), with your environment (--export), and its output goes to
/// gpu-agent-ID.out there (--output, --error). Only the command is required:
/// without --time or --workload the estimate is one hour on the host's
/// reference GPU, without --deadline the task is never late, without --mem it
/// fits any GPU. Without a command the task is simulated: it holds its
/// devices for its modelled run time. The daemon checks every value and
/// refuses a bad one with its reason; nothing is stored for a refused task.
#[derive(clap::Args)]
#[command(after_help = "Examples:\n  \
    gpuctl submit -- python3 train.py --epochs 3\n  \
    gpuctl submit --time 2h --mem 16 --deadline 10h -- python3 train.py\n  \
    gpuctl submit --time 40m --gpus 2 --name sweep --output %x-%t.log --export NONE --env SEED=7 -- ./run.sh\n  \
    gpuctl submit --workload 5 --mem 1 --deadline 90      # simulated")]
pub struct Args {
    /// Expected run time on the host's reference GPU (speed 1.0) at default
    /// clocks: seconds or a duration such as 90s, 10m, 2h, 1h30m. The same
    /// as --workload with the seconds: a GPU of speed v takes T / v
    /// [default: 1h].
    #[arg(long, value_name = "DURATION", value_parser = parse_duration, conflicts_with = "workload")]
    time: Option<f64>,
    /// Work units: a GPU of speed v runs the task in W / v seconds at default clocks.
    #[arg(long, value_name = "W", allow_negative_numbers = true)]
    workload: Option<f64>,
    /// Memory the task needs on each of its devices, GB [default: 0, fits any device].
    #[arg(long, value_name = "GB", allow_negative_numbers = true)]
    mem: Option<f64>,
    /// Deadline: seconds after submission or a duration such as 90s, 10m,
    /// 2h, 1h30m, or an RFC 3339 time (2026-11-28T18:00:00Z)
    /// [default: none, never late].
    #[arg(long, value_name = "WHEN", value_parser = deadline, allow_negative_numbers = true)]
    deadline: Option<f64>,
    /// Priority weight: the cost of each second past the deadline.
    #[arg(
        long,
        value_name = "X",
        allow_negative_numbers = true,
        default_value = "1"
    )]
    weight: f64,
    /// Devices the task needs at once (a gang task starts on all together) [default: 1].
    #[arg(long, value_name = "N")]
    gpus: Option<u32>,
    /// Other device counts the task can also run on, e.g. 1,4 (the work divides
    /// evenly: on g devices it takes gpus/g of its time); policies such as
    /// edf-hier may choose one.
    #[arg(long, value_name = "N,N,...", value_delimiter = ',')]
    gpus_alt: Vec<u32>,
    /// DVFS application profile, for the clocks and power model [default: default].
    #[arg(long, value_name = "NAME")]
    app: Option<String>,
    /// A name for people.
    #[arg(long, value_name = "NAME")]
    name: Option<String>,
    /// Run time on each device at default clocks, seconds, in device order (`inf`: cannot
    /// use that device); overrides workload / speed.
    #[arg(long, value_name = "S,S,...", value_delimiter = ',')]
    runtimes: Vec<f64>,
    /// The command's working directory [default: the current directory]. The
    /// daemon enters it as you; one you cannot enter is refused at once.
    #[arg(long, short = 'D', value_name = "DIR")]
    chdir: Option<PathBuf>,
    /// Which of your environment variables the command gets: ALL, NONE (a
    /// clean environment: HOME, USER, LOGNAME, SHELL and a fixed PATH), or a
    /// comma-separated list of NAME (yours) and NAME=VALUE, with ALL to add
    /// them to all of yours. CUDA_VISIBLE_DEVICES and GPU_AGENT_TASK_ID are
    /// always the agent's.
    #[arg(long, value_name = "ALL|NONE|VAR,...", default_value = "ALL", value_parser = Export::parse)]
    export: Export,
    /// Set an environment variable for the command; repeat for several.
    #[arg(long = "env", value_name = "NAME=VALUE", value_parser = parse_env)]
    env: Vec<(String, String)>,
    /// Where the command's stdout (and stderr, without --error) goes, from
    /// its working directory: %t (or %j) the task id, %u your user name, %x
    /// the task's name (its program's without --name), %% a %.
    #[arg(
        long,
        short = 'o',
        value_name = "PATTERN",
        default_value = "gpu-agent-%t.out"
    )]
    output: String,
    /// Where the command's stderr goes, as --output [default: with stdout].
    #[arg(long, short = 'e', value_name = "PATTERN")]
    error: Option<String>,
    /// Queue the task again if the daemon dies while it runs (instead of marking it lost).
    #[arg(long)]
    requeue: bool,
    /// The retry key sent with the task [default: a fresh random one]. If the
    /// reply is lost (the daemon died after storing the task), gpuctl submits
    /// again with the same key for up to --retry-for, and the daemon answers
    /// the first task's id instead of queueing a second one.
    #[arg(long, value_name = "TOKEN")]
    client_token: Option<String>,
    /// How long to keep retrying after a lost reply, while the daemon restarts.
    #[arg(long, value_name = "DURATION", value_parser = parse_duration, default_value = "60")]
    retry_for: f64,
    /// The program to run and its arguments, after `--`. It runs as you, on the
    /// GPUs in CUDA_VISIBLE_DEVICES.
    #[arg(last = true, value_name = "CMD")]
    command: Vec<String>,
    #[command(flatten)]
    bus: BusArgs,
    /// Print {"id": ...} instead of the bare id.
    #[arg(long)]
    json: bool,
}

/// What `--export` passes on.
#[derive(Debug, Clone, PartialEq)]
pub struct Export {
    /// Every variable of the caller's.
    all: bool,
    /// Variables of the caller's by name.
    names: Vec<String>,
    /// Variables given with their values.
    set: Vec<(String, String)>,
}

impl Export {
    /// `ALL`, `NONE`, or a comma-separated list of `ALL`, `NAME` and `NAME=VALUE`.
    fn parse(text: &str) -> Result<Export, String> {
        let mut export = Export {
            all: false,
            names: Vec::new(),
            set: Vec::new(),
        };
        if text == "NONE" {
            return Ok(export);
        }
        for item in text.split(',') {
            match item.split_once('=') {
                _ if item == "ALL" => export.all = true,
                Some((name, value)) if valid_name(name) => {
                    export.set.push((name.to_string(), value.to_string()))
                }
                None if valid_name(item) => export.names.push(item.to_string()),
                _ => {
                    return Err(format!(
                        "expected ALL, NONE, or a list of NAME and NAME=VALUE separated by commas, got {item:?}"
                    ))
                }
            }
        }
        Ok(export)
    }

    /// The variables to send, from the caller's `vars`.
    fn pick(&self, vars: impl IntoIterator<Item = (String, String)>) -> BTreeMap<String, String> {
        let mut env: BTreeMap<String, String> = vars
            .into_iter()
            .filter(|(name, _)| self.all || self.names.contains(name))
            .collect();
        env.extend(self.set.iter().cloned());
        env
    }
}

/// `--deadline`: seconds after submission, from a duration as it is or
/// from a time (one not ahead of now is refused).
fn deadline(text: &str) -> Result<f64, String> {
    if let Ok(secs) = parse_duration(text) {
        return Ok(secs);
    }
    let now = Clock::system().now;
    let after = units::parse_time(text, now, FromNow::After)? - now;
    if after <= 0.0 {
        return Err(format!("{text:?} is not ahead of now"));
    }
    Ok(after)
}

/// Whether `name` can be an environment variable's name.
fn valid_name(name: &str) -> bool {
    !name.is_empty() && !name.contains(['=', '\0', ','])
}

/// `NAME=VALUE` split at its first `=`; the value may be empty or hold `=`.
fn parse_env(s: &str) -> Result<(String, String), String> {
    match s.split_once('=') {
        Some((name, value)) if !name.is_empty() => Ok((name.to_string(), value.to_string())),
        _ => Err(format!("expected NAME=VALUE, got {s:?}")),
    }
}

/// Where the caller is: its environment (the variables that are UTF-8, as
/// D-Bus carries them), its current directory and its umask.
struct Caller {
    vars: Vec<(String, String)>,
    cwd: PathBuf,
    umask: u32,
}

impl Caller {
    /// This process's.
    fn this() -> Result<Caller> {
        let vars = std::env::vars_os()
            .filter_map(
                |(name, value)| match (name.into_string(), value.into_string()) {
                    (Ok(name), Ok(value)) => Some((name, value)),
                    (name, _) => {
                        eprintln!(
                        "gpuctl: warning: environment variable {name:?} is not UTF-8; not passed on"
                    );
                        None
                    }
                },
            )
            .collect();
        let cwd = std::env::current_dir().context("cannot read the current directory")?;
        // umask can only be read by setting it: set it back at once.
        let umask = nix::sys::stat::umask(nix::sys::stat::Mode::empty());
        nix::sys::stat::umask(umask);
        Ok(Caller {
            vars,
            cwd,
            umask: umask.bits(),
        })
    }
}

/// The spec `args` describe, submitted by `caller`.
fn spec(args: &Args, caller: Caller) -> Result<SubmitSpec> {
    let mut spec = SubmitSpec::default();
    if let Some(workload) = args.time.or(args.workload) {
        spec.workload = workload;
    }
    if let Some(mem) = args.mem {
        spec.mem_gb = mem;
    }
    spec.deadline = args.deadline;
    spec.weight = args.weight;
    if let Some(gpus) = args.gpus {
        spec.gpus = gpus;
    }
    spec.gpus_alt = args.gpus_alt.clone();
    if let Some(app) = &args.app {
        spec.app = app.clone();
    }
    if let Some(name) = &args.name {
        spec.name = name.clone();
    }
    spec.runtimes = args.runtimes.clone();
    spec.requeue = args.requeue;
    spec.command = args.command.clone();
    spec.client_token = args.client_token.clone().unwrap_or_default();
    if !spec.command.is_empty() {
        spec.env = args.export.pick(caller.vars);
        let dir = match &args.chdir {
            Some(dir) => caller.cwd.join(dir),
            None => caller.cwd,
        };
        spec.workdir = dir
            .to_str()
            .with_context(|| format!("the working directory {} is not UTF-8", dir.display()))?
            .to_string();
        spec.output = args.output.clone();
        spec.error = args.error.clone().unwrap_or_default();
        spec.umask = Some(caller.umask);
    }
    spec.env.extend(args.env.iter().cloned());
    Ok(spec)
}

/// A fresh random retry key: 16 bytes of the kernel's randomness, in hex.
fn new_token() -> Result<String> {
    use std::io::Read;
    let mut bytes = [0u8; 16];
    std::fs::File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut bytes))
        .context("cannot read /dev/urandom for a client token")?;
    Ok(bytes.iter().map(|b| format!("{b:02x}")).collect())
}

/// Whether `error` means the request may have been carried out without the
/// answer reaching us (the daemon died mid-call), or the daemon is away
/// while it restarts: both are safe to retry with the same client token.
fn retryable(error: &zbus::Error) -> bool {
    match error {
        zbus::Error::MethodError(name, _, _) => matches!(
            name.as_str(),
            "org.freedesktop.DBus.Error.NoReply"
                | "org.freedesktop.DBus.Error.ServiceUnknown"
                | "org.freedesktop.DBus.Error.NameHasNoOwner"
        ),
        zbus::Error::FDO(e) => matches!(
            **e,
            zbus::fdo::Error::NoReply(_)
                | zbus::fdo::Error::ServiceUnknown(_)
                | zbus::fdo::Error::NameHasNoOwner(_)
        ),
        zbus::Error::InputOutput(_) => true,
        _ => false,
    }
}

/// Submits the task and prints its id.
pub fn run(args: Args) -> Result<()> {
    let mut spec = spec(&args, Caller::this()?)?;
    if spec.client_token.is_empty() {
        spec.client_token = new_token()?;
    }
    let retry_for = std::time::Duration::from_secs_f64(args.retry_for.max(0.0));
    let id = block_on(async {
        let client = Client::connect(&args.bus).await?;
        let first = client.agent.submit(spec.to_dict()).await;
        let lost = match first {
            Ok(id) => return Ok(id),
            // Only a reply lost in flight is retried: a daemon that was not
            // there to begin with is reported at once.
            Err(e)
                if matches!(&e, zbus::Error::MethodError(n, _, _) if n.as_str() == "org.freedesktop.DBus.Error.NoReply")
                    || matches!(&e, zbus::Error::FDO(f) if matches!(**f, zbus::fdo::Error::NoReply(_))) =>
            {
                e
            }
            Err(e) => return client.call(std::future::ready(Err::<String, _>(e))).await,
        };
        eprintln!(
            "gpuctl: the reply to Submit was lost ({}); retrying with the same client token",
            gpu_agent_dbus::describe_error(&lost)
        );
        let deadline = std::time::Instant::now() + retry_for;
        loop {
            tokio::time::sleep(std::time::Duration::from_millis(500)).await;
            match client.agent.submit(spec.to_dict()).await {
                Ok(id) => return Ok(id),
                Err(e) if retryable(&e) && std::time::Instant::now() < deadline => {}
                Err(e) => return client.call(std::future::ready(Err::<String, _>(e))).await,
            }
        }
    })?;
    if args.json {
        emit(&format!("{}\n", serde_json::json!({ "id": id })))?;
    } else {
        emit(&format!("{id}\n"))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        args: Args,
    }

    /// A caller in /home/alice/proj with umask 027 and three variables.
    fn caller() -> Caller {
        Caller {
            vars: [
                ("PATH", "/home/alice/proj/bin:/usr/bin"),
                ("HOME", "/home/alice"),
                ("LANG", "C.UTF-8"),
            ]
            .into_iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
            cwd: PathBuf::from("/home/alice/proj"),
            umask: 0o027,
        }
    }

    fn parse(argv: &[&str]) -> Result<SubmitSpec, clap::Error> {
        let argv = std::iter::once("submit").chain(argv.iter().copied());
        Cli::try_parse_from(argv).map(|cli| spec(&cli.args, caller()).unwrap())
    }

    fn env(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn env_splits_at_the_first_equals_sign() {
        assert_eq!(parse_env("A=b"), Ok(("A".into(), "b".into())));
        assert_eq!(parse_env("A="), Ok(("A".into(), String::new())));
        assert_eq!(parse_env("A=b=c"), Ok(("A".into(), "b=c".into())));
        assert_eq!(parse_env("A"), Err("expected NAME=VALUE, got \"A\"".into()));
        assert_eq!(
            parse_env("=b"),
            Err("expected NAME=VALUE, got \"=b\"".into())
        );
    }

    #[test]
    fn the_command_alone_runs_where_and_as_it_was_typed() {
        let spec = parse(&["--", "python", "train.py"]).unwrap();
        assert_eq!(
            spec,
            SubmitSpec {
                command: vec!["python".into(), "train.py".into()],
                env: env(&[
                    ("HOME", "/home/alice"),
                    ("LANG", "C.UTF-8"),
                    ("PATH", "/home/alice/proj/bin:/usr/bin"),
                ]),
                workdir: "/home/alice/proj".into(),
                output: "gpu-agent-%t.out".into(),
                umask: Some(0o027),
                ..SubmitSpec::default()
            }
        );
        // `run` gives every submission a fresh token.
        let (a, b) = (new_token().unwrap(), new_token().unwrap());
        assert!(a.len() == 32 && a != b, "{a} {b}");
    }

    #[test]
    fn a_simulated_task_takes_nothing_of_the_caller() {
        let spec = parse(&[
            "--workload",
            "12.5",
            "--mem",
            "30",
            "--deadline",
            "10m",
            "--weight",
            "2",
        ])
        .unwrap();
        assert_eq!(spec, SubmitSpec::new(12.5, 30.0, 600.0, 2.0));
        assert_eq!(parse(&[]).unwrap(), SubmitSpec::default());
    }

    #[test]
    fn export_picks_the_callers_variables() {
        let exported = |export: &str| parse(&["--export", export, "--", "true"]).unwrap().env;
        assert_eq!(exported("NONE"), env(&[]));
        assert_eq!(
            exported("LANG,X=1"),
            env(&[("LANG", "C.UTF-8"), ("X", "1")])
        );
        assert_eq!(exported("ALL,PATH=/bin").len(), 3);
        assert_eq!(exported("ALL,PATH=/bin")["PATH"], "/bin");
        // --env goes over them all.
        let spec = parse(&["--export", "NONE", "--env", "A=1", "--", "true"]).unwrap();
        assert_eq!(spec.env, env(&[("A", "1")]));
        let e = parse(&["--export", "A,=b", "--", "true"]).unwrap_err();
        assert!(
            e.to_string()
                .contains("expected ALL, NONE, or a list of NAME and NAME=VALUE"),
            "{e}"
        );
    }

    #[test]
    fn time_is_the_workload_on_the_reference_gpu() {
        let spec = parse(&["--time", "1h30m", "--", "true"]).unwrap();
        assert_eq!(spec.workload, 5400.0);
        let e = parse(&["--time", "1h", "--workload", "3", "--", "true"]).unwrap_err();
        assert_eq!(e.kind(), clap::error::ErrorKind::ArgumentConflict);
    }

    #[test]
    fn every_option_reaches_the_spec() {
        let spec = parse(&[
            "--workload",
            "1",
            "--mem",
            "0",
            "--deadline",
            "1h30m",
            "--weight",
            "1",
            "--gpus",
            "2",
            "--gpus-alt",
            "1,4",
            "--app",
            "nbody",
            "--name",
            "train",
            "--runtimes",
            "10,inf",
            "--export",
            "NONE",
            "--env",
            "A=1",
            "--env",
            "B=x=y",
            "--chdir",
            "../data",
            "--output",
            "%x.out",
            "--error",
            "/tmp/%x.err",
            "--requeue",
            "--client-token",
            "k1",
            "--",
            "/bin/sh",
            "-c",
            "echo --json",
        ])
        .unwrap();
        assert_eq!(
            spec,
            SubmitSpec {
                workload: 1.0,
                mem_gb: 0.0,
                deadline: Some(5400.0),
                weight: 1.0,
                gpus: 2,
                gpus_alt: vec![1, 4],
                app: "nbody".into(),
                runtimes: vec![10.0, f64::INFINITY],
                command: vec!["/bin/sh".into(), "-c".into(), "echo --json".into()],
                env: env(&[("A", "1"), ("B", "x=y")]),
                name: "train".into(),
                requeue: true,
                client_token: "k1".into(),
                external_id: String::new(),
                workdir: "/home/alice/proj/../data".into(),
                output: "%x.out".into(),
                error: "/tmp/%x.err".into(),
                umask: Some(0o027),
            }
        );
    }

    #[test]
    fn ranges_are_left_to_the_daemon() {
        let spec = parse(&[
            "--workload",
            "-1",
            "--mem",
            "0",
            "--deadline",
            "0",
            "--weight",
            "0",
            "--gpus",
            "0",
        ])
        .unwrap();
        assert_eq!((spec.workload, spec.weight, spec.gpus), (-1.0, 0.0, 0));
    }

    #[test]
    fn a_deadline_may_be_a_time() {
        let before = Clock::system().now;
        let at = (before + 7200.0).floor();
        let text = humantime::format_rfc3339_seconds(
            std::time::UNIX_EPOCH + std::time::Duration::from_secs_f64(at),
        )
        .to_string();
        let spec = parse(&["--deadline", &text]).unwrap();
        let after = Clock::system().now;
        let deadline = spec.deadline.expect("a deadline");
        // Seconds from the moment it was parsed, between the two readings.
        assert!(
            (at - after..=at - before).contains(&deadline),
            "{deadline} not in {}..={}",
            at - after,
            at - before
        );
        let e = parse(&["--deadline", "2020-01-01T00:00:00Z"]).unwrap_err();
        assert!(e.to_string().contains("is not ahead of now"), "{e}");
    }

    #[test]
    fn bad_durations_are_named() {
        let e = parse(&["--deadline", "soon"]).unwrap_err();
        assert!(
            e.to_string().contains("expected seconds or a duration"),
            "{e}"
        );
    }
}
