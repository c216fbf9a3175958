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


def task_config_for(method: str, task: str) -> dict | None:
    """The small config of ``task`` on which ``method`` can run: the plain one, or for a
    method that needs architectures (``needs_archs``) or declared parts (``needs_parts``) the
    first variant offering them; None if there is none."""
    from fedbench.config import build_config
    from fedbench.methods import METHODS
    from fedbench.tasks import TASKS

    cls, task_cls = METHODS.get(method), TASKS.get(task)
    for variant in ([{}] if not (cls.needs_archs or cls.needs_parts) else []) + ARCH_TASK_CONFIGS.get(task, []):
        cfg = {**SMALL_TASK_CONFIGS[task], **variant}
        if all(a in task_cls(build_config(task_cls.config_cls, cfg, "task")).archs() for a in cls.needs_archs):
            return cfg
    return None


def shared_data(name: str) -> Path:
    """``shared/data/<name>`` beside the nearest ancestor that has it (checkouts and worktrees
    sit at different depths); a path that does not exist when none has it."""
    here = Path(__file__).resolve()
    return next((p / "shared" / "data" / name for p in here.parents if (p / "shared" / "data" / name).is_dir()),
                here.parents[2] / "shared" / "data" / name)


def preset_here(path: Path, folder: Path) -> Path:
    """``path``, or where the folder its ``task_config.data_dir`` names (``../shared/data/...``,
    relative to the repo root a test runs from) is missing here, a copy of it in ``folder`` that
    names an empty folder instead. ``data_dir`` is a runtime field (no run id hashes it), so the
    copy's runs have the preset's run ids: a test of what a preset's runs are (not of their
    data) runs in a checkout without ``../shared``."""
    import yaml

    from fedbench.outfiles import write_text
    from fedbench.runners.core.sweep import load_preset

    preset = load_preset(path)
    data_dir = (preset.get("task_config") or {}).get("data_dir")
    if data_dir is None or Path(data_dir).expanduser().is_dir():
        return path
    (folder / "stand-in-data").mkdir(parents=True, exist_ok=True)
    preset["task_config"]["data_dir"] = str(folder / "stand-in-data")
    return write_text(folder / path.name, yaml.safe_dump(preset, sort_keys=False))


def one_per_family(cases, fast, *marks) -> list:
    """``cases`` as pytest params: those in ``fast`` plain, the others marked ``slow`` (and
    ``marks``). A check repeated for every method of a family runs on one method per family in
    the default test run, and on every method with ``-m slow`` (CI runs both)."""
    return [c if c in fast else pytest.param(*(c if isinstance(c, tuple) else (c,)), marks=[pytest.mark.slow, *marks])
            for c in cases]
