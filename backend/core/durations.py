"""Durations in words, two ways: said roughly, as a person says it in a sentence ("45 s", "12 min", "3.5 h":
`rough_duration`), and as a clock reads it ("1:02:03": `duration_text`).

Sentences that report a wait or an age (a stall, a stale build lock, a trial's time left) say it roughly; a run's
duration, an ETA, a moment since a run's start ("exited at 0:42") and a time-since-start axis read as a clock.
"""

from __future__ import annotations

__all__ = ["duration_text", "rough_duration"]


def rough_duration(seconds: float) -> str:
    """Seconds under 2 minutes, minutes under 2 hours, then hours to a tenth; never "0 s"."""
    seconds = max(0.0, seconds)
    if seconds < 120:
        return f"{max(1, round(seconds))} s"
    if seconds < 7200:
        return f"{round(seconds / 60)} min"
    return f"{seconds / 3600:.1f} h"


def duration_text(seconds: float | None) -> str:
    """0:07, 12:34, 1:02:03, 3 d 04:05:06; whole seconds (the fraction dropped: round first for the nearest one);
    a minus before a duration below zero (a tick left of a run's start); "" for None."""
    if seconds is None:
        return ""
    s = int(abs(seconds))
    sign = "-" if seconds < 0 and s else ""
    days, s = divmod(s, 86400)
    h, s = divmod(s, 3600)
    m, s = divmod(s, 60)
    if days:
        return f"{sign}{days} d {h:02d}:{m:02d}:{s:02d}"
    return f"{sign}{h}:{m:02d}:{s:02d}" if h else f"{sign}{m}:{s:02d}"
