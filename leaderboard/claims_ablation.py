"""The ablations under a claim file's ``explained_by``: why a paper's gap differs from ours,
measured from the records rather than typed into the claim file.

An ablation changes one factor of a claim's cell toward the paper's setting (the authors'
rules, the tiers' layer budgets, the rounds, the model's depth) and asks whether the claim's
A - B moves. It names the factor in words, the data settings, and ``arm``: fields that replace
or extend the group's ``where`` for both methods, or for ``methods`` only (``method.<field>``
only where the method has that field, as in ``where``)::

    explained_by:
      flora:
        kind: measurement
        text: why the change should matter ...
        ablations:
          - factor: "the code's two departures"
            settings: [iid]
            arm: {method.server_rule: authors_code, method.train_head: false}
            methods: [flora]
            command: fedbench sweep benchmarks/flexlora_flora_authors_cpu.yaml --only ...
          - factor: "the authors' rule on top of the frozen head"
            settings: [iid]
            arm: {method.server_rule: authors_code, method.train_head: false}
            methods: [flora]
            against: "the frozen head alone"  # another factor of this list (not shown)

Measured per ablation: the claim's A - B at the group's fields (the base gap; with
``against``, A - B with that factor's arm instead), A - B with the arm's fields (the arm gap),
each a paired mean with its 95 % CI over the seeds both rows have, and the change of the gap,
arm minus base, paired over the seeds all four cells have (the same paired t as every claim,
:func:`~fedbench.leaderboard.claims.measure`). A change whose CI excludes 0 moves the gap, and
its share of the way to the paper's gap starts from the base gap over the change's own seeds
(the base may have more seeds than the arm: the share does not mix seed sets); otherwise the
CI half-width is the smallest change the seeds could resolve (the ablation's power). An arm
that A and B share under 2 seeds of is not measured yet: its line gives its command and what
its runs to :data:`ARM_SEEDS` seeds would cost
(:func:`~fedbench.leaderboard.claims_cost.runs_cost`, each method at its own fields).
"""

from __future__ import annotations

from dataclasses import dataclass

from fedbench.leaderboard.claims import Ablation, Claim, Measured, claim_cells, measure
from fedbench.leaderboard.claims_cost import RunsCost, runs_cost
from fedbench.leaderboard.groups import Section

__all__ = ["ARM_SEEDS", "AblationResult", "ablation_line", "measure_ablation"]

#: the seeds an arm not measured yet is costed with (3 per arm: the report states its power)
ARM_SEEDS = 3


@dataclass(frozen=True)
class AblationResult:
    ablation: Ablation
    base: Measured | None  # A - B at the group's fields (or with the arm of ``ablation.against``)
    arm: Measured | None  # A - B with the arm's fields
    change: Measured | None  # (arm gap) - (base gap), paired by seed
    seeds_arm: tuple = ()  # the seeds A and B have with the arm's fields (when too few to measure)
    cost: RunsCost | None = None  # when too few: what the arm's runs to ARM_SEEDS would cost


def _gap(sec: Section, c: Claim, ab: Ablation | None, setting: str) -> dict:
    """{seed: A - B} of the claim's methods at the claim's fields (``ab`` None) or with the
    arm's, over the seeds both rows have."""
    wa, wb = (c.where, c.where) if ab is None else (ab.where(c.where, c.a), ab.where(c.where, c.b))
    _, _, a, b = claim_cells(sec, c, setting, wa, wb)
    return {s: a[s] - b[s] for s in sorted(set(a) & set(b))}


def _as_measured(gap: dict) -> Measured | None:
    """A - B of the seeds in ``gap`` as a paired measurement (None under 2 seeds)."""
    return measure(gap, dict.fromkeys(gap, 0.0)) if len(gap) >= 2 else None


def measure_ablation(sec: Section | None, c: Claim, ab: Ablation, task_recs: list[dict] = ()) -> AblationResult:
    """The base gap of claim ``c`` (at its fields, or with the arm ``ab.against``), the arm gap
    and their change (``c``'s setting is the ablation's); an arm with under 2 seeds gets the
    cost of its runs to :data:`ARM_SEEDS` from ``task_recs`` (the records of the claim's task)."""
    base, arm = ({}, {}) if sec is None else (_gap(sec, c, ab.against, ab.setting), _gap(sec, c, ab, ab.setting))
    both = sorted(set(base) & set(arm))
    change = measure({s: arm[s] for s in both}, {s: base[s] for s in both}) if len(both) >= 2 else None
    measured = _as_measured(arm)
    cost = None if measured is not None or not task_recs else runs_cost(
        c, {m: ab.where(c.where, m) for m in (c.a, c.b)}, ARM_SEEDS, task_recs)
    return AblationResult(ab, _as_measured(base), measured, change, tuple(sorted(arm)), cost)


def _ci(m: Measured) -> str:
    return f"{m.diff:+.2f} ± {m.half:.2f} ({len(m.seeds)} seeds)"


def _cost_text(cost: RunsCost | None) -> str:
    """``; 3 seeds need N runs, est. M CPU-min`` (and which task fields no timing record has), or
    why it is not estimated; empty without a cost or a run missing."""
    if cost is None:
        return ""
    if cost.why:
        return f"; cost not estimated ({cost.why})"
    if not cost.runs:
        return ""
    unlike = f" (timed from records without {'; '.join(dict.fromkeys(cost.unlike))})" if cost.unlike else ""
    return f"; {ARM_SEEDS} seeds need {cost.runs} runs, est. {cost.minutes:.0f} CPU-min{unlike}"


def ablation_line(c: Claim, r: AblationResult) -> str:
    """One line: the factor, both gaps, the change and what it says about the paper's gap."""
    ab = r.ablation
    head = f"{ab.factor} ({ab.arm_text()}), {ab.setting}: "
    if r.arm is None:
        run = f"; run: `{ab.command}`" if ab.command else ""
        return head + (f"not measured yet (A and B share {len(r.seeds_arm)} of the arm's seeds, 2 needed{run}"
                       f"{_cost_text(r.cost)})")
    paper = "" if c.paper_diff is None else f"; the paper's A - B {c.paper_diff:+.2f}"
    base = "not measured" if r.base is None else _ci(r.base)
    ref = "at the claim's fields" if ab.against is None else f"with the arm '{ab.against.factor}'"
    text = head + f"A - B {base} {ref}, {_ci(r.arm)} with the arm{paper}"
    ch = r.change
    if ch is None:
        return text + "; the change needs 2 seeds that all four cells have"
    p = "" if ch.p is None else f", p {ch.p:.2g}"
    text += f"; the change {ch.diff:+.2f} ± {ch.half:.2f} (paired over seeds {', '.join(map(str, ch.seeds))}{p})"
    if abs(ch.diff) <= ch.half:
        return text + f": no move resolved (these seeds resolve a change beyond ±{ch.half:.2f})"
    if c.paper_diff is None or r.base is None:
        return text + ": moves the gap"
    # the share starts from the base gap over the change's own seeds (ch.mean_b), not over all of the base's
    toward = (c.paper_diff - ch.mean_b) * ch.diff > 0
    share = ch.diff / (c.paper_diff - ch.mean_b) if c.paper_diff != ch.mean_b else 0.0
    start = "" if r.base.seeds == ch.seeds else f" (from our gap over those seeds, {ch.mean_b:+.2f})"
    return text + (f": moves the gap toward the paper's, {100 * share:.0f} % of the way{start}" if toward
                   else f": moves the gap away from the paper's{start}")
