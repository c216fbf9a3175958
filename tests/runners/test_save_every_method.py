"""``--save-model`` works for every registered method (a run that ends ok is recorded ok
and its files are where the record says): FedSA-LoRA, whose B factors and head are
private, once failed after training. Methods whose evaluation is per client (private
heads or factors) save their shared tensors to the global file and each client's part
to its own file. Default run: one method per kind of saving; ``-m slow``: every method."""

from __future__ import annotations

from pathlib import Path

import pytest

from fedbench.config import build_config
from fedbench.methods import METHODS
from fedbench.runners.core.experiment import Experiment
from fedbench.tasks import TASKS

from smoke import ARCH_TASK_CONFIGS, SMALL_TASK_CONFIGS, one_per_family


def _task_for(method: str) -> tuple[str, dict]:
    needs = METHODS.get(method).needs_archs
    for task in ("tiny_text", "tiny_vision"):
        if TASKS.get(task).kind not in METHODS.get(method).task_kinds:
            continue
        task_cls = TASKS.get(task)
        for variant in ([{}] if not needs else []) + ARCH_TASK_CONFIGS.get(task, []):
            cfg = {**SMALL_TASK_CONFIGS[task], **variant}
            if all(a in task_cls(build_config(task_cls.config_cls, cfg, "task")).archs() for a in needs):
                return task, cfg
    raise AssertionError(f"no tiny task runs {method}")


@pytest.mark.parametrize("method", one_per_family(METHODS.keys(), {"fedsa_lora", "fedavg", "fedlora", "depthfl"}))
def test_save_model_for_every_registered_method(method, tmp_path):
    task, cfg = _task_for(method)
    rec, path = Experiment(method, task, {"rounds": 1, "clients": 2, "out": str(tmp_path), "save_model": True},
                           task_config=cfg).run()
    assert rec["status"] == "ok", rec["error"]
    saved = rec["run"]["saved_model"]
    files = [saved["adapter"], saved["global"], *(saved["private"] or {}).values()]
    assert any(files), saved
    for name in filter(None, files):
        assert (Path(path).parent / name).exists(), name
    assert not list(Path(path).parent.glob(".*.tmp"))  # no temp file or folder left
