"""Failures after set-up: one line for the person, the traceback in a file for the debugger.

Once a run is set up, whatever goes wrong (a full disk while saving the model, a tracker
package that breaks, a user callback that raises or calls ``sys.exit``) ends the run with
its ``failed`` record; the one line on stderr is the record's error, which names the file
holding the traceback: ``<run_id>.traceback.txt`` beside the record (written through the
one safe writer). A failure of a callback's ``on_run_end`` after the record is written
leaves the record as it is and ends the command with :class:`AfterRecord` (exit 1).
``fedbench``'s top-level handler (:func:`fedbench.runners.cli.cli.main`) does the same for
any other unexpected error: one line, exit 1, the traceback in a file it names
(:func:`crash_file`). Exit statuses: 0 ok, 1 a failed run or an internal error, 2 bad input
(nothing trained), 130 interrupted.
"""

from __future__ import annotations

import os
import tempfile
import time
import traceback
from pathlib import Path

from fedbench.errors import UserError, user_failure

__all__ = ["AfterRecord", "crash_file", "describe", "traceback_path", "write_traceback"]


class AfterRecord(Exception):
    """User code failed after the run's record was written (the record stands); the
    message is the one line to print, naming the traceback file."""


def traceback_path(record_path: Path) -> Path:
    """``<run_id>.traceback.txt`` beside the record at ``record_path``."""
    return record_path.with_name(record_path.stem + ".traceback.txt")


def write_traceback(exc: BaseException, path: Path, root: str | os.PathLike | None = None) -> Path | None:
    """Write ``exc``'s traceback to ``path`` (inside ``root``); the path, or None when it
    cannot be written (the one line still says what failed)."""
    from fedbench.outfiles import write_text

    text = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
    try:
        return Path(write_text(path, text, root))
    except (OSError, UserError):
        return None


def describe(exc: BaseException, tb: Path | None, beside: bool = True) -> str:
    """The one line of a failure: what failed and where its traceback is (``beside``: the
    file's name only, as a record says it; the record's own line gives the folder)."""
    if tb is None:
        return user_failure(exc)
    return user_failure(exc) + (f" (traceback in {tb.name} beside the record)" if beside else f" (traceback in {tb})")


def crash_file(exc: BaseException) -> Path | None:
    """The traceback of an error no record holds, in the system's temp folder."""
    root = Path(tempfile.gettempdir())
    return write_traceback(exc, root / f"fedbench-{time.strftime('%Y%m%dT%H%M%S')}-{os.getpid()}.traceback.txt",
                           root)
