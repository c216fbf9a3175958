"""--save-model: the global adapter in peft's format, reloaded through peft, scores what the record says."""

import json

import numpy as np
import torch
from safetensors.torch import load_file

import fedbench
from fedbench.records import validate_record
from fedbench.runners.core.experiment import Experiment
from fedbench.runners.outputs.saving import split_global
from fedbench.tasks.base import subset
from fedbench.tasks.tiny import TinyText, TinyTextConfig

from smoke import SMALL_TASK_CONFIGS
from spy import spying


def test_split_global_puts_lora_and_head_in_the_adapter_and_the_rest_beside():
    a, b, h, x, w = (torch.full((1,), float(i)) for i in range(5))
    tensors = {"l.lora_A.weight": a, "l.lora_B.weight": b, "head.weight": h, "fedbench_extra.exit.weight": x,
               "l.base_layer.weight": w}
    adapter, rest = split_global(tensors, {"l.lora_A.weight", "l.lora_B.weight"}, {"head.weight"})
    assert adapter == {"l.lora_A.weight": a, "l.lora_B.weight": b, "head.weight": h}
    assert rest == {"fedbench_extra.exit.weight": x, "l.base_layer.weight": w}


def test_saved_adapter_reloads_through_peft_and_reproduces_the_final_score(tmp_path):
    from peft import PeftModel

    tc = {"n_train": 300, "n_test": 100}
    rec, path = Experiment("fedavg", "tiny_text", {"rounds": 3, "clients": 3, "per_round": 3, "out": str(tmp_path),
                                                   "save_model": True}, task_config=tc).run()
    assert rec["status"] == "ok"
    validate_record(json.loads(path.read_text()), strict=True)
    saved = rec["run"]["saved_model"]
    assert saved == {"adapter": f"{rec['run']['run_id']}.adapter", "global": None, "private": None}
    folder = path.parent / saved["adapter"]
    assert json.loads((folder / "adapter_config.json").read_text())["r"] == rec["run"]["method_config"]["lora_r"]

    task = TinyText(TinyTextConfig(**tc))
    data = task.load()
    held = set(rec["run"]["holdout_indices"])
    test = subset(data.test, np.array([i for i in range(len(data.test)) if i not in held]))
    base = task.build_model(data, None).model
    untuned = task.evaluate(base.eval(), test, torch.device("cpu")).value
    model = PeftModel.from_pretrained(base, str(folder)).eval()
    score = task.evaluate(model, test, torch.device("cpu")).value
    assert score == rec["results"]["final"] and score != untuned


def test_personalised_run_saves_the_global_part_and_every_clients_private_part(tmp_path):
    with spying() as spy:
        rec = fedbench.run("lg_fedavg", "tiny_vision", executor="spy", rounds=2, clients=4, per_round=2,
                           save_model=True, out=str(tmp_path),
                           task_config={**SMALL_TASK_CONFIGS["tiny_vision"], "model": "cnn"})
        results = list(spy.results)
    assert rec["status"] == "ok"
    folder = tmp_path / "tiny_vision" / "lg_fedavg"
    run_id = rec["run"]["run_id"]
    saved = rec["run"]["saved_model"]
    assert saved["adapter"] is None  # the CNNs carry no LoRA: the shared classifier is the global part
    assert sorted(load_file(str(folder / saved["global"]))) == ["head.bias", "head.weight"]
    assert saved["private"] == {str(c): f"{run_id}.private/client_{c}.safetensors" for c in range(4)}
    last = {r.client: r.private for r in results}  # what each client kept after its last round
    assert last  # some clients trained
    for c, private in last.items():
        got = load_file(str(folder / saved["private"][str(c)]))
        assert sorted(got) == sorted(private) and all(torch.equal(got[k], private[k].cpu()) for k in got)


def test_no_model_is_saved_unless_asked(tmp_path):
    run = {"rounds": 1, "clients": 2, "per_round": 2, "out": str(tmp_path), "executor": "stub"}  # bookkeeping
    rec, path = Experiment("fedavg", "tiny_text", run, task_config=SMALL_TASK_CONFIGS["tiny_text"]).run()
    assert rec["run"]["saved_model"] is None
    assert sorted(p.name for p in path.parent.iterdir()) == [path.name]


def test_a_failed_run_saves_nothing(tmp_path, monkeypatch):
    def nan_loss(self, model, batch):
        logits = self.forward(model, batch)
        return logits.sum() * float("nan"), logits

    monkeypatch.setattr(TinyText, "loss", nan_loss)
    rec, path = Experiment("fedavg", "tiny_text", {"rounds": 1, "clients": 2, "per_round": 2, "out": str(tmp_path),
                                                   "save_model": True},
                           task_config=SMALL_TASK_CONFIGS["tiny_text"]).run()
    assert rec["status"] == "failed" and rec["run"]["saved_model"] is None
    assert not list(path.parent.glob("*.adapter")) and not list(path.parent.glob("*.safetensors"))


def test_only_base_weights_the_evaluation_changes_are_saved_beside_the_adapter(tmp_path):
    run = {"rounds": 1, "clients": 2, "per_round": 2, "roc": "1:1:1", "out": str(tmp_path), "save_model": True}
    # HETLoRA carries the pretrained base weights in its state unchanged; FlexLoRA evaluates W0 + dW
    het, _ = Experiment("hetlora", "tiny_text", run, task_config=SMALL_TASK_CONFIGS["tiny_text"]).run()
    assert het["run"]["saved_model"]["global"] is None
    flex, path = Experiment("flexlora", "tiny_text", run, task_config=SMALL_TASK_CONFIGS["tiny_text"]).run()
    merged = load_file(str(path.parent / flex["run"]["saved_model"]["global"]))
    base = TinyText(TinyTextConfig(**SMALL_TASK_CONFIGS["tiny_text"]))
    pretrained = dict(base.build_model(base.load(), None).model.named_parameters())
    assert merged and all(k.endswith("base_layer.weight") for k in merged)
    assert all(not torch.equal(t, pretrained[k.replace(".base_layer", "")]) for k, t in merged.items())
