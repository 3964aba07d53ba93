//! Reading the files users write by hand: hosts, traces, DVFS profiles and
//! the DVFS measurements they are fitted to.
//!
//! Every reader names the file, line and field of a bad value
//! ([`InputError`]) and returns nothing partial.

pub mod apps;
mod error;
pub mod host;
pub mod measurements;
pub mod trace;

use std::path::Path;

pub use error::{line_of, InputError};

/// The whole text of `path`.
pub fn read_text(path: &Path) -> Result<String, InputError> {
    std::fs::read_to_string(path)
        .map_err(|e| InputError::at(path, None, None, format!("cannot read: {e}")))
}

/// `text`, the contents of TOML file `path`, as a `T`; a syntax error or a key
/// of the wrong type names its line.
pub fn parse_toml<T: serde::de::DeserializeOwned>(
    path: &Path,
    text: &str,
) -> Result<T, InputError> {
    toml::from_str(text).map_err(|e| {
        let line = e.span().map(|s| line_of(text, s.start));
        InputError::at(path, line, None, e.message().trim_end().to_string())
    })
}
