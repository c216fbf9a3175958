"""Personalised (local) evaluation scores the clients that trained: a client never sampled
would be scored with a fresh model, so the record keeps its count and score apart."""

from fedbench.records import validate_record
from fedbench.runners.core.evaluation import split_trained
from fedbench.runners.core.experiment import Experiment

from smoke import SMALL_TASK_CONFIGS


def test_split_trained():
    scores = {0: 0.5, 1: 0.25, 2: 0.0, 3: 1.0}
    assert split_trained(scores, {0, 3}) == ({0: 0.5, 3: 1.0}, {1: 0.25, 2: 0.0})
    assert split_trained(scores, set()) == (scores, {})  # before round 1: the untrained model, every client


def test_never_sampled_clients_are_kept_out_of_the_headline(tmp_path):
    # 4 clients, 1 sampled per round, 2 rounds: at most 2 clients ever train
    run = dict(rounds=2, clients=4, per_round=1, seed=0, out=str(tmp_path), measure_flops=False)
    rec, _ = Experiment("fedsa_lora", "tiny_text", run, task_config=SMALL_TASK_CONFIGS["tiny_text"]).run()
    assert rec["status"] == "ok", rec["error"]
    validate_record(rec)
    trained = sorted({c for rnd in rec["run"]["sampled_clients"] for c in rnd})
    res = rec["results"]
    assert sorted(int(c) for c in res["per_client"]) == trained
    untrained = res["untrained_clients"]
    assert untrained["count"] == 4 - len(trained)
    assert sorted(int(c) for c in untrained["per_client"]) == sorted(set(range(4)) - set(trained))
    scores = [res["per_client"][str(c)] for c in trained]
    assert res["final"] == sum(scores) / len(scores)
    assert res["local"]["min"] == min(scores) == res["extra"]["worst_client"]
