"""The Python API: ``fedbench.run`` and ``fedbench.sweep``, what the CLI does, from a script
or a notebook.

>>> import fedbench
>>> rec = fedbench.run("fedavg", "tiny_text", rounds=2, clients=4, out="results")  # doctest: +SKIP
>>> rec["results"]["final"]  # doctest: +SKIP

A run's fields are keyword arguments (every field of
:class:`~fedbench.configs.RunConfig`: ``rounds``, ``roc``, ``seed``, ``lr``, ...); the method's
and the task's fields go in ``method_config`` / ``task_config``. Everything is validated
before anything loads (one :class:`~fedbench.errors.UserError` naming the field). As on the
command line, a run whose finished record exists is not run again (its record is
returned) unless ``force=True``.
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence


def run(method: str, task: str, *, method_config: Mapping[str, Any] | None = None,
        task_config: Mapping[str, Any] | None = None, callbacks: Sequence[Any] = (), progress: bool = False,
        force: bool = False, profile: str | None = None, **fields: Any) -> dict:
    """Run ``method`` on ``task`` and return its result record (a dict, the schema of
    :mod:`fedbench.schema`); the record is also written under ``out`` (default
    ``results``). ``callbacks``: :class:`~fedbench.runners.outputs.callbacks.Callback` objects (a
    logger, a tracker) that see every round; the built-in trackers and the saved model are
    run fields like any other: ``log=["tensorboard"]``, ``save_model=True``. ``profile``: a
    profile the task declares (``fedbench run --profile``, e.g. ledgar's ``"cpu"``), whose
    values fill the fields left unset. A finished record of the same run is returned as it is
    (``force``: run again); one that is corrupt or fails its integrity check is a warning
    (``UserWarning``) and the run is done again."""
    import warnings

    from fedbench.records import prepare_out_dir, read_record_file
    from fedbench.runners.cli.launch import execute
    from fedbench.runners.core.spec import build_spec
    from fedbench.runners.core.sweep import is_done

    spec = build_spec(method, task, fields, method_config, task_config, profile=profile)
    prepare_out_dir(spec.run.out)
    path = spec.record_path()
    # a record that is corrupt or fails its integrity check is a warning and the run is done again (as the CLI)
    if not force and path.is_file() and is_done(path, lambda line: warnings.warn(line, stacklevel=3)):
        return read_record_file(path)  # an older record in the current shape
    rec, _ = execute(spec, progress, list(callbacks))
    return rec


def sweep(preset: str, *, out: str | None = None, progress: bool = False, workers: int | None = None,
          address: str | None = None, quiet: bool = True) -> list[dict]:
    """Run every run of the sweep ``preset`` (a YAML file, as ``fedbench sweep``) that has
    no finished record, through the same loop as ``fedbench sweep`` (``workers`` /
    ``address``: as Ray tasks, as ``--workers`` / ``--address``); a corrupt record is a
    warning (``UserWarning``) and its run is done again. Returns the record of every run that has
    one, in preset order (a cancelled sweep: those written before it stopped). ``quiet``:
    no progress lines on stdout."""
    import warnings

    from fedbench.records import prepare_out_dir, read_record_file
    from fedbench.runners.cli.sweeping import Parallel, run_sweep
    from fedbench.runners.core.sweep import load_sweep

    runs = load_sweep(preset, out=out)
    for d in dict.fromkeys(r.spec.run.out for r in runs):
        prepare_out_dir(d)
    parallel = None if workers is None and address is None else Parallel(workers, address)
    run_sweep(runs, progress=progress, parallel=parallel, warn=lambda line: warnings.warn(line, stacklevel=3),
              say=(lambda line: None) if quiet else print)
    paths = [r.spec.record_path() for r in runs]
    return [read_record_file(p) for p in paths if p.is_file()]


__all__ = ["run", "sweep"]
