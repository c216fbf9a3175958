"""What the plots share: the small-multiple layout by method family, colours, markers,
titles and the placement of direct labels. Pure Python (no matplotlib), so it is tested
without drawing."""

from __future__ import annotations

from collections import defaultdict
from typing import Sequence

from fedbench.leaderboard.families import families_in, family_of
from fedbench.leaderboard.groups import RowKey, Section, show_value
from fedbench.leaderboard.settings import describe_setting
from fedbench.leaderboard.table import COHORT_FIELDS, cohort

__all__ = ["CONTEXT", "MARKERS", "PALETTE", "by_family", "cohort_markers", "row_colours", "spread", "style_key",
           "style_names", "title"]

#: Distinct colours for the methods of one panel (tab10 without its grey, which marks context).
PALETTE = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#bcbd22", "#17becf")
#: The other methods of a panel, drawn behind for context.
CONTEXT = "#c8c8c8"
#: One marker per cohort (resource ratio and federation) in the quality-vs-cost plots.
MARKERS = ("o", "^", "s", "D", "v", "P")


def style_key(rk: RowKey) -> tuple:
    """What a colour stands for: the method and its config variant apart from the cohort
    fields, so one method keeps its colour under every resource ratio, federation and budget."""
    return rk.method, tuple((k, v) for k, v in rk.variant if k not in COHORT_FIELDS and not k.startswith("task."))


def by_family(rows: Sequence[RowKey]) -> dict[str, list[RowKey]]:
    """``rows`` grouped by method family (:mod:`~fedbench.leaderboard.families` order),
    each group in the given row order."""
    groups = defaultdict(list)
    for rk in rows:
        groups[family_of(rk.method)].append(rk)
    return {f: groups[f] for f in families_in(rk.method for rk in rows)}


def row_colours(sec: Section) -> dict[RowKey, tuple[str, str]]:
    """Row -> (colour, line style). Colours are distinct within a family (a panel shows
    one family): the i-th :func:`style_key` of the family gets ``PALETTE[i]``, then the
    palette again dashed, then dotted."""
    out = {}
    for rows in by_family(sec.rows).values():
        index = {k: i for i, k in enumerate(dict.fromkeys(style_key(rk) for rk in rows))}
        for rk in rows:
            i = index[style_key(rk)]
            out[rk] = PALETTE[i % len(PALETTE)], ("-", "--", ":")[(i // len(PALETTE)) % 3]
    return out


def cohort_markers(rows: Sequence[RowKey]) -> dict[tuple, str]:
    """Cohort -> marker, in sorted cohort order."""
    return {g: MARKERS[i % len(MARKERS)] for i, g in enumerate(sorted({cohort(rk) for rk in rows}))}


def style_names(rows: Sequence[RowKey]) -> dict[tuple, str]:
    """:func:`style_key` -> its name in the plots: the method, plus the config fields that
    tell its style keys apart (``fedavg (lr=0.01)``)."""
    keys = list(dict.fromkeys(style_key(rk) for rk in rows))
    by_method = defaultdict(list)
    for k in keys:
        by_method[k[0]].append(k)
    names = {}
    for method, ks in by_method.items():
        dicts = [dict(k[1]) for k in ks]
        differ = sorted(f for f in {f for d in dicts for f in d} if len({d.get(f) for d in dicts}) > 1)
        for k, d in zip(ks, dicts):
            parts = [f"{f}={show_value(d[f]) if f in d else '-'}" for f in differ]
            names[k] = method + (f" ({', '.join(parts)})" if parts else "")
    return names


def title(sec: Section, setting: str, multi_metric: bool) -> str:
    """``task / setting (what the setting means)``, plus the metric when the task has several."""
    words = describe_setting(setting)
    text = f"{sec.task} / {setting}" + (f" ({words})" if words != setting else "")
    return text + (f" / {sec.metric}" if multi_metric else "")


def spread(ys: Sequence[float], gap: float, lo: float | None = None, hi: float | None = None) -> list[float]:
    """Label heights for points at heights ``ys``: in the order of ``ys`` (ties in input
    order), at least ``gap`` apart (less where ``n`` labels do not fit in ``[lo, hi]``),
    within ``[lo, hi]`` when given, and as close to the points as that allows (least
    squares). Substituting ``z_k = p_k - k * gap`` for the k-th lowest label turns the gaps
    into ``z`` non-decreasing: isotonic regression of ``y_k - k * gap`` (pool adjacent
    violators), then clipped to the bounds. E.g. ``spread([0, 0, 5], 1)`` is
    ``[-0.5, 0.5, 5]``: the crowded pair is centred on its points."""
    n = len(ys)
    if n == 0:
        return []
    if lo is not None and hi is not None and n > 1:
        gap = min(gap, (hi - lo) / (n - 1))
    order = sorted(range(n), key=lambda i: (ys[i], i))
    blocks: list[list[float]] = []  # [sum of z, count], means non-decreasing
    for k, i in enumerate(order):
        blocks.append([ys[i] - k * gap, 1])
        while len(blocks) > 1 and blocks[-2][0] / blocks[-2][1] > blocks[-1][0] / blocks[-1][1]:
            total, count = blocks.pop()
            blocks[-1][0] += total
            blocks[-1][1] += count
    z = [b[0] / b[1] for b in blocks for _ in range(int(b[1]))]
    if lo is not None:
        z = [max(v, lo) for v in z]
    if hi is not None:
        z = [min(v, hi - (n - 1) * gap) for v in z]
    out = [0.0] * n
    for k, i in enumerate(order):
        out[i] = z[k] + k * gap
    return out
