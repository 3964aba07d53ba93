//! The policy's parameters, their defaults and their checks.

use gpu_agent_plugin_api::{abi_stable::std_types::RStr, Param, ParamInfo, ParamReader};

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
        Params::parse(&[]).expect("the defaults parse")
    }
}

impl Params {
    /// Reads `params`, taking each absent one's default; an error names the
    /// parameter, what it expects and what it got.
    pub fn parse(params: &[Param]) -> Result<Params, String> {
        let read = ParamReader::new(&INFO, params)?;
        Ok(Params {
            dealing: read.choice("dealing", |w| match w {
                "rr" => Some(Dealing::Rr),
                "edf" => Some(Dealing::Edf),
                _ => None,
            }),
            groups: read.integer("groups"),
            group_size: read.integer("group_size"),
            period_s: read.number("period_s"),
            time_limit_ms: read.integer("time_limit_ms"),
            milp_max_tasks: read.integer("milp_max_tasks"),
            max_configs: read.integer("max_configs"),
            window: read.integer("window"),
            solver: read.choice("solver", |w| match w {
                "auto" => Some(Solver::Auto),
                "milp" => Some(Solver::Milp),
                "search" => Some(Solver::Search),
                _ => None,
            }),
            overload_pending: read.integer("overload_pending"),
        })
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
        let defaults = Params {
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
        };
        assert_eq!(Params::parse(&params(&listed)), Ok(defaults.clone()));
        assert_eq!(Params::default(), defaults);
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
}
