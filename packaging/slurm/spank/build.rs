//! Reads the installed Slurm headers (`$SLURM_INCLUDE_DIR/slurm`, default
//! `/usr/include/slurm`, from libslurm-dev): compiles src/spank_h.c against
//! them, which fails where src/spank.rs's declarations are not the
//! headers', and runs it for the constants src/spank.rs includes
//! (`$OUT_DIR/spank_h.rs`), the plugin version among them.

use std::path::PathBuf;
use std::process::Command;

fn main() {
    println!("cargo:rerun-if-changed=src/spank_h.c");
    println!("cargo:rerun-if-env-changed=SLURM_INCLUDE_DIR");
    let include =
        PathBuf::from(std::env::var("SLURM_INCLUDE_DIR").unwrap_or_else(|_| "/usr/include".into()));
    for header in ["slurm.h", "spank.h", "slurm_version.h"] {
        let path = include.join("slurm").join(header);
        if !path.is_file() {
            panic!(
                "{} is missing: gpu_agent_spank.so is built against the installed Slurm's \
                 headers (Debian: apt-get install libslurm-dev; elsewhere set SLURM_INCLUDE_DIR)",
                path.display()
            );
        }
        println!("cargo:rerun-if-changed={}", path.display());
    }
    let out = PathBuf::from(std::env::var("OUT_DIR").expect("cargo sets OUT_DIR"));
    let program = out.join("spank_h");
    let mut compile = cc::Build::new()
        .cargo_metadata(false)
        .get_compiler()
        .to_command();
    compile
        .arg("-Werror")
        .arg("-I")
        .arg(&include)
        .arg("src/spank_h.c")
        .arg("-o")
        .arg(&program);
    let status = compile.status().expect("run the C compiler");
    assert!(
        status.success(),
        "{compile:?} failed: see the compiler's message above"
    );
    let output = Command::new(&program).output().expect("run spank_h");
    assert!(output.status.success(), "{} failed", program.display());
    std::fs::write(out.join("spank_h.rs"), output.stdout).expect("write spank_h.rs");
}
