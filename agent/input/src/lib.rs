//! Files users write by hand, and files written whole or not at all.
//!
//! - [`InputError`]: a bad value named by file, line and field; [`line_of`]
//!   finds the line of a byte offset;
//! - [`read_text`] and [`parse_toml`]: the one way a TOML file is read (a
//!   syntax error names its line, a key of the wrong type its line and key);
//! - [`atomic`]: a file written to a temporary beside it and renamed over it.

pub mod atomic;
mod error;

use std::path::Path;

pub use error::{line_of, InputError};

/// The whole text of `path`.
pub fn read_text(path: &Path) -> Result<String, InputError> {
    std::fs::read_to_string(path)
        .map_err(|e| InputError::at(path, None, None, format!("cannot read: {e}")))
}

/// `text`, the contents of TOML file `path`, as a `T`; a syntax error names
/// its line, a key of the wrong type or an unknown one its line and key (for
/// an unknown key, the table that has it).
pub fn parse_toml<T: serde::de::DeserializeOwned>(
    path: &Path,
    text: &str,
) -> Result<T, InputError> {
    toml::from_str(text).map_err(|e| {
        let line = e.span().map(|s| line_of(text, s.start));
        InputError::at(path, line, key_of(&e), e.message().trim_end().to_string())
    })
}

/// The dotted key a deserialisation error is about, if any. `toml` keeps it
/// private and says it only when it displays the error without its input,
/// as a last line "in `a.b`".
fn key_of(e: &toml::de::Error) -> Option<String> {
    let mut bare = e.clone();
    bare.set_input(None);
    let text = bare.to_string();
    let key = text
        .lines()
        .last()?
        .strip_prefix("in `")?
        .strip_suffix('`')?;
    Some(key.to_string())
}
