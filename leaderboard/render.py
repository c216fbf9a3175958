"""Markdown formatting of one task/metric section: per budget (rounds, federation, task
config), a ranked quality table per resource-label group, the cost table, and the
per-domain and worst-client tables. Numbers come from :mod:`fedbench.leaderboard.table`."""

from __future__ import annotations

from fedbench.leaderboard.groups import Section, per_domain_cells, row_names, worst_client_cells
from fedbench.leaderboard.table import (
    COSTS,
    QualityTable,
    budget,
    budget_names,
    idle_weak_tier,
    mem_sources,
    pareto_rows,
    quality_table,
    ranked,
    row_costs,
)
from fedbench.units import GB, MB, format_bytes

__all__ = ["LOWER_IS_BETTER", "PERCENT_METRICS", "Fmt", "esc", "fmt_cost", "format_cell", "ranked_tables",
           "render_section"]

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


def _quality_row(q: QualityTable, rk, fmt: Fmt) -> list[str]:
    row = [format_cell(q.cells.get((rk, c)), fmt) for c in q.columns]
    if rk in q.avgs:
        text = fmt.num(q.avgs[rk])
        row.append(f"**{text}**" if rk in q.best_avg else text)
    else:
        row.append(DASH)
    return row


def _group_caption(label: str, n: int) -> str:
    return f"**RoC {esc(label)}** ({n} row{'s' if n != 1 else ''}, ranked by Avg):"


def ranked_tables(q: QualityTable, fmt: Fmt, names: dict) -> tuple[list[str], list[list]]:
    """One table per resource-label group of ``q``'s rows (all of one budget), each under a
    caption naming its group, rows ranked best first (:func:`~fedbench.leaderboard.table.ranked`).
    Returns the markdown lines and the rows of each table, in order."""
    lines, order = [], []
    for label in sorted({rk.label for rk in q.rows}):
        rows = ranked(q, [rk for rk in q.rows if rk.label == label], lower_better=fmt.lower_better)
        order.append(rows)
        lines += ["", _group_caption(label, len(rows)), ""]
        lines += table(["Method"] + [esc(c) for c in q.columns] + ["Avg"], 1,
                       [[esc(names[rk])] + _quality_row(q, rk, fmt) for rk in rows])
    return lines, order


def _budget_part(sec: Section, rows: list, fmt: Fmt, h: str, where: str, facts: dict) -> list[str]:
    """The tables of one budget (named ``where``, empty when the section has one): quality per
    group, costs, per domain, worst client."""

    def heading(what: str, detail: str = "") -> str:
        inner = "; ".join(x for x in (where, detail) if x)
        return f"{h} {what}" + (f" ({inner})" if inner else "")

    names = row_names(sec.rows, hidden=sorted({k for rk in rows for k, _ in budget(rk)}))
    settings = [s for s in sec.settings if any((rk, s) in sec.cells for rk in rows)]
    q = quality_table(rows, settings, sec.cells, lower_better=fmt.lower_better, key=fmt.key)
    lines, order = ranked_tables(q, fmt, names)
    facts["tables"] = facts.get("tables", []) + [tuple(g) for g in order]
    tables = [q]

    costs = row_costs(sec)
    front = pareto_rows(q, costs, lower_better=fmt.lower_better)
    sources = mem_sources(sec)
    mixed = len(set(sources.values())) > 1
    lines += ["", heading("Costs"), ""]
    lines += table(["Method", "RoC"] + [c.name for c in COSTS] + (["Mem source"] if mixed else []) + ["Pareto"], 2,
                   [[esc(names[rk]), esc(rk.label)] + [fmt_cost(costs[rk][c.name], c.unit) for c in COSTS]
                    + ([sources[rk]] if mixed else []) + ["✓" if rk in front else ""] for g in order for rk in g])

    for setting in settings:
        dom_rows, domains, cells = per_domain_cells(sec, setting, fmt.scale)
        dom_rows = [rk for rk in dom_rows if rk in rows]
        if dom_rows:
            dq = quality_table(dom_rows, domains, cells, lower_better=fmt.lower_better, key=fmt.key)
            tables.append(dq)
            dom_lines, dom_order = ranked_tables(dq, fmt, names)
            lines += ["", heading("Per-domain", esc(setting))] + dom_lines
            facts["tables"] += [tuple(g) for g in dom_order]

    worst_rows, cells = worst_client_cells(sec, fmt.scale)
    worst_rows = [rk for rk in worst_rows if rk in rows]
    if worst_rows:
        wq = quality_table(worst_rows, settings, cells, lower_better=fmt.lower_better, key=fmt.key)
        tables.append(wq)
        worst_lines, worst_order = ranked_tables(wq, fmt, names)
        lines += ["", heading("Worst client", "personalised methods: each client's own model on its local test "
                                      "split")] + worst_lines
        facts["tables"] += [tuple(g) for g in worst_order]

    contested = [c for t in tables for c in t.cells.values() if c.clear is not None]
    facts["avg_missing"] = facts.get("avg_missing", False) or any(len(t.avgs) < len(t.rows) for t in tables)
    facts["behind"] = facts.get("behind", False) or any(c.behind for t in tables for c in t.cells.values())
    facts["pareto"] = facts.get("pareto", False) or bool(front)
    facts["best"] = facts.get("best", 0) + len(contested)
    facts["unclear"] = facts.get("unclear", 0) + sum(not c.clear for c in contested)
    return lines


def render_section(sec: Section, level: int) -> tuple[list[str], dict]:
    """Markdown lines of one section and facts for the notes. One part per budget
    (:func:`~fedbench.leaderboard.table.budget`; a heading names it when the section has
    several), each with a ranked quality table per resource-label group, a cost table, and
    per-domain and worst-client tables where the runs have them. Facts: ``avg_missing``,
    ``behind``, ``pareto`` (bools); ``budgets`` (the budgets' names); ``best``, ``unclear``
    (best cells that have a runner-up in their group, and how many of them do not beat it
    beyond their CI); ``tables`` (the rows of each ranked table, in order); ``idle`` (names of
    rows whose weakest tier never trains);
    ``mem_sources`` (the ``cost.peak_mem_source`` values)."""
    fmt = Fmt(sec.metric)
    h = "#" * level
    facts: dict = {}
    names = budget_names(sec.rows)
    lines: list[str] = []
    for b in names:
        rows = [rk for rk in sec.rows if budget(rk) == b]
        if len(names) > 1:
            lines += ["", f"{h} Budget: {esc(names[b])}"]
        lines += _budget_part(sec, rows, fmt, h + ("#" if len(names) > 1 else ""), esc(names[b]), facts)
    idle = idle_weak_tier(sec)
    facts["budgets"] = list(names.values()) if len(names) > 1 else []
    facts["idle"] = [sec.names[rk] + (f" {rk.label}" if rk.label != DASH else "") for rk in sec.rows if rk in idle]
    facts["mem_sources"] = sorted({r["cost"]["peak_mem_source"] for r in sec.records})
    return lines[1:] if lines and lines[0] == "" else lines, facts
