"""The measurement scripts under benchmarks/ still run against the current API (their
figures are printed, not asserted, except the savings that define the method)."""

import importlib.util
from pathlib import Path

from fedbench.runners.experiment import Experiment
from smoke import SMALL_TASK_CONFIGS

BENCH = Path(__file__).resolve().parents[1] / "benchmarks"


def _load(name):
    spec = importlib.util.spec_from_file_location(f"_bench_{name}", BENCH / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_savings_client_step_measures_fedra_sub_models(tmp_path):
    savings = _load("savings")
    exp = Experiment("fedra", "tiny_vision", dict(max_steps=1, out=str(tmp_path)),
                     task_config=SMALL_TASK_CONFIGS["tiny_vision"])
    exp.setup()
    full = savings.client_step(exp, range(12), blocks=range(12))
    half = savings.client_step(exp, range(6), blocks=range(6))
    flops = lambda c: c.flops_forward_step + c.flops_backward_step  # noqa: E731
    assert 0.4 < flops(half) / flops(full) < 0.6  # 6 of 12 blocks: about half the step
