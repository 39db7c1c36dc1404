"""Brings the ranks' step timing (<run dir>/steps/rank<R>.jsonl) into the run store, about once a second.

The ranks write those files themselves (the run's site hook); the supervisor is the store's one writer, so it
reads them here and adds the rows. What each rank's timing attached to (or could not) becomes one event per
rank, which the Step view and `traindeck steps` show. The files stay in the run directory after the run: a run
store rebuilt from the run folders (store_rebuild) takes the steps back from them.
"""

from __future__ import annotations

import logging

from traindeck.backend.runs.record.layout import RunDir
from traindeck.backend.runs.supervisor.instructions import SafeStore
from traindeck.backend.steps import StepFiles

logger = logging.getLogger("traindeck.supervisor")

EVENT = "step_timing"


class StepIntake:
    """Call `poll` from the supervisor's loop (it reads at most every `interval_s`) and `finish` at the end."""

    def __init__(self, run_dir: RunDir, store: SafeStore, run_id: str, interval_s: float = 1.0) -> None:
        self.files = StepFiles(run_dir.path)
        self.store, self.run_id, self.interval_s = store, run_id, interval_s
        self.last = float("-inf")
        self.reported: dict[int, tuple[tuple[str, ...], tuple[str, ...], str]] = {}
        self.latest_step: int | None = None  # the newest optimizer step of any rank (the run's progress fallback)

    def poll(self, now: float) -> None:
        if now - self.last < self.interval_s:
            return
        self.last = now
        self._read()

    def finish(self) -> None:
        for _ in range(64):  # the last writes of every rank, a budget's worth per pass
            if not self._read():
                return

    def _read(self) -> int:
        try:
            steps, reports = self.files.read_new()
        except Exception:  # noqa: BLE001 - the timing is an extra: the supervisor goes on without it
            logger.exception("could not read the ranks' step timing")
            return 0
        if steps:
            self.store.add_steps(self.run_id, steps)
            self.latest_step = max(self.latest_step or 0, max(r.step for r in steps))
        for report in reports:
            said = (report.attached, report.missing, report.clock)
            if self.reported.get(report.rank) != said:
                self.reported[report.rank] = said
                self.store.add_event(self.run_id, EVENT, report.text())
        return len(steps) + len(reports)
