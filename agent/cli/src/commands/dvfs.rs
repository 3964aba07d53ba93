//! `gpuctl dvfs`: fit application profiles to measurements, and show the
//! clocks Algorithm 1 chooses (docs/dvfs.md §1, §2).

mod paper;

use std::fmt::Write as _;
use std::io::Write as _;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use clap::{Subcommand, ValueEnum};
use gpu_agent_core::{apps, catalogue};
use gpu_agent_dvfs::fit::{self, Fit, Method};
use gpu_agent_dvfs::{Options, Point, Profile, Search};
use gpu_agent_sim::atomic::AtomicFile;
use gpu_agent_sim::input::measurements::{self, Bases};
use serde::Serialize;

use crate::output::emit_json;
use crate::table::{Align, Table};

/// Fit DVFS application profiles and study the clocks they lead to.
#[derive(clap::Args)]
pub struct Args {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    Fit(FitArgs),
    Show(ShowArgs),
    Paper(paper::PaperArgs),
}

const FIT_EXAMPLE: &str = "Example (the GTX 1080 Ti measurements of the DVFS paper):\n  gpuctl dvfs fit gtx1080ti-dvfs-measurements.csv --base-core 1800 --base-mem 5000 --out gtx1080ti.toml";

/// Fit each application's time and power model to measurements and write
/// the profiles (/usr/share/doc/gpu-agent/formats.md §6).
///
/// The file is a CSV with columns appName, coreF and memF (MHz), time/UNIT and
/// power/W, one row per application and clock pair (others are ignored).
/// Clocks are normalised to the base clocks; per application the time
/// t = t0 + D(delta/fc + (1 - delta)/fm) and the power
/// P = p0 + gamma*fm + c*V^2*fc are fitted with every coefficient >= 0, and
/// the mean absolute percentage error (MAPE) of each is printed. d and t0 are
/// in the file's time unit. Bad rows (a missing column, a time or power that
/// is not positive, a clock outside 0.5 ... 1.5 times its base, fewer than 3
/// clock points for an application) are refused with their line, and nothing
/// is written.
#[derive(clap::Args)]
#[command(after_help = FIT_EXAMPLE)]
struct FitArgs {
    /// The measurements (CSV).
    #[arg(value_name = "MEASUREMENTS.csv")]
    file: PathBuf,
    /// The base (default) core clock, MHz.
    #[arg(long, value_name = "MHZ")]
    base_core: f64,
    /// The base (default) memory clock, MHz.
    #[arg(long, value_name = "MHZ")]
    base_mem: f64,
    /// Write the profiles here (TOML, /usr/share/doc/gpu-agent/formats.md §6).
    #[arg(long, value_name = "APPS.toml")]
    out: PathBuf,
    /// The solver: non-negative least squares, or the authors' positive Lasso
    /// (alpha 0.01, scikit-learn's objective).
    #[arg(long, value_enum, default_value_t = MethodArg::Nnls)]
    method: MethodArg,
    /// Print the fits as JSON instead of a table.
    #[arg(long)]
    json: bool,
}

#[derive(Clone, Copy, ValueEnum)]
enum MethodArg {
    Nnls,
    Lasso,
}

impl From<MethodArg> for Method {
    fn from(m: MethodArg) -> Method {
        match m {
            MethodArg::Nnls => Method::Nnls,
            MethodArg::Lasso => Method::Lasso,
        }
    }
}

/// One application's fit, as `--json` prints it.
#[derive(Serialize)]
struct AppFit {
    name: String,
    p0: f64,
    gamma: f64,
    c: f64,
    delta: f64,
    d: f64,
    t0: f64,
    mape_time: f64,
    mape_power: f64,
}

/// The whole fit, as `--json` prints it.
#[derive(Serialize)]
struct FitReport {
    file: String,
    method: &'static str,
    base_core_mhz: f64,
    base_mem_mhz: f64,
    time_unit: String,
    apps: Vec<AppFit>,
    mean_mape_time: f64,
    mean_mape_power: f64,
}

fn run_fit(args: FitArgs) -> Result<()> {
    for (name, v) in [
        ("--base-core", args.base_core),
        ("--base-mem", args.base_mem),
    ] {
        if !(v.is_finite() && v > 0.0) {
            bail!("{name}: expected a clock in MHz > 0, got {v}");
        }
    }
    let bases = Bases {
        core_mhz: args.base_core,
        mem_mhz: args.base_mem,
    };
    let method = Method::from(args.method);
    let report = fit_file(&args.file, bases, method)?;
    let mut out = AtomicFile::create(&args.out)
        .with_context(|| format!("cannot write {}", args.out.display()))?;
    out.file()
        .write_all(profiles_toml(&report).as_bytes())
        .and_then(|()| out.commit())
        .with_context(|| format!("cannot write {}", args.out.display()))?;
    if args.json {
        return emit_json(&report);
    }
    let mut table = Table::with_header(&[
        ("app", Align::Left),
        ("p0 W", Align::Right),
        ("gamma W", Align::Right),
        ("c W", Align::Right),
        ("delta", Align::Right),
        ("d", Align::Right),
        ("t0", Align::Right),
        ("MAPE time", Align::Right),
        ("MAPE power", Align::Right),
    ]);
    for a in &report.apps {
        table.row(vec![
            a.name.clone(),
            format!("{:.2}", a.p0),
            format!("{:.2}", a.gamma),
            format!("{:.2}", a.c),
            format!("{:.3}", a.delta),
            format!("{:.4}", a.d),
            format!("{:.4}", a.t0),
            format!("{:.2}%", 100.0 * a.mape_time),
            format!("{:.2}%", 100.0 * a.mape_power),
        ]);
    }
    table.row(vec![
        format!("mean of {}", report.apps.len()),
        String::new(),
        String::new(),
        String::new(),
        String::new(),
        String::new(),
        String::new(),
        format!("{:.2}%", 100.0 * report.mean_mape_time),
        format!("{:.2}%", 100.0 * report.mean_mape_power),
    ]);
    crate::output::emit(&table.render())?;
    eprintln!(
        "gpuctl: wrote {} profiles ({}, d and t0 in {}) to {}",
        report.apps.len(),
        method.name(),
        report.time_unit,
        args.out.display()
    );
    Ok(())
}

/// Fits every application of measurement file `path`.
fn fit_file(path: &Path, bases: Bases, method: Method) -> Result<FitReport> {
    let m = measurements::load(path, bases)?;
    let mut fits: Vec<(String, Fit)> = Vec::new();
    for app in &m.apps {
        let f = fit::fit(&app.samples, method)
            .with_context(|| format!("{}:{}: {}", path.display(), app.line, app.name))?;
        fits.push((app.name.clone(), f));
    }
    let n = fits.len() as f64;
    Ok(FitReport {
        file: path.display().to_string(),
        method: method.name(),
        base_core_mhz: bases.core_mhz,
        base_mem_mhz: bases.mem_mhz,
        time_unit: m.time_unit.clone(),
        mean_mape_time: fits.iter().map(|(_, f)| f.mape_time).sum::<f64>() / n,
        mean_mape_power: fits.iter().map(|(_, f)| f.mape_power).sum::<f64>() / n,
        apps: fits
            .iter()
            .map(|(name, f)| AppFit {
                name: name.clone(),
                p0: f.profile.p0,
                gamma: f.profile.gamma,
                c: f.profile.c,
                delta: f.profile.delta,
                d: f.profile.d,
                t0: f.profile.t0,
                mape_time: f.mape_time,
                mape_power: f.mape_power,
            })
            .collect(),
    })
}

/// The profiles as formats.md §6 TOML, with where they came from.
fn profiles_toml(r: &FitReport) -> String {
    let file = Path::new(&r.file)
        .file_name()
        .map_or(r.file.clone(), |f| f.to_string_lossy().into_owned());
    let mut s = format!(
        "# DVFS application profiles (/usr/share/doc/gpu-agent/formats.md §6), fitted by `gpuctl dvfs fit`\n\
         # from {file}: method {}, base clocks {} / {} MHz (core / memory),\n\
         # d and t0 in {}. Mean MAPE: time {:.2}%, power {:.2}%.\n",
        r.method,
        r.base_core_mhz,
        r.base_mem_mhz,
        r.time_unit,
        100.0 * r.mean_mape_time,
        100.0 * r.mean_mape_power
    );
    for a in &r.apps {
        let _ = write!(
            s,
            "\n[[app]]\nname = {}\np0 = {}\ngamma = {}\nc = {}\ndelta = {}\nd = {}\nt0 = {}\n\
             # MAPE: time {:.2}%, power {:.2}%\n",
            toml_string(&a.name),
            round(a.p0),
            round(a.gamma),
            round(a.c),
            round(a.delta),
            round(a.d),
            round(a.t0),
            100.0 * a.mape_time,
            100.0 * a.mape_power
        );
    }
    s
}

/// Six significant digits, written so that TOML reads a float.
fn round(x: f64) -> String {
    let v: f64 = format!("{x:.5e}").parse().expect("a formatted float");
    let s = format!("{v}");
    if s.contains(['.', 'e', 'i', 'N']) {
        s
    } else {
        format!("{s}.0")
    }
}

fn toml_string(s: &str) -> String {
    toml::Value::String(s.to_string()).to_string()
}

const SHOW_EXAMPLE: &str = "Example:\n  gpuctl dvfs show matrixMul --apps apps.toml --gpu A100-SXM4-40GB --chart matrixMul.svg";

/// Print an application's energy-optimal clocks and its time/energy
/// trade-off: the least energy Algorithm 1 reaches under each bound on the
/// run time, from the fastest setting to the optimum.
///
/// The code search solves over a shorter grid (V up to 1.10) than it
/// readjusts over (up to 1.25), so a row of the table can use less energy
/// than the search's optimum; the least energy over every setting the table
/// draws from is then printed beside it, each named (`least_energy` in
/// --json, the search's optimum itself when nothing beats it).
///
/// Clocks are normalised to the GPU's default clocks (MHz too with --gpu);
/// time and energy are relative to default clocks.
#[derive(clap::Args)]
#[command(after_help = SHOW_EXAMPLE)]
struct ShowArgs {
    /// The application's profile name (`default` is built in; it needs --gpu).
    app: String,
    /// The profiles (/usr/share/doc/gpu-agent/formats.md §6).
    #[arg(long, value_name = "APPS.toml")]
    apps: Option<PathBuf>,
    /// The GPU model (a catalogue name, see `gpuctl inspect --help`): clocks
    /// in MHz, and the `default` profile's power.
    #[arg(long, value_name = "MODEL")]
    gpu: Option<String>,
    /// The search: the authors' 0.05 V grid, or the paper's dense one.
    #[arg(long, default_value = "code", value_parser = ["code", "paper"])]
    search: String,
    /// Also draw the trade-off curve into this SVG file.
    #[arg(long, value_name = "FILE.svg")]
    chart: Option<PathBuf>,
    /// Print JSON instead of text.
    #[arg(long)]
    json: bool,
}

/// A point as `show` prints it.
#[derive(Serialize, Clone)]
struct ShownPoint {
    v: f64,
    fc: f64,
    fm: f64,
    core_mhz: Option<f64>,
    mem_mhz: Option<f64>,
    time: f64,
    power_w: f64,
    energy: f64,
    time_rel: f64,
    energy_rel: f64,
}

#[derive(Serialize)]
struct ShowReport {
    app: String,
    gpu: Option<String>,
    search: &'static str,
    default: ShownPoint,
    optimum: ShownPoint,
    saving: f64,
    /// The least energy over every setting the trade-off rows draw from.
    least_energy: ShownPoint,
    trade_off: Vec<ShownPoint>,
}

/// Bounds in the trade-off curve.
const CURVE_POINTS: usize = 11;

fn run_show(args: ShowArgs) -> Result<()> {
    let library = match &args.apps {
        Some(path) => gpu_agent_sim::input::apps::load(path)?,
        None => apps::AppLibrary::default(),
    };
    let Some(app) = library.get(&args.app) else {
        bail!(
            "unknown application {:?}; known: {}",
            args.app,
            library.names().join(", ")
        );
    };
    let model = match &args.gpu {
        Some(name) => Some(catalogue::lookup(name).with_context(|| {
            format!("--gpu: unknown GPU model {name:?} (see gpuctl inspect --help)")
        })?),
        None => None,
    };
    let power = match (app.power.into_option(), model) {
        (Some(p), _) => p,
        (None, Some(m)) => apps::power_model(app, m),
        (None, None) => bail!(
            "{:?} takes its power from the GPU: give --gpu MODEL",
            args.app
        ),
    };
    let profile = Profile::of(app, power);
    let search = Search::parse(&args.search).expect("clap checked the search");
    let options = Options {
        search,
        ..Options::default()
    };
    let default = profile.default_point();
    let shown = |p: &Point| ShownPoint {
        v: p.setting.v,
        fc: p.setting.fc,
        fm: p.setting.fm,
        core_mhz: model.map(|m| p.setting.fc * f64::from(m.core_default_mhz)),
        mem_mhz: model.map(|m| p.setting.fm * f64::from(m.mem_default_mhz)),
        time: p.t,
        power_w: p.p,
        energy: p.energy(),
        time_rel: p.t / default.t,
        energy_rel: p.energy() / default.energy(),
    };
    let optimum = options.solve(&profile);
    // Unbounded, the readjustment search takes the least energy of its
    // whole domain, the table's rows included.
    let least = options
        .constrained(&profile, f64::INFINITY)
        .filter(|p| p.energy() < optimum.energy())
        .unwrap_or(optimum);
    let t_min = options.t_min(&profile);
    let mut trade_off = Vec::new();
    for k in 0..CURVE_POINTS {
        let bound = t_min + (optimum.t - t_min) * k as f64 / (CURVE_POINTS - 1) as f64;
        if let Some(p) = options.constrained(&profile, bound) {
            if trade_off.last().is_none_or(|l: &ShownPoint| l.time != p.t) {
                trade_off.push(shown(&p));
            }
        }
    }
    let report = ShowReport {
        app: args.app.clone(),
        gpu: model.map(|m| m.name.to_string()),
        search: search.name(),
        default: shown(&default),
        optimum: shown(&optimum),
        saving: 1.0 - optimum.energy() / default.energy(),
        least_energy: shown(&least),
        trade_off,
    };
    if let Some(path) = &args.chart {
        crate::plot::trade_off(
            path,
            &format!(
                "{}: least energy under a time bound ({} search)",
                report.app, report.search
            ),
            &report
                .trade_off
                .iter()
                .map(|p| (p.time_rel, p.energy_rel))
                .collect::<Vec<_>>(),
            (report.optimum.time_rel, report.optimum.energy_rel),
            (least.energy() < optimum.energy())
                .then_some((report.least_energy.time_rel, report.least_energy.energy_rel)),
        )?;
    }
    if args.json {
        return emit_json(&report);
    }
    let clocks = |p: &ShownPoint| match (p.core_mhz, p.mem_mhz) {
        (Some(c), Some(m)) => format!("{c:.0} / {m:.0} MHz"),
        _ => String::new(),
    };
    let mut text = format!(
        "{} ({} search): optimum V {:.4}, fc {:.4}, fm {:.4} {}\n  \
         time {:.4} ({:+.1}%), power {:.2} W, energy {:.4} ({:.1}% saved against default clocks)\n\n",
        report.app,
        report.search,
        report.optimum.v,
        report.optimum.fc,
        report.optimum.fm,
        clocks(&report.optimum),
        report.optimum.time,
        100.0 * (report.optimum.time_rel - 1.0),
        report.optimum.power_w,
        report.optimum.energy,
        100.0 * report.saving
    );
    if least.energy() < optimum.energy() {
        let p = &report.least_energy;
        text.truncate(text.len() - 1);
        let _ = writeln!(
            text,
            "exact optimum over the settings of the table below (less energy than the \
             search's optimum above, found on a shorter grid): V {:.4}, fc {:.4}, fm {:.4} {}\n  \
             time {:.4} ({:+.1}%), power {:.2} W, energy {:.4} ({:.1}% saved against default clocks)\n",
            p.v,
            p.fc,
            p.fm,
            clocks(p),
            p.time,
            100.0 * (p.time_rel - 1.0),
            p.power_w,
            p.energy,
            100.0 * (1.0 - p.energy_rel)
        );
    }
    let mut table = Table::with_header(&[
        ("time", Align::Right),
        ("V", Align::Right),
        ("fc", Align::Right),
        ("fm", Align::Right),
        ("clocks", Align::Left),
        ("length", Align::Right),
        ("power W", Align::Right),
        ("energy", Align::Right),
    ]);
    for p in &report.trade_off {
        table.row(vec![
            format!("{:.3}x", p.time_rel),
            format!("{:.4}", p.v),
            format!("{:.4}", p.fc),
            format!("{:.4}", p.fm),
            clocks(p),
            format!("{:.4}", p.time),
            format!("{:.2}", p.power_w),
            format!("{:.3}x", p.energy_rel),
        ]);
    }
    text.push_str("Least energy under a time bound (relative to default clocks):\n");
    text.push_str(&table.render());
    crate::output::emit(&text)
}

/// Runs `gpuctl dvfs`.
pub fn run(args: Args) -> Result<()> {
    match args.command {
        Command::Fit(a) => run_fit(a),
        Command::Show(a) => run_show(a),
        Command::Paper(a) => paper::run(a),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The shipped profiles are what `gpuctl dvfs fit` writes from the
    /// shipped measurements, and meet the ≤ 1 % mean MAPE target.
    #[test]
    fn shipped_profiles_are_reproducible_and_within_target() {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/dvfs");
        for (gpu, core, mem) in [
            ("gtx1080ti", 1800.0, 5000.0),
            ("rtx2070super", 1880.0, 6300.0),
        ] {
            let csv = dir.join(format!("{gpu}-dvfs-measurements.csv"));
            let bases = Bases {
                core_mhz: core,
                mem_mhz: mem,
            };
            let report = fit_file(&csv, bases, Method::Nnls).unwrap();
            assert!(
                report.mean_mape_time <= 0.01,
                "{gpu}: {}",
                report.mean_mape_time
            );
            assert!(
                report.mean_mape_power <= 0.01,
                "{gpu}: {}",
                report.mean_mape_power
            );
            let shipped = std::fs::read_to_string(dir.join(format!("{gpu}-apps.toml"))).unwrap();
            // The file names the CSV it came from by its file name only.
            assert_eq!(
                profiles_toml(&report),
                shipped,
                "{gpu}: regenerate examples/dvfs"
            );
            let lib =
                gpu_agent_sim::input::apps::load(&dir.join(format!("{gpu}-apps.toml"))).unwrap();
            assert_eq!(lib.names().len(), report.apps.len() + 1);
        }
    }

    #[test]
    fn rounded_numbers_read_back_as_floats() {
        assert_eq!(round(218.1), "218.1");
        assert_eq!(round(0.0), "0.0");
        assert_eq!(round(5.0), "5.0");
        assert_eq!(round(1.2345678), "1.23457");
    }
}
