"""The rule by which traindeck's recorded step times are held to a script's own clock.

The hook's step boundary and the script's clock are read a few instructions apart. Where the machine deschedules a
process between the two (2 cores shared by test workers and ranks), or the hook's bookkeeping after a step runs
long, one boundary moves: one step's figure loses what the next gains (seen: 15.6 ms and 23.8 ms recorded where the
script measured 19.7 ms and 19.8 ms). The first compared step's start is such a boundary too (seen in CI: 137.9 ms
recorded where the script measured 129.4 ms, then every step within 0.2 ms). So the rule holds boundaries, not
single steps, to the script's: each boundary's offset (the recorded less the script's elapsed time since the first
compared step's start) agrees with the offsets' median within 5% of a mean step, with room for one moved boundary
in ten (at least one), and all the steps together agree within 3%.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence

EACH = 0.05
TOGETHER = 0.03


def assert_steps_agree(pairs: Sequence[tuple[float, float]], context: object = "") -> None:
    """pairs: (recorded step ms, the script's own ms) for consecutive steps."""
    assert pairs, context
    mean = sum(own for _recorded, own in pairs) / len(pairs)
    offsets, drift = [0.0], 0.0  # offsets[j]: boundary j (the start of step j, then the end of the last)
    for recorded, own in pairs:
        drift += recorded - own
        offsets.append(drift)
    usual = statistics.median(offsets)
    moved = [(j, round(offset - usual, 3)) for j, offset in enumerate(offsets) if abs(offset - usual) > EACH * mean]
    assert len(moved) <= max(1, len(pairs) // 10), (context, moved, pairs)
    recorded_total = sum(recorded for recorded, _own in pairs)
    own_total = sum(own for _recorded, own in pairs)
    assert abs(recorded_total - own_total) <= TOGETHER * own_total, (context, recorded_total, own_total)
