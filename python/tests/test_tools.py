"""Errors, the trace tools, the importers and policies in Python, against gpuctl."""

import sys
import types
from pathlib import Path

import pytest

import gpu_agent
from conftest import EXAMPLES, ROOT

HOST = str(EXAMPLES / "host.toml")
TRACE = str(EXAMPLES / "trace.csv")
SHARED = ROOT.parent / "shared" / "data"


def write(path: Path, text: str) -> str:
    path.write_text(text)
    return str(path)


@pytest.mark.parametrize(
    "trace",
    [
        "id,arrival,workload,mem_gb,deadline,weight\nt0,0,10,1,100,1\nt1,0,-5,1,100,1\n",
        "id,arrival,workload,mem_gb,deadline,weight\nt0,0,10,1,100\n",
        "id,arrival,workload\nt0,0,10\n",
        "id,arrival,workload,mem_gb,deadline,weight\nt0,0,10,1,100,1\nt0,1,10,1,100,1\n",
        "id,arrival,workload,mem_gb,deadline,weight,runtimes\nt0,0,10,1,100,1,1;2\n",
        "\x00\xff\xfe garbage \x01\n\x02,\x03\n",
    ],
    ids=["negative workload", "short row", "missing columns", "duplicate id", "runtimes", "garbage"],
)
def test_a_bad_trace_raises_gpuctls_message(gpuctl, tmp_path, trace):
    path = write(tmp_path / "bad.csv", trace)
    expected = gpuctl.error("simulate", "--host", HOST, "--trace", path, "--policy", "fifo")
    assert path in expected
    with pytest.raises(gpu_agent.InputError) as raised:
        gpu_agent.simulate(HOST, path, "fifo")
    assert str(raised.value) == expected
    assert isinstance(raised.value, ValueError)


def test_a_bad_host_raises_gpuctls_message(gpuctl, tmp_path):
    path = write(tmp_path / "bad.toml", '[[gpu]]\nmodel = "A100-SXM4-40GB"\nspeed = -1\n')
    expected = gpuctl.error("simulate", "--host", path, "--trace", TRACE, "--policy", "fifo")
    with pytest.raises(gpu_agent.InputError) as raised:
        gpu_agent.simulate(path, TRACE, "fifo")
    assert str(raised.value) == expected
    assert "bad.toml:3" in expected


def test_in_memory_inputs_are_named_in_errors():
    with pytest.raises(gpu_agent.InputError, match=r"^<host>:\d+: .*speed"):
        gpu_agent.simulate({"gpu": [{"model": "A100-SXM4-40GB", "speed": -1}]}, TRACE, "fifo")
    with pytest.raises(gpu_agent.InputError, match=r"^<host>: not TOML data"):
        gpu_agent.simulate({"gpu": [{"model": None}]}, TRACE, "fifo")
    rows = [{"id": "t0", "arrival": 0, "workload": 10, "mem_gb": 1, "deadline": 100, "weight": 1}]
    rows.append(dict(rows[0], id="t1", workload="ten"))
    with pytest.raises(gpu_agent.InputError, match=r"^<trace>:3: .*workload"):
        gpu_agent.simulate(HOST, rows, "fifo")
    with pytest.raises(gpu_agent.InputError, match="expected rows as dicts"):
        gpu_agent.simulate(HOST, [["t0", 0]], "fifo")


def test_policy_errors_are_gpuctls(gpuctl):
    argv = ["simulate", "--plugin-dir", str(gpu_agent.PLUGIN_DIR), "--host", HOST, "--trace", TRACE]
    for policy, params, extra in [
        ("no-such", {}, []),
        ("greedy-eft", {"seed": 1}, ["--param", "seed=1"]),
        ("sa-greedy", {"seed": -3}, ["--param", "seed=-3"]),
        ("sa-greedy", {"seed": "many"}, ["--param", "seed=many"]),
    ]:
        expected = gpuctl.error(*argv, "--policy", policy, *extra)
        with pytest.raises(gpu_agent.Error) as raised:
            gpu_agent.simulate(HOST, TRACE, policy, params=params)
        assert str(raised.value) == expected, policy


def test_unknown_columns_are_warnings(tmp_path):
    path = write(
        tmp_path / "extra.csv",
        "id,arrival,workload,mem_gb,deadline,weight,colour\nt0,0,10,1,100,1,red\n",
    )
    with pytest.warns(UserWarning, match='ignoring unknown column "colour"'):
        result = gpu_agent.simulate(HOST, path, "fifo")
    assert result["tasks"] == 1


def test_a_trace_round_trips(tmp_path):
    rows = gpu_agent.read_trace(TRACE, HOST)
    assert len(rows) == 24
    assert rows[0] == {
        "id": "job00",
        "arrival": 2.3,
        "workload": 13.3,
        "mem_gb": 30.0,
        "deadline": 19.4,
        "weight": 1.0,
        "gpus": 1,
        "gpus_alt": [],
        "runtimes": [],
        "app": "default",
        "command": None,
        "actual": None,
    }
    path = tmp_path / "again.csv"
    gpu_agent.write_trace(rows, path)
    assert gpu_agent.read_trace(path, HOST) == rows
    assert path.read_text().splitlines()[0] == "id,arrival,workload,mem_gb,deadline,weight,gpus,app"
    # Every optional column, through a DataFrame too.
    varied = [dict(rows[0], runtimes=[10.0, 11.0, 20.0, 40.0], command="python3 train.py", actual=15.5)]
    varied.append(dict(rows[1], gpus=2, gpus_alt=[1]))
    gpu_agent.write_trace(varied, path)
    assert gpu_agent.read_trace(path, HOST) == gpu_agent.read_trace(varied, HOST) == varied
    pandas = pytest.importorskip("pandas")
    gpu_agent.write_trace(pandas.DataFrame(varied), path)
    assert gpu_agent.read_trace(path, HOST) == varied


def test_gen_dvfs_paper_writes_gpuctls_files(gpuctl, tmp_path):
    ours, theirs = tmp_path / "ours", tmp_path / "theirs"
    ours.mkdir(), theirs.mkdir()
    names = ("h.toml", "t.csv", "a.toml")
    report = gpu_agent.gen_dvfs_paper("online", 0.5, 3, *(ours / n for n in names), servers=64, rho=3)
    expected = gpuctl.json(
        "trace", "gen", "dvfs-paper", "--mode", "online", "--util", "0.5", "--seed", "3",
        "--servers", "64", "--rho", "3",
        *(a for flag, n in zip(("--out-host", "--out-trace", "--out-apps"), names) for a in (flag, str(theirs / n))),
    )
    assert {k: v for k, v in report.items() if k not in ("host", "trace", "apps")} == {
        k: v for k, v in expected.items() if k not in ("host", "trace", "apps")
    }
    for n in names:
        assert (ours / n).read_bytes() == (theirs / n).read_bytes()
    # gpuctl checks its own options: a plain Error with its message.
    with pytest.raises(gpu_agent.Error, match=r"^--util: expected a number in \(0, 100\], got 0"):
        gpu_agent.gen_dvfs_paper("offline", 0, 1, *(ours / n for n in names))
    with pytest.raises(gpu_agent.InputError, match="invalid value 'sideways' for '--mode <MODE>'"):
        gpu_agent.gen_dvfs_paper("sideways", 1, 1, *(ours / n for n in names))


def test_import_sos_writes_gpuctls_files(gpuctl, tmp_path):
    jobs = write(
        tmp_path / "jobs.txt",
        "87 73 170 16 109 190 43 102 9 65 114 0\n22 22 65 122 135 251 13 39 73 81 150 2\n",
    )
    report = gpu_agent.import_sos(jobs, tmp_path / "h.toml", tmp_path / "t.csv", tick_seconds=0.5)
    expected = gpuctl.json(
        "trace", "import", "sos", jobs, "--tick-seconds", "0.5",
        "--out-host", str(tmp_path / "h2.toml"), "--out-trace", str(tmp_path / "t2.csv"),
    )
    assert report["jobs"] == expected["jobs"] == 2
    assert (tmp_path / "h.toml").read_bytes() == (tmp_path / "h2.toml").read_bytes()
    assert (tmp_path / "t.csv").read_bytes() == (tmp_path / "t2.csv").read_bytes()
    bad = write(tmp_path / "bad.txt", "1 2 3\n")
    with pytest.raises(gpu_agent.InputError) as raised:
        gpu_agent.import_sos(bad, tmp_path / "h3.toml", tmp_path / "t3.csv")
    assert str(raised.value) == gpuctl.error(
        "trace", "import", "sos", bad, "--out-host", str(tmp_path / "h3.toml"), "--out-trace", str(tmp_path / "t3.csv")
    )
    assert not (tmp_path / "h3.toml").exists()


@pytest.mark.skipif(not (SHARED / "traces").is_dir(), reason="the shared Alibaba trace is absent")
def test_import_alibaba_writes_gpuctls_files(gpuctl, tmp_path):
    pods = str(SHARED / "traces/alibaba-gpu-v2023/openb_pod_list_default.csv")
    nodes = str(SHARED / "traces/alibaba-gpu-v2023/openb_node_list_gpu_node.csv")
    report = gpu_agent.import_alibaba(pods, nodes, tmp_path / "h.toml", tmp_path / "t.csv", gpus=16, from_=11000000, limit=200)
    expected = gpuctl.json(
        "trace", "import", "alibaba-v2023", pods, "--nodes", nodes, "--gpus", "16", "--from", "11000000",
        "--limit", "200", "--out-host", str(tmp_path / "h2.toml"), "--out-trace", str(tmp_path / "t2.csv"),
    )
    assert report["kept"] == expected["kept"] == 200
    assert (tmp_path / "h.toml").read_bytes() == (tmp_path / "h2.toml").read_bytes()
    assert (tmp_path / "t.csv").read_bytes() == (tmp_path / "t2.csv").read_bytes()
    result = gpu_agent.simulate(tmp_path / "h.toml", tmp_path / "t.csv", "greedy-eft")
    assert result["tasks"] == 200


def test_a_python_policy_runs_in_this_interpreter(tmp_path, monkeypatch):
    python_fifo = gpu_agent.simulate(
        HOST, TRACE, "python", params={"module": str(EXAMPLES / "policies" / "fifo.py")}, schedule=True
    )
    rust_fifo = gpu_agent.simulate(HOST, TRACE, "fifo", schedule=True)
    for result in (python_fifo, rust_fifo):
        del result["policy"], result["scheduling"]
    assert python_fifo == rust_fifo
    # The module runs in the calling interpreter (the simulation releases the GIL, the plugin takes it).
    probe = types.ModuleType("gpu_agent_test_probe")
    probe.events = []
    monkeypatch.setitem(sys.modules, "gpu_agent_test_probe", probe)
    module = write(
        tmp_path / "probe.py",
        "import gpu_agent_test_probe\n"
        "def on_event(view, event):\n"
        "    gpu_agent_test_probe.events.append(type(event).__name__)\n"
        "    return []\n",
    )
    gpu_agent.simulate(HOST, TRACE, "python", params={"module": module})
    assert "Arrived" in probe.events


def test_a_policy_fault_is_gpuctls_warning(tmp_path):
    module = write(
        tmp_path / "broken.py",
        "def on_event(view, event):\n    return 1 / 0\n",
    )
    with pytest.warns(UserWarning) as warned:
        result = gpu_agent.simulate(HOST, TRACE, "python", params={"module": module})
    (fault,) = [str(w.message) for w in warned]
    assert fault.startswith(f"policy python failed: {module}: on_event raised Traceback")
    assert "ZeroDivisionError: division by zero" in fault
    assert fault.endswith("; continuing with the built-in FIFO order")
    rust_fifo = gpu_agent.simulate(HOST, TRACE, "fifo")
    for report in (result, rust_fifo):
        del report["policy"], report["scheduling"]
    assert result == rust_fifo
