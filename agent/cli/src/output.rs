//! Standard output: every command writes through here, so that a reader
//! that stops early (`gpuctl tasks | head`) ends gpuctl quietly.

use std::cell::RefCell;
use std::io::{ErrorKind, Write};

use anyhow::Context;
use serde::Serialize;

/// Standard output's reader went away: a pipeline saying it has read enough
/// (`gpuctl tasks | head`). gpuctl then ends quietly, with success.
#[derive(Debug, thiserror::Error)]
#[error("standard output is closed")]
pub struct StdoutClosed;

thread_local! {
    /// What the commands this thread runs in [`captured`] wrote.
    static CAPTURED: RefCell<Option<Vec<u8>>> = const { RefCell::new(None) };
}

/// Runs `f` keeping what it writes to standard output, and hands it back
/// beside `f`'s result: a command run in-process (`crate::run_captured`).
pub fn captured<T>(f: impl FnOnce() -> T) -> (T, Vec<u8>) {
    let outer = CAPTURED.with(|c| c.replace(Some(Vec::new())));
    let result = f();
    let written = CAPTURED.with(|c| c.replace(outer)).unwrap_or_default();
    (result, written)
}

/// Writes `text` to standard output.
pub fn emit(text: &str) -> anyhow::Result<()> {
    emit_bytes(text.as_bytes())
}

/// Writes `bytes` to standard output as they are, and flushes them.
pub fn emit_bytes(bytes: &[u8]) -> anyhow::Result<()> {
    let kept = CAPTURED.with(|c| match c.borrow_mut().as_mut() {
        Some(buffer) => {
            buffer.extend_from_slice(bytes);
            true
        }
        None => false,
    });
    if kept {
        return Ok(());
    }
    let mut out = std::io::stdout().lock();
    match out.write_all(bytes).and_then(|()| out.flush()) {
        Err(e) if e.kind() == ErrorKind::BrokenPipe => Err(StdoutClosed.into()),
        other => Ok(other.context("cannot write to standard output")?),
    }
}

/// Writes `value` to standard output as pretty JSON and a newline.
pub fn emit_json(value: &impl Serialize) -> anyhow::Result<()> {
    emit(&format!("{}\n", serde_json::to_string_pretty(value)?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn captured_keeps_what_is_emitted_and_only_while_it_runs() {
        let (done, written) = captured(|| {
            emit("one\n")?;
            let (inner, nested) = captured(|| emit_json(&[1, 2]));
            inner?;
            assert_eq!(nested, b"[\n  1,\n  2\n]\n");
            emit_bytes(b"two\n")
        });
        done.expect("memory takes everything");
        assert_eq!(written, b"one\ntwo\n");
        assert!(
            CAPTURED.with(|c| c.borrow().is_none()),
            "nothing kept afterwards"
        );
    }
}
