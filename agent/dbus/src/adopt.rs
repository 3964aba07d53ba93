//! `Adopt`: work the agent did not place (a Slurm job), taken in as an
//! external task on its devices.

use std::collections::HashMap;

use zbus::zvariant::OwnedValue;

use crate::task::{check_keys, owned, Dict};

/// The keys `Adopt` takes, with their D-Bus types.
const ADOPT_KEYS: [(&str, &str, &str); 5] = [
    ("devices", "au", "GPU indices, at least one, each once"),
    ("external_id", "s", "a non-empty id such as slurm:4242"),
    ("owner_uid", "u", "the job owner's uid"),
    ("app", "s", "a DVFS profile name"),
    ("deadline", "d", "unix time of the job's end"),
];

/// What `Adopt` is given (its `a{sv}`).
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct AdoptSpec {
    /// The GPUs the job holds.
    pub devices: Vec<u32>,
    /// The scheduler's id of the job (`slurm:<jobid>`).
    pub external_id: String,
    /// The job's owner.
    pub owner_uid: u32,
    /// DVFS application profile (`default` when absent).
    pub app: String,
    /// When the job must end, unix seconds.
    pub deadline: f64,
}

impl AdoptSpec {
    /// The `a{sv}` form (`app` left out at its default).
    pub fn to_dict(&self) -> Dict {
        let mut d: HashMap<String, OwnedValue> = Dict::new();
        d.insert("devices".into(), owned(self.devices.clone()));
        d.insert("external_id".into(), owned(self.external_id.as_str()));
        d.insert("owner_uid".into(), owned(self.owner_uid));
        if self.app != "default" {
            d.insert("app".into(), owned(self.app.as_str()));
        }
        d.insert("deadline".into(), owned(self.deadline));
        d
    }

    /// Reads an `Adopt` dictionary strictly: every key known and of its
    /// type, the required ones present, every value in range. The error
    /// names the key and what was expected.
    pub fn from_dict(dict: &Dict) -> Result<AdoptSpec, String> {
        check_keys(dict, &ADOPT_KEYS)?;
        let required = |key: &str| {
            let (_, sig, _) = ADOPT_KEYS
                .iter()
                .find(|(k, _, _)| *k == key)
                .expect("a key");
            dict.get(key)
                .ok_or_else(|| format!("missing required key {key:?} ({sig})"))
        };
        let text = |v: &OwnedValue| {
            <&str>::try_from(&**v)
                .expect("signature checked")
                .to_string()
        };
        let spec = AdoptSpec {
            devices: Vec::<u32>::try_from(
                required("devices")?
                    .try_clone()
                    .expect("no file descriptors"),
            )
            .expect("signature checked"),
            external_id: text(required("external_id")?),
            owner_uid: u32::try_from(&**required("owner_uid")?).expect("signature checked"),
            app: dict.get("app").map_or_else(|| "default".into(), text),
            deadline: f64::try_from(&**required("deadline")?).expect("signature checked"),
        };
        spec.check()?;
        Ok(spec)
    }

    /// Checks every value's range.
    pub fn check(&self) -> Result<(), String> {
        if self.devices.is_empty() {
            return Err("key \"devices\": expected at least one GPU index, got none".into());
        }
        let mut seen = self.devices.clone();
        seen.sort_unstable();
        if let Some(w) = seen.windows(2).find(|w| w[0] == w[1]) {
            return Err(format!("key \"devices\": GPU {} is named twice", w[0]));
        }
        if self.external_id.trim().is_empty() {
            return Err("key \"external_id\": expected a non-empty id such as slurm:4242".into());
        }
        if self.app.is_empty() {
            return Err("key \"app\": expected a DVFS profile name, got \"\"".into());
        }
        crate::task::within("external_id", &self.external_id, crate::task::NAME_MAX_LEN)?;
        crate::task::within("app", &self.app, crate::task::NAME_MAX_LEN)?;
        if !self.deadline.is_finite() || self.deadline <= 0.0 {
            return Err(format!(
                "key \"deadline\": expected unix time of the job's end, got {}",
                self.deadline
            ));
        }
        Ok(())
    }
}

/// How an adopted job ended, as `ReleaseWithEnd` is told (`completed`,
/// `cancelled`, `timeout`, `failed`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ReleaseEnd {
    /// The job ended by itself: the task becomes `succeeded` (what plain
    /// `Release` records).
    #[default]
    Completed,
    /// Cancelled (`scancel`): `cancelled`.
    Cancelled,
    /// Killed at its time limit: `failed`, with the reason `timeout`.
    Timeout,
    /// Failed otherwise: `failed`.
    Failed,
}

impl ReleaseEnd {
    /// Every end, in the order the CLI lists them.
    pub const ALL: [ReleaseEnd; 4] = [
        ReleaseEnd::Completed,
        ReleaseEnd::Cancelled,
        ReleaseEnd::Timeout,
        ReleaseEnd::Failed,
    ];

    /// Its D-Bus word.
    pub fn as_str(self) -> &'static str {
        match self {
            ReleaseEnd::Completed => "completed",
            ReleaseEnd::Cancelled => "cancelled",
            ReleaseEnd::Timeout => "timeout",
            ReleaseEnd::Failed => "failed",
        }
    }

    /// Parses a D-Bus word; an unknown one is an error naming it.
    pub fn parse(text: &str) -> Result<ReleaseEnd, String> {
        Self::ALL
            .into_iter()
            .find(|e| e.as_str() == text)
            .ok_or_else(|| {
                format!(
                    "argument \"end\": unknown end state {text:?}; known: completed, cancelled, timeout, failed"
                )
            })
    }

    /// The state the task is recorded in, and the reason that goes with it.
    pub fn outcome(self) -> (crate::TaskStatus, Option<&'static str>) {
        match self {
            ReleaseEnd::Completed => (crate::TaskStatus::Succeeded, None),
            ReleaseEnd::Cancelled => (crate::TaskStatus::Cancelled, None),
            ReleaseEnd::Timeout => (crate::TaskStatus::Failed, Some("timeout")),
            ReleaseEnd::Failed => (crate::TaskStatus::Failed, None),
        }
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn each_release_end_parses_back_and_an_unknown_one_is_named() {
        for end in super::ReleaseEnd::ALL {
            assert_eq!(super::ReleaseEnd::parse(end.as_str()), Ok(end));
        }
        let e = super::ReleaseEnd::parse("oom").unwrap_err();
        assert!(
            e.starts_with("argument \"end\": unknown end state \"oom\""),
            "{e}"
        );
    }

    use super::*;

    fn spec() -> AdoptSpec {
        AdoptSpec {
            devices: vec![1, 3],
            external_id: "slurm:4242".into(),
            owner_uid: 1000,
            app: "resnet".into(),
            deadline: 1.8e9,
        }
    }

    #[test]
    fn round_trips_and_app_defaults() {
        assert_eq!(AdoptSpec::from_dict(&spec().to_dict()).unwrap(), spec());
        let mut d = spec().to_dict();
        d.remove("app");
        assert_eq!(AdoptSpec::from_dict(&d).unwrap().app, "default");
    }

    #[test]
    fn refusals_name_the_key() {
        type Change = Box<dyn Fn(&mut Dict)>;
        let cases: Vec<(Change, &str)> = vec![
            (
                Box::new(|d| drop(d.remove("devices"))),
                "missing required key \"devices\" (au)",
            ),
            (
                Box::new(|d| drop(d.insert("devices".into(), owned(Vec::<u32>::new())))),
                "key \"devices\": expected at least one",
            ),
            (
                Box::new(|d| drop(d.insert("devices".into(), owned(vec![2u32, 2])))),
                "key \"devices\": GPU 2 is named twice",
            ),
            (
                Box::new(|d| drop(d.insert("devices".into(), owned(vec![1i32])))),
                "key \"devices\": expected type au",
            ),
            (
                Box::new(|d| drop(d.insert("external_id".into(), owned(" ")))),
                "key \"external_id\"",
            ),
            (
                Box::new(|d| drop(d.remove("owner_uid"))),
                "missing required key \"owner_uid\" (u)",
            ),
            (
                Box::new(|d| drop(d.insert("deadline".into(), owned(-1.0)))),
                "key \"deadline\"",
            ),
            (
                Box::new(|d| drop(d.insert("deadline".into(), owned(5u32)))),
                "key \"deadline\": expected type d",
            ),
            (
                Box::new(|d| drop(d.insert("app".into(), owned("")))),
                "key \"app\"",
            ),
            (
                Box::new(|d| drop(d.insert("gpus".into(), owned(1u32)))),
                "unknown key \"gpus\"",
            ),
        ];
        for (change, want) in cases {
            let mut d = spec().to_dict();
            change(&mut d);
            let err = AdoptSpec::from_dict(&d).unwrap_err();
            assert!(err.contains(want), "{err:?} lacks {want:?}");
        }
    }
}
