//! The policy's parameters, their defaults and their checks.

use gpu_agent_plugin_api::{abi_stable::std_types::RStr, param, Param, ParamInfo};

/// The most tasks one MILP may hold (`milp_max_tasks`): at 8, microlp's branch
/// and bound already runs for seconds on hard instances.
pub const MAX_MILP_TASKS: usize = 8;
/// The most configurations one task may bring to a MILP (`max_configs`).
pub const MAX_CONFIGS: usize = 16;

const DEALINGS: &[RStr<'static>] = &[RStr::from_str("rr"), RStr::from_str("edf")];
const SOLVERS: &[RStr<'static>] = &[
    RStr::from_str("auto"),
    RStr::from_str("milp"),
    RStr::from_str("search"),
];

/// The parameters `edf-hier` takes, as the plugin lists them.
pub const INFO: [ParamInfo; 10] = [
    ParamInfo::choice(
        "dealing",
        "edf",
        DEALINGS,
        "order the pending tasks are dealt to the groups in: rr, arrival order (the earlier work's round robin); edf, earliest deadline first",
    ),
    ParamInfo::integer(
        "groups",
        "1",
        "K, the number of device groups (device j belongs to group j mod K); at most the device count",
    )
    .at_least(1.0),
    ParamInfo::integer(
        "group_size",
        "1",
        "tasks dealt to a group at a time (EDF1, EDF2, EDF3 with dealing = edf)",
    )
    .at_least(1.0)
    .at_most(3.0),
    ParamInfo::number(
        "period_s",
        "60",
        "seconds between re-plans while tasks are pending",
    )
    .above(0.0),
    ParamInfo::integer(
        "time_limit_ms",
        "500",
        "wall-clock limit of one MILP solve; the best plan found by then is used",
    )
    .at_least(1.0),
    ParamInfo::integer(
        "milp_max_tasks",
        "4",
        "tasks per group in one MILP, earliest deadlines first; the rest are placed greedily",
    )
    .at_least(0.0)
    .at_most(MAX_MILP_TASKS as f64),
    ParamInfo::integer("max_configs", "8", "device sets considered per task")
        .at_least(1.0)
        .at_most(MAX_CONFIGS as f64),
    ParamInfo::integer(
        "window",
        "64",
        "W, the pending tasks planned at a time: the first W in deadline order",
    )
    .at_least(1.0),
    ParamInfo::choice(
        "solver",
        "auto",
        SOLVERS,
        "how a group's first tasks are planned: milp, the MILP; search, exhaustive search of the same problem (same optimum) for up to 4 tasks, the MILP above; auto, milp, or search in overload (more than overload_pending tasks pending)",
    ),
    ParamInfo::integer(
        "overload_pending",
        "256",
        "overload threshold for solver = auto: while more tasks than this are pending, groups are solved by search, so that plans keep up with arrivals",
    )
    .at_least(0.0),
];

/// The order the pending tasks are dealt to the groups in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dealing {
    /// Arrival order: round robin as is.
    Rr,
    /// Earliest deadline first.
    Edf,
}

/// How a group's first `milp_max_tasks` tasks are planned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Solver {
    /// [`Solver::Milp`], or [`Solver::Search`] while more than
    /// `overload_pending` tasks are pending ([`Params::solver_for`]).
    Auto,
    /// The group MILP ([`crate::milp`]).
    Milp,
    /// Exhaustive search of the same problem ([`crate::exact`]) for groups of
    /// up to [`crate::exact::MAX_TASKS`] tasks, the MILP for larger ones.
    Search,
}

/// `edf-hier`'s settings.
#[derive(Debug, Clone, PartialEq)]
pub struct Params {
    /// The order tasks are dealt in.
    pub dealing: Dealing,
    /// K, the number of device groups.
    pub groups: usize,
    /// Tasks dealt to a group at a time (1, 2 or 3).
    pub group_size: usize,
    /// Seconds between re-plans while tasks are pending.
    pub period_s: f64,
    /// Wall-clock limit of one MILP solve, milliseconds.
    pub time_limit_ms: u64,
    /// Tasks per group in one MILP.
    pub milp_max_tasks: usize,
    /// Device sets considered per task.
    pub max_configs: usize,
    /// The pending tasks planned at a time (the earliest deadlines).
    pub window: usize,
    /// How a group's first tasks are planned.
    pub solver: Solver,
    /// Above this many pending tasks the host is overloaded (`solver = auto`).
    pub overload_pending: usize,
}

impl Default for Params {
    fn default() -> Params {
        Params {
            dealing: Dealing::Edf,
            groups: 1,
            group_size: 1,
            period_s: 60.0,
            time_limit_ms: 500,
            milp_max_tasks: 4,
            max_configs: 8,
            window: 64,
            solver: Solver::Auto,
            overload_pending: 256,
        }
    }
}

impl Params {
    /// Reads `params` over the defaults; an error names the parameter, what it
    /// expects and what it got.
    pub fn parse(params: &[Param]) -> Result<Params, String> {
        let mut p = Params::default();
        if let Some(v) = param(params, "dealing") {
            p.dealing = match v.trim() {
                "rr" => Dealing::Rr,
                "edf" => Dealing::Edf,
                _ => return Err(bad("dealing", "one of rr, edf", v)),
            };
        }
        if let Some(v) = param(params, "groups") {
            p.groups =
                integer(v, 1, usize::MAX).ok_or_else(|| bad("groups", "an integer >= 1", v))?;
        }
        if let Some(v) = param(params, "group_size") {
            p.group_size = integer(v, 1, 3).ok_or_else(|| bad("group_size", "1, 2 or 3", v))?;
        }
        if let Some(v) = param(params, "period_s") {
            p.period_s = v
                .trim()
                .parse::<f64>()
                .ok()
                .filter(|s| s.is_finite() && *s > 0.0)
                .ok_or_else(|| bad("period_s", "a number of seconds > 0", v))?;
        }
        if let Some(v) = param(params, "time_limit_ms") {
            p.time_limit_ms = integer(v, 1, usize::MAX)
                .ok_or_else(|| bad("time_limit_ms", "an integer >= 1", v))?
                as u64;
        }
        if let Some(v) = param(params, "milp_max_tasks") {
            p.milp_max_tasks = integer(v, 0, MAX_MILP_TASKS).ok_or_else(|| {
                bad(
                    "milp_max_tasks",
                    &format!("an integer from 0 to {MAX_MILP_TASKS}"),
                    v,
                )
            })?;
        }
        if let Some(v) = param(params, "max_configs") {
            p.max_configs = integer(v, 1, MAX_CONFIGS).ok_or_else(|| {
                bad(
                    "max_configs",
                    &format!("an integer from 1 to {MAX_CONFIGS}"),
                    v,
                )
            })?;
        }
        if let Some(v) = param(params, "window") {
            p.window =
                integer(v, 1, usize::MAX).ok_or_else(|| bad("window", "an integer >= 1", v))?;
        }
        if let Some(v) = param(params, "solver") {
            p.solver = match v.trim() {
                "auto" => Solver::Auto,
                "milp" => Solver::Milp,
                "search" => Solver::Search,
                _ => return Err(bad("solver", "one of auto, milp, search", v)),
            };
        }
        if let Some(v) = param(params, "overload_pending") {
            p.overload_pending = integer(v, 0, usize::MAX)
                .ok_or_else(|| bad("overload_pending", "an integer >= 0", v))?;
        }
        Ok(p)
    }

    /// The solver of a plan made with `pending` tasks pending: `solver`, and
    /// for `auto` the MILP, or the search (the same optimum per group, in
    /// microseconds instead of milliseconds) while more than
    /// `overload_pending` tasks are pending.
    pub fn solver_for(&self, pending: usize) -> Solver {
        match self.solver {
            Solver::Auto if pending > self.overload_pending => Solver::Search,
            Solver::Auto => Solver::Milp,
            s => s,
        }
    }
}

fn integer(v: &str, min: usize, max: usize) -> Option<usize> {
    v.trim()
        .parse::<usize>()
        .ok()
        .filter(|n| (min..=max).contains(n))
}

fn bad(key: &str, expected: &str, got: &str) -> String {
    format!("{key}: expected {expected}, got {got:?}")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn params(pairs: &[(&str, &str)]) -> Vec<Param> {
        pairs
            .iter()
            .map(|&(k, v)| Param {
                key: k.into(),
                value: v.into(),
            })
            .collect()
    }

    #[test]
    fn listed_defaults_are_the_defaults() {
        let listed: Vec<(&str, &str)> = INFO
            .iter()
            .map(|i| (i.key.as_str(), i.default.as_str()))
            .collect();
        assert_eq!(Params::parse(&params(&listed)), Ok(Params::default()));
        assert_eq!(Params::parse(&[]), Ok(Params::default()));
    }

    #[test]
    fn values_are_read() {
        let p = Params::parse(&params(&[
            ("dealing", "rr"),
            ("groups", "3"),
            ("group_size", "2"),
            ("period_s", "2.5"),
            ("time_limit_ms", "50"),
            ("milp_max_tasks", "0"),
            ("max_configs", "16"),
            ("window", "5"),
            ("solver", "search"),
            ("overload_pending", "0"),
        ]))
        .unwrap();
        assert_eq!(
            p,
            Params {
                dealing: Dealing::Rr,
                groups: 3,
                group_size: 2,
                period_s: 2.5,
                time_limit_ms: 50,
                milp_max_tasks: 0,
                max_configs: 16,
                window: 5,
                solver: Solver::Search,
                overload_pending: 0,
            }
        );
    }

    #[test]
    fn auto_searches_above_the_overload_threshold() {
        let p = Params::parse(&params(&[("overload_pending", "10")])).unwrap();
        assert_eq!(p.solver, Solver::Auto);
        assert_eq!(p.solver_for(0), Solver::Milp);
        assert_eq!(p.solver_for(9), Solver::Milp);
        assert_eq!(p.solver_for(10), Solver::Milp);
        assert_eq!(p.solver_for(11), Solver::Search);
        assert_eq!(p.solver_for(5000), Solver::Search);
        // A named solver holds at any backlog.
        for (name, solver) in [("milp", Solver::Milp), ("search", Solver::Search)] {
            let p =
                Params::parse(&params(&[("solver", name), ("overload_pending", "10")])).unwrap();
            assert_eq!(p.solver_for(9), solver);
            assert_eq!(p.solver_for(11), solver);
        }
    }

    #[test]
    fn bad_values_are_refused_naming_the_parameter() {
        let cases = [
            (
                "dealing",
                "fifo",
                "dealing: expected one of rr, edf, got \"fifo\"",
            ),
            ("groups", "0", "groups: expected an integer >= 1, got \"0\""),
            ("window", "0", "window: expected an integer >= 1, got \"0\""),
            (
                "solver",
                "simplex",
                "solver: expected one of auto, milp, search, got \"simplex\"",
            ),
            (
                "overload_pending",
                "-1",
                "overload_pending: expected an integer >= 0, got \"-1\"",
            ),
            (
                "groups",
                "two",
                "groups: expected an integer >= 1, got \"two\"",
            ),
            (
                "group_size",
                "4",
                "group_size: expected 1, 2 or 3, got \"4\"",
            ),
            (
                "group_size",
                "0",
                "group_size: expected 1, 2 or 3, got \"0\"",
            ),
            (
                "period_s",
                "0",
                "period_s: expected a number of seconds > 0, got \"0\"",
            ),
            (
                "period_s",
                "inf",
                "period_s: expected a number of seconds > 0, got \"inf\"",
            ),
            (
                "time_limit_ms",
                "0",
                "time_limit_ms: expected an integer >= 1, got \"0\"",
            ),
            (
                "milp_max_tasks",
                "9",
                "milp_max_tasks: expected an integer from 0 to 8, got \"9\"",
            ),
            (
                "max_configs",
                "0",
                "max_configs: expected an integer from 1 to 16, got \"0\"",
            ),
        ];
        for (key, value, message) in cases {
            assert_eq!(
                Params::parse(&params(&[(key, value)])),
                Err(message.to_string())
            );
        }
    }
}
