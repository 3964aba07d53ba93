"""gpu_agent.simulate against gpuctl simulate --json, live."""

import csv


import pytest

import gpu_agent

tomllib = pytest.importorskip("tomllib")
from conftest import EXAMPLES

HOST = str(EXAMPLES / "host.toml")
TRACE = str(EXAMPLES / "trace.csv")


def deterministic(report: dict) -> dict:
    """A report less its scheduling times (the only figures that change from run to run)."""
    return {key: value for key, value in report.items() if key != "scheduling"}


@pytest.mark.parametrize(
    "policy, params",
    [
        ("fifo", {}),
        ("greedy-eft", {}),
        ("sa-greedy", {"seed": 7}),
        ("sos", {"alpha": 0.6}),
        ("edf-hier", {}),
        ("edl", {"rule": "edf-bf"}),
    ],
)
def test_simulate_is_gpuctl_simulate_json(gpuctl, policy, params):
    argv = ["--host", HOST, "--trace", TRACE, "--policy", policy]
    for key, value in params.items():
        argv += ["--param", f"{key}={value}"]
    expected = gpuctl.simulate(*argv)
    got = gpu_agent.simulate(HOST, TRACE, policy, params=params)
    assert list(got) == list(expected)
    assert deterministic(got) == deterministic(expected)
    assert set(got["scheduling"]) == {"wall_s", "policy_s", "decision_points"}
    assert got["scheduling"]["decision_points"] == expected["scheduling"]["decision_points"]


def test_the_schedule_is_the_rows_gpuctl_writes(gpuctl, tmp_path):
    path = tmp_path / "schedule.csv"
    gpuctl.simulate("--host", HOST, "--trace", TRACE, "--policy", "greedy-eft", "--schedule", str(path))
    with open(path, newline="") as f:
        written = list(csv.DictReader(f))
    rows = gpu_agent.simulate(HOST, TRACE, "greedy-eft", schedule=True)["schedule"]
    assert len(rows) == len(written) > 0
    for row, line in zip(rows, written):
        assert list(row) == list(line)
        assert row == gpu_agent._schedule_row(line)
        assert row["id"] == line["id"] and row["start"] == float(line["start"])
        assert isinstance(row["gpu"], int) and isinstance(row["start"], float)
        assert row["class"] is None and row["readjusted"] is None


def test_a_mig_policy_reports_its_layout_changes(gpuctl):
    host, trace, apps = (str(EXAMPLES / n) for n in ("host-mig-shift.toml", "mig-shift.csv", "mig-shift-apps.toml"))
    expected = gpuctl.simulate("--host", host, "--trace", trace, "--apps", apps, "--policy", "mig-plan")
    got = gpu_agent.simulate(host, trace, "mig-plan", apps=apps)
    assert got["mig_changes"], "the example makes layout changes"
    assert deterministic(got) == deterministic(expected)


def test_the_dvfs_papers_cluster_model_runs_as_in_gpuctl(gpuctl, tmp_path):
    files = {name: str(tmp_path / name) for name in ("h.toml", "t.csv", "a.toml")}
    report = gpu_agent.gen_dvfs_paper(
        "offline", 0.2, 1, files["h.toml"], files["t.csv"], files["a.toml"], gpus_per_server=16
    )
    assert report["tasks"] == int(2048 * 0.2)
    argv = ["--host", files["h.toml"], "--trace", files["t.csv"], "--apps", files["a.toml"], "--policy", "edl"]
    expected = gpuctl.simulate(*argv, "--param", "theta=1")
    got = gpu_agent.simulate(files["h.toml"], files["t.csv"], "edl", params={"theta": 1}, apps=files["a.toml"])
    assert deterministic(got) == deterministic(expected)


def test_in_memory_host_trace_and_apps_equal_their_files():
    with open(EXAMPLES / "host-mig-shift.toml", "rb") as f:
        host = tomllib.load(f)
    with open(EXAMPLES / "mig-shift-apps.toml", "rb") as f:
        apps = tomllib.load(f)
    trace = gpu_agent.read_trace(EXAMPLES / "mig-shift.csv", host, apps)
    from_files = gpu_agent.simulate(
        EXAMPLES / "host-mig-shift.toml", EXAMPLES / "mig-shift.csv", "mig-plan", apps=EXAMPLES / "mig-shift-apps.toml"
    )
    from_objects = gpu_agent.simulate(host, trace, "mig-plan", apps=apps)
    assert deterministic(from_objects) == deterministic(from_files)


def test_a_dataframe_is_a_trace():
    pandas = pytest.importorskip("pandas")
    frame = pandas.read_csv(TRACE, comment="#")
    assert len(frame) == 24
    got = gpu_agent.simulate(HOST, frame, "greedy-eft")
    assert deterministic(got) == deterministic(gpu_agent.simulate(HOST, TRACE, "greedy-eft"))
    # A frame of read_trace's rows (lists, None, NaN) is a trace too.
    rows = pandas.DataFrame(gpu_agent.read_trace(TRACE, HOST))
    assert deterministic(gpu_agent.simulate(HOST, rows, "greedy-eft")) == deterministic(got)


def test_parameters_as_python_values(gpuctl):
    expected = gpuctl.simulate("--host", HOST, "--trace", TRACE, "--policy", "edl", "--param", "compat=true")
    got = gpu_agent.simulate(HOST, TRACE, "edl", params={"compat": True})
    assert deterministic(got) == deterministic(expected)


def test_policies_and_describe():
    names = [p["name"] for p in gpu_agent.policies()]
    for shipped in ("fifo", "greedy-eft", "sa-greedy", "sos", "edf-hier", "edl", "mig-plan"):
        assert shipped in names
    assert all(p["description"] for p in gpu_agent.policies())
    sa = gpu_agent.describe("sa-greedy")
    assert sa["name"] == "sa-greedy"
    assert set(sa) == {"name", "description", "parameters"}
    seed = next(p for p in sa["parameters"] if p["key"] == "seed")
    assert seed["type"] == "integer"
    assert seed["default"] == "1"
    assert gpu_agent.describe("fifo")["parameters"] == []


def test_plugin_dir_from_the_environment(monkeypatch, tmp_path):
    monkeypatch.setenv("GPU_AGENT_PLUGIN_DIR", str(tmp_path))
    assert gpu_agent.policies() == []
    with pytest.raises(gpu_agent.PolicyError, match='unknown policy "fifo"; available: none'):
        gpu_agent.simulate(HOST, TRACE, "fifo")
    assert [p["name"] for p in gpu_agent.policies(gpu_agent.PLUGIN_DIR)]
