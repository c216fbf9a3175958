"""Fed-HeLLo end to end: one small co-design run's recorded proxy set, server cost and per-tier
costs (the unit checks: test_fed_hello.py)."""

from __future__ import annotations

import pytest


def test_end_to_end_tiny_text_costs_differ_by_tier(tmp_path):
    """A tiny co-design run: the proxy set is recorded, the FIM pass is server cost, and real
    freezing makes backward FLOPs and accounted memory grow with the tier's budget, while the
    forward (full depth for everyone) costs the same."""
    from fedbench.runners.core.experiment import Experiment

    rec, _ = Experiment(
        "fed_hello", "tiny_text",
        dict(roc="1:1:1", rounds=2, clients=3, per_round=3, max_steps=1, out=str(tmp_path)),
        method_config=dict(t_rgd=1, t_fim=1, proxy_size=4),  # round 1 RGD, round 2 FIM
        task_config=dict(depth=4, width=24, n_train=120, n_test=40),
    ).run()
    assert rec["status"] == "ok", rec["error"]
    assert len(rec["run"]["proxy_indices"]) == 4 and len(rec["run"]["holdout_indices"]) == 20  # min(50, 40 // 2)
    assert set(rec["run"]["proxy_indices"]) <= set(rec["run"]["holdout_indices"])
    assert rec["run"]["method_config"]["lora_r"] == 16
    assert rec["cost"]["server_tflops_total"] > 0 and rec["cost"]["server_seconds_total"] > 0
    flops = rec["cost"]["tflops_per_step"]["by_tier"]
    mem = rec["cost"]["accounted_mem_gb"]["by_tier"]
    assert set(flops) == {"0", "1", "2"}
    for t in ("0", "1"):
        assert flops[t]["backward"] < flops["2"]["backward"]
        assert mem[t]["mean"] < mem["2"]["mean"]
        assert flops[t]["forward"] == pytest.approx(flops["2"]["forward"], rel=1e-6)
