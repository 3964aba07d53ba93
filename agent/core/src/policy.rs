//! A running policy object, and the built-in FIFO order the core falls back to.

use gpu_agent_plugin_api::{guard, PolicyBox};
use gpu_agent_policy_fifo::Fifo;

/// A running policy object and the name it was selected by.
pub struct PolicyInstance {
    /// Policy name.
    pub name: String,
    /// The policy object.
    pub policy: PolicyBox,
}

/// The built-in FIFO order the core falls back to when a policy fails.
pub fn builtin_fifo() -> PolicyInstance {
    PolicyInstance {
        name: "fifo (built-in fallback)".into(),
        policy: guard(Fifo::default()),
    }
}
