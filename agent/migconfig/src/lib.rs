//! NVIDIA mig-parted v1 configuration files, as the agent reads them
//! (docs/mig.md §3): the same schema and meaning, files accepted unchanged, with
//! the agent's restrictions of §3.3.
//!
//! - [`file`]: the model ([`MigConfigFile`]), its reader ([`MigConfigFile::parse`],
//!   every rule of §3.1, errors naming line, column and key) and its writer
//!   ([`MigConfigFile::to_yaml`]);
//! - [`host`]: a file against a host's GPUs: the per-GPU targets of one
//!   configuration ([`resolve`]), what `assert` finds different
//!   ([`mismatches`]), the entries that select no GPU ([`unmatched`]) and
//!   the file `export` prints ([`export`]).

pub mod error;
pub mod file;
pub mod host;

pub use error::{ConfigError, ErrorKind, Pos};
pub use file::{Config, Devices, Entry, MigConfigFile, MigDevice, PciId};
pub use host::{export, mismatches, resolve, unmatched, GpuMig, HostGpu, Target};
