#!/usr/bin/env python3
"""Random heterogeneous instances for the policy comparison (evidence/regenerate.sh).

    evidence/gen_random.py SEED HOST.toml TRACE.csv

Standard library only and seeded, so each instance is reproducible. The host
mixes four generations with usage prices (cost_per_hour, for edf-hier):

    2x H100-SXM5-80GB speed 3.0  $4.0/h     2x A100-SXM4-40GB speed 2.0  $2.5/h
    2x V100-SXM2-32GB speed 1.0  $1.2/h     2x T4             speed 0.4  $0.4/h

(17.6 work units per second in all). The 400 tasks:

- arrive as a Poisson process whose rate keeps the host about 70% loaded;
- have a lognormal workload (median e^3 = 20 units, sigma 1), clamped to
  2..400: from ~7 s on an H100 to ~17 min on a T4;
- need 1-78 GB: 55% fit every GPU (<= 16 GB), 25% need 16-32 GB, 15% 32-40 GB
  and 5% only the H100s (40-78 GB);
- 15% are gangs of 2 GPUs, and a third of those could also run on 1 or 4
  (the trace's gpus_alt column);
- deadline = arrival + slack * workload / 2.0 (the run time on an A100), slack
  in 1.5..5 skewed towards the tight end; weight 1, 2 or 4 (1 most often).
"""

import random
import sys

TASKS = 400
DEVICES = [
    ("H100-SXM5-80GB", 3.0, 4.0),
    ("A100-SXM4-40GB", 2.0, 2.5),
    ("V100-SXM2-32GB", 1.0, 1.2),
    ("T4", 0.4, 0.4),
]
TOTAL_SPEED = sum(2 * speed for _, speed, _ in DEVICES)
LOAD = 0.7


def main() -> None:
    seed, host_path, trace_path = int(sys.argv[1]), sys.argv[2], sys.argv[3]
    rng = random.Random(seed)
    with open(host_path, "w") as host:
        host.write(f"# Random heterogeneous host (evidence/gen_random.py, seed {seed}).\n")
        for model, speed, price in DEVICES:
            host.write(f'\n[[gpu]]\nmodel = "{model}"\ncount = 2\nspeed = {speed}\ncost_per_hour = {price}\n')

    # Mean GPU-work per task ~ E[workload] * E[gpus]; the gap keeps the load at LOAD.
    mean_work = 20 * 1.65 * 1.15
    mean_gap = mean_work / (LOAD * TOTAL_SPEED)
    rows = []
    arrival = 0.0
    for i in range(TASKS):
        if i > 0:
            arrival += rng.expovariate(1.0 / mean_gap)
        workload = round(min(400.0, max(2.0, rng.lognormvariate(3.0, 1.0))), 1)
        kind = rng.random()
        if kind < 0.55:
            mem = rng.uniform(1.0, 16.0)
        elif kind < 0.80:
            mem = rng.uniform(16.0, 32.0)
        elif kind < 0.95:
            mem = rng.uniform(32.0, 40.0)
        else:
            mem = rng.uniform(40.0, 78.0)
        gpus, alt = 1, ""
        if rng.random() < 0.15:
            gpus = 2
            if rng.random() < 1 / 3:
                alt = "1;4"
        slack = 1.5 + 3.5 * rng.random() ** 2
        deadline = arrival + slack * workload / 2.0
        weight = rng.choices([1, 2, 4], weights=[6, 3, 1])[0]
        rows.append(f"r{i:03d},{arrival:.2f},{workload},{mem:.1f},{deadline:.2f},{weight},{gpus},{alt}")
    with open(trace_path, "w") as trace:
        trace.write(f"# Random heterogeneous workload (evidence/gen_random.py, seed {seed}).\n")
        trace.write("id,arrival,workload,mem_gb,deadline,weight,gpus,gpus_alt\n")
        trace.write("\n".join(rows) + "\n")


if __name__ == "__main__":
    main()
