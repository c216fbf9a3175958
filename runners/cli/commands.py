"""``fedbench run`` and ``fedbench sweep``: from the command line to records.

Both build every run's :class:`~fedbench.runners.core.spec.RunSpec` first (every config
validated, one line and exit 2 on the first problem, nothing trained), skip the runs whose
finished (``ok``) record exists, and run the rest with a progress bar.
"""

from __future__ import annotations

import importlib
import sys

from fedbench.errors import UserError, user_failure
from fedbench.outfiles import check_output
from fedbench.runners.outputs.callbacks import Callback
from fedbench.runners.cli.launch import execute, summary_line
from fedbench.runners.cli.preflight import gather_configs
from fedbench.runners.outputs.tracking import trackers_for


def load_callback(ref: str) -> Callback:
    """``module:Class`` -> an instance of that :class:`Callback` subclass (no arguments). User
    code that fails (any exception, or ``sys.exit``, reported and not obeyed) at import or in
    ``__init__`` is one line naming the callback (exit 2), before anything trains."""
    mod_name, _, cls_name = ref.partition(":")
    if not mod_name or not cls_name:
        raise UserError(f"bad --callback {ref!r}: expected MODULE:CLASS, e.g. mypkg.logging:Logger")
    try:
        obj = getattr(importlib.import_module(mod_name), cls_name)
    except ImportError as e:
        raise UserError(f"--callback {ref}: cannot import {mod_name!r} ({e})") from None
    except AttributeError:
        raise UserError(f"--callback {ref}: module {mod_name!r} has no {cls_name!r}") from None
    except (Exception, SystemExit) as e:  # noqa: BLE001 -- user code: reported, never obeyed
        raise UserError(f"--callback {ref}: importing {mod_name!r} failed: {user_failure(e)}") from None
    if not (isinstance(obj, type) and issubclass(obj, Callback)):
        raise UserError(f"--callback {ref}: {cls_name} is not a fedbench Callback subclass")
    try:
        return obj()
    except (Exception, SystemExit) as e:  # noqa: BLE001
        raise UserError(f"--callback {ref}: {cls_name}() failed: {user_failure(e)}") from None


def exit_status(rec: dict) -> int:
    return {"ok": 0, "failed": 1, "cancelled": 130}[rec["status"]]


def cmd_run(args) -> int:
    from fedbench.records import RecordError, prepare_out_dir, read_record_status
    from fedbench.runners.core.spec import build_spec

    run, method_cfg, task_cfg = gather_configs(args)
    spec = build_spec(args.method, args.task, run, method_cfg, task_cfg, profile=args.profile)
    callbacks = [load_callback(ref) for ref in args.callback]
    prepare_out_dir(spec.run.out)
    path = spec.record_path()
    check_output(path, spec.run.out)  # a folder, FIFO or link out where the record goes: one line, exit 2
    try:
        done = not args.force and read_record_status(path) == "ok"
    except RecordError as e:  # corrupt, another run's, or edited: not trusted, so run again
        print(f"fedbench: warning: record {e}; running it again", file=sys.stderr)
        done = False
    if done:
        print(f"{spec.method} on {spec.task}: done already ({path}); --force runs it again")
        return 0
    rec, path = execute(spec, not args.no_progress, callbacks)
    print(summary_line(rec, path))
    return exit_status(rec)


def cmd_sweep(args) -> int:
    """Load, expand and validate the whole preset (``runners/core/sweep.py``), then run what is not done."""
    from fedbench.records import prepare_out_dir
    from fedbench.runners.cli.sweeping import Parallel, run_sweep
    from fedbench.runners.core import sweep

    say = lambda line: print(line, file=sys.stderr, flush=True)  # noqa: E731 - the CLI's stderr
    runs = sweep.select(sweep.load_sweep(args.preset, out=args.out, say=say), args.only)
    for out in dict.fromkeys(r.spec.run.out for r in runs):
        prepare_out_dir(out, create=not args.dry_run)
    for r in runs:  # a folder, FIFO or link out where a record goes: found before the first run
        check_output(r.spec.record_path(), r.spec.run.out)
    for names in dict.fromkeys(tuple(r.spec.run.log) for r in runs):
        trackers_for(names)  # a tracker's missing package stops the sweep before its first run
    warn = lambda line: print(f"fedbench: warning: {line}", file=sys.stderr)  # noqa: E731
    parallel = None
    if args.workers is not None or args.address is not None:
        parallel = Parallel(args.workers, args.address, args.cpus_per_run, args.gpus_per_run, args.node_retries)
    return run_sweep(runs, progress=not args.no_progress, parallel=parallel, dry_run=args.dry_run, warn=warn,
                     timing_records=tuple(args.timing_records)).status


__all__ = ["cmd_run", "cmd_sweep", "gather_configs", "load_callback"]
