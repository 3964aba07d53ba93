#!/usr/bin/env python3
"""End-to-end benchmark of `gpuctl simulate` (release build).

Generates a 100,000-task trace over a 64-device heterogeneous host (fixed seed),
then runs `gpuctl simulate --policy P` several times per policy and prints the
median, min and max wall time and the peak resident memory of each run.
fifo runs side by side as the reference.

Usage: bench/simulate.py [--tasks N] [--devices M] [--runs R] [--policy P ...]
"""
import argparse
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MODELS = [("A100-SXM4-40GB", 1.0), ("A100-SXM4-80GB", 1.2), ("V100-SXM2-32GB", 0.6), ("T4", 0.3)]


def write_inputs(directory, tasks, devices, seed=42):
    rng = random.Random(seed)
    host = os.path.join(directory, "host.toml")
    with open(host, "w") as f:
        for i, (model, speed) in enumerate(MODELS):
            count = devices // len(MODELS) + (1 if i < devices % len(MODELS) else 0)
            if count:
                f.write(f'[[gpu]]\nmodel = "{model}"\ncount = {count}\nspeed = {speed}\n\n')
    mean_speed = sum(s for _, s in MODELS) / len(MODELS)
    mean_work = 60.0
    # Offered load about 0.9 of the host's capacity.
    rate = 0.9 * devices * mean_speed / (mean_work * 1.1)
    trace = os.path.join(directory, "trace.csv")
    t = 0.0
    with open(trace, "w") as f:
        f.write("id,arrival,workload,mem_gb,deadline,weight,gpus\n")
        for i in range(tasks):
            t += rng.expovariate(rate)
            work = rng.expovariate(1 / mean_work) + 1
            gpus = rng.choices([1, 2, 4], weights=[94, 4, 2])[0]
            mem = rng.choice([4, 8, 12, 16, 24, 32, 40, 64])
            deadline = t + work * rng.uniform(1.5, 6)
            f.write(f"t{i},{t:.3f},{work:.3f},{mem},{deadline:.3f},{rng.randint(1, 4)},{gpus}\n")
    return host, trace


def run_once(cmd):
    start = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(proc.pid, 0)
    elapsed = time.perf_counter() - start
    stderr = proc.stderr.read().decode()
    proc.stderr.close()
    if os.waitstatus_to_exitcode(status) != 0:
        sys.exit(f"gpuctl failed: {stderr}")
    return elapsed, usage.ru_maxrss / 1024.0  # KiB -> MiB


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tasks", type=int, default=100_000)
    ap.add_argument("--devices", type=int, default=64)
    ap.add_argument("--runs", type=int, default=7)
    ap.add_argument("--policy", action="append", help="policies to time (default: fifo, greedy-eft)")
    args = ap.parse_args()
    policies = args.policy or ["fifo", "greedy-eft"]

    subprocess.run(["cargo", "build", "--release", "--quiet"], cwd=ROOT, check=True)
    gpuctl = os.path.join(ROOT, "target", "release", "gpuctl")
    with tempfile.TemporaryDirectory() as d:
        host, trace = write_inputs(d, args.tasks, args.devices)
        results = {p: [] for p in policies}
        # Interleave policies so that machine noise hits them alike.
        for _ in range(args.runs):
            for p in policies:
                results[p].append(run_once([gpuctl, "simulate", "--host", host, "--trace", trace, "--policy", p, "--json"]))

    print(f"gpuctl simulate: {args.tasks} tasks, {args.devices} devices, {args.runs} runs each (release build)")
    print(f"{'policy':<12} {'median s':>9} {'min s':>7} {'max s':>7} {'peak MiB':>9} {'vs ' + policies[0]:>9}")
    base = statistics.median(t for t, _ in results[policies[0]])
    for p in policies:
        times = [t for t, _ in results[p]]
        peak = max(m for _, m in results[p])
        med = statistics.median(times)
        print(f"{p:<12} {med:>9.3f} {min(times):>7.3f} {max(times):>7.3f} {peak:>9.1f} {med / base:>8.2f}x")


if __name__ == "__main__":
    main()
