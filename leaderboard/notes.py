"""The notes under a leaderboard table: what every mark and column means, generated from
the same facts the table was drawn from, so they stay true when the rules change."""

from __future__ import annotations

from collections import defaultdict

from fedbench.leaderboard.render import esc
from fedbench.leaderboard.settings import describe_setting
from fedbench.leaderboard.table import BUDGET_FIELDS, FEDERATION_FIELDS
from fedbench.units import MB, format_bytes, mem_source_label

__all__ = ["DAGGER_NOTE", "MEM_NOTES", "merge_facts", "task_notes"]

DAGGER_NOTE = (
    "†: significantly behind the best row of its group in that column (the first bold one) by a two-sided "
    "paired t-test at the 5% level over the seeds both have (pairs: same seed, so same data split and "
    "initialisation); the number after † is the mean paired difference, this row minus the best. One test per "
    "cell, not corrected for the many cells of the table (some † are expected by chance); for a claim about "
    "chosen methods, `fedbench compare A --against B --task T` runs the same paired tests with a "
    "Holm-Bonferroni correction over its comparisons. Cells with one seed, or with fewer than 2 seeds shared "
    "with the best, are not tested. (A paired t-test rather than Wilcoxon's signed-rank test: with the usual "
    "3-5 seeds the signed-rank test can never reach p < 0.05.)"
)

#: ``cost.peak_mem_source`` -> what the Mem columns then hold
MEM_NOTES = {
    "accounted": "parameters the client's model holds + gradients of the trainable ones + optimizer state + "
                 "tensors saved for backward, counted from the tensors; the same on every device, not a measured "
                 "allocator peak",
    "cuda": "the allocator's peak of the client's step, minus the blocks the simulator keeps resident that the "
            "client's model does not contain",
}


def _mem_source(source: str) -> str:
    desc = MEM_NOTES.get(source)
    return esc(mem_source_label(source)) + (f" ({desc})" if desc else "")


def merge_facts(facts: list[dict]) -> dict:
    """The facts of several sections as one: bools or-ed, counts added, lists joined
    without repeats (order kept)."""
    out: dict = {}
    for f in facts:
        for k, v in f.items():
            if isinstance(v, bool):
                out[k] = out.get(k, False) or v
            elif isinstance(v, int):
                out[k] = out.get(k, 0) + v
            else:
                out[k] = list(dict.fromkeys([*out.get(k, []), *v]))
    return out


def _names(items) -> str:
    return ", ".join(f"`{esc(x)}`" for x in items)


def _quality_notes(facts: dict, varying: set) -> list[str]:
    fed = ", ".join(f"`{k}`" for k in sorted(FEDERATION_FIELDS))
    budget = ", ".join(f"`{k}`" for k in sorted(BUDGET_FIELDS))
    budgets = facts["budgets"]
    tables = (f"Tables: one per budget (federation: {fed}; training budget: {budget}; task config) and, within "
              "it, one per RoC group, as the papers' tables compare methods within one resource ratio, "
              "federation and budget; rows are ranked by Avg within their group (rows missing a setting last, "
              "by the mean of the cells they have).")
    if budgets:
        tables += (f" This task has {len(budgets)} budgets, each under its own heading: "
                   f"{'; '.join(esc(b) for b in budgets)}.")
    bold = "**Bold**: the best mean of its column (and Avg) within its group, ties all bold"
    if facts["best"]:
        bold += (f"; a highest mean, not a significant win: {facts['unclear']} of the {facts['best']} bold cells "
                 "that have a runner-up in their group do not beat it beyond their own 95% CI (an Avg has no CI; "
                 "only † marks a tested difference)." if facts["unclear"] else
                 f"; each of the {facts['best']} bold cells that have a runner-up in their group beats it beyond "
                 "its own 95% CI (an Avg has no CI; only † marks a tested difference).")
    else:
        bold += "."
    return [
        "Quality: `results.final` of each run (the global model; personalised methods report the mean "
        "of client-local metrics); percentage metrics are shown x100. A cell with several seeds shows "
        "`mean ± h (n)`: the mean over n seeds ± the half-width of its 95% confidence interval, "
        "t(0.975, n-1) · s / √n with the sample standard deviation s.",
        tables,
        bold,
        DAGGER_NOTE,
        "Avg: mean over the row's setting columns (per-domain tables: over domains)."
        + (" `-`: the row has no result for some setting, so no average." if facts["avg_missing"] else ""),
        "RoC: the run's resource label (`--roc` ratio, `--capacities` list, or `-` for none).",
        "Rows: one per method, RoC and config variant (method, task and run config except seed, setting, "
        "resource label and fields that cannot change a result); runs with different configs are never "
        "averaged: a method run in several variants names, in every row, the fields in which its rows "
        "differ, e.g. `fedavg (lr=0.01)` (a budget's fields are in its heading)."
        + (f" Run/task config fields that differ between rows: {_names(sorted(varying))}." if varying else ""),
    ]


def _cost_notes(facts: dict) -> list[str]:
    sources = facts["mem_sources"]
    if len(sources) == 1:
        mem = f"Mem = peak memory of one client step, {_mem_source(sources[0])}"
    else:
        mem = ("Mem = peak memory of one client step, as the Mem source column says per row: "
               + "; ".join(f"`{esc(s)}` = {_mem_source(s)}" for s in sources) + "; `mixed`: the row's runs differ")
    notes = [
        "Costs, each the mean over all of the row's runs (every setting and seed): TFLOPs/step = "
        f"TFLOPs of one client training step (forward + backward); {mem}; Traffic/round = traffic down + up "
        "per client per round; sizes in MB below 1 GB, in GB from 1 GB (1 GB = 1000 MB); `weak` / `strong`: "
        "the same for the clients of the weakest / strongest resource tier (`-`: that tier does not train); "
        "s/round = wall seconds per round without evaluation; Eval s/round = seconds of one evaluation "
        "(`run.eval_every` sets how often); Server TFLOPs / Server s = the server's extra work over the "
        "whole run.",
        "Pareto ✓: within the row's group (its RoC in its budget), no other row is at least as good on both Avg and "
        "weakest-tier "
        "TFLOPs/step and strictly better on one (rows without either are not compared). Like bold it compares "
        "means: a ✓ row need not beat the rows it dominates beyond their CIs.",
    ]
    if facts["idle"]:
        notes.append(f"{_names(facts['idle'])}: the weakest tier never trains (its clients never take part), so "
                     "its weakest-tier TFLOPs/step and Mem are `-` and its weakest-tier Traffic/round is 0. That "
                     "zero is not a cheap way of serving weak clients, so such a row is left out of the Pareto ✓; "
                     "the plots draw it apart, off the fronts.")
    return notes


def _alt_traffic(ok: list[dict]) -> list[str]:
    """``method with label: size`` for each method's ``cost.traffic_alt_mb_per_client_round``
    entries (mean over its runs)."""
    vals: dict = defaultdict(list)
    for r in ok:
        for label, t in ((r.get("cost") or {}).get("traffic_alt_mb_per_client_round") or {}).items():
            if t.get("total") is not None:
                vals[(r["run"]["method"], label)].append(float(t["total"]))
    return [f"`{esc(m)}` with {esc(label)}: {format_bytes(sum(v) / len(v) * MB)}"
            for (m, label), v in sorted(vals.items())]


def task_notes(settings: list[str], facts: dict, varying: set, ok: list[dict], mixed: list[str],
               skipped: dict) -> list[str]:
    """The notes of one task's page. ``settings``: every setting column, in order;
    ``facts``: :func:`merge_facts` of its sections; ``ok``: its ok records; ``mixed``:
    ``setting seed N`` entries scored on different test examples; ``skipped``: status ->
    count of records that did not finish."""
    notes = []
    if facts:
        notes += _quality_notes(facts, varying) + _cost_notes(facts)
        known = [s for s in settings if describe_setting(s) != s]
        if known:
            notes.append("Settings: " + "; ".join(f"`{esc(s)}` = {esc(describe_setting(s))}" for s in known) + ".")
    alt = _alt_traffic(ok)
    if alt:
        notes.append("Traffic/round counts what the method's paper counts; other counts of the same traffic "
                     "(mean per client per round, down + up): " + "; ".join(alt) + ".")
    if mixed:
        notes.append("Not strictly comparable: some runs with the same setting and seed were scored on "
                     "different test examples (different `run.server_holdout`): " + "; ".join(mixed) + ".")
    if skipped:
        n = sum(skipped.values())
        parts = ", ".join(f"{skipped[s]} {s}" for s in sorted(skipped))
        notes.append(f"Skipped {n} record{'s' if n != 1 else ''} that did not finish ({parts}).")
    return notes
