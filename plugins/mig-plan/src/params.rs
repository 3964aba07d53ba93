//! The policy's parameters: names, defaults, help and parsing.

use std::time::Duration;

use gpu_agent_migplan::Algorithm;
use gpu_agent_plugin_api::{abi_stable::std_types::RStr, Param, ParamInfo, ParamReader};

const ALGORITHMS: &[RStr<'static>] = &[RStr::from_str("exact"), RStr::from_str("greedy")];

/// Every parameter with its default (the defaults are parsed from here).
pub const PARAMETERS: [ParamInfo; 8] = [
    ParamInfo::number(
        "window_s",
        "300",
        "each application's demand is the work its tasks submitted over the last window_s seconds, per second; the first plan waits for one full window",
    )
    .above(0.0),
    ParamInfo::number(
        "period_s",
        "60",
        "seconds between plans while tasks are submitted, queued or running",
    )
    .above(0.0),
    ParamInfo::number(
        "min_interval_s",
        "600",
        "at most one layout request per GPU in this many seconds",
    )
    .at_least(0.0),
    ParamInfo::number(
        "min_gain",
        "0.1",
        "change layouts only when the plan serves a multiple of the demand at least (1 + min_gain) times the one the layouts there are serve",
    )
    .at_least(0.0),
    ParamInfo::integer(
        "max_changing",
        "1",
        "GPUs whose requested layout change is not yet applied, at most (each is drained meanwhile)",
    )
    .at_least(1.0),
    ParamInfo::choice(
        "algorithm",
        "exact",
        ALGORITHMS,
        "the planner's algorithm (/usr/share/doc/gpu-agent/mig.md §4): exact (integer program, time-limited) or greedy (LP bound plus multicover greedy)",
    ),
    ParamInfo::integer(
        "time_limit_ms",
        "1000",
        "exact: the wall-clock limit of one solve; the best plan found by then is used",
    )
    .at_least(1.0),
    ParamInfo::bool(
        "repartition",
        "true",
        "ask for layout changes (Decision::MigLayout; the agent needs [mig] allow_policy = true); false: only place, on the layouts there are",
    ),
];

/// Parsed parameters.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Params {
    /// Demand window, seconds.
    pub window_s: f64,
    /// Seconds between plans.
    pub period_s: f64,
    /// Seconds between two layout requests for one GPU, at least.
    pub min_interval_s: f64,
    /// The least relative gain (in the multiple of the demand served) a
    /// change must bring.
    pub min_gain: f64,
    /// Layout changes asked for and not yet applied, at most.
    pub max_changing: usize,
    /// The planner's algorithm.
    pub algorithm: Algorithm,
    /// Exact's time limit per solve.
    pub time_limit: Duration,
    /// Whether to ask for layout changes at all.
    pub repartition: bool,
}

impl Default for Params {
    fn default() -> Params {
        Params::parse(&[]).expect("the defaults parse")
    }
}

impl Params {
    /// Reads `params`, taking each absent one's default; a bad value is an
    /// error naming the parameter and what it expected.
    pub fn parse(params: &[Param]) -> Result<Params, String> {
        let read = ParamReader::new(&PARAMETERS, params)?;
        Ok(Params {
            window_s: read.number("window_s"),
            period_s: read.number("period_s"),
            min_interval_s: read.number("min_interval_s"),
            min_gain: read.number("min_gain"),
            max_changing: read.integer("max_changing"),
            algorithm: read.choice("algorithm", |w| w.parse().ok()),
            time_limit: Duration::from_millis(read.integer("time_limit_ms")),
            repartition: read.bool("repartition"),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(key: &str, value: &str) -> Param {
        Param {
            key: key.into(),
            value: value.into(),
        }
    }

    #[test]
    fn defaults() {
        assert_eq!(
            Params::default(),
            Params {
                window_s: 300.0,
                period_s: 60.0,
                min_interval_s: 600.0,
                min_gain: 0.1,
                max_changing: 1,
                algorithm: Algorithm::Exact,
                time_limit: Duration::from_millis(1000),
                repartition: true,
            }
        );
    }

    #[test]
    fn values_are_read_and_bad_ones_named() {
        let got = Params::parse(&[
            p("window_s", "30"),
            p("algorithm", "greedy"),
            p("max_changing", "2"),
            p("repartition", "false"),
        ])
        .unwrap();
        assert_eq!(
            (
                got.window_s,
                got.algorithm,
                got.max_changing,
                got.repartition
            ),
            (30.0, Algorithm::Greedy, 2, false)
        );
        assert_eq!(
            Params::parse(&[p("window_s", "0")]).unwrap_err(),
            "window_s: expected a number > 0, got \"0\""
        );
        assert_eq!(
            Params::parse(&[p("algorithm", "rounding")]).unwrap_err(),
            "algorithm: expected one of exact, greedy, got \"rounding\""
        );
    }
}
