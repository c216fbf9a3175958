"""The one top-level handler: after set-up any failure is one line on stderr and the failed
record; the traceback goes to a file beside the record that the line names. User code
(callbacks, plugins) that raises or calls sys.exit is reported, never obeyed."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest

from fedbench.runners.cli.cli import main

from smoke import SMALL_TASK_CONFIGS

SETS = [a for k, v in SMALL_TASK_CONFIGS["tiny_text"].items() for a in ("--set", f"task.{k}={v}")]

CALLBACKS = '''
import sys
from fedbench.runners.outputs.callbacks import Callback

class RaisesInRound(Callback):
    def on_round_end(self, log, state):
        raise RuntimeError("boom in round")

class ExitsInRound(Callback):
    def on_round_end(self, log, state):
        sys.exit(3)

class WrongType(Callback):
    def on_round_end(self, log, state):
        return "stop please"

class RaisesAtEnd(Callback):
    def on_run_end(self, record):
        raise RuntimeError("boom at end")

class RaisesInInit(Callback):
    def __init__(self):
        raise RuntimeError("boom in init")
'''


@pytest.fixture
def cbmod(tmp_path, monkeypatch):
    (tmp_path / "mycbs.py").write_text(textwrap.dedent(CALLBACKS))
    (tmp_path / "exits_at_import.py").write_text("import sys\nsys.exit(0)\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    return tmp_path


def _run(out, *extra):
    return main(["run", "--method", "fedavg", "--task", "tiny_text", "--rounds", "1", "--clients", "2",
                 "--out", str(out), "--no-progress", *SETS, *extra])


def _records(out):
    return [json.loads(p.read_text()) for p in Path(out).rglob("*.json")]


@pytest.mark.parametrize("cls,says", [("RaisesInRound", "RuntimeError: boom in round"),
                                      ("ExitsInRound", "it called sys.exit(3) (not obeyed)"),
                                      ("WrongType", "WrongType.on_round_end returned str, not a Stop")])
def test_a_failure_after_set_up_is_the_failed_record_and_a_traceback_file(cbmod, tmp_path, capsys, cls, says):
    code = _run(tmp_path / "o", "--callback", f"mycbs:{cls}")
    out, err = capsys.readouterr()
    assert code == 1 and "Traceback" not in err and "Traceback" not in out, err
    (rec,) = _records(tmp_path / "o")
    assert rec["status"] == "failed" and says in rec["error"] and "traceback in " in rec["error"]
    (path,) = (tmp_path / "o").rglob("*.json")
    tb = path.with_name(path.stem + ".traceback.txt")
    assert rec["error"].endswith(f"(traceback in {tb.name} beside the record)") and "Traceback" in tb.read_text()
    assert says in out and tb.name in out and str(path) in out  # the run's one line names the file and its folder


def test_on_run_end_failing_keeps_the_ok_record_and_is_one_line(cbmod, tmp_path, capsys):
    code = _run(tmp_path / "o", "--callback", "mycbs:RaisesAtEnd")
    err = capsys.readouterr().err
    (rec,) = _records(tmp_path / "o")
    assert code == 1 and rec["status"] == "ok"
    assert err.count("\n") == 1 and "RaisesAtEnd.on_run_end failed after the ok record" in err, err
    assert "Traceback" not in err and list((tmp_path / "o").rglob("*.traceback.txt"))


@pytest.mark.parametrize("ref,says", [("mycbs:RaisesInInit", "RaisesInInit() failed: RuntimeError: boom in init"),
                                      ("exits_at_import:X", "it called sys.exit(0) (not obeyed)")])
def test_user_code_failing_before_training_is_bad_input(cbmod, tmp_path, capsys, ref, says):
    code = _run(tmp_path / "o", "--callback", ref)
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and says in err, err
    assert not _records(tmp_path / "o")


def test_an_unexpected_error_anywhere_is_one_line_exit_1_and_a_traceback_file(tmp_path, capsys, monkeypatch):
    def broken(*a, **k):
        raise RuntimeError("internal slip")

    monkeypatch.setattr("fedbench.leaderboard.generate.generate", broken)
    monkeypatch.setattr("tempfile.tempdir", str(tmp_path))
    code = main(["leaderboard", "--records", str(tmp_path), "--out", str(tmp_path / "lb")])
    err = capsys.readouterr().err
    assert code == 1 and err.count("\n") == 1 and "RuntimeError: internal slip (traceback in " in err, err
    (tb,) = tmp_path.glob("fedbench-*.traceback.txt")
    assert "internal slip" in tb.read_text() and str(tb) in err
