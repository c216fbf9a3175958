"""Markdown formatting of one task/metric section: the quality table, the cost table and
the per-domain tables. Numbers come from :mod:`fedbench.leaderboard.table`."""

from __future__ import annotations

from fedbench.leaderboard.groups import Section, per_domain_cells, worst_client_cells
from fedbench.leaderboard.table import (
    COSTS,
    QualityTable,
    cohort,
    cohort_names,
    idle_weak_tier,
    mem_sources,
    pareto_rows,
    quality_table,
    row_costs,
)
from fedbench.units import GB, MB, format_bytes

__all__ = ["LOWER_IS_BETTER", "PERCENT_METRICS", "Fmt", "esc", "fmt_cost", "format_cell", "render_section"]

#: Metrics in [0, 1] shown as percent.
PERCENT_METRICS = frozenset({"top1", "top5", "accuracy", "macro_f1", "micro_f1", "rouge_l", "rouge1", "rouge2"})
#: Metrics where smaller is better (everything else: larger is better).
LOWER_IS_BETTER = frozenset({"loss", "perplexity", "ppl", "error", "wer", "cer"})
DASH = "-"
DAGGER = "†"


class Fmt:
    """How a metric is displayed: scale and number format."""

    def __init__(self, metric: str):
        self.percent = metric in PERCENT_METRICS
        self.scale = 100.0 if self.percent else 1.0
        self.lower_better = metric in LOWER_IS_BETTER

    def num(self, v: float, signed: bool = False) -> str:
        s = format(v, ("+" if signed else "") + (".2f" if self.percent else ".4g"))
        return _no_neg_zero(s)

    def key(self, v: float) -> float:
        """The value as displayed, for finding (tied) bests."""
        return float(self.num(v))


def _no_neg_zero(s: str) -> str:
    if s[:1] in "+-" and float(s) == 0:
        return s[1:]
    return s


def fmt_cost(v: float | None, unit: str) -> str:
    """A cost cell: sizes by :func:`~fedbench.units.format_bytes` (``gb`` and
    ``mb``: the record's unit), TFLOPs with 4 significant digits, seconds with 2 decimals."""
    if v is None:
        return DASH
    if unit in ("gb", "mb"):
        return format_bytes(v * (GB if unit == "gb" else MB))
    return _no_neg_zero(f"{v:.4g}" if unit == "tflops" else f"{v:.2f}")


def esc(text: str) -> str:
    """``text`` safe inside a markdown table cell or heading: ``\\`` and ``|`` escaped, a
    newline or other control character written as its escape (``\\n``), so one name is
    always one cell of one line."""
    text = text.replace("\\", "\\\\").replace("|", "\\|")
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)


def table(header: list[str], n_text_cols: int, rows: list[list[str]]) -> list[str]:
    align = [":---"] * n_text_cols + ["---:"] * (len(header) - n_text_cols)
    out = ["| " + " | ".join(header) + " |", "| " + " | ".join(align) + " |"]
    return out + ["| " + " | ".join(r) + " |" for r in rows]


def format_cell(cell, fmt: Fmt) -> str:
    """``mean``, or ``mean ± h (n)`` with >= 2 seeds; `` † d`` when significantly behind the
    column's best (d: mean paired difference to it); bold when best."""
    if cell is None:
        return DASH
    text = fmt.num(cell.mean)
    if cell.half is not None:
        text += f" ± {fmt.num(cell.half)} ({cell.n})"
    if cell.behind:
        text += f" {DAGGER} {fmt.num(cell.test.mean_diff, signed=True)}"
    return f"**{text}**" if cell.best else text


def _quality_rows(q: QualityTable, fmt: Fmt) -> list[list[str]]:
    out = []
    for rk in q.rows:
        row = [format_cell(q.cells.get((rk, c)), fmt) for c in q.columns]
        if rk in q.avgs:
            text = fmt.num(q.avgs[rk])
            row.append(f"**{text}**" if rk in q.best_avg else text)
        else:
            row.append(DASH)
        out.append(row)
    return out


def render_section(sec: Section, level: int) -> tuple[list[str], dict]:
    """Markdown lines of one section and facts for the notes: ``avg_missing``, ``behind``,
    ``pareto`` (bools); ``cohorts`` (names of the quality table's cohorts, in order);
    ``best``, ``unclear`` (best cells that have a runner-up in their cohort, and how many of
    them do not beat it beyond their CI); ``idle`` (names of rows whose weakest tier never
    trains); ``mem_sources`` (the ``cost.peak_mem_source`` values)."""
    fmt = Fmt(sec.metric)
    h = "#" * level

    def name(rk):
        return [esc(sec.names[rk]), esc(rk.label)]

    q = quality_table(sec.rows, sec.settings, sec.cells, lower_better=fmt.lower_better, key=fmt.key)
    lines = table(["Method", "RoC"] + [esc(s) for s in sec.settings] + ["Avg"], 2,
                  [name(rk) + r for rk, r in zip(sec.rows, _quality_rows(q, fmt))])
    tables = [q]

    costs = row_costs(sec)
    front = pareto_rows(q, costs, lower_better=fmt.lower_better)
    sources = mem_sources(sec)
    mixed = len(set(sources.values())) > 1
    lines += ["", f"{h} Costs", ""]
    lines += table(["Method", "RoC"] + [c.name for c in COSTS] + (["Mem source"] if mixed else []) + ["Pareto"], 2,
                   [name(rk) + [fmt_cost(costs[rk][c.name], c.unit) for c in COSTS]
                    + ([sources[rk]] if mixed else []) + ["✓" if rk in front else ""] for rk in sec.rows])

    for setting in sec.settings:
        rows, domains, cells = per_domain_cells(sec, setting, fmt.scale)
        if not rows:
            continue
        dq = quality_table(rows, domains, cells, lower_better=fmt.lower_better, key=fmt.key)
        tables.append(dq)
        lines += ["", f"{h} Per-domain ({esc(setting)})", ""]
        lines += table(["Method", "RoC"] + [esc(d) for d in domains] + ["Avg"], 2,
                       [name(rk) + r for rk, r in zip(rows, _quality_rows(dq, fmt))])

    rows, cells = worst_client_cells(sec, fmt.scale)
    if rows:
        wq = quality_table(rows, sec.settings, cells, lower_better=fmt.lower_better, key=fmt.key)
        tables.append(wq)
        lines += ["", f"{h} Worst client (personalised methods: each client's own model on its local test split)", ""]
        lines += table(["Method", "RoC"] + [esc(s) for s in sec.settings] + ["Avg"], 2,
                       [name(rk) + r for rk, r in zip(rows, _quality_rows(wq, fmt))])

    contested = [c for t in tables for c in t.cells.values() if c.clear is not None]
    idle = idle_weak_tier(sec)
    names = cohort_names(sec.rows)
    facts = {
        "avg_missing": any(len(t.avgs) < len(t.rows) for t in tables),
        "behind": any(c.behind for t in tables for c in t.cells.values()),
        "pareto": bool(front),
        "cohorts": [names[g] for g in sorted(names)] if len({cohort(rk) for rk in sec.rows}) > 1 else [],
        "best": len(contested),
        "unclear": sum(not c.clear for c in contested),
        "idle": [sec.names[rk] + (f" {rk.label}" if rk.label != DASH else "") for rk in sec.rows
                 if rk in idle],
        "mem_sources": sorted({r["cost"]["peak_mem_source"] for r in sec.records}),
    }
    return lines, facts
