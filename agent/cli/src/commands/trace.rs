//! `gpuctl trace import`: convert public workloads into a host and a trace.

mod gen;

use std::path::{Path, PathBuf};

use anyhow::{bail, Result};
use clap::Subcommand;
use gpu_agent_sim::import::{alibaba, sos, Conversion};
use serde::Serialize;

use crate::output::emit_json;

/// Work with workload traces.
#[derive(clap::Args)]
pub struct Args {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    Import(ImportArgs),
    Gen(gen::GenArgs),
}

/// Convert a public workload into a host description
/// (/usr/share/doc/gpu-agent/formats.md §2) and a trace
/// (/usr/share/doc/gpu-agent/formats.md §1) for `gpuctl simulate`. The rules
/// are in /usr/share/doc/gpu-agent/import.md and in each format's --help.
#[derive(clap::Args)]
struct ImportArgs {
    #[command(subcommand)]
    format: Format,
}

#[derive(Subcommand)]
enum Format {
    #[command(name = "alibaba-v2023")]
    Alibaba(AlibabaArgs),
    Sos(SosArgs),
}

/// Where to write, and how to report.
#[derive(clap::Args)]
struct Output {
    /// Write the host description (TOML) here.
    #[arg(long, value_name = "FILE")]
    out_host: PathBuf,
    /// Write the trace (CSV) here.
    #[arg(long, value_name = "FILE")]
    out_trace: PathBuf,
    /// Print the summary as JSON on standard output instead of text on standard error.
    #[arg(long)]
    json: bool,
}

const ALIBABA_EXAMPLE: &str = "Example (1,000 tasks on 32 GPUs):\n  gpuctl trace import alibaba-v2023 openb_pod_list_default.csv --nodes openb_node_list_gpu_node.csv --gpus 32 --from 11000000 --limit 1000 --out-host host.toml --out-trace trace.csv";

/// Convert Alibaba's GPU cluster trace v2023 (openb_pod_list_*.csv with time
/// columns, and openb_node_list_*.csv).
///
/// Every pod with GPUs and a run time becomes a task; the others are skipped
/// and counted by reason. The host holds the node list's GPUs, or --gpus of
/// them in the same proportions.
#[derive(clap::Args)]
#[command(after_help = ALIBABA_EXAMPLE, after_long_help = alibaba_rules())]
struct AlibabaArgs {
    /// The pod list.
    #[arg(value_name = "PODS.csv")]
    pods: PathBuf,
    /// The node list.
    #[arg(long, value_name = "NODES.csv")]
    nodes: PathBuf,
    /// Scale the host down to N GPUs, each model keeping its share of the node
    /// list (largest remainders).
    #[arg(long, value_name = "N")]
    gpus: Option<u32>,
    /// Leave out pods created before SECONDS (their creation_time).
    #[arg(long, value_name = "SECONDS", default_value_t = 0)]
    from: u64,
    /// Stop after N tasks.
    #[arg(long, value_name = "N")]
    limit: Option<usize>,
    /// Deadline = arrival + SLACK × run time on the reference GPU.
    #[arg(long, value_name = "SLACK", default_value_t = alibaba::DEFAULT_SLACK)]
    slack: f64,
    #[command(flatten)]
    output: Output,
}

const SOS_EXAMPLE: &str = "Example:\n  gpuctl trace import sos sim_5_machines.txt --out-host host.toml --out-trace trace.csv";

/// Convert the stochastic online scheduling workload (sim_5_machines.txt: one
/// job a line, `weight p_0..p_4 alpha_0..alpha_4 release_tick`).
#[derive(clap::Args)]
#[command(after_help = SOS_EXAMPLE, after_long_help = sos_rules())]
struct SosArgs {
    /// The job file.
    #[arg(value_name = "PATH")]
    jobs: PathBuf,
    /// Seconds per tick.
    #[arg(long, value_name = "SECONDS", default_value_t = 1.0)]
    tick_seconds: f64,
    /// Deadline = arrival + SLACK × the shortest p_i.
    #[arg(long, value_name = "SLACK", default_value_t = sos::DEFAULT_SLACK)]
    slack: f64,
    #[command(flatten)]
    output: Output,
}

/// The alibaba-v2023 rules, from the library's tables.
fn alibaba_rules() -> String {
    let mut text = format!(
        "Rules (/usr/share/doc/gpu-agent/import.md gives the reasons):\n\
         \n\
         Host: one [[gpu]] entry per node-list model. Speed relative to a {}\n\
         ({} TFLOPS FP32, {} GB/s; speed 1.0): the geometric mean of the FP32\n\
         and memory-bandwidth ratios (NVIDIA datasheets), to two decimals.\n\
         \n  {:<8} {:<15} {:>6} {:>6} {:>6}  {}\n",
        alibaba::REFERENCE,
        alibaba::REFERENCE_FP32_TFLOPS,
        alibaba::REFERENCE_MEM_BW_GBS,
        "model",
        "catalogue",
        "mem GB",
        "TFLOPS",
        "GB/s",
        "speed  (taken to be)"
    );
    for m in alibaba::MODELS {
        text += &format!(
            "  {:<8} {:<15} {:>6} {:>6} {:>6}  {:<5}  ({})\n",
            m.trace, m.catalogue, m.mem_gb, m.fp32_tflops, m.mem_bw_gbs, m.speed, m.gpu
        );
    }
    let weights: Vec<String> = alibaba::QOS_WEIGHTS
        .iter()
        .map(|(class, w)| format!("{class} {w}"))
        .collect();
    text += &format!(
        "\n\
         Trace, one task per pod:\n\
         \x20 id        the pod's name\n\
         \x20 arrival   creation_time minus the earliest creation_time among the tasks\n\
         \x20 workload  (deletion_time - scheduled_time) × share, in seconds on the\n\
         \x20           reference GPU; share = gpu_milli/1000 for a one-GPU pod, else 1\n\
         \x20           (a fractional pod becomes a whole-GPU task doing the same GPU work)\n\
         \x20 gpus      num_gpu\n\
         \x20 mem_gb    share × the smallest GPU memory in the node list\n\
         \x20           (16 GB for openb_node_list_gpu_node.csv)\n\
         \x20 weight    by qos: {}\n\
         \x20 deadline  arrival + SLACK × workload\n\
         \n\
         Skipped, under the first reason that applies: num_gpu = 0; an empty\n\
         creation, scheduled or deletion time (never scheduled); deletion_time <=\n\
         scheduled_time; more GPUs than the host has. pod_phase, gpu_spec, CPU and\n\
         memory are not used.\n\
         \n\
         {ALIBABA_EXAMPLE}",
        weights.join(", ")
    );
    text
}

/// The sos rules.
fn sos_rules() -> String {
    format!(
        "Rules (/usr/share/doc/gpu-agent/import.md gives the reasons):\n\
         \n\
         Host: one [[gpu]] entry, m identical {model} devices at speed 1\n\
         (m = 5 for sim_5_machines.txt); the machines are unrelated through the\n\
         runtimes column.\n\
         \n\
         Trace, one task per line N:\n\
         \x20 id        jN\n\
         \x20 arrival   release_tick × tick seconds\n\
         \x20 runtimes  p_0..p_(m-1) × tick seconds\n\
         \x20 workload  min p_i × tick seconds (unused when runtimes are given)\n\
         \x20 mem_gb    0\n\
         \x20 weight    weight\n\
         \x20 deadline  arrival + SLACK × min p_i × tick seconds\n\
         \n\
         Every alpha_i must be floor(0.{alpha} × p_i): the workload was made for the\n\
         sos policy with alpha = 0.{alpha}, its parameter when replaying it.\n\
         \n\
         {SOS_EXAMPLE}",
        model = sos::MODEL,
        alpha = sos::ALPHA_TENTHS,
    )
}

pub fn run(args: Args) -> Result<()> {
    let import = match args.command {
        Command::Import(import) => import,
        Command::Gen(gen) => return gen::run(gen),
    };
    match import.format {
        Format::Alibaba(args) => {
            let options = alibaba::Options {
                gpus: args.gpus,
                from: args.from,
                limit: args.limit,
                slack: args.slack,
            };
            let (conversion, summary) = alibaba::import(&args.pods, &args.nodes, &options)?;
            let skipped = &summary.skipped;
            let text = format!(
                "{} pods in {}: {} tasks ({} fractional-GPU pods made whole-GPU tasks)\n\
                 \x20 skipped {}: {} without GPUs, {} never scheduled (a time missing), \
                 {} with a run time <= 0, {} needing more GPUs than the host's {}\n\
                 \x20 outside the slice: {} created before --from, {} after --limit\n",
                summary.pods,
                args.pods.display(),
                summary.kept,
                summary.fractional,
                skipped.total(),
                skipped.no_gpu,
                skipped.no_time,
                skipped.non_positive_run_time,
                skipped.too_many_gpus,
                summary.devices,
                summary.before_from,
                summary.after_limit,
            );
            finish(&conversion, &summary, "alibaba-v2023", text, &args.output)
        }
        Format::Sos(args) => {
            let options = sos::Options {
                tick_seconds: args.tick_seconds,
                slack: args.slack,
            };
            let (conversion, summary) = sos::import(&args.jobs, &options)?;
            let text = format!(
                "{} jobs in {}: {} tasks, {} machines\n",
                summary.jobs,
                args.jobs.display(),
                summary.jobs,
                summary.machines
            );
            finish(&conversion, &summary, "sos", text, &args.output)
        }
    }
}

/// The summary as `--json` prints it.
#[derive(Serialize)]
struct Report<'a, S: Serialize> {
    format: &'static str,
    #[serde(flatten)]
    summary: &'a S,
    host: &'a Path,
    trace: &'a Path,
}

/// Writes both files (unless there is no task) and reports.
fn finish<S: Serialize>(
    conversion: &Conversion,
    summary: &S,
    format: &'static str,
    text: String,
    output: &Output,
) -> Result<()> {
    if conversion.tasks.is_empty() {
        if !output.json {
            eprint!("{text}");
        }
        bail!("nothing to write: no task");
    }
    conversion.write_files(&output.out_host, &output.out_trace)?;
    if output.json {
        return emit_json(&Report {
            format,
            summary,
            host: &output.out_host,
            trace: &output.out_trace,
        });
    }
    eprint!("{text}");
    eprintln!(
        "wrote {} ({} devices) and {} ({} tasks)",
        output.out_host.display(),
        conversion.devices(),
        output.out_trace.display(),
        conversion.tasks.len()
    );
    for entry in &conversion.host {
        eprintln!("  {}", entry.note);
    }
    Ok(())
}
