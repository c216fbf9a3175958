"""The papers' defaults by task kind come from one table, and its three readers (tier
ranks, the rank methods' r_max, Fed-HeLLo's rank and schedule) agree with it."""

import pytest

from fedbench.methods.fed_hello import FedHello, FedHelloConfig
from fedbench.methods.paper_defaults import PAPER_DEFAULTS, paper_defaults
from fedbench.methods.rank_hetero import RankConfig, RankMethod
from fedbench.runners.core.tiers import tier_ranks_for


def test_fed_hello_sec_iv_a_values():
    assert paper_defaults("classification").tier_ranks == (1, 4, 16) and paper_defaults("classification").lora_r == 16
    assert paper_defaults("generation").tier_ranks == (1, 1, 8) and paper_defaults("generation").lora_r == 8
    assert paper_defaults("segmentation") == paper_defaults("classification")  # a kind not in the table


@pytest.mark.parametrize("kind", sorted(PAPER_DEFAULTS) + ["segmentation"])
def test_every_reader_takes_the_table_row(kind):
    row = paper_defaults(kind)
    assert tier_ranks_for(None, kind) == list(row.tier_ranks)
    assert max(row.tier_ranks) == row.lora_r  # the strongest tier trains the global rank: default tiers fit
    assert RankMethod.resolve_config(RankConfig(), kind).lora_r == row.lora_r
    cfg = FedHello.resolve_config(FedHelloConfig(), kind)
    assert (cfg.lora_r, cfg.t_rgd, cfg.t_fim) == (row.lora_r, row.t_rgd, row.t_fim)
    given = FedHello.resolve_config(FedHelloConfig(lora_r=4, t_rgd=3, t_fim=5), kind)
    assert (given.lora_r, given.t_rgd, given.t_fim) == (4, 3, 5)  # given values win
