"""The verdict of one paper claim on the records (``fedbench claims``; the report is
:mod:`~fedbench.leaderboard.claims_report`).

A claim is "A - B has the sign of the paper's A - B" with the paper's own A - B where it
prints both figures. With the measured mean paired difference ``d``, its 95 % CI
``[d - h, d + h]`` (paired t, before Holm) and its Holm-Bonferroni adjusted p over the
report's testable claims (:func:`~fedbench.leaderboard.compare.holm`), in this order:

* **not testable here**: the claim file says why the records cannot test it (the
  measurement is still shown, outside Holm);
* **not run**: no records pair A and B in the claim's cell (the report gives the command,
  an estimated cost, and the records of another budget where some exist);
* **reversed**: the opposite sign with p_holm < 0.05 (the paper's sign itself fails);
* **not reproduced at the paper's size**: the paper's A - B lies outside the 95 % CI,
  whatever the sign test says: the records bound the difference away from the paper's,
  a smaller gap (or none) or a larger one;
* **reproduced**: the paper's sign with p_holm < 0.05 (and the paper's A - B inside the CI,
  or a claim whose figures the paper does not print);
* **inconclusive**: otherwise, with the 95 % CI half-width that would exclude 0 at the
  measured difference and the seeds that would take at the measured spread.
"""

from __future__ import annotations

from fedbench.leaderboard.claims import Claim, Measured, seeds_needed
from fedbench.leaderboard.compare import ALPHA

__all__ = ["INCONCLUSIVE", "NOT_AT_SIZE", "NOT_RUN", "NOT_TESTABLE", "REPRODUCED", "REVERSED", "VERDICTS",
           "outside_ci", "verdict"]

REPRODUCED, NOT_AT_SIZE, REVERSED = "reproduced", "not reproduced at the paper's size", "reversed"
INCONCLUSIVE, NOT_RUN, NOT_TESTABLE = "inconclusive", "not run", "not testable here"
#: every verdict, in the order the report counts them
VERDICTS = (REPRODUCED, NOT_AT_SIZE, REVERSED, INCONCLUSIVE, NOT_RUN, NOT_TESTABLE)


def outside_ci(c: Claim, m: Measured) -> bool:
    """The paper's A - B lies outside the measured 95 % CI of A - B (False without the paper's figures)."""
    return c.paper_diff is not None and abs(c.paper_diff - m.diff) > m.half


def _ci(m: Measured) -> str:
    return f"[{m.diff - m.half:+.2f}, {m.diff + m.half:+.2f}]"


def verdict(c: Claim, m: Measured | None, q: float | None) -> tuple[str, str]:
    """(verdict, what it rests on in one phrase) of claim ``c`` with measurement ``m`` and
    Holm-adjusted p ``q`` (see the module docstring)."""
    if c.not_testable:
        return NOT_TESTABLE, c.not_testable
    if m is None:
        return NOT_RUN, "no records pair the two methods in this setting"
    settled = q is not None and q < ALPHA and m.diff != 0
    same = (m.diff > 0) == (c.sign > 0)
    if settled and not same:
        return REVERSED, f"Holm p {q:.3g} < {ALPHA}"
    if outside_ci(c, m):
        toward = c.sign * m.diff  # the measured difference in the paper's direction
        side = ("larger than the paper's" if toward - m.half > abs(c.paper_diff) else
                "of the other sign" if toward + m.half < 0 else "smaller than the paper's")
        sign = (f"the sign is the paper's (Holm p {q:.3g})" if settled else
                "the sign is not settled" + (f" (p_holm {q:.3g})" if q is not None else ""))
        return NOT_AT_SIZE, (f"the paper's A - B ({c.paper_diff:+.2f}) lies outside the 95 % CI {_ci(m)}: the "
                             f"measured gap is {side}; {sign}")
    if settled:
        return REPRODUCED, f"Holm p {q:.3g} < {ALPHA}"
    if m.diff == 0:
        return INCONCLUSIVE, "no difference measured"
    if m.half < abs(m.diff):
        return INCONCLUSIVE, f"the 95 % CI excludes 0 before Holm, not after (p_holm {q:.3g})"
    n = seeds_needed(m.diff, m.sd)
    more = f"~{n} seeds at this spread" if n else "more than 1000 seeds at this spread"
    return INCONCLUSIVE, f"needs a 95 % CI half-width below {abs(m.diff):.2f} (now {m.half:.2f}): {more}"
