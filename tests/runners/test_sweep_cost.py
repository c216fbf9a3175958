"""``fedbench sweep --dry-run`` prints each run's estimated cost and the total, timed from the
measured s/round of the records as the claims report times its missing runs."""

import json
import re

import yaml

from fedbench.runners.cli.cli import main
from fedbench.runners.cli.sweeping import cpu_time


def test_dry_run_costs_each_run_from_the_measured_records(tmp_path, capsys):
    out = tmp_path / "r"
    preset = tmp_path / "p.yaml"
    preset.write_text(yaml.safe_dump({"task": "tiny_text", "methods": ["fedavg"], "settings": ["iid"],
                                      "seeds": [0, 1, 2], "run": {"rounds": 2, "clients": 2, "per_round": 2},
                                      "task_config": {"n_train": 80, "n_test": 40}, "out": str(out)}))
    assert cpu_time(59) == "59 CPU-s" and cpu_time(90) == "1.5 CPU-min"
    assert main(["sweep", str(preset), "--no-progress", "--only", "seed=0"]) == 0
    rec = json.loads(next(out.rglob("*.json")).read_text())
    spr = rec["cost"]["seconds_total"] / rec["run"]["rounds_completed"]
    capsys.readouterr()
    assert main(["sweep", str(preset), "--no-progress", "--dry-run"]) == 0
    lines = capsys.readouterr().out.splitlines()
    todo = [ln for ln in lines if ": to run" in ln]
    assert len(todo) == 2 and all(f"est. {cpu_time(2 * spr)} (2 rounds x {spr:.1f} s/round, fedavg's 1 records)"
                                  in ln for ln in todo)
    assert lines[-1].startswith(f"sweep: 2 runs to do, est. {cpu_time(2 * 2 * spr)} in all")
    assert lines[-1].endswith(f"(measured s/round of the records under {out}, leaderboard/records)")


def test_dry_run_does_not_time_a_model_from_another_models_records(tmp_path, capsys):
    """The first run used tiny_text's default model (width 48); a run of a wider one (width 96) is
    timed from it only for want of another, and its line and the total say so, naming the field
    no record has."""
    out = tmp_path / "r"
    preset = tmp_path / "p.yaml"
    base = {"task": "tiny_text", "methods": ["fedavg"], "settings": ["iid"], "seeds": [0],
            "run": {"rounds": 2, "clients": 2, "per_round": 2}, "out": str(out)}
    preset.write_text(yaml.safe_dump({**base, "task_config": {"n_train": 80, "n_test": 40}}))
    assert main(["sweep", str(preset), "--no-progress"]) == 0
    preset.write_text(yaml.safe_dump({**base, "task_config": {"n_train": 80, "n_test": 40, "width": 96}}))
    capsys.readouterr()
    assert main(["sweep", str(preset), "--no-progress", "--dry-run"]) == 0
    lines = capsys.readouterr().out.splitlines()
    (todo,) = [ln.split(": to run, ")[1] for ln in lines if ": to run" in ln]
    assert re.search(r"s/round, fedavg's \d+ records at other budgets, none with task.width=96\)$", todo)
    assert "in all, 1 timed from records of another task config (measured s/round" in lines[-1]
