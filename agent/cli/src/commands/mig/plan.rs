//! `gpuctl mig plan`: offline, the fewest GPUs, and their MIG layouts, that
//! serve every model's demand (docs/mig.md §4–5).

use std::io::{IsTerminal, Write as _};
use std::path::PathBuf;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use clap::ValueEnum;
use gpu_agent_migconfig::{Config, Devices, Entry, MigConfigFile, Pos};
use gpu_agent_migplan::input::{self, PlanFile};
use gpu_agent_migplan::{solve, Algorithm, Outcome, PlanError, Problem};
use gpu_agent_sim::atomic::AtomicFile;
use serde::Serialize;

use crate::output::emit_json;
use crate::table::{Align, Table};

const PLAN_EXAMPLE: &str = "Examples:\n  gpuctl mig plan examples/mig-plan.toml\n  gpuctl mig plan examples/mig-plan.toml --algorithm greedy --json\n  gpuctl mig plan examples/mig-plan.toml --out-config plan.yaml --out-assignment plan.csv\n  gpuctl mig apply -f plan.yaml -c plan";

/// Plan MIG layouts: the fewest GPUs whose instances serve every model's
/// demand (Configurable Machine Scheduling).
///
/// PLAN is a TOML file: `model` (a MIG-capable catalogue model), optional
/// `profiles` (default: all but +me), `max_gpus`, `algorithm`, `epsilon`,
/// `time_limit_s`, and the jobs as [[job]] tables (`name`, `demand`,
/// `throughput = { "<profile>" = rate, ... }`) or `jobs = "FILE.csv"` (header
/// `job,demand,<profile>,...`). A CSV job table may also be PLAN itself, with
/// --model. Throughputs are per instance, in the demand's unit; a profile not
/// listed serves 0.
///
/// The configurations are every maximal layout of the model's placement
/// tree. Every plan is checked before anything is written: each demand met,
/// each GPU's layout valid, no fewer GPUs than the LP lower bound. `exact`
/// solves the integer program from greedy's plan and, if its time limit
/// strikes, keeps the best plan found and says it is not proven optimal;
/// `rounding` reports its own bound 2·Σm + |C'|; `greedy` is the fastest.
///
/// Exit status 1 when no plan exists (within max_gpus), with the reason.
#[derive(clap::Args)]
#[command(after_help = PLAN_EXAMPLE)]
pub struct PlanArgs {
    /// The plan file (TOML), or a CSV job table with --model.
    #[arg(value_name = "PLAN.toml")]
    plan: PathBuf,
    /// The algorithm (default: the file's `algorithm`, else exact).
    #[arg(long, value_enum)]
    algorithm: Option<AlgorithmArg>,
    /// Exact's time limit: seconds or a duration such as 90s, 2m (default:
    /// the file's `time_limit_s`, else 10).
    #[arg(long, value_name = "DURATION", value_parser = crate::units::parse_duration)]
    time_limit: Option<f64>,
    /// Rounding's grid ratio (default: the file's `epsilon`, else 0.1).
    #[arg(long, value_name = "EPS")]
    epsilon: Option<f64>,
    /// The GPU model, when PLAN is a CSV job table.
    #[arg(long, value_name = "MODEL")]
    model: Option<String>,
    /// Write the mig-parted v1 file (config `plan`, one entry per GPU), ready
    /// for `gpuctl mig apply -f FILE -c plan`.
    #[arg(long, value_name = "FILE.yaml")]
    out_config: Option<PathBuf>,
    /// Write the assignment: `gpu,device,profile,start,job,throughput`, a row
    /// per instance (an idle one has an empty job).
    #[arg(long, value_name = "FILE.csv")]
    out_assignment: Option<PathBuf>,
    /// Print the summary as JSON: gpus, lower_bound, status, algorithm,
    /// solve_s, lp_value, supply, layouts (and note, rounding when they apply).
    #[arg(long)]
    json: bool,
}

#[derive(Clone, Copy, ValueEnum)]
enum AlgorithmArg {
    Exact,
    Rounding,
    Greedy,
}

impl From<AlgorithmArg> for Algorithm {
    fn from(a: AlgorithmArg) -> Algorithm {
        match a {
            AlgorithmArg::Exact => Algorithm::Exact,
            AlgorithmArg::Rounding => Algorithm::Rounding,
            AlgorithmArg::Greedy => Algorithm::Greedy,
        }
    }
}

/// What `--json` prints when no plan exists.
#[derive(Serialize)]
struct Infeasible<'a> {
    status: &'static str,
    algorithm: Algorithm,
    reason: &'a str,
}

/// Runs `gpuctl mig plan`.
pub fn plan(args: PlanArgs) -> Result<()> {
    let is_csv = args
        .plan
        .extension()
        .is_some_and(|e| e.eq_ignore_ascii_case("csv"));
    let PlanFile {
        problem,
        mut options,
    } = match (&args.model, is_csv) {
        (Some(model), true) => input::load_csv(&args.plan, model)?,
        (None, true) => bail!(
            "{}: a CSV job table needs --model (or a TOML plan with `jobs = \"FILE.csv\"`)",
            args.plan.display()
        ),
        (Some(_), false) => bail!("--model is for CSV job tables; the TOML plan names its model"),
        (None, false) => input::load(&args.plan)?,
    };
    if let Some(a) = args.algorithm {
        options.algorithm = a.into();
    }
    if let Some(t) = args.time_limit {
        if !(t.is_finite() && t > 0.0 && t <= 86_400.0) {
            bail!("--time-limit: expected seconds > 0 and <= 86400, got {t}");
        }
        options.time_limit = Duration::from_secs_f64(t);
    }
    if let Some(e) = args.epsilon {
        if !(e.is_finite() && e > 0.0 && e <= 10.0) {
            bail!("--epsilon: expected a number > 0 and <= 10, got {e}");
        }
        options.epsilon = e;
    }
    let show_progress = std::io::stderr().is_terminal();
    let mut progress = |stage: &str| {
        if show_progress {
            eprintln!("gpuctl: mig plan: {stage}");
        }
    };
    let outcome = match solve(&problem, &options, &mut progress) {
        Ok(o) => o,
        Err(PlanError::Infeasible(reason)) => {
            if args.json {
                emit_json(&Infeasible {
                    status: "infeasible",
                    algorithm: options.algorithm,
                    reason: &reason,
                })?;
            }
            bail!("{}: no plan: {reason}", args.plan.display());
        }
        Err(e) => bail!("{}: {e}", args.plan.display()),
    };
    // Both files are written in full or not at all.
    let mut files = Vec::new();
    if let Some(path) = &args.out_config {
        files.push((path, mig_parted(&outcome).to_yaml()));
    }
    if let Some(path) = &args.out_assignment {
        files.push((path, outcome.plan.assignment_csv(&problem)));
    }
    write_all(&files)?;
    if args.json {
        return emit_json(&outcome.summary(&problem));
    }
    crate::output::emit(&report(&problem, &outcome))?;
    for (path, _) in files {
        eprintln!("wrote {}", path.display());
    }
    Ok(())
}

/// Writes every file or, on the first failure, none.
fn write_all(files: &[(&PathBuf, String)]) -> Result<()> {
    let mut staged = Vec::new();
    for (path, text) in files {
        let mut f =
            AtomicFile::create(path).with_context(|| format!("cannot write {}", path.display()))?;
        f.file()
            .write_all(text.as_bytes())
            .with_context(|| format!("cannot write {}", path.display()))?;
        staged.push((path, f));
    }
    for (path, f) in staged {
        f.commit()
            .with_context(|| format!("cannot write {}", path.display()))?;
    }
    Ok(())
}

/// The plan as a mig-parted v1 file: config `plan`, one entry per GPU
/// (`devices: [g]`), profiles in the order of their first start.
fn mig_parted(outcome: &Outcome) -> MigConfigFile {
    let entries = outcome
        .plan
        .gpus
        .iter()
        .enumerate()
        .map(|(g, gpu)| {
            let mut counts: Vec<(String, u32)> = Vec::new();
            for (inst, _) in &gpu.instances {
                match counts.iter_mut().find(|(p, _)| p == inst.profile.name) {
                    Some((_, n)) => *n += 1,
                    None => counts.push((inst.profile.name.to_string(), 1)),
                }
            }
            Entry::new(Vec::new(), Devices::List(vec![g as u32]), true, counts)
        })
        .collect();
    MigConfigFile {
        configs: vec![Config {
            name: "plan".into(),
            pos: Pos::default(),
            entries,
        }],
    }
}

/// The human report: the summary, each GPU's layout and the assignment.
fn report(problem: &Problem, o: &Outcome) -> String {
    let mut out = format!(
        "{} GPUs of {} (lower bound {}, LP {:.3}), {} by {} in {:.3} s\n",
        o.plan.gpus.len(),
        problem.model.name,
        o.lower_bound,
        o.lp_value,
        match o.status {
            gpu_agent_migplan::Status::Optimal => "optimal",
            gpu_agent_migplan::Status::Feasible => "feasible",
        },
        o.algorithm,
        o.solve_s
    );
    if let Some(note) = &o.note {
        out.push_str(&format!("note: {note}\n"));
    }
    if let Some(r) = &o.rounding {
        let over = if r.all_configurations {
            format!("all {} configurations", r.configurations)
        } else {
            format!(
                "the LP's support ({} of {} configurations)",
                r.configurations,
                problem.configurations.len()
            )
        };
        out.push_str(&format!(
            "rounding bound: 2*{} + {} = {} GPUs over {over}: {}\n",
            r.grid_gpus,
            r.configurations,
            r.bound,
            if r.within { "kept" } else { "BROKEN" }
        ));
    }
    out.push('\n');
    let mut table = Table::with_header(&[
        ("device", Align::Left),
        ("profile", Align::Left),
        ("job", Align::Left),
        ("throughput", Align::Right),
    ]);
    for (g, gpu) in o.plan.gpus.iter().enumerate() {
        for (inst, job) in &gpu.instances {
            let (name, rate) = match (job, problem.block(inst.profile)) {
                (Some(j), Some(i)) => (
                    problem.jobs[*j].name.clone(),
                    format!("{}", problem.jobs[*j].throughput[i]),
                ),
                _ => ("(idle)".to_string(), String::new()),
            };
            table.row(vec![
                format!("gpu/{g}/mig/{}", inst.start),
                inst.profile.name.to_string(),
                name,
                rate,
            ]);
        }
    }
    out.push_str(&table.render());
    out.push('\n');
    let mut jobs = Table::with_header(&[
        ("job", Align::Left),
        ("demand", Align::Right),
        ("supply", Align::Right),
    ]);
    for (job, supply) in problem.jobs.iter().zip(o.plan.supply(problem)) {
        jobs.row(vec![
            job.name.clone(),
            format!("{}", job.demand),
            format!("{supply}"),
        ]);
    }
    out.push_str(&jobs.render());
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_config_file_reads_back_as_mig_parted_v1() {
        let plan = input::load(&PathBuf::from(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../../examples/mig-plan.toml"
        )))
        .unwrap();
        let outcome = solve(&plan.problem, &plan.options, &mut |_| {}).unwrap();
        let yaml = mig_parted(&outcome).to_yaml();
        let file = MigConfigFile::parse(&yaml).unwrap();
        let config = file.config(Some("plan")).unwrap();
        let entries: Vec<(Devices, Vec<(String, u32)>)> = config
            .entries
            .iter()
            .map(|e| {
                (
                    e.devices.clone(),
                    e.mig_devices
                        .iter()
                        .map(|d| (d.profile.clone(), d.count))
                        .collect(),
                )
            })
            .collect();
        let pair = |p: &str, n| (p.to_string(), n);
        assert_eq!(
            entries,
            [
                (
                    Devices::List(vec![0]),
                    vec![pair("4g.20gb", 1), pair("3g.20gb", 1)]
                ),
                (
                    Devices::List(vec![1]),
                    vec![pair("1g.5gb", 4), pair("3g.20gb", 1)]
                ),
            ]
        );
    }
}
