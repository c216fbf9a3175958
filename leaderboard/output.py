"""Writing the leaderboard's files: a bad ``--out`` (a file, a read-only folder, a name
taken by a folder) is a one-line :class:`~fedbench.errors.UserError`, never a traceback.
The commands check ``--out`` itself first with :func:`fedbench.records.prepare_out_dir`."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Callable

from fedbench.errors import UserError
from fedbench.records import atomic_write_text, one_line

__all__ = ["file_stem", "write_file", "write_text"]


def file_stem(setting: str) -> str:
    """A setting as a file name: characters other than ``[A-Za-z0-9_.+-]`` become ``_``
    (``20/1.0`` -> ``20_1.0``)."""
    return re.sub(r"[^A-Za-z0-9_.+\-]", "_", setting)



def write_file(path: Path, write: Callable[[Path], object]) -> Path:
    """Call ``write(path)`` after creating ``path``'s folder; an OSError becomes a one-line
    UserError naming the path."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        write(path)
    except OSError as err:
        raise UserError(f"cannot write {one_line(str(path))}: {err.strerror or err}") from None
    return path


def write_text(path: Path, text: str) -> Path:
    """Write ``text`` to ``path`` atomically (see :func:`write_file`)."""
    return write_file(path, lambda p: atomic_write_text(p, text))
