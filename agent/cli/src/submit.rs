//! `gpuctl submit`: queue a task on the daemon.

use anyhow::{Context, Result};
use gpu_agent_dbus::SubmitSpec;

use crate::client::{block_on, BusArgs, Client};
use crate::emit;
use crate::units::parse_duration;

/// Queue a task on gpu-agentd and print its id.
///
/// Without a command the task is simulated: it holds its devices for its
/// modelled run time. The daemon checks every value and refuses a bad one with
/// its reason; nothing is stored for a refused task.
#[derive(clap::Args)]
#[command(after_help = "Examples:\n  \
    gpuctl submit --workload 120 --mem 16 --deadline 10m --weight 1 -- python3 train.py --epochs 3\n  \
    gpuctl submit --workload 40 --mem 30 --deadline 1h30m --weight 2 --gpus 2 --name sweep --env SEED=7 -- ./run.sh\n  \
    gpuctl submit --workload 5 --mem 1 --deadline 90 --weight 1      # simulated")]
pub struct Args {
    /// Work units: a GPU of speed v runs the task in W / v seconds at default clocks.
    #[arg(long, value_name = "W", allow_negative_numbers = true)]
    workload: f64,
    /// Memory the task needs on each of its devices, GB.
    #[arg(long, value_name = "GB", allow_negative_numbers = true)]
    mem: f64,
    /// Deadline after submission: seconds, or a duration such as 90s, 10m, 2h, 1h30m.
    #[arg(long, value_name = "DURATION", value_parser = parse_duration, allow_negative_numbers = true)]
    deadline: f64,
    /// Priority weight: the cost of each second past the deadline.
    #[arg(long, value_name = "X", allow_negative_numbers = true)]
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
    /// Set an environment variable for the command; repeat for several.
    #[arg(long = "env", value_name = "NAME=VALUE", value_parser = parse_env)]
    env: Vec<(String, String)>,
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

/// `NAME=VALUE` split at its first `=`; the value may be empty or hold `=`.
fn parse_env(s: &str) -> Result<(String, String), String> {
    match s.split_once('=') {
        Some((name, value)) if !name.is_empty() => Ok((name.to_string(), value.to_string())),
        _ => Err(format!("expected NAME=VALUE, got {s:?}")),
    }
}

/// The spec `args` describe.
fn spec(args: &Args) -> SubmitSpec {
    let mut spec = SubmitSpec::new(args.workload, args.mem, args.deadline, args.weight);
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
    spec.env = args.env.iter().cloned().collect();
    spec.requeue = args.requeue;
    spec.command = args.command.clone();
    spec.client_token = args.client_token.clone().unwrap_or_default();
    spec
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
    let mut spec = spec(&args);
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
    use std::collections::BTreeMap;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        args: Args,
    }

    fn parse(argv: &[&str]) -> Result<SubmitSpec, clap::Error> {
        let argv = std::iter::once("submit").chain(argv.iter().copied());
        Cli::try_parse_from(argv).map(|cli| spec(&cli.args))
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
    fn the_four_numbers_alone_give_the_default_spec() {
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
        // `run` gives every submission a fresh token.
        let (a, b) = (new_token().unwrap(), new_token().unwrap());
        assert!(a.len() == 32 && a != b, "{a} {b}");
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
            "--env",
            "A=1",
            "--env",
            "B=x=y",
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
                deadline: 5400.0,
                weight: 1.0,
                gpus: 2,
                gpus_alt: vec![1, 4],
                app: "nbody".into(),
                runtimes: vec![10.0, f64::INFINITY],
                command: vec!["/bin/sh".into(), "-c".into(), "echo --json".into()],
                env: BTreeMap::from([("A".into(), "1".into()), ("B".into(), "x=y".into())]),
                name: "train".into(),
                requeue: true,
                client_token: "k1".into(),
                external_id: String::new(),
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
    fn the_four_numbers_are_required() {
        let e = parse(&["--workload", "1", "--mem", "1", "--deadline", "1"]).unwrap_err();
        assert_eq!(e.kind(), clap::error::ErrorKind::MissingRequiredArgument);
        assert!(e.to_string().contains("--weight <X>"), "{e}");
        let e = parse(&[
            "--workload",
            "1",
            "--mem",
            "1",
            "--deadline",
            "soon",
            "--weight",
            "1",
        ])
        .unwrap_err();
        assert!(
            e.to_string().contains("expected seconds or a duration"),
            "{e}"
        );
    }
}
