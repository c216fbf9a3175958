"""Small versions of the tiny tasks for smoke runs (seconds on 2 CPU cores)."""

from pathlib import Path

import pytest

SMALL_TASK_CONFIGS = {
    "tiny_vision": {"n_train_per_domain": 24, "n_test_per_domain": 8},
    "tiny_text": {"n_train": 160, "n_test": 48},
    "tiny_lm": {"n_train": 96, "n_test": 24},
}

#: task-config variants a tiny task offers for methods that need particular
#: architectures (``Method.needs_archs``) or a model that declares its parts
#: (``Method.needs_parts``), merged over SMALL_TASK_CONFIGS
ARCH_TASK_CONFIGS = {
    "tiny_vision": [{"model": "cnn"}],
}


def shared_data(name: str) -> Path:
    """``shared/data/<name>`` beside the nearest ancestor that has it (checkouts and worktrees
    sit at different depths); a path that does not exist when none has it."""
    here = Path(__file__).resolve()
    return next((p / "shared" / "data" / name for p in here.parents if (p / "shared" / "data" / name).is_dir()),
                here.parents[2] / "shared" / "data" / name)


def one_per_family(cases, fast, *marks) -> list:
    """``cases`` as pytest params: those in ``fast`` plain, the others marked ``slow`` (and
    ``marks``). A check repeated for every method of a family runs on one method per family in
    the default test run, and on every method with ``-m slow`` (CI runs both)."""
    return [c if c in fast else pytest.param(*(c if isinstance(c, tuple) else (c,)), marks=[pytest.mark.slow, *marks])
            for c in cases]
