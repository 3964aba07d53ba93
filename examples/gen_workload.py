#!/usr/bin/env python3
"""Generates examples/workload.csv, the workload `gpuctl demo` runs.

    examples/gen_workload.py > examples/workload.csv

A fixed seed and the standard library only, so the file is reproducible. It is
meant for examples/host.toml (2x A100-40GB at speed 1.0, a V100-32GB at 0.6,
a T4-16GB at 0.25: 2.85 work units per second in all) and keeps that host
busy, but not hopelessly overloaded, for about ten minutes of model time:

- 200 tasks with Poisson arrivals (exponential gaps, mean 3 s), the first at 0;
- workload lognormal (median e^1 = 2.7 units, sigma 1.2), clamped to 1..240:
  from a second on an A100 to about a minute there (nearly four on the T4);
- memory 1-38 GB: half fit every GPU (<= 16 GB), a third need the V100 or an
  A100 (16-32 GB), the rest fit only the A100s (32-38 GB);
- deadline = arrival + slack * workload (the run time on an A100), slack drawn
  in 1.5..4 and skewed towards the tight end;
- weight an integer 1-4 (1 most often);
- about 10% gang tasks needing 2 GPUs at once.

Every task fits some device set of the host: nothing is rejected.
"""

import random

SEED = 20240611
TASKS = 200
MEAN_GAP_S = 3.0


def main() -> None:
    rng = random.Random(SEED)
    print("# The demo workload (formats.md section 1) for examples/host.toml:")
    print(f"# {TASKS} tasks, made by examples/gen_workload.py (seed {SEED}); see there.")
    print("id,arrival,workload,mem_gb,deadline,weight,gpus")
    arrival = 0.0
    for i in range(TASKS):
        if i > 0:
            arrival += rng.expovariate(1.0 / MEAN_GAP_S)
        arrival = round(arrival, 1)
        workload = round(min(240.0, max(1.0, rng.lognormvariate(1.0, 1.2))), 1)
        kind = rng.random()
        if kind < 0.5:
            mem = rng.uniform(1.0, 16.0)
        elif kind < 0.83:
            mem = rng.uniform(16.0, 32.0)
        else:
            mem = rng.uniform(32.0, 38.0)
        mem = round(mem, 1)
        slack = 1.5 + 2.5 * rng.random() ** 2
        deadline = round(arrival + slack * workload, 1)
        weight = rng.choices([1, 2, 3, 4], weights=[5, 3, 2, 1])[0]
        gpus = 2 if rng.random() < 0.1 else 1
        print(f"w{i:03d},{arrival},{workload},{mem},{deadline},{weight},{gpus}")


if __name__ == "__main__":
    main()
