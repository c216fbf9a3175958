"""The Python API: fedbench.run / fedbench.sweep, and the README's example, run as written."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

import fedbench
from fedbench.errors import UserError

from smoke import SMALL_TASK_CONFIGS

README = Path(__file__).resolve().parents[1] / "README.md"


def test_readme_api_example_runs(tmp_path, monkeypatch, capsys):
    text = README.read_text(encoding="utf-8")
    block = re.search(r"<!-- api-example[^>]*-->\s*```python\n(.*?)```", text, re.S)
    assert block, "the README's API example is marked <!-- api-example -->"
    monkeypatch.chdir(tmp_path)
    exec(compile(block.group(1), "README.md", "exec"), {"__name__": "readme"})
    out = capsys.readouterr().out
    assert out.startswith("ok top1 ") and "round 2: train loss" in out
    assert len(list((tmp_path / "results").rglob("*.json"))) == 2


def test_run_returns_the_record_and_skips_a_finished_run(tmp_path):
    kw = dict(rounds=1, clients=2, out=str(tmp_path), task_config=SMALL_TASK_CONFIGS["tiny_text"], executor="stub")
    rec = fedbench.run("fedavg", "tiny_text", **kw)
    assert rec["status"] == "ok"
    path = next(tmp_path.rglob("*.json"))
    before = path.read_bytes()
    again = fedbench.run("fedavg", "tiny_text", **kw)  # finished: read back, not retrained
    assert again["run"]["created_at"] == rec["run"]["created_at"] and path.read_bytes() == before
    forced = fedbench.run("fedavg", "tiny_text", force=True, **kw)
    assert forced["results"]["final"] == rec["results"]["final"]


def test_bad_field_is_one_user_error(tmp_path):
    with pytest.raises(UserError, match="unknown config key run.roundz; did you mean run.rounds"):
        fedbench.run("fedavg", "tiny_text", roundz=3, out=str(tmp_path))


def test_sweep_returns_every_record(tmp_path):
    task_cfg = ", ".join(f"{k}: {v}" for k, v in SMALL_TASK_CONFIGS["tiny_text"].items())
    preset = tmp_path / "p.yaml"
    preset.write_text(f"task: tiny_text\nmethods: [fedavg, fedra]\nrun: {{rounds: 1, clients: 2, executor: stub}}\n"
                      f"task_config: {{{task_cfg}}}\nout: {tmp_path / 'res'}\n")
    recs = fedbench.sweep(str(preset))
    assert [r["run"]["method"] for r in recs] == ["fedavg", "fedra"] and {r["status"] for r in recs} == {"ok"}


def test_sweep_goes_through_the_cli_loop_and_warns_of_a_corrupt_record(tmp_path, monkeypatch):
    """``fedbench.sweep`` is the CLI's loop (one function): a corrupt record is a warning, as
    on the command line, and its run is done again; a finished run is not."""
    from fedbench.runners.cli import sweeping

    task_cfg = ", ".join(f"{k}: {v}" for k, v in SMALL_TASK_CONFIGS["tiny_text"].items())
    preset = tmp_path / "p.yaml"
    preset.write_text(f"task: tiny_text\nmethods: [fedavg, fedra]\nrun: {{rounds: 1, clients: 2, executor: stub}}\n"
                      f"task_config: {{{task_cfg}}}\nout: {tmp_path / 'res'}\n")
    first = fedbench.sweep(str(preset))
    calls = []
    real = sweeping.run_sweep
    monkeypatch.setattr(sweeping, "run_sweep", lambda *a, **k: calls.append(k) or real(*a, **k))
    fedra = next(r for r in first if r["run"]["method"] == "fedra")
    path = tmp_path / "res" / "tiny_text" / "fedra" / f"{fedra['run']['run_id']}.json"
    path.write_text("{not json", encoding="utf-8")
    with pytest.warns(UserWarning, match="corrupt record"):
        again = fedbench.sweep(str(preset))
    assert len(calls) == 1
    assert [r["run"]["method"] for r in again] == ["fedavg", "fedra"] and {r["status"] for r in again} == {"ok"}
    assert again[0]["run"]["created_at"] == first[0]["run"]["created_at"]  # the finished run was not redone
