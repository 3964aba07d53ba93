"""README.md's Python examples, run as typed from the repository."""

import contextlib
import io
import re

from conftest import ROOT


def python_section() -> str:
    readme = (ROOT / "README.md").read_text()
    return readme.split("\n## Python\n", 1)[1].split("\n## ", 1)[0]


def run(example: str) -> str:
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        exec(compile(example, "README.md", "exec"), {})
    return printed.getvalue()


def test_the_readmes_python_examples_run(monkeypatch):
    section = python_section()
    assert "pip install ./python" in section
    first, comparison = re.findall(r"```python\n(.*?)```", section, re.S)
    monkeypatch.chdir(ROOT)
    assert len(first.strip().splitlines()) == 3
    twt, makespan = run(first).split()
    assert (float(twt), float(makespan)) == (2557.9, 297.2)
    # The comparison prints what the README shows below it.
    (shown,) = re.findall(r"```text\n(.*?)```", section, re.S)
    assert run(comparison) == shown
