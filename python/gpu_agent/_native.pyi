"""Types of the native module (python/src/lib.rs); gpu_agent's functions are the API."""

from typing import List, Optional, Tuple, Union

# A file's path, or (label, text): a host's or profiles' JSON, a trace's CSV.
_Source = Union[str, Tuple[str, str]]

def simulate(
    host: _Source,
    trace: _Source,
    apps: Optional[_Source],
    policy: str,
    params: List[Tuple[str, str]],
    plugin_dir: str,
    schedule: bool,
    mig_delay_s: float,
) -> Tuple[str, Optional[str], List[str]]: ...
def policies(plugin_dir: str) -> Tuple[List[Tuple[str, str]], List[str]]: ...
def describe(name: str, plugin_dir: str) -> str: ...
def read_trace(
    trace: _Source, host: _Source, apps: Optional[_Source]
) -> Tuple[List[dict], List[str]]: ...
def write_text(path: str, text: str) -> None: ...
def gpuctl(argv: List[str]) -> str: ...
