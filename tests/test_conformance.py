"""Every registered method runs 2 rounds on each tiny task it supports (timm-style
registry-wide test): the record validates and every reported number is finite."""

import math

import pytest

from fedbench.methods import METHODS
from fedbench.runners.core.experiment import Experiment
from fedbench.records import validate_record
from fedbench.tasks import TASKS

from smoke import SMALL_TASK_CONFIGS, one_per_family, task_config_for

#: every registered tiny task (``Task.tiny``): a new one is covered without being listed here
TINY = tuple(t for t in TASKS.keys() if TASKS.get(t).tiny)


def test_every_tiny_task_has_a_small_config():
    """The registry's tiny tasks (at least the three built in) each have a smoke-size config."""
    assert {"tiny_vision", "tiny_text", "tiny_lm"} <= set(TINY)
    assert set(TINY) <= set(SMALL_TASK_CONFIGS), "add the new tiny task to tests/smoke.py SMALL_TASK_CONFIGS"


CASES = [
    (m, t)
    for m in METHODS.keys()
    for t in TINY
    if t in SMALL_TASK_CONFIGS  # else test_every_tiny_task_has_a_small_config fails
    if TASKS.get(t).kind in METHODS.get(m).task_kinds and task_config_for(m, t) is not None
]


def _finite_numbers(obj, path=""):
    if isinstance(obj, bool) or obj is None:
        return
    if isinstance(obj, (int, float)):
        assert math.isfinite(obj), f"{path} is not finite: {obj}"
    elif isinstance(obj, dict):
        for k, v in obj.items():
            _finite_numbers(v, f"{path}.{k}")
    elif isinstance(obj, list):
        for i, v in enumerate(obj):
            _finite_numbers(v, f"{path}[{i}]")


def test_every_method_runs_somewhere():
    covered = {m for m, _ in CASES}
    assert covered == set(METHODS.keys())


#: blocks of the tiny models in the two-round runs: half the tiny tasks' 12, still room for the
#: three tiers of roc 1:1:1 to differ in depth (6 / 4 / 2 layers); every step, measurement and
#: evaluation costs about half
TWO_ROUND_DEPTH = 6


@pytest.mark.parametrize("method,task", CASES)
def test_method_runs_two_rounds(method, task, tmp_path):
    run = dict(rounds=2, clients=4, per_round=4, roc="1:1:1", seed=0, out=str(tmp_path))
    cfg = {**task_config_for(method, task), "depth": TWO_ROUND_DEPTH}
    rec, path = Experiment(method, task, run, task_config=cfg).run()
    assert rec["status"] == "ok", rec["error"]
    assert path.exists()
    validate_record(rec)
    assert rec["run"]["rounds_completed"] == 2
    assert len(rec["results"]["curve"]) == 2
    assert rec["results"]["final"] is not None
    _finite_numbers(rec["results"], "results")
    _finite_numbers(rec["cost"], "cost")
    assert rec["cost"]["tflops_per_step"]["mean"] > 0
    if METHODS.get(method).communicates:
        assert rec["cost"]["traffic_mb_per_client_round"]["total"] > 0
    else:  # local training only: nothing crosses the boundary
        assert rec["cost"]["traffic_mb_per_client_round"]["total"] == 0


# ---------------------------------------------------------------------------- learning
#: rounds on a tiny classification task for every method to beat its own untrained model
#: (the slowest learners, the partial-layer and rank-1 tiers, need a few)
LEARN_ROUNDS = 5
#: the first of these a method can run on (tiny_text; tiny_vision's CNNs for the FedLoRA family),
#: then any other tiny classification task of the registry
LEARN_TASKS = ("tiny_text", "tiny_vision")
LEARN_TASKS += tuple(t for t in TINY if TASKS.get(t).kind == "classification" and t not in LEARN_TASKS)
#: methods that may not beat their untrained model here, with the reason
LEARN_EXCEPTIONS: dict[str, str] = {}
LEARN_DATA = {"tiny_vision": {"n_train_per_domain": 80, "n_test_per_domain": 10}}
LEARN_CASES = [(m, next(t for t in LEARN_TASKS if (m, t) in CASES)) for m in METHODS.keys()
               if any((m, t) in CASES for t in LEARN_TASKS)]


#: the learning runs of the default test run: one method per family (the family's first in the
#: registry); every method with ``-m slow`` (CI runs both), as :func:`smoke.one_per_family` says
LEARN_FAST = [next(c for c in LEARN_CASES if METHODS.get(c[0]).family == f)
              for f in dict.fromkeys(METHODS.get(m).family for m, _ in LEARN_CASES)]


def test_every_classification_method_has_a_learning_check():
    assert {m for m, _ in LEARN_CASES} == {m for m in METHODS.keys() if "classification" in METHODS.get(m).task_kinds}
    assert {METHODS.get(m).family for m, _ in LEARN_FAST} == {METHODS.get(m).family for m, _ in LEARN_CASES}


@pytest.mark.parametrize("method,task", one_per_family(LEARN_CASES, LEARN_FAST))
def test_method_beats_its_untrained_model(method, task, tmp_path):
    if method in LEARN_EXCEPTIONS:
        pytest.xfail(LEARN_EXCEPTIONS[method])
    personalised = METHODS.get(method).evaluation == "local"
    # personalised methods: the FedLoRA paper's pathological 2 classes per client, and enough
    # images that each client's local test split (1/10 of its data) is not a handful
    run = dict(rounds=LEARN_ROUNDS, clients=4, per_round=4, roc="1:1:1", seed=0, out=str(tmp_path),
               eval_initial=True, eval_every=LEARN_ROUNDS, measure_flops=False,
               setting="2/-" if personalised else "iid")
    cfg = {**task_config_for(method, task), **(LEARN_DATA.get(task, {}) if personalised else {}),
           "depth": TWO_ROUND_DEPTH}
    rec, _ = Experiment(method, task, run, task_config=cfg).run()
    assert rec["status"] == "ok", rec["error"]
    initial, final = rec["results"]["initial"]["metric"], rec["results"]["final"]
    assert final > initial, f"{method}: {final} after {LEARN_ROUNDS} rounds <= {initial} untrained"
