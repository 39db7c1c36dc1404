"""The rule tests hold recorded step times to (support.steptimes): one moved boundary passes, a drift fails."""

from __future__ import annotations

import pytest
from support.steptimes import assert_steps_agree

# CI's FSDP2 run, rank 1: the first compared step's start moved 8.5 ms, every later boundary agrees within 0.4 ms.
FIRST_BOUNDARY_MOVED = [(137.906, 129.357), (264.626, 264.672), (363.327, 363.622), (147.93, 147.79),
                        (116.773, 116.622), (110.928, 110.91), (125.297, 125.43), (101.106, 100.93),
                        (99.467, 99.476), (107.88, 107.87)]


def test_one_moved_boundary_passes_wherever_it_is() -> None:
    assert_steps_agree(FIRST_BOUNDARY_MOVED)
    steady = [(100.0, 100.0)] * 10
    inner = list(steady)
    inner[4], inner[5] = (80.0, 100.0), (120.0, 100.0)  # one step loses what the next gains
    assert_steps_agree(inner)
    last = list(steady)
    last[-1] = (92.0, 100.0)
    assert_steps_agree(last)


def test_a_recording_that_drifts_or_moves_many_boundaries_fails() -> None:
    with pytest.raises(AssertionError):
        assert_steps_agree([(104.0, 100.0)] * 10)  # each step 4% long: the boundaries walk away
    moved = [(100.0, 100.0)] * 10
    moved[1], moved[2], moved[5], moved[6] = (90.0, 100.0), (110.0, 100.0), (90.0, 100.0), (110.0, 100.0)
    with pytest.raises(AssertionError):
        assert_steps_agree(moved)  # two boundaries moved in ten steps
