//! README.md's examples, and every command block of docs/*.md, run as a
//! user would type them. The "Running the daemon" section: its
//! `gpu-agentd --mock ...` line starts the daemon (on a private bus, a fresh
//! state directory), then every line of the `gpuctl` block after it runs in a
//! project directory holding a `train.py`, in order, and must end with exit
//! status 0, or the one its comment names (`# exit 1: ...`). The offline
//! examples (the simulator, DVFS, `inspect --mock`) run the same way without
//! a daemon. An example that stops working as written fails here. (Left out:
//! `cargo build --release` of First run, Install's packages and systemd, Real
//! workloads' data outside the repository, real GPUs, and the benchmarks.)
//!
//! Each of docs/*.md runs its `sh` blocks in order against a daemon of its
//! own on the mock GPUs of `examples/host-mig.toml`, a private bus standing
//! in for both the system and the session bus; a block whose first line is
//! `# needs: WHAT` (a real GPU, Slurm, data outside the repository) says so
//! to its reader and is not run.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::Duration;

use gpu_agent_dbus::private_bus::PrivateBus;

use crate::daemon::wait_for;
use crate::harness::artefacts;

/// The `sh` blocks of `text` after the heading `heading`, in order.
fn blocks_after<'a>(text: &'a str, heading: &str) -> Vec<Vec<&'a str>> {
    let section = text
        .split_once(&format!("\n{heading}\n"))
        .unwrap_or_else(|| panic!("README.md has no {heading:?}"))
        .1;
    let section = section.split("\n## ").next().unwrap_or(section);
    let mut blocks = Vec::new();
    let mut lines = section.lines();
    while let Some(line) = lines.next() {
        if line.trim() == "```sh" {
            blocks.push(lines.by_ref().take_while(|l| l.trim() != "```").collect());
        }
    }
    blocks
}

/// A command line of a block: the command without its comment, and the
/// exit status the comment names (`exit N`), else 0. `None` for a line that
/// is only a comment (the previous line's, continued).
fn command(line: &str) -> Option<(String, i32)> {
    if line.trim_start().starts_with('#') || line.trim().is_empty() {
        return None;
    }
    let (command, comment) = match line.find(" #") {
        Some(i) => (&line[..i], &line[i + 2..]),
        None => (line, ""),
    };
    let status = comment
        .split_once("exit ")
        .and_then(|(_, rest)| rest.split(|c: char| !c.is_ascii_digit()).next())
        .and_then(|n| n.parse().ok())
        .unwrap_or(0);
    Some((command.trim().to_string(), status))
}

/// `sh -c line` in `dir`, with the built gpuctl and gpu-agentd first on PATH
/// and `bus`, when given, as the session bus.
fn shell(line: &str, dir: &Path, bus: Option<&PrivateBus>) -> Command {
    let path = format!(
        "{}:{}",
        artefacts().display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let mut cmd = Command::new("/bin/sh");
    cmd.args(["-c", line])
        .current_dir(dir)
        .env("PATH", path)
        .env("NO_COLOR", "1")
        .env_remove("GPU_AGENT_BUS");
    if let Some(bus) = bus {
        cmd.env("DBUS_SESSION_BUS_ADDRESS", bus.address());
    }
    cmd
}

/// Stops the daemon the README started when the test ends, however it ends.
struct Stop(Child);

impl Drop for Stop {
    fn drop(&mut self) {
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(self.0.id() as i32),
            nix::sys::signal::Signal::SIGTERM,
        );
        let _ = self.0.wait();
    }
}

/// Runs the gpu-agentd command `line` in `dir` on `bus` until the returned
/// guard drops, once `gpuctl --session status` answers.
fn start_daemon(line: &str, dir: &Path, bus: &PrivateBus) -> Stop {
    // exec: the daemon is the child that Stop ends, not a shell above it.
    let daemon = shell(&format!("exec {line}"), dir, Some(bus))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap_or_else(|e| panic!("{line}: {e}"));
    let stop = Stop(daemon);
    wait_for("the daemon on the bus", Duration::from_secs(20), || {
        let out = shell("gpuctl --session status", dir, Some(bus))
            .output()
            .ok()?;
        out.status.success().then_some(())
    });
    stop
}

#[test]
fn readme_running_the_daemon_works_as_written() {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..");
    let readme = std::fs::read_to_string(root.join("README.md")).unwrap();
    let blocks = blocks_after(&readme, "## Running the daemon");
    let [daemon_block, gpuctl_block, ..] = &blocks[..] else {
        panic!("README.md's \"Running the daemon\" has fewer than two sh blocks: {blocks:?}");
    };
    let daemon_line = daemon_block
        .iter()
        .find(|l| l.contains("--mock"))
        .expect("a gpu-agentd --mock line");

    // A project directory with train.py; examples/ as in a clone.
    let project = tempfile::tempdir().unwrap();
    std::fs::write(
        project.path().join("train.py"),
        "print('epoch 1: loss 0.5')\n",
    )
    .unwrap();
    std::os::unix::fs::symlink(root.join("examples"), project.path().join("examples")).unwrap();
    let state = project.path().join("state");
    let bus = PrivateBus::start().expect("a private bus");
    let line = daemon_line.replace("/tmp/ga", state.to_str().unwrap());
    let _stop = start_daemon(&line, project.path(), &bus);

    let mut ran = 0;
    for (line, status) in gpuctl_block.iter().filter_map(|l| command(l)) {
        let out: Output = shell(&line, project.path(), Some(&bus))
            .env("GPU_AGENT_BUS", "session")
            .output()
            .unwrap();
        assert_eq!(
            out.status.code(),
            Some(status),
            "README.md: `{line}` exited {} (the README says {status})\nstdout:\n{}\nstderr:\n{}",
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        ran += 1;
    }
    assert!(ran >= 10, "only {ran} commands ran");
    // What the first submit printed is beside train.py, and gpuctl logs has it.
    let output = std::fs::read_to_string(project.path().join("gpu-agent-t1.out")).unwrap();
    assert_eq!(output, "epoch 1: loss 0.5\n");
}

#[test]
fn readme_offline_examples_work_as_written() {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..");
    let readme = std::fs::read_to_string(root.join("README.md")).unwrap();
    let mut lines: Vec<(String, i32)> = Vec::new();
    // The daemon section's blocks after its two (the simulator on its own).
    for block in blocks_after(&readme, "## Running the daemon")
        .iter()
        .skip(2)
    {
        lines.extend(block.iter().filter_map(|l| command(l)));
    }
    for block in blocks_after(&readme, "## DVFS: profiles and the energy-aware paper") {
        lines.extend(block.iter().filter_map(|l| command(l)));
    }
    // Only the mock's: the others need an NVIDIA GPU.
    for block in blocks_after(&readme, "## Looking at GPUs") {
        lines.extend(
            block
                .iter()
                .filter(|l| l.contains("--mock"))
                .filter_map(|l| command(l)),
        );
    }
    assert!(lines.len() >= 7, "{lines:?}");
    let work = tempfile::tempdir().unwrap();
    std::os::unix::fs::symlink(root.join("examples"), work.path().join("examples")).unwrap();
    for (line, status) in lines {
        let out = shell(&line, work.path(), None).output().unwrap();
        assert_eq!(
            out.status.code(),
            Some(status),
            "README.md: `{line}` exited {}\nstderr:\n{}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

#[test]
fn readme_command_lines_are_read_with_their_exit_status() {
    assert_eq!(
        command("gpuctl tasks   # or: gpuctl task t1"),
        Some(("gpuctl tasks".into(), 0))
    );
    assert_eq!(
        command("gpuctl mig assert -f x -c y   # exit 1: the differences"),
        Some(("gpuctl mig assert -f x -c y".into(), 1))
    );
    assert_eq!(command("                             # hold GPU 1"), None);
    assert_eq!(
        command("gpuctl metrics"),
        Some(("gpuctl metrics".into(), 0))
    );
}

/// The `sh` blocks of `text`: the line each opens on (1-based) and its lines.
fn sh_blocks(text: &str) -> Vec<(usize, Vec<&str>)> {
    let mut blocks = Vec::new();
    let mut lines = text.lines().enumerate();
    while let Some((i, line)) = lines.next() {
        if line.trim() == "```sh" {
            let body = lines
                .by_ref()
                .map(|(_, l)| l)
                .take_while(|l| l.trim() != "```")
                .collect();
            blocks.push((i + 1, body));
        }
    }
    blocks
}

/// The commands of a block as [`command`] reads them, a line ending in `\`
/// joined with the next.
fn commands(block: &[&str]) -> Vec<(String, i32)> {
    let mut joined = Vec::new();
    let mut open = String::new();
    for line in block {
        match line.strip_suffix('\\') {
            Some(start) => open.push_str(start),
            None => {
                open.push_str(line);
                joined.push(std::mem::take(&mut open));
            }
        }
    }
    joined.iter().filter_map(|l| command(l)).collect()
}

#[test]
fn docs_command_blocks_work_as_written() {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..");
    let mut docs: Vec<PathBuf> = std::fs::read_dir(root.join("docs"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "md"))
        .collect();
    docs.sort();
    let mut ran = 0;
    for doc in &docs {
        let text = std::fs::read_to_string(doc).unwrap();
        let name = doc.strip_prefix(&root).unwrap().display().to_string();
        let blocks: Vec<_> = sh_blocks(&text)
            .into_iter()
            .filter(|(_, block)| {
                !block
                    .first()
                    .is_some_and(|l| l.trim_start().starts_with("# needs: "))
            })
            .collect();
        if blocks.is_empty() {
            continue;
        }
        let project = tempfile::tempdir().unwrap();
        std::fs::write(project.path().join("train.py"), "print('epoch 1')\n").unwrap();
        std::os::unix::fs::symlink(root.join("examples"), project.path().join("examples")).unwrap();
        let bus = PrivateBus::start().expect("a private bus");
        let state = project.path().join("state");
        let line = format!(
            "gpu-agentd --mock examples/host-mig.toml --session --time-scale 60 --state-dir {}",
            state.display()
        );
        let _stop = start_daemon(&line, project.path(), &bus);
        for (at, block) in &blocks {
            for (line, status) in commands(block) {
                let out = shell(&line, project.path(), Some(&bus))
                    .env("DBUS_SYSTEM_BUS_ADDRESS", bus.address())
                    .output()
                    .unwrap();
                assert_eq!(
                    out.status.code(),
                    Some(status),
                    "{name}, the block at line {at}: `{line}` exited {} (the block says {status})\n\
                     stdout:\n{}\nstderr:\n{}",
                    out.status,
                    String::from_utf8_lossy(&out.stdout),
                    String::from_utf8_lossy(&out.stderr)
                );
                ran += 1;
            }
        }
    }
    assert!(ran >= 10, "only {ran} commands of docs/*.md ran");
}

#[test]
fn doc_blocks_are_read_with_their_continuations() {
    let text = "intro\n```sh\n# needs: a GPU\nnvidia-smi\n```\n```sh\nbusctl call a \\\n    b c   # exit 4: refused\ngpuctl tasks\n```\n";
    let blocks = sh_blocks(text);
    assert_eq!(blocks.len(), 2);
    assert_eq!(blocks[0], (2, vec!["# needs: a GPU", "nvidia-smi"]));
    assert_eq!(
        commands(&blocks[1].1),
        [
            ("busctl call a     b c".to_string(), 4),
            ("gpuctl tasks".to_string(), 0)
        ]
    );
}
