#!/usr/bin/env python3
"""Benchmark (not a timed test): the Python FIFO (examples/policies/fifo.py,
through the `python` plugin) against the Rust `fifo` in `gpuctl simulate`.

On the same traces, each policy runs R times, interleaved; the table shows
medians of the policy's share of the scheduling time (`--json`'s
scheduling.policy_s), of the decision points (policy calls) per second of
it, and of the time per call. The schedules are the same (tests/e2e/
python_policy.rs checks them byte for byte). One call's cost against the
size of the view is plugins/python/benches/calls.rs.

Traces: examples/trace.csv on examples/host.toml; 10,000 tasks over 16
devices at load 0.9; 2,000 tasks over 8 devices at load 3 (overload: long
queues), the last two as bench/simulate.py draws them.

Usage:
  bench/python_policy.py [--runs R] [--gpuctl PATH --plugin-dir DIR]

Without --gpuctl it builds the release gpuctl, the fifo plugin and the
python plugin (which needs python3-dev) into target/release first.
"""
import argparse
import os
import statistics
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from simulate import ROOT, run_once, write_inputs  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=7)
    ap.add_argument("--gpuctl", help="a built gpuctl (default: build target/release's)")
    ap.add_argument("--plugin-dir", help="where the fifo and python plugins are (default: beside gpuctl)")
    args = ap.parse_args()
    gpuctl = args.gpuctl
    if gpuctl is None:
        subprocess.run(["cargo", "build", "--release", "--quiet", "-p", "gpu-agent-cli",
                        "-p", "gpu-agent-policy-fifo"], cwd=ROOT, check=True)
        subprocess.run(["cargo", "build", "--release", "--quiet", "--manifest-path",
                        "plugins/python/Cargo.toml", "--target-dir", "target"], cwd=ROOT, check=True)
        gpuctl = os.path.join(ROOT, "target", "release", "gpuctl")
    plugins = args.plugin_dir or os.path.dirname(os.path.abspath(gpuctl))
    module = os.path.join(ROOT, "examples", "policies", "fifo.py")
    policies = [("rust fifo", ["--policy", "fifo"]),
                ("python fifo.py", ["--policy", "python", "--param", f"module={module}"])]
    with tempfile.TemporaryDirectory() as d:
        cases = [("examples/trace.csv", os.path.join(ROOT, "examples", "host.toml"),
                  os.path.join(ROOT, "examples", "trace.csv")),
                 ("10,000 x 16, load 0.9", *write_inputs(d, 10_000, 16, 0.9)),
                 ("2,000 x 8, load 3", *write_inputs(d, 2_000, 8, 3.0))]
        samples = {(c, p): [] for c, _, _ in cases for p, _ in policies}
        for _ in range(args.runs):
            for case, host, trace in cases:
                for name, flags in policies:
                    cmd = [gpuctl, "simulate", "--host", host, "--trace", trace, *flags,
                           "--plugin-dir", plugins, "--json"]
                    samples[(case, name)].append(run_once(cmd)[2]["scheduling"])
    print(f"gpuctl simulate, {args.runs} runs each, medians")
    print(f"{'trace':<22} {'policy':<15} {'calls':>7} {'policy ms':>10} {'calls/s':>10} {'us/call':>8} {'vs rust':>8}")
    for case, _, _ in cases:
        base = None
        for name, _ in policies:
            runs = samples[(case, name)]
            calls = runs[0]["decision_points"]
            policy_s = statistics.median(r["policy_s"] for r in runs)
            per_call = policy_s / calls * 1e6
            base = base or per_call
            print(f"{case:<22} {name:<15} {calls:>7} {policy_s * 1e3:>10.1f} {calls / policy_s:>10.0f} "
                  f"{per_call:>8.1f} {per_call / base:>7.0f}x")


if __name__ == "__main__":
    main()
