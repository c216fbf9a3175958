"""Whether a learning curve has flattened: the rule the claims report applies to the
curves it compares (:mod:`fedbench.leaderboard.claims`).

A run stopped while still climbing can rank methods by their speed, not by where they
end, so the report says for every compared curve whether it is flat: **gained less than
:data:`FLAT_GAIN` (1 point on the displayed scale) over the last fifth of the rounds**.
With ``R`` the last evaluated round, the last fifth starts at round ``R - ceil(R / 5)``;
the gain is the value at ``R`` minus the value at that round. A curve that was not
evaluated at that round cannot be judged (``flat is None``): sparse evaluation is not
read as flatness.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

__all__ = ["FLAT_GAIN", "Flatness", "flatness"]

#: the most a curve may gain over its last fifth of rounds and still count as flat
FLAT_GAIN = 1.0


@dataclass(frozen=True)
class Flatness:
    start: int  # the round the last fifth starts at
    end: int  # the last evaluated round
    gain: float | None  # value at ``end`` minus value at ``start``; None: no value at ``start``
    flat: bool | None  # gain < FLAT_GAIN; None when the gain is unknown


def flatness(points: Sequence[tuple[int, float]], threshold: float = FLAT_GAIN) -> Flatness | None:
    """The flatness of the curve ``points`` ((round, value) pairs, any order, one per
    round, rounds >= 1); None for an empty curve. See the module docstring."""
    if not points:
        return None
    values = dict(points)
    end = max(values)
    start = end - math.ceil(end / 5)
    if start not in values:
        return Flatness(start, end, None, None)
    gain = values[end] - values[start]
    return Flatness(start, end, gain, gain < threshold)
