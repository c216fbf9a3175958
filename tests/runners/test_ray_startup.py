"""A local Ray instance that does not start in time (``ray.init`` timing out) is a failure of
the environment, not of the input: one line on stderr naming it, exit status 1 (not 2), the
traceback in a file that line names, no record written. Ray itself is faked here (a module
whose ``init`` times out), so the test needs no Ray."""

import sys
import tempfile
import types

import yaml

from fedbench.runners.cli.cli import main


def test_ray_start_up_timeout_is_one_line_and_exit_1(tmp_path, monkeypatch, capsys):
    fake = types.ModuleType("ray")
    fake.__version__ = "2.40.0"
    fake.is_initialized = lambda: False

    def init(**kw):
        raise TimeoutError("Timed out after 30 seconds waiting for the raylet to start\nmore detail")

    fake.init = init
    fake.__path__ = []  # a package, for the submodules imported before the start
    util, strategies = types.ModuleType("ray.util"), types.ModuleType("ray.util.scheduling_strategies")
    strategies.NodeAffinitySchedulingStrategy = object
    for name, mod in (("ray", fake), ("ray.util", util), ("ray.util.scheduling_strategies", strategies)):
        monkeypatch.setitem(sys.modules, name, mod)
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))  # the traceback file lands here
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    preset = tmp_path / "p.yaml"
    preset.write_text(yaml.safe_dump({"task": "tiny_text", "methods": ["fedavg"], "run": {"rounds": 1, "clients": 2},
                                      "out": str(tmp_path / "r")}))
    status = main(["sweep", str(preset), "--no-progress", "--workers", "2"])
    err = capsys.readouterr().err.strip().splitlines()
    assert status == 1
    assert len(err) == 1, err
    assert "Ray could not start a local instance: Timed out after 30 seconds waiting for the raylet" in err[0]
    assert "Traceback" not in err[0]
    assert not list((tmp_path / "r").rglob("*.json"))
    assert len(list(tmp_path.glob("fedbench-*.traceback.txt"))) == 1
