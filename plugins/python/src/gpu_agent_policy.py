"""gpu-agent's policy vocabulary in Python (docs/policies.md, "python").

The `python` policy plugin puts this module in `sys.modules` as
`gpu_agent_policy` before it loads a policy module, and calls that module's
`on_event(view, event)` at every event; it returns a list of decisions.
Each class mirrors the type of the same name in the Rust policy ABI
(plugin-api): fields keep their names and units, methods their rules.
Keys are ints, times seconds, memory GB, clocks normalised to a device's
default clocks (1.0).
"""

import math
from dataclasses import dataclass
from typing import Optional

__all__ = [
    "Clocks", "ClockRange", "PowerModel", "AppModel", "TaskState", "Task",
    "MigInstance", "Device", "View",
    "Activated", "Arrived", "Finished", "Timer", "DeviceChanged",
    "Assign", "Start", "Reject", "WakeAt", "MigLayout", "Dvfs",
]


@dataclass(slots=True)
class Clocks:
    """Core and memory clocks, normalised to the device's default clocks."""

    core: float
    mem: float

    def voltage(self) -> float:
        """The DVFS model's voltage for the core clock: 2(fc - 0.5)^2 + 0.5."""
        return 2.0 * (self.core - 0.5) ** 2 + 0.5


@dataclass(slots=True)
class ClockRange:
    """The normalised clocks a device accepts (outside them: a policy fault)."""

    core_min: float
    core_max: float
    mem_min: float
    mem_max: float

    def contains(self, clocks: Clocks) -> bool:
        """Whether `clocks` lie within the range."""
        return (self.core_min <= clocks.core <= self.core_max
                and self.mem_min <= clocks.mem <= self.mem_max)


@dataclass(slots=True)
class PowerModel:
    """Power coefficients: P = p0 + gamma*fm + c*V^2*fc (watts)."""

    p0: float
    gamma: float
    c: float

    def power_w(self, clocks: Clocks) -> float:
        """Power (W) at `clocks`."""
        v = clocks.voltage()
        return self.p0 + self.gamma * clocks.mem + self.c * v * v * clocks.core


@dataclass(slots=True)
class AppModel:
    """A task's DVFS application profile (formats.md §6)."""

    name: str
    delta: float
    d: float
    t0: float
    power: Optional[PowerModel]

    def power_on(self, device: "Device") -> PowerModel:
        """Its power coefficients on `device`: its own, or the device's default ones."""
        return self.power if self.power is not None else device.default_power

    def time_factor(self, clocks: Clocks) -> float:
        """Run time at `clocks` as a multiple of the run time at default clocks."""
        scalable = self.d * (self.delta / clocks.core + (1.0 - self.delta) / clocks.mem)
        return (scalable + self.t0) / (self.d + self.t0)


class TaskState:
    """Where a task is in its life: `Task.state` is one of these strings."""

    PENDING = "pending"
    QUEUED = "queued"
    RUNNING = "running"
    DONE = "done"
    REJECTED = "rejected"


@dataclass(slots=True)
class Task:
    """One task as the scheduler core holds it."""

    key: int
    id: str
    arrival: float
    workload: float
    mem_gb: float
    deadline: float
    weight: float
    gpus: int
    alt_gpus: tuple
    runtimes: tuple
    app: AppModel
    state: str

    def runtime_on(self, device: "Device") -> float:
        """Run time on `device` at default clocks (`math.inf` where it cannot run)."""
        if device.index < len(self.runtimes):
            return self.runtimes[device.index]
        return self.workload / device.speed

    def gpu_counts(self) -> tuple:
        """The device counts it can run on: `gpus` first, then `alt_gpus`."""
        return (self.gpus,) + self.alt_gpus

    def scaled(self, on_gpus: float, g: int) -> float:
        """Its run time on `g` devices given its run time `on_gpus` on `gpus` of them."""
        return on_gpus if g == self.gpus else on_gpus * self.gpus / g

    def fits(self, device: "Device") -> bool:
        """Whether `device` is online and could run it alone (memory, finite run time)."""
        return (device.online and device.memory_gb >= self.mem_gb
                and math.isfinite(self.runtime_on(device)))

    def fits_as(self, device: "Device", g: int) -> bool:
        """Whether `device` could be one of `g` devices it runs on at once."""
        return self.fits(device) and device.takes_gang_of(g)


@dataclass(slots=True)
class MigInstance:
    """Where a MIG instance lies on its GPU (docs/mig.md §6.1)."""

    parent: int
    profile: str
    start: int
    compute_slices: int


@dataclass(slots=True)
class Device:
    """One schedulable device (a GPU or a MIG instance) and its local queue."""

    index: int
    model: str
    memory_gb: float
    speed: float
    cost_per_hour: float
    online: bool
    running: Optional[int]
    queue: list
    available_at: float
    clock_range: ClockRange
    default_power: PowerModel
    mig: Optional[MigInstance]

    def takes_gang_of(self, g: int) -> bool:
        """Whether it may be one of `g` devices of one placement (no MIG instance in a gang)."""
        return g <= 1 or self.mig is None


@dataclass(slots=True)
class View:
    """The scheduler core at one event.

    `tasks` maps each key the core holds (every task that has not ended, and
    some that ended lately) to its `Task`; `pending` is the central pending
    queue in arrival order; `devices` is indexed by device index and may grow
    between calls. Read them, never change them: the plugin keeps the same
    `Task` objects from call to call.
    """

    now: float
    tasks: dict
    pending: list
    devices: list

    def task(self, key: int) -> Task:
        """The task with `key` (KeyError when the view no longer holds it)."""
        return self.tasks[key]

    def get(self, key: int) -> Optional[Task]:
        """The task with `key`, or None."""
        return self.tasks.get(key)


# Events: what happened.

@dataclass(slots=True)
class Activated:
    """The policy was just installed; every pending task needs a decision."""


@dataclass(slots=True)
class Arrived:
    """A task arrived and is in the pending queue."""

    task: int


@dataclass(slots=True)
class Finished:
    """A task left its devices (finished, failed or cancelled)."""

    task: int
    ok: bool


@dataclass(slots=True)
class Timer:
    """A wake-up the policy asked for with `WakeAt`."""


@dataclass(slots=True)
class DeviceChanged:
    """A device's running task overran, or the device went online or offline."""

    device: int


# Decisions: what the policy wants done, applied in order.

@dataclass(slots=True)
class Assign:
    """Move a pending task into the local queue of each of `devices`.

    `position`: index in a single device's queue (None: at the end);
    `clocks`: None for default clocks.
    """

    task: int
    devices: list
    position: Optional[int] = None
    clocks: Optional[Clocks] = None


@dataclass(slots=True)
class Start:
    """Start a pending task now on `devices`, which must be idle with empty queues."""

    task: int
    devices: list
    clocks: Optional[Clocks] = None


@dataclass(slots=True)
class Reject:
    """Refuse a pending task, saying why."""

    task: int
    reason: str


@dataclass(slots=True)
class WakeAt:
    """Call the policy again with `Timer` at `time` (seconds)."""

    time: float


@dataclass(slots=True)
class MigLayout:
    """Re-partition MIG-capable GPU `gpu` into `layout` (e.g. "3g.20gb,3g.20gb")."""

    gpu: int
    layout: str


@dataclass(slots=True)
class Dvfs:
    """Say how a placed task's clocks were chosen: `cls` "energy" or "deadline"."""

    task: int
    cls: str
    readjusted: bool = False
