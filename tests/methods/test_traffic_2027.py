"""Traffic per client-round of the alternating-factor methods against shared/docs/methods-2027.md
(Secs. 3-4 and the summary table; BERT-base q/v: d = 768, L = 24 adapted matrices; scalars
per client-round, the head and LoRA-A2's rank masks counted separately).

The hooks run on the BERT-shaped twin (tests/traffic_twin.py, width 48) with made-up uploads;
the measured bytes must be the spec's formula at d = 48, the formula at d = 768 the spec's number.
Round 2 is measured: its clients all took part in round 1, so they are sent only the factor
round 1 changed (B) and train and send A."""

import dataclasses

import pytest
import torch

from fedbench.methods.alternating import RANKS, UPLOAD_RANK
from fedbench.methods.factor_rules import select_top_ranks
from traffic_twin import L, R, measure_traffic

#: the spec: (up, down) in scalars per client-round at d = 768, R = 8
TABLE = {
    "rolora": (147_456, 147_456),  # "18,432 r each way: r = 8 -> 147,456"
    "rolora_het": (18_432 * 2, 147_456),  # r_k = 2: the spec's 18,432 r_k up; the factor of R down
    "lora_a2": (18_432, 147_456),  # "up 18,432 r_k (r_k = 1 -> 18,432) / down 18,432 R"
}
#: tier ranks of the N = 3 clients (client 0 is measured)
RANKS_OF = {"rolora": [R] * 3, "rolora_het": [2, R, R], "lora_a2": [1, R, R]}


def formula(method: str, d: int) -> tuple[int, int]:
    r_0 = RANKS_OF[method][0]
    return r_0 * d * L, R * d * L  # one factor's r_0 (up) or R (down) ranks over the L matrices


@pytest.mark.parametrize("method", sorted(TABLE))
def test_formula_at_bert_base_width_is_the_spec_table(method):
    assert formula(method, 768) == TABLE[method]


def _random_selection(m, plan, g):
    """A LoRA-A2 client's choice: the top r_k M of random scores (what its scoring picks)."""
    scores = {mod: torch.rand(m.r_max, generator=g) for mod in m.modules}
    chosen = select_top_ranks(scores, plan.extra[UPLOAD_RANK] * len(m.modules))
    return dataclasses.replace(plan, extra={**plan.extra, RANKS: chosen})


@pytest.mark.parametrize("method", sorted(TABLE))
def test_measured_traffic_on_the_twin_is_the_formula(method):
    masked = method != "rolora"
    t, head_down, head_up = measure_traffic(method, {}, RANKS_OF[method], 2,
                                            _random_selection if method == "lora_a2" else None)
    selection = L * R if masked else 0  # the selection: one byte per rank and matrix
    assert ((t.up_bytes - head_up - selection) // 4, (t.down_bytes - head_down) // 4) == formula(method, 48)
    assert (t.up_bytes - head_up - selection) % 4 == 0
