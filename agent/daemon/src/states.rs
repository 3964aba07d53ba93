//! The states the daemon shows as words: a device's health and a GPU's MIG
//! change state. The engine keeps them typed; the D-Bus objects, the
//! signals, the exporter's labels and the store write them with one
//! `Display` each, the words the wire and the stored state use.

use std::fmt;

/// A device's health: whether it takes work, and if not, why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Health {
    /// It takes work.
    Ok,
    /// An admin drained it (`SetDeviceOnline(gpu, false)`).
    Drained,
    /// A GPU split into MIG instances: it runs nothing itself (`mig`).
    Split,
    /// A MIG instance a layout change removed.
    Retired,
    /// Its UUID (a MIG instance's `MIG-…`) could not be read from the
    /// backend: no task could be shown it in `CUDA_VISIBLE_DEVICES`, so it
    /// takes none. Never stored: it follows the reading made at startup
    /// and after each layout change of its GPU.
    NoUuid,
    /// It failed, in the backend's words (`lost`, `xid 79: GPU has fallen
    /// off the bus`): offline until an admin brings it back.
    Failed(String),
}

impl Health {
    /// Whether it takes work.
    pub fn is_ok(&self) -> bool {
        *self == Health::Ok
    }

    /// A health as written by [`Display`] (a stored one, say): a word it
    /// does not know is a failure's description.
    pub fn parse(text: &str) -> Health {
        match text {
            "ok" => Health::Ok,
            "drained" => Health::Drained,
            "mig" => Health::Split,
            "retired" => Health::Retired,
            "no-uuid" => Health::NoUuid,
            failure => Health::Failed(failure.to_string()),
        }
    }
}

impl fmt::Display for Health {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Health::Ok => "ok",
            Health::Drained => "drained",
            Health::Split => "mig",
            Health::Retired => "retired",
            Health::NoUuid => "no-uuid",
            Health::Failed(why) => why,
        })
    }
}

impl From<&str> for Health {
    fn from(text: &str) -> Health {
        Health::parse(text)
    }
}

/// Where a GPU's MIG layout change stands (`MigChanged`, `GetMigLayout`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MigState {
    /// The change is under way: the GPU's devices take no work; tasks still
    /// run.
    Draining,
    /// The GPU is idle; the engine changes it.
    Applying,
    /// The layout is as asked (or the change was cancelled).
    Stable,
    /// The mode change waits for a GPU reset the agent could not do.
    ResetRequired,
    /// The change failed.
    Failed,
}

impl MigState {
    /// Every state.
    pub const ALL: [MigState; 5] = [
        MigState::Draining,
        MigState::Applying,
        MigState::Stable,
        MigState::ResetRequired,
        MigState::Failed,
    ];

    /// Its word on the wire and in the store.
    pub fn as_str(self) -> &'static str {
        match self {
            MigState::Draining => "draining",
            MigState::Applying => "applying",
            MigState::Stable => "stable",
            MigState::ResetRequired => "reset-required",
            MigState::Failed => "failed",
        }
    }

    /// The state [`MigState::as_str`] wrote, if any.
    pub fn parse(text: &str) -> Option<MigState> {
        MigState::ALL.into_iter().find(|s| s.as_str() == text)
    }
}

impl fmt::Display for MigState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_state_reads_back_as_it_was_written() {
        let healths = [
            Health::Ok,
            Health::Drained,
            Health::Split,
            Health::Retired,
            Health::NoUuid,
            Health::Failed("lost".into()),
            Health::Failed("xid 79: GPU has fallen off the bus".into()),
        ];
        for h in healths {
            assert_eq!(Health::parse(&h.to_string()), h);
        }
        assert_eq!(Health::Split.to_string(), "mig");
        for s in MigState::ALL {
            assert_eq!(MigState::parse(&s.to_string()), Some(s));
        }
        assert_eq!(MigState::ResetRequired.to_string(), "reset-required");
        assert_eq!(MigState::parse("done"), None);
    }
}
