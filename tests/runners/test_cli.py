"""CLI: bad input is one line + exit 2; a run writes a record; the leaderboard shows it."""

import json
import subprocess
import sys

import pytest

from fedbench.runners.cli.cli import main

from smoke import SMALL_TASK_CONFIGS

BAD = [
    (["run", "--method", "fedraa", "--task", "tiny_vision"], "unknown method 'fedraa'; did you mean 'fedra'"),
    (["run", "--method", "fedra", "--task", "tiny_vison"], "unknown task 'tiny_vison'; did you mean 'tiny_vision'"),
    (["run", "--method", "fedra", "--task", "tiny_vision", "--setting", "dirichlet"], "unknown setting"),
    (["run", "--method", "fedra", "--task", "tiny_vision", "--roc", "6-3-1"], "malformed --roc"),
    (["run", "--method", "fedra", "--task", "tiny_vision", "--capacities", "12,13"], "outside 1..12"),
    (["run", "--method", "fedra", "--task", "tiny_vision", "--clients", "3", "--per-round", "5"], "--per-round 5 > number of clients 3"),
    (["run", "--method", "fedra", "--task", "tiny_vision", "--set", "method.nope=1"], "unknown config key method.nope"),
    (["run", "--method", "fedra", "--task", "tiny_vision", "--set", "lrr=1"], "unknown config key run.lrr; did you mean run.lr"),
    (["run", "--method", "fedra", "--task", "tiny_vision", "--rounds", "x"], "expected an integer"),
    (["run", "--method", "fedra", "--task", "tiny_vision", "--setting", "domain", "--capacities", "12,abc"], "bad value"),
    (["run", "--method", "fedra", "--task", "tiny_vision", "--threads", "0"], "run.threads"),
]


@pytest.mark.parametrize("argv,expected", BAD, ids=[str(i) for i in range(len(BAD))])
def test_bad_input_is_one_line_exit_2(argv, expected, capsys, tmp_path):
    code = main(argv + ["--out", str(tmp_path), "--no-progress"])
    err = capsys.readouterr().err
    assert code == 2
    assert expected in err
    assert err.count("\n") == 1 and err.startswith("fedbench: error:")
    assert not list(tmp_path.rglob("*.json"))  # bad input writes no record


def test_console_script_bad_input_no_traceback():
    p = subprocess.run([sys.executable, "-m", "fedbench", "run", "--method", "nope", "--task", "tiny_text"],
                       capture_output=True, text=True)
    assert p.returncode == 2
    assert "Traceback" not in p.stderr and p.stderr.strip().count("\n") == 0


def test_list_prints_every_key(capsys):
    from fedbench.methods import METHODS
    from fedbench.tasks import TASKS

    assert main(["list"]) == 0
    out = capsys.readouterr().out
    for key in METHODS.keys() + TASKS.keys():
        assert f"  {key} " in out


def test_run_then_leaderboard(tmp_path, capsys):
    out, board = tmp_path / "results", tmp_path / "board"
    sets = [f"task.{k}={v}" for k, v in SMALL_TASK_CONFIGS["tiny_vision"].items()]
    argv = ["run", "--method", "fedra", "--task", "tiny_vision", "--setting", "domain", "--capacities",
            "12,10,8,6,4,3", "--rounds", "2", "--out", str(out), "--no-progress", "--executor", "stub"]
    for s in sets:
        argv += ["--set", s]
    assert main(argv) == 0
    summary = capsys.readouterr().out.strip().splitlines()[-1]
    assert summary.startswith("fedra on tiny_vision [domain, 12,10,8,6,4,3, seed 0]: top1 ")
    (rec_path,) = list(out.rglob("*.json"))
    rec = json.loads(rec_path.read_text())
    assert rec["status"] == "ok" and rec["run"]["n_clients"] == 6
    assert set(rec["results"]["per_domain"]) == {"plain", "swapped", "inverted", "gray", "faded", "noisy"}
    assert main(["leaderboard", "--records", str(out), "--out", str(board)]) == 0
    md = (board / "tiny_vision.md").read_text()
    assert "| fedra " in md and "12,10,8,6,4,3" in md


def test_yaml_config_and_set_precedence(tmp_path, capsys):
    cfg = tmp_path / "c.yaml"
    cfg.write_text("run: {rounds: 1, clients: 3, per_round: 3}\ntask: {n_train: 60, n_test: 12}\nmethod: {lora_r: 2}\n")
    out = tmp_path / "r"
    assert main(["run", "--method", "fedavg", "--task", "tiny_text", "--config", str(cfg), "--set", "method.lora_r=4",
                 "--threads", "2", "--out", str(out), "--no-progress", "--executor", "stub"]) == 0
    rec = json.loads(next(out.rglob("*.json")).read_text())
    assert rec["run"]["run_config"]["rounds"] == 1 and rec["run"]["n_clients"] == 3
    assert rec["run"]["method_config"]["lora_r"] == 4 and rec["run"]["task_config"]["n_train"] == 60
    assert rec["env"]["threads"] == 2  # --threads: runtime, so not among the run's identity fields
    assert "threads" not in rec["run"]["run_config"] and "out" not in rec["run"]["run_config"]


def test_no_progress_also_quiets_library_bars(monkeypatch):
    from transformers.utils import logging as hf_logging

    from fedbench.runners.cli.launch import quiet_library_bars

    monkeypatch.setenv("TQDM_DISABLE", "0")  # setenv records the old state, so teardown restores it
    monkeypatch.setenv("HF_HUB_DISABLE_PROGRESS_BARS", "0")
    try:
        quiet_library_bars()
        assert not hf_logging.is_progress_bar_enabled()  # "Loading weights" bars, with or without our bar
    finally:
        hf_logging.enable_progress_bar()


@pytest.mark.parametrize("extra, says", [(["--per-round", "5"], "--per-round 5 > number of clients 2"),
                                         (["--method", "fedra", "--capacities", "12,6,3"], "for 2 clients")])
def test_client_counts_are_refused_before_the_records_folder_is_made(tmp_path, extra, says, capsys):
    """Where the setting does not take the client count from the data, --per-round and
    --capacities are checked against it when the spec is built: one line, exit 2, nothing
    created (the records folder was made first before)."""
    out = tmp_path / "r"
    argv = ["run", "--method", "fedavg", "--task", "tiny_text", "--clients", "2", "--out", str(out), *extra]
    assert main(argv) == 2
    assert says in capsys.readouterr().err
    assert not out.exists()
