"""The claims report's figure, one per paper (``fedbench claims --out``; needs the ``plot``
extra): every measured claim's A - B with its 95 % CI beside the A - B the paper prints, so how
far each printed gap lies from what the records measure is seen at a glance. Written next to
the report as ``claims_gaps/<paper>.png`` and linked under the paper's heading
(:func:`~fedbench.leaderboard.claims_report.render_claims`).

The rows (:func:`gap_rows`) are computed without matplotlib, so they are tested without
drawing; :func:`plot_claims` draws them with the Agg backend.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

from fedbench.leaderboard.claims_verdict import INCONCLUSIVE, NOT_AT_SIZE, REPRODUCED, REVERSED
from fedbench.leaderboard.output import save_png

__all__ = ["FOLDER", "GapRow", "figure_link", "gap_rows", "plot_claims"]

#: The figures' folder, next to the report.
FOLDER = "claims_gaps"
#: One colour per verdict of a measured claim (reproduced green, reversed red).
VERDICT_COLOURS = {REPRODUCED: "#2ca02c", NOT_AT_SIZE: "#1f77b4", REVERSED: "#d62728", INCONCLUSIVE: "#7f7f7f"}


@dataclass(frozen=True)
class GapRow:
    """One measured claim as the figure draws it."""

    label: str  # "A vs B, group, setting"
    diff: float  # measured A - B (mean over the paired seeds)
    half: float  # its 95 % CI half-width
    paper: float | None  # the paper's A - B (None: the figure was not legible)
    verdict: str


def gap_rows(outcomes: Sequence) -> list[GapRow]:
    """The rows of a paper's figure: its claims with a measurement that the report tests (not
    those "not testable here", whose measurement says nothing about the paper), in report order."""
    return [GapRow(f"{o.claim.a} vs {o.claim.b}, {o.claim.group}, {o.claim.setting}", o.measured.diff,
                   o.measured.half, o.claim.paper_diff, o.verdict)
            for o in outcomes if o.measured is not None and not o.claim.not_testable]


def figure_link(paper: str) -> str:
    """The figure's path relative to the report."""
    return f"{FOLDER}/{paper}.png"


def _figure(plt, title: str, rows: Sequence[GapRow]):
    height = 1.4 + 0.32 * len(rows)  # inches: the margins, then a line per claim
    fig, ax = plt.subplots(figsize=(9.0, height))
    ys = list(range(len(rows)))[::-1]  # the first claim on top
    for y, r in zip(ys, rows):
        colour = VERDICT_COLOURS.get(r.verdict, "#7f7f7f")
        ax.errorbar(r.diff, y, xerr=r.half, fmt="o", color=colour, ms=4, capsize=2, lw=1.2)
        if r.paper is not None:
            ax.plot(r.paper, y, "x", color="black", ms=6, mew=1.5)
    ax.axvline(0.0, color="#999999", lw=0.8, ls="--")
    ax.set_yticks(ys, [r.label for r in rows], fontsize=7)
    ax.set_ylim(-0.7, len(rows) - 0.3)
    ax.set_xlabel("A - B (points, the paper's scale): measured mean with its 95 % CI, and the paper's", fontsize=8)
    ax.set_title(title, fontsize=9)
    shown = [v for v in VERDICT_COLOURS if any(r.verdict == v for r in rows)]
    handles = [ax.errorbar([], [], xerr=[], fmt="o", color=VERDICT_COLOURS[v], ms=4, label=f"measured: {v}")
               for v in shown]
    handles.append(ax.plot([], [], "x", color="black", ms=6, mew=1.5, label="the paper's A - B")[0])
    ax.legend(handles=handles, fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.9 / height),
              ncol=len(handles), frameon=False)
    return fig


def plot_claims(papers: Sequence[tuple[str, str, Sequence]], out_dir: str | Path) -> list[Path]:
    """Draw the figure of each paper ((name, title, outcomes)) with a measured claim under
    ``out_dir/claims_gaps/``; returns the written paths, in paper order."""
    from fedbench.leaderboard.plots import pyplot

    plt, paths = pyplot(), []
    for name, title, outcomes in papers:
        rows = gap_rows(outcomes)
        if not rows:
            continue
        fig = _figure(plt, f"{title}: measured A - B against the paper's", rows)
        paths.append(save_png(plt, fig, Path(out_dir) / figure_link(name), Path(out_dir)))
    return paths
