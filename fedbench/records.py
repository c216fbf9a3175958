"""Result records on disk: paths, atomic writes, reading a tree of records.

The record's shape has one definition, :mod:`fedbench.schema` (re-exported here:
``empty_record``, ``validate_record``, ``RecordError``); older records are read in that
shape through :func:`fedbench.upgrade.upgrade`.
:func:`write_record` validates strictly and writes atomically; :func:`load_records`
reads a tree of them (invalid files are skipped with a warning). Failed and cancelled
records may carry NaN in memory; :func:`write_record` turns it into ``null``.

Only the standard library is imported here: the leaderboard imports this module.
"""

from __future__ import annotations

import json
import logging
import math
import os
import stat
import tempfile
from pathlib import Path
from typing import Any

from fedbench import integrity, outfiles
from fedbench.errors import UserError
from fedbench.upgrade import upgrade
from fedbench.schema import (
    SCHEMA_VERSION,
    STATUSES,
    RecordError,
    join_path,
    type_name,
    empty_record,
    validate_record,
)

log = logging.getLogger(__name__)

__all__ = [
    "SCHEMA_VERSION",
    "STATUSES",
    "RecordError",
    "atomic_write_text",
    "empty_record",
    "load_records",
    "one_line",
    "prepare_out_dir",
    "read_record_file",
    "read_record_status",
    "record_path",
    "validate_record",
    "write_record",
]


# --------------------------------------------------------------------------- paths & I/O


def _path_part(value: Any, where: str) -> str:
    if not isinstance(value, str) or not value:
        raise RecordError(f"{where}: expected a non-empty str to build the record path, got {value!r}")
    if value in (".", "..") or "/" in value or "\\" in value or "\0" in value:
        raise RecordError(f"{where}: {value!r} cannot be used as a path component")
    return value


def record_path(root: str | os.PathLike, rec: dict) -> Path:
    """``<root>/<task>/<method>/<run_id>.json``."""
    run = rec.get("run") if isinstance(rec, dict) else None
    if not isinstance(run, dict):
        raise RecordError("run: missing required key")
    task = _path_part(run.get("task"), "run.task")
    method = _path_part(run.get("method"), "run.method")
    run_id = _path_part(run.get("run_id"), "run.run_id")
    return Path(root) / task / method / f"{run_id}.json"


def prepare_out_dir(root: str | os.PathLike, create: bool = True) -> Path:
    """Create the records directory ``root`` (with parents) and check it is writable,
    before a run trains; a :class:`~fedbench.errors.UserError` (one line) if it cannot be.
    With ``create=False`` (a dry run) nothing is created: an existing ``root`` must be a
    writable directory, a missing one must have a creatable parent."""
    root = Path(root).expanduser()
    outfiles.check_name(root)  # a name the file system cannot hold: one line, not an OSError from exists()
    if root.exists() and not root.is_dir():
        raise UserError(f"output directory {root} is not a directory (a file of that name exists)")
    if not create and not root.exists():
        parent = next((p for p in root.parents if p.exists()), Path("."))
        if not parent.is_dir() or not os.access(parent, os.W_OK | os.X_OK):
            raise UserError(f"output directory {root} cannot be created under {parent} (not a writable directory)")
        return root
    try:
        root.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise UserError(f"output directory {root} cannot be created: {err.strerror or err}") from None
    try:
        fd, tmp = tempfile.mkstemp(dir=root, prefix=".fedbench-write-check.")
        os.close(fd)
        os.unlink(tmp)
    except OSError as err:
        raise UserError(f"output directory {root} is not writable: {err.strerror or err}") from None
    return root


def read_record_status(path: str | os.PathLike) -> str | None:
    """The ``status`` of the record at ``path``; None if there is none. A file that is not a
    valid, trusted record (:func:`read_record_file`: unreadable, not the schema, another
    run's, edited after it was written) raises :class:`RecordError` (one line naming it)."""
    path = Path(path)
    if not os.path.lexists(path):
        return None
    try:
        return read_record_file(path)["status"]
    except RecordError as err:
        raise RecordError(f"{one_line(str(path))}: {err}") from None


def is_finished(path: str | os.PathLike) -> bool:
    """Whether ``path`` holds a readable record of a finished (``ok``) run."""
    try:
        return read_record_status(path) == "ok"
    except (RecordError, OSError):
        return False


def _to_plain(value: Any, path: str) -> Any:
    """Deep copy into plain JSON types: tuples -> lists, int dict keys -> str (as JSON
    would), numpy scalars/arrays -> Python numbers/lists. Anything else is an error."""
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, dict):
        out: dict[str, Any] = {}
        for key, item in value.items():
            if isinstance(key, int) and not isinstance(key, bool):
                key = str(key)
            elif not isinstance(key, str):
                raise RecordError(f"{path or 'record'}: expected str keys, got {type_name(key)} key {key!r}")
            if key in out:
                raise RecordError(f"{join_path(path, key)}: duplicate key after converting keys to str")
            out[key] = _to_plain(item, join_path(path, key))
        return out
    if isinstance(value, (list, tuple)):
        return [_to_plain(item, f"{path}[{i}]") for i, item in enumerate(value)]
    if type(value).__module__ == "numpy" and hasattr(value, "tolist"):
        return _to_plain(value.tolist(), path)
    raise RecordError(f"{path or 'record'}: value of type {type(value).__name__} is not JSON-serialisable")


def atomic_write_text(path: str | os.PathLike, text: str, root: str | os.PathLike | None = None) -> Path:
    """Write ``text`` to ``path`` (inside folder ``root``, by default its own) through the one
    safe writer, :func:`fedbench.outfiles.write_text`: atomic, regular files only, never out
    of ``root``. Creates parent directories."""
    return Path(outfiles.write_text(path, text, root))


def write_record(rec: dict, path: str | os.PathLike, root: str | os.PathLike | None = None) -> Path:
    """Validate ``rec`` and write it atomically to ``path`` as JSON (sorted keys, indent 2,
    trailing newline). Returns the path.

    Before validation the record is copied into plain JSON types (tuples become lists,
    int dict keys such as ``client_tiers`` become str, numpy scalars become Python
    numbers). After validation every NaN/inf becomes ``null`` so a failed run with a NaN
    loss still writes (an ``"ok"`` record with NaN is rejected by validation).
    ``rec`` itself is not modified. ``root``: the records folder the path must stay in
    (:mod:`fedbench.outfiles`; by default the record's own folder).
    """
    plain = _to_plain(rec, "")
    validate_record(plain, strict=True)
    sealed = integrity.seal(integrity.nonfinite_to_none(plain))  # file name, run id and content hash checked on reading
    text = json.dumps(sealed, sort_keys=True, indent=2, allow_nan=False) + "\n"
    return atomic_write_text(path, text, root)


#: Limits of what :func:`load_records` reads as a record: a real record is about 6 levels
#: deep and a few hundred KB; a finite number whose magnitude exceeds MAX_MAGNITUDE is no
#: result, count or seed (float arithmetic on it could overflow, an int may not convert).
MAX_DEPTH = 64
MAX_BYTES = 256 * 2**20
MAX_MAGNITUDE = 2.0**64


def one_line(text: str) -> str:
    """``text`` with control characters (a newline in a file name, ...) escaped, so a
    warning or an error stays on one line."""
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)


def _check_text(text: str, path: str) -> None:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:  # JSON's \ud800 escapes decode to lone surrogates, which no file can hold
        raise RecordError(f"{path or 'record'}: not Unicode text (a lone surrogate escape)") from None


def _too_big(x: int | float) -> bool:
    """Beyond :data:`MAX_MAGNITUDE` (NaN and infinity are not: the schema's rules decide)."""
    return abs(x) > MAX_MAGNITUDE if isinstance(x, int) else math.isfinite(x) and abs(x) > MAX_MAGNITUDE


def _check_plain(value: Any) -> None:
    """Raise :class:`RecordError` if parsed JSON ``value`` nests deeper than
    :data:`MAX_DEPTH`, holds a number beyond :data:`MAX_MAGNITUDE` or a string that is not
    Unicode text (iteratively: no recursion, whatever the depth)."""
    stack = [(value, "", 0)]
    while stack:
        node, path, depth = stack.pop()
        if depth > MAX_DEPTH:
            raise RecordError(f"nested more than {MAX_DEPTH} levels deep")
        if isinstance(node, dict):
            for k in node:
                _check_text(k, path)
            stack.extend((v, f"{path}.{k}" if path else k, depth + 1) for k, v in node.items())
        elif isinstance(node, str):
            _check_text(node, path)
        elif isinstance(node, list):
            stack.extend((v, f"{path}[{i}]", depth + 1) for i, v in enumerate(node))
        elif isinstance(node, (int, float)) and not isinstance(node, bool) and _too_big(node):
            size = f"{node.bit_length()}-bit integer" if isinstance(node, int) else f"{node:g}"
            raise RecordError(f"{path or 'record'}: number out of range ({size}; at most 2**64 in magnitude)")


def read_record_file(path: str | os.PathLike) -> dict:
    """The valid record in the file at ``path``; :class:`RecordError` with a one-line
    reason for anything else: not a regular file (a directory, fifo, device, dangling
    link or symlink loop), larger than :data:`MAX_BYTES`, not UTF-8, not JSON, an integer
    too long to parse, nested too deeply, a number out of range, or not matching the
    schema. A record of an older schema version is returned upgraded
    (:func:`~fedbench.upgrade.upgrade`). A fifo or device is never opened (reading one could block forever)."""
    try:
        st = os.stat(path)
    except OSError as err:
        raise RecordError(f"cannot be read ({err.strerror or err})") from None
    if not stat.S_ISREG(st.st_mode):
        kind = ("a directory" if stat.S_ISDIR(st.st_mode) else "a fifo" if stat.S_ISFIFO(st.st_mode)
                else "a special file")
        raise RecordError(f"not a regular file ({kind})")
    if st.st_size > MAX_BYTES:
        raise RecordError(f"{st.st_size} bytes, larger than any record ({MAX_BYTES} at most)")
    try:
        with open(path, "rb") as fh:
            text = fh.read(MAX_BYTES + 1).decode("utf-8")
        rec = json.loads(text)
    except OSError as err:
        raise RecordError(f"cannot be read ({err.strerror or err})") from None
    except UnicodeDecodeError as err:
        raise RecordError(f"not UTF-8 (byte {err.start})") from None
    except json.JSONDecodeError as err:
        raise RecordError(f"not valid JSON (line {err.lineno}: {err.msg})") from None
    except RecursionError:
        raise RecordError("not readable JSON (nested too deeply)") from None
    except ValueError as err:  # an integer literal longer than Python's int parsing limit
        raise RecordError(f"not readable JSON ({str(err).split(';')[0]})") from None
    try:
        _check_plain(rec)
        raw = rec
        rec = upgrade(rec)  # an older record in the current shape (the file is left as it is)
        validate_record(rec)
    except RecordError as err:
        raise RecordError(f"not a valid result record: {err}") from None
    problem = integrity.check(raw, rec["run"]["run_id"], path)  # the hash covers the file as written
    if problem:
        raise RecordError(f"not used: {problem}")
    return rec


def _beside_records(folder: Path, name: str, root: Path) -> bool:
    """Whether ``folder/name`` is one a run writes beside its records, whose JSON files are
    no records: a saved model's peft adapter (``<run_id>.adapter/``, ``--save-model``) and
    the trackers' files (``<out>/logs/``, ``--log``)."""
    return name.endswith(".adapter") or (name == "logs" and folder == root)


def _walk_json(root: Path) -> list[Path]:
    """Every non-hidden ``*.json`` path under ``root`` (files or not; symlinked folders are
    not followed, so a symlink loop cannot recurse), sorted, but for the folders a run writes
    beside its records (:func:`_beside_records`). A folder that cannot be listed is skipped
    with a warning."""
    def warn(err: OSError) -> None:
        log.warning("skipping %s: cannot be listed (%s)", one_line(str(err.filename)), err.strerror or err)

    found = []
    for folder, dirs, files in os.walk(root, onerror=warn):
        dirs[:] = sorted(d for d in dirs if not d.startswith(".") and not _beside_records(Path(folder), d, root))
        found += [Path(folder) / d for d in dirs if d.endswith(".json")]  # reported: not a record file
        found += [Path(folder) / f for f in files if f.endswith(".json") and not f.startswith(".")]
    return sorted(found)


def load_records(root: str | os.PathLike) -> list[dict]:
    """Every valid record in ``*.json`` files under ``root`` (recursively, sorted by path).

    Anything named ``*.json`` that is not a valid record (see :func:`read_record_file`:
    bad JSON, schema errors, a directory, fifo or symlink loop, ...) is skipped with a
    one-line warning naming it and why; the rest are read. Hidden files and folders (name
    starting with ``.``; temp files of an interrupted write, editor or notebook copies)
    are ignored, and so are a saved model's ``<run_id>.adapter/`` folders and the trackers'
    ``logs/`` folder under ``root``. ``root`` may also be a single JSON file. A missing ``root`` is a
    :class:`~fedbench.errors.UserError`.
    """
    root = Path(root)
    if root.is_file():
        paths = [root]
    elif root.is_dir():
        paths = _walk_json(root)
    elif root.exists():
        raise UserError(f"records path {one_line(str(root))} is neither a directory nor a file")
    else:
        raise UserError(f"records directory not found: {one_line(str(root))}")
    records, seen = [], {}
    for p in paths:
        try:
            rec = read_record_file(p)
        except RecordError as err:
            log.warning("skipping %s: %s", one_line(str(p)), one_line(str(err)))
            continue
        key = (rec["run"]["run_id"], rec["status"])
        if key in seen:  # the same run twice (a copied file): counted once
            log.warning("skipping %s: not used: the same run as %s", one_line(str(p)), one_line(str(seen[key])))
            continue
        seen[key] = p
        records.append(rec)
    return records
