"""The meter composes a step's FLOPs and saved bytes from per-part measurements.

Toy model for the analytic check: 4 blocks, each a bias-free Linear(d, d), then a
bias-free head Linear(d, c); loss = sum(logits ** 2). FlopCounterMode counts a matmul
at 2 * m * n * k. With block 1's weight and the head trainable:
  forward: each block 2Bd^2, the rest (head) 2Bdc;
  backward: head weight grad 2Bdc + its input grad 2Bcd; blocks 3 and 2 (frozen, a
  trainable block below) input grad 2Bd^2 each; block 1 (trainable, nothing below)
  weight grad 2Bd^2 only; block 0 nothing;
  saved (float32, 4 bytes): block 1 its input (B, d) for its weight grad; blocks 2, 3
  nothing (a frozen weight's input grad needs only the weight); the rest the head's input
  (B, d) and the logits (B, c) that pow saves.
"""

import pytest
import torch
from torch import nn

from fedbench.runners.executors import worker
from fedbench.runners.core.experiment import Experiment
from fedbench.runners.cost.meters import storage_ptrs
from fedbench.runners.cost.parts import REST, compose, measure_parts
from fedbench.runners.executors.train import MeterCache

from smoke import SMALL_TASK_CONFIGS, one_per_family

B, D, C = 3, 8, 5


def test_measure_parts_credits_each_block_and_the_rest():
    torch.manual_seed(0)
    model = nn.Sequential()
    model.add_module("blocks", nn.Sequential(*[nn.Linear(D, D, bias=False) for _ in range(4)]))
    model.add_module("head", nn.Linear(D, C, bias=False))
    for p in model.parameters():
        p.requires_grad_(False)
    model.blocks[1].weight.requires_grad_(True)
    model.head.weight.requires_grad_(True)
    x = torch.randn(B, D)
    parts = measure_parts(model, "blocks", 4, storage_ptrs(model.parameters()), lambda: (model(x) ** 2).sum())
    assert [parts[i].flops_forward for i in range(4)] == [2 * B * D * D] * 4
    assert parts[REST].flops_forward == 2 * B * D * C
    assert [parts[i].flops_backward for i in range(4)] == [0, 2 * B * D * D, 2 * B * D * D, 2 * B * D * D]
    assert parts[REST].flops_backward == 2 * B * D * C + 2 * B * C * D
    assert [parts[i].saved_bytes for i in range(4)] == [0, B * D * 4, 0, 0]
    assert parts[REST].saved_bytes == B * D * 4 + B * C * 4


def test_compose_sums_known_parts_and_refuses_unknown_ones():
    table = {("a",): (1.0, 2.0, 3), ("b",): (10.0, 20.0, 30)}
    got = compose(table, {0: ("a",), 1: ("a",), REST: ("b",)})
    assert (got.flops_forward, got.flops_backward, got.saved_bytes) == (1.0 + 1.0 + 10.0, 2.0 + 2.0 + 20.0, 3 + 3 + 30)
    assert compose(table, {0: ("a",), REST: ("c",)}) is None


class _NeverHit(dict):
    """A part table that never holds a state: every client-round is measured directly."""

    def __contains__(self, key):
        return False


class _MeasureEvery(MeterCache):
    def __init__(self):
        super().__init__(figures=_NeverHit())


def _costs(tmp_path, method, task, run_extra):
    run = {"rounds": 2, "clients": 6, "per_round": 4, "max_steps": 1, "out": str(tmp_path), **run_extra}
    exp = Experiment(method, task, run, task_config=SMALL_TASK_CONFIGS[task])
    rec, _ = exp.run()
    assert rec["status"] == "ok", rec["error"]
    figures = [(rnd, c.client, c.flops_forward_step, c.flops_backward_step, c.accounted_bytes, c.breakdown)
               for rnd, c in exp.state.costs if c.steps]
    return figures, rec["cost"]


LAYER_METHODS = ["fed_hello", "fed_hello_rgd", "fed_hello_fim", "fed_hello_gd_triangle", "fed_hello_gd_bottleneck",
                 "straggler", "fedra", "fedra_fulldepth", "inclusivefl", "depthfl", "all_small", "hetlora", "flexlora",
                 "flora"]


#: one per way of allocating in the default run (layer sets, sub-models, ranks, exits, on text and a CNN);
#: the others with ``-m slow``
PARTS_FAST = (("fed_hello", "tiny_text"), ("fedra", "tiny_text"), ("hetlora", "tiny_text"), ("depthfl", "tiny_text"),
              ("depthfl", "tiny_vision"))


@pytest.mark.parametrize("method, task", one_per_family(
    [(m, "tiny_text") for m in LAYER_METHODS] + [(m, "tiny_vision") for m in ("fedra_fulldepth", "depthfl")], PARTS_FAST))
def test_composed_figures_equal_direct_measurements(tmp_path, monkeypatch, method, task):
    """Random allocations (layer sets, sub-models, ranks, exits): each client-round's
    composed figures equal a direct measurement of that client-round's step."""
    composed, cost = _costs(tmp_path / "composed", method, task, {"roc": "1:1:1"})
    monkeypatch.setattr(worker, "MeterCache", _MeasureEvery)
    direct, _ = _costs(tmp_path / "direct", method, task, {"roc": "1:1:1"})
    assert composed == direct
    assert cost["meter_reused"] > 0  # figures were composed at all


def test_random_allocations_measure_a_bounded_number_of_passes(tmp_path):
    """fed_hello_rgd draws a new layer set per client-round; the parts' states repeat, so
    the measured passes do not grow with the rounds (the cache of whole allocations
    measured most client-rounds)."""
    run = {"rounds": 8, "clients": 8, "per_round": 4, "max_steps": 1, "roc": "1:1:1", "out": str(tmp_path)}
    rec, _ = Experiment("fed_hello_rgd", "tiny_text", run, task_config=SMALL_TASK_CONFIGS["tiny_text"]).run()
    assert rec["status"] == "ok", rec["error"]
    c = rec["cost"]
    assert c["meter_measurements"] + c["meter_reused"] == 8 * 4
    # block states: trainable or not x a trainable block below or not; the rest: one per batch shape
    assert c["meter_measurements"] <= 4
