"""The papers' settings that depend on the task kind, in one table.

All from Fed-HeLLo (Zhang et al., papers/fed_hello.txt, Sec. IV-A), the setting the
benchmark reproduces: LoRA rank 16 for classification and 8 for instruction tuning; the
rank-heterogeneous baselines' tier ranks 1/4/16 and 1/1/8 (so the largest tier's rank is
that LoRA rank); the co-design's T_RGD / T_FIM = 50 / 50 and 1 / 2. Readers:
:func:`fedbench.runners.core.tiers.tier_ranks_for` (``run.tier_ranks`` None), the rank methods'
r_max (:mod:`fedbench.methods.rank_hetero`, ``lora_r`` None) and Fed-HeLLo's rank and
schedule (:mod:`fedbench.methods.fed_hello`). A task kind not in the table gets the
classification row.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class PaperDefaults:
    """The defaults of one task kind."""

    lora_r: int  # LoRA rank of Fed-HeLLo and r_max of the rank methods
    tier_ranks: tuple[int, ...]  # LoRA rank of resource tiers 0, 1, 2 (rank methods)
    t_rgd: int  # Fed-HeLLo co-design: RGD-HLA for the first T_RGD rounds
    t_fim: int  # ... then FIM-HLA rescored every T_FIM rounds


PAPER_DEFAULTS: dict[str, PaperDefaults] = {
    "classification": PaperDefaults(lora_r=16, tier_ranks=(1, 4, 16), t_rgd=50, t_fim=50),
    "generation": PaperDefaults(lora_r=8, tier_ranks=(1, 1, 8), t_rgd=1, t_fim=2),
}


def paper_defaults(task_kind: str) -> PaperDefaults:
    """The row of ``task_kind`` (the classification row for a kind the table lacks)."""
    return PAPER_DEFAULTS.get(task_kind, PAPER_DEFAULTS["classification"])
