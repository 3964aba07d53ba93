//! Test hooks: environment variables that make the daemon die or hang at a
//! chosen instant, as a crash or a call that never returns would, for the
//! end-to-end tests. They exist only in a build with the `test-hooks`
//! feature, which the e2e harness enables for the binaries it builds into
//! `target/e2e`; any other build (the packages' release build among them)
//! reads none of them, and does not even hold their names.

/// A test hook.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Hook {
    /// `GPU_AGENT_TEST_KILL_AFTER_STORE=<task name>`: the engine SIGKILLs
    /// its process right after storing a new task of that name, before
    /// answering.
    KillAfterStore,
    /// `GPU_AGENT_TEST_HANG_ON=<task name>`: the engine thread hangs for
    /// good when a task of that name is submitted.
    HangOn,
    /// `GPU_AGENT_TEST_PANIC_ON=<task name>`: the engine thread panics when
    /// a task of that name is submitted.
    PanicOn,
    /// `GPU_AGENT_TEST_KILL_IN_MIG_APPLY=<file>`: the engine SIGKILLs its
    /// process once a MIG layout's new instances exist, before the change
    /// is stored as made; once per `<file>`, which it creates first.
    KillInMigApply,
}

impl Hook {
    /// The hook's value in the environment; always `None` in a build
    /// without the `test-hooks` feature.
    pub fn value(self) -> Option<String> {
        #[cfg(feature = "test-hooks")]
        {
            std::env::var(match self {
                Hook::KillAfterStore => "GPU_AGENT_TEST_KILL_AFTER_STORE",
                Hook::HangOn => "GPU_AGENT_TEST_HANG_ON",
                Hook::PanicOn => "GPU_AGENT_TEST_PANIC_ON",
                Hook::KillInMigApply => "GPU_AGENT_TEST_KILL_IN_MIG_APPLY",
            })
            .ok()
        }
        #[cfg(not(feature = "test-hooks"))]
        {
            None
        }
    }
}

#[cfg(all(test, not(feature = "test-hooks")))]
mod tests {
    use super::Hook;

    #[test]
    fn a_build_without_the_feature_reads_no_hook() {
        for (name, hook) in [
            ("GPU_AGENT_TEST_KILL_AFTER_STORE", Hook::KillAfterStore),
            ("GPU_AGENT_TEST_HANG_ON", Hook::HangOn),
            ("GPU_AGENT_TEST_PANIC_ON", Hook::PanicOn),
            ("GPU_AGENT_TEST_KILL_IN_MIG_APPLY", Hook::KillInMigApply),
        ] {
            std::env::set_var(name, "x");
            assert_eq!(hook.value(), None, "{name}");
        }
    }
}
