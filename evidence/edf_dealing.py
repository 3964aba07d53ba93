#!/usr/bin/env python3
"""edf-hier's dealing as the hierarchical GPUaaS paper compares it: RR (the
central queue dealt round-robin in arrival order, the earlier work's method)
against EDF1, EDF2, EDF3 (sorted by deadline first, dealt 1, 2 or 3 at a time),
each group then planned by its MILP.

    edf_dealing.py GPUCTL WORK REPEAT NAME:HOST:TRACE:GROUPS ...

For each instance it runs `gpuctl simulate --policy edf-hier` once per variant
(`--repeat REPEAT`, the median scheduling time) with `--schedule`, and writes
WORK/edf-dealing.md: twt, dmr, the resource cost (each task's run time times
the sum of its devices' cost_per_hour, as the host file prices them) and the
scheduling time.
"""

import csv
import json
import os
import subprocess
import sys
import tomllib

VARIANTS = [
    ("RR", ["dealing=rr", "group_size=1"]),
    ("EDF1", ["dealing=edf", "group_size=1"]),
    ("EDF2", ["dealing=edf", "group_size=2"]),
    ("EDF3", ["dealing=edf", "group_size=3"]),
]


def prices(host_file):
    """cost_per_hour of each device index, in host file order."""
    with open(host_file, "rb") as f:
        host = tomllib.load(f)
    out = []
    for gpu in host.get("gpu", []):
        out += [float(gpu.get("cost_per_hour", 0.0))] * int(gpu.get("count", 1))
    return out


def resource_cost(schedule, price):
    """Sum over the schedule's rows (one per task and device) of run time x
    the device's cost per hour / 3600."""
    total = 0.0
    with open(schedule) as f:
        for row in csv.DictReader(f):
            total += (float(row["end"]) - float(row["start"])) * price[int(row["gpu"])] / 3600
    return total


def run(gpuctl, work, repeat, name, host, trace, groups, label, params):
    schedule = os.path.join(work, f"edf-{name}-{label}.csv")
    args = [gpuctl, "simulate", "--host", host, "--trace", trace, "--policy", "edf-hier",
            "--param", f"groups={groups}", "--repeat", str(repeat), "--json",
            "--schedule", schedule]
    for p in params:
        args += ["--param", p]
    out = json.loads(subprocess.run(args, check=True, capture_output=True, text=True).stdout)
    m = out[0] if isinstance(out, list) else out
    return {
        "twt": m["twt"],
        "dmr": m["dmr"],
        "cost": resource_cost(schedule, prices(host)),
        "sched_ms": 1e3 * m["scheduling"]["wall_s"],
    }


def main():
    gpuctl, work, repeat = sys.argv[1:4]
    lines = [
        "| instance | groups | variant | twt | dmr | resource cost | sched_ms |",
        "| --- | ---: | --- | ---: | ---: | ---: | ---: |",
    ]
    for spec in sys.argv[4:]:
        name, host, trace, groups = spec.split(":")
        for label, params in VARIANTS:
            r = run(gpuctl, work, repeat, name, host, trace, groups, label, params)
            lines.append(
                f"| {name} | {groups} | {label} | {r['twt']:.1f} | {r['dmr']:.3f} "
                f"| {r['cost']:.2f} | {r['sched_ms']:.1f} |"
            )
    with open(os.path.join(work, "edf-dealing.md"), "w") as f:
        f.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
