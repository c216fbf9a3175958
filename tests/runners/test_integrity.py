"""Record integrity: a record edited by hand or copied under another run's name is one
warning and is not used, neither to skip a run as done nor in the tables; old records
without a hash are checked by name only; the record path is checked before training."""

from __future__ import annotations

import json
import logging
import shutil
from pathlib import Path

from fedbench.records import load_records
from fedbench.runners.cli.cli import main

from smoke import SMALL_TASK_CONFIGS

SETS = [a for k, v in SMALL_TASK_CONFIGS["tiny_text"].items() for a in ("--set", f"task.{k}={v}")]
COMMITTED = Path(__file__).resolve().parents[2] / "leaderboard" / "records"


def _argv(out, *extra):
    return ["run", "--method", "fedavg", "--task", "tiny_text", "--rounds", "1", "--clients", "2", "--out", str(out),
            "--no-progress", *SETS, *extra]


def test_an_edited_record_is_not_done_already(tmp_path, capsys):
    assert main(_argv(tmp_path)) == 0
    (path,) = tmp_path.rglob("*.json")
    rec = json.loads(path.read_text())
    true_final = rec["results"]["final"]
    rec["results"]["final"] = 0.999
    path.write_text(json.dumps(rec, indent=2))
    capsys.readouterr()
    assert main(_argv(tmp_path)) == 0
    out, err = capsys.readouterr()
    assert "done already" not in out and err.count("\n") == 1 and "does not match the hash" in err, err
    again = json.loads(path.read_text())
    assert again["results"]["final"] == true_final  # run again: the honest figure is back


def test_untrusted_records_are_not_used_by_the_tables(tmp_path, caplog):
    src = next(COMMITTED.rglob("*.json"))  # a committed record: written before hashes, checked by name
    task, method = src.parent.parent.name, src.parent.name
    ok = tmp_path / task / method / src.name
    ok.parent.mkdir(parents=True)
    shutil.copy(src, ok)
    shutil.copy(src, ok.with_name("0000000000000000.json"))  # another seed's record under this run's name
    (tmp_path / task / "elsewhere").mkdir()
    shutil.copy(src, tmp_path / task / "elsewhere" / src.name)  # the same run twice
    with caplog.at_level(logging.WARNING, logger="fedbench.records"):
        recs = load_records(tmp_path)
    assert len(recs) == 1 and recs[0]["run"]["run_id"] == src.stem
    said = [r.getMessage() for r in caplog.records]
    assert len(said) == 2 and any("is not its file name" in m for m in said) and any("the same run as" in m for m in said)


def test_a_folder_where_the_record_goes_is_found_before_training(tmp_path, capsys, monkeypatch):
    from fedbench.runners.core.spec import build_spec

    spec = build_spec("fedavg", "tiny_text", {"rounds": 1, "clients": 2, "out": str(tmp_path)}, {},
                      SMALL_TASK_CONFIGS["tiny_text"])
    spec.record_path().mkdir(parents=True)

    def loud(*a, **k):
        raise AssertionError("trained although the record cannot be written")

    monkeypatch.setattr("fedbench.runners.core.experiment.Experiment.setup", loud)
    assert main(_argv(tmp_path)) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "it is a directory, not a regular file" in err, err


def test_the_api_warns_of_an_edited_record_and_runs_again(tmp_path):
    import pytest

    import fedbench

    kw = dict(rounds=1, clients=2, out=str(tmp_path), task_config=SMALL_TASK_CONFIGS["tiny_text"])
    first = fedbench.run("fedavg", "tiny_text", **kw)
    (path,) = tmp_path.rglob("*.json")
    rec = json.loads(path.read_text())
    rec["results"]["final"] = 0.999
    path.write_text(json.dumps(rec, indent=2))
    with pytest.warns(UserWarning, match="does not match the hash"):
        again = fedbench.run("fedavg", "tiny_text", **kw)
    assert again["results"]["final"] == first["results"]["final"] != 0.999
    written = path.stat().st_mtime_ns
    assert fedbench.run("fedavg", "tiny_text", **kw)["results"]["final"] == first["results"]["final"]
    assert path.stat().st_mtime_ns == written  # a trusted finished record is returned, not run again
