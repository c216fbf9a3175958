"""What the plots share: the small-multiple layout by method family (a family of many
methods split over several panels), colours, titles and the placement of direct labels in a
margin beside the data, off every marker. No matplotlib import (the drawing functions take
an axes object), so it is tested without drawing."""

from __future__ import annotations

import math
from collections import defaultdict
from typing import Sequence

from fedbench.leaderboard.families import families_in, family_of
from fedbench.leaderboard.groups import RowKey, Section, show_value
from fedbench.leaderboard.settings import describe_setting
from fedbench.leaderboard.table import COHORT_FIELDS, cohort

__all__ = ["CONTEXT", "FAMILY_COLOURS", "MARKERS", "MAX_LINES", "PALETTE", "by_family", "cohort_markers",
           "family_colours", "label_margin", "panels", "row_colours", "spread", "style_key", "style_names", "title"]

#: Distinct colours for the methods of one panel (tab10 without its grey, which marks context).
PALETTE = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#bcbd22", "#17becf")
#: The other methods of a panel, drawn behind for context.
CONTEXT = "#c8c8c8"
#: One marker per cohort (resource ratio and federation) in the quality-vs-cost plots.
MARKERS = ("o", "^", "s", "D", "v", "P")
#: The most methods (config variants) one panel of learning curves draws in colour: a larger
#: family is split over several panels, so its lines do not pile up.
MAX_LINES = 4
#: One colour per method family in the quality-vs-cost plots (in family order).
FAMILY_COLOURS = ("#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b", "#e377c2", "#17becf")


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


def panels(rows: Sequence[RowKey], most: int = MAX_LINES) -> dict[str, list[RowKey]]:
    """:func:`by_family`, a family with more than ``most`` methods (:func:`style_key`) split
    into panels of at most ``most`` each, as even as can be, its methods by key:
    ``Fed-HeLLo (1 of 2)``, ..."""
    out = {}
    for family, members in by_family(rows).items():
        keys = sorted(dict.fromkeys(style_key(rk) for rk in members))
        size = math.ceil(len(keys) / math.ceil(len(keys) / most))  # balanced: 5 -> 3 + 2, 7 -> 4 + 3
        chunks = [keys[i:i + size] for i in range(0, len(keys), size)]
        for n, chunk in enumerate(chunks):
            name = family if len(chunks) == 1 else f"{family} ({n + 1} of {len(chunks)})"
            out[name] = [rk for rk in members if style_key(rk) in chunk]
    return out


def family_colours(rows: Sequence[RowKey]) -> dict[str, str]:
    """Family -> its colour (:data:`FAMILY_COLOURS`, in family order)."""
    return {f: FAMILY_COLOURS[i % len(FAMILY_COLOURS)] for i, f in enumerate(by_family(rows))}


def label_margin(ax, ends: Sequence[tuple[float, float, str, str]], x_text: float, lo: float, hi: float,
                 fontsize: float = 7.5) -> None:
    """Name points in a margin: each ``(x, y, text, colour)`` of ``ends`` gets its text at
    ``x_text`` (right of every point of the panel, so no text covers a marker), at a height
    :func:`spread` keeps a line of text apart from the next within ``[lo, hi]`` (the panel's
    y range; the gap follows the panel's drawn height), with a thin leader line from the point."""
    fig = ax.get_figure()
    height_in = max(ax.get_position().height * fig.get_figheight(), 0.5)
    gap = (hi - lo) * (fontsize * 1.35 / 72) / height_in  # one line of text, in data units
    for (x, y, text, colour), ly in zip(ends, spread([e[1] for e in ends], gap, lo + gap / 2, hi - gap / 2)):
        ax.annotate(text, (x, y), xytext=(x_text, ly), textcoords="data", fontsize=fontsize, color=colour,
                    va="center", ha="left", annotation_clip=False,
                    arrowprops={"arrowstyle": "-", "color": colour, "linewidth": 0.5, "alpha": 0.6,
                                "shrinkA": 0, "shrinkB": 2})


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
    tell its style keys apart (``fedavg (lr=0.01)``; a method field without its ``method.``
    prefix: ``fed_plora (budget=layers)``)."""
    keys = list(dict.fromkeys(style_key(rk) for rk in rows))
    by_method = defaultdict(list)
    for k in keys:
        by_method[k[0]].append(k)
    names = {}
    for method, ks in by_method.items():
        dicts = [dict(k[1]) for k in ks]
        differ = sorted(f for f in {f for d in dicts for f in d} if len({d.get(f) for d in dicts}) > 1)
        for k, d in zip(ks, dicts):
            parts = [f"{f.removeprefix('method.')}={show_value(d[f]) if f in d else '-'}" for f in differ]
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
