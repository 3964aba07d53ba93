//! Errors in files users write by hand, named by file, line and field.

use std::{fmt, path::PathBuf};

/// A bad value in an input file: `file:line: column field: message`.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub struct InputError {
    /// The file.
    pub file: PathBuf,
    /// 1-based line, when known.
    pub line: Option<u64>,
    /// What the error is about (`column workload`, `gpu[1].speed`), when known.
    pub field: Option<String>,
    /// What was wrong and what was expected.
    pub message: String,
}

impl InputError {
    /// An error at `line` of `file` about `field`.
    pub fn at(
        file: impl Into<PathBuf>,
        line: Option<u64>,
        field: Option<String>,
        message: impl Into<String>,
    ) -> Self {
        InputError {
            file: file.into(),
            line,
            field,
            message: message.into(),
        }
    }
}

impl fmt::Display for InputError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.file.display())?;
        if let Some(line) = self.line {
            write!(f, ":{line}")?;
        }
        match &self.field {
            Some(field) => write!(f, ": {field}: {}", self.message),
            None => write!(f, ": {}", self.message),
        }
    }
}

/// The 1-based line of byte `offset` in `text`.
pub fn line_of(text: &str, offset: usize) -> u64 {
    text.as_bytes()[..offset.min(text.len())]
        .iter()
        .filter(|&&b| b == b'\n')
        .count() as u64
        + 1
}
