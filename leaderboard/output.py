"""Writing the leaderboard's files: a bad ``--out`` (a file, a read-only folder, a name
taken by a folder, a device, a FIFO or a symlink out of the folder) is a one-line
:class:`~fedbench.errors.UserError`, never a traceback and never a damaged file: every
file goes through the one safe writer, :mod:`fedbench.outfiles`. The commands check
``--out`` itself first with :func:`fedbench.records.prepare_out_dir`."""

from __future__ import annotations

import re
from pathlib import Path
from typing import BinaryIO, Callable

from fedbench import outfiles
from fedbench.errors import UserError
from fedbench.records import one_line

__all__ = ["file_stem", "remove_file", "save_png", "write_file", "write_text"]


def file_stem(setting: str) -> str:
    """A setting as a file name: characters other than ``[A-Za-z0-9_.+-]`` become ``_``
    (``20/1.0`` -> ``20_1.0``)."""
    return re.sub(r"[^A-Za-z0-9_.+\-]", "_", setting)


def write_file(path: Path, fill: Callable[[BinaryIO], object], root: Path | None = None) -> Path:
    """Write ``path`` (inside folder ``root``, by default its own) atomically with
    ``fill(binary file)`` (:func:`fedbench.outfiles.write_with`); an OSError becomes a
    one-line UserError naming the path."""
    try:
        return outfiles.write_with(path, fill, root)
    except OSError as err:
        raise UserError(f"cannot write {one_line(str(path))}: {err.strerror or err}") from None


def save_png(plt, fig, path: Path, root: Path | None = None) -> Path:
    """Lay out matplotlib figure ``fig``, write it as a PNG through :func:`write_file` (no
    software stamp, so a redraw of the same data gives the same bytes) and close it."""
    try:
        fig.tight_layout()
        return write_file(path, lambda fh: fig.savefig(fh, format="png", dpi=110, bbox_inches="tight",
                                                       metadata={"Software": None}), root)
    finally:
        plt.close(fig)


def write_text(path: Path, text: str, root: Path | None = None) -> Path:
    """Write ``text`` to ``path`` atomically (see :func:`write_file`)."""
    data = text.encode("utf-8")
    return write_file(path, lambda fh: fh.write(data), root)


def remove_file(path: Path, root: Path | None = None) -> None:
    """Remove the regular file ``path`` (an older plot) if there is one; a device, FIFO or
    link out of ``root`` is refused like a write."""
    target = outfiles.check_output(path, root)
    try:
        target.unlink(missing_ok=True)
    except OSError as err:
        raise UserError(f"cannot remove {one_line(str(path))}: {err.strerror or err}") from None
