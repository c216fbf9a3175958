"""What a claim's records are and what its missing runs would cost, for the claims report
(:mod:`~fedbench.leaderboard.claims_report`): the budget line of a measured claim, the
command and estimated cost of a claim not run, and the records of both methods that exist
at another budget (another round count) in the claim's setting and resource group.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

from fedbench.errors import UserError
from fedbench.leaderboard.claims import Claim, claim_cells, has_fields, measure
from fedbench.leaderboard.groups import Section, raw_variant, show_value
from fedbench.leaderboard.render import esc
from fedbench.leaderboard.table import BUDGET_FIELDS, value_key

__all__ = ["MIN_SEEDS", "RunsCost", "Timing", "budget_line", "estimate", "other_budgets", "runs_cost",
           "seconds_per_round", "timing_source"]

#: the fewest seeds a run not done here is costed with (the evidence presets' rule)
MIN_SEEDS = 5


def budget_line(recs: list[dict]) -> str:
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


def _seeds_recorded(c: Claim, recs: list[dict], method: str, where: tuple) -> set:
    """The seeds of ``method``'s records in the claim's setting and resource label with ``where``."""
    return {r["run"]["run_config"]["seed"] for r in recs
            if r["run"]["method"] == method and r["run"]["run_config"]["setting"] == c.setting
            and (r["run"].get("resource_label") or "-") == c.roc and has_fields(r, where)}


@dataclass(frozen=True)
class Timing:
    """The records that time a run (:func:`timing_source`) and what they are."""

    records: list  # the records whose s/round times the run
    label: str  # which records, in words
    unlike: str = ""  # set when none has the run's task config: its fields no record has (``task.model=x``)


def timing_source(m: str, other: str | None, where: tuple, task: str, task_recs: list[dict]) -> Timing:
    """The records that time ``m``'s missing runs, and what they are: ``m``'s own (those at
    ``where``, else at its fields other than rounds, else at its task fields, which set the
    work per step: the model, the sequence length, the data per client), else ``other``'s
    (chosen the same way), else any method's with those task fields; only where no record has
    them, ``m``'s (else ``other``'s, else every record of the task) at another task config,
    which the label and :attr:`Timing.unlike` name (``none with task.model=mpnet-base``), so
    neither a method nor a model never run here is passed off as measured. The claims report
    and ``fedbench sweep --dry-run`` (:func:`~fedbench.leaderboard.sweep_cost.run_estimate`)
    time runs with it."""
    shape = tuple((k, v) for k, v in where if k != "rounds")  # s/round does not depend on rounds
    tcfg = tuple((k, v) for k, v in where if k.startswith("task."))
    methods = [(f"{m}'s", [r for r in task_recs if r["run"]["method"] == m]),
               (f"no record of {m}: {other}'s", [r for r in task_recs if r["run"]["method"] == other])]
    for label, own in methods:
        for fields, at in ((where, ""), (shape, " at other round counts"), (tcfg, " at other budgets")):
            src = [r for r in own if has_fields(r, fields)]
            if src:
                return Timing(src, f"{label} {len(src)} records{at}")
    if not tcfg:
        return Timing(task_recs, f"no record of {m}: all {len(task_recs)} records of {task}")
    same = [r for r in task_recs if has_fields(r, tcfg)]
    if same:
        both = m if other is None else f"{m} or {other}"
        return Timing(same, f"no record of {both} with its task config: all {len(same)} records of {task} with it")
    unseen = [(k, v) for k, v in tcfg if not any(has_fields(r, ((k, v),)) for r in task_recs)]
    unlike = ", ".join(f"{k}={show_value(v)}" for k, v in unseen or tcfg)
    for label, own in methods:
        if own:
            return Timing(own, f"{label} {len(own)} records at other budgets, none with {unlike}", unlike)
    return Timing(task_recs, f"no record of {m}: all {len(task_recs)} records of {task}, none with {unlike}", unlike)


def seconds_per_round(recs: list[dict]) -> float | None:
    """Measured s/round of ``recs``: mean ``seconds_total`` / rounds completed (None: none timed)."""
    return _per_round(recs, "seconds_total")


def estimate(c: Claim, task_recs: list[dict]) -> str:
    """The command for the claim's missing runs and their estimated cost (:func:`runs_cost` at
    the claim's fields, the task's seeds, at least :data:`MIN_SEEDS`): per method the runs
    missing x rounds x measured s/round, and which records timed it; and the training work those
    runs would do (measured TFLOPs per round, same records), from which a GPU's time follows at
    its sustained rate. The command is :meth:`Claim.run_command`."""
    if not c.command:
        return "no command: not a run this suite can do"
    cmd = esc(c.run_command())
    if not task_recs:
        return f"{cmd}; cost not estimated (no committed record of {esc(c.task)} to time)"
    seeds = max(MIN_SEEDS, len({r["run"]["run_config"]["seed"] for r in task_recs}))
    cost = runs_cost(c, {c.a: c.where, c.b: c.where}, seeds, task_recs)
    if cost.why:
        return f"{cmd}; cost not estimated ({cost.why})"
    have = "".join(f", {esc(m)} has {n} of them" for m, n in cost.done if n)
    work = "" if cost.tflops is None or not cost.parts else (
        f"; {cost.tflops:,.0f} TFLOPs of training in all (measured per round; "
        "a GPU's time = that / its sustained TFLOP/s, not measured here)")
    return (f"{cmd}; est. {cost.minutes:.0f} CPU-min = {' + '.join(cost.parts) or 'no run missing'} "
            f"(2 methods x {seeds} seeds{have}){work}")


@dataclass(frozen=True)
class RunsCost:
    """What the missing runs of a claim's two methods would cost (:func:`runs_cost`)."""

    runs: int  # missing, both methods
    minutes: float  # CPU-minutes, measured s/round x rounds x runs
    tflops: float | None  # training work, measured TFLOPs/round x rounds x runs (None: not measured)
    parts: tuple  # per method with runs missing: "m N runs x R rounds x S s/round (source...)"
    done: tuple  # ((method, seeds recorded), ...)
    why: str = ""  # set when not estimated: no record times a method's runs
    unlike: tuple = ()  # the task fields no timing record has, where a method was timed at another config


def runs_cost(c: Claim, wheres: dict, seeds: int, task_recs: list[dict]) -> RunsCost:
    """What the runs of claim ``c``'s methods still missing at their fields (``wheres``:
    {method: where}) would cost: per method the runs missing (``seeds`` less those recorded
    there) x rounds (the ``where``'s, else the timing records') x measured s/round
    (``seconds_total`` / rounds of the records :func:`timing_source` picks: its own where it has
    any, and ``parts`` says which), and their measured TFLOPs per round."""
    minutes, tflops, parts, done, runs, unlike = 0.0, 0.0, [], [], 0, ()
    for m, other in ((c.a, c.b), (c.b, c.a)):
        where = dict(wheres[m])
        done.append((m, len(_seeds_recorded(c, task_recs, m, wheres[m]))))
        missing = max(0, seeds - done[-1][1])
        if not missing:
            continue
        timing = timing_source(m, other, wheres[m], c.task, task_recs)
        src, label = timing.records, timing.label
        spr = seconds_per_round(src)
        if spr is None:
            return RunsCost(0, 0.0, None, (), (), f"no timed record for {esc(m)}")
        unlike += (timing.unlike,) if timing.unlike else ()
        rounds = int(where["rounds"]) if "rounds" in where else max(r["run"]["run_config"]["rounds"] for r in src)
        tpr = _per_round(src, "tflops_total")
        runs += missing
        minutes += spr * rounds * missing / 60
        tflops = None if tflops is None or tpr is None else tflops + tpr * rounds * missing
        parts.append(f"{esc(m)} {missing} runs x {rounds} rounds x {spr:.1f} s/round ({esc(label)}"
                     + ("" if tpr is None else f", {tpr:.2f} TFLOPs/round") + ")")
    return RunsCost(runs, minutes, tflops, tuple(parts), tuple(done), unlike=unlike)


def other_budgets(c: Claim, sec: Section | None, task_recs: list[dict]) -> str:
    """``rounds=10 (fed_hello 3 seeds, flexlora 3 seeds; A - B -1.79 ± 4.10)``, ``; `` between
    budgets: the ok records of A or B in the claim's setting and resource label that match its
    ``where`` except for its budget fields (:data:`~fedbench.leaderboard.table.BUDGET_FIELDS`:
    rounds), at budgets other than the claim's, with A - B and its 95 % CI where the two share
    2 seeds; ``""`` when there are none (or the claim fixes no budget)."""
    keys = [k for k, _ in c.where if k in BUDGET_FIELDS]
    if not keys:
        return ""
    loose = tuple((k, v) for k, v in c.where if k not in BUDGET_FIELDS)
    wanted = tuple((k, v) for k, v in c.where if k in BUDGET_FIELDS)
    found: dict = defaultdict(lambda: defaultdict(set))  # budget -> method -> seeds
    for r in task_recs:
        run = r["run"]
        if (r["status"] == "ok" and run["method"] in (c.a, c.b) and run["run_config"]["setting"] == c.setting
                and (run.get("resource_label") or "-") == c.roc and has_fields(r, loose)):
            variant = raw_variant(r)
            at = tuple((k, variant.get(k)) for k in keys)
            if at != wanted:
                found[at][run["method"]].add(run["run_config"]["seed"])
    parts = []
    for at in sorted(found, key=lambda b: [(k, value_key(v) if v is not None else ()) for k, v in b]):
        name = ", ".join(f"{k}={show_value(v) if v is not None else '-'}" for k, v in at)
        seeds = ", ".join(f"{esc(m)} {len(found[at][m])} seed{'s' if len(found[at][m]) != 1 else ''}"
                          for m in (c.a, c.b) if found[at][m])
        parts.append(f"{name} ({seeds}{_paired_at(c, sec, loose + at)})")
    return "; ".join(parts)


def _paired_at(c: Claim, sec: Section | None, where: tuple) -> str:
    """``; A - B +1.00 ± 2.00`` at ``where`` when A's and B's rows there share 2 seeds, else ``""``."""
    try:
        _, _, a, b = claim_cells(sec, c, c.setting, tuple(sorted(where)), tuple(sorted(where)))
    except UserError:  # several variants match: no one pair to show
        return ""
    m = measure(a, b) if a and b else None
    return "" if m is None else f"; A - B {m.diff:+.2f} ± {m.half:.2f}"
