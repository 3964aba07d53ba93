//! The policy's parameters: names, defaults, help and parsing.

use gpu_agent_dvfs::{Options, Search};
use gpu_agent_plugin_api::{abi_stable::std_types::RStr, Param, ParamInfo, ParamReader};

const RULES: &[RStr<'static>] = &[
    RStr::from_str("edl"),
    RStr::from_str("edf-bf"),
    RStr::from_str("edf-wf"),
    RStr::from_str("lpt-ff"),
    RStr::from_str("bin-pack"),
];
const SEARCHES: &[RStr<'static>] = &[RStr::from_str("code"), RStr::from_str("paper")];
const LATE: &[RStr<'static>] = &[RStr::from_str("fastest"), RStr::from_str("default")];

/// Every parameter with its default (the defaults are parsed from here).
pub const PARAMETERS: [ParamInfo; 5] = [
    ParamInfo::choice(
        "rule",
        "edl",
        RULES,
        "placement rule: edl (EDF order, the device free first, theta-readjustment), edf-bf, edf-wf (EDF order, the fitting device of largest / smallest load), lpt-ff (longest first, first fitting device), bin-pack (edf-wf for the first batch, then first fit in EDF order)",
    ),
    ParamInfo::number(
        "theta",
        "0.9",
        "edl: a task that does not fit the device free first is sped up into its slack when the slack exceeds max(theta x its length, its shortest length)",
    )
    .above(0.0)
    .at_most(1.0),
    ParamInfo::choice(
        "search",
        "code",
        SEARCHES,
        "Algorithm 1's search: code (the authors' 0.05 V grid) or paper (a dense grid and the least memory clock meeting a bound)",
    ),
    ParamInfo::bool(
        "compat",
        "false",
        "reproduce the authors' code, quirks included (a deadline-prior task keeps its late optimum); false: DVFS never makes a task miss a deadline it could meet",
    ),
    ParamInfo::choice(
        "late",
        "fastest",
        LATE,
        "clocks of a task no GPU takes in time: fastest (the search's fastest clocks, as the paper's model would; least lateness) or default (the default clocks; less energy, later)",
    ),
];

/// A placement rule (docs/dvfs.md §3.2–§3.4).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Rule {
    /// EDF order, the device free first (SPT), θ-readjustment.
    Edl,
    /// EDF order, the fitting device of largest load (last on ties).
    EdfBf,
    /// EDF order, the fitting device of smallest load (first on ties).
    EdfWf,
    /// Longest task first, the first fitting device.
    LptFf,
    /// The paper's BIN: EDF-WF for the first batch, first fit in EDF order after.
    BinPack,
}

impl Rule {
    fn parse(name: &str) -> Option<Rule> {
        Some(match name {
            "edl" => Rule::Edl,
            "edf-bf" => Rule::EdfBf,
            "edf-wf" => Rule::EdfWf,
            "lpt-ff" => Rule::LptFf,
            "bin-pack" => Rule::BinPack,
            _ => return None,
        })
    }
}

/// Parsed parameters.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Params {
    /// The placement rule.
    pub rule: Rule,
    /// θ of the readjustment (edl).
    pub theta: f64,
    /// Algorithm 1's search and compat switch (the clock ranges are the
    /// device's, set per decision).
    pub options: Options,
    /// A task no GPU takes in time runs at the fastest clocks (else default).
    pub late_fastest: bool,
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
            rule: read.choice("rule", Rule::parse),
            theta: read.number("theta"),
            late_fastest: read.choice("late", |w| Some(w == "fastest")),
            options: Options {
                search: read.choice("search", Search::parse),
                compat: read.bool("compat"),
                ..Options::default()
            },
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
    fn defaults_and_values_parse_and_bad_ones_are_named() {
        let d = Params::default();
        assert_eq!((d.rule, d.theta), (Rule::Edl, 0.9));
        assert_eq!((d.options.search, d.options.compat), (Search::Code, false));
        assert!(d.late_fastest);
        assert!(!Params::parse(&[p("late", "default")]).unwrap().late_fastest);
        let q = Params::parse(&[
            p("rule", "lpt-ff"),
            p("theta", "1"),
            p("search", "paper"),
            p("compat", "true"),
        ])
        .unwrap();
        assert_eq!((q.rule, q.theta), (Rule::LptFf, 1.0));
        assert_eq!((q.options.search, q.options.compat), (Search::Paper, true));
        assert_eq!(
            Params::parse(&[p("theta", "0")]),
            Err("theta: expected a number in (0, 1], got \"0\"".into())
        );
        assert!(Params::parse(&[p("rule", "edf")])
            .unwrap_err()
            .starts_with("rule: expected one of edl, edf-bf"));
    }
}
