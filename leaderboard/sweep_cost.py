"""What a sweep's runs still to do would cost: ``fedbench sweep --dry-run`` prints it per run
and in total, timed as the claims report times a claim's missing runs
(:func:`~fedbench.leaderboard.claims_cost.timing_source`: measured s/round of the method's
records at the run's variant, else at other round counts, else at other budgets of its task
config, else any method's with it, and only then records of another task config, which the
line names), times the run's rounds.
"""

from __future__ import annotations

from fedbench.leaderboard.claims_cost import seconds_per_round, timing_source
from fedbench.leaderboard.groups import raw_variant

__all__ = ["run_estimate"]


def _variant(spec) -> tuple:
    """The (field, canonical value) pairs a record of ``spec`` would have (its raw variant)."""
    c = spec.configs()
    stub = {"run": {"run_config": c["run"], "method_config": c["method"], "task_config": c["task"],
                    "method_version": spec.method_cls.version}}
    return tuple(sorted(raw_variant(stub).items()))


def run_estimate(spec, task_recs: list[dict]) -> tuple[float | None, str, bool]:
    """(estimated seconds, what timed it, timed at another task config) of the run ``spec`` from
    ``task_recs`` (records of its task); ``(None, why, False)`` when no record is timed."""
    if not task_recs:
        return None, f"no record of {spec.task} to time", False
    timing = timing_source(spec.method, None, _variant(spec), spec.task, task_recs)
    spr = seconds_per_round(timing.records)
    if spr is None:
        return None, f"{timing.label}, none timed", False
    return spr * spec.run.rounds, f"{spec.run.rounds} rounds x {spr:.1f} s/round, {timing.label}", bool(timing.unlike)
