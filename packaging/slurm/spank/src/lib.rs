//! gpu_agent_spank.so, gpu-agent's SPANK plugin (docs/slurm.md, "Energy in
//! the job record"): at the end of a job's step on a node, the job's GPU
//! energy so far, from the task gpu-agentd adopted for it, goes into the
//! job's AdminComment beside the task id the prolog wrote
//! (`gpu_agent_task=t12 gpu_energy_j=51234.5`), where `scontrol show job`
//! (and, with slurmdbd, `sacct -o AdminComment`) shows it.
//!
//! `record` is the work, `spank` the Slurm side; the unit tests build
//! without the latter, whose symbols only slurmstepd provides.

mod record;
#[cfg(not(test))]
mod spank;
