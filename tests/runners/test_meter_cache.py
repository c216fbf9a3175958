"""The meter cache is exact: reusing a measured step's figures for the same model shape
gives the record the same FLOP and memory figures as measuring every client-round."""

import pytest

from fedbench.runners.executors import train

from fedbench.runners.executors import selection, worker

from smoke import SMALL_TASK_CONFIGS
from helpers import run_ok


class _NeverHit(dict):
    """A figures dict that never holds a key: every client-round is measured."""

    def __contains__(self, key):
        return False


class _MeasureEvery(train.MeterCache):
    def __init__(self):
        super().__init__(figures=_NeverHit())


def _run(tmp_path, method, run_extra):
    run = {"rounds": 2, "clients": 6, "per_round": 4, "max_steps": 2, "out": str(tmp_path), **run_extra}
    # 6 blocks, not 12: the cache's exactness does not depend on the depth, and every measurement costs half
    task = {**SMALL_TASK_CONFIGS["tiny_text"], "depth": 6}
    return run_ok(method, "tiny_text", run, task_config=task)[0]["cost"]


@pytest.mark.parametrize("method, run_extra", [
    ("fedavg", {}),
    ("fedra", {"roc": "1:1:1"}),  # sub-models of several depths
    ("hetlora", {"roc": "1:1:1"}),  # rank adapters of several ranks
])
def test_reused_figures_equal_measured_figures(tmp_path, monkeypatch, method, run_extra):
    cached = _run(tmp_path / "cached", method, run_extra)
    assert cached["meter_reused"] > 0  # the cache was used at all
    monkeypatch.setattr(worker, "MeterCache", _MeasureEvery)
    every = _run(tmp_path / "every", method, run_extra)
    assert every["meter_reused"] == 0
    assert every["meter_measurements"] == cached["meter_measurements"] + cached["meter_reused"]
    for key in ("tflops_per_step", "accounted_mem_gb", "tflops_total", "peak_mem_gb"):
        assert every[key] == cached[key], key


class _PassesNeverReused(dict):
    """A selection-pass cache that is never read: every pass is counted."""

    def get(self, key, default=None):
        return default


class _CountEveryPass(train.MeterCache):
    def __init__(self):
        super().__init__(passes=_PassesNeverReused())


def test_reused_selection_passes_give_the_counted_flops(tmp_path, monkeypatch):
    """LoRA-A2's clients select their ranks from gradients on their own data (``client_select``):
    a selection pass of a signature seen before reuses its FLOPs, and the run's FLOPs are those
    of counting every pass."""
    counted = []
    real_count = selection.count_flops
    monkeypatch.setattr(selection, "count_flops", lambda: counted.append(1) or real_count())
    cached = _run(tmp_path / "cached", "lora_a2", {"roc": "1:1:1"})
    n_cached = len(counted)
    monkeypatch.setattr(worker, "MeterCache", _CountEveryPass)
    every = _run(tmp_path / "every", "lora_a2", {"roc": "1:1:1"})
    assert 0 < n_cached < len(counted) - n_cached  # the cache was used, and every pass counted without it
    for key in ("tflops_per_step", "tflops_total"):
        assert every[key] == cached[key], key
