#!/usr/bin/env python3
"""MIG layout planning in the simulator: the mig-plan policy on a workload
whose demand shifts between two model mixes, beside greedy-eft on the host's
fixed layout and on the same GPUs whole; writes a Markdown section.

    evidence/mig_shift.py GPUCTL WORK OUT.md

The trace is made again by examples/gen_mig_shift.py (seeded) and must equal
examples/mig-shift.csv; the host is examples/host-mig-shift.toml. No timing
is reported, so the section is the same on every machine.
"""
import json
import os
import subprocess
import sys

ROWS = ["twt", "act", "dmc", "makespan", "utilization", "energy_j"]


def simulate(gpuctl, host, trace, apps, policy):
    out = subprocess.run(
        [gpuctl, "simulate", "--host", host, "--trace", trace, "--apps", apps,
         "--policy", policy, "--json"],
        check=True, capture_output=True, text=True,
    ).stdout
    return json.loads(out)


def main():
    gpuctl, work, out = sys.argv[1:4]
    root = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
    ex = lambda name: os.path.join(root, "examples", name)
    trace = os.path.join(work, "mig-shift.csv")
    with open(trace, "w") as f:
        subprocess.run([sys.executable, ex("gen_mig_shift.py")], check=True, stdout=f)
    with open(trace) as a, open(ex("mig-shift.csv")) as b:
        if a.read() != b.read():
            sys.exit("examples/mig-shift.csv differs from examples/gen_mig_shift.py's output")
    whole = os.path.join(work, "host-whole.toml")
    with open(whole, "w") as f:
        f.write('[[gpu]]\nmodel = "A100-SXM4-40GB"\nspeed = 7.0\ncount = 2\n')
    apps, host = ex("mig-shift-apps.toml"), ex("host-mig-shift.toml")
    runs = [
        ("mig-plan", simulate(gpuctl, host, trace, apps, "mig-plan")),
        ("greedy-eft, fixed layout", simulate(gpuctl, host, trace, apps, "greedy-eft")),
        ("greedy-eft, GPUs whole", simulate(gpuctl, whole, trace, apps, "greedy-eft")),
    ]
    lines = [
        "## (e) MIG layouts planned from observed demand: `mig-plan` in `gpuctl simulate`",
        "",
        "examples/mig-shift.csv (examples/gen_mig_shift.py, seeded; "
        f"{runs[0][1]['tasks']} tasks) shifts at 1800 s from resnet50 (4 GB tasks, "
        "8 work units/s; bert-large 2) to bert-large (15 GB, 8 units/s; resnet50 2) "
        "on examples/host-mig-shift.toml: two A100-40GB at speed 7, each split "
        "3g.20gb + 4 x 1g.5gb (only the 3g holds a 15 GB task). mig-plan starts "
        "from that layout with its defaults (window 300 s, a plan every 60 s, one "
        "change per GPU per 600 s, one GPU changing at a time, min_gain 0.1); "
        "layouts are made as soon as a GPU is drained (--mig-delay 0). The last "
        "column runs the GPUs whole (MIG off): in the simulator's model a "
        "device's speed is its GPU's times compute slices / 7, so a whole GPU "
        "serves as much work as any layout and runs each task faster "
        "(docs/policies.md, mig-plan).",
        "",
        "| metric | " + " | ".join(name for name, _ in runs) + " |",
        "| --- |" + " ---: |" * len(runs),
    ]
    for key in ROWS:
        cells = []
        for _, m in runs:
            v = m[key]
            cells.append(str(v) if isinstance(v, int) else f"{v:,.3f}")
        lines.append(f"| {key} | " + " | ".join(cells) + " |")
    lines += [
        "",
        "mig-plan's layout changes (asked when it planned, applied once the GPU "
        "was drained; `whole` is MIG off):",
        "",
        "| GPU | asked (s) | applied (s) | layout |",
        "| ---: | ---: | ---: | --- |",
    ]
    for c in runs[0][1].get("mig_changes", []):
        layout = c["layout"] or "whole"
        lines.append(f"| {c['gpu']} | {c['asked_s']:.1f} | {c['applied_s']:.1f} | {layout} |")
    with open(out, "w") as f:
        f.write("\n".join(lines) + "\n")


main()
