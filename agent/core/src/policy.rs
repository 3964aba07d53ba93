//! A running policy object, and the built-in FIFO order the core falls back to.

use gpu_agent_fifo_rule::Fifo;
use gpu_agent_plugin_api::guard;

pub use gpu_agent_plugin_api::instance::{Abandoned, PolicyInstance};

/// The built-in FIFO order the core falls back to when a policy fails.
pub fn builtin_fifo() -> PolicyInstance {
    PolicyInstance::new("fifo (built-in fallback)", guard(Fifo::default()))
}
