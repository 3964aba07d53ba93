//! A task as the core consumes it, and the range rules of its values.
//!
//! Every reader of tasks (trace rows, `Submit` dictionaries) checks its
//! numbers with the same [`Rule`]s, so a value one accepts the other accepts.

use gpu_agent_plugin_api::AppModel;

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

impl TaskSpec {
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

/// What a task value must be.
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
}
