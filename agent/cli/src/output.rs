//! Standard output: every command writes through here, so that a reader
//! that stops early (`gpuctl tasks | head`) ends gpuctl quietly.

use std::io::{ErrorKind, Write};

use anyhow::Context;
use serde::Serialize;

/// Standard output's reader went away: a pipeline saying it has read enough
/// (`gpuctl tasks | head`). gpuctl then ends quietly, with success.
#[derive(Debug, thiserror::Error)]
#[error("standard output is closed")]
pub struct StdoutClosed;

/// Writes `text` to standard output.
pub fn emit(text: &str) -> anyhow::Result<()> {
    emit_bytes(text.as_bytes())
}

/// Writes `bytes` to standard output as they are, and flushes them.
pub fn emit_bytes(bytes: &[u8]) -> anyhow::Result<()> {
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
