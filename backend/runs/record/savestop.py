"""Save, then stop: what traindeck knows of a run's in-run companion (resources/pyhelpers/traindeck_report.py).

A script using the companion (`td.hf_callback()` or `td.SaveStop()`) announces it in the run directory
(companion.json). A stop request is then first a request to save and end: the companion sees the `stop` file at
its next step, saves a checkpoint and ends the training loop, and the supervisor holds its signals for up to the
companion's `hold_s`. A force stop (grace 0) is never held. "Save now" is the `save_now` file.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from traindeck.backend.core.fileio import atomic_write_text

COMPANION = "companion.json"
SAVE_NOW = "save_now"
MAX_HOLD_S = 3600.0
SIGNALS = "signals"  # stop = SIGINT, SIGTERM, SIGKILL (no companion)
SAVE_THEN_STOP = "save-then-stop"


def companion(run_dir: Path | str) -> dict[str, Any] | None:
    try:
        data = json.loads((Path(run_dir) / COMPANION).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) and data.get("save_on_stop") else None


def stop_kind(run_dir: Path | str) -> str:
    """Which stop the run supports, as `runs show` says it."""
    return SAVE_THEN_STOP if companion(run_dir) is not None else SIGNALS


def save_hold_s(run_dir: Path | str, grace_s: float) -> float:
    """How long the supervisor waits before its first signal: the companion's hold, 0 without one or when forced."""
    data = companion(run_dir)
    if data is None or grace_s <= 0:
        return 0.0
    try:
        return max(0.0, min(float(data.get("hold_s", 300.0)), MAX_HOLD_S))
    except (TypeError, ValueError):
        return 0.0


def request_save(run_dir: Path | str) -> bool:
    """Ask the run's companion to save a checkpoint at its next step; False when the run has no companion."""
    if companion(run_dir) is None:
        return False
    atomic_write_text(Path(run_dir) / SAVE_NOW, json.dumps({"requested_at": time.time()}))
    return True
