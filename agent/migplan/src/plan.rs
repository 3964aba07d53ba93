//! A plan: each GPU's layout and the job of each instance; its verification
//! and its outputs (docs/mig.md §5.2).

use std::fmt::Write as _;

use gpu_agent_catalogue::placement::{self, Configuration, Instance};
use serde::Serialize;

use crate::problem::{meets, Problem};
use crate::solve::Algorithm;

/// One GPU of a plan.
#[derive(Debug, Clone, PartialEq)]
pub struct GpuPlan {
    /// Its configuration.
    pub configuration: Configuration,
    /// Its instances by start, each with the job it serves (`None`: idle).
    pub instances: Vec<(Instance, Option<usize>)>,
}

/// GPUs, each with a layout and the jobs of its instances.
#[derive(Debug, Clone, PartialEq)]
pub struct Plan {
    /// The GPUs, largest configuration first.
    pub gpus: Vec<GpuPlan>,
}

/// Why a plan is not a plan (a bug in an algorithm, never the input's fault).
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum VerifyError {
    /// A GPU's layout breaks the driver's rules.
    #[error("GPU {gpu}: {reason}")]
    Layout {
        /// The GPU.
        gpu: usize,
        /// What is wrong.
        reason: placement::LayoutError,
    },
    /// A GPU's instances are not of the plan's block types.
    #[error("GPU {gpu}: {profile} is not one of the profiles planned with")]
    Profile {
        /// The GPU.
        gpu: usize,
        /// The profile.
        profile: &'static str,
    },
    /// A job gets less than its demand.
    #[error("job {job}: throughput {supply} is below its demand {demand}")]
    Demand {
        /// The job's name.
        job: String,
        /// What the plan gives it.
        supply: f64,
        /// Its demand.
        demand: f64,
    },
    /// Fewer GPUs than the LP bound: the bound or the plan is wrong.
    #[error("{gpus} GPUs, below the LP lower bound {bound}")]
    BelowBound {
        /// GPUs of the plan.
        gpus: usize,
        /// The bound.
        bound: u32,
    },
}

impl Plan {
    /// The plan of GPUs configured `gpus` (indices into the problem's
    /// configurations) with `x[i][j]` blocks of type i for job j: each GPU's
    /// configuration placed first-fit decreasing, blocks handed to jobs in job
    /// order, and blocks left over given to the job with the least headroom
    /// that they serve (docs/mig.md §4.3).
    ///
    /// # Panics
    /// If a configuration does not place (the problem's never fail) or `x`
    /// asks for more blocks of a type than the GPUs hold.
    pub fn build(p: &Problem, gpus: &[usize], x: &[Vec<u32>]) -> Plan {
        let mut order = gpus.to_vec();
        order.sort_by(|a, b| p.configurations[*b].cmp(&p.configurations[*a]));
        let mut left: Vec<Vec<u32>> = x.to_vec();
        let mut plan = Plan {
            gpus: order
                .iter()
                .map(|&c| {
                    let configuration = p.configurations[c].clone();
                    let layout = placement::place_all(p.table(), configuration.profiles())
                        .expect("a configuration of the problem places");
                    GpuPlan {
                        configuration,
                        instances: layout.into_iter().map(|i| (i, None)).collect(),
                    }
                })
                .collect(),
        };
        for gpu in &mut plan.gpus {
            for (inst, job) in &mut gpu.instances {
                let i = p.block(inst.profile).expect("a planned profile");
                if let Some(j) = left[i].iter().position(|&n| n > 0) {
                    left[i][j] -= 1;
                    *job = Some(j);
                }
            }
        }
        assert!(
            left.iter().flatten().all(|&n| n == 0),
            "more blocks asked than the GPUs hold"
        );
        plan.give_spares(p);
        plan
    }

    /// Gives each idle instance to the job with the least headroom (supply
    /// minus demand) among those it serves.
    fn give_spares(&mut self, p: &Problem) {
        let mut supply = self.supply(p);
        for gpu in &mut self.gpus {
            for (inst, job) in &mut gpu.instances {
                if job.is_some() {
                    continue;
                }
                let i = p.block(inst.profile).expect("a planned profile");
                let best = (0..p.jobs.len())
                    .filter(|&j| p.jobs[j].throughput[i] > 0.0)
                    .min_by(|&a, &b| {
                        (supply[a] - p.jobs[a].demand).total_cmp(&(supply[b] - p.jobs[b].demand))
                    });
                if let Some(j) = best {
                    supply[j] += p.jobs[j].throughput[i];
                    *job = Some(j);
                }
            }
        }
    }

    /// Each job's throughput under the plan (uncapped rates).
    pub fn supply(&self, p: &Problem) -> Vec<f64> {
        let mut s = vec![0.0; p.jobs.len()];
        for gpu in &self.gpus {
            for (inst, job) in &gpu.instances {
                if let (Some(j), Some(i)) = (job, p.block(inst.profile)) {
                    s[*j] += p.jobs[*j].throughput[i];
                }
            }
        }
        s
    }

    /// Checks the plan: every GPU's layout valid and of the planned profiles,
    /// every demand met, and no fewer GPUs than `bound`.
    pub fn verify(&self, p: &Problem, bound: u32) -> Result<(), VerifyError> {
        for (g, gpu) in self.gpus.iter().enumerate() {
            let layout: Vec<Instance> = gpu.instances.iter().map(|(i, _)| *i).collect();
            placement::check(p.table(), &layout)
                .map_err(|reason| VerifyError::Layout { gpu: g, reason })?;
            if let Some(i) = layout.iter().find(|i| p.block(i.profile).is_none()) {
                return Err(VerifyError::Profile {
                    gpu: g,
                    profile: i.profile.name,
                });
            }
        }
        for (j, supply) in self.supply(p).into_iter().enumerate() {
            let job = &p.jobs[j];
            if !meets(supply, job.demand) {
                return Err(VerifyError::Demand {
                    job: job.name.clone(),
                    supply,
                    demand: job.demand,
                });
            }
        }
        if (self.gpus.len() as u32) < bound {
            return Err(VerifyError::BelowBound {
                gpus: self.gpus.len(),
                bound,
            });
        }
        Ok(())
    }

    /// The assignment CSV: `gpu,device,profile,start,job,throughput`, a row per
    /// instance; `device` is `gpu/<g>/mig/<start>`; an idle instance has an
    /// empty job and throughput.
    pub fn assignment_csv(&self, p: &Problem) -> String {
        let mut out = String::from("gpu,device,profile,start,job,throughput\n");
        for (g, gpu) in self.gpus.iter().enumerate() {
            for (inst, job) in &gpu.instances {
                let (name, rate) = match (job, p.block(inst.profile)) {
                    (Some(j), Some(i)) => (
                        csv_field(&p.jobs[*j].name),
                        format_rate(p.jobs[*j].throughput[i]),
                    ),
                    _ => (String::new(), String::new()),
                };
                let _ = writeln!(
                    out,
                    "{g},gpu/{g}/mig/{},{},{},{name},{rate}",
                    inst.start, inst.profile.name, inst.start
                );
            }
        }
        out
    }

    /// Each GPU's layout as `Decision::MigLayout` and host files write it:
    /// `4g.20gb@0,3g.20gb@4`.
    pub fn layouts(&self) -> Vec<String> {
        self.gpus
            .iter()
            .map(|g| {
                g.instances
                    .iter()
                    .map(|(i, _)| i.to_string())
                    .collect::<Vec<_>>()
                    .join(",")
            })
            .collect()
    }
}

impl Problem {
    /// The block-type index of `profile`, if it is one of the problem's.
    pub fn block(&self, profile: &gpu_agent_catalogue::mig::MigProfile) -> Option<usize> {
        self.profiles.iter().position(|p| p.id == profile.id)
    }
}

/// A rate without a needless fraction: `80`, `92.5`.
fn format_rate(x: f64) -> String {
    format!("{x}")
}

/// A CSV field, quoted when it must be.
fn csv_field(s: &str) -> String {
    if s.contains([',', '"', '\n', '\r']) {
        format!("\"{}\"", s.replace('"', "\"\""))
    } else {
        s.to_string()
    }
}

/// How good a plan is known to be.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Status {
    /// Proven to use the fewest GPUs.
    Optimal,
    /// Meets every demand; not proven optimal.
    Feasible,
}

/// Rounding's guarantee, checked on its result (docs/mig.md §4.3).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RoundingCheck {
    /// Σ m of the first feasible grid vector (≤ (1+ε)·OPT over the
    /// configurations enumerated).
    pub grid_gpus: u32,
    /// Configurations enumerated: all of C, or the LP's support C*.
    pub configurations: usize,
    /// Whether they are all of C (else the bound holds against plans using C*
    /// only).
    pub all_configurations: bool,
    /// 2·Σm + |C'|: the most GPUs the algorithm may use.
    pub bound: u32,
    /// Whether the plan keeps it.
    pub within: bool,
}

/// A verified plan and what is known of it.
#[derive(Debug, Clone, PartialEq)]
pub struct Outcome {
    /// The algorithm that made it.
    pub algorithm: Algorithm,
    /// The plan (verified).
    pub plan: Plan,
    /// ⌈LP⌉: no plan uses fewer GPUs.
    pub lower_bound: u32,
    /// The LP optimum itself.
    pub lp_value: f64,
    /// Optimal, or only feasible.
    pub status: Status,
    /// Why it is only feasible, when the algorithm knows (a time limit).
    pub note: Option<String>,
    /// Rounding's bound check.
    pub rounding: Option<RoundingCheck>,
    /// Seconds the algorithm took (the LP bound included).
    pub solve_s: f64,
}

/// The JSON summary of docs/mig.md §5.2 (`--json`).
#[derive(Debug, Serialize)]
pub struct Summary<'a> {
    /// GPUs of the plan.
    pub gpus: usize,
    /// ⌈LP⌉.
    pub lower_bound: u32,
    /// `optimal` or `feasible`.
    pub status: Status,
    /// `exact`, `rounding` or `greedy`.
    pub algorithm: Algorithm,
    /// Seconds the algorithm took.
    pub solve_s: f64,
    /// The LP optimum.
    pub lp_value: f64,
    /// Each job's throughput under the plan, by name.
    pub supply: serde_json::Map<String, serde_json::Value>,
    /// Each GPU's layout, `profile@start` comma-separated.
    pub layouts: Vec<String>,
    /// Why the plan is only feasible, when known.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub note: Option<&'a str>,
    /// Rounding's checked bound.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rounding: Option<&'a RoundingCheck>,
}

impl Outcome {
    /// The JSON summary.
    pub fn summary(&self, p: &Problem) -> Summary<'_> {
        let supply = p
            .jobs
            .iter()
            .zip(self.plan.supply(p))
            .map(|(j, s)| (j.name.clone(), serde_json::json!(s)))
            .collect();
        Summary {
            gpus: self.plan.gpus.len(),
            lower_bound: self.lower_bound,
            status: self.status,
            algorithm: self.algorithm,
            solve_s: self.solve_s,
            lp_value: self.lp_value,
            supply,
            layouts: self.plan.layouts(),
            note: self.note.as_deref(),
            rounding: self.rounding.as_ref(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::problem::testing::worked_example;

    fn config(p: &Problem, s: &str) -> usize {
        p.configurations
            .iter()
            .position(|c| c.to_string() == s)
            .unwrap()
    }

    #[test]
    fn builds_the_worked_examples_plan() {
        let p = worked_example();
        let gpus = [
            config(&p, "3g.20gb + 1g.5gb x4"),
            config(&p, "4g.20gb + 3g.20gb"),
        ];
        let mut x = vec![vec![0; 3]; 5];
        x[0][0] = 4;
        x[2][1] = 2;
        x[3][2] = 1;
        let plan = Plan::build(&p, &gpus, &x);
        assert_eq!(
            plan.layouts(),
            [
                "4g.20gb@0,3g.20gb@4",
                "1g.5gb@0,1g.5gb@1,1g.5gb@2,1g.5gb@3,3g.20gb@4"
            ]
        );
        assert_eq!(plan.supply(&p), [400.0, 480.0, 80.0]);
        assert_eq!(plan.verify(&p, 2), Ok(()));
        assert_eq!(
            plan.assignment_csv(&p),
            "gpu,device,profile,start,job,throughput\n\
             0,gpu/0/mig/0,4g.20gb,0,llm-7b,80\n\
             0,gpu/0/mig/4,3g.20gb,4,bert-large,240\n\
             1,gpu/1/mig/0,1g.5gb,0,resnet50,100\n\
             1,gpu/1/mig/1,1g.5gb,1,resnet50,100\n\
             1,gpu/1/mig/2,1g.5gb,2,resnet50,100\n\
             1,gpu/1/mig/3,1g.5gb,3,resnet50,100\n\
             1,gpu/1/mig/4,3g.20gb,4,bert-large,240\n"
        );
    }

    #[test]
    fn spares_go_to_the_job_with_least_headroom_and_verify_finds_shortfalls() {
        let p = worked_example();
        let gpus = [config(&p, "4g.20gb + 3g.20gb")];
        let mut x = vec![vec![0; 3]; 5];
        x[3][2] = 1; // 4g to llm-7b; the 3g is spare.
        let plan = Plan::build(&p, &gpus, &x);
        // bert-large (short by 480) gets the 3g, not resnet50 (short by 400).
        assert_eq!(plan.gpus[0].instances[1].1, Some(1));
        assert_eq!(
            plan.verify(&p, 2).unwrap_err().to_string(),
            "job resnet50: throughput 0 is below its demand 400"
        );
    }
}
