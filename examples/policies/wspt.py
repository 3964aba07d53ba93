"""Weighted shortest processing time first, with memory-aware placement.

An idea no shipped policy has. Tasks are never queued on a device: at every
event the pending tasks are planned afresh in the order of Smith's rule
(highest weight / run time first, the run time being the task's best on any
device that could hold it; on one machine this order minimises the total
weighted completion time), each on the device where it would finish
earliest after what this plan already put there. Memory-aware: among the
devices that finish it within `NEAR` of that earliest finish, it takes the
one with the least memory (best fit), so that the large-memory GPUs stay
free for the tasks only they can hold. A task whose planned devices are idle
now starts; the others stay pending, holding their place in the plan, and
are planned again at the next event, when a heavier or shorter task that
arrived meanwhile may go before them.

    gpuctl simulate --host examples/host.toml --trace examples/workload.csv \
        --policy greedy-eft --policy python \
        --param python:module=examples/policies/wspt.py
"""

import math

from gpu_agent_policy import Start

# How much later than its earliest finish (a share of its run time) a
# best-fit device may finish a task.
NEAR = 0.1


def on_event(view, event):
    """Plans the pending tasks in WSPT order; starts those planned now."""
    if not view.pending:
        return []
    now = view.now
    devices = view.devices
    # When each device is free, as this plan leaves it.
    avail = [max(d.available_at, now) if d.online else math.inf for d in devices]
    idle = {d.index for d in devices
            if d.online and d.running is None and not d.queue}
    ranked = []
    for key in view.pending:
        task = view.task(key)
        best = min((task.runtime_on(d) for d in devices
                    if task.fits_as(d, task.gpus)), default=math.inf)
        if math.isfinite(best):
            # Highest weight / run time first; ties in arrival order.
            ranked.append((-task.weight / best, key, task))
    ranked.sort(key=lambda r: r[:2])
    decisions = []
    for _, key, task in ranked:
        fit = [d for d in devices if task.fits_as(d, task.gpus)]
        if len(fit) < task.gpus:
            continue  # too few online devices for it now
        if task.gpus == 1:
            finish = {d.index: avail[d.index] + task.runtime_on(d) for d in fit}
            earliest = min(finish.values())
            slack = NEAR * (earliest - avail[min(finish, key=finish.get)])
            near = [d for d in fit if finish[d.index] <= earliest + slack]
            chosen = [min(near, key=lambda d: (d.memory_gb, finish[d.index], d.index))]
        else:
            fit.sort(key=lambda d: (avail[d.index], d.index))
            chosen = fit[:task.gpus]
        start = max(avail[d.index] for d in chosen)
        runtime = max(task.runtime_on(d) for d in chosen)
        for d in chosen:
            avail[d.index] = start + runtime
        if start <= now and all(d.index in idle for d in chosen):
            decisions.append(Start(key, [d.index for d in chosen]))
            idle.difference_update(d.index for d in chosen)
    return decisions
