"""The tiny tasks learn: a few rounds of FedAvg clearly beat chance (and the untrained model)."""

import numpy as np
import pytest
import torch

from fedbench.runners.core.experiment import Experiment

# (task, task config, rounds, floor): floors are well above chance (vision 1/10, text 1/6)
# and above the untrained tiny LM's Rouge-L (~0.1); measured values are far higher.
# tiny_text's default config in the default run: the conformance learning runs (one method per
# family, most on tiny_text, each beating its untrained model) and the learning check (FedAvg on
# tiny_text's order labels) already train on it; this case with -m slow
CASES = [
    ("tiny_vision", {"n_train_per_domain": 120, "n_test_per_domain": 30}, 3, 0.35),
    pytest.param("tiny_text", {}, 4, 0.35, marks=pytest.mark.slow),
    ("tiny_lm", {}, 4, 0.3),
]


@pytest.mark.parametrize("task,cfg,rounds,floor", CASES, ids=["tiny_vision", "tiny_text", "tiny_lm"])
def test_fedavg_learns(task, cfg, rounds, floor, tmp_path):
    rec, _ = Experiment("fedavg", task, dict(rounds=rounds, clients=6, per_round=6, eval_initial=True,
                                              out=str(tmp_path)), task_config=cfg).run()
    assert rec["status"] == "ok", rec["error"]
    curve = [c["metric"] for c in rec["results"]["curve"]]
    assert curve[-1] > floor, curve
    assert curve[-1] > rec["results"]["initial"]["metric"] + 0.15, (rec["results"]["initial"], curve)


def test_tiny_data_is_fixed_and_domains_differ():
    from fedbench.config import build_config
    from fedbench.tasks.tiny_vision import TinyVision, TinyVisionConfig

    t = TinyVision(build_config(TinyVisionConfig, {"n_train_per_domain": 10, "n_test_per_domain": 5}))
    a, b = t.load(), t.load()
    assert torch.equal(a.train.tensors["x"], b.train.tensors["x"])
    assert sorted(np.unique(a.train_domains)) == list(range(6))
    x, d = a.train.tensors["x"], a.train_domains
    assert not torch.allclose(x[d == 0].mean(), x[d == 4].mean(), atol=0.1)  # "faded" shifts the mean


def test_mixer_option_runs_fedra_on_both_fc2s(tmp_path):
    from smoke import SMALL_TASK_CONFIGS

    runner = Experiment("fedra", "tiny_vision", dict(rounds=1, setting="domain", capacities=[12, 6, 3], out=str(tmp_path)),
                         task_config={**SMALL_TASK_CONFIGS["tiny_vision"], "model": "mixer"})
    rec, _ = runner.run()
    assert rec["status"] == "ok", rec["error"]
    assert all(k.split(".")[2] in ("mlp_tokens", "mlp_channels") for j in runner.am.layer_keys
               for k in runner.am.layer_keys[j])
    assert len(runner.am.layer_keys[0]) == 4  # A and B of two fc2s
