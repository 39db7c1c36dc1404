"""How the supervisor stops a run: SIGINT to every process of the run, SIGTERM after the grace period, SIGKILL
after that; a later request with a shorter grace (a second Ctrl+C, Force stop) hurries it; a script whose companion
saves first is held off for that save (savestop.py); processes that outlive the launcher are ended.

`Stopper` is the supervisor's stop: its loop asks it each tick to look for a request (`check_request`) and to send
what is due (`advance`, or `end_leftovers` when no stop was asked but the launcher is gone). It reads the stop file
in the run directory, writes the stop's events to the store, and knows of the launcher only how it ended.
"""

from __future__ import annotations

import signal
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import psutil

from traindeck.backend.runs import processes as procs
from traindeck.backend.runs.record.layout import RunDir
from traindeck.backend.runs.record.savestop import save_hold_s
from traindeck.backend.runs.supervisor.instructions import SafeStore
from traindeck.backend.runs.supervisor.run_cgroup import RunCgroup
from traindeck.backend.runs.supervisor.tracking import LauncherEnd

DEFAULT_GRACE_S = 10.0
# SIGKILL follows SIGTERM after the grace period again, but never more than this much later.
KILL_AFTER_TERM_MAX_S = 10.0
LEFTOVER_GRACE_S = 5.0
MULTINODE_RUNNER_SPARED = (
    "multi-node run: the ranks are stopped on each node by traindeck's node agents; DeepSpeed's runner and pdsh get "
    "no SIGINT/SIGTERM (on either, the runner runs `pkill -f` for every DeepSpeed launcher of this Python on the "
    "nodes, other runs' included): they end when the ranks do, or get SIGKILL after the grace period")

# The paths that still signal the runner: the script's own multi-node settings, a hostfile that could not be read
# when the run started, a run started without traindeck's launch.
PDSH_RUNNER_SIGNALLED = (
    "multi-node run through pdsh without traindeck's node agents (started by the script's own multi-node settings): "
    "DeepSpeed's runner gets the stop's signals, and on SIGINT or SIGTERM it runs `pkill -f` for every DeepSpeed "
    "launcher of this Python on its nodes, other runs' included (DeepSpeed #6807); launch with traindeck's "
    "--hostfile (or accelerate's deepspeed_hostfile) to have each node's ranks stopped by an agent instead")
# pdsh's process names: Debian's and Ubuntu's /usr/bin/pdsh is a script that execs /usr/bin/pdsh.bin (as "pdsh").
PDSH_NAMES = frozenset({"pdsh", "pdsh.bin"})


def unagented_pdsh(alive: list[psutil.Process], spared: set[int]) -> bool:
    """Whether the run drives other nodes through pdsh (DeepSpeed's multi-node runner) with no node agent of
    traindeck sparing the runner: its stop then sets off DeepSpeed's pkill on the nodes."""
    for proc in alive:
        try:
            if proc.pid not in spared and proc.name() in PDSH_NAMES:
                return True
        except psutil.Error:
            continue
    return False


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


class Stopper:
    """The run's stop, from its request to its last signal, and the end of processes that outlive the launcher.

    `on_stop` is told once, when a stop begins (the stall watch keeps its state from then on); `clock` is the
    monotonic clock the supervisor's loop passes to `advance` and `end_leftovers`; `cgroup` is the run's cgroup
    (None without one): SIGKILL goes to all of it at once, the processes no scan has seen yet included."""

    def __init__(self, run_dir: RunDir, store: SafeStore, run_id: str, launcher: LauncherEnd, *,
                 on_stop: Callable[[], None], clock: Callable[[], float] = time.monotonic,
                 spared: Callable[[], set[int]] = set, cgroup: Callable[[], RunCgroup | None] = lambda: None
                 ) -> None:
        self.run_dir, self.store, self.run_id, self.launcher = run_dir, store, run_id, launcher
        self._on_stop, self._clock, self._cgroup = on_stop, clock, cgroup
        # Processes SIGINT and SIGTERM must not reach (DeepSpeed's multi-node runner and its pdsh): SIGKILL only.
        self._spared = spared
        self._said_spared = False
        self.stop: StopSequence | None = None
        self.signal_received = False  # SIGTERM/SIGINT/SIGHUP sent to the supervisor: a stop with the default grace
        self.leftover_since: float | None = None
        self._request: dict[str, Any] | None = None  # the stop request in effect (a newer one may hurry it)

    @property
    def stopping(self) -> bool:
        return self.stop is not None

    def detail(self) -> str | None:
        """How the stop ended the run ("gracefully (SIGINT)", ...); None when no stop was asked."""
        return self.stop.detail if self.stop is not None else None

    def request_by_signal(self, signum: int, _frame: Any) -> None:
        self.signal_received = True

    def stop_now(self) -> None:
        """The supervisor itself fails and ends the run's processes at once: the ends seen from now on are a stop's."""
        self.stop = self.stop or StopSequence(0.0)

    def check_request(self) -> None:
        if self.stop is not None:
            self._check_hurry()
            return
        request = self.run_dir.stop_request()
        if request is None and not self.signal_received:
            return
        grace = DEFAULT_GRACE_S
        if request is not None:
            try:
                grace = max(0.0, float(request.get("grace_s", DEFAULT_GRACE_S)))
            except (TypeError, ValueError):
                pass
        hold = save_hold_s(self.run_dir.path, grace)
        if self.launcher.returncode is not None and self.leftover_since is None \
                and not self._companion_stopped_it(request, hold):
            return  # the run ended by itself before the request arrived
        self.stop = StopSequence(grace, started=self._clock() + hold)
        self._on_stop()
        self._request = request
        self.store.update_run(self.run_id, stop_requested_at=time.time(), state_detail="stopping")
        self.store.add_event(self.run_id, "stop_requested", f"stop requested (grace {grace:g} s)" + (
            f"; the script saves a checkpoint and stops; signals only after {hold:g} s" if hold else ""))

    def _companion_stopped_it(self, request: dict[str, Any] | None, hold: float) -> bool:
        """The companion reads the stop request itself: it can save and end the script between two of our ticks,
        so the launcher is already gone when we first see the request. Asked before the end, that run was stopped."""
        if request is None or hold <= 0 or self.launcher.ended_wall is None:
            return False
        try:
            return float(request.get("requested_at", float("inf"))) <= self.launcher.ended_wall
        except (TypeError, ValueError):
            return False

    def _check_hurry(self) -> None:
        """A later request with a shorter grace period (a second Ctrl+C, Force stop) shortens the stop under way:
        grace 0 means SIGKILL now."""
        assert self.stop is not None
        request = self.run_dir.stop_request()
        if request is None or request == self._request:
            return
        self._request = request
        try:
            grace = max(0.0, float(request.get("grace_s", DEFAULT_GRACE_S)))
        except (TypeError, ValueError):
            return
        if grace >= self.stop.grace_s:
            return
        self.stop.grace_s, self.stop.started = grace, self._clock()
        self.store.add_event(self.run_id, "stop_requested", f"stop hurried: grace now {grace:g} s"
                             + (" (SIGKILL now)" if grace == 0 else ""))

    def advance(self, alive: list[psutil.Process], now: float) -> None:
        """Send the signal now due to every process of the run, and the current one to newcomers."""
        assert self.stop is not None
        stop = self.stop
        due = stop.due_phase(now)
        if due < 0:
            return
        spared = self._spared() if due < 2 else set()
        if spared and not self._said_spared:
            self._said_spared = True
            self.store.add_event(self.run_id, "stop_signal", MULTINODE_RUNNER_SPARED)
        elif due < 2 and not spared and not self._said_spared and unagented_pdsh(alive, spared):
            self._said_spared = True  # said before the signal that sets it off
            self.store.add_event(self.run_id, "stop_signal", PDSH_RUNNER_SIGNALLED)
        if due > stop.phase:
            skipped = due - max(stop.phase, 0) > 1 or (stop.phase < 0 and due > 0)  # a forced stop: no SIGTERM sent
            stop.phase = due
            stop.signalled.clear()
            sig = stop.PHASES[due]
            if due > 0 and not alive:
                return
            targets = [p for p in alive if p.pid not in spared]
            count = procs.send(targets, sig)
            if due == 2:
                self._kill_cgroup()
            stop.signalled.update(p.pid for p in targets)
            name = procs.signal_name(sig)
            text = f"sent {name} to {count} process(es)"
            if due == 1:
                text += f" still alive after {stop.grace_s:g} s"
            elif due == 2:
                text += " (forced stop)" if skipped else " still alive after SIGTERM"
            self.store.add_event(self.run_id, "stop_signal", text)
            self.store.update_run(self.run_id, state_detail=f"stopping ({name})")
        else:
            newcomers = [p for p in alive if p.pid not in stop.signalled and p.pid not in spared]
            if newcomers:
                procs.send(newcomers, stop.PHASES[stop.phase])
                stop.signalled.update(p.pid for p in newcomers)
            if stop.phase == 2 and alive:
                procs.send(alive, signal.SIGKILL)
                self._kill_cgroup()

    def _kill_cgroup(self) -> None:
        cgroup = self._cgroup()
        if cgroup is not None:
            cgroup.kill()

    def end_leftovers(self, alive: list[psutil.Process], now: float) -> None:
        """The launcher is gone but processes of the run remain (orphans adopted by us): end them."""
        if self.leftover_since is None:
            self.leftover_since = now
            names = ", ".join(sorted({_name(p) for p in alive}))
            self.store.add_event(self.run_id, "leftovers",
                                 f"{len(alive)} process(es) outlived the launcher ({names}): sending SIGTERM")
            procs.send(alive, signal.SIGTERM)
        elif now - self.leftover_since >= LEFTOVER_GRACE_S:
            count = procs.send(alive, signal.SIGKILL)
            self._kill_cgroup()
            if count:
                self.store.add_event(self.run_id, "leftovers", f"sent SIGKILL to {count} leftover process(es)")
        else:
            procs.send(alive, signal.SIGTERM)

    def not_our_signal(self, code: int | None) -> str:
        """During a stop, a rank killed by a signal traindeck has not sent (yet) got it from its launcher: the
        DeepSpeed launcher and torchrun pass a SIGINT on to their ranks as SIGTERM. Said, so that "killed by
        SIGTERM" and the run's "stopped gracefully (SIGINT)" do not read as a contradiction."""
        if self.stop is None or code is None or code >= 0:
            return ""
        sent = [int(s) for s in self.stop.PHASES[: max(self.stop.phase, 0) + 1]]
        if -code in sent:
            return ""
        names = "/".join(procs.signal_name(s) for s in sent)
        return f" (not sent by traindeck, which had sent {names}: its launcher passed the stop on)"


def _name(proc: psutil.Process) -> str:
    try:
        return proc.name()
    except psutil.Error:
        return str(proc.pid)
