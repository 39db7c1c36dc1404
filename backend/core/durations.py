"""A duration said roughly, as a person says it in a sentence: "45 s", "12 min", "3.5 h".

Sentences that report a wait or an age (a stall, a stale build lock, a trial's time left) use this one wording; the
clock-style "1:02:03" of a run's duration is `runs.control.view.duration_text`.
"""

from __future__ import annotations

__all__ = ["rough_duration"]


def rough_duration(seconds: float) -> str:
    """Seconds under 2 minutes, minutes under 2 hours, then hours to a tenth; never "0 s"."""
    seconds = max(0.0, seconds)
    if seconds < 120:
        return f"{max(1, round(seconds))} s"
    if seconds < 7200:
        return f"{round(seconds / 60)} min"
    return f"{seconds / 3600:.1f} h"
