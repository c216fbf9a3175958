"""Sizes written one way everywhere: the tables, the plots' axes and the CLI's run summary.

Decimal units, as the records store them (``peak_mem_gb``: 10**9 bytes,
``traffic_mb_*``: 10**6 bytes): a size below 1 GB is written in MB, from 1 GB on in GB,
with 4 significant digits (a size below 0.01 MB with 2, so a statistics upload never
reads as 0). Memory figures also name their source (``cost.peak_mem_source``).

The one definition of the size units (the run summary, the record, the planner, the tables);
only the standard library: the CLI may import this without torch or the leaderboard.
"""

from __future__ import annotations

from typing import Iterable

__all__ = ["GB", "MB", "MEM_SOURCES", "format_bytes", "mem_source_label", "size_unit"]

MB = 1e6
GB = 1e9
#: ``cost.peak_mem_source`` -> how the tables and plots name it
MEM_SOURCES = {"cuda": "measured on CUDA", "accounted": "accounted"}


def _sig(value: float, digits: int) -> str:
    text = format(value, f".{digits}g")
    return text[1:] if text.startswith("-") and float(text) == 0 else text


def format_bytes(nbytes: float | None) -> str:
    """``nbytes`` as ``"176.4 MB"`` below 1 GB, ``"1.25 GB"`` from 1 GB on, ``"-"`` for
    None. A size that rounds to 1000 MB is written as 1 GB. E.g. the run summary's peak
    memory: ``format_bytes(cost["peak_mem_gb"]["mean"] * GB)``."""
    if nbytes is None:
        return "-"
    mb = nbytes / MB
    if abs(nbytes) >= GB or abs(float(_sig(mb, 4))) >= 1000:
        return f"{_sig(nbytes / GB, 4)} GB"
    return f"{_sig(mb, 2 if 0 < abs(mb) < 0.01 else 4)} MB"


def size_unit(nbytes: Iterable[float | None]) -> tuple[float, str]:
    """(divisor, unit) for an axis of sizes: GB when the largest is at least 1 GB, else
    MB (None values are ignored)."""
    largest = max((abs(v) for v in nbytes if v is not None), default=0.0)
    return (GB, "GB") if largest >= GB else (MB, "MB")


def mem_source_label(source: str) -> str:
    """How a ``cost.peak_mem_source`` value is named: ``"measured on CUDA"`` or ``"accounted"``."""
    return MEM_SOURCES.get(source, source)
