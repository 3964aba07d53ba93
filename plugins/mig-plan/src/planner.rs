//! From observed demand to one configuration per GPU: the planning problem
//! of docs/mig.md §4 on the GPUs of one model, for the largest common multiple of
//! the demands those GPUs can serve.

use gpu_agent_catalogue::catalogue::GpuModel;
use gpu_agent_catalogue::mig::MigProfile;
use gpu_agent_catalogue::placement::{self, Configuration, Tree};
use gpu_agent_migplan::lp::reassign;
use gpu_agent_migplan::{solve, Job, Options, Problem};

use crate::demand::AppDemand;
use crate::layouts::full_profile;

/// Doublings (or halvings) of the demands tried before giving up.
const MAX_DOUBLINGS: u32 = 30;
/// Bisection steps between the last scale that fits and the first that
/// does not: the scale found is within 2^-8 of the largest one.
const BISECTIONS: u32 = 8;

/// A plan for the GPUs of one model.
#[derive(Debug, Clone, PartialEq)]
pub struct Planned {
    /// One configuration per planned GPU (at most the GPUs there are), as
    /// the planner lists them, largest first.
    pub configurations: Vec<Configuration>,
    /// The multiple of the observed demands they serve.
    pub scale: f64,
}

/// The jobs of `demands` on GPUs of `model` at `speed` work units per
/// second, over `profiles`: an application's single-device tasks are served
/// by an instance at its share of the speed (compute slices / 7) where its
/// largest task's memory fits; gangs, and tasks no instance but the full
/// one holds, only by a whole GPU (the full-size profile). Demands no GPU of
/// the model can hold are left out.
pub fn jobs(
    model: &'static GpuModel,
    speed: f64,
    profiles: &[&'static MigProfile],
    demands: &[AppDemand],
) -> Vec<Job> {
    let table = model.mig.expect("a MIG-capable model");
    let full = full_profile(table);
    let memory = |p: &MigProfile| p.memory_mib as f64 / 1024.0;
    let largest_split = profiles
        .iter()
        .filter(|p| p.id != full.id)
        .map(|p| memory(p))
        .fold(0.0, f64::max);
    demands
        .iter()
        .filter(|d| d.mem_gb <= model.memory_gb)
        .map(|d| {
            let whole = d.gang || d.mem_gb > largest_split;
            let throughput = profiles
                .iter()
                .map(|p| {
                    if p.id == full.id {
                        speed
                    } else if whole || d.mem_gb > memory(p) {
                        0.0
                    } else {
                        speed * f64::from(p.compute_slices) / f64::from(table.compute_slices)
                    }
                })
                .collect();
            Job {
                name: if d.gang {
                    format!("{} (gangs)", d.app)
                } else {
                    d.app.clone()
                },
                demand: d.rate,
                throughput,
            }
        })
        .collect()
}

/// The planning problem of `demands` times `scale` on GPUs of `model` (at
/// `speed`), at most `gpus` of them; `None` when nothing is to be planned.
fn problem(
    model: &'static GpuModel,
    speed: f64,
    gpus: u32,
    demands: &[AppDemand],
    scale: f64,
) -> Option<Problem> {
    let table = model.mig?;
    let tree = Tree::default_profiles(table);
    let profiles = tree.profiles().to_vec();
    let jobs: Vec<Job> = jobs(model, speed, &profiles, demands)
        .into_iter()
        .map(|j| Job {
            demand: j.demand * scale,
            ..j
        })
        .collect();
    Problem::new(model, profiles, jobs, Some(gpus)).ok()
}

/// The largest scale in [2^-30, 2^30] at which `at` answers, with its
/// answer: from 1 the scale is doubled (or halved) until `at` stops (or
/// starts) answering, then bisected [`BISECTIONS`] times. `None` when it
/// answers at no scale tried.
fn largest<T>(mut at: impl FnMut(f64) -> Option<T>) -> Option<(f64, T)> {
    let (mut lo, hi) = match at(1.0) {
        Some(first) => {
            let mut lo = (1.0, first);
            let mut hi = None;
            for _ in 0..MAX_DOUBLINGS {
                let s = lo.0 * 2.0;
                match at(s) {
                    Some(p) => lo = (s, p),
                    None => {
                        hi = Some(s);
                        break;
                    }
                }
            }
            match hi {
                Some(hi) => (lo, hi),
                None => return Some(lo),
            }
        }
        None => {
            let mut hi = 1.0;
            let mut lo = None;
            for _ in 0..MAX_DOUBLINGS {
                let s = hi / 2.0;
                match at(s) {
                    Some(p) => {
                        lo = Some((s, p));
                        break;
                    }
                    None => hi = s,
                }
            }
            (lo?, hi)
        }
    };
    let mut hi = hi;
    for _ in 0..BISECTIONS {
        let mid = (lo.0 + hi) / 2.0;
        match at(mid) {
            Some(p) => lo = (mid, p),
            None => hi = mid,
        }
    }
    Some(lo)
}

/// The plan of `gpus` GPUs of `model` (at `speed`) for the largest multiple
/// of `demands` they can serve ([`largest`]). `None` when there is nothing
/// to plan, or no multiple fits (more applications than the GPUs hold
/// instances).
pub fn plan(
    model: &'static GpuModel,
    speed: f64,
    gpus: u32,
    demands: &[AppDemand],
    options: &Options,
) -> Option<Planned> {
    if gpus == 0 {
        return None;
    }
    let (scale, configurations) = largest(|scale| {
        let p = problem(model, speed, gpus, demands, scale)?;
        let outcome = solve(&p, options, &mut |_| {}).ok()?;
        Some(
            outcome
                .plan
                .gpus
                .into_iter()
                .map(|g| g.configuration)
                .collect(),
        )
    })?;
    Some(Planned {
        configurations,
        scale,
    })
}

/// The largest multiple of `demands` that GPUs of `model` (at `speed`)
/// configured as `now` serve, their instances handed to the applications
/// at best (the planner's exact re-assignment); 0 when they serve none.
pub fn served(
    model: &'static GpuModel,
    speed: f64,
    demands: &[AppDemand],
    now: &[Configuration],
) -> f64 {
    largest(|scale| {
        let p = problem(model, speed, now.len() as u32, demands, scale)?;
        let supply: Vec<u32> = p
            .profiles
            .iter()
            .map(|b| now.iter().map(|c| c.count(b.id)).sum())
            .collect();
        reassign(&p, &supply)
    })
    .map_or(0.0, |(scale, _)| scale)
}

/// The layout a GPU of `model` is asked for to hold `configuration`:
/// instances placed first-fit decreasing, `PROFILE@START` comma-separated
/// (`Decision::MigLayout`'s form); the full-size profile alone is the whole
/// GPU, MIG off (`""`), which gangs can use too.
pub fn layout_text(model: &'static GpuModel, configuration: &Configuration) -> String {
    let table = model.mig.expect("a MIG-capable model");
    if configuration.profiles() == [full_profile(table)] {
        return String::new();
    }
    placement::place_all(table, configuration.profiles())
        .expect("a planned configuration places")
        .iter()
        .map(|i| i.to_string())
        .collect::<Vec<_>>()
        .join(",")
}

#[cfg(test)]
mod tests {
    use gpu_agent_catalogue::catalogue;

    use super::*;

    fn demand(app: &str, gang: bool, rate: f64, mem_gb: f64) -> AppDemand {
        AppDemand {
            app: app.into(),
            gang,
            rate,
            mem_gb,
        }
    }

    /// Throughput per profile on an A100-40GB at speed 7: its share of the
    /// speed where the memory fits; gangs and tasks over every split
    /// profile's memory on the full profile only; a task over the GPU's
    /// memory is no job.
    #[test]
    fn throughputs_follow_compute_slices_and_memory() {
        let a100 = catalogue::lookup("A100-SXM4-40GB").unwrap();
        let tree = Tree::default_profiles(a100.mig.unwrap());
        let names: Vec<&str> = tree.profiles().iter().map(|p| p.name).collect();
        assert_eq!(
            names,
            ["1g.5gb", "1g.10gb", "2g.10gb", "3g.20gb", "4g.20gb", "7g.40gb"]
        );
        let jobs = jobs(
            a100,
            7.0,
            tree.profiles(),
            &[
                demand("small", false, 2.0, 4.0),
                demand("mid", false, 1.0, 15.0),
                demand("large", false, 1.0, 25.0),
                demand("huge", false, 1.0, 41.0),
                demand("small", true, 3.0, 4.0),
            ],
        );
        let rows: Vec<(&str, f64, &[f64])> = jobs
            .iter()
            .map(|j| (j.name.as_str(), j.demand, j.throughput.as_slice()))
            .collect();
        assert_eq!(
            rows,
            vec![
                ("small", 2.0, &[1.0, 1.0, 2.0, 3.0, 4.0, 7.0][..]),
                ("mid", 1.0, &[0.0, 0.0, 0.0, 3.0, 4.0, 7.0][..]),
                ("large", 1.0, &[0.0, 0.0, 0.0, 0.0, 0.0, 7.0][..]),
                ("small (gangs)", 3.0, &[0.0, 0.0, 0.0, 0.0, 0.0, 7.0][..]),
            ]
        );
    }

    /// Two A100s, one application of 2 units/s: the largest multiple two
    /// GPUs serve is 7 (each whole, 7 units/s), found by doubling to 8
    /// (which fails) and bisecting [4, 8] eight times: 7 exactly.
    #[test]
    fn the_scale_is_the_largest_multiple_the_gpus_serve() {
        let a100 = catalogue::lookup("A100-SXM4-40GB").unwrap();
        let planned = plan(
            a100,
            7.0,
            2,
            &[demand("a", false, 2.0, 4.0)],
            &Options::default(),
        )
        .unwrap();
        assert_eq!(planned.scale, 7.0);
        let texts: Vec<String> = planned
            .configurations
            .iter()
            .map(|c| layout_text(a100, c))
            .collect();
        assert_eq!(texts.len(), 2);
        // 7 units/s per GPU needs all 7 compute slices for the one job.
        for c in &planned.configurations {
            assert_eq!(c.compute_slices(), 7, "{c}");
        }
        // More applications than two GPUs hold instances: no plan.
        let many: Vec<AppDemand> = (0..15)
            .map(|k| demand(&format!("app{k}"), false, 1.0, 4.0))
            .collect();
        assert_eq!(plan(a100, 7.0, 2, &many, &Options::default()), None);
    }

    /// examples/host-mig-shift.toml's layouts (3g.20gb + 4 x 1g.5gb on each
    /// of two A100s at speed 7) against its trace's two mixes: resnet50
    /// (4 GB) 8 units/s with bert-large (15 GB) 2, they serve 11/8 of it
    /// (resnet50 on the eight 1g and one 3g, 11; bert-large on the other
    /// 3g, 3); reversed, 3/4 (bert-large fits the two 3g only, 6 of 8). A
    /// plan serves 11/8 of the reversed mix (bert-large on 7 + 4 units,
    /// resnet50 on 3).
    #[test]
    fn the_shift_scenario_is_served_and_planned_as_computed_by_hand() {
        let a100 = catalogue::lookup("A100-SXM4-40GB").unwrap();
        let t = a100.mig.unwrap();
        let p = |n: &str| t.profile_named(n).unwrap();
        let fixed = Configuration::from_profiles(vec![
            p("3g.20gb"),
            p("1g.5gb"),
            p("1g.5gb"),
            p("1g.5gb"),
            p("1g.5gb"),
        ]);
        let now = [fixed.clone(), fixed];
        let first = [
            demand("resnet50", false, 8.0, 4.0),
            demand("bert-large", false, 2.0, 15.0),
        ];
        let second = [
            demand("resnet50", false, 2.0, 4.0),
            demand("bert-large", false, 8.0, 15.0),
        ];
        assert_eq!(served(a100, 7.0, &first, &now), 1.375);
        assert_eq!(served(a100, 7.0, &second, &now), 0.75);
        let planned = plan(a100, 7.0, 2, &second, &Options::default()).unwrap();
        assert_eq!(planned.scale, 1.375);
        assert_eq!(served(a100, 7.0, &second, &planned.configurations), 1.375);
    }

    #[test]
    fn the_full_profile_alone_is_the_whole_gpu() {
        let a100 = catalogue::lookup("A100-SXM4-40GB").unwrap();
        let t = a100.mig.unwrap();
        let p = |n: &str| t.profile_named(n).unwrap();
        let c = |ps: Vec<&'static MigProfile>| Configuration::from_profiles(ps);
        assert_eq!(layout_text(a100, &c(vec![p("7g.40gb")])), "");
        assert_eq!(
            layout_text(a100, &c(vec![p("3g.20gb"), p("4g.20gb")])),
            "4g.20gb@0,3g.20gb@4"
        );
    }
}
