"""Signals a person sends to a process from a process table, as htop's and nvitop's kill keys do, made safe:

- only to the person's own processes (the real user id is theirs), whatever the dashboard's privileges;
- never to PID 1, to the dashboard itself or to a process it runs under (that would close the window asking);
- planned, then sent: `plan_signal` names what a signal would reach (the process, and its descendants with
  `tree`) for a confirmation, and `send_signal` sends it only to those very processes: each target is checked
  again by its start time, so a PID reused since the plan is left alone;
- every outcome is one line of words (sent, already ended, not permitted), never an exception.

A traindeck run's processes are better stopped by their run's own Stop (its supervisor saves and escalates);
a viewer offers that first and these signals after.
"""

from __future__ import annotations

import os
import signal
from collections.abc import Sequence
from dataclasses import dataclass

import psutil

SIGNALS: dict[str, signal.Signals] = {"SIGTERM": signal.SIGTERM, "SIGINT": signal.SIGINT, "SIGKILL": signal.SIGKILL}
SIGNAL_WORDS = {"SIGTERM": "Terminate", "SIGINT": "Interrupt", "SIGKILL": "Kill"}


@dataclass(frozen=True, slots=True)
class SignalTarget:
    pid: int
    started: float  # psutil's create_time: tells this process from a later one given the same PID
    command: str


@dataclass(frozen=True, slots=True)
class SignalPlan:
    """What a signal would reach. `refused`: why nothing is sent (then `targets` is empty); `skipped`: descendants
    left out (other users' processes) in words, or ""."""

    signal_name: str
    targets: tuple[SignalTarget, ...]
    refused: str | None = None
    skipped: str = ""

    @property
    def allowed(self) -> bool:
        return self.refused is None and bool(self.targets)


def _command(proc: psutil.Process) -> str:
    try:
        argv = proc.cmdline()
    except (psutil.AccessDenied, psutil.ZombieProcess):
        argv = []
    return " ".join(" ".join(argv).split()) or proc.name()


def _protected() -> set[int]:
    """PID 1, this process and every process it runs under."""
    pids = {1, os.getpid()}
    try:
        pids.update(p.pid for p in psutil.Process().parents())
    except psutil.Error:
        pass
    return pids


def refusal(pid: int, uid: int | None = None) -> str | None:
    """Why a signal to `pid` is refused here (None: it may be sent). `uid`: its real user id, read when None."""
    if pid in _protected():
        return (f"PID {pid} is " + ("the system's first process" if pid == 1 else
                                    "traindeck itself or a process it runs under") + ": not signalled from here")
    if uid is None:
        try:
            uid = psutil.Process(pid).uids().real
        except psutil.NoSuchProcess:
            return f"PID {pid} has already ended"
        except psutil.Error:
            return f"PID {pid}: its owner cannot be read, so it is not signalled from here"
    if uid != os.getuid():
        return f"PID {pid} belongs to another user: only your own processes are signalled from here"
    return None


def plan_signal(pid: int, signal_name: str, tree: bool = False) -> SignalPlan:
    """What `signal_name` (a key of SIGNALS) sent to `pid` would reach: the process, and with `tree` its
    descendants (children first in the order of sending: deepest first, then the process itself)."""
    if signal_name not in SIGNALS:
        raise ValueError(f"no signal {signal_name!r}; one of {', '.join(SIGNALS)}")
    refused = refusal(pid)
    if refused is not None:
        return SignalPlan(signal_name, (), refused)
    try:
        proc = psutil.Process(pid)
        top = SignalTarget(pid, proc.create_time(), _command(proc))
        kids = proc.children(recursive=True) if tree else []
    except psutil.NoSuchProcess:
        return SignalPlan(signal_name, (), f"PID {pid} has already ended")
    except psutil.Error as exc:
        return SignalPlan(signal_name, (), f"PID {pid} cannot be read: {type(exc).__name__}")
    targets: list[SignalTarget] = []
    others = 0
    for kid in reversed(kids):  # psutil lists parents before children: the deepest are signalled first
        if refusal(kid.pid) is not None:
            others += 1
            continue
        try:
            targets.append(SignalTarget(kid.pid, kid.create_time(), _command(kid)))
        except psutil.Error:
            continue  # ended since the listing
    targets.append(top)
    skipped = f"{others} descendant{'s' if others != 1 else ''} of other users or protected left alone" if others \
        else ""
    return SignalPlan(signal_name, tuple(targets), None, skipped)


def send_signal(plan: SignalPlan) -> str:
    """Send the planned signal to each target that is still the process planned; one line says what happened."""
    if plan.refused is not None:
        return plan.refused
    sent: list[int] = []
    ended: list[int] = []
    denied: list[int] = []
    for target in plan.targets:
        try:
            proc = psutil.Process(target.pid)
            if abs(proc.create_time() - target.started) > 0.01 or refusal(target.pid) is not None:
                ended.append(target.pid)  # the PID now names another process (or its owner changed)
                continue
            if proc.status() == psutil.STATUS_ZOMBIE:
                ended.append(target.pid)
                continue
            proc.send_signal(SIGNALS[plan.signal_name])
            sent.append(target.pid)
        except psutil.NoSuchProcess:
            ended.append(target.pid)
        except psutil.AccessDenied:
            denied.append(target.pid)
    return _outcome(plan, sent, ended, denied)


def _pids(pids: Sequence[int]) -> str:
    shown = ", ".join(str(p) for p in pids[:6])
    return f"PID {shown}" if len(pids) == 1 else f"PIDs {shown}" + (f" and {len(pids) - 6} more" if len(pids) > 6
                                                                     else "")


def _outcome(plan: SignalPlan, sent: list[int], ended: list[int], denied: list[int]) -> str:
    parts = []
    if sent:
        head = plan.targets[-1]
        parts.append(f"{plan.signal_name} sent to {_pids(sent)}" +
                     (f" ({head.command[:60]})" if sent == [head.pid] else ""))
    if ended:
        parts.append(f"{_pids(ended)} had already ended")
    if denied:
        parts.append(f"not permitted to signal {_pids(denied)}")
    if plan.skipped:
        parts.append(plan.skipped)
    return "; ".join(parts) or "nothing to signal"
