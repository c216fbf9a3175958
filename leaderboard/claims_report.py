"""The claims report (``fedbench claims``): every claim of :mod:`fedbench.leaderboard.claims`
tested on the committed records, with a verdict (:mod:`~fedbench.leaderboard.claims_verdict`,
whose rule the report's header states too), into one markdown file.

Per measured claim: the paired A - B with its 95 % CI and seeds, raw and Holm-adjusted p
(Holm over every claim of the report that is testable and has a p), the verdict and what it
rests on, how both seed-mean learning curves end (:mod:`~fedbench.leaderboard.flatness`),
the budget and the records used, and the fixes some of those records predate. Per claim not
run: the command, an estimated cost, and the records that exist at another budget
(:mod:`~fedbench.leaderboard.claims_cost`). Under each table, the claim file's ``explained_by``
entries (a code reading or a measurement, and the preset or records behind it). Notes appear
where they apply: a note about one method's row of the paper's table on that method's claims,
the pre-fix and cost rules only when the report has such claims.
"""

from __future__ import annotations

import logging
from collections import Counter, defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

from fedbench.leaderboard.claims import Claim, Fix, Measured, claim_cells, load_claims, load_fixes, measure
from fedbench.leaderboard.claims_ablation import ARM_SEEDS, ablation_line, measure_ablation
from fedbench.leaderboard.claims_cost import MIN_SEEDS, budget_line, estimate, other_budgets
from fedbench.leaderboard.claims_verdict import (INCONCLUSIVE, NOT_AT_SIZE, NOT_RUN, NOT_TESTABLE, REPRODUCED,
                                                 REVERSED, VERDICTS, verdict)
from fedbench.leaderboard.compare import ALPHA, holm
from fedbench.leaderboard.flatness import FLAT_GAIN, Flatness, flatness
from fedbench.leaderboard.generate import written_by
from fedbench.leaderboard.groups import RowKey, Section, show_value
from fedbench.leaderboard.output import write_text
from fedbench.leaderboard.plot_claims import figure_link, gap_rows
from fedbench.leaderboard.render import Fmt, esc, table
from fedbench.leaderboard.sections import ok_sections
from fedbench.leaderboard.table import BUDGET_FIELDS
from fedbench.version import __version__

log = logging.getLogger(__name__)

__all__ = ["INCONCLUSIVE", "NOT_AT_SIZE", "NOT_RUN", "NOT_TESTABLE", "REGENERATE", "REPRODUCED", "REVERSED",
           "VERDICTS", "Outcome", "build_report", "evaluate", "render_claims", "verdict", "write_report"]

#: How the committed report is regenerated (written into its header).
REGENERATE = "fedbench claims --all --records leaderboard/records --out leaderboard/claims.md"


@dataclass(frozen=True)
class Outcome:
    claim: Claim
    measured: Measured | None
    p_holm: float | None
    verdict: str
    why: str  # what the verdict rests on, one phrase
    flat: tuple  # (Flatness | None of A, of B), of the seed-mean curves
    runs: tuple  # run ids of A's then B's paired records
    budget: str
    pre_fix: tuple  # the fixes (commit: what) that some of the paired records predate
    cost: str  # for claims without records: the command and the estimated cost
    elsewhere: str = ""  # for claims without records: the records at another budget (claims_cost.other_budgets)
    ablations: tuple = ()  # (AblationResult, ...) of its explained_by's ablations in its setting


def _paired(sec: Section, rk: RowKey, setting: str, seeds: tuple) -> list[dict]:
    return [r for r in sec.runs[rk]
            if r["run"]["run_config"]["setting"] == setting and r["run"]["run_config"]["seed"] in seeds]


def _mean_curve(recs: list[dict], scale: float) -> Flatness | None:
    """How the seed-mean curve ends: the rounds every record evaluated, value x ``scale``."""
    per = [{p["round"]: p["metric"] for p in r["results"]["curve"] if p.get("metric") is not None} for r in recs]
    common = set.intersection(*(set(c) for c in per)) if per else set()
    return flatness([(k, scale * sum(c[k] for c in per) / len(per)) for k in sorted(common)])


def _pre_fix(recs: list[dict], fixes: Sequence[Fix]) -> tuple:
    return tuple(f"{f.commit} ({f.what}): {sum(f.affects(r) for r in recs)} of {len(recs)}"
                 for f in fixes if any(f.affects(r) for r in recs))


def _measure_one(c: Claim, secs: dict, recs_by_task: dict, fixes: Sequence[Fix]) -> dict:
    sec = secs.get(c.task)
    ra, rb, a, b = claim_cells(sec, c, c.setting, c.where, c.where)
    m = measure(a, b) if a and b else None
    if m is None:
        task_recs = recs_by_task.get(c.task, [])
        return dict(measured=None, flat=(None, None), runs=(), budget="-", pre_fix=(), cost=estimate(c, task_recs),
                    elsewhere=other_budgets(c, sec, task_recs))
    scale = Fmt(sec.metric).scale
    ra_recs, rb_recs = _paired(sec, ra, c.setting, m.seeds), _paired(sec, rb, c.setting, m.seeds)
    return dict(measured=m, flat=(_mean_curve(ra_recs, scale), _mean_curve(rb_recs, scale)),
                runs=tuple(r["run"]["run_id"] for r in ra_recs + rb_recs), budget=budget_line(ra_recs + rb_recs),
                pre_fix=_pre_fix(ra_recs + rb_recs, fixes), cost="")


def evaluate(claims: Sequence[Claim], records: list[dict], fixes: Sequence[Fix] = ()) -> list[Outcome]:
    """Every claim's outcome on ``records``, in claim order; Holm over the testable claims
    with a measured p-value."""
    recs_by_task: dict = defaultdict(list)
    for r in records:
        recs_by_task[r["run"]["task"]].append(r)
    secs = {}
    for task in sorted({c.task for c in claims}):
        _, _, sections = ok_sections(task, recs_by_task.get(task, []))
        if sections:
            secs[task] = sections[0]
    parts = [_measure_one(c, secs, recs_by_task, fixes) for c in claims]
    for c, p in zip(claims, parts):
        ablations = c.explained_by.ablations if c.explained_by else ()
        p["ablations"] = tuple(measure_ablation(secs.get(c.task), c, ab, recs_by_task.get(c.task, []))
                               for ab in ablations if ab.setting == c.setting)
    tested = [i for i, (c, p) in enumerate(zip(claims, parts))
              if not c.not_testable and p["measured"] is not None and p["measured"].p is not None]
    adjusted = dict(zip(tested, holm([parts[i]["measured"].p for i in tested])))
    out = []
    for i, (c, p) in enumerate(zip(claims, parts)):
        verdict_, why = verdict(c, p["measured"], adjusted.get(i))
        out.append(Outcome(c, p_holm=adjusted.get(i), verdict=verdict_, why=why, **p))
    return out


# ------------------------------------------------------------------------ markdown
def _fig(c: Claim) -> str:
    if c.paper_diff is None:
        return f"{esc(c.figure_note)} (claims A {'>' if c.sign > 0 else '<'} B)"
    return f"{c.fig_a:.2f} vs {c.fig_b:.2f} ({c.paper_diff:+.2f})"


def _group(c: Claim) -> str:
    """The paper's group, and the note about B's row where the claim file has one."""
    return esc(c.group) + (f" ({esc(c.b)}: {esc(c.note)})" if c.note else "")


def _curve(f: Flatness | None) -> str:
    if f is None:
        return "-"
    if f.state is None:
        return f"? (no eval at round {f.start})"
    return f"{f.state} ({f.gain:+.2f})"


def _row(o: Outcome) -> list[str]:
    c, m = o.claim, o.measured
    measured = "-" if m is None else f"{m.mean_a:.2f} vs {m.mean_b:.2f}: {m.diff:+.2f} ± {m.half:.2f} ({len(m.seeds)})"
    p = "-" if m is None or m.p is None else f"{m.p:.3g}"
    q = "-" if o.p_holm is None else f"{o.p_holm:.3g}"
    marks = "; ".join(f"pre-fix {x}" for x in o.pre_fix)
    recs = " ".join(r[:8] for r in o.runs) if o.runs else "none"
    return [f"{esc(c.a)} vs {esc(c.b)}", _group(c), f"{esc(c.setting)} ({esc(c.column)})", _fig(c), measured,
            p, q, f"**{o.verdict}**" + (" (see the note above)" if c.not_testable else f": {esc(o.why)}"),
            f"{_curve(o.flat[0])} / {_curve(o.flat[1])}",
            esc(o.budget), recs + (f" ({esc(marks)})" if marks else "")]


def _not_run(o: Outcome) -> list[str]:
    why = f"**{o.verdict}**: {esc(o.why)}"
    if o.elsewhere:
        at = ", ".join(f"{k}={show_value(v)}" for k, v in o.claim.where if k in BUDGET_FIELDS)
        why += f" at {esc(at)}; records exist at another budget: {o.elsewhere}"
    return [f"{esc(o.claim.a)} vs {esc(o.claim.b)}", _group(o.claim),
            f"{esc(o.claim.setting)} ({esc(o.claim.column)})", _fig(o.claim), why, o.cost]


def _explained(block: Sequence[Outcome]) -> list[str]:
    """Under a table's claims: each ``explained_by`` once per claim pair and group, with its settings."""
    seen: dict = {}
    for o in block:
        c = o.claim
        if c.explained_by is not None:
            seen.setdefault((c.a, c.b, c.group, c.explained_by), []).append(o)
    if not seen:
        return []
    lines = ["", "Explained by:", ""]
    for (a, b, g, e), os_ in seen.items():
        settings = ", ".join(esc(o.claim.setting) for o in os_)
        lines.append(f"- {esc(a)} vs {esc(b)}, {esc(g)} ({settings}): {esc(e.line())}")
        # indented 4 spaces: a nested list in Python-Markdown (the docs site) as on GitHub
        lines += [f"    - {esc(ablation_line(o.claim, r))}" for o in os_ for r in o.ablations]
    return lines


HEAD = ["Claim", "Group", "Setting (paper)", "Paper A vs B", "Measured A vs B: A - B ± 95 % CI (seeds)", "p",
        "p_holm", "Verdict", "Curve A / B", "Budget", "Records"]


def _rules(m: int, n_records: int, outcomes: Sequence[Outcome], versions: str = "") -> list[str]:
    lines = [
        f"Generated by `fedbench claims` (fedbench {__version__}) from {n_records} result records {versions}and the "
        f"claim files under `leaderboard/claims/` (committed report: `{REGENERATE}`); do not edit by hand.",
        "",
        "- Claim: a cell pair of a paper's table, \"A beats B\" (or trails it) under one resource group "
        "and data setting, with the two figures the paper prints. Measured: the committed records of A and "
        "B in the same cohort (resource label, federation, budget, task config) and setting, paired by seed as "
        "`fedbench compare` pairs them; values on the tables' scale (x100 for percent metrics).",
        f"- p: two-sided paired t-test of A - B over the shared seeds; p_holm: Holm-Bonferroni over the {m} "
        "testable claims with a p (every paper of this report).",
        f"- Verdict, the first that applies: **{NOT_TESTABLE}** = the claim file says why (the measurement is "
        f"shown, outside Holm); **{NOT_RUN}** = no records pair A and B in the claim's cell (the command, an "
        "estimated cost, and the records at another budget where some exist); "
        f"**{REVERSED}** = the opposite sign with p_holm < {ALPHA}; **{NOT_AT_SIZE}** = the paper's own A - B "
        "lies outside the measured 95 % CI (before Holm), whatever the sign test says: the records bound the "
        "difference away from the paper's, smaller or larger; "
        f"**{REPRODUCED}** = the paper's sign with p_holm < {ALPHA} (the paired-t confidence interval at the "
        "level of the claim's Holm step excludes 0); "
        f"**{INCONCLUSIVE}** = otherwise, with the 95 % CI half-width that would exclude 0 at the measured "
        "difference and the seeds that would take at the measured spread (before Holm).",
        f"- Curve: how the seed-mean learning curve ends, from its change over the last fifth of its rounds "
        f"(from round R - ceil(R/5) to the last evaluated round R): **flat** = |change| under {FLAT_GAIN:g} point; "
        f"**rising** = gained {FLAT_GAIN:g} point or more (the run stopped while still climbing); **falling** = "
        f"lost {FLAT_GAIN:g} point or more; `?` when it was not evaluated at that round.",
    ]
    if any(o.pre_fix for o in outcomes):
        lines.append(
            "- Pre-fix: paired records created before a correction of the method or setting was committed "
            "(`run.created_at` earlier than the fix's commit time, listed in `leaderboard/claims/fixes.yaml`); "
            "they show the behaviour before the fix.")
    if any(o.claim.explained_by is not None for o in outcomes):
        lines.append(
            "- Explained by (under a table): why the paper's row of B differs from ours, from the claim file's "
            "`explained_by`: a **code reading** (of the authors' code or text: not yet a measurement, with the "
            "preset that would measure it) or a **measurement**. Under it, each ablation (one factor moved toward "
            "the paper's setting: the arm's fields replace the claim's for both methods, or for the one it names) is "
            "measured from the records: the claim's A - B at the claim's fields and with the arm's, each with its "
            "95 % CI, and the change of the gap, arm minus base, paired by seed; a change whose CI excludes 0 "
            "moves the gap (toward the paper's: the share of the way from our gap, over the change's seeds, to the "
            "paper's), otherwise the CI's half-width is the smallest change those seeds resolve. An arm with under "
            f"2 seeds gives its command and the estimated cost of its runs to {ARM_SEEDS} seeds (timed as below).")
    if any(o.measured is None and o.cost for o in outcomes):
        lines.append(
            "- Estimated cost of the runs not done here, per method: runs missing (seeds, at least "
            f"{MIN_SEEDS}, less those recorded) x rounds (the claim's budget) x measured s/round (seconds_total / "
            "rounds of that method's committed records on the task: at the claim's budget, else at its other "
            "fields, else at other budgets of the claim's task config; a method with no such record is timed from "
            "the other's, and a task config no record ran from another's, and the text says so), on the "
            "machine that wrote those records; and the training work in TFLOPs (measured per round on the same "
            "records), from which a GPU's time follows at its sustained rate.")
    return lines


def _counts(outcomes: Sequence[Outcome], every: bool) -> str:
    """``2 reproduced, 4 not reproduced at the paper's size, ...`` in :data:`VERDICTS` order;
    ``every``: verdicts with no claim too."""
    n = Counter(o.verdict for o in outcomes)
    return ", ".join(f"{n[v]} {v}" for v in VERDICTS if every or n[v])


def _seed_line(outcomes: Sequence[Outcome]) -> list[str]:
    """How many tested claims (measured, not marked not testable) have the :data:`MIN_SEEDS` the
    evidence asks for, and the seed counts of the others (``Seeds: 31 of 72 tested claims at 5
    or more; 41 at 3.``)."""
    n = Counter(len(o.measured.seeds) for o in outcomes if o.measured is not None and o.verdict != NOT_TESTABLE)
    if not n:
        return []
    full = sum(c for k, c in n.items() if k >= MIN_SEEDS)
    short = "; ".join(f"{c} at {k}" for k, c in sorted(n.items(), reverse=True) if k < MIN_SEEDS)
    return ["", f"Seeds: {full} of {n.total()} tested claims at {MIN_SEEDS} or more" + (f"; {short}" if short else "")
            + "."]


def render_claims(papers: Sequence[tuple[str, str, list[Outcome]]], n_records: int, versions: str = "",
                  figures: bool = False) -> str:
    """The report of ``papers`` ((name, title, outcomes), in order); ``versions``: which
    fedbench versions wrote the records (:func:`~fedbench.leaderboard.generate.written_by`);
    ``figures``: link each paper's figure (:mod:`~fedbench.leaderboard.plot_claims`, drawn
    next to the report) under its heading."""
    outcomes = [o for _, _, os_ in papers for o in os_]
    m = sum(o.p_holm is not None for o in outcomes)
    lines = ["# Paper claims tested on the committed records", ""] + _rules(m, n_records, outcomes, versions)
    lines += ["", f"{len(outcomes)} claims: {_counts(outcomes, every=True)}."] + _seed_line(outcomes)
    for name, title, os_ in papers:
        lines += ["", f"## {esc(title)}", "", f"`{esc(name)}`: {len(os_)} claims, {_counts(os_, every=False)}."]
        if figures and gap_rows(os_):
            lines += ["", "Each measured claim's A - B (a dot with its 95 % CI, coloured by verdict) beside the "
                      "paper's (x):", "", f"![{esc(name)}: measured A - B against the paper's]({figure_link(name)})"]
        for tbl in dict.fromkeys(o.claim.table for o in os_):
            block = [o for o in os_ if o.claim.table == tbl]
            lines += ["", f"### {esc(tbl)}", "", f"Task `{esc(block[0].claim.task)}`."]
            reasons = sorted({o.claim.not_testable for o in block if o.claim.not_testable})
            lines += [f"Not testable here: {esc(r)}" for r in reasons]
            run = [o for o in block if o.measured is not None]
            if run:
                lines += [""] + table(HEAD, 3, [_row(o) for o in run])
            missing = [o for o in block if o.measured is None]
            if missing:
                lines += ["", "Not run here:", ""] + table(
                    ["Claim", "Group", "Setting (paper)", "Paper A vs B", "Verdict", "Command and estimated cost"], 4,
                    [_not_run(o) for o in missing])
            lines += _explained(block)
    return "\n".join(lines) + "\n"


def claims_outcomes(claims_dir: str | Path, records: list[dict], papers: Sequence[str]) -> list[tuple]:
    """[(paper, title, outcomes)] of ``papers`` (claim files under ``claims_dir``) on
    ``records``, in order; Holm over every paper's claims together."""
    fixes = load_fixes(claims_dir)
    loaded = [(p, *load_claims(claims_dir, p)) for p in papers]
    outcomes = evaluate([c for _, _, cs in loaded for c in cs], records, fixes)
    it = iter(outcomes)
    return [(p, title, [next(it) for _ in cs]) for p, title, cs in loaded]


def build_report(claims_dir: str | Path, records: list[dict], papers: Sequence[str], figures: bool = False) -> str:
    """The report of ``papers`` on ``records`` (:func:`claims_outcomes`, :func:`render_claims`)."""
    return render_claims(claims_outcomes(claims_dir, records, papers), len(records), written_by(records), figures)


def write_report(out: str | Path, claims_dir: str | Path, records: list[dict], papers: Sequence[str]) -> Path:
    """Write the report of ``papers`` on ``records`` to ``out``, each paper's figure drawn beside
    it (:func:`~fedbench.leaderboard.plot_claims.plot_claims`, ``claims_gaps/``) and linked;
    without matplotlib the report has no figures, and a warning says so."""
    grouped = claims_outcomes(claims_dir, records, papers)
    try:
        from fedbench.leaderboard.plot_claims import plot_claims

        plot_claims(grouped, Path(out).parent)
        figures = True
    except ImportError:
        log.warning("the report's figures are not drawn: matplotlib is missing (pip install 'fedbench-peft[plot]')")
        figures = False
    return write_text(Path(out), render_claims(grouped, len(records), written_by(records), figures))
