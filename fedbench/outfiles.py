"""The one safe output writer: every file fedbench writes goes through here.

A write names the file and the folder it must stay in (``root``; by default the file's own
folder). Before anything is written the target is checked (:func:`check_output`):

* it must lie inside ``root``, lexically and once symlinks are resolved: a path whose
  folders or whose own symlink lead out of ``root`` is refused;
* an existing target must be a regular file (a symlink to one inside ``root`` is followed
  and the file it names is replaced); a directory, device, FIFO, socket or a symlink to any
  of these is refused and left as it is;
* a file name longer than the file system allows (255 bytes, 4095 for the whole path) is
  refused with one line instead of an ``OSError`` traceback.

Every refusal is an :class:`OutputError` (a :class:`~fedbench.errors.UserError`: one line,
exit 2). The write itself is atomic: a hidden temp file beside the target, fsync, rename
over it, fsync of the folder; after a crash the target is the old file or the complete
new one, and a failed write (a full disk) removes the temp file and leaves the old one.

Only the standard library is imported here: the leaderboard imports this module.
"""

from __future__ import annotations

import os
import shutil
import stat
import tempfile
from pathlib import Path
from typing import BinaryIO, Callable

from fedbench.errors import UserError

__all__ = ["NAME_MAX", "PATH_MAX", "OutputError", "check_name", "check_output", "new_temp_dir", "replace_dir",
           "write_bytes", "write_text", "write_with"]

#: the longest file name and path the writer attempts (Linux's NAME_MAX and PATH_MAX - 1)
NAME_MAX = 255
PATH_MAX = 4095


class OutputError(UserError):
    """An output path the writer refuses to write (one line naming the path and why)."""


def _show(path: str | os.PathLike) -> str:
    text = str(path)
    if len(text) <= 200 and text.isprintable():  # the common case, cheap: a sweep checks every record path
        return text
    text = "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)
    return text if len(text) <= 200 else text[:120] + "..." + text[-60:]


def _kind(mode: int) -> str:
    return ("a directory" if stat.S_ISDIR(mode) else "a device" if stat.S_ISCHR(mode) or stat.S_ISBLK(mode)
            else "a FIFO" if stat.S_ISFIFO(mode) else "a socket" if stat.S_ISSOCK(mode) else "not a regular file")


def _inside(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip(os.sep) + os.sep)


def _stat(path: Path, shown: str, follow: bool) -> os.stat_result | None:
    """``os.stat`` (``follow``) or ``os.lstat`` of ``path``; None if nothing is there; any other
    failure an :class:`OutputError` naming the output ``shown``."""
    try:
        return os.stat(path) if follow else os.lstat(path)
    except FileNotFoundError:
        return None
    except OSError as err:
        raise OutputError(f"cannot write {shown}: {err.strerror or err}") from None


def check_name(path: str | os.PathLike) -> None:
    """:class:`OutputError` for a path the file system cannot hold: a name (any part of the
    path) over :data:`NAME_MAX` bytes, the whole over :data:`PATH_MAX`, a NUL character. Also
    for folders fedbench creates (:func:`~fedbench.records.prepare_out_dir`)."""
    text = str(path)
    if "\0" in text:
        raise OutputError(f"cannot write {_show(path)}: a NUL character in the path")
    if any(len(os.fsencode(part)) > NAME_MAX for part in Path(text).parts) \
            or len(os.fsencode(os.path.abspath(text))) > PATH_MAX:
        raise OutputError(f"cannot write {_show(path)}: file name too long (at most {NAME_MAX} bytes a name, "
                          f"{PATH_MAX} a path)")


def check_output(path: str | os.PathLike, root: str | os.PathLike | None = None, kind: str = "file") -> Path:
    """The path to write for output ``path`` inside folder ``root`` (``kind``: ``"file"`` or
    ``"dir"``); :class:`OutputError` for anything the module docstring refuses. A symlink to
    a regular file inside ``root`` gives the file it names; otherwise ``path`` itself."""
    path = Path(path)
    root = Path(root) if root is not None else path.parent
    shown = _show(path)
    check_name(path)
    if not _inside(os.path.abspath(path), os.path.abspath(root)) or os.path.abspath(path) == os.path.abspath(root):
        raise OutputError(f"cannot write {shown}: not inside the output folder {_show(root)}")
    real_root = os.path.realpath(root)
    if not _inside(os.path.realpath(path.parent), real_root):
        raise OutputError(f"cannot write {shown}: its folder leads out of the output folder {_show(root)} "
                          f"(a symlink)")
    st = _stat(path, shown, follow=False)
    if st is None:
        return path
    target = path
    if stat.S_ISLNK(st.st_mode):
        real = os.path.realpath(path)
        if not _inside(real, real_root) or real == real_root:
            raise OutputError(f"cannot write {shown}: a symlink out of the output folder {_show(root)} "
                              f"(to {_show(real)}); not replaced")
        if kind == "dir":
            raise OutputError(f"cannot write {shown}: a symlink where a folder goes; not replaced")
        target = Path(real)
        st = _stat(target, shown, follow=True)
        if st is None:
            return target
    want_dir = kind == "dir"
    if want_dir and stat.S_ISDIR(st.st_mode) or not want_dir and stat.S_ISREG(st.st_mode):
        return target
    what = "a folder" if want_dir else "a regular file"
    raise OutputError(f"cannot write {shown}: it is {_kind(st.st_mode)}, not {what}; left as it is")


def _sync_folder(folder: Path) -> None:
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:  # a platform without directory descriptors
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def _rename(tmp: str, target: Path) -> None:
    """The atomic step (one place, so a test can make it fail like a full disk)."""
    os.replace(tmp, target)


def _make_parent(target: Path, root: Path) -> None:
    target.parent.mkdir(parents=True, exist_ok=True)
    if not _inside(os.path.realpath(target.parent), os.path.realpath(root)):  # a folder swapped for a link meanwhile
        raise OutputError(f"cannot write {_show(target)}: its folder leads out of the output folder {_show(root)}")


def write_with(path: str | os.PathLike, fill: Callable[[BinaryIO], object], root: str | os.PathLike | None = None,
               mode: int = 0o644) -> Path:
    """Write the file ``path`` (inside ``root``) atomically with ``fill(binary file)``;
    returns the path written. Checked first (:func:`check_output`); parent folders are
    created. ``mode``: the file's permissions (``0o600`` for a private one)."""
    path = Path(path)
    root = Path(root) if root is not None else path.parent
    target = check_output(path, root)
    _make_parent(target, root)
    fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name[:200]}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as fh:
            fill(fh)
            fh.flush()
            os.fsync(fh.fileno())
        os.chmod(tmp, mode)
        check_output(path, root)  # still a regular file or nothing: never rename over a device
        _rename(tmp, target)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise
    _sync_folder(target.parent)
    return path


def write_bytes(path: str | os.PathLike, data: bytes, root: str | os.PathLike | None = None) -> Path:
    """Write ``data`` to ``path`` (inside ``root``) atomically (see :func:`write_with`)."""
    return write_with(path, lambda fh: fh.write(data), root)


def write_text(path: str | os.PathLike, text: str, root: str | os.PathLike | None = None) -> Path:
    """Write ``text`` (UTF-8, ``\\n`` newlines as given) to ``path`` atomically."""
    return write_bytes(path, text.encode("utf-8"), root)


def new_temp_dir(final: str | os.PathLike, root: str | os.PathLike | None = None) -> Path:
    """A fresh hidden folder beside ``final`` (checked as a folder output inside ``root``),
    to fill and then move into place with :func:`replace_dir`."""
    final = Path(final)
    root = Path(root) if root is not None else final.parent
    check_output(final, root, kind="dir")
    _make_parent(final, root)
    tmp = tempfile.mkdtemp(dir=final.parent, prefix=f".{final.name[:200]}.", suffix=".tmp")
    os.chmod(tmp, 0o755)  # mkdtemp makes it private; the folder it becomes is not
    return Path(tmp)


def replace_dir(tmp: str | os.PathLike, final: str | os.PathLike, root: str | os.PathLike | None = None) -> Path:
    """Move the filled folder ``tmp`` to ``final`` (inside ``root``), replacing an older
    folder there; a file, device or symlink at ``final`` is refused and left as it is."""
    final = Path(final)
    root = Path(root) if root is not None else final.parent
    try:
        check_output(final, root, kind="dir")
    except OutputError:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    if final.is_dir() and not final.is_symlink():
        shutil.rmtree(final)
    os.replace(tmp, final)
    _sync_folder(final.parent)
    return final
