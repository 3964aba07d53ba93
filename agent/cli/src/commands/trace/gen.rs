//! `gpuctl trace gen`: generate workloads (the DVFS paper's experiments).

use std::io::Write as _;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use clap::{Subcommand, ValueEnum};
use gpu_agent_sim::atomic::AtomicFile;
use gpu_agent_sim::dvfs_paper::{generate, Mode, PAIRS};
use gpu_agent_sim::paper_cluster::{files, Layout};
use serde::Serialize;

use crate::output::emit_json;

/// Generate a host, a trace and its DVFS profiles.
#[derive(clap::Args)]
pub struct GenArgs {
    #[command(subcommand)]
    generator: Generator,
}

#[derive(Subcommand)]
enum Generator {
    #[command(name = "dvfs-paper")]
    DvfsPaper(PaperArgs),
}

const EXAMPLE: &str = "Example (the paper's offline l = 16, U = 1.6 experiment, then its run):\n  gpuctl trace gen dvfs-paper --mode offline --util 1.6 --seed 1 --gpus-per-server 16 \\\n      --out-host h.toml --out-trace t.csv --out-apps a.toml\n  gpuctl simulate --host h.toml --trace t.csv --apps a.toml --policy edl --param theta=1 --param compat=true";

/// The DVFS paper's task set (/usr/share/doc/gpu-agent/dvfs.md §4, seeded; the
/// same set `gpuctl dvfs paper --seed S --sets 1` draws) as files for `gpuctl
/// simulate`: a host whose [cluster] table holds M servers of L GPUs with their
/// idle power, turn-on energy and (online) sleep after RHO idle slots; a trace
/// with one task a row, its profile named by `app`; and the profiles.
///
/// One slot of the paper is one second: arrivals, deadlines and run times are
/// in slots, energies in W x slot = J. `gpuctl simulate --policy edl` on such a
/// host runs the paper's cluster model (/usr/share/doc/gpu-agent/formats.md
/// §2).
#[derive(clap::Args)]
#[command(after_help = EXAMPLE)]
struct PaperArgs {
    /// Offline (int(2048 U) tasks at slot 0) or online (819 at slot 0 and
    /// int(2048 U) over slots 1 ... 1439).
    #[arg(long, value_enum)]
    mode: ModeArg,
    /// Utilisation U.
    #[arg(long, value_name = "U")]
    util: f64,
    /// Seed of the task set.
    #[arg(long, value_name = "S")]
    seed: u64,
    /// GPU-CPU pairs per server (l).
    #[arg(long, value_name = "L", default_value_t = 1)]
    gpus_per_server: usize,
    /// Servers (m); default 2048 / L, the paper's 2048 pairs.
    #[arg(long, value_name = "M")]
    servers: Option<usize>,
    /// Idle power of a pair, W (the paper: 24 W CPU + 13 W GPU).
    #[arg(long, value_name = "W", default_value_t = 37.0)]
    idle_w: f64,
    /// Energy of one server turn-on, J (W x slot).
    #[arg(long, value_name = "J", default_value_t = 200.0)]
    turn_on: f64,
    /// Online: idle slots after which a server turns off.
    #[arg(long, value_name = "RHO", default_value_t = 2)]
    rho: u32,
    /// Write the host description (TOML) here.
    #[arg(long, value_name = "FILE")]
    out_host: PathBuf,
    /// Write the trace (CSV) here.
    #[arg(long, value_name = "FILE")]
    out_trace: PathBuf,
    /// Write the tasks' profiles (TOML) here.
    #[arg(long, value_name = "FILE")]
    out_apps: PathBuf,
    /// Print the summary as JSON on standard output instead of text on standard error.
    #[arg(long)]
    json: bool,
}

#[derive(Clone, Copy, PartialEq, Eq, ValueEnum)]
enum ModeArg {
    Offline,
    Online,
}

/// What `--json` prints.
#[derive(Serialize)]
struct Report<'a> {
    generator: &'static str,
    mode: &'static str,
    util: f64,
    seed: u64,
    tasks: usize,
    servers: usize,
    gpus_per_server: usize,
    host: &'a Path,
    trace: &'a Path,
    apps: &'a Path,
}

/// Runs `gpuctl trace gen`.
pub fn run(args: GenArgs) -> Result<()> {
    let Generator::DvfsPaper(args) = args.generator;
    if !(args.util > 0.0 && args.util <= 100.0) {
        bail!("--util: expected a number in (0, 100], got {}", args.util);
    }
    if !(1..=4096).contains(&args.gpus_per_server) {
        bail!(
            "--gpus-per-server: expected an integer from 1 to 4096, got {}",
            args.gpus_per_server
        );
    }
    let servers = args
        .servers
        .unwrap_or((PAIRS / args.gpus_per_server).max(1));
    if !(1..=1_000_000).contains(&servers) {
        bail!("--servers: expected an integer from 1 to 1000000, got {servers}");
    }
    for (flag, x) in [("--idle-w", args.idle_w), ("--turn-on", args.turn_on)] {
        if !(x.is_finite() && x >= 0.0) {
            bail!("{flag}: expected a number >= 0, got {x}");
        }
    }
    let paths = [&args.out_host, &args.out_trace, &args.out_apps];
    if paths[0] == paths[1] || paths[0] == paths[2] || paths[1] == paths[2] {
        bail!("--out-host, --out-trace and --out-apps must be three different files");
    }
    let (mode, mode_name) = match args.mode {
        ModeArg::Offline => (Mode::Offline, "offline"),
        ModeArg::Online => (Mode::Online, "online"),
    };
    let tasks = generate(mode, args.util, args.seed);
    let layout = Layout {
        servers,
        gpus_per_server: args.gpus_per_server,
        idle_w: args.idle_w,
        turn_on_j: args.turn_on,
        sleep_after: args.rho,
        model: "A100-SXM4-40GB",
    };
    let header = format!(
        "gpuctl trace gen dvfs-paper --mode {mode_name} --util {} --seed {} --servers {servers} \
         --gpus-per-server {} --idle-w {} --turn-on {}{}\n\
         The DVFS paper's cluster model (/usr/share/doc/gpu-agent/dvfs.md §3, §4): one slot = one second.\n\
         The GPU model is nominal: the [cluster] idle power and the profiles decide the energy.",
        args.util,
        args.seed,
        args.gpus_per_server,
        args.idle_w,
        args.turn_on,
        if mode == Mode::Online {
            format!(" --rho {}", args.rho)
        } else {
            String::new()
        },
    );
    let f = files(mode, &tasks, &layout, &header);
    // All three are written beside their destinations first and renamed
    // only when all are written.
    let mut pending = Vec::new();
    for (path, text) in [
        (&args.out_host, &f.host),
        (&args.out_trace, &f.trace),
        (&args.out_apps, &f.apps),
    ] {
        let mut file =
            AtomicFile::create(path).with_context(|| format!("cannot write {}", path.display()))?;
        file.file()
            .write_all(text.as_bytes())
            .with_context(|| format!("cannot write {}", path.display()))?;
        pending.push((path, file));
    }
    for (path, file) in pending {
        file.commit()
            .with_context(|| format!("cannot write {}", path.display()))?;
    }
    if args.json {
        return emit_json(&Report {
            generator: "dvfs-paper",
            mode: mode_name,
            util: args.util,
            seed: args.seed,
            tasks: tasks.len(),
            servers,
            gpus_per_server: args.gpus_per_server,
            host: &args.out_host,
            trace: &args.out_trace,
            apps: &args.out_apps,
        });
    }
    eprintln!(
        "wrote {} ({servers} servers of {} GPUs), {} ({} tasks) and {} ({} profiles)",
        args.out_host.display(),
        args.gpus_per_server,
        args.out_trace.display(),
        tasks.len(),
        args.out_apps.display(),
        tasks.len()
    );
    Ok(())
}
