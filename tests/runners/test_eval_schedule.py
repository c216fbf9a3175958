"""Evaluation at a fraction of training: the default schedule scores about 10 rounds of a
run plus the last, an explicit ``--eval-every`` wins, scoring runs under
``torch.inference_mode``; ``run.precision=bf16`` runs training and evaluation under
bfloat16 autocast and is a run of its own (another run id, another leaderboard row)."""

import json

import pytest
import torch

from fedbench.configs import eval_period
from fedbench.runners.cli.cli import main
from fedbench.runners.core.spec import build_spec
from fedbench.tasks.tiny import TinyText

from smoke import SMALL_TASK_CONFIGS
from helpers import run_ok


@pytest.mark.parametrize("rounds, eval_every, tiny, period", [
    (10, None, True, 1), (11, None, True, 2), (25, None, True, 3), (100, None, True, 10), (25, 4, True, 4),
    (3, 1, False, 1), (10, None, False, 2), (3, None, False, 2), (35, None, False, 4), (10, 1, False, 1)])
def test_eval_period(rounds, eval_every, tiny, period):
    assert eval_period(rounds, eval_every, tiny) == period  # default: ceil(rounds / 10), >= 2 for a real task


def _run(tmp_path, **run):
    rec, _, exp = run_ok("fedavg", "tiny_text", {"clients": 4, "per_round": 2, "max_steps": 1, "out": str(tmp_path),
                                                 **run}, task_config=SMALL_TASK_CONFIGS["tiny_text"])
    return rec, exp


@pytest.mark.parametrize("eval_every, scored", [(None, [2, 4, 6, 8, 10, 12]), (5, [5, 10, 12])])
def test_scored_rounds_follow_the_schedule_and_the_record_says_so(tmp_path, eval_every, scored):
    sched = {} if eval_every is None else {"eval_every": eval_every}
    rec, exp = _run(tmp_path, rounds=12, executor="stub", **sched)  # bookkeeping: no client needs to train
    assert [log.round for log in exp.state.logs if log.metric is not None] == scored
    assert [p["round"] for p in rec["results"]["curve"] if p["metric"] is not None] == scored
    assert rec["run"]["run_config"]["eval_every"] == (2 if eval_every is None else eval_every)


def test_short_runs_keep_their_run_id_under_the_default_schedule():
    """Up to 10 rounds the default resolves to 1, the old default: committed records' ids hold."""
    assert build_spec("fedavg", "tiny_text", {"rounds": 5}).run_id == \
        build_spec("fedavg", "tiny_text", {"rounds": 5, "eval_every": 1}).run_id


def test_precision_is_part_of_the_identity_and_the_variant():
    fp32, bf16 = build_spec("fedavg", "tiny_text", {}), build_spec("fedavg", "tiny_text", {"precision": "bf16"})
    assert fp32.run_id != bf16.run_id
    assert fp32.variant()["precision"] == "fp32" and bf16.variant()["precision"] == "bf16"
    # fp32 is the default: an fp32 run keeps the id it had before the field existed
    assert fp32.run_id == build_spec("fedavg", "tiny_text", {"precision": "fp32"}).run_id


@pytest.mark.parametrize("precision, dtype", [("fp32", torch.float32), ("bf16", torch.bfloat16)])
def test_training_and_evaluation_forwards_run_in_the_precision(tmp_path, monkeypatch, precision, dtype):
    seen = {"train": set(), "eval": set(), "inference": set()}
    forward = TinyText.forward

    def spy(self, model, batch):
        out = forward(self, model, batch)
        seen["train" if torch.is_grad_enabled() else "eval"].add(out.dtype)
        if not torch.is_grad_enabled():
            seen["inference"].add(torch.is_inference_mode_enabled())
        return out

    monkeypatch.setattr(TinyText, "forward", spy)
    rec, _ = _run(tmp_path, rounds=1, precision=precision)
    assert seen == {"train": {dtype}, "eval": {dtype}, "inference": {True}}
    assert rec["run"]["run_config"].get("precision", "fp32") == precision  # fp32: absent, as in older records


def test_cli_precision_flag(tmp_path, capsys):
    out = tmp_path / "r"
    assert main(["run", "--method", "fedavg", "--task", "tiny_text", "--rounds", "1", "--clients", "2",
                 "--max-steps", "1", "--precision", "bf16", "--set", "task.n_train=40", "--set", "task.n_test=12",
                 "--out", str(out), "--no-progress", "--executor", "stub"]) == 0
    rec = json.loads(next(out.rglob("*.json")).read_text())
    assert rec["run"]["run_config"]["precision"] == "bf16"
    assert main(["run", "--method", "fedavg", "--task", "tiny_text", "--precision", "fp16"]) == 2
    assert "precision" in capsys.readouterr().err


def test_a_real_task_is_scored_every_second_round_of_a_short_run():
    assert build_spec("fedavg", "ledgar", {"rounds": 10}).run.eval_every == 2
    assert build_spec("fedavg", "ledgar", {"rounds": 10, "eval_every": 1}).run.eval_every == 1
