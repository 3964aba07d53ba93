//! A task as the core consumes it, and the range rules of its values.
//!
//! Every reader of tasks (trace rows, `Submit` dictionaries) checks its
//! numbers with the same [`Rule`]s, so a value one accepts the other accepts,
//! and checks a task against its host with [`TaskSpec::check_on`] (one rule,
//! one place: ARCHITECTURE.md, invariant 11).

use gpu_agent_plugin_api::AppModel;

use crate::host::DeviceSpec;

/// A task as submitted to the core.
#[derive(Debug, Clone, PartialEq)]
pub struct TaskSpec {
    /// User-visible id.
    pub id: String,
    /// Earliest start, seconds (the driver's clock).
    pub arrival: f64,
    /// Work units.
    pub workload: f64,
    /// Memory per device, GB.
    pub mem_gb: f64,
    /// Absolute deadline, seconds.
    pub deadline: f64,
    /// Priority weight.
    pub weight: f64,
    /// Devices needed at once.
    pub gpus: u32,
    /// Other device counts it can also run on (the work divides evenly); the
    /// core refuses a task only when its `gpus` cannot be met.
    pub alt_gpus: Vec<u32>,
    /// Per-device run times at default clocks (empty: workload / speed).
    pub runtimes: Vec<f64>,
    /// DVFS application profile.
    pub app: AppModel,
}

/// A host's devices as tasks are checked against them
/// ([`TaskSpec::check_on`]), with their slowest speed found once: a task
/// without `runtimes` that is within the cap there is within it everywhere,
/// and needs no look at each device.
#[derive(Debug, Clone, Copy)]
pub struct OnHost<'a> {
    devices: &'a [DeviceSpec],
    slowest: f64,
}

impl<'a> OnHost<'a> {
    /// The devices of a host.
    pub fn new(devices: &'a [DeviceSpec]) -> OnHost<'a> {
        let slowest = devices
            .iter()
            .map(|d| d.speed)
            .fold(f64::INFINITY, f64::min);
        OnHost { devices, slowest }
    }
}

impl TaskSpec {
    /// The checks of a task against the host it is for, the same for trace
    /// rows and `Submit`: `runtimes` holds one value per device, `alt_gpus`
    /// are distinct counts other than `gpus`
    /// ([`TaskSpec::alt_gpus_problem`]), and no run time is above the cap
    /// ([`TaskSpec::runtime_problem`]). The error is the field at fault
    /// (`runtimes`, `gpus_alt` or `workload`) and why.
    pub fn check_on(&self, host: &OnHost<'_>) -> Result<(), (&'static str, String)> {
        let devices = host.devices;
        if !self.runtimes.is_empty() && self.runtimes.len() != devices.len() {
            return Err((
                "runtimes",
                format!(
                    "expected {} values (one per device of the host), got {}",
                    devices.len(),
                    self.runtimes.len()
                ),
            ));
        }
        if let Some(problem) = self.alt_gpus_problem() {
            return Err(("gpus_alt", problem));
        }
        let within_cap = self.runtimes.is_empty() && self.workload / host.slowest <= MAX_VALUE;
        match (!within_cap)
            .then(|| self.runtime_problem(devices))
            .flatten()
        {
            Some(problem) if self.runtimes.is_empty() => Err(("workload", problem)),
            Some(problem) => Err(("runtimes", problem)),
            None => Ok(()),
        }
    }

    /// Why this task's modelled run time on some device of `devices`
    /// (`runtimes`, else workload / speed) is above [`MAX_VALUE`] seconds, if
    /// it is; `inf` entries (devices it cannot use) are fine.
    pub fn runtime_problem(&self, devices: &[DeviceSpec]) -> Option<String> {
        devices.iter().enumerate().find_map(|(j, d)| {
            let runtime = self
                .runtimes
                .get(j)
                .copied()
                .unwrap_or(self.workload / d.speed);
            (runtime.is_nan() || (runtime.is_finite() && runtime > MAX_VALUE) || {
                // workload / speed overflowing to inf is not "cannot use".
                self.runtimes.is_empty() && runtime.is_infinite()
            })
            .then(|| {
                format!(
                    "the run time on device {} would be {runtime:e} s, above the cap of {MAX_VALUE:e} s",
                    d.index
                )
            })
        })
    }

    /// Why `alt_gpus` is not a list of distinct device counts >= 1 other than
    /// `gpus`, if it is not.
    pub fn alt_gpus_problem(&self) -> Option<String> {
        let bad = self
            .alt_gpus
            .iter()
            .enumerate()
            .find(|&(i, &g)| g == 0 || g == self.gpus || self.alt_gpus[..i].contains(&g))?;
        Some(format!(
            "expected distinct device counts >= 1 other than gpus ({}), got {}",
            self.gpus, bad.1
        ))
    }
}

/// The largest magnitude a task's number may have: seconds (arrival,
/// deadline, run time), work units, GB and weights alike; 10^9 s is about
/// 31.7 years. With every value within it, the model's sums (ends, energies,
/// weighted tardiness over millions of tasks) stay finite.
pub const MAX_VALUE: f64 = 1e9;

/// What a task value must be (and at most [`MAX_VALUE`] in magnitude).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Rule {
    /// A finite number > 0.
    Positive,
    /// A finite number >= 0.
    NonNegative,
    /// Any finite number.
    Finite,
    /// A number > 0, or infinity (a device that cannot run the task).
    PositiveOrInf,
}

impl Rule {
    /// Work units.
    pub const WORKLOAD: Rule = Rule::Positive;
    /// Memory per device, GB.
    pub const MEM_GB: Rule = Rule::NonNegative;
    /// Priority weight.
    pub const WEIGHT: Rule = Rule::Positive;
    /// Earliest start, seconds.
    pub const ARRIVAL: Rule = Rule::NonNegative;
    /// A deadline as an absolute time, seconds.
    pub const DEADLINE: Rule = Rule::Finite;
    /// A deadline as seconds after submission.
    pub const RELATIVE_DEADLINE: Rule = Rule::NonNegative;
    /// One device's run time, seconds.
    pub const RUNTIME: Rule = Rule::PositiveOrInf;

    /// Whether `x` obeys the rule.
    pub fn accepts(self, x: f64) -> bool {
        (x.abs() <= MAX_VALUE || self == Rule::PositiveOrInf && x == f64::INFINITY)
            && self.in_range(x)
    }

    /// `Err` with what was expected ("expected a number > 0, got -1"; "expected
    /// at most 1e9 ...") unless `x` obeys the rule.
    pub fn check(self, x: f64) -> Result<f64, String> {
        if self.accepts(x) {
            Ok(x)
        } else if self.in_range(x) {
            Err(format!(
                "expected at most {MAX_VALUE:e} in magnitude (the cap on task values), got {x:e}"
            ))
        } else {
            Err(format!("expected {}, got {x}", self.describe()))
        }
    }

    fn in_range(self, x: f64) -> bool {
        match self {
            Rule::Positive => x.is_finite() && x > 0.0,
            Rule::NonNegative => x.is_finite() && x >= 0.0,
            Rule::Finite => x.is_finite(),
            Rule::PositiveOrInf => x > 0.0 && !x.is_nan(),
        }
    }

    /// What it expects, for error messages ("a number > 0").
    pub fn describe(self) -> &'static str {
        match self {
            Rule::Positive => "a number > 0",
            Rule::NonNegative => "a number >= 0",
            Rule::Finite => "a finite number",
            Rule::PositiveOrInf => "a number > 0 or inf",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rules_accept_exactly_their_ranges() {
        let values = [-1.0, 0.0, 1.0, f64::INFINITY, f64::NAN];
        let accepted = |rule: Rule| values.map(|x| rule.accepts(x));
        assert_eq!(accepted(Rule::Positive), [false, false, true, false, false]);
        assert_eq!(
            accepted(Rule::NonNegative),
            [false, true, true, false, false]
        );
        assert_eq!(accepted(Rule::Finite), [true, true, true, false, false]);
        assert_eq!(
            accepted(Rule::PositiveOrInf),
            [false, false, true, true, false]
        );
    }

    #[test]
    fn values_beyond_the_cap_are_refused_by_name() {
        assert_eq!(Rule::ARRIVAL.check(1e9), Ok(1e9));
        assert_eq!(
            Rule::ARRIVAL.check(1e308),
            Err("expected at most 1e9 in magnitude (the cap on task values), got 1e308".into())
        );
        assert_eq!(
            Rule::DEADLINE.check(-2e9),
            Err("expected at most 1e9 in magnitude (the cap on task values), got -2e9".into())
        );
        assert_eq!(
            Rule::WORKLOAD.check(-1.0),
            Err("expected a number > 0, got -1".into())
        );
        assert!(Rule::RUNTIME.accepts(f64::INFINITY) && !Rule::RUNTIME.accepts(1e10));
    }

    #[test]
    fn modelled_run_times_beyond_the_cap_are_named() {
        let device = |index, speed| crate::host::DeviceSpec {
            index,
            model: crate::catalogue::lookup("T4").unwrap(),
            memory_gb: 16.0,
            speed,
            cost_per_hour: 0.0,
            partition: crate::host::Partition::Whole,
        };
        let task = TaskSpec {
            id: "t".into(),
            arrival: 0.0,
            workload: 1e9,
            mem_gb: 1.0,
            deadline: 1.0,
            weight: 1.0,
            gpus: 1,
            alt_gpus: vec![],
            runtimes: vec![],
            app: AppModel::builtin_default(),
        };
        assert_eq!(task.runtime_problem(&[device(0, 1.0)]), None);
        assert_eq!(
            task.runtime_problem(&[device(0, 1.0), device(1, 0.5)]),
            Some("the run time on device 1 would be 2e9 s, above the cap of 1e9 s".into())
        );
        assert!(task.runtime_problem(&[device(0, 1e-308)]).is_some());
        let unusable = TaskSpec {
            runtimes: vec![5.0, f64::INFINITY],
            ..task.clone()
        };
        assert_eq!(
            unusable.runtime_problem(&[device(0, 1.0), device(1, 1.0)]),
            None
        );
        // check_on: each check names its field, the slowest device's
        // shortcut included.
        let two = [device(0, 1.0), device(1, 0.5)];
        let on_two = OnHost::new(&two);
        assert_eq!(
            unusable.check_on(&OnHost::new(&[device(0, 1.0), device(1, 1.0)])),
            Ok(())
        );
        assert_eq!(
            task.check_on(&on_two),
            Err((
                "workload",
                "the run time on device 1 would be 2e9 s, above the cap of 1e9 s".into()
            ))
        );
        let short = TaskSpec {
            workload: 1.0,
            ..task.clone()
        };
        assert_eq!(short.check_on(&on_two), Ok(()));
        assert_eq!(
            TaskSpec {
                runtimes: vec![1.0],
                ..short.clone()
            }
            .check_on(&on_two),
            Err((
                "runtimes",
                "expected 2 values (one per device of the host), got 1".into()
            ))
        );
        assert_eq!(
            TaskSpec {
                runtimes: vec![1.0, 2e9],
                ..short.clone()
            }
            .check_on(&on_two),
            Err((
                "runtimes",
                "the run time on device 1 would be 2e9 s, above the cap of 1e9 s".into()
            ))
        );
        assert_eq!(
            TaskSpec {
                alt_gpus: vec![1],
                ..short
            }
            .check_on(&on_two),
            Err((
                "gpus_alt",
                "expected distinct device counts >= 1 other than gpus (1), got 1".into()
            ))
        );
    }
}
