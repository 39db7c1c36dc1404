"""The one rough wording of a duration that sentences about waits and ages use."""

from __future__ import annotations

import pytest

from traindeck.backend.core import rough_duration


@pytest.mark.parametrize(("seconds", "said"), [
    (0.2, "1 s"), (-3, "1 s"), (45, "45 s"), (119.4, "119 s"), (120, "2 min"), (90 * 60, "90 min"),
    (7199, "120 min"), (7200, "2.0 h"), (3.5 * 3600, "3.5 h"),
])
def test_seconds_then_minutes_then_hours(seconds: float, said: str) -> None:
    assert rough_duration(seconds) == said
