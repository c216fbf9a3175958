"""Where a learning curve stands at its end: the rule the claims report applies to the
curves it compares (:mod:`fedbench.leaderboard.claims`).

A run stopped while still climbing can rank methods by their speed, not by where they
end, so the report says for every compared curve how it ends: the **change over the last
fifth of the rounds**, judged by its size against :data:`FLAT_GAIN` (1 point on the
displayed scale): **flat** when ``|change| < FLAT_GAIN``, **rising** when it gained
``FLAT_GAIN`` or more, **falling** when it lost that much (a falling curve is not flat: it
ends below where it was). With ``R`` the last evaluated round, the last fifth starts at
round ``R - ceil(R / 5)``; the change is the value at ``R`` minus the value at that round.
A curve that was not evaluated at that round cannot be judged (``state is None``): sparse
evaluation is not read as flatness.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

__all__ = ["FALLING", "FLAT", "FLAT_GAIN", "RISING", "Flatness", "flatness"]

#: the most a curve may move (up or down) over its last fifth of rounds and still count as flat
FLAT_GAIN = 1.0
FLAT, RISING, FALLING = "flat", "rising", "falling"


@dataclass(frozen=True)
class Flatness:
    start: int  # the round the last fifth starts at
    end: int  # the last evaluated round
    gain: float | None  # value at ``end`` minus value at ``start``; None: no value at ``start``
    state: str | None  # FLAT, RISING or FALLING; None when the change is unknown

    @property
    def flat(self) -> bool | None:
        """``|gain| < FLAT_GAIN``; None when the change is unknown."""
        return None if self.state is None else self.state == FLAT


def flatness(points: Sequence[tuple[int, float]], threshold: float = FLAT_GAIN) -> Flatness | None:
    """How the curve ``points`` ((round, value) pairs, any order, one per round, rounds >= 1)
    ends; None for an empty curve. See the module docstring."""
    if not points:
        return None
    values = dict(points)
    end = max(values)
    start = end - math.ceil(end / 5)
    if start not in values:
        return Flatness(start, end, None, None)
    gain = values[end] - values[start]
    state = FLAT if abs(gain) < threshold else RISING if gain > 0 else FALLING
    return Flatness(start, end, gain, state)
