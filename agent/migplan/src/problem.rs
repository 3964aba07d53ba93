//! A planning instance: a GPU model, its block types and configurations, and
//! the jobs with their demands and throughputs.

use gpu_agent_catalogue::catalogue::GpuModel;
use gpu_agent_catalogue::mig::{MigProfile, MigTable};
use gpu_agent_catalogue::placement::{Configuration, Tree};

/// One job (a model to serve).
#[derive(Debug, Clone, PartialEq)]
pub struct Job {
    /// Its name, as the assignment names it.
    pub name: String,
    /// Demand d_j (requests per second, or any unit the throughputs share).
    pub demand: f64,
    /// Throughput f_j(i) of one instance of each block type, in the
    /// problem's profile order; 0: the profile does not serve it.
    pub throughput: Vec<f64>,
}

/// Why an instance cannot be built.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ProblemError {
    /// The model has no MIG table.
    #[error("{0} is not MIG-capable")]
    NotMigCapable(&'static str),
    /// No job, no profile, or a throughput row of the wrong length.
    #[error("{0}")]
    Shape(String),
}

/// A planning instance (docs/mig.md §4.1).
#[derive(Debug, Clone)]
pub struct Problem {
    /// The GPU model every GPU of the plan is.
    pub model: &'static GpuModel,
    /// Block types B, in the order of every per-profile vector here.
    pub profiles: Vec<&'static MigProfile>,
    /// Configurations C: the multisets of the maximal layouts over `profiles`.
    pub configurations: Vec<Configuration>,
    /// σ_i: instances of block type i in configuration σ, per configuration.
    pub counts: Vec<Vec<u32>>,
    /// The jobs J.
    pub jobs: Vec<Job>,
    /// The most GPUs a plan may use, if capped.
    pub max_gpus: Option<u32>,
}

impl Problem {
    /// The instance of `jobs` on `model` over `profiles` (each of the model's
    /// table; `jobs[j].throughput[i]` is for `profiles[i]`).
    pub fn new(
        model: &'static GpuModel,
        profiles: Vec<&'static MigProfile>,
        jobs: Vec<Job>,
        max_gpus: Option<u32>,
    ) -> Result<Problem, ProblemError> {
        let table = model.mig.ok_or(ProblemError::NotMigCapable(model.name))?;
        if profiles.is_empty() {
            return Err(ProblemError::Shape("no profiles to plan with".into()));
        }
        if jobs.is_empty() {
            return Err(ProblemError::Shape("no jobs to plan for".into()));
        }
        for p in &profiles {
            if table.profile(p.id) != Some(p) {
                return Err(ProblemError::Shape(format!(
                    "{} is not a profile of {}",
                    p.name, model.name
                )));
            }
        }
        for job in &jobs {
            if job.throughput.len() != profiles.len() {
                return Err(ProblemError::Shape(format!(
                    "job {}: {} throughputs for {} profiles",
                    job.name,
                    job.throughput.len(),
                    profiles.len()
                )));
            }
        }
        let configurations = Tree::new(table, &profiles).configurations();
        let counts = configurations
            .iter()
            .map(|c| profiles.iter().map(|p| c.count(p.id)).collect())
            .collect();
        Ok(Problem {
            model,
            profiles,
            configurations,
            counts,
            jobs,
            max_gpus,
        })
    }

    /// The model's MIG table.
    pub fn table(&self) -> &'static MigTable {
        self.model.mig.expect("checked in Problem::new")
    }

    /// f_j(i) capped at d_j (docs/mig.md §4.1): what one block can usefully
    /// give a job.
    pub fn capped(&self, job: usize, block: usize) -> f64 {
        let j = &self.jobs[job];
        j.throughput[block].min(j.demand)
    }

    /// The first job no profile serves, if any: then no plan exists.
    pub fn unservable(&self) -> Option<&Job> {
        self.jobs
            .iter()
            .find(|j| j.demand > 0.0 && j.throughput.iter().all(|&f| f <= 0.0))
    }

    /// Blocks of each type on GPUs of configurations `gpus` (indices into
    /// [`Problem::configurations`]).
    pub fn supply(&self, gpus: &[usize]) -> Vec<u32> {
        let mut s = vec![0; self.profiles.len()];
        for &c in gpus {
            for (i, n) in self.counts[c].iter().enumerate() {
                s[i] += n;
            }
        }
        s
    }
}

/// Whether `supply` meets `demand`, with a relative tolerance for sums of
/// floating-point rates.
pub fn meets(supply: f64, demand: f64) -> bool {
    supply >= demand - 1e-9 * demand.abs().max(1.0)
}

#[cfg(test)]
pub(crate) mod testing {
    //! The worked example of docs/mig.md §5.3 and small helpers for tests.

    use super::*;
    use gpu_agent_catalogue::catalogue;

    /// The model by name.
    pub fn model(name: &str) -> &'static GpuModel {
        catalogue::lookup(name).expect("a catalogue model")
    }

    /// Profiles of `model` by name.
    pub fn profiles(model: &'static GpuModel, names: &[&str]) -> Vec<&'static MigProfile> {
        let table = model.mig.expect("MIG-capable");
        names
            .iter()
            .map(|n| {
                table
                    .profiles
                    .iter()
                    .find(|p| p.name == *n)
                    .expect("a profile")
            })
            .collect()
    }

    /// A job.
    pub fn job(name: &str, demand: f64, throughput: &[f64]) -> Job {
        Job {
            name: name.into(),
            demand,
            throughput: throughput.to_vec(),
        }
    }

    /// docs/mig.md §5.3: A100-40GB, profiles 1g/2g/3g/4g/7g, three models; OPT = 2.
    pub fn worked_example() -> Problem {
        let m = model("A100-SXM4-40GB");
        Problem::new(
            m,
            profiles(m, &["1g.5gb", "2g.10gb", "3g.20gb", "4g.20gb", "7g.40gb"]),
            vec![
                job("resnet50", 400.0, &[100.0, 190.0, 270.0, 340.0, 560.0]),
                job("bert-large", 480.0, &[0.0, 150.0, 240.0, 300.0, 500.0]),
                job("llm-7b", 80.0, &[0.0, 0.0, 60.0, 80.0, 150.0]),
            ],
            None,
        )
        .expect("a valid instance")
    }
}

#[cfg(test)]
mod tests {
    use super::testing::*;
    use super::*;

    #[test]
    fn the_worked_example_has_14_configurations() {
        let p = worked_example();
        assert_eq!(p.configurations.len(), 14);
        assert_eq!(p.counts.len(), 14);
        assert_eq!(p.capped(2, 4), 80.0);
        assert_eq!(p.capped(0, 0), 100.0);
        assert!(p.unservable().is_none());
    }

    #[test]
    fn shapes_are_checked() {
        let m = model("A100-SXM4-40GB");
        let ps = profiles(m, &["1g.5gb"]);
        let err = Problem::new(m, ps.clone(), vec![job("a", 1.0, &[1.0, 2.0])], None).unwrap_err();
        assert_eq!(err.to_string(), "job a: 2 throughputs for 1 profiles");
        let t4 = model("T4");
        assert_eq!(
            Problem::new(t4, ps, vec![], None).unwrap_err(),
            ProblemError::NotMigCapable("T4")
        );
    }
}
