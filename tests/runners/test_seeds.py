"""Seeds and common random numbers: the run seed drives every random init (a tiny task's
"pretrained" backbone excepted), the same seed reproduces a record, and every method with
one seed sees the same clients and batches (paired comparisons)."""

import re
from pathlib import Path

import torch

from fedbench.runners.core.experiment import Experiment

from smoke import SMALL_TASK_CONFIGS

RUN = dict(rounds=2, clients=6, per_round=3)
TEXT = SMALL_TASK_CONFIGS["tiny_text"]


def _strip_times(rec):
    rec = {**rec, "run": dict(rec["run"]), "cost": dict(rec["cost"])}
    rec["run"].pop("created_at")
    rec["run"]["run_config"] = {k: v for k, v in rec["run"]["run_config"].items() if k != "out"}
    for k in list(rec["cost"]):
        if "seconds" in k or k == "rss_peak_gb":  # times and the process's measured RSS
            rec["cost"].pop(k)
    return rec


def test_seeds_change_lora_init_but_not_the_backbone():
    a, b = (Experiment("fedavg", "tiny_text", dict(RUN, seed=s), task_config=TEXT) for s in (0, 1))
    a.setup()
    b.setup()
    lora = [k for k in a.am.all_keys if "lora_A" in k]
    assert lora and not torch.equal(a.am.read(lora[:1])[lora[0]], b.am.read(lora[:1])[lora[0]])
    base = "bert.encoder.layer.0.attention.self.query.base_layer.weight"
    assert torch.equal(a.am.read([base])[base], b.am.read([base])[base])


def test_same_seed_gives_identical_records(tmp_path):
    recs = [Experiment("fedra", "tiny_text", dict(RUN, seed=3, capacities=[12, 6], out=str(tmp_path / str(i))),
                       task_config=TEXT).run()[0] for i in range(2)]
    assert _strip_times(recs[0]) == _strip_times(recs[1])


def test_methods_with_one_seed_see_the_same_clients_and_batches(tmp_path):
    first_batches = {}
    recs = {}
    for method in ("fedavg", "fed_hello_gd_uniform", "hetlora"):
        exp = Experiment(method, "tiny_text", dict(RUN, seed=5, roc="1:1:1", out=str(tmp_path)), task_config=TEXT)
        exp.setup()
        seen = []
        task_loss = exp.task.loss

        def spy(model, batch, seen=seen, task_loss=task_loss):
            seen.append(batch["input_ids"][:, :6].clone())
            return task_loss(model, batch)

        exp.task.loss = spy
        exp.setup = lambda: None
        recs[method], _ = exp.run()
        first_batches[method] = seen[0]
    sampled = {m: r["run"]["sampled_clients"] for m, r in recs.items()}
    assert len(set(map(str, sampled.values()))) == 1 and len(sampled["fedavg"]) == 2
    assert all(torch.equal(first_batches["fedavg"], b) for b in first_batches.values())


def test_runners_know_no_method_by_name():
    from fedbench.methods import METHODS

    keys = set(METHODS.keys()) | {a for e in METHODS.entries() for a in e.aliases}
    runners = Path(__file__).resolve().parents[2] / "runners"
    for path in runners.rglob("*.py"):  # every sub-package
        text = path.read_text()
        for key in keys:
            assert not re.search(rf"[\"']{re.escape(key)}[\"']", text), f"{path.name} names method {key!r}"
        assert "getattr(self.method" not in text and "getattr(m," not in text, path.name


def test_threads_default(monkeypatch):
    from fedbench.runners.core.environment import available_cores, resolve_threads

    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    assert resolve_threads(None, tiny=True) == 1 and resolve_threads(None, tiny=False) == available_cores()
    assert resolve_threads(3, tiny=True) == 3
    monkeypatch.setenv("OMP_NUM_THREADS", "2")
    assert resolve_threads(None, tiny=False) == 2
