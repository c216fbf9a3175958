"""Paired comparison of methods against others (``fedbench compare``).

The leaderboard tests each cell only against its column's best. A paper's claim is
usually "method A beats baselines B and C"; this module tests exactly that: for every
row of each of ``methods`` and every row of each ``against`` method in the same cohort (the same
resource label and federation, :func:`~fedbench.leaderboard.table.cohort`), and for every
setting both have, a two-sided paired t-test of A - B over the seeds they share
(:func:`~fedbench.leaderboard.stats.paired_t_test`, the statistic the tables use).

Because such a report makes many comparisons at once, each line carries both the raw
p-value and the Holm-Bonferroni adjusted one (:func:`holm`, over all lines of the report);
"significant" in the report means the adjusted p < 0.05.

``--only KEY=V1,V2`` (:func:`select_records`, the grammar of ``fedbench sweep --only``)
narrows the report to part of the records, e.g. one budget (``--only run.rounds=50``), one
resource ratio (``--only roc=6:3:1``) or some settings: Holm then corrects over the
comparisons asked for, and the report stays the same as other records land.

A method may be in both lists: its rows are then compared with its other variants (e.g.
``fedavg (lr=0.01)`` against ``fedavg (lr=0.1)``), never with themselves; where that leaves
nothing to compare, the report is a one-line :class:`~fedbench.errors.UserError`.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Sequence

from fedbench.errors import UserError
from fedbench.leaderboard.groups import raw_variant
from fedbench.leaderboard.render import Fmt, esc, table
from fedbench.leaderboard.sections import ok_sections
from fedbench.leaderboard.stats import mean, paired_t_test, two_sided_p
from fedbench.leaderboard.table import cohort
from fedbench.only import keep, shown

__all__ = ["Comparison", "compare", "holm", "render_comparisons", "select_records"]

ALPHA = 0.05


@dataclass(frozen=True)
class Comparison:
    metric: str
    label: str  # resource label (RoC) of both rows
    setting: str
    row_a: str  # leaderboard row names
    row_b: str
    n: int  # shared seeds
    mean_a: float  # over the shared seeds, on the displayed scale (x100 for percent metrics)
    mean_b: float
    diff: float  # mean of a - b per seed
    t: float
    p: float | None  # two-sided; None without scipy
    p_holm: float | None = None  # Holm-Bonferroni adjusted over the whole report
    lower_better: bool = False  # the metric's direction

    @property
    def significant(self) -> bool:
        return self.p_holm is not None and self.p_holm < ALPHA

    @property
    def ahead(self) -> bool:
        """A significantly better than B."""
        return self.significant and (self.diff < 0 if self.lower_better else self.diff > 0)

    @property
    def behind(self) -> bool:
        """A significantly worse than B."""
        return self.significant and (self.diff > 0 if self.lower_better else self.diff < 0)


def holm(pvalues: Sequence[float]) -> list[float]:
    """Holm-Bonferroni adjusted p-values, in the input order: sort ascending, the k-th
    smallest (k = 0..m-1) becomes ``max over j <= k of min(1, (m - j) * p_(j))``."""
    m = len(pvalues)
    order = sorted(range(m), key=lambda i: pvalues[i])
    out = [0.0] * m
    running = 0.0
    for k, i in enumerate(order):
        running = max(running, min(1.0, (m - k) * pvalues[i]))
        out[i] = running
    return out


def _record_value(rec: dict, key: str, field: bool) -> str | None:
    """``rec``'s value of an ``--only`` key: roc is the record's resource label (the report's
    RoC column); a config field is taken from the record's variant (the fields that tell
    leaderboard rows apart, :func:`~fedbench.leaderboard.groups.raw_variant`): None for a
    method field the record's method lacks, an error for a run or task field that is not one."""
    run = rec["run"]
    if not field:
        return run["method"] if key == "method" else (
            run["resource_label"] if key == "roc" else str(run["run_config"].get(key)))
    section, _, name = key.partition(".")
    variant = raw_variant(rec)
    canon = variant.get(name if section == "run" else key)
    if canon is None and section != "method":
        raise UserError(f"--only {key}=...: {key} is not a field that tells leaderboard rows apart "
                        "(`fedbench list --fields` lists the fields; those of role 'result' do)")
    return None if canon is None else shown(json.loads(canon))


def select_records(records: list[dict], only: Sequence[str] | None) -> list[dict]:
    """The records matching every ``KEY=V1,V2`` of ``only`` (:mod:`fedbench.only`; roc is the
    resource label); a ``method.<field>`` filter keeps the records of methods without that
    field (``--only method.train_head=true`` keeps the baselines that have no head switch)."""
    return keep(records, only, _record_value, "record", absent_passes=True)


def compare(task: str, records: list[dict], methods: Sequence[str], against: Sequence[str]) -> list[Comparison]:
    """Every paired comparison of each of ``methods`` against each of ``against`` in
    ``task``'s ok records (see the module docstring), in row and setting order."""
    _, _, sections = ok_sections(task, records)
    found = []
    for sec in sections:
        fmt = Fmt(sec.metric)
        for ra in (rk for rk in sec.rows if rk.method in methods):
            for rb in (rk for rk in sec.rows if rk.method in against and rk != ra and cohort(rk) == cohort(ra)):
                for setting in sec.settings:
                    a, b = sec.cells.get((ra, setting)), sec.cells.get((rb, setting))
                    test = paired_t_test(a, b) if a and b else None
                    if test is None:
                        continue
                    seeds = sorted(set(a) & set(b))
                    found.append(Comparison(
                        sec.metric, ra.label, setting, sec.names[ra], sec.names[rb], test.n,
                        mean([a[s] for s in seeds]), mean([b[s] for s in seeds]), test.mean_diff, test.t,
                        two_sided_p(test.t, test.n - 1), lower_better=fmt.lower_better))
    both = [m for m in methods if m in against]
    if both and not found:
        raise UserError(f"{', '.join(both)} {'is' if len(both) == 1 else 'are'} compared with itself: a row is "
                        "only compared with the method's other variants in the same resource ratio and federation, "
                        f"and task {task!r} has no such pair with 2 shared seeds")
    ps = [c.p for c in found]
    if found and all(p is not None for p in ps):
        found = [Comparison(**{**c.__dict__, "p_holm": q}) for c, q in zip(found, holm(ps))]
    return found


def _num(v: float | None, spec: str) -> str:
    return "-" if v is None else format(v, spec)


def render_comparisons(task: str, comparisons: Sequence[Comparison], methods: Sequence[str],
                       against: Sequence[str]) -> str:
    """A markdown report: one table row per comparison and a one-line summary."""
    head = (f"# {', '.join(esc(a) for a in methods)} against {', '.join(esc(b) for b in against)} on {esc(task)}\n\n"
            "Paired t-test of A - B over shared seeds (two-sided); p_holm: Holm-Bonferroni over "
            f"the {len(comparisons)} comparisons below; * = p_holm < {ALPHA}.\n")
    if not comparisons:
        return head + "\nNo cell of both methods with at least two shared seeds.\n"
    rows = [[esc(c.metric), esc(c.label), esc(c.setting), esc(c.row_a), esc(c.row_b), str(c.n),
             f"{c.mean_a:.2f}", f"{c.mean_b:.2f}", f"{c.diff:+.2f}", f"{c.t:.2f}", _num(c.p, ".3f"),
             _num(c.p_holm, ".3f") + (" *" if c.significant else "")] for c in comparisons]
    lines = table(["Metric", "RoC", "Setting", "A", "B", "n", "mean A", "mean B", "A - B", "t", "p", "p_holm"],
                  5, rows)
    ahead = sum(c.ahead for c in comparisons)
    behind = sum(c.behind for c in comparisons)
    raw = sum(c.p is not None and c.p < ALPHA for c in comparisons)
    summary = (f"{len(comparisons)} comparisons: A significantly ahead in {ahead}, behind in {behind} "
               f"(Holm); {raw} with raw p < {ALPHA}.")
    return head + "\n" + "\n".join(lines) + "\n\n" + summary + "\n"
