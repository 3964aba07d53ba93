//! The energy-aware DVFS model of Mei, Wang, Chu et al. (arXiv 2104.00486),
//! (docs/dvfs.md): the performance and power
//! model ([`model`]), Algorithm 1, the per-task optimal clocks with and
//! without a length bound ([`solve`]), and the fit of the model to
//! measurements ([`fit`]), and the paper's cluster model ([`cluster`]).
//!
//! Pure numbers, no I/O: the policies, the simulator and `gpuctl` share it.

pub mod cluster;
pub mod fit;
pub mod model;
pub mod solve;

pub use model::{g1, voltage, Point, Profile, Setting};
pub use solve::{Choice, Class, Options, Search};
