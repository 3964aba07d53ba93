//! The policy's parameters: names, defaults, help and parsing.

use gpu_agent_plugin_api::{abi_stable::std_types::RStr, Param, ParamInfo, ParamReader};

const AUTO: &[RStr<'static>] = &[RStr::from_str("auto")];

/// Every parameter with its default (the defaults are parsed from here).
pub const PARAMETERS: [ParamInfo; 8] = [
    ParamInfo::integer("seed", "1", "seed of the pseudo-random numbers").at_least(0.0),
    ParamInfo::integer("iterations", "2000", "neighbours tried per decision").at_least(0.0),
    ParamInfo::number(
        "t0",
        "auto",
        "initial temperature in weighted seconds of tardiness, or auto: 0.3 x the start order's tardiness",
    )
    .above(0.0)
    .or_words(AUTO),
    ParamInfo::number("alpha", "0.995", "cooling factor, T(k+1) = alpha T(k)")
        .above(0.0)
        .below(1.0),
    ParamInfo::integer(
        "budget_ms",
        "0",
        "wall-clock cap per decision in ms, 0 = none; when it binds, results depend on machine speed",
    )
    .at_least(0.0),
    ParamInfo::integer(
        "window",
        "8",
        "W, the pending tasks planned per decision: the first W in arrival order",
    )
    .at_least(1.0),
    ParamInfo::integer(
        "overload_pending",
        "256",
        "overload threshold: while more tasks than this are pending, a decision tries at most overload_iterations neighbours, so that decisions keep up with arrivals",
    )
    .at_least(0.0),
    ParamInfo::integer(
        "overload_iterations",
        "500",
        "neighbours tried per decision in overload (more than overload_pending tasks pending), at most iterations",
    )
    .at_least(0.0),
];

/// Parsed parameters.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Params {
    /// Seed of the pseudo-random numbers.
    pub seed: u64,
    /// Neighbours tried per decision.
    pub iterations: u64,
    /// Initial temperature (weighted seconds); `None`: auto.
    pub t0: Option<f64>,
    /// Cooling factor.
    pub alpha: f64,
    /// Wall-clock cap per decision, milliseconds; 0: none.
    pub budget_ms: u64,
    /// The pending tasks planned per decision (the first ones in arrival order).
    pub window: usize,
    /// Above this many pending tasks the host is overloaded.
    pub overload_pending: usize,
    /// Neighbours tried per decision in overload (capped by `iterations`).
    pub overload_iterations: u64,
}

impl Default for Params {
    fn default() -> Params {
        Params::parse(&[]).expect("the defaults parse")
    }
}

impl Params {
    /// Reads `params`, taking each absent one's default; a bad value is an error
    /// naming the parameter and what it expected.
    pub fn parse(params: &[Param]) -> Result<Params, String> {
        let read = ParamReader::new(&PARAMETERS, params)?;
        Ok(Params {
            seed: read.integer("seed"),
            iterations: read.integer("iterations"),
            t0: read.number_or_word("t0"),
            alpha: read.number("alpha"),
            budget_ms: read.integer("budget_ms"),
            window: read.integer("window"),
            overload_pending: read.integer("overload_pending"),
            overload_iterations: read.integer("overload_iterations"),
        })
    }

    /// Neighbours a decision tries with `pending` tasks pending: `iterations`,
    /// or at most `overload_iterations` while more than `overload_pending` are
    /// pending (overload: the backlog grows faster than full searches could
    /// follow it, and each decision still plans only the first `window`).
    pub fn iterations_for(&self, pending: usize) -> u64 {
        if pending > self.overload_pending {
            self.iterations.min(self.overload_iterations)
        } else {
            self.iterations
        }
    }
}
