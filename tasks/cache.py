"""On-disk cache of encoded (tokenized) splits, keyed like HF ``datasets`` does it.

A key is the hash of everything the encoding depends on: the data files' fingerprints
(path + size + mtime_ns), the tokenizer's identity (name or path, vocabulary size and a
hash of its serialised JSON) and the encoding options (``seq_len``, prompt format, ...).
Entries live under ``$FEDBENCH_CACHE`` (default ``~/.cache/fedbench``) in ``encoded/``, are
written atomically (temporary file + ``os.replace``), and a missing or unreadable entry
simply means: encode again. ``FEDBENCH_CACHE=off`` (or ``0`` / ``none``) disables it.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
from pathlib import Path
from typing import Any, Callable

import torch

from fedbench.outfiles import OutputError, write_with

log = logging.getLogger(__name__)

CACHE_ENV = "FEDBENCH_CACHE"
FORMAT_VERSION = 1  # bump when the layout of cached entries changes


def cache_root() -> Path | None:
    """The cache folder, or None when caching is switched off."""
    value = os.environ.get(CACHE_ENV, "")
    if value.strip().lower() in ("off", "0", "none", "false"):
        return None
    return Path(value).expanduser() if value else Path.home() / ".cache" / "fedbench"


def tokenizer_fingerprint(tok) -> dict[str, Any]:
    """Name/path, vocabulary size, and a hash of the tokenizer's JSON (a fast tokenizer's full
    state, less the truncation/padding settings that each encoding call sets) or vocabulary.
    About 0.1 s for a 30k-word vocabulary."""
    if getattr(tok, "is_fast", False):
        state = json.loads(tok.backend_tokenizer.to_str())
        state.pop("truncation", None)
        state.pop("padding", None)
        blob = json.dumps(state, sort_keys=True)
    else:
        blob = json.dumps(sorted(tok.get_vocab().items()))
    specials = json.dumps(tok.special_tokens_map, sort_keys=True, default=str)
    template = str(getattr(tok, "chat_template", None))
    digest = hashlib.sha256("\x1f".join((blob, specials, template)).encode("utf-8")).hexdigest()
    return {"name": str(getattr(tok, "name_or_path", "")), "vocab": len(tok), "sha256": digest}


def cache_key(parts: dict[str, Any]) -> str:
    blob = json.dumps({"v": FORMAT_VERSION, **parts}, sort_keys=True, default=str)
    return hashlib.sha256(blob.encode("utf-8")).hexdigest()[:32]


def _read(path: Path, rows: int) -> dict[str, torch.Tensor] | None:
    try:
        got = torch.load(path, map_location="cpu", weights_only=True)  # tensors only: loading runs no code
    except FileNotFoundError:
        return None
    except Exception as e:  # noqa: BLE001 - a truncated or foreign file is a miss, not an error
        log.warning("encoding cache entry %s unreadable (%s): encoding again", path, e)
        return None
    if not isinstance(got, dict) or not all(isinstance(v, torch.Tensor) and v.dim() >= 1 and len(v) == rows
                                            for v in got.values()):
        log.warning("encoding cache entry %s does not hold %d rows per tensor: encoding again", path, rows)
        return None
    return got


def _write(path: Path, tensors: dict[str, torch.Tensor]) -> None:
    """Atomically, through the one safe writer (:func:`fedbench.outfiles.write_with`)."""
    try:
        write_with(path, lambda fh: torch.save(tensors, fh))
    except (OSError, OutputError) as e:
        log.warning("could not write the encoding cache entry %s: %s", path, e)


def cached_tensors(what: str, parts: dict[str, Any], rows: int,
                   encode: Callable[[], dict[str, torch.Tensor]]) -> dict[str, torch.Tensor]:
    """``encode()``'s tensors of ``rows`` examples each, from the cache when an entry for
    ``parts`` exists and holds ``rows`` rows in every tensor (else it is encoded again)."""
    root = cache_root()
    if root is None:
        return encode()
    path = root / "encoded" / f"{what}-{cache_key(parts)}.pt"
    got = _read(path, rows)
    if got is not None:
        log.info("%s: encoded tensors from the cache (%s)", what, path)
        return got
    tensors = encode()
    _write(path, tensors)
    return tensors
