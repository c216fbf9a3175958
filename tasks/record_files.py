"""Record files of the text tasks: JSONL / JSON / parquet splits in a folder, a
``save_to_disk`` folder, or HF datasets from the hub, read row by row with checks that name
the file and line (or row) of any bad record (a one-line :class:`~fedbench.errors.UserError`).
Malformed, non-UTF-8, too deeply nested JSON and integers beyond Python's digit limit are
such errors too."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Callable, Iterable

import logging

from fedbench.errors import UserError
from fedbench.tasks.models import DATA_EXTRA, cached_snapshot, hub_reachable

log = logging.getLogger(__name__)

RECORD_EXTS = (".jsonl", ".json", ".parquet")
SPLIT_NAMES = {"train": ("train",), "validation": ("validation", "valid", "dev", "val"), "test": ("test",)}


def _datasets_module():
    try:
        import datasets
    except ImportError:
        raise UserError(f"this data source needs the `datasets` package: {DATA_EXTRA}") from None
    return datasets


RowCheck = Callable[[dict], "str | None"]  # a row -> what is wrong with it, or None


def json_type(value: Any) -> str:
    """The JSON name of a decoded value's type, for messages."""
    names = {dict: "object", list: "list", str: "string", bool: "boolean", int: "integer", float: "number"}
    return "null" if value is None else names.get(type(value), type(value).__name__)


#: the largest local data file read (read whole: LEDGAR's splits are a few MB, Dolly's 13 MB)
DATA_MAX_BYTES = 2**30


def read_utf8(path: Path, allow_empty: bool = False) -> str:
    """A regular file's text, of at most :data:`DATA_MAX_BYTES`; anything else (a device, a
    pipe: endless or blocking reads; a larger file), a non-UTF-8 byte or (unless
    ``allow_empty``) a file with no text is a :class:`UserError` naming it."""
    if not path.is_file():
        raise UserError(f"cannot read {path}: not a regular file")
    try:
        size = path.stat().st_size
        if size > DATA_MAX_BYTES:  # read whole into memory: bounded, stated
            raise UserError(f"cannot read {path}: {size} bytes, more than the {DATA_MAX_BYTES} a local data file "
                            f"may hold (split it, or use the task's hub source)")
        data = path.read_bytes()
    except OSError as e:
        raise UserError(f"cannot read {path}: {e.strerror or e}") from None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        line = data.count(b"\n", 0, e.start) + 1
        raise UserError(f"{path} line {line}: not UTF-8 text (byte offset {e.start}: "
                        f"{data[e.start:e.start + 1]!r})") from None
    if not text.strip() and not allow_empty:
        raise UserError(f"{path} is empty")
    return text


def decode_json(text: str, path: Path, line: int | None = None) -> Any:
    """``json.loads(text)`` of file ``path`` (of its line ``line`` for JSONL); malformed JSON,
    nesting beyond the recursion limit or an integer beyond Python's digit limit is a
    :class:`UserError` naming the file and line (and column, where JSON says it)."""
    at = f" line {line}" if line is not None else ""
    try:
        return json.loads(text)
    except json.JSONDecodeError as e:
        raise UserError(f"{path} line {line or e.lineno} column {e.colno}: malformed JSON ({e.msg})") from None
    except RecursionError:
        raise UserError(f"{path}{at}: JSON nested too deeply to read") from None
    except ValueError as e:  # e.g. "Exceeds the limit (4300 digits) for integer string conversion"
        raise UserError(f"{path}{at}: unreadable JSON ({str(e).splitlines()[0]})") from None


def read_json(path: Path) -> Any:
    """A whole JSON file; bad JSON is a :class:`UserError` naming the file (see :func:`decode_json`)."""
    return decode_json(read_utf8(path), path)


def _jsonl_rows(path: Path, text: str) -> list[tuple[int, Any]]:
    rows = []
    for n, line in enumerate(text.split("\n"), 1):  # not splitlines(): U+2028 may sit inside a string
        if line.strip():
            rows.append((n, decode_json(line, path, n)))
    return rows


def load_saved_dataset(root: Path):
    """The DatasetDict ``save_to_disk`` wrote to ``root``; an unreadable one is one line."""
    datasets = _datasets_module()
    try:
        return datasets.load_from_disk(str(root))
    except Exception as e:  # noqa: BLE001 - missing shards, bad JSON, arrow errors: all mean "not readable"
        why = (str(e).splitlines() or [""])[0] or type(e).__name__
        raise UserError(f"{root}: not a readable save_to_disk DatasetDict ({why})") from None


def _numbered_rows(path: Path) -> tuple[str, list[tuple[int, Any]]]:
    """("line" | "row", [(number, decoded row)]) of a record file."""
    if path.suffix == ".parquet":
        try:
            import pyarrow.parquet as pq
        except ImportError:
            raise UserError(f"reading {path.name} needs pyarrow: {DATA_EXTRA}") from None
        try:
            table = pq.read_table(path)
        except Exception as e:  # noqa: BLE001 - pyarrow raises several types for a bad file
            raise UserError(f"{path}: not a readable parquet file ({str(e).splitlines()[0]})") from None
        return "row", list(enumerate(table.to_pylist(), 1))
    text = read_utf8(path)
    if path.suffix == ".json" and text.lstrip().startswith("["):
        rows = read_json(path)
        return "item", list(enumerate(rows, 1))
    return "line", _jsonl_rows(path, text)


def read_records(path: Path, check: RowCheck | None = None) -> list[dict]:
    """Rows of a JSONL file, a JSON list, or a parquet file.

    Every row must be a JSON object and pass ``check``; the first that does not, a
    malformed line, a non-UTF-8 byte or an empty file raise a one-line
    :class:`UserError` naming the file (and line).
    """
    unit, numbered = _numbered_rows(path)
    if not numbered:
        raise UserError(f"{path} is empty")
    return check_rows(numbered, check, str(path), unit)


def check_rows(numbered: Iterable[tuple[int, Any]], check: RowCheck | None, source: str, unit: str = "row") -> list[dict]:
    """The rows, after checking that each is an object that passes ``check``; else a
    :class:`UserError` "<source> <unit> <n>: <problem>"."""
    rows = []
    for n, row in numbered:
        if not isinstance(row, dict):
            raise UserError(f"{source} {unit} {n}: expected a JSON object, got {json_type(row)}")
        problem = check(row) if check is not None else None
        if problem:
            raise UserError(f"{source} {unit} {n}: {problem}")
        rows.append(row)
    return rows


def text_problem(name: str, value: Any) -> str | None:
    """A text field that holds no text (empty or whitespace only: a row that would train and
    be scored on nothing), or None."""
    return f"field {name!r} is empty (no text)" if isinstance(value, str) and not value.strip() else None


def field_problem(row: dict, name: str, kinds: tuple[type, ...], kind_name: str, text: bool = False) -> str | None:
    """What is wrong with ``row[name]`` if it is missing or not of ``kinds`` (bool is no int);
    ``text``: an empty text too (:func:`text_problem`)."""
    if name not in row or row[name] is None:
        return f"missing field {name!r}"
    value = row[name]
    if not isinstance(value, kinds) or (isinstance(value, bool) and bool not in kinds):
        return f"field {name!r} must be {kind_name}, got {json_type(value)} {str(value)[:40]!r}"
    return text_problem(name, value) if text else None


def split_file(root: Path, split: str) -> Path | None:
    for stem in SPLIT_NAMES[split]:
        for ext in RECORD_EXTS:
            if (root / f"{stem}{ext}").is_file():
                return root / f"{stem}{ext}"
    return None


def read_local_splits(root: Path, check: RowCheck | None = None) -> dict[str, list[dict]]:
    """{split: rows} from a folder of split files or a ``save_to_disk`` DatasetDict.

    A folder holding a single record file (e.g. ``databricks-dolly-15k.jsonl``) gives
    ``{"all": rows}``; an empty answer means nothing readable was found.
    """
    if (root / "dataset_dict.json").exists():
        dd = load_saved_dataset(root)
        return {name: check_rows(enumerate(dd[name], 1), check, f"{root / name}") for name in dd}
    out = {s: read_records(p, check) for s in SPLIT_NAMES if (p := split_file(root, s)) is not None}
    if out:
        return out
    files = sorted(p for p in root.iterdir() if p.is_file() and p.suffix in RECORD_EXTS)
    files = [p for p in files if not p.name.startswith(("label", "class"))]
    if len(files) == 1:
        return {"all": read_records(files[0], check)}
    return {}


def hub_splits(hf_id: str, config: str | None = None) -> tuple[dict[str, list[dict]], list[str]] | None:
    """({split: rows}, label names) of an HF dataset (download, or the HF cache when the hub
    cannot be reached); None if unavailable. Label names come from a ``label`` ClassLabel."""
    ds = _datasets_module()
    if hub_reachable():
        try:
            dd = ds.load_dataset(hf_id, config)
        except (OSError, ConnectionError) as e:
            log.warning("could not download %s: %s", hf_id, str(e).splitlines()[0])
            return None
    else:
        local = cached_snapshot(hf_id, "dataset")
        if local is None:
            return None
        dd = ds.load_dataset(local, config)
    first = dd[next(iter(dd))]
    names = list(getattr(first.features.get("label"), "names", None) or [])
    return {name: list(dd[name]) for name in dd}, names
