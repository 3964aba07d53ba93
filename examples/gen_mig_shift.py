#!/usr/bin/env python3
"""Generates examples/mig-shift.csv, a workload whose demand shifts between two
model mixes, for MIG layout planning (docs/policies.md, mig-plan):

    examples/gen_mig_shift.py > examples/mig-shift.csv
    gpuctl simulate --host examples/host-mig-shift.toml --trace examples/mig-shift.csv \\
        --apps examples/mig-shift-apps.toml --policy mig-plan --policy greedy-eft

A fixed seed and the standard library only, so the file is reproducible. It is
meant for examples/host-mig-shift.toml (two A100-40GB at speed 7: a 1g
instance serves 1 work unit per second, a whole GPU 7; 14 in all):

- two applications: resnet50 (4 GB: any instance holds it) and bert-large
  (15 GB: only 3g.20gb, 4g.20gb and 7g.40gb hold it);
- phase 1, [0, 1800) s: resnet50 submits 8 work units per second, bert-large 2;
  phase 2, [1800, 3600) s: resnet50 2, bert-large 8 (about 70% of the host);
- Poisson arrivals per application (exponential gaps), workload exponential
  around a mean of 6 units (resnet50) and 24 units (bert-large), at least 0.5;
- deadline = arrival + 120 s (resnet50) or + 600 s (bert-large), weight 1,
  one GPU each.
"""

import random

SEED = 20261126
PHASE_S = 1800.0
# (app, memory GB, mean workload, deadline slack s, rate phase 1, rate phase 2)
APPS = [
    ("resnet50", 4, 6.0, 120.0, 8.0, 2.0),
    ("bert-large", 15, 24.0, 600.0, 2.0, 8.0),
]


def main():
    rng = random.Random(SEED)
    tasks = []
    for app, mem, mean, slack, *rates in APPS:
        for phase, rate in enumerate(rates):
            start, end = phase * PHASE_S, (phase + 1) * PHASE_S
            t = start + rng.expovariate(rate / mean)
            while t < end:
                work = max(0.5, rng.expovariate(1.0 / mean))
                tasks.append((round(t, 3), app, round(work, 3), mem, slack))
                t += rng.expovariate(rate / mean)
    tasks.sort()
    print("id,arrival,workload,mem_gb,deadline,weight,gpus,app")
    for k, (t, app, work, mem, slack) in enumerate(tasks):
        print(f"t{k:05d},{t},{work},{mem},{round(t + slack, 3)},1,1,{app}")


main()
