"""Warns while a run goes on that the disk holding its data folder is nearly full: before output.log, the run
store and the step files stop being written (a full disk cuts the log, see output_drain and run_end).

The supervisor's loop calls `check` every tick; it looks at most every CHECK_S. Below the threshold
(TRAINDECK_LOW_DISK_MB, default 1024) it writes one "low_disk" event, which the dashboard shows as a desktop
notification and the notify command gets as TRAINDECK_EVENT=low_disk; it warns again only after the free space
has come back above twice the threshold.
"""

from __future__ import annotations

import logging
import shutil
from pathlib import Path

from traindeck.backend.runs.supervisor import alerts
from traindeck.backend.runs.supervisor.instructions import SafeStore

logger = logging.getLogger("traindeck.supervisor")

CHECK_S = 5.0  # statvfs costs microseconds
DEFAULT_LOW_MB = 1024.0
THRESHOLD_ENV = "TRAINDECK_LOW_DISK_MB"


def low_disk_bytes(env: dict[str, str]) -> float:
    try:
        return max(0.0, float(env.get(THRESHOLD_ENV, DEFAULT_LOW_MB))) * 2**20
    except ValueError:
        return DEFAULT_LOW_MB * 2**20


class DiskWatch:
    """One run's low-disk warning: `check(now)` from the loop."""

    def __init__(self, folder: Path, store: SafeStore, run_id: str, run_name: str, threshold_bytes: float,
                 interval_s: float = CHECK_S) -> None:
        self.folder, self.store, self.run_id, self.run_name = folder, store, run_id, run_name
        self.threshold, self.interval_s = threshold_bytes, interval_s
        self.last = float("-inf")
        self.warned = False

    def check(self, now: float) -> None:
        if self.threshold <= 0 or now - self.last < self.interval_s:
            return
        self.last = now
        try:
            free = shutil.disk_usage(self.folder).free
        except OSError:
            return
        if free >= 2 * self.threshold:
            self.warned = False
        if free >= self.threshold or self.warned:
            return
        self.warned = True
        text = (f"the disk of the data folder has {free / 2**20:.0f} MiB free ({self.folder}): when it is full the "
                f"run's log is cut and its records stop until space is freed")
        logger.warning("%s", text)
        self.store.add_event(self.run_id, "low_disk", text)
        alerts.announce("low_disk", self.run_id, self.run_name, text)

