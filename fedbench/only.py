"""``--only KEY=V1,V2``: the one filter grammar of ``fedbench sweep`` (a preset's runs) and
``fedbench compare`` (records).

A filter keeps the items whose value of ``KEY`` is one of the comma-separated values; ``KEY``
is one of :data:`KEYS` (method, setting, seed, clients, roc) or a config field written
``method.<field>``, ``task.<field>`` or ``run.<field>``. Values compare as text: strings bare,
anything else as JSON (``true``, ``0.5``, ``50``), so ``--only method.train_head=true`` and
``--only run.rounds=50`` read as they are typed. A list value is written in brackets, its commas
inside them (``--only run.tier_fractions=[0.16,0.33,1.0],[0.5,0.75,1.0]``: two values), spaces
optional. Several filters all apply, in order.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from fedbench.errors import UserError

__all__ = ["KEYS", "SECTIONS", "keep", "parse", "shown"]

#: the keys that are not config fields
KEYS = ("method", "setting", "seed", "clients", "roc")
#: the config sections a field key may name (``method.server_rule``)
SECTIONS = ("method", "task", "run")

T = TypeVar("T")


def parse(item: str) -> tuple[str, set[str], bool]:
    """``(key, wanted values, is a config field)`` of one ``KEY=V1,V2``; a
    :class:`~fedbench.errors.UserError` naming the grammar if it is not one."""
    key, sep, values = item.partition("=")
    field = "." in key and key.partition(".")[0] in SECTIONS and bool(key.partition(".")[2])
    if not sep or not values or not (key in KEYS or field):
        raise UserError(f"--only {item!r}: expected KEY=V1,V2 with KEY one of {', '.join(KEYS)}, or a config "
                        "field as method.<field>, task.<field> or run.<field>")
    wanted = set()
    for v in _split(values, item):
        wanted |= {v, _normal(v)}
    return key, wanted, field


def _split(values: str, item: str) -> list[str]:
    """``values`` split at the commas outside brackets; unbalanced brackets are a grammar error."""
    parts, depth, start = [], 0, 0
    for i, c in enumerate(values):
        depth += (c in "[{") - (c in "]}")
        if depth < 0:
            break
        if c == "," and depth == 0:
            parts.append(values[start:i])
            start = i + 1
    if depth != 0:
        raise UserError(f"--only {item!r}: unbalanced brackets (a list value is written [V1,V2])")
    return [p.strip() for p in parts + [values[start:]]]


def _normal(v: str) -> str:
    """A typed value as :func:`shown` writes it (``[0.5,1]`` -> ``[0.5, 1]``), or ``v`` itself
    where it is no JSON (``iid``, ``6:3:1``): the typed form is kept beside it, so a string
    that happens to read as JSON still matches as typed."""
    try:
        return shown(json.loads(v))
    except (ValueError, RecursionError):  # not JSON; or nested past the parser's depth
        return v


def _in_order(v: str) -> tuple:
    """Sort key of shown values: numbers by value (seed 2 before seed 10), then the rest as text."""
    try:
        return (0, float(v), v)
    except ValueError:
        return (1, 0.0, v)


def shown(value: Any) -> str:
    """A value as a filter compares it: strings bare, anything else as JSON."""
    return value if isinstance(value, str) else json.dumps(value)


def keep(items: Sequence[T], only: Sequence[str] | None, value: Callable[[T, str, bool], str | None],
         what: str, *, absent_passes: bool = False) -> list[T]:
    """The ``items`` matching every filter of ``only``, in order. ``value(item, key, is_field)``
    is the item's value of ``key`` as :func:`shown` writes it, or None where the item has no
    such field: such an item is dropped, or kept with ``absent_passes`` (a ``method.<field>``
    filter then leaves alone the methods that have no such field). A filter that leaves nothing
    is a :class:`~fedbench.errors.UserError` saying so, ``what`` naming the items."""
    kept = list(items)
    for item in only or ():
        key, wanted, field = parse(item)
        values = [value(x, key, field) for x in kept]
        kept = [x for x, v in zip(kept, values) if v in wanted or (absent_passes and v is None)]
        if not kept:
            have = sorted({v for v in values if v is not None}, key=_in_order)
            listed = "; ".join(have[:8]) + ("; ..." if len(have) > 8 else "")
            raise UserError(f"--only {item!r} (with the filters before it) matches no {what}"
                            + (f" (the {len(values)} left have {key} {listed})" if have else ""))
    return kept
