#!/usr/bin/env python3
"""End-to-end benchmark of `gpuctl simulate` (release build).

Generates traces over a heterogeneous host (fixed seed) and runs
`gpuctl simulate --policy P` several times each, interleaved so that machine
noise hits every column alike. For each run it reads the wall time and the
peak resident memory of the process, and the scheduling time (the core's,
and the policy's share of it) and twt that `--json` reports; tables show
medians (min and max of the wall time beside them), with the median CPU time
(user + system) of the process, which a busy machine disturbs less than the
wall time.

Suites (default: all three):
  scale     fifo and greedy-eft on 100,000 and 1,000,000 tasks over 64 devices
            at 0.9 offered load: wall time, peak memory, and the growth from
            the smaller to the larger size (linear growth is 10x).
  overload  every policy on one overloaded instance (3x the host's capacity,
            2,000 tasks over 8 devices), where pending queues grow long.
  compare   every policy at equal load (0.9; 5,000 tasks over 16 devices).

Usage:
  bench/simulate.py [--suite scale|overload|compare ...] [--runs R] [--against DIR]
  bench/simulate.py --tasks N [--devices M] [--load L] [--policy P ...]   (one custom table)
"""
import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MODELS = [("A100-SXM4-40GB", 1.0), ("A100-SXM4-80GB", 1.2), ("V100-SXM2-32GB", 0.6), ("T4", 0.3)]
ALL_POLICIES = ["fifo", "greedy-eft", "sos", "sa-greedy", "edf-hier"]


def write_inputs(directory, tasks, devices, load=0.9, seed=42):
    """A host of `devices` GPUs of four models and a trace of `tasks` tasks
    arriving as a Poisson stream at `load` times the host's capacity."""
    rng = random.Random(seed)
    host = os.path.join(directory, f"host-{devices}.toml")
    with open(host, "w") as f:
        for i, (model, speed) in enumerate(MODELS):
            count = devices // len(MODELS) + (1 if i < devices % len(MODELS) else 0)
            if count:
                f.write(f'[[gpu]]\nmodel = "{model}"\ncount = {count}\nspeed = {speed}\n\n')
    mean_speed = sum(s for _, s in MODELS) / len(MODELS)
    mean_work = 60.0
    rate = load * devices * mean_speed / (mean_work * 1.1)
    trace = os.path.join(directory, f"trace-{tasks}-{devices}-{load}.csv")
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
    """Wall time (s), peak RSS (MiB), the --json report and CPU time (s) of one run."""
    start = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    out = proc.stdout.read()
    _, status, usage = os.wait4(proc.pid, 0)
    elapsed = time.perf_counter() - start
    stderr = proc.stderr.read().decode()
    proc.stdout.close()
    proc.stderr.close()
    if os.waitstatus_to_exitcode(status) != 0:
        sys.exit(f"gpuctl failed: {' '.join(cmd)}\n{stderr}")
    report = json.loads(out)
    report["cpu_s"] = usage.ru_utime + usage.ru_stime
    return elapsed, usage.ru_maxrss / 1024.0, report  # KiB -> MiB


def measure(builds, cases, runs):
    """cases: [(label, host, trace, policy)], each run with every build in
    `builds` ([(name, gpuctl)]) -> {label: [(wall, rss, report)]}, labels
    suffixed with the build's name when there are several, and the labels in
    order."""
    runs_of = [(label if len(builds) == 1 else f"{label} [{name}]", gpuctl, case)
               for label, *case in cases for name, gpuctl in builds]
    results = {label: [] for label, _, _ in runs_of}
    for _ in range(runs):
        for label, gpuctl, (host, trace, policy) in runs_of:
            cmd = [gpuctl, "simulate", "--host", host, "--trace", trace, "--policy", policy, "--json"]
            results[label].append(run_once(cmd))
    return results, [label for label, _, _ in runs_of]


def row(label, samples):
    walls = [w for w, _, _ in samples]
    peak = statistics.median(m for _, m, _ in samples)
    sched = statistics.median(r["scheduling"]["wall_s"] for _, _, r in samples)
    policy = statistics.median(r["scheduling"]["policy_s"] for _, _, r in samples)
    cpu = statistics.median(r["cpu_s"] for _, _, r in samples)
    twt = samples[0][2]["twt"]
    return label, statistics.median(walls), min(walls), max(walls), cpu, peak, sched, policy, twt


def print_table(title, rows, base=None):
    print(title)
    print(f"{'case':<26} {'median s':>9} {'min s':>7} {'max s':>7} {'cpu s':>7} {'peak MiB':>9} {'sched ms':>9} {'policy ms':>9} {'twt':>14}"
          + (f" {'vs ' + base:>14}" if base else ""))
    base_med = next((r[1] for r in rows if r[0] == base), None)
    for label, med, lo, hi, cpu, peak, sched, policy, twt in rows:
        ratio = f" {med / base_med:>13.2f}x" if base_med else ""
        print(f"{label:<26} {med:>9.3f} {lo:>7.3f} {hi:>7.3f} {cpu:>7.3f} {peak:>9.1f} {sched * 1e3:>9.1f} "
              f"{policy * 1e3:>9.1f} {twt:>14.1f}{ratio}")
    print()


def suite_scale(builds, d, runs):
    sizes = [100_000, 1_000_000]
    cases = []
    for n in sizes:
        host, trace = write_inputs(d, n, 64)
        for p in ["fifo", "greedy-eft"]:
            cases.append((f"{p} {n:,}x64", host, trace, p))
    results, labels = measure(builds, cases, runs)
    print_table(f"scale: 64 devices, load 0.9, {runs} runs each", [row(label, results[label]) for label in labels])
    for p in ["fifo", "greedy-eft"]:
        for name, _ in builds:
            suffix = "" if len(builds) == 1 else f" [{name}]"
            small = statistics.median(w for w, _, _ in results[f"{p} {sizes[0]:,}x64{suffix}"])
            large = statistics.median(w for w, _, _ in results[f"{p} {sizes[1]:,}x64{suffix}"])
            print(f"{p}{suffix}: {sizes[1]:,} tasks take {large / small:.1f}x the wall time of {sizes[0]:,} (linear: 10x)")
    print()


def suite_policies(builds, d, runs, title, tasks, devices, load):
    host, trace = write_inputs(d, tasks, devices, load)
    results, labels = measure(builds, [(p, host, trace, p) for p in ALL_POLICIES], runs)
    print_table(f"{title}: {tasks:,} tasks, {devices} devices, load {load}, {runs} runs each",
                [row(label, results[label]) for label in labels], labels[0])


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--suite", action="append", choices=["scale", "overload", "compare"])
    ap.add_argument("--runs", type=int, default=7)
    ap.add_argument("--tasks", type=int, help="one custom instance of N tasks instead of the suites")
    ap.add_argument("--devices", type=int, default=64)
    ap.add_argument("--load", type=float, default=0.9, help="offered load of the custom instance")
    ap.add_argument("--policy", action="append", help="policies of the custom instance (default: fifo, greedy-eft)")
    ap.add_argument("--against", metavar="DIR",
                    help="also run another build's gpuctl (DIR/gpuctl, its plugins beside it), side by side")
    args = ap.parse_args()

    packages = ["gpu-agent-cli"] + [f"gpu-agent-policy-{p}" for p in ALL_POLICIES]
    subprocess.run(["cargo", "build", "--release", "--quiet"] + [a for p in packages for a in ("-p", p)],
                   cwd=ROOT, check=True)
    builds = [("this", os.path.join(ROOT, "target", "release", "gpuctl"))]
    if args.against:
        builds.append((os.path.basename(os.path.normpath(args.against)), os.path.join(args.against, "gpuctl")))
    with tempfile.TemporaryDirectory() as d:
        if args.tasks:
            host, trace = write_inputs(d, args.tasks, args.devices, args.load)
            policies = args.policy or ["fifo", "greedy-eft"]
            results, labels = measure(builds, [(p, host, trace, p) for p in policies], args.runs)
            print_table(f"gpuctl simulate: {args.tasks:,} tasks, {args.devices} devices, load {args.load}, "
                        f"{args.runs} runs each (release build)", [row(label, results[label]) for label in labels],
                        labels[0])
            return
        suites = args.suite or ["scale", "overload", "compare"]
        if "scale" in suites:
            suite_scale(builds, d, args.runs)
        if "overload" in suites:
            suite_policies(builds, d, args.runs, "overload", 2_000, 8, 3.0)
        if "compare" in suites:
            suite_policies(builds, d, args.runs, "compare", 5_000, 16, 0.9)


if __name__ == "__main__":
    main()
