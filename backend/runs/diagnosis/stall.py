"""Is a running run stalled, building ops, or fine? The supervisor asks every 5 s (StallWatch.check).

A run quiet (no output, no progress) for max(minimum, 10x the median step) is stalled: an event, the state detail,
and every rank's stack (stacks.py), taken once per stall on a thread of its own and kept as stall_stacks.json
(a new stall, after output resumed, takes them again: a slow start-up may stall before the real hang does). While
DeepSpeed/torch ops compile (compilers among the run's processes, or build lines in the log) the run shows
"building DeepSpeed's <op> (first use, a few minutes)" instead, and quiet time counts from the build's end.
"""

from __future__ import annotations

import statistics
import threading
import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil

from traindeck.backend.core import rough_duration
from traindeck.backend.logparse.op_build import build_text
from traindeck.backend.runs.diagnosis import run_stacks
from traindeck.backend.runs.diagnosis.diagnose import stall_threshold
from traindeck.backend.runs.diagnosis.op_builds import ops_being_built

# A build the log announced counts for this long at most: torch 2.x logs no "loaded" line, and a build with no
# compiler left running is over (or waits on another run's lock, which the log cannot tell).
LOG_BUILD_TRUST_S = 600.0


@dataclass
class Quiet:
    """What the supervisor's output threads know at one check (monotonic clock)."""

    last_output: float
    last_progress: float
    step_times: Sequence[float]
    logged_builds: dict[str, float]  # op -> when its build was first seen in the log


class StallWatch:
    def __init__(self, store: Any, run_id: str, run_dir: Path, stall_min_s: float,
                 log: Callable[[str], None], on_stall: Callable[[str], None] | None = None) -> None:
        self.store, self.run_id, self.run_dir, self.stall_min_s, self._log = store, run_id, run_dir, stall_min_s, log
        self._on_stall = on_stall  # told each stall's text (the watchdog's alert)
        self.stalled = False
        self.building: list[str] = []  # ops being built as last shown (no stall is declared meanwhile)
        self.build_seen_at = 0.0
        self.build_started_at = 0.0
        self.stall_stacks = ""  # where the ranks were when the run stalled (summary of stall_stacks.json)
        self._taking_stacks = threading.Event()  # set while a dump is under way: never two at once
        self._progress_at_stall: float | None = None
        self._stalled_at_stop: bool | None = None  # None: no stop requested

    def check(self, now: float, quiet: Quiet, alive: list[psutil.Process],
              rank_records: Callable[[], list[dict[str, Any]]]) -> None:
        if self._stalled_at_stop is not None:  # stopping has its own state; its tracebacks are not the run resuming
            return
        if self._check_op_build(now, quiet, alive):
            return
        quiet_s = now - max(quiet.last_output, quiet.last_progress, self.build_seen_at)
        threshold = stall_threshold(list(quiet.step_times), self.stall_min_s)
        if not self.stalled and quiet_s > threshold:
            self.stalled = True
            typical = ""
            if quiet.step_times:
                typical = f"; a step usually takes {statistics.median(quiet.step_times):.1f} s"
            text = f"stalled: no output or progress for {rough_duration(quiet_s)}{typical}"
            self.store.add_event(self.run_id, "stall", text)
            self.store.update_run(self.run_id, state_detail=text)
            if self._on_stall is not None:
                self._on_stall(text)
            if not self._taking_stacks.is_set():
                self._taking_stacks.set()
                self._progress_at_stall = quiet.last_progress
                # The process list is read here, on the loop's thread; the dumps (up to 5 s) are awaited on another.
                threading.Thread(target=self._take_stall_stacks, args=(text, rank_records()), name="stall-stacks",
                                 daemon=True).start()
        elif self.stalled and quiet_s < threshold:
            self.stalled = False
            self.store.add_event(self.run_id, "resumed", "output resumed after a stall")
            self.store.update_run(self.run_id, state_detail="")

    def run_ended(self, now: float) -> None:
        """The launcher is gone: a build still shown ended within the last check (the job loaded its op and left)."""
        if self.building:
            self._build_ended(now)

    def stop_requested(self) -> None:
        self._stalled_at_stop = self.stalled

    def hang_stacks(self, last_progress: float) -> str:
        """The stall's stacks summary when the run was stopped while stalled, or ended without progressing after
        the stall (failed while hung); else ""."""
        if not self.stall_stacks:
            return ""
        if self._stalled_at_stop is not None:
            return self.stall_stacks if self._stalled_at_stop else ""
        return self.stall_stacks if self._progress_at_stall == last_progress else ""

    def _check_op_build(self, now: float, quiet: Quiet, alive: list[psutil.Process]) -> bool:
        logged = [op for op, since in quiet.logged_builds.items() if now - since < LOG_BUILD_TRUST_S]
        building = sorted(set(ops_being_built(alive)) | set(logged))
        if "ops" in building and len(building) > 1:
            building.remove("ops")
        if building:
            if not self.building:
                self.build_started_at = now
            self.build_seen_at = now
            if building != self.building:
                if self.stalled:
                    self.stalled = False
                    self.store.add_event(self.run_id, "resumed", "not stalled: ops are being built")
                self.store.update_run(self.run_id, state_detail=build_text(building))
                self.store.add_event(self.run_id, "op_build", build_text(building))
            self.building = building
            return True
        if self.building:
            self._build_ended(now)
            if not self.stalled:
                self.store.update_run(self.run_id, state_detail="")
        return False

    def _build_ended(self, now: float) -> None:
        self.store.add_event(self.run_id, "op_built", f"{', '.join(self.building)} built in about "
                             f"{rough_duration(now - self.build_started_at)}")
        self.building = []

    def _take_stall_stacks(self, stall_text: str, records: list[dict[str, Any]]) -> None:
        try:
            report = run_stacks.take_run_stacks(self.run_dir, records, reason="stall", keep_as="stall_stacks.json")
            if report is None:
                return
            summary = report.summary
            self.stall_stacks = summary
            self.store.add_event(self.run_id, "stacks", f"stacks when the run stalled: {summary}")
            if self.stalled:
                self.store.update_run(self.run_id, state_detail=f"{stall_text}; {summary}")
        except Exception:  # forensics must never take the supervisor down
            self._log("taking stacks failed:\n" + traceback.format_exc())
        finally:
            self._taking_stacks.clear()
