//! The SPANK side: the symbols Slurm's plugin loader requires
//! (`plugin_name`, `plugin_type`, `plugin_version`: slurmd and slurmstepd
//! refuse a SPANK plugin built for another Slurm major and minor release),
//! and the hook. Its declarations are spank.h's, checked by build.rs
//! (src/spank_h.c), which also gives the constants.
//!
//! `slurm_spank_exit` in remote context runs in each step's slurmstepd
//! after the step's tasks ended and before slurmstepd tells slurmctld the
//! step (for the batch step: the job) is done, so a job that ends by itself
//! is still running in slurmctld and its AdminComment can be updated (the
//! epilog runs after that, too late). The external step (`PrologFlags=
//! Contain`) ends only when slurmctld has ended the job: left alone.

use std::ffi::{c_char, c_int, c_void, CStr, CString};

use crate::record::{self, Args, Settings};

include!(concat!(env!("OUT_DIR"), "/spank_h.rs"));

/// spank.h's `spank_t`: a handle the plugin only passes back.
type Spank = *mut c_void;

extern "C" {
    fn spank_get_item(spank: Spank, item: c_int, ...) -> c_int;
    fn spank_getenv(spank: Spank, var: *const c_char, buf: *mut c_char, len: c_int) -> c_int;
    fn spank_remote(spank: Spank) -> c_int;
    fn slurm_info(format: *const c_char, ...);
    fn slurm_error(format: *const c_char, ...);
}

/// The plugin's name in Slurm's log lines.
#[no_mangle]
pub static plugin_name: [u8; 10] = *b"gpu_agent\0";
/// A SPANK plugin.
#[no_mangle]
pub static plugin_type: [u8; 6] = *b"spank\0";
/// The Slurm release the plugin is built for.
#[no_mangle]
pub static plugin_version: u32 = SLURM_VERSION_NUMBER;
/// The plugin's own version (spank.h's `SPANK_PLUGIN`).
#[no_mangle]
pub static spank_plugin_version: u32 = 1;

/// Writes the job's GPU energy into its AdminComment at the end of each
/// step but the external one, in remote context (slurmstepd); elsewhere
/// (srun, sbatch, salloc) does nothing. Always 0: nothing here fails a job.
///
/// # Safety
/// Called by Slurm with its handle and its `argv` of `ac` strings.
#[no_mangle]
pub unsafe extern "C" fn slurm_spank_exit(
    spank: Spank,
    ac: c_int,
    argv: *mut *mut c_char,
) -> c_int {
    let args: Vec<String> = (0..usize::try_from(ac).unwrap_or(0))
        .filter_map(|i| {
            let arg = *argv.add(i);
            (!arg.is_null()).then(|| CStr::from_ptr(arg).to_string_lossy().into_owned())
        })
        .collect();
    // A panic must not unwind into slurmstepd.
    if std::panic::catch_unwind(|| step_exit(spank, &args)).is_err() {
        error("gpu-agent: the SPANK plugin panicked at the end of a step; nothing written");
    }
    0
}

/// [`slurm_spank_exit`]'s work.
fn step_exit(spank: Spank, args: &[String]) {
    // SAFETY: the handle Slurm gave the hook.
    if unsafe { spank_remote(spank) } != 1 {
        return;
    }
    let (Some(job), Some(step)) = (item(spank, S_JOB_ID), item(spank, S_JOB_STEPID)) else {
        error("gpu-agent: spank_get_item gives no job or step id at the end of a step");
        return;
    };
    if step == SLURM_EXTERN_CONT || !has_gpus(spank) {
        return;
    }
    let step = if step == SLURM_BATCH_SCRIPT {
        "batch".to_string()
    } else {
        step.to_string()
    };
    let said = Args::parse(args.iter().map(String::as_str))
        .and_then(|args| Settings::read(&args.env_file))
        .and_then(|settings| record::record(&settings, job));
    match said {
        Ok(outcome) => info(&format!("gpu-agent: job {job} step {step}: {outcome}")),
        Err(e) => error(&format!(
            "gpu-agent: job {job} step {step}: GPU energy not written: {e}"
        )),
    }
}

/// A `uint32_t` item of the step (`S_JOB_ID`, `S_JOB_STEPID`).
fn item(spank: Spank, which: c_int) -> Option<u32> {
    let mut value: u32 = 0;
    // SAFETY: both items take a `uint32_t *` (spank.h).
    let rc = unsafe { spank_get_item(spank, which, &mut value as *mut u32) };
    (rc == ESPANK_SUCCESS).then_some(value)
}

/// Whether the job has GPUs, by its environment (as the scripts tell): a
/// job without them has no adopted task, and is not worth a gpuctl call.
fn has_gpus(spank: Spank) -> bool {
    ["SLURM_JOB_GPUS", "CUDA_VISIBLE_DEVICES"]
        .iter()
        .any(|var| {
            let var = CString::new(*var).expect("no NUL");
            let mut buf = [0 as c_char; 256];
            // SAFETY: buf holds len bytes; a value longer than that is still set
            // (ESPANK_NOSPACE).
            let rc =
                unsafe { spank_getenv(spank, var.as_ptr(), buf.as_mut_ptr(), buf.len() as c_int) };
            rc != ESPANK_ENV_NOEXIST
        })
}

/// `message` in slurmd's log at level info.
fn info(message: &str) {
    let message = c_message(message);
    // SAFETY: a printf format with one %s and its C string.
    unsafe { slurm_info(c"%s".as_ptr(), message.as_ptr()) }
}

/// `message` in slurmd's log at level error.
fn error(message: &str) {
    let message = c_message(message);
    // SAFETY: as in `info`.
    unsafe { slurm_error(c"%s".as_ptr(), message.as_ptr()) }
}

fn c_message(message: &str) -> CString {
    CString::new(message.replace('\0', " ")).expect("no NUL left")
}
