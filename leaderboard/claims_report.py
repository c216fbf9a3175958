"""The claims report (``fedbench claims``): every claim of :mod:`fedbench.leaderboard.claims`
tested on the committed records, with a verdict, into one markdown file.

Verdict rule (the header of the report states it too), for a claim "A - B has the sign of
the paper's A - B" with ``m`` testable claims in the report that have >= 2 paired seeds:

* **reproduced**: the measured mean paired difference has the paper's sign and its
  Holm-Bonferroni adjusted p-value (over the ``m`` claims, :func:`~fedbench.leaderboard.compare.holm`)
  is below 0.05, i.e. the paired-t confidence interval at the level Holm's step gives that
  claim excludes 0;
* **reversed**: the opposite sign, with the adjusted p below 0.05;
* **inconclusive**: otherwise; the report gives the 95 % CI half-width that would exclude 0
  at the measured difference (|A - B|) and the seeds that would take at the measured spread;
* **not testable here**: the claim file says why the records cannot test it (the measured
  difference is still shown, outside Holm), or no records pair A and B in that setting
  (then the command that runs them and an estimated cost).
"""

from __future__ import annotations

from collections import Counter, defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

from fedbench.leaderboard.claims import (Claim, Fix, Measured, find_row, has_fields, load_claims, load_fixes, measure,
                                         seeds_needed)
from fedbench.leaderboard.compare import ALPHA, holm
from fedbench.leaderboard.flatness import FLAT_GAIN, Flatness, flatness
from fedbench.leaderboard.groups import RowKey, Section
from fedbench.leaderboard.output import write_text
from fedbench.leaderboard.render import Fmt, esc, table
from fedbench.leaderboard.sections import ok_sections

__all__ = ["INCONCLUSIVE", "NOT_TESTABLE", "REGENERATE", "REPRODUCED", "REVERSED", "Outcome", "build_report", "evaluate",
           "render_claims", "verdict", "write_claims"]

#: the fewest seeds a run not done here is costed with (the evidence presets' rule)
MIN_SEEDS = 5
#: How the committed report is regenerated (written into its header).
REGENERATE = "fedbench claims --all --records leaderboard/records --out leaderboard/claims.md"

REPRODUCED, REVERSED, INCONCLUSIVE, NOT_TESTABLE = "reproduced", "reversed", "inconclusive", "not testable here"


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


def _rows(sec: Section | None, c: Claim) -> tuple[RowKey | None, RowKey | None]:
    if sec is None:
        return None, None
    return find_row(sec, c.a, c.roc, c.where, c.setting), find_row(sec, c.b, c.roc, c.where, c.setting)


def _paired(sec: Section, rk: RowKey, setting: str, seeds: tuple) -> list[dict]:
    return [r for r in sec.runs[rk] if r["run"]["run_config"]["setting"] == setting and r["run"]["run_config"]["seed"] in seeds]


def _mean_curve(recs: list[dict], scale: float) -> Flatness | None:
    """Flatness of the seed-mean curve: the rounds every record evaluated, value x ``scale``."""
    per = [{p["round"]: p["metric"] for p in r["results"]["curve"] if p.get("metric") is not None} for r in recs]
    common = set.intersection(*(set(c) for c in per)) if per else set()
    return flatness([(k, scale * sum(c[k] for c in per) / len(per)) for k in sorted(common)])


def _budget(recs: list[dict]) -> str:
    """Rounds, seeds, model and the data partition's fingerprint (``run.partition_fingerprint``:
    the record keeps no data path, whose role is runtime, so the fingerprint names the data)."""
    rounds = sorted({r["run"]["run_config"]["rounds"] for r in recs})
    seeds = sorted({r["run"]["run_config"]["seed"] for r in recs})
    tc = recs[0]["run"].get("task_config") or {}
    prints = sorted({str(r["run"].get("partition_fingerprint") or "-")[:8] for r in recs})
    return (f"{'/'.join(map(str, rounds))} rounds, seeds {','.join(map(str, seeds))}, "
            f"model {tc.get('model') or 'default'}, data partition {','.join(prints)}")


def _per_round(recs: list[dict], key: str) -> float | None:
    """Mean over ``recs`` of ``cost[key]`` / rounds completed (None: no record has it)."""
    vals = [r["cost"][key] / r["run"]["rounds_completed"] for r in recs
            if r["cost"].get(key) and r["run"].get("rounds_completed")]
    return sum(vals) / len(vals) if vals else None


def _seeds_recorded(c: Claim, recs: list[dict], method: str) -> set:
    """The seeds of ``method``'s records in the claim's cell: its setting, resource label and ``where``."""
    return {r["run"]["run_config"]["seed"] for r in recs if r["run"]["method"] == method and r["run"]["run_config"]["setting"] == c.setting
            and (r["run"].get("resource_label") or "-") == c.roc and has_fields(r, c.where)}


def _timing_source(m: str, other: str, c: Claim, task_recs: list[dict]) -> tuple[list[dict], str]:
    """The records that time ``m``'s missing runs, and what they are: ``m``'s own (those at the
    claim's ``where``, else at its fields other than rounds, else all), else the other method's
    (chosen the same way), else every record of the task; the label says which, so a method
    never run here is not passed off as measured."""
    shape = tuple((k, v) for k, v in c.where if k != "rounds")  # s/round does not depend on rounds
    for who, label in ((m, f"{m}'s"), (other, f"no record of {m}: {other}'s")):
        own = [r for r in task_recs if r["run"]["method"] == who]
        if not own:
            continue
        for fields, at in ((c.where, ""), (shape, " at other round counts"), ((), " at other budgets")):
            src = [r for r in own if has_fields(r, fields)]
            if src:
                return src, f"{label} {len(src)} records{at}"
    return task_recs, f"no record of {m}: all {len(task_recs)} records of {c.task}"


def _cost(c: Claim, task_recs: list[dict]) -> str:
    """The command for the claim's missing runs and their estimated cost. Per method: the runs
    still missing (the task's seeds, at least :data:`MIN_SEEDS`, less the seeds already recorded
    in the claim's cell) x rounds (the claim's ``where``, else its records') x measured s/round
    (``seconds_total`` / rounds of the records :func:`_timing_source` picks: its own where it
    has any, and the text says which); and the training work those runs would do (measured TFLOPs per round,
    same records), from which a GPU's time follows at its sustained rate. The command is
    :meth:`Claim.run_command`."""
    if not c.command:
        return "no command: not a run this suite can do"
    cmd = esc(c.run_command())
    if not task_recs:
        return f"{cmd}; cost not estimated (no committed record of {esc(c.task)} to time)"
    seeds = max(MIN_SEEDS, len({r["run"]["run_config"]["seed"] for r in task_recs}))
    where = c.where_values
    minutes, tflops, parts, have = 0.0, 0.0, [], ""
    for m, other in ((c.a, c.b), (c.b, c.a)):
        done = len(_seeds_recorded(c, task_recs, m))
        have += f", {esc(m)} has {done} of them" if done else ""
        runs = max(0, seeds - done)
        if not runs:
            continue
        src, label = _timing_source(m, other, c, task_recs)
        spr = _per_round(src, "seconds_total")
        if spr is None:
            return f"{cmd}; cost not estimated (no timed record for {esc(m)})"
        rounds = int(where["rounds"]) if "rounds" in where else max(r["run"]["run_config"]["rounds"] for r in src)
        tpr = _per_round(src, "tflops_total")
        minutes += spr * rounds * runs / 60
        tflops = None if tflops is None or tpr is None else tflops + tpr * rounds * runs
        parts.append(f"{esc(m)} {runs} runs x {rounds} rounds x {spr:.1f} s/round ({esc(label)}"
                     + ("" if tpr is None else f", {tpr:.2f} TFLOPs/round") + ")")
    work = "" if tflops is None or not parts else (f"; {tflops:,.0f} TFLOPs of training in all (measured per round; "
                                                   "a GPU's time = that / its sustained TFLOP/s, not measured here)")
    return (f"{cmd}; est. {minutes:.0f} CPU-min = {' + '.join(parts) or 'no run missing'} "
            f"(2 methods x {seeds} seeds{have}){work}")


def _pre_fix(recs: list[dict], fixes: Sequence[Fix]) -> tuple:
    return tuple(f"{f.commit} ({f.what}): {sum(f.affects(r) for r in recs)} of {len(recs)}"
                 for f in fixes if any(f.affects(r) for r in recs))


def _measure_one(c: Claim, secs: dict, recs_by_task: dict, fixes: Sequence[Fix]) -> dict:
    sec = secs.get(c.task)
    ra, rb = _rows(sec, c)
    m = None
    if ra is not None and rb is not None and ra != rb:
        a, b = sec.cells.get((ra, c.setting)), sec.cells.get((rb, c.setting))
        m = measure(a, b) if a and b else None
    if m is None:
        return dict(measured=None, flat=(None, None), runs=(), budget="-", pre_fix=(),
                    cost=_cost(c, recs_by_task.get(c.task, [])))
    scale = Fmt(sec.metric).scale
    ra_recs, rb_recs = _paired(sec, ra, c.setting, m.seeds), _paired(sec, rb, c.setting, m.seeds)
    return dict(measured=m, flat=(_mean_curve(ra_recs, scale), _mean_curve(rb_recs, scale)),
                runs=tuple(r["run"]["run_id"] for r in ra_recs + rb_recs), budget=_budget(ra_recs + rb_recs),
                pre_fix=_pre_fix(ra_recs + rb_recs, fixes), cost="")


def verdict(c: Claim, m: Measured | None, q: float | None) -> tuple[str, str]:
    if c.not_testable:
        return NOT_TESTABLE, c.not_testable
    if m is None:
        return NOT_TESTABLE, "no records pair the two methods in this setting"
    if q is not None and q < ALPHA and m.diff != 0:
        same = (m.diff > 0) == (c.sign > 0)
        return (REPRODUCED if same else REVERSED), f"Holm p {q:.3g} < {ALPHA}"
    if m.diff == 0:
        return INCONCLUSIVE, "no difference measured" + _outside(c, m)
    if m.half < abs(m.diff):
        return INCONCLUSIVE, f"the 95 % CI excludes 0 before Holm, not after (p_holm {q:.3g})" + _outside(c, m)
    n = seeds_needed(m.diff, m.sd)
    more = f"~{n} seeds at this spread" if n else "more than 1000 seeds at this spread"
    return INCONCLUSIVE, (f"needs a 95 % CI half-width below {abs(m.diff):.2f} (now {m.half:.2f}): {more}"
                          + _outside(c, m))


def _outside(c: Claim, m: Measured) -> str:
    """Where the paper's own A - B lies outside the measured 95 % CI (before Holm): the gap it
    prints is not what these records show, even where they cannot tell the sign."""
    if c.paper_diff is None or abs(c.paper_diff - m.diff) <= m.half:
        return ""
    return (f"; the paper's A - B ({c.paper_diff:+.2f}) lies outside the 95 % CI "
            f"[{m.diff - m.half:+.2f}, {m.diff + m.half:+.2f}]")


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


def _flat(f: Flatness | None) -> str:
    if f is None:
        return "-"
    if f.flat is None:
        return f"? (no eval at round {f.start})"
    return f"{'yes' if f.flat else 'no'} ({f.gain:+.2f})"


def _row(o: Outcome) -> list[str]:
    c, m = o.claim, o.measured
    measured = "-" if m is None else f"{m.mean_a:.2f} vs {m.mean_b:.2f}: {m.diff:+.2f} ± {m.half:.2f} ({len(m.seeds)})"
    p = "-" if m is None or m.p is None else f"{m.p:.3g}"
    q = "-" if o.p_holm is None else f"{o.p_holm:.3g}"
    marks = "; ".join(f"pre-fix {x}" for x in o.pre_fix)
    recs = " ".join(r[:8] for r in o.runs) if o.runs else "none"
    return [f"{esc(c.a)} vs {esc(c.b)}", esc(c.group), f"{esc(c.setting)} ({esc(c.column)})", _fig(c), measured,
            p, q, f"**{o.verdict}**" + (" (see the note above)" if c.not_testable else f": {esc(o.why)}"),
            f"{_flat(o.flat[0])} / {_flat(o.flat[1])}",
            esc(o.budget), recs + (f" ({esc(marks)})" if marks else "")]


HEAD = ["Claim", "Group", "Setting (paper)", "Paper A vs B", "Measured A vs B: A - B ± 95 % CI (seeds)", "p",
        "p_holm", "Verdict", "Flat A / B", "Budget", "Records"]


def _rules(m: int, n_records: int) -> list[str]:
    return [
        f"Generated by `fedbench claims` from {n_records} result records and the claim files under "
        f"`leaderboard/claims/` (committed report: `{REGENERATE}`); do not edit by hand.",
        "",
        "- Claim: a cell pair of a paper's table, \"A beats B\" (or trails it) under one resource group "
        "and data setting, with the two figures the paper prints. Measured: the committed records of A and "
        "B in the same cohort (resource label, federation, task config) and setting, paired by seed as "
        "`fedbench compare` pairs them; values on the tables' scale (x100 for percent metrics).",
        f"- p: two-sided paired t-test of A - B over the shared seeds; p_holm: Holm-Bonferroni over the {m} "
        "testable claims with a p (every paper of this report).",
        f"- Verdict: **reproduced** = the measured A - B has the paper's sign and p_holm < {ALPHA} (the paired-t "
        "confidence interval at the level of the claim's Holm step excludes 0); **reversed** = the opposite "
        f"sign and p_holm < {ALPHA}; **inconclusive** = otherwise, with the 95 % CI half-width that would "
        "exclude 0 at the measured difference and the seeds that would take at the measured spread (before "
        "Holm), and whether the paper's own A - B lies outside the 95 % CI (the records then bound the gap "
        "away from the paper's even where they cannot tell its sign); **not testable here** = the claim file "
        "says why (the measurement is shown, outside Holm), or no records pair A and B (then the command and "
        "an estimated cost).",
        f"- Flat: whether the seed-mean learning curve gained under {FLAT_GAIN:g} point over the last fifth of "
        "its rounds (from round R - ceil(R/5) to the last evaluated round R; `?` when it was not evaluated "
        "at that round); `no` means the run stopped while still climbing.",
        "- Pre-fix: paired records created before a correction of the method or setting was committed "
        "(`run.created_at` earlier than the fix's commit time, listed in `leaderboard/claims/fixes.yaml`); "
        "they show the behaviour before the fix.",
        "- Estimated cost of the runs not done here, per method: runs missing (seeds, at least "
        f"{MIN_SEEDS}, less those recorded) x rounds (the claim's budget) x measured s/round (seconds_total / "
        "rounds of that method's committed records on the task: at the claim's budget, else at its other "
        "fields, else any; a method with no record is timed from the other's and the text says so), on the "
        "machine that wrote those records; and the training work in TFLOPs (measured per round on the same "
        "records), from which a GPU's time follows at its sustained rate.",
    ]


def render_claims(papers: Sequence[tuple[str, str, list[Outcome]]], n_records: int) -> str:
    """The report of ``papers`` ((name, title, outcomes), in order)."""
    outcomes = [o for _, _, os_ in papers for o in os_]
    m = sum(o.p_holm is not None for o in outcomes)
    counts = Counter(o.verdict for o in outcomes)
    lines = ["# Paper claims tested on the committed records", ""] + _rules(m, n_records)
    lines += ["", f"{len(outcomes)} claims: " + ", ".join(
        f"{counts[v]} {v}" for v in (REPRODUCED, REVERSED, INCONCLUSIVE, NOT_TESTABLE)) + "."]
    for name, title, os_ in papers:
        lines += ["", f"## {esc(title)}", ""]
        tc = Counter(o.verdict for o in os_)
        lines.append(f"`{esc(name)}`: {len(os_)} claims, " + ", ".join(f"{tc[v]} {v}" for v in sorted(tc)) + ".")
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
                    [[f"{esc(o.claim.a)} vs {esc(o.claim.b)}", esc(o.claim.group),
                      f"{esc(o.claim.setting)} ({esc(o.claim.column)})", _fig(o.claim),
                      f"**{o.verdict}**: {esc(o.why)}", o.cost] for o in missing])
    return "\n".join(lines) + "\n"


def build_report(claims_dir: str | Path, records: list[dict], papers: Sequence[str]) -> str:
    """The report of ``papers`` (claim files under ``claims_dir``) on ``records``; Holm over
    every paper's claims together."""
    fixes = load_fixes(claims_dir)
    loaded = [(p, *load_claims(claims_dir, p)) for p in papers]
    outcomes = evaluate([c for _, _, cs in loaded for c in cs], records, fixes)
    it = iter(outcomes)
    grouped = [(p, title, [next(it) for _ in cs]) for p, title, cs in loaded]
    return render_claims(grouped, len(records))


def write_claims(out: str | Path, text: str) -> Path:
    return write_text(Path(out), text)
