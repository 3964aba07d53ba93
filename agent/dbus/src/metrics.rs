//! The metrics on the wire: formats.md §4's keys in an `a{sv}`.

use zbus::zvariant::OwnedValue;

use super::task::{owned, Dict};
use gpu_agent_core::metrics::{Metrics, Rejection};

/// `Metrics()`'s dictionary; `rejected` is an `a(ss)` of (id, reason).
pub fn metrics_to_dict(m: &Metrics) -> Dict {
    let rejected: Vec<(String, String)> = m
        .rejected
        .iter()
        .map(|r| (r.id.clone(), r.reason.clone()))
        .collect();
    Dict::from([
        ("policy".into(), owned(m.policy.as_str())),
        ("tasks".into(), owned(m.tasks as u64)),
        ("rejected".into(), owned(rejected)),
        ("twt".into(), owned(m.twt)),
        ("twct".into(), owned(m.twct)),
        ("act".into(), owned(m.act)),
        ("dmc".into(), owned(m.dmc as u64)),
        ("dmr".into(), owned(m.dmr)),
        ("utilization".into(), owned(m.utilization)),
        ("makespan".into(), owned(m.makespan)),
        ("energy_j".into(), owned(m.energy_j)),
        ("energy_run_j".into(), owned(m.energy_run_j)),
        ("energy_idle_j".into(), owned(m.energy_idle_j)),
        ("energy_overhead_j".into(), owned(m.energy_overhead_j)),
        ("energy_baseline_j".into(), owned(m.energy_baseline_j)),
        ("energy_saving".into(), owned(m.energy_saving)),
    ])
}

/// Reads `Metrics()`'s dictionary. The energy split and baseline, which a
/// daemon older than them does not send, read NaN when absent.
pub fn metrics_from_dict(d: &Dict) -> Result<Metrics, String> {
    fn get<'a, T: TryFrom<&'a zbus::zvariant::Value<'a>>>(
        d: &'a Dict,
        key: &str,
    ) -> Result<T, String> {
        let v: &OwnedValue = d
            .get(key)
            .ok_or_else(|| format!("metrics without {key:?}"))?;
        T::try_from(v).map_err(|_| format!("metrics: {key:?} has the wrong type"))
    }
    fn newer(d: &Dict, key: &str) -> Result<f64, String> {
        if d.contains_key(key) {
            get(d, key)
        } else {
            Ok(f64::NAN)
        }
    }
    let rejected = d
        .get("rejected")
        .ok_or("metrics without \"rejected\"")?
        .try_clone()
        .map_err(|e| e.to_string())?;
    let rejected = Vec::<(String, String)>::try_from(rejected)
        .map_err(|_| "metrics: \"rejected\" has the wrong type".to_string())?;
    Ok(Metrics {
        policy: get::<&str>(d, "policy")?.into(),
        tasks: get::<u64>(d, "tasks")? as usize,
        rejected: rejected
            .into_iter()
            .map(|(id, reason)| Rejection { id, reason })
            .collect(),
        twt: get(d, "twt")?,
        twct: get(d, "twct")?,
        act: get(d, "act")?,
        dmc: get::<u64>(d, "dmc")? as usize,
        dmr: get(d, "dmr")?,
        utilization: get(d, "utilization")?,
        makespan: get(d, "makespan")?,
        energy_j: get(d, "energy_j")?,
        energy_run_j: newer(d, "energy_run_j")?,
        energy_idle_j: newer(d, "energy_idle_j")?,
        energy_overhead_j: newer(d, "energy_overhead_j")?,
        energy_baseline_j: newer(d, "energy_baseline_j")?,
        energy_saving: newer(d, "energy_saving")?,
    })
}
