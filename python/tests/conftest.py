"""What the tests share: the repository, and the gpuctl binary to compare with.

The tests compare gpu_agent with the real ``gpuctl`` of the main workspace,
live: ``GPUCTL`` names it, else target/release/gpuctl, else target/debug/gpuctl
(run ``cargo build`` first). It loads the package's plugins (``--plugin-dir``),
so both sides run the same files.
"""

import json
import os
import subprocess
from pathlib import Path

import pytest

import gpu_agent

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"


def _gpuctl_path() -> Path:
    given = os.environ.get("GPUCTL")
    if given:
        return Path(given)
    for profile in ("release", "debug"):
        candidate = ROOT / "target" / profile / "gpuctl"
        if candidate.exists():
            return candidate
    pytest.fail("no gpuctl: set GPUCTL or run cargo build in the repository")


class Gpuctl:
    """The gpuctl binary, on the package's plugins."""

    def __init__(self, path: Path):
        self.path = path

    def run(self, *args: str) -> subprocess.CompletedProcess:
        return subprocess.run([str(self.path), *args], capture_output=True, text=True, cwd=ROOT)

    def ok(self, *args: str) -> str:
        done = self.run(*args)
        assert done.returncode == 0, done.stderr
        return done.stdout

    def json(self, *args: str):
        return json.loads(self.ok(*args, "--json"))

    def error(self, *args: str) -> str:
        """The message of the error gpuctl prints for ``args`` (it must fail)."""
        done = self.run(*args)
        assert done.returncode != 0, done.stdout
        prefix = "gpuctl: error: "
        lines = [line for line in done.stderr.splitlines() if line.startswith(prefix)]
        assert len(lines) == 1, done.stderr
        return done.stderr[done.stderr.index(prefix) + len(prefix) :].rstrip("\n")

    def simulate(self, *args: str):
        return self.json("simulate", "--plugin-dir", str(gpu_agent.PLUGIN_DIR), *args)


@pytest.fixture(scope="session")
def gpuctl() -> Gpuctl:
    return Gpuctl(_gpuctl_path())
