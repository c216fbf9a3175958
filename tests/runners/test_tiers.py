"""Tiers: exact largest-remainder counts, recorded counts, tier ranks by task kind, and
the refusal of a federation in which a method would train nobody."""

from fractions import Fraction

import pytest

from fedbench.errors import UserError
from fedbench.configs import RunConfig
from fedbench.runners.core.experiment import Experiment
from fedbench.runners.core.tiers import TierAssigner, largest_remainder, parse_roc_exact, tier_ranks_for

from smoke import SMALL_TASK_CONFIGS


def _tiers(n, roc, **kw):
    return TierAssigner(n, 12, roc=roc, capacities=None, dynamic=kw.pop("dynamic", False),
                        tier_fractions=[0.5, 0.75, 1.0], tier_ranks=[1, 4, 16], max_rank=16, seed=kw.pop("seed", 0))


def test_exact_largest_remainder_6_3_1_over_6_clients():
    # n * shares = 3.6, 1.8, 0.6: floors 3, 1, 0; remainders .6, .8, .6 -> tier 1, then the
    # tie .6 = .6 goes to the lower tier index (tier 0). Floats made it [3, 2, 1].
    assert parse_roc_exact("6:3:1") == [Fraction(3, 5), Fraction(3, 10), Fraction(1, 10)]
    assert largest_remainder(6, parse_roc_exact("6:3:1")) == [4, 2, 0]
    for seed in range(5):  # deterministic counts whatever the seed (only who is where changes)
        assert _tiers(6, "6:3:1", seed=seed).counts() == {"0": 4, "1": 2, "2": 0}
    assert largest_remainder(3, [Fraction(1, 3)] * 3) == [1, 1, 1]
    assert largest_remainder(2, [Fraction(1, 3)] * 3) == [1, 1, 0]  # ties: lower index first
    assert largest_remainder(10, parse_roc_exact("6:3:1")) == [6, 3, 1]
    assert largest_remainder(7, parse_roc_exact("0.6:0.3:0.1")) == [4, 2, 1]


def test_tier_layers_exact():
    t = _tiers(10, "1:1:1")
    assert [x.layers for x in t.tiers] == [6, 9, 12]


def test_tier_ranks_by_task_kind():
    assert tier_ranks_for(None, "classification") == [1, 4, 16]
    assert tier_ranks_for(None, "generation") == [1, 1, 8]
    assert tier_ranks_for([2, 3, 4], "generation") == [2, 3, 4]
    assert RunConfig().tier_ranks is None


@pytest.mark.parametrize("method,task,ranks,r_max", [
    ("hetlora", "tiny_lm", [1, 1, 8], 8), ("flexlora", "tiny_text", [1, 4, 16], 16)])
def test_rank_methods_resolve_ranks_by_task_kind(method, task, ranks, r_max, tmp_path):
    exp = Experiment(method, task, dict(rounds=1, clients=3, per_round=3, roc="1:1:1", out=str(tmp_path)),
                     task_config=SMALL_TASK_CONFIGS[task])
    exp.setup()
    assert exp.spec.method_config.lora_r == r_max and exp.method.r_max == r_max
    assert [t["rank"] for t in exp.tiers.describe()] == ranks
    assert exp.spec.configs()["run"]["tier_ranks"] == ranks


def test_tier_counts_recorded_and_exclusive_without_full_tier_refused(tmp_path):
    run = dict(rounds=1, clients=6, per_round=6, roc="6:3:1", out=str(tmp_path))
    with pytest.raises(UserError, match="no client can"):
        Experiment("exclusive", "tiny_text", run, task_config=SMALL_TASK_CONFIGS["tiny_text"]).run()
    rec, _ = Experiment("fedavg", "tiny_text", run, task_config=SMALL_TASK_CONFIGS["tiny_text"]).run()
    assert rec["run"]["tier_counts"] == {"0": 4, "1": 2, "2": 0}
    assert sorted(rec["run"]["client_tiers"].values()) == [0, 0, 0, 0, 1, 1]


def test_exclusive_refusal_is_a_one_line_exit_2(tmp_path, capsys):
    from fedbench.runners.cli.cli import main

    args = ["run", "--method", "exclusive", "--task", "tiny_text", "--roc", "6:3:1", "--clients", "6", "--rounds", "1",
            "--out", str(tmp_path)]
    assert main(args) == 2
    *phases, err = capsys.readouterr().err.strip().splitlines()  # the set-up phases' lines, then one error line
    assert err.startswith("fedbench: error: ") and "exclusive" in err
    assert [p.split(": ", 1)[1].split(" ...")[0] for p in phases] == ["loading data", "building the model"]


def test_dynamic_tiers_reach_the_full_tier(tmp_path):
    t = _tiers(6, "6:3:1", dynamic=True)
    assert {p.layers for p in t.reachable_profiles([1] * 6)} == {6, 9, 12}


def test_a_fixed_capacities_list_longer_than_the_clients_is_refused():
    """Client i gets budget i of a fixed --capacities list: budgets past the last client would
    go to no client (tiers with no client); refused when the spec is built (before anything
    is written) and by the tiers; with --dynamic every budget can be drawn, so it is kept."""
    from fedbench.runners.core.spec import build_spec

    with pytest.raises(UserError, match="lists 3 layer budgets for 2 clients: the last 1 would go to no client"):
        build_spec("fedra", "tiny_text", {"clients": 2, "per_round": 2, "capacities": [12, 6, 3]})
    assert build_spec("fedra", "tiny_text", {"clients": 2, "per_round": 2, "capacities": [12, 6, 3],
                                             "dynamic": True}).run.capacities == [12, 6, 3]
    assert build_spec("fedra", "tiny_text", {"clients": 3, "per_round": 2, "capacities": [12, 6, 3]})
    with pytest.raises(UserError, match="for 2 clients"):
        TierAssigner(2, 12, roc=None, capacities=[12, 6, 3], dynamic=False, tier_fractions=[0.5, 0.75, 1.0],
                     tier_ranks=[1, 4, 16], max_rank=16, seed=0)
