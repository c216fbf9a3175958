"""A record's integrity: the file it lies in, its run id and a hash of its content agree.

:func:`seal` adds ``integrity.sha256`` to a record as it is written: the SHA-256 of the
record without that key, as canonical JSON (sorted keys, no spaces, non-finite numbers as
``null``, which is how the file holds them). :func:`check` is run on every record read
(:func:`fedbench.records.read_record_file`: when a run is skipped as done, when tables,
exports and claims are built): the file's name must be the record's run id
(``<run_id>.json``, or ``<run_id>.<status>.json`` for a failed or cancelled re-run kept
beside a finished record) and the hash, where there is one, must match. A record edited by
hand (a final score raised) or another run's record copied under this run's name fails,
is named in one warning and is not used (a run is then redone; ``--force`` redoes it
anyway). Records written before hashes existed carry none: for them the name and run id
are checked. Run ids are not touched.

Only the standard library: the leaderboard imports this.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
from pathlib import Path
from typing import Any

__all__ = ["check", "content_hash", "nonfinite_to_none", "seal"]

_STATUSES = ("ok", "failed", "cancelled")


def nonfinite_to_none(value: Any) -> Any:
    """``value`` with every NaN / inf float replaced by None (as the records store them)."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: nonfinite_to_none(v) for k, v in value.items()}
    if isinstance(value, list):
        return [nonfinite_to_none(v) for v in value]
    return value


def content_hash(rec: dict) -> str:
    """SHA-256 (hex) of ``rec`` without its ``integrity`` key, as canonical JSON."""
    body = {k: v for k, v in rec.items() if k != "integrity"}
    text = json.dumps(nonfinite_to_none(body), sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def seal(rec: dict) -> dict:
    """``rec`` (plain JSON types) with ``integrity.sha256`` set; ``rec`` is not modified."""
    out = {k: v for k, v in rec.items() if k != "integrity"}
    out["integrity"] = {"sha256": content_hash(out)}
    return out


def check(rec: dict, run_id: str, path: str | os.PathLike) -> str | None:
    """Why the record ``rec`` (as parsed, before any upgrade) of run ``run_id`` read from
    ``path`` cannot be trusted, or None: its file name is not its run id, or its content
    does not match its hash."""
    stem = Path(path).name[: -len(".json")] if Path(path).name.endswith(".json") else Path(path).stem
    if stem != run_id and stem not in (f"{run_id}.{s}" for s in _STATUSES):
        return f"its run id {run_id!r} is not its file name (a record copied or renamed?)"
    sealed = rec.get("integrity")
    if isinstance(sealed, dict) and sealed.get("sha256") != content_hash(rec):
        return "its content does not match the hash written with it (edited after it was written?)"
    return None
