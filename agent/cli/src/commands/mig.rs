//! `gpuctl mig`: MIG layouts in NVIDIA mig-parted's v1 format (docs/mig.md §3, §6.2).

mod plan;

use std::io::Read;
use std::path::PathBuf;

use anyhow::{anyhow, Context, Result};
use gpu_agent_dbus::{AgentError, MigLayout};
use gpu_agent_migconfig::{self as migconfig, HostGpu, MigConfigFile};

use crate::client::{block_on, BusArgs, Client, Failure};
use crate::output::{emit, emit_json};
use crate::table::{Align, Table};

/// Show, export and check the GPUs' MIG layouts; plan them.
///
/// Configuration files are NVIDIA mig-parted's (`version: v1`), accepted
/// unchanged: `devices` are the agent's GPU indices, a GPU may be selected by
/// one entry only, and compute-instance profiles (`1c.3g.20gb`) are refused.
#[derive(clap::Args)]
#[command(
    after_help = "Examples:\n  gpuctl mig show\n  gpuctl mig apply -f examples/mig-config.yaml -c balanced\n  gpuctl mig cancel 0\n  gpuctl mig export > current.yaml\n  gpuctl mig assert -f current.yaml -c current\n  gpuctl mig assert -f examples/mig-config.yaml -c balanced\n  gpuctl mig assert -f examples/mig-config.yaml -c balanced --json\n  gpuctl mig plan examples/mig-plan.toml"
)]
pub struct Args {
    #[command(subcommand)]
    command: MigCommand,
}

#[derive(clap::Subcommand)]
enum MigCommand {
    Show(ShowArgs),
    Apply(ApplyArgs),
    Cancel(CancelArgs),
    Export(ExportArgs),
    Assert(AssertArgs),
    Plan(plan::PlanArgs),
}

/// Print each GPU's MIG mode and instances.
#[derive(clap::Args)]
struct ShowArgs {
    /// Only this GPU.
    #[arg(long, value_name = "N")]
    gpu: Option<u32>,
    /// Print a JSON array, one object per GPU.
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    bus: BusArgs,
}

/// Change the GPUs' MIG layouts to a configuration, and follow the change.
///
/// Each GPU whose layout differs drains (no new task goes there, its queued
/// tasks go back to the pending queue, running tasks finish), then takes its
/// new layout, with one MIG device per GPU instance. Prints each step until
/// every changing GPU is stable (exit 0) or failed (exit 1). Admins only.
#[derive(clap::Args)]
struct ApplyArgs {
    /// The v1 file (`-`: standard input).
    #[arg(short, long, value_name = "FILE")]
    file: PathBuf,
    /// The configuration (may be left out when the file has only one).
    #[arg(short, long, value_name = "NAME")]
    config: Option<String>,
    /// With tasks running or queued on a GPU to change: wait for them, or
    /// refuse the whole change.
    #[arg(long, value_enum, default_value = "wait")]
    on_busy: OnBusy,
    /// How long a drain may take (0: no limit): seconds or a duration such as
    /// 90s, 10m, 1h30m; past it that GPU's change fails and it keeps its layout.
    #[arg(long, value_name = "DURATION", default_value = "0", value_parser = crate::units::parse_duration)]
    timeout: f64,
    /// Go ahead when waiting tasks would fit no device afterwards: they are
    /// rejected (without it such a change is refused, nothing changed).
    #[arg(long)]
    reject_stranded: bool,
    /// Allow MIG on with no instance (mig-parted's `all-enabled`: for another
    /// tool to make instances); the GPU then takes no task until a layout
    /// with instances is made. Without it such a configuration is refused.
    #[arg(long)]
    enable_without_instances: bool,
    /// Print one JSON object per step (`gpu`, `state`, `message`).
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    bus: BusArgs,
}

/// Abandon a GPU's layout change while it drains.
///
/// The GPU keeps its layout and its devices take tasks again. Refused once
/// the change is being applied (`Busy`) or when none is under way. Admins
/// only.
#[derive(clap::Args)]
struct CancelArgs {
    /// The GPU (its index).
    gpu: u32,
    #[command(flatten)]
    bus: BusArgs,
}

#[derive(Clone, Copy, clap::ValueEnum)]
enum OnBusy {
    Wait,
    Refuse,
}

/// One step of `gpuctl mig apply --json`.
#[derive(serde::Serialize)]
struct Step {
    gpu: u32,
    state: String,
    message: String,
}

/// Print the host's MIG layout as a mig-parted v1 file that `assert` accepts.
///
/// One configuration; GPUs of one model with equal mode and instances share
/// an entry; `device-filter` only when the host mixes GPU models.
#[derive(clap::Args)]
struct ExportArgs {
    /// Output format.
    #[arg(short, long, value_enum, default_value = "yaml")]
    output: Format,
    /// The configuration's name.
    #[arg(short, long, default_value = "current")]
    label: String,
    /// Print JSON (the same as --output json).
    #[arg(long, conflicts_with = "output")]
    json: bool,
    #[command(flatten)]
    bus: BusArgs,
}

#[derive(Clone, Copy, clap::ValueEnum)]
enum Format {
    Yaml,
    Json,
}

/// Check that the GPUs are as a configuration asks.
///
/// Exit status 0 when every GPU has the requested mode and, with MIG on,
/// exactly the requested instances per profile, and every GPU is selected
/// by some entry; 1 otherwise, with each difference on stderr; 3 when the
/// daemon cannot be reached, 4 when it answered an error (gpuctl(1)).
#[derive(clap::Args)]
struct AssertArgs {
    /// The v1 file (`-`: standard input).
    #[arg(short, long, value_name = "FILE")]
    file: PathBuf,
    /// The configuration (may be left out when the file has only one).
    #[arg(short, long, value_name = "NAME")]
    config: Option<String>,
    /// Only read the file and find the configuration; ask the daemon nothing.
    #[arg(long)]
    valid_config: bool,
    /// Print {"config", "matches", "differences"} (with --valid-config,
    /// {"config", "valid"}); the exit status is as without it.
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    bus: BusArgs,
}

/// What `gpuctl mig assert --json` prints.
#[derive(serde::Serialize)]
struct Asserted<'a> {
    /// The configuration checked.
    config: &'a str,
    /// Whether the GPUs are as it asks.
    matches: bool,
    /// Each place they differ, as stderr names it.
    differences: &'a [String],
}

/// Runs `gpuctl mig`.
pub fn run(args: Args) -> Result<()> {
    match args.command {
        MigCommand::Show(a) => show(a),
        MigCommand::Apply(a) => apply(a),
        MigCommand::Cancel(a) => cancel(a),
        MigCommand::Export(a) => export(a),
        MigCommand::Assert(a) => assert(a),
        MigCommand::Plan(a) => plan::plan(a),
    }
}

fn show(args: ShowArgs) -> Result<()> {
    let layouts = block_on(async {
        let client = Client::connect(&args.bus).await?;
        layouts(&client, args.gpu).await
    })?;
    if args.json {
        return emit_json(&layouts);
    }
    emit(&show_text(&layouts))
}

/// GPU `gpu`'s MIG layout, or every GPU's.
async fn layouts(client: &Client, gpu: Option<u32>) -> Result<Vec<MigLayout>> {
    let mut layouts = Vec::new();
    let gpus: Box<dyn Iterator<Item = u32>> = match gpu {
        Some(g) => Box::new(std::iter::once(g)),
        None => Box::new(0..),
    };
    for g in gpus {
        match client.agent.get_mig_layout(g).await {
            Ok(d) => layouts.push(MigLayout::from_dict(&d).map_err(|e| anyhow!(e))?),
            Err(zbus::Error::MethodError(name, _, _))
                if gpu.is_none() && name.as_str() == no_such_device() =>
            {
                break
            }
            Err(e) => return Err(client.call(async { Err::<(), _>(e) }).await.unwrap_err()),
        }
    }
    Ok(layouts)
}

/// What the entries of configuration `config` that select no GPU of this
/// host (its `layouts`) print on standard error (a file written for several
/// models, as NVIDIA's `config-default.yaml`, names many), and whether no
/// entry selects any.
fn unmatched_text(file: &MigConfigFile, config: &str, layouts: &[MigLayout]) -> (bool, String) {
    let Ok(config) = file.config(Some(config)) else {
        return (false, String::new());
    };
    let gpus: Vec<HostGpu> = layouts
        .iter()
        .map(|l| HostGpu {
            index: l.gpu,
            model: l.model.clone(),
            pci_id: l.pci_device_id,
            pci_subsystem_id: l.pci_subsystem_id,
            mig: None,
        })
        .collect();
    let unmatched = migconfig::unmatched(config, &gpus);
    if unmatched.is_empty() {
        return (false, String::new());
    }
    let none = unmatched.len() == config.entries.len();
    let head = if none {
        format!(
            "configuration {} selects no GPU of this host; no entry matches",
            config.name
        )
    } else {
        format!(
            "{} of the {} entries of configuration {} match no GPU of this host",
            unmatched.len(),
            config.entries.len(),
            config.name
        )
    };
    let mut text = format!("{head}:\n");
    for u in unmatched {
        text.push_str(&format!("  {u}\n"));
    }
    (none, text)
}

/// [`unmatched_text`] on this host's GPUs; nothing where their layouts
/// cannot be read (a GPU whose driver fails a MIG query): the note is told
/// where it can be, and the command's outcome never depends on it.
async fn unmatched_of(client: &Client, file: &MigConfigFile, config: &str) -> (bool, String) {
    match layouts(client, None).await {
        Ok(l) => unmatched_text(file, config, &l),
        Err(_) => (false, String::new()),
    }
}

fn no_such_device() -> String {
    use zbus::DBusError;
    AgentError::NoSuchDevice(String::new()).name().to_string()
}

/// What `gpuctl mig show` prints: a row per GPU, then its instances.
fn show_text(layouts: &[MigLayout]) -> String {
    let mut table = Table::with_header(&[
        ("GPU", Align::Right),
        ("MODEL", Align::Left),
        ("MIG", Align::Left),
        ("STATE", Align::Left),
        ("INSTANCES", Align::Left),
    ]);
    for l in layouts {
        let mode = match (l.capable, l.enabled) {
            (false, _) => "n/a",
            (true, true) => "on",
            (true, false) => "off",
        };
        let instances: Vec<String> = l
            .instances
            .iter()
            .map(|i| format!("{}@{}", i.profile, i.start))
            .collect();
        table.row(vec![
            l.gpu.to_string(),
            l.model.clone(),
            mode.into(),
            l.state.clone(),
            if instances.is_empty() {
                "-".into()
            } else {
                instances.join(" ")
            },
        ]);
    }
    let mut text = table.render();
    for l in layouts.iter().filter(|l| !l.message.is_empty()) {
        text.push_str(&format!("GPU {}: {}\n", l.gpu, l.message));
    }
    text
}

fn export(args: ExportArgs) -> Result<()> {
    let yaml = block_on(async {
        let client = Client::connect(&args.bus).await?;
        client
            .call(client.agent.export_mig_config(&args.label))
            .await
    })?;
    let output = if args.json { Format::Json } else { args.output };
    match output {
        Format::Yaml => emit(&yaml),
        Format::Json => {
            let file = MigConfigFile::parse(&yaml)
                .map_err(|e| anyhow!("the daemon's export does not read back: {e}"))?;
            emit_json(&file)
        }
    }
}

/// Reads the v1 file at `path` (`-`: standard input) and finds its
/// configuration `name`: the file's text, the file, and the configuration's
/// name. Read here first, before the daemon, so that errors name the file.
fn read_config(path: &PathBuf, name: Option<&str>) -> Result<(String, MigConfigFile, String)> {
    let yaml = read(path)?;
    let shown = path.display();
    let file = MigConfigFile::parse(&yaml).map_err(|e| anyhow!("{shown}: {e}"))?;
    let config = file
        .config(name)
        .map_err(|e| anyhow!("{shown}: {e}"))?
        .name
        .clone();
    Ok((yaml, file, config))
}

/// Reads `path` (`-`: standard input).
fn read(path: &PathBuf) -> Result<String> {
    if path.as_os_str() == "-" {
        let mut text = String::new();
        std::io::stdin()
            .read_to_string(&mut text)
            .context("cannot read standard input")?;
        Ok(text)
    } else {
        std::fs::read_to_string(path).with_context(|| format!("cannot read {}", path.display()))
    }
}

fn assert(args: AssertArgs) -> Result<()> {
    let (yaml, file, config) = read_config(&args.file, args.config.as_deref())?;
    let shown = args.file.display();
    if args.valid_config {
        if args.json {
            return emit_json(&serde_json::json!({ "config": config, "valid": true }));
        }
        return emit(&format!("{shown}: configuration {config} is valid\n"));
    }
    let (ok, mismatches) = block_on(async {
        let client = Client::connect(&args.bus).await?;
        let found = client
            .call(client.agent.assert_mig_config(&yaml, &config))
            .await?;
        eprint!("{}", unmatched_of(&client, &file, &config).await.1);
        Ok(found)
    })
    .with_context(|| shown.to_string())?;
    if args.json {
        emit_json(&Asserted {
            config: &config,
            matches: ok,
            differences: &mismatches,
        })?;
    } else if ok {
        return emit(&format!("the GPUs are as configuration {config} asks\n"));
    }
    if ok {
        return Ok(());
    }
    for m in &mismatches {
        eprintln!("{m}");
    }
    Err(Failure::negative(format!(
        "the GPUs differ from configuration {config} in {} place(s)",
        mismatches.len()
    )))
}

fn apply(args: ApplyArgs) -> Result<()> {
    use futures_util::StreamExt;
    use zbus::zvariant::{OwnedValue, Value};
    let (yaml, file, config) = read_config(&args.file, args.config.as_deref())?;
    let shown = args.file.display();
    let on_busy = match args.on_busy {
        OnBusy::Wait => "wait",
        OnBusy::Refuse => "refuse",
    };
    let owned = |v: Value<'_>| OwnedValue::try_from(v).expect("a plain value");
    let options: gpu_agent_dbus::Dict = [
        ("on_busy".to_string(), owned(Value::from(on_busy))),
        ("timeout_s".to_string(), owned(Value::from(args.timeout))),
        (
            "reject_stranded".to_string(),
            owned(Value::from(args.reject_stranded)),
        ),
        (
            "enable_without_instances".to_string(),
            owned(Value::from(args.enable_without_instances)),
        ),
    ]
    .into();
    let failed = block_on(async {
        let client = Client::connect(&args.bus).await?;
        // Subscribe first: no step is missed.
        let mut steps = client.call(client.agent.receive_mig_changed()).await?;
        let gpus = client
            .call(client.agent.apply_mig_config(&yaml, &config, options))
            .await
            .with_context(|| shown.to_string())?;
        let (none, unmatched) = unmatched_of(&client, &file, &config).await;
        eprint!("{unmatched}");
        if gpus.is_empty() {
            let text = if none {
                "nothing changed\n".to_string()
            } else {
                format!("the GPUs are already as configuration {config} asks\n")
            };
            // With --json, standard output has a line per step, and there is none.
            if args.json {
                eprint!("{text}");
            } else {
                emit(&text)?;
            }
            return Ok(Vec::new());
        }
        let mut left: std::collections::BTreeSet<u32> = gpus.iter().copied().collect();
        let mut failed = Vec::new();
        if !args.json {
            let names: Vec<String> = gpus.iter().map(u32::to_string).collect();
            emit(&format!("changing GPU(s) {}\n", names.join(", ")))?;
        }
        while !left.is_empty() {
            let step = steps.next().await.context("the bus connection closed")?;
            let step = step
                .args()
                .map_err(|e| anyhow!("the daemon sent a bad MigChanged signal: {e}"))?;
            if !left.contains(&step.gpu) {
                continue;
            }
            if args.json {
                let line = serde_json::to_string(&Step {
                    gpu: step.gpu,
                    state: step.state.to_string(),
                    message: step.message.to_string(),
                })?;
                emit(&format!("{line}\n"))?;
            } else {
                emit(&format!(
                    "GPU {}: {} {}\n",
                    step.gpu, step.state, step.message
                ))?;
            }
            match step.state {
                "stable" => {
                    left.remove(&step.gpu);
                }
                "failed" | "reset-required" => {
                    left.remove(&step.gpu);
                    failed.push(step.gpu);
                }
                _ => {}
            }
        }
        Ok(failed)
    })?;
    if !failed.is_empty() {
        let names: Vec<String> = failed.iter().map(u32::to_string).collect();
        return Err(Failure::negative(format!(
            "the change of GPU(s) {} did not complete",
            names.join(", ")
        )));
    }
    Ok(())
}

fn cancel(args: CancelArgs) -> Result<()> {
    block_on(async {
        let client = Client::connect(&args.bus).await?;
        client
            .call(client.agent.cancel_mig_change(args.gpu))
            .await
            .with_context(|| format!("GPU {}", args.gpu))
    })?;
    emit(&format!(
        "GPU {}: change cancelled; the layout is unchanged and its devices take tasks again\n",
        args.gpu
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use gpu_agent_dbus::MigInstance;

    #[test]
    fn show_lists_gpus_and_their_instances() {
        let on = MigLayout {
            gpu: 0,
            model: "A100-SXM4-40GB".into(),
            pci_device_id: Some(0x20B0_10DE),
            pci_subsystem_id: None,
            capable: true,
            enabled: true,
            pending: true,
            state: "stable".into(),
            message: String::new(),
            instances: vec![MigInstance {
                profile: "7g.40gb".into(),
                profile_id: 0,
                start: 0,
                memory_gb: 39.25,
                gpu_instance: 1,
                compute_instance: 0,
                uuid: "MIG-x".into(),
            }],
        };
        let off = MigLayout {
            gpu: 1,
            model: "V100-SXM2-32GB".into(),
            pci_device_id: Some(0x1DB5_10DE),
            pci_subsystem_id: None,
            capable: false,
            enabled: false,
            pending: false,
            state: "stable".into(),
            message: String::new(),
            instances: vec![],
        };
        let pending = MigLayout {
            gpu: 2,
            enabled: false,
            state: "reset-required".into(),
            message: "MIG mode turns on at the next GPU reset".into(),
            instances: vec![],
            ..on.clone()
        };
        let text = show_text(&[on, off, pending]);
        let lines: Vec<&str> = text.lines().map(str::trim_end).collect();
        assert_eq!(lines.len(), 5, "{text}");
        assert!(
            lines[1].ends_with("A100-SXM4-40GB  on   stable          7g.40gb@0"),
            "{text}"
        );
        assert!(
            lines[2].contains("n/a") && lines[2].ends_with('-'),
            "{text}"
        );
        assert_eq!(lines[4], "GPU 2: MIG mode turns on at the next GPU reset");
    }
}
