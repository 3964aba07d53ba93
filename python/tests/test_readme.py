"""README.md's Python example, run as typed from the repository."""

import contextlib
import io
import re

from conftest import ROOT


def test_the_readmes_python_example_runs(monkeypatch):
    readme = (ROOT / "README.md").read_text()
    section = readme.split("\n## Python\n", 1)[1].split("\n## ", 1)[0]
    assert "pip install ./python" in section
    (example,) = re.findall(r"```python\n(.*?)```", section, re.S)
    assert len(example.strip().splitlines()) == 3
    monkeypatch.chdir(ROOT)
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        exec(compile(example, "README.md", "exec"), {})
    twt, makespan = printed.getvalue().split()
    assert (float(twt), float(makespan)) == (2557.9, 297.2)
