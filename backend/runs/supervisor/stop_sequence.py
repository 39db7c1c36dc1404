"""How the supervisor stops a run: SIGINT to every process of the run, SIGTERM after the grace period, SIGKILL
after that; a later request with a shorter grace (a second Ctrl+C, Force stop) hurries it; a script whose companion
saves first is held off for that save (savestop.py); processes that outlive the launcher are ended.

A part of the Supervisor (supervisor.py; it inherits RunStop, which inherits RunEnd), split out along the seam its
docstring named: these methods read and change the stop state declared below, from the supervisor's loop.
"""

from __future__ import annotations

import signal
import time
from dataclasses import dataclass, field
from typing import Any

import psutil

from traindeck.backend.runs import processes as procs
from traindeck.backend.runs.record.savestop import save_hold_s
from traindeck.backend.runs.supervisor.run_end import RunEnd

DEFAULT_GRACE_S = 10.0
# SIGKILL follows SIGTERM after the grace period again, but never more than this much later.
KILL_AFTER_TERM_MAX_S = 10.0
LEFTOVER_GRACE_S = 5.0


@dataclass
class StopSequence:
    """SIGINT, then SIGTERM after the grace period, then SIGKILL; newcomers get the current phase's signal."""

    grace_s: float
    started: float = field(default_factory=time.monotonic)
    phase: int = -1
    signalled: set[int] = field(default_factory=set)
    PHASES: tuple[int, ...] = (signal.SIGINT, signal.SIGTERM, signal.SIGKILL)

    def due_phase(self, now: float) -> int:
        elapsed = now - self.started
        if elapsed < 0:
            return -1  # held: the script's companion is saving a checkpoint before it stops (savestop.py)
        if elapsed >= self.grace_s + min(self.grace_s, KILL_AFTER_TERM_MAX_S):
            return 2
        if elapsed >= self.grace_s:
            return 1
        return 0

    @property
    def detail(self) -> str:
        if self.phase < 0:  # held for the companion, which saved and ended the script: no signal was sent
            return "without a signal (the script saved and ended itself)"
        return ("gracefully (SIGINT)", "after SIGTERM", "forcefully (SIGKILL)")[max(self.phase, 0)]


class RunStop(RunEnd):
    # The stop state (set in Supervisor.__init__, changed here and by the loop).
    stop_signal_received: bool
    leftover_since: float | None
    launcher_ended_wall: float | None
    _stop_request: dict[str, Any] | None

    def request_stop_by_signal(self, signum: int, _frame: Any) -> None:
        self.stop_signal_received = True

    def _check_stop_request(self) -> None:
        if self.stop is not None:
            self._check_hurry()
            return
        request = self.run_dir.stop_request()
        if request is None and not self.stop_signal_received:
            return
        grace = DEFAULT_GRACE_S
        if request is not None:
            try:
                grace = max(0.0, float(request.get("grace_s", DEFAULT_GRACE_S)))
            except (TypeError, ValueError):
                pass
        hold = save_hold_s(self.run_dir.path, grace)
        if self.launcher_returncode is not None and self.leftover_since is None \
                and not self._companion_stopped_it(request, hold):
            return  # the run ended by itself before the request arrived
        self.stop = StopSequence(grace, started=time.monotonic() + hold)
        self.stall.stop_requested()
        self._stop_request = request
        self.store.update_run(self.run_id, stop_requested_at=time.time(), state_detail="stopping")
        self.store.add_event(self.run_id, "stop_requested", f"stop requested (grace {grace:g} s)" + (
            f"; the script saves a checkpoint and stops; signals only after {hold:g} s" if hold else ""))

    def _companion_stopped_it(self, request: dict[str, Any] | None, hold: float) -> bool:
        """The companion reads the stop request itself: it can save and end the script between two of our ticks,
        so the launcher is already gone when we first see the request. Asked before the end, that run was stopped."""
        if request is None or hold <= 0 or self.launcher_ended_wall is None:
            return False
        try:
            return float(request.get("requested_at", float("inf"))) <= self.launcher_ended_wall
        except (TypeError, ValueError):
            return False

    def _check_hurry(self) -> None:
        """A later request with a shorter grace period (a second Ctrl+C, Force stop) shortens the stop under way:
        grace 0 means SIGKILL now."""
        assert self.stop is not None
        request = self.run_dir.stop_request()
        if request is None or request == self._stop_request:
            return
        self._stop_request = request
        try:
            grace = max(0.0, float(request.get("grace_s", DEFAULT_GRACE_S)))
        except (TypeError, ValueError):
            return
        if grace >= self.stop.grace_s:
            return
        self.stop.grace_s, self.stop.started = grace, time.monotonic()
        self.store.add_event(self.run_id, "stop_requested", f"stop hurried: grace now {grace:g} s"
                             + (" (SIGKILL now)" if grace == 0 else ""))

    def _advance_stop(self, alive: list[psutil.Process], now: float) -> None:
        assert self.stop is not None
        stop = self.stop
        due = stop.due_phase(now)
        if due < 0:
            return
        if due > stop.phase:
            stop.phase = due
            stop.signalled.clear()
            sig = stop.PHASES[due]
            if due > 0 and not alive:
                return
            count = procs.send(alive, sig)
            stop.signalled.update(p.pid for p in alive)
            name = procs.signal_name(sig)
            text = f"sent {name} to {count} process(es)"
            if due == 1:
                text += f" still alive after {stop.grace_s:g} s"
            elif due == 2:
                text += " still alive after SIGTERM"
            self.store.add_event(self.run_id, "stop_signal", text)
            self.store.update_run(self.run_id, state_detail=f"stopping ({name})")
        else:
            newcomers = [p for p in alive if p.pid not in stop.signalled]
            if newcomers:
                procs.send(newcomers, stop.PHASES[stop.phase])
                stop.signalled.update(p.pid for p in newcomers)
            if stop.phase == 2 and alive:
                procs.send(alive, signal.SIGKILL)

    def _end_leftovers(self, alive: list[psutil.Process], now: float) -> None:
        """The launcher is gone but processes of the run remain (orphans adopted by us): end them."""
        if self.leftover_since is None:
            self.leftover_since = now
            names = ", ".join(sorted({_name(p) for p in alive}))
            self.store.add_event(self.run_id, "leftovers",
                                 f"{len(alive)} process(es) outlived the launcher ({names}): sending SIGTERM")
            procs.send(alive, signal.SIGTERM)
        elif now - self.leftover_since >= LEFTOVER_GRACE_S:
            count = procs.send(alive, signal.SIGKILL)
            if count:
                self.store.add_event(self.run_id, "leftovers", f"sent SIGKILL to {count} leftover process(es)")
        else:
            procs.send(alive, signal.SIGTERM)


def _name(proc: psutil.Process) -> str:
    try:
        return proc.name()
    except psutil.Error:
        return str(proc.pid)
