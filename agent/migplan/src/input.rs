//! The plan file (docs/mig.md §5.1): TOML with `[[job]]` tables or a `jobs` CSV
//! table. Every error names the file, the line and the key; nothing partial
//! is returned.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use gpu_agent_catalogue::catalogue::{self, GpuModel};
use gpu_agent_catalogue::mig::MigProfile;
use gpu_agent_input::{line_of, parse_toml, read_text};
use serde::Deserialize;
use toml::Spanned;

use crate::problem::{Job, Problem};
use crate::solve::Options;

/// A bad plan file: `file:line: key: message`.
pub use gpu_agent_input::InputError;

/// A read plan file: the instance and how to solve it.
#[derive(Debug, Clone)]
pub struct PlanFile {
    /// The instance.
    pub problem: Problem,
    /// The algorithm, ε and time limit (defaults where the file is silent).
    pub options: Options,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawPlan {
    model: Spanned<String>,
    max_gpus: Option<Spanned<i64>>,
    profiles: Option<Spanned<Vec<Spanned<String>>>>,
    algorithm: Option<Spanned<String>>,
    epsilon: Option<Spanned<f64>>,
    time_limit_s: Option<Spanned<f64>>,
    jobs: Option<Spanned<String>>,
    #[serde(default)]
    job: Vec<RawJob>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawJob {
    name: Spanned<String>,
    demand: Spanned<f64>,
    throughput: Spanned<BTreeMap<Spanned<String>, Spanned<f64>>>,
}

/// Reads a TOML plan file.
pub fn load(path: &Path) -> Result<PlanFile, InputError> {
    let text = read_text(path)?;
    parse(path, &text, &|csv: &Path| read_text(csv))
}

/// Reads a CSV job table as a plan for `model` over the profiles its header
/// names, with default options.
pub fn load_csv(path: &Path, model: &str) -> Result<PlanFile, InputError> {
    let text = read_text(path)?;
    let err = |m: String| InputError::at(path, None, None, m);
    let model = lookup_model(model).map_err(err)?;
    let table = model.mig.expect("lookup_model checks");
    let (profiles, jobs) = parse_csv(path, &text, table, None)?;
    let problem = Problem::new(model, profiles, jobs, None).map_err(|e| err(e.to_string()))?;
    Ok(PlanFile {
        problem,
        options: Options::default(),
    })
}

fn lookup_model(name: &str) -> Result<&'static GpuModel, String> {
    let mig: Vec<&str> = catalogue::CATALOGUE
        .iter()
        .filter(|m| m.mig_capable())
        .map(|m| m.name)
        .collect();
    match catalogue::lookup(name) {
        Some(m) if m.mig_capable() => Ok(m),
        Some(m) => Err(format!(
            "{} is not MIG-capable; MIG models: {}",
            m.name,
            mig.join(", ")
        )),
        None => Err(format!(
            "unknown GPU model {name:?}; MIG models: {}",
            mig.join(", ")
        )),
    }
}

/// Parses TOML plan `text` (from `path`); `read_csv` reads a `jobs` table.
pub fn parse(
    path: &Path,
    text: &str,
    read_csv: &dyn Fn(&Path) -> Result<String, InputError>,
) -> Result<PlanFile, InputError> {
    let at = |offset: Option<usize>, key: Option<&str>, message: String| {
        InputError::at(
            path,
            offset.map(|o| line_of(text, o)),
            key.map(str::to_string),
            message,
        )
    };
    let raw: RawPlan = parse_toml(path, text)?;
    let model = lookup_model(raw.model.get_ref())
        .map_err(|m| at(Some(raw.model.span().start), Some("model"), m))?;
    let table = model.mig.expect("lookup_model checks");
    let names: Vec<&str> = table.profiles.iter().map(|p| p.name).collect();
    let profiles: Vec<&'static MigProfile> = match &raw.profiles {
        None => table
            .profiles
            .iter()
            .filter(|p| !p.name.ends_with("+me"))
            .collect(),
        Some(list) => {
            let mut out: Vec<&'static MigProfile> = Vec::new();
            for (k, name) in list.get_ref().iter().enumerate() {
                let key = format!("profiles[{k}]");
                let p = table
                    .profiles
                    .iter()
                    .find(|p| p.name == name.get_ref())
                    .ok_or_else(|| {
                        at(
                            Some(name.span().start),
                            Some(&key),
                            format!(
                                "{:?} is not a profile of {}; its profiles: {}",
                                name.get_ref(),
                                model.name,
                                names.join(", ")
                            ),
                        )
                    })?;
                if out.iter().any(|q| q.id == p.id) {
                    return Err(at(
                        Some(name.span().start),
                        Some(&key),
                        format!("{} is listed twice", p.name),
                    ));
                }
                out.push(p);
            }
            if out.is_empty() {
                return Err(at(
                    Some(list.span().start),
                    Some("profiles"),
                    "expected at least one profile".into(),
                ));
            }
            out
        }
    };
    let max_gpus = match &raw.max_gpus {
        None => None,
        Some(v) if (1..=4096).contains(v.get_ref()) => Some(*v.get_ref() as u32),
        Some(v) => {
            return Err(at(
                Some(v.span().start),
                Some("max_gpus"),
                format!("expected an integer from 1 to 4096, got {}", v.get_ref()),
            ))
        }
    };
    let mut options = Options::default();
    if let Some(a) = &raw.algorithm {
        options.algorithm = a
            .get_ref()
            .parse()
            .map_err(|m| at(Some(a.span().start), Some("algorithm"), m))?;
    }
    if let Some(e) = &raw.epsilon {
        let v = *e.get_ref();
        if !(v.is_finite() && v > 0.0 && v <= 10.0) {
            return Err(at(
                Some(e.span().start),
                Some("epsilon"),
                format!("expected a number > 0 and <= 10, got {v}"),
            ));
        }
        options.epsilon = v;
    }
    if let Some(t) = &raw.time_limit_s {
        let v = *t.get_ref();
        if !(v.is_finite() && v > 0.0 && v <= 86_400.0) {
            return Err(at(
                Some(t.span().start),
                Some("time_limit_s"),
                format!("expected seconds > 0 and <= 86400, got {v}"),
            ));
        }
        options.time_limit = Duration::from_secs_f64(v);
    }
    let jobs = match (&raw.jobs, raw.job.is_empty()) {
        (Some(file), false) => {
            return Err(at(
                Some(file.span().start),
                Some("jobs"),
                "give the jobs either as [[job]] tables or as a `jobs` CSV file, not both".into(),
            ))
        }
        (None, true) => {
            return Err(at(
                None,
                None,
                "no jobs: add [[job]] tables or `jobs = \"FILE.csv\"`".into(),
            ))
        }
        (Some(file), true) => {
            let csv = path.parent().unwrap_or(Path::new(".")).join(file.get_ref());
            let csv_text = read_csv(&csv)?;
            parse_csv(&csv, &csv_text, table, Some(&profiles))?.1
        }
        (None, false) => {
            let mut jobs = Vec::new();
            for (k, job) in raw.job.iter().enumerate() {
                jobs.push(toml_job(&at, k, job, &profiles, model)?);
            }
            jobs
        }
    };
    if let Some((k, dup)) = duplicate_name(&jobs) {
        let span = raw.job.get(k).map(|j| j.name.span().start);
        return Err(at(
            span,
            Some(&format!("job[{k}].name")),
            format!("job {dup:?} is named twice"),
        ));
    }
    let problem =
        Problem::new(model, profiles, jobs, max_gpus).map_err(|e| at(None, None, e.to_string()))?;
    Ok(PlanFile { problem, options })
}

/// Builds an error from a byte offset, a key and a message.
type At<'a> = dyn Fn(Option<usize>, Option<&str>, String) -> InputError + 'a;

fn toml_job(
    at: &At,
    k: usize,
    job: &RawJob,
    profiles: &[&'static MigProfile],
    model: &GpuModel,
) -> Result<Job, InputError> {
    let key = |field: &str| format!("job[{k}].{field}");
    let name = job.name.get_ref().trim();
    if name.is_empty() {
        return Err(at(
            Some(job.name.span().start),
            Some(&key("name")),
            "expected a non-empty name".into(),
        ));
    }
    let demand = *job.demand.get_ref();
    if !(demand.is_finite() && demand > 0.0) {
        return Err(at(
            Some(job.demand.span().start),
            Some(&key("demand")),
            format!("expected a number > 0, got {demand}"),
        ));
    }
    let mut throughput = vec![0.0; profiles.len()];
    for (profile, rate) in job.throughput.get_ref() {
        let k2 = key(&format!("throughput.{}", profile.get_ref()));
        let i = block_of(profiles, model, profile.get_ref())
            .map_err(|m| at(Some(profile.span().start), Some(&k2), m))?;
        let v = *rate.get_ref();
        if !(v.is_finite() && v >= 0.0) {
            return Err(at(
                Some(rate.span().start),
                Some(&k2),
                format!("expected a number >= 0, got {v}"),
            ));
        }
        throughput[i] = v;
    }
    Ok(Job {
        name: name.to_string(),
        demand,
        throughput,
    })
}

/// The index of profile `name` among `profiles`, or why it is not there.
fn block_of(profiles: &[&MigProfile], model: &GpuModel, name: &str) -> Result<usize, String> {
    if let Some(i) = profiles.iter().position(|p| p.name == name) {
        return Ok(i);
    }
    let table = model.mig.expect("MIG-capable");
    let listed: Vec<&str> = profiles.iter().map(|p| p.name).collect();
    if table.profiles.iter().any(|p| p.name == name) {
        Err(format!(
            "{name} is not among the profiles planned with ({})",
            listed.join(", ")
        ))
    } else {
        Err(format!(
            "{name:?} is not a profile of {}; planned with: {}",
            model.name,
            listed.join(", ")
        ))
    }
}

fn duplicate_name(jobs: &[Job]) -> Option<(usize, &str)> {
    jobs.iter().enumerate().find_map(|(k, j)| {
        jobs[..k]
            .iter()
            .any(|o| o.name == j.name)
            .then_some((k, j.name.as_str()))
    })
}

/// Parses a CSV job table: header `job,demand,<profile>,…`, a row per job, an
/// empty cell 0. With `profiles`, every header profile must be one of them
/// (missing ones serve 0); without, the header's profiles are the ones
/// planned with.
fn parse_csv(
    path: &Path,
    text: &str,
    table: &'static gpu_agent_catalogue::mig::MigTable,
    profiles: Option<&[&'static MigProfile]>,
) -> Result<(Vec<&'static MigProfile>, Vec<Job>), InputError> {
    let at = |line: Option<u64>, key: Option<String>, message: String| {
        InputError::at(path, line, key, message)
    };
    let mut reader = csv::ReaderBuilder::new()
        .has_headers(false)
        .trim(csv::Trim::All)
        .flexible(true)
        .from_reader(text.as_bytes());
    let mut records = reader.records();
    let header = match records.next() {
        None => {
            return Err(at(
                None,
                None,
                "empty: expected a header `job,demand,<profile>,…`".into(),
            ))
        }
        Some(r) => r.map_err(|e| at(e.position().map(|p| p.line()), None, e.to_string()))?,
    };
    if header.get(0) != Some("job") || header.get(1) != Some("demand") {
        return Err(at(
            Some(1),
            None,
            "the header must begin `job,demand`, then profile names".into(),
        ));
    }
    let planned: Vec<&'static MigProfile> = match profiles {
        Some(p) => p.to_vec(),
        None => table
            .profiles
            .iter()
            .filter(|p| header.iter().skip(2).any(|h| h == p.name))
            .collect(),
    };
    let names: Vec<&str> = table.profiles.iter().map(|p| p.name).collect();
    let mut columns: Vec<usize> = Vec::new();
    for (c, h) in header.iter().enumerate().skip(2) {
        let key = Some(format!("column {h}"));
        let Some(p) = table.profiles.iter().find(|p| p.name == h) else {
            return Err(at(
                Some(1),
                key,
                format!(
                    "not a profile of this model; its profiles: {}",
                    names.join(", ")
                ),
            ));
        };
        let Some(i) = planned.iter().position(|q| q.id == p.id) else {
            return Err(at(
                Some(1),
                key,
                "not among the profiles planned with".into(),
            ));
        };
        if columns.contains(&i) {
            return Err(at(Some(1), key, format!("column {c} repeats it")));
        }
        columns.push(i);
    }
    if planned.is_empty() {
        return Err(at(Some(1), None, "the header names no profile".into()));
    }
    let mut jobs = Vec::new();
    for record in records {
        let record = record.map_err(|e| at(e.position().map(|p| p.line()), None, e.to_string()))?;
        let line = record.position().map(|p| p.line());
        if record.iter().all(str::is_empty) {
            continue;
        }
        if record.len() != header.len() {
            return Err(at(
                line,
                None,
                format!("{} fields, the header has {}", record.len(), header.len()),
            ));
        }
        let name = record[0].to_string();
        if name.is_empty() {
            return Err(at(
                line,
                Some("column job".into()),
                "expected a name".into(),
            ));
        }
        let number = |c: usize, positive: bool| -> Result<f64, InputError> {
            let cell = &record[c];
            let key = Some(format!("column {}", &header[c]));
            if cell.is_empty() {
                return if positive {
                    Err(at(line, key, "expected a number > 0".into()))
                } else {
                    Ok(0.0)
                };
            }
            let v: f64 = cell.parse().map_err(|_| {
                at(
                    line,
                    key.clone(),
                    format!("expected a number, got {cell:?}"),
                )
            })?;
            let ok = v.is_finite() && if positive { v > 0.0 } else { v >= 0.0 };
            if ok {
                Ok(v)
            } else {
                let want = if positive { "> 0" } else { ">= 0" };
                Err(at(
                    line,
                    key,
                    format!("expected a number {want}, got {cell}"),
                ))
            }
        };
        let demand = number(1, true)?;
        let mut throughput = vec![0.0; planned.len()];
        for (k, &i) in columns.iter().enumerate() {
            throughput[i] = number(k + 2, false)?;
        }
        if jobs.iter().any(|j: &Job| j.name == name) {
            return Err(at(
                line,
                Some("column job".into()),
                format!("job {name:?} is named twice"),
            ));
        }
        jobs.push(Job {
            name,
            demand,
            throughput,
        });
    }
    if jobs.is_empty() {
        return Err(at(None, None, "no job rows".into()));
    }
    Ok((planned, jobs))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::solve::Algorithm;

    const EXAMPLE: &str = r#"model = "A100-SXM4-40GB"
max_gpus = 8
profiles = ["1g.5gb", "2g.10gb", "3g.20gb", "4g.20gb", "7g.40gb"]
algorithm = "exact"
epsilon = 0.1
time_limit_s = 10

[[job]]
name = "resnet50"
demand = 400
throughput = { "1g.5gb" = 100, "2g.10gb" = 190, "3g.20gb" = 270, "4g.20gb" = 340, "7g.40gb" = 560 }

[[job]]
name = "bert-large"
demand = 480
throughput = { "2g.10gb" = 150, "3g.20gb" = 240, "4g.20gb" = 300, "7g.40gb" = 500 }

[[job]]
name = "llm-7b"
demand = 80
throughput = { "3g.20gb" = 60, "4g.20gb" = 80, "7g.40gb" = 150 }
"#;

    const CSV: &str = "job,demand,1g.5gb,2g.10gb,3g.20gb,4g.20gb,7g.40gb\n\
                       resnet50,400,100,190,270,340,560\n\
                       bert-large,480,,150,240,300,500\n\
                       llm-7b,80,,,60,80,150\n";

    fn no_csv(p: &Path) -> Result<String, InputError> {
        match p.file_name().and_then(|f| f.to_str()) {
            Some("jobs.csv") => Ok(CSV.to_string()),
            _ => Err(InputError::at(p, None, None, "cannot read: not found")),
        }
    }

    fn parse(text: &str) -> Result<PlanFile, String> {
        super::parse(Path::new("plan.toml"), text, &no_csv).map_err(|e| e.to_string())
    }

    #[test]
    fn reads_the_specs_example() {
        let f = parse(EXAMPLE).unwrap();
        let p = &f.problem;
        assert_eq!(p.model.name, "A100-SXM4-40GB");
        assert_eq!(p.max_gpus, Some(8));
        assert_eq!(p.configurations.len(), 14);
        assert_eq!(p.jobs[1].throughput, [0.0, 150.0, 240.0, 300.0, 500.0]);
        assert_eq!(f.options.algorithm, Algorithm::Exact);
        assert_eq!(f.options.time_limit, Duration::from_secs(10));
    }

    #[test]
    fn the_csv_table_gives_the_same_jobs() {
        let head = EXAMPLE.split("[[job]]").next().unwrap();
        let f = parse(&format!("{head}jobs = \"jobs.csv\"\n")).unwrap();
        assert_eq!(f.problem.jobs, parse(EXAMPLE).unwrap().problem.jobs);
        let direct = super::parse_csv(
            Path::new("jobs.csv"),
            CSV,
            &gpu_agent_catalogue::mig::A100_40GB,
            None,
        )
        .unwrap();
        assert_eq!(direct.0.len(), 5);
        assert_eq!(direct.1, f.problem.jobs);
    }

    #[test]
    fn defaults_plan_with_all_but_me() {
        let f = parse(
            "model = \"H100-SXM5-80GB\"\n[[job]]\nname = \"a\"\ndemand = 1\nthroughput = { \"1g.10gb\" = 1 }\n",
        )
        .unwrap();
        let names: Vec<&str> = f.problem.profiles.iter().map(|p| p.name).collect();
        assert_eq!(
            names,
            ["1g.10gb", "1g.20gb", "2g.20gb", "3g.40gb", "4g.40gb", "7g.80gb"]
        );
        assert_eq!(f.problem.configurations.len(), 38);
    }

    #[test]
    fn malformed_plans_are_named() {
        let cases: &[(&str, &str, &str)] = &[
            ("model = \"A100-SXM4-40GB\"", "model = \"T4\"", "plan.toml:1: model: T4 is not MIG-capable"),
            ("model = \"A100-SXM4-40GB\"", "model = \"B200\"", "plan.toml:1: model: unknown GPU model \"B200\""),
            ("max_gpus = 8", "max_gpus = 0", "plan.toml:2: max_gpus: expected an integer from 1 to 4096, got 0"),
            ("\"7g.40gb\"]", "\"7g.80gb\"]", "plan.toml:3: profiles[4]: \"7g.80gb\" is not a profile of A100-SXM4-40GB"),
            ("\"7g.40gb\"]", "\"1g.5gb\"]", "plan.toml:3: profiles[4]: 1g.5gb is listed twice"),
            ("algorithm = \"exact\"", "algorithm = \"fast\"", "plan.toml:4: algorithm: unknown algorithm \"fast\""),
            ("epsilon = 0.1", "epsilon = 0", "plan.toml:5: epsilon: expected a number > 0"),
            ("time_limit_s = 10", "time_limit_s = -1", "plan.toml:6: time_limit_s: expected seconds > 0"),
            ("demand = 480", "demand = -5", "plan.toml:15: job[1].demand: expected a number > 0, got -5"),
            ("\"4g.20gb\" = 80,", "\"4g.20gb\" = -80,", "plan.toml:21: job[2].throughput.4g.20gb: expected a number >= 0, got -80"),
            ("{ \"2g.10gb\" = 150", "{ \"2g.20gb\" = 150", "plan.toml:16: job[1].throughput.2g.20gb: \"2g.20gb\" is not a profile of A100-SXM4-40GB"),
            ("name = \"llm-7b\"", "name = \"resnet50\"", "plan.toml:19: job[2].name: job \"resnet50\" is named twice"),
            ("name = \"llm-7b\"", "nmae = \"llm-7b\"", "plan.toml:19: job: unknown field `nmae`"),
            ("demand = 80\n", "demand = \"80\"\n", "plan.toml:20: job.demand: invalid type: string \"80\", expected f64"),
        ];
        for (from, to, want) in cases {
            assert!(EXAMPLE.contains(from), "{from}");
            let got = parse(&EXAMPLE.replacen(from, to, 1)).unwrap_err();
            assert!(
                got.starts_with(want),
                "{from} -> {to}:\n got {got}\nwant {want}"
            );
        }
        // A profile of the model left out of `profiles`.
        let narrow = EXAMPLE.replace(", \"7g.40gb\"]", "]");
        let got = parse(&narrow).unwrap_err();
        assert!(
            got.starts_with("plan.toml:11: job[0].throughput.7g.40gb: 7g.40gb is not among the profiles planned with"),
            "{got}"
        );
        let head = EXAMPLE.split("[[job]]").next().unwrap();
        assert_eq!(
            parse(head).unwrap_err(),
            "plan.toml: no jobs: add [[job]] tables or `jobs = \"FILE.csv\"`"
        );
        assert_eq!(
            parse(&format!("{head}jobs = \"other.csv\"\n")).unwrap_err(),
            "other.csv: cannot read: not found"
        );
    }

    #[test]
    fn malformed_csv_tables_are_named() {
        let csv = |text: &str| {
            super::parse_csv(
                Path::new("jobs.csv"),
                text,
                &gpu_agent_catalogue::mig::A100_40GB,
                None,
            )
            .map(|_| ())
            .unwrap_err()
            .to_string()
        };
        assert_eq!(
            csv("job,demand,1g.5gb\na,10,x\n"),
            "jobs.csv:2: column 1g.5gb: expected a number, got \"x\""
        );
        assert_eq!(
            csv("job,demand,1g.5gb\na,,1\n"),
            "jobs.csv:2: column demand: expected a number > 0"
        );
        assert_eq!(
            csv("job,demand,1g.5gb\na,1,1\nb,2\n"),
            "jobs.csv:3: 2 fields, the header has 3"
        );
        assert!(csv("job,demand,9g.1gb\na,1,1\n")
            .starts_with("jobs.csv:1: column 9g.1gb: not a profile"));
        assert_eq!(
            csv("name,demand,1g.5gb\n"),
            "jobs.csv:1: the header must begin `job,demand`, then profile names"
        );
        assert_eq!(
            csv("job,demand,1g.5gb\na,1,1\na,2,2\n"),
            "jobs.csv:3: column job: job \"a\" is named twice"
        );
    }
}
