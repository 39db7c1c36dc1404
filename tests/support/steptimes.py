"""The rule by which traindeck's recorded step times are held to a script's own clock.

The hook's step boundary and the script's clock are read a few instructions apart. Where the machine deschedules a
process between the two (2 cores shared by test workers and ranks), or the hook's bookkeeping after a step runs
long, one boundary moves: one step's figure loses what the next gains (seen: 15.6 ms and 23.8 ms recorded where the
script measured 19.7 ms and 19.8 ms). So the rule holds boundaries, not single steps, to the script's: after each
step, the recorded and the script's elapsed time since the first compared step's start agree within 5% of a mean
step, with room for one moved boundary in ten (at least one), and all the steps together agree within 3%.
"""

from __future__ import annotations

from collections.abc import Sequence

EACH = 0.05
TOGETHER = 0.03


def assert_steps_agree(pairs: Sequence[tuple[float, float]], context: object = "") -> None:
    """pairs: (recorded step ms, the script's own ms) for consecutive steps."""
    assert pairs, context
    mean = sum(own for _recorded, own in pairs) / len(pairs)
    moved, drift = [], 0.0
    for i, (recorded, own) in enumerate(pairs):
        drift += recorded - own
        if abs(drift) > EACH * mean:
            moved.append((i, round(drift, 3), recorded, own))
    assert len(moved) <= max(1, len(pairs) // 10), (context, moved)
    recorded_total = sum(recorded for recorded, _own in pairs)
    own_total = sum(own for _recorded, own in pairs)
    assert abs(recorded_total - own_total) <= TOGETHER * own_total, (context, recorded_total, own_total)
