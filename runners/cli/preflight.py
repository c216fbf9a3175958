"""``fedbench run``'s checks before the imports: bad input ends in about the time of ``--help``.

Importing torch and transformers takes seconds; these checks need neither, so
:func:`preflight_run` makes them first: the method and the task (the keys the built-in
modules declare, read from their source by :func:`~fedbench.registry.declared_keys`, and
installed plugins' entry-point names), the ``--config`` file, the ``--set`` items, every run
field (types, ranges, the setting's grammar, ``--roc`` against the tiers) and the executor.
The method's and the task's fields (``--data-dir`` and ``--model`` among them: a tiny task
refuses any, with its own message) are checked by their config classes once they are
imported, still before anything loads (``runners/core/config.py: validate_run``), which
also repeats these checks: this module only moves the common errors earlier.
"""

from __future__ import annotations

from typing import Any

from fedbench.configs import flag_fields

def gather_configs(args) -> tuple[dict, dict, dict]:
    """run / method / task overrides from --config, flags and --set (later wins)."""
    from fedbench.config import SECTIONS, load_yaml_config, parse_overrides

    cfg: dict[str, dict[str, Any]] = {s: {} for s in SECTIONS}
    if args.config:
        for s, v in load_yaml_config(args.config).items():
            cfg[s].update(v)
    for section, f in flag_fields():
        value = getattr(args, f"{section}.{f.name}", None)
        if value is not None:
            cfg[section][f.name] = value
    for s, v in parse_overrides(args.set).items():
        cfg[s].update(v)
    return cfg["run"], cfg["method"], cfg["task"]


def preflight_sweep(args) -> None:
    """``fedbench sweep``'s checks before the imports (:func:`~fedbench.runners.core.sweep.check_preset_early`)."""
    from fedbench.runners.core.sweep import check_preset_early

    check_preset_early(args.preset)


def executor_keys() -> list[str]:
    """The executors the source declares (``--executor``'s choices, listed by ``run --help``)."""
    from fedbench.registry import declared_keys, loaded_keys

    declared = declared_keys("fedbench.runners.executors", "EXECUTORS")
    return sorted({*declared, *loaded_keys("fedbench.runners.executors.executor", "EXECUTORS")})


def preflight_run(args) -> None:
    """Raise the :class:`~fedbench.errors.UserError` of the first problem these checks find
    in ``fedbench run``'s arguments (the same line the full validation gives)."""
    from fedbench.config import build_config
    from fedbench.configs import RunConfig
    from fedbench.registry import check_declared, unknown_key
    from fedbench.runners.core.config import check_run

    check_declared("method", args.method)
    check_declared("task", args.task)
    run, _method_cfg, _task_cfg = gather_configs(args)
    run_cfg = build_config(RunConfig, run, "run")
    check_run(run_cfg)
    executors = executor_keys()  # read from the source once
    if run_cfg.executor not in executors:
        raise unknown_key("executor", run_cfg.executor, executors)


__all__ = ["executor_keys", "gather_configs", "preflight_run", "preflight_sweep"]
