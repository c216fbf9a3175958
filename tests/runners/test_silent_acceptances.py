"""What used to be accepted silently is a clear error or a documented outcome: a catalogue
without device classes, --workers with an executor that has none, a precision a device has
no figure for, a deadline that drops every client."""

from __future__ import annotations

import pytest

from fedbench.runners.cli.cli import main
from fedbench.runners.core.experiment import Experiment

from smoke import SMALL_TASK_CONFIGS

RUN = ["run", "--method", "fedavg", "--task", "tiny_text"]


@pytest.mark.parametrize("argv,says", [
    (["--device-catalog", "x.yaml"], "--device-catalog (run.device_catalog) needs --devices"),
    (["--workers", "4"], "--workers 4 is for --executor ray"),
    # packed trains a group of clients in one pass: not "one client at a time", but in this process
    (["--workers", "4", "--executor", "packed"], "the packed executor runs its clients in this process, with no "
                                                 "workers"),
])
def test_options_that_would_change_nothing_are_refused(argv, says, tmp_path, capsys):
    assert main([*RUN, *argv, "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and says in err, err


def test_a_precision_without_a_device_figure_is_refused_by_run_as_by_plan(tmp_path, capsys):
    (tmp_path / "cat.yaml").write_text("fp32only:\n  memory_gb: 8\n  tflops: {fp32: 1}\n  uplink_mbps: 10\n"
                                       "  downlink_mbps: 10\n  source: a test\n")
    argv = ["--devices", "fp32only", "--device-catalog", str(tmp_path / "cat.yaml"), "--precision", "bf16"]
    assert main([*RUN, *argv, "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "device 'fp32only' has no throughput for bf16" in err, err
    assert not (tmp_path / "o").exists() or not list((tmp_path / "o").rglob("*.json"))


def test_a_deadline_that_drops_every_client_fails_the_run(tmp_path):
    rec, _ = Experiment("fedavg", "tiny_text", {"rounds": 2, "clients": 2, "out": str(tmp_path), "devices": "phone",
                                                "deadline": 1e-9}, task_config=SMALL_TASK_CONFIGS["tiny_text"]).run()
    assert rec["status"] == "failed" and "dropped every client in every round" in rec["error"]
