"""First come, first served, written in Python.

The rule of the Rust `fifo` policy (formats.md §5): tasks in arrival order,
each to the valid device with the earliest start max(now, available),
ties to the lowest index, at the end of its queue; a gang of k takes the k
valid devices first by (start, index) and starts when the last is free.
Its schedules are the Rust policy's byte for byte (tests/e2e/python_policy.rs).

    gpuctl simulate --host examples/host.toml --trace examples/trace.csv \
        --policy python --param python:module=examples/policies/fifo.py
"""

from gpu_agent_policy import Assign


def on_event(view, event):
    """Places every pending task; keeps nothing between calls."""
    if not view.pending:
        return []
    now = view.now
    devices = view.devices
    # When each device is free, as this call's placements leave it.
    avail = [d.available_at for d in devices]
    decisions = []
    for key in view.pending:
        task = view.task(key)
        k = task.gpus
        if k == 1:
            best = None  # (start, index) of the earliest start, lowest index of equals
            for d in devices:
                start = max(avail[d.index], now)
                if (best is None or start < best[0]) and task.fits(d):
                    best = (start, d.index)
            if best is None:
                continue  # no online device holds it right now: leave it pending
            chosen = [best[1]]
        else:
            valid = [d.index for d in devices if task.fits_as(d, k)]
            if len(valid) < k:
                continue  # not enough online devices for it right now
            valid.sort(key=lambda j: (max(avail[j], now), j))
            chosen = valid[:k]
        start = max(now, *(max(avail[j], now) for j in chosen))
        runtime = max(0.0, *(task.runtime_on(devices[j]) for j in chosen))
        for j in chosen:
            avail[j] = start + runtime
        decisions.append(Assign(key, chosen))
    return decisions
