"""Whole-run checks: every config of one run built and validated before anything loads.

The configs themselves are typed dataclasses: :class:`~fedbench.configs.RunConfig`, the
task's and the method's (each validates its own fields); :func:`validate_run` adds what
needs several of them (a method and the kind of task, --roc against the tier fractions).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping

from fedbench.config import FieldError, build_config, check
from fedbench.configs import RunConfig
from fedbench.errors import UserError


# ------------------------------------------------------------------- whole-run checks
def _looks_like_path(s: str) -> bool:
    return s.startswith(("/", "./", "../", "~")) or s in (".", "..") or "\\" in s


def check_task_config(task_key: str, cfg: Any) -> None:
    """Paths every task config may name must exist on this machine (``TaskConfig`` range-checks
    its own fields when it is built; this looks at the filesystem)."""
    if cfg.data_dir is not None:
        d = Path(str(cfg.data_dir)).expanduser()
        check(cfg, "data_dir", d.is_dir(), "no such directory" if not d.exists() else "not a directory")
    if cfg.model is not None and _looks_like_path(str(cfg.model)):
        check(cfg, "model", Path(str(cfg.model)).expanduser().exists(),
              "no such file or directory (a local model path must exist)")


def _section(fn, section: str, *args) -> None:
    """Run a check that raises a bare FieldError and prefix the field with its section."""
    try:
        fn(*args)
    except FieldError as e:
        raise FieldError(f"{section}.{e.name}", e.value, e.allowed) from None


def validate_run(method: str, task: str, run: Mapping[str, Any] | None, method_config: Mapping[str, Any] | None,
                 task_config: Mapping[str, Any] | None) -> tuple[str, str, RunConfig, Any, Any]:
    """Build and check every config of one run before anything is loaded or built.

    Returns ``(method_key, task_key, run_cfg, method_cfg, task_cfg)``; raises
    :class:`~fedbench.errors.UserError` (one line naming the field, the value and what is
    allowed) on the first problem.
    """
    from fedbench.methods import METHODS
    from fedbench.tasks import TASKS

    method_key, task_key = METHODS.resolve(method), TASKS.resolve(task)
    method_cls, task_cls = METHODS.get(method_key), TASKS.get(task_key)
    run_cfg = build_config(RunConfig, run or {}, "run")
    method_cfg = build_config(method_cls.config_cls, method_config or {}, "method")
    task_cfg = build_config(task_cls.config_cls, task_config or {}, "task")
    _section(check_task_config, "task", task_key, task_cfg)
    kind = task_cls.kind
    if kind is not None and kind not in method_cls.task_kinds:
        raise UserError(f"method {method_key!r} does not support {kind} tasks like {task_key!r}")
    check_run(run_cfg)
    if run_cfg.devices:  # parsed whole before anything is written; every named device class needs a
        # throughput at the run's precision (plan refuses too)
        from fedbench.runners.budget.devices import load_catalog, parse_devices

        catalog = load_catalog(run_cfg.device_catalog)
        parse_devices(run_cfg.devices, 1, catalog, run_cfg.seed)  # its grammar, classes and shares
        for name in dict.fromkeys(s.split(":", 1)[0].strip() for s in str(run_cfg.devices).split(",") if s.strip()):
            catalog[name].rate(run_cfg.precision)
    return method_key, task_key, run_cfg, method_cfg, task_cfg


def check_run(run_cfg: RunConfig) -> None:
    """What needs several run fields: the setting's grammar, ``--roc`` against the tier
    fractions and ranks. Imports no torch (``fedbench run`` checks it before the imports)."""
    from fedbench.configs import parse_roc
    from fedbench.tasks.setting import parse_setting

    parse_setting(run_cfg.setting)
    if run_cfg.roc:
        fr = parse_roc(str(run_cfg.roc))
        if len(fr) != len(run_cfg.tier_fractions):
            raise UserError(f"--roc {run_cfg.roc!r} has {len(fr)} tiers but run.tier_fractions has "
                            f"{len(run_cfg.tier_fractions)} ({','.join(map(str, run_cfg.tier_fractions))}); "
                            f"set run.tier_fractions to match")
        if run_cfg.tier_ranks is not None and len(run_cfg.tier_ranks) != len(fr):
            raise UserError(f"--roc {run_cfg.roc!r} has {len(fr)} tiers but run.tier_ranks lists "
                            f"{len(run_cfg.tier_ranks)} ranks ({','.join(map(str, run_cfg.tier_ranks))}); "
                            f"give one rank per tier")
