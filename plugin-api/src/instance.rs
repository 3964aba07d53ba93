//! A running policy object, as the agent holds one: what the loader makes of
//! a plugin and the core runs (host side; nothing here crosses the ABI).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use crate::PolicyBox;

/// A running policy object and the name it was selected by.
pub struct PolicyInstance {
    /// Policy name.
    pub name: String,
    /// The policy object.
    pub policy: PolicyBox,
    /// Raised when a call of `policy` was given up while it still runs.
    pub abandoned: Abandoned,
}

impl PolicyInstance {
    /// `policy`, selected as `name`, whose calls return before the core
    /// goes on (it runs on the caller's thread).
    pub fn new(name: impl Into<String>, policy: PolicyBox) -> PolicyInstance {
        PolicyInstance {
            name: name.into(),
            policy,
            abandoned: Abandoned::default(),
        }
    }
}

/// Raised by a policy object whose calls run on a thread of their own (the
/// daemon's time budget) when it stops waiting for one and answers `Err`:
/// that call may still be reading the view it was lent, so the core, seeing
/// it raised after the call, never changes or frees what that view shows
/// again (it leaks those buffers and goes on with copies of them).
#[derive(Debug, Clone, Default)]
pub struct Abandoned(Arc<AtomicBool>);

impl Abandoned {
    /// Marks the call under way as given up.
    pub fn raise(&self) {
        self.0.store(true, Ordering::Release);
    }

    /// Whether a call was given up.
    pub fn is_raised(&self) -> bool {
        self.0.load(Ordering::Acquire)
    }
}
