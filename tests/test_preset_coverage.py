"""The FedLoRA presets train every client at least once: a personalised method scores each
client's own model, and a client never sampled would be scored with a fresh one.

Rule (stated in each preset): the rounds (``run.rounds``, or a ``resources`` entry's) are at least the first round by which every
client has been sampled, for every seed and federation (clients, per_round) of the preset.
"""

from pathlib import Path

import pytest
import yaml

from fedbench.runners.core.experiment import Experiment
from fedbench.runners.core.seeds import rng_for
from smoke import SMALL_TASK_CONFIGS

BENCH = Path(__file__).resolve().parents[1] / "benchmarks"


def sampled(seed: int, rnd: int, n_clients: int, per_round: int) -> list[int]:
    """Round ``rnd``'s sampled clients as the round loop draws them (runners/core/rounds.py)."""
    return sorted(int(c) for c in rng_for(seed, "sample", rnd).choice(n_clients, size=per_round, replace=False))


def rounds_to_sample_all(seed: int, n_clients: int, per_round: int, max_rounds: int) -> int | None:
    """The first round by which every client has been sampled, None if not within max_rounds."""
    seen: set[int] = set()
    for rnd in range(1, max_rounds + 1):
        seen.update(sampled(seed, rnd, n_clients, per_round))
        if len(seen) == n_clients:
            return rnd
    return None


def test_sampled_matches_the_round_loop(tmp_path):
    run = dict(rounds=3, clients=5, per_round=2, seed=7, out=str(tmp_path), measure_flops=False)
    rec, _ = Experiment("fedavg", "tiny_text", run, task_config=SMALL_TASK_CONFIGS["tiny_text"]).run()
    assert rec["run"]["sampled_clients"] == [sampled(7, r, 5, 2) for r in (1, 2, 3)]


def test_rounds_to_sample_all():
    assert rounds_to_sample_all(0, 10, 10, 5) == 1  # everyone every round
    assert rounds_to_sample_all(0, 50, 1, 10) is None  # 10 rounds of one client cannot cover 50


@pytest.mark.parametrize("preset", sorted(p.name for p in BENCH.glob("fedlora_*.yaml")))
def test_fedlora_presets_sample_every_client(preset):
    spec = yaml.safe_load((BENCH / preset).read_text())
    for res in spec["resources"]:
        rounds = res.get("rounds", spec["run"].get("rounds"))
        for seed in spec["seeds"]:
            got = rounds_to_sample_all(seed, res["clients"], res["per_round"], rounds)
            assert got is not None, f"{preset}: {res} seed {seed}: some client never trains in {rounds} rounds"
