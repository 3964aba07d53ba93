//! Errors of reading and resolving a configuration file.

use std::fmt;

/// A place in the YAML text (1-based; line 0 = not from a file).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord)]
pub struct Pos {
    /// Line, from 1.
    pub line: u32,
    /// Column, from 1.
    pub column: u32,
}

impl Pos {
    pub(crate) fn of(loc: &serde_saphyr::Location) -> Pos {
        Pos {
            line: loc.line() as u32,
            column: loc.column() as u32,
        }
    }
}

impl fmt::Display for Pos {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "line {}, column {}", self.line, self.column)
    }
}

/// What kind of refusal an error is; the D-Bus layer maps each to its error
/// name (docs/mig.md §6.2).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorKind {
    /// Malformed YAML, a broken schema rule, an unknown configuration or
    /// profile, counts that cannot be placed (`InvalidArgument`).
    Invalid,
    /// A request the agent does not carry out: MIG on a GPU that is not
    /// MIG-capable, `c.` profiles (`NotSupported`).
    NotSupported,
    /// A GPU index the host does not have (`NoSuchDevice`).
    NoSuchDevice,
}

/// A configuration file error: where, which key, what.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub struct ConfigError {
    /// The kind of refusal.
    pub kind: ErrorKind,
    /// Where in the text (line 0 when not from a file or unknown).
    pub pos: Pos,
    /// The key's path, e.g. `mig-configs.balanced[0].mig-devices` (empty for
    /// YAML syntax errors).
    pub key: String,
    /// What is wrong.
    pub message: String,
}

impl ConfigError {
    pub(crate) fn new(
        kind: ErrorKind,
        pos: Pos,
        key: impl Into<String>,
        message: impl Into<String>,
    ) -> Self {
        ConfigError {
            kind,
            pos,
            key: key.into(),
            message: message.into(),
        }
    }

    pub(crate) fn invalid(pos: Pos, key: impl Into<String>, message: impl Into<String>) -> Self {
        ConfigError::new(ErrorKind::Invalid, pos, key, message)
    }
}

impl fmt::Display for ConfigError {
    /// `line 9, column 9: mig-configs.balanced[0].mig-devices: 2g.20gb is not
    /// a profile of A100-SXM4-40GB (GPU 0)`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.pos.line > 0 {
            write!(f, "{}: ", self.pos)?;
        }
        if !self.key.is_empty() {
            write!(f, "{}: ", self.key)?;
        }
        f.write_str(&self.message)
    }
}
