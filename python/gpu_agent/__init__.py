"""gpu-agent's GPU scheduling simulator, policies and trace tools.

The functions call what ``gpuctl`` calls, in this process: the same scheduler
core, the same policy plugins, the same file readers, and errors with the
messages ``gpuctl`` prints (:class:`gpu_agent.errors.Error` and its
subclasses). The file formats are those of ``docs/formats.md``: a host is a
TOML file or a dict shaped like it, a trace a CSV file, a list of dicts (one a
row, keyed by column) or a pandas DataFrame.

Policies are plugins, looked for in ``plugin_dir`` when given, else in the
directory ``GPU_AGENT_PLUGIN_DIR`` names, else in the package's own
``plugins`` directory, which holds the shipped ones.

>>> import gpu_agent
>>> result = gpu_agent.simulate("examples/host.toml", "examples/trace.csv", "greedy-eft")
>>> result["makespan"]  # doctest: +SKIP
"""

from __future__ import annotations

import csv
import io
import json
import math
import os
import warnings
from pathlib import Path
from typing import Any, Dict, Iterable, List, Mapping, Optional, Sequence, Tuple, Union

from . import _native
from .errors import Error, InputError, PolicyError

__all__ = [
    "Error",
    "InputError",
    "PolicyError",
    "PLUGIN_DIR",
    "simulate",
    "policies",
    "describe",
    "read_trace",
    "write_trace",
    "gen_dvfs_paper",
    "import_alibaba",
    "import_sos",
]

PathLike = Union[str, "os.PathLike[str]"]
"""A file's path."""

Host = Union[PathLike, Mapping[str, Any]]
"""A host: its TOML file (formats.md §2), or a dict shaped like the TOML."""

Apps = Union[PathLike, Mapping[str, Any]]
"""DVFS application profiles: their TOML file (formats.md §6), or a dict shaped like it."""

Trace = Union[PathLike, Sequence[Mapping[str, Any]], Any]
"""A trace: its CSV file (formats.md §1), a list of rows (dicts keyed by
column), or a pandas DataFrame with those columns."""

PLUGIN_DIR = Path(__file__).parent / "plugins"
"""The shipped policy plugins, installed with the package."""

# The schedule's columns (formats.md §3) that are not text, by type.
_SCHEDULE_INTS = frozenset({"gpu", "core_mhz", "mem_mhz"})
_SCHEDULE_FLOATS = frozenset(
    {"start", "end", "energy_j", "v", "fc", "fm", "t", "p", "default_energy_j"}
)


def simulate(
    host: Host,
    trace: Trace,
    policy: str,
    params: Optional[Mapping[str, Any]] = None,
    apps: Optional[Apps] = None,
    schedule: bool = False,
    *,
    plugin_dir: Optional[PathLike] = None,
    mig_delay: float = 0.0,
) -> Dict[str, Any]:
    """Replay ``trace`` on ``host`` under ``policy``, as ``gpuctl simulate --json``.

    Returns the dict ``gpuctl simulate --json`` prints for one policy (the
    metrics of formats.md §4, ``scheduling``, and ``mig_changes`` when the
    policy made any); with ``schedule=True`` also ``"schedule"``: the rows
    ``--schedule`` writes (formats.md §3), one dict each, numbers as numbers,
    ``class`` and ``readjusted`` ``None`` where the policy set no clocks.

    ``params`` are the policy's parameters (``--param KEY=VALUE``; ``True``
    and ``False`` are written ``true`` and ``false``); ``apps`` the DVFS
    profiles the trace's ``app`` column names (``--apps``); ``mig_delay`` how
    long a MIG layout change takes once its GPU is drained, in seconds
    (``--mig-delay``). The trace's warnings (unknown columns) are Python
    warnings. The simulation runs without the GIL.

    Raises :class:`InputError` for a bad host, trace, profile or parameter,
    :class:`PolicyError` for a policy that cannot be found or run.
    """
    pairs = [(str(key), _param_text(value)) for key, value in (params or {}).items()]
    report, rows, notes = _native.simulate(
        _toml_source(host, "<host>"),
        _trace_source(trace),
        None if apps is None else _toml_source(apps, "<apps>"),
        policy,
        pairs,
        str(_plugin_dir(plugin_dir)),
        schedule,
        float(mig_delay),
    )
    _warn(notes)
    result: Dict[str, Any] = json.loads(report)
    if rows is not None:
        result["schedule"] = [_schedule_row(row) for row in csv.DictReader(io.StringIO(rows))]
    return result


def policies(plugin_dir: Optional[PathLike] = None) -> List[Dict[str, str]]:
    """The policies found, as ``{"name": ..., "description": ...}`` dicts.

    Files in the plugin directory that are not usable plugins are named in
    warnings, as ``gpuctl simulate`` names them.
    """
    found, failures = _native.policies(str(_plugin_dir(plugin_dir)))
    _warn(f"skipping plugin {failure}" for failure in failures)
    return [{"name": name, "description": description} for name, description in found]


def describe(policy: str, plugin_dir: Optional[PathLike] = None) -> Dict[str, Any]:
    """A policy as ``gpuctl policy show --json`` shows one that is not active.

    ``name``, ``description`` and ``parameters``: one dict each with ``key``,
    ``type``, ``default`` (as a user would write it), ``expected`` (the
    accepted values in words), ``description``, and where they apply
    ``minimum``, ``maximum`` (with ``minimum_inclusive``,
    ``maximum_inclusive``) and ``words``.
    """
    return json.loads(_native.describe(policy, str(_plugin_dir(plugin_dir))))


def read_trace(trace: Trace, host: Host, apps: Optional[Apps] = None) -> List[Dict[str, Any]]:
    """The tasks of ``trace`` as the simulator reads and checks them on ``host``.

    One dict a row, with every column of formats.md §1: ``id``, ``arrival``,
    ``workload``, ``mem_gb``, ``deadline``, ``weight``, ``gpus``,
    ``gpus_alt`` and ``runtimes`` (lists, empty where the row gives none),
    ``app`` (``"default"`` where it names none), ``command`` and ``actual``
    (``None`` where it gives none). ``pandas.DataFrame(rows)`` makes a
    frame of them. The trace's warnings are Python warnings.
    """
    rows, notes = _native.read_trace(
        _trace_source(trace),
        _toml_source(host, "<host>"),
        None if apps is None else _toml_source(apps, "<apps>"),
    )
    _warn(notes)
    return rows


def write_trace(trace: Trace, path: PathLike) -> None:
    """Write ``trace`` (rows or a DataFrame) to ``path`` as a trace CSV.

    Columns in the order the rows first give them, a column that is empty in
    every row left out, lists written ``;``-separated. The file is written
    whole or not at all. ``read_trace`` reads it back, checked.
    """
    _native.write_text(str(path), _trace_csv(trace))


def gen_dvfs_paper(
    mode: str,
    util: float,
    seed: int,
    out_host: PathLike,
    out_trace: PathLike,
    out_apps: PathLike,
    *,
    gpus_per_server: Optional[int] = None,
    servers: Optional[int] = None,
    idle_w: Optional[float] = None,
    turn_on: Optional[float] = None,
    rho: Optional[int] = None,
) -> Dict[str, Any]:
    """``gpuctl trace gen dvfs-paper``: the DVFS paper's task set as three files.

    The arguments are the command's options (``mode`` ``"offline"`` or
    ``"online"``); one left ``None`` takes the command's default. Returns
    what ``--json`` prints (the task and server counts, the files).
    """
    argv = ["trace", "gen", "dvfs-paper", "--mode", mode, "--util", _arg(util), "--seed", _arg(seed)]
    argv += _options(
        gpus_per_server=gpus_per_server,
        servers=servers,
        idle_w=idle_w,
        turn_on=turn_on,
        rho=rho,
        out_host=out_host,
        out_trace=out_trace,
        out_apps=out_apps,
    )
    return _gpuctl_json(argv)


def import_alibaba(
    pods: PathLike,
    nodes: PathLike,
    out_host: PathLike,
    out_trace: PathLike,
    *,
    gpus: Optional[int] = None,
    from_: Optional[int] = None,
    limit: Optional[int] = None,
    slack: Optional[float] = None,
) -> Dict[str, Any]:
    """``gpuctl trace import alibaba-v2023``: Alibaba's GPU trace v2023 as a host and a trace.

    The arguments are the command's (``from_`` is ``--from``); one left
    ``None`` takes the command's default. Returns what ``--json`` prints
    (the counts of pods kept and skipped, by reason; the files).
    """
    argv = ["trace", "import", "alibaba-v2023", _arg(pods), "--nodes", _arg(nodes)]
    argv += _options(gpus=gpus, limit=limit, slack=slack, out_host=out_host, out_trace=out_trace)
    if from_ is not None:
        argv += ["--from", _arg(from_)]
    return _gpuctl_json(argv)


def import_sos(
    jobs: PathLike,
    out_host: PathLike,
    out_trace: PathLike,
    *,
    tick_seconds: Optional[float] = None,
    slack: Optional[float] = None,
) -> Dict[str, Any]:
    """``gpuctl trace import sos``: the stochastic online scheduling workload as a host and a trace.

    The arguments are the command's; one left ``None`` takes the command's
    default. Returns what ``--json`` prints.
    """
    argv = ["trace", "import", "sos", _arg(jobs)]
    argv += _options(tick_seconds=tick_seconds, slack=slack, out_host=out_host, out_trace=out_trace)
    return _gpuctl_json(argv)


def _plugin_dir(given: Optional[PathLike]) -> Path:
    if given is not None:
        return Path(given)
    from_env = os.environ.get("GPU_AGENT_PLUGIN_DIR")
    return Path(from_env) if from_env else PLUGIN_DIR


def _warn(notes: Iterable[str]) -> None:
    for note in notes:
        warnings.warn(note, stacklevel=3)


def _param_text(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def _toml_source(given: Union[PathLike, Mapping[str, Any]], label: str) -> Union[str, Tuple[str, str]]:
    """A path as a string, or a dict as its label and its JSON."""
    if isinstance(given, Mapping):
        return (label, json.dumps(given))
    return os.fspath(given)


def _trace_source(trace: Trace) -> Union[str, Tuple[str, str]]:
    if isinstance(trace, (str, os.PathLike)):
        return os.fspath(trace)
    return ("<trace>", _trace_csv(trace))


def _trace_rows(trace: Any) -> List[Mapping[str, Any]]:
    to_dict = getattr(trace, "to_dict", None)
    if callable(to_dict) and hasattr(trace, "columns"):
        return to_dict("records")  # a pandas DataFrame
    return list(trace)


def _cell(value: Any) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return ""
    if isinstance(value, (list, tuple)):
        return ";".join(_cell(v) for v in value)
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def _trace_csv(trace: Any) -> str:
    """Rows as trace CSV: the rows' columns in first-given order, all-empty ones left out."""
    rows = _trace_rows(trace)
    columns: Dict[str, None] = {}
    for row in rows:
        if not isinstance(row, Mapping):
            raise InputError(f"<trace>: expected rows as dicts keyed by column, got {type(row).__name__}")
        columns.update((str(key), None) for key in row)
    cells = [{key: _cell(row.get(key)) for key in columns} for row in rows]
    kept = [key for key in columns if any(row[key] != "" for row in cells)] if cells else list(columns)
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(kept)
    for row in cells:
        writer.writerow([row[key] for key in kept])
    return out.getvalue()


def _schedule_row(row: Mapping[str, str]) -> Dict[str, Any]:
    typed: Dict[str, Any] = {}
    for key, text in row.items():
        if key in _SCHEDULE_INTS:
            typed[key] = int(text)
        elif key in _SCHEDULE_FLOATS:
            typed[key] = float(text)
        elif key == "readjusted":
            typed[key] = None if text == "" else text == "true"
        elif key == "class":
            typed[key] = text or None
        else:
            typed[key] = text
    return typed


def _arg(value: Any) -> str:
    return os.fspath(value) if isinstance(value, os.PathLike) else str(value)


def _options(**given: Any) -> List[str]:
    """``--name value`` for each option given (not ``None``), underscores as dashes."""
    argv: List[str] = []
    for name, value in given.items():
        if value is not None:
            argv += ["--" + name.replace("_", "-"), _arg(value)]
    return argv


def _gpuctl_json(argv: List[str]) -> Dict[str, Any]:
    return json.loads(_native.gpuctl(argv + ["--json"]))
