"""The local runner: failure records, tiers, one backbone, no hidden channel."""

import json

import numpy as np
import pytest
import torch

from fedbench.errors import UserError
from fedbench.runners.core.experiment import Experiment
from fedbench.records import validate_record
from fedbench.runners.core.tiers import TierAssigner, largest_remainder, parse_roc
from fedbench.tasks.tiny import TinyText

from smoke import SMALL_TASK_CONFIGS

RUN = dict(rounds=3, clients=3, per_round=3)


def _runner(tmp_path, **kw):
    return Experiment("fedavg", "tiny_text", {**RUN, "out": str(tmp_path), **kw},
                       task_config=SMALL_TASK_CONFIGS["tiny_text"])


def _fail_in_round(monkeypatch, exc_factory, at_call):
    calls = {"n": 0}
    orig = TinyText.loss

    def loss(self, model, batch):
        calls["n"] += 1
        if calls["n"] >= at_call:
            return exc_factory(orig(self, model, batch))
        return orig(self, model, batch)

    monkeypatch.setattr(TinyText, "loss", loss)


def test_nan_loss_leaves_failed_record_with_finished_rounds(tmp_path, monkeypatch):
    r = _runner(tmp_path, measure_flops=False)  # the meter's measuring pass would be one more loss call
    # each round = 3 clients x 2 steps (160 / 3 examples, batch 32); NaN from round 2 on
    _fail_in_round(monkeypatch, lambda out: (out[0] * float("nan"), out[1]), at_call=7)
    rec, path = r.run()
    assert rec["status"] == "failed" and "non-finite loss" in rec["error"]
    assert rec["run"]["rounds_completed"] == 1
    validate_record(json.loads(path.read_text()))


def test_ctrl_c_leaves_cancelled_record(tmp_path, monkeypatch):
    r = _runner(tmp_path, measure_flops=False)  # the meter's measuring pass would be one more loss call

    def interrupt(out):
        raise KeyboardInterrupt

    _fail_in_round(monkeypatch, interrupt, at_call=7)
    rec, path = r.run()
    assert rec["status"] == "cancelled" and rec["run"]["rounds_completed"] == 1
    assert json.loads(path.read_text())["status"] == "cancelled"


def test_record_fields(tmp_path):
    rec, _ = _runner(tmp_path, roc="1:1:1", rounds=1, executor="stub").run()  # the record's fields: no training needed
    run = rec["run"]
    assert run["partition_fingerprint"] and len(run["client_tiers"]) == 3
    assert sorted(run["client_tiers"].values()) == [0, 1, 2]
    assert [t["layers"] for t in run["tiers"]] == [6, 9, 12]
    assert rec["cost"]["peak_mem_source"] == "accounted"
    assert rec["env"]["torch"] == torch.__version__


def test_one_backbone_shared_by_all_clients(tmp_path):
    """A round trains every client on the same backbone tensors and never changes them."""
    r = _runner(tmp_path, rounds=1)
    r.setup()
    base = {n: p for n, p in r.am.model.named_parameters() if "lora_" not in n and "classifier" not in n}
    before = {n: (p.data_ptr(), p.detach().clone()) for n, p in base.items()}
    from fedbench.runners.core.rounds import run_round
    from fedbench.runners.core.state import RunState

    loop = r.make_loop(r.make_executor(), r.record_path().with_suffix(".ckpt"))
    run_round(loop, 1, RunState(r.method.init_state(r.am.read(r.am.all_keys))))
    after = dict(r.am.model.named_parameters())
    assert all(after[n].data_ptr() == ptr and torch.equal(after[n], v) for n, (ptr, v) in before.items())


def test_roc_tiers_and_counts():
    assert parse_roc("6:3:1") == [0.6, 0.3, 0.1]
    assert largest_remainder(7, [0.6, 0.3, 0.1]) == [4, 2, 1]
    t = TierAssigner(10, 12, roc="6:3:1", capacities=None, dynamic=False, tier_fractions=[0.5, 0.75, 1.0],
                     tier_ranks=[1, 4, 16], max_rank=16, seed=0)
    assert sorted(np.bincount(t.assignment).tolist()) == [1, 3, 6]
    assert [(x.layers, x.rank) for x in t.tiers] == [(6, 1), (9, 4), (12, 16)]
    with pytest.raises(UserError, match="malformed --roc"):
        parse_roc("6:x:1")


def test_capacities_cycle_and_dynamic_redraws():
    t = TierAssigner(8, 12, roc=None, capacities=[12, 6, 3], dynamic=False, tier_fractions=[0.5, 0.75, 1.0],
                     tier_ranks=[1, 4, 16], max_rank=16, seed=0)
    prof = t.profiles(list(range(8)), 1, np.random.default_rng(0), [1] * 8)
    assert [p.layers for p in prof] == [12, 6, 3, 12, 6, 3, 12, 6]
    d = TierAssigner(4, 12, roc=None, capacities=[12, 6, 3], dynamic=True, tier_fractions=[0.5, 0.75, 1.0],
                     tier_ranks=[1, 4, 16], max_rank=16, seed=0)
    rng = np.random.default_rng(0)
    seen = {tuple(p.layers for p in d.profiles([0, 1, 2, 3], r, rng, [1] * 4)) for r in range(20)}
    assert len(seen) > 5  # budgets change between rounds


def test_setting_needing_domains_on_task_without_domains(tmp_path):
    with pytest.raises(UserError, match="needs a task with domains"):
        _runner(tmp_path, setting="domain").run()


def test_eval_initial_scores_the_untrained_model(tmp_path):
    """run.eval_initial evaluates before round 1: the same score a fresh model gets, not the trained one."""
    r = _runner(tmp_path, rounds=2, eval_initial=True)
    rec, path = r.run()
    assert rec["status"] == "ok"
    init = rec["results"]["initial"]
    fresh = _runner(tmp_path / "fresh", rounds=2)
    fresh.setup()
    expected = fresh.evaluator.evaluate(fresh.method.init_state(fresh.am.read(fresh.am.all_keys)), None)[0].value
    assert init["metric"] == pytest.approx(expected)
    assert init["metric"] != pytest.approx(rec["results"]["final"])
    assert [c["round"] for c in rec["results"]["curve"]] == [1, 2]
    validate_record(json.loads(path.read_text()))


def test_eval_initial_is_part_of_the_run_id_and_off_writes_null(tmp_path):
    r = _runner(tmp_path)
    assert r.spec.configs()["run"]["eval_initial"] is False
    assert r.spec.run_id != _runner(tmp_path, eval_initial=True).spec.run_id
    rec, _ = _runner(tmp_path, rounds=1).run()
    assert rec["status"] == "ok" and rec["results"]["initial"] is None


@pytest.mark.parametrize("task, given, expected", [
    ("ledgar", None, 100), ("cifar100", None, 100), ("dolly", None, 50), ("tiny_text", None, 10), ("ledgar", 7, 7),
])
def test_clients_default_to_the_tasks_paper_setting(tmp_path, task, given, expected):
    run = {"out": str(tmp_path)} | ({} if given is None else {"clients": given})
    r = Experiment("fedavg", task, run)
    assert r.spec.run.clients == expected and r.spec.configs()["run"]["clients"] == expected


def test_every_method_is_scored_on_the_same_test_examples(tmp_path):
    """The server's hold-out (FIM proxy set) leaves the test split for all methods alike."""
    seen = {}
    for method in ("fedavg", "fed_hello_fim", "hetlora"):
        r = Experiment(method, "tiny_text", {**RUN, "rounds": 1, "out": str(tmp_path)},
                        task_config=SMALL_TASK_CONFIGS["tiny_text"])
        r.setup()
        seen[method] = (tuple(r.fed.holdout_indices), len(r.fed.test), len(r.server.proxy or []))
    n_test = len(r.data.test)
    assert seen["fedavg"][0] == seen["fed_hello_fim"][0] == seen["hetlora"][0]
    assert len(seen["fedavg"][0]) == min(50, n_test // 2)
    assert {v[1] for v in seen.values()} == {n_test - len(seen["fedavg"][0])}
    assert seen["fedavg"][2] == 0 and seen["fed_hello_fim"][2] == len(seen["fedavg"][0])


def test_server_holdout_option(tmp_path):
    r = _runner(tmp_path, server_holdout=0)
    r.setup()
    assert r.fed.holdout_indices == [] and len(r.fed.test) == len(r.data.test)
    with pytest.raises(UserError, match="needs a proxy set"):
        Experiment("fed_hello_fim", "tiny_text", {**RUN, "server_holdout": 0, "out": str(tmp_path)},
                    task_config=SMALL_TASK_CONFIGS["tiny_text"]).setup()
    with pytest.raises(UserError, match="leaves nothing to evaluate"):
        _runner(tmp_path, server_holdout=10**6).setup()
