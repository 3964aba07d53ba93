//! Signals that arrive while the daemon starts.
//!
//! gpu-agentd calls [`hold`] from an ELF constructor, the first code of its
//! own (before the Rust runtime's start-up and `main`; only the dynamic
//! loader's relocation comes before, ~0.3 ms for the debug binary's 85,632
//! relative relocations), so that no signal the daemon handles can take the
//! default action (death) after that: until the
//! runtime's own handlers are installed, a SIGHUP or a SIGTERM/SIGINT is only
//! noted here. The handlers installed later (tokio's, through
//! signal-hook-registry) chain to this one, and the daemon asks, once it is
//! ready, whether a hangup came early ([`take_hangup`]: reload then) and,
//! before it waits for a stop, whether one was asked for already
//! ([`stop_requested`]).

use std::sync::atomic::{AtomicBool, Ordering};

use nix::sys::signal::{sigaction, SaFlags, SigAction, SigHandler, SigSet, Signal};

static HANGUP: AtomicBool = AtomicBool::new(false);
static STOP: AtomicBool = AtomicBool::new(false);

extern "C" fn note(signal: libc::c_int) {
    // Only an atomic store: async-signal-safe.
    if signal == Signal::SIGHUP as libc::c_int {
        HANGUP.store(true, Ordering::SeqCst);
    } else {
        STOP.store(true, Ordering::SeqCst);
    }
}

/// Notes SIGHUP, SIGTERM and SIGINT instead of dying of them.
pub fn hold() -> nix::Result<()> {
    let action = SigAction::new(
        SigHandler::Handler(note),
        SaFlags::SA_RESTART,
        SigSet::empty(),
    );
    for signal in [Signal::SIGHUP, Signal::SIGTERM, Signal::SIGINT] {
        // SAFETY: `note` only stores to atomics, which is async-signal-safe.
        unsafe { sigaction(signal, &action) }?;
    }
    Ok(())
}

/// Whether a SIGHUP came since [`hold`] (or the last call); clears it.
pub fn take_hangup() -> bool {
    HANGUP.swap(false, Ordering::SeqCst)
}

/// Whether a SIGTERM or SIGINT came since [`hold`].
pub fn stop_requested() -> bool {
    STOP.load(Ordering::SeqCst)
}
