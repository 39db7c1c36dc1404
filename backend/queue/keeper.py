"""The queue keeper: the detached process that starts queued runs when what they need is free.

Like a run's supervisor it outlives whoever started it (own session, forked away from its starter) and holds
nothing a restart would lose: the queue is in the run store. One keeper at a time (an exclusive lock on
`queue.lock` in the data dir, released by the kernel when a keeper dies, even by SIGKILL); each start is a
conditional state change in SQLite, so even two keepers could not start a run twice. A keeper exits when nothing
is left to start (queue empty, paused, or everything held); `ensure_keeper()` starts one again when needed.
"""

from __future__ import annotations

import fcntl
import os
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from traindeck.backend.core.detach import fork_away
from traindeck.backend.core.fileio import SymlinkRefused, open_private_append
from traindeck.backend.core.paths import data_dir, ensure_private_dir
from traindeck.backend.monitor.snapshots import GpuSnapshot
from traindeck.backend.queue.entries import QUEUED, QueueEntry, QueueSettings, QueueStore, process_alive
from traindeck.backend.queue.gpus import GpuRequest, choose_gpus, parse_gpus

TICK_S = 1.0


def lock_path() -> Path:
    return data_dir() / "queue.lock"


def log_path() -> Path:
    return data_dir() / "queue.log"


def _log(text: str) -> None:
    print(f"{time.strftime('%Y-%m-%d %H:%M:%S')} {text}", file=sys.stderr, flush=True)


@dataclass(frozen=True)
class Decision:
    """For one waiting run: the GPUs to start it on now, or what it waits for."""

    entry: QueueEntry
    gpus: list[int] | None
    waiting_for: str

    @property
    def can_start(self) -> bool:
        return self.gpus is not None


def effective_max_running(settings: QueueSettings, gpu_count: int) -> int | None:
    if settings.max_running is not None:
        return settings.max_running
    return 1 if gpu_count == 0 else None


def plan_starts(waiting: list[QueueEntry], running_count: int, reserved: list[int], settings: QueueSettings,
                gpus: tuple[GpuSnapshot, ...]) -> list[Decision]:
    """What each waiting run (in queue order) would do now. Strict order: once one cannot start, the ones behind
    it wait too (a small run slipping past could keep a big one waiting for ever)."""
    decisions: list[Decision] = []
    limit = effective_max_running(settings, len(gpus))
    slots = None if limit is None else max(0, limit - running_count)
    taken = list(reserved)
    blocked = ""  # once set, what every later (not held) run waits for
    if settings.paused:
        blocked = "the queue is paused" + (f" ({settings.pause_reason})" if settings.pause_reason else "")
    for entry in waiting:
        if entry.held:
            decisions.append(Decision(entry, None, "held"))
        elif blocked:
            decisions.append(Decision(entry, None, blocked))
        elif slots is not None and slots <= 0:
            decisions.append(Decision(entry, None, f"a free slot ({running_count} running, at most {limit})"))
            blocked = "the runs before it"
        else:
            request: GpuRequest | None = parse_gpus(entry.gpus) if entry.gpus else None
            choice = choose_gpus(request, gpus, taken)
            decisions.append(Decision(entry, choice.gpus, choice.waiting_for))
            if choice.gpus is None:
                blocked = "the runs before it"
                continue
            taken += choice.gpus or [g.index for g in gpus]  # a run naming no GPUs gets them all
            running_count += 1
            if slots is not None:
                slots -= 1
    return decisions


class Keeper:
    def __init__(self, queue: QueueStore, gpu_source: object | None = None) -> None:
        self.queue = queue
        self._sampler = gpu_source

    def gpus(self) -> tuple[GpuSnapshot, ...]:
        if self._sampler is None:
            from traindeck.backend.monitor.gpu_sampler import GpuSampler

            self._sampler = GpuSampler()
        return tuple(self._sampler.sample().gpus)  # type: ignore[attr-defined]

    def tick(self) -> bool:
        """One pass: note ended runs, start what can start. Returns False when there is nothing left to do."""
        from traindeck.backend.runs.supervisor.liveness import reconcile

        store = self.queue.runs
        reconcile(store, report=_log)
        settings = self.queue.settings()
        for entry in self.queue.ended_unseen():
            self.queue.mark_seen(entry.run_id)
            _log(f"run {entry.run_id} ({entry.name}) {entry.state}")
            if entry.state in ("failed", "lost") and settings.stop_on_failure and not settings.paused:
                self.queue.update_settings(paused=True, pause_reason=f"run {entry.run_id} {entry.state}")
                _log(f"queue paused: run {entry.run_id} {entry.state} (stop on failure)")
                settings = self.queue.settings()
        self.requeue_interrupted()
        waiting = self.queue.waiting()
        if settings.paused or not any(not e.held for e in waiting):
            return False
        running = store.list_runs(state="running")
        for decision in plan_starts(waiting, len(running), self.queue.running_gpus(), settings, self.gpus()):
            if not decision.can_start:
                continue
            from traindeck.backend.queue.starting import start_queued

            if start_queued(self.queue, decision.entry, decision.gpus or None):
                _log(f"started run {decision.entry.run_id} ({decision.entry.name})"
                     + (f" on GPUs {decision.gpus}" if decision.gpus else ""))
        return True

    def requeue_interrupted(self) -> None:
        """A run claimed by a starter that died (a keeper SIGKILLed mid-start) before any supervisor took it
        goes back to its place in the queue: it never ran, so starting it now is its first start."""
        for entry in self.queue.entries():
            if _interrupted(self.queue, entry) and self.queue.requeue_interrupted(entry.run_id):
                self.queue.runs.add_event(entry.run_id, "requeued", "its start was interrupted (the process "
                                          "starting it died); back in the queue")
                _log(f"run {entry.run_id} ({entry.name}): start interrupted; back in the queue")

    def run_forever(self) -> None:
        me_started = _create_time(os.getpid())
        # Ends from before this keeper were acted on by an earlier one (or happened with none): not a reason to
        # pause now.
        for entry in self.queue.ended_unseen():
            self.queue.mark_seen(entry.run_id)
        self.queue.update_settings(keeper_pid=os.getpid(), keeper_started=me_started)
        next_t = time.monotonic()
        while self.tick():
            next_t += TICK_S
            time.sleep(max(0.0, next_t - time.monotonic()))
            next_t = max(next_t, time.monotonic() - TICK_S)
        _log("nothing left to start; the keeper exits")


def _interrupted(queue: QueueStore, entry: QueueEntry) -> bool:
    """Claimed by a starter that died before any supervisor took the run."""
    if entry.state != "running" or entry.claimed_by is None or process_alive(*entry.claimed_by):
        return False
    record = queue.runs.get_run(entry.run_id)
    return record is not None and record.supervisor_pid is None and not _supervisor_of(record.run_dir)


def _supervisor_of(run_dir: str) -> bool:
    """Is a supervisor process for this run directory alive (started, but not yet in the store)?"""
    import psutil

    for proc in psutil.process_iter(["cmdline"]):
        cmdline = proc.info.get("cmdline") or []
        if run_dir in cmdline and any("supervis" in part for part in cmdline):
            return True
    return False


def _create_time(pid: int) -> float | None:
    try:
        import psutil

        return float(psutil.Process(pid).create_time())
    except Exception:  # noqa: BLE001
        return None


def keeper_running(queue: QueueStore) -> bool:
    settings = queue.settings()
    return process_alive(settings.keeper_pid, settings.keeper_started)


def keeper_argv() -> list[str]:
    if getattr(sys, "frozen", False):
        return [sys.executable, "_queue-keeper"]
    return [sys.executable, "-m", "traindeck.backend.queue.keeper"]


def ensure_keeper(queue: QueueStore) -> bool:
    """Start a keeper unless one is running or there is nothing to start; True when one was started."""
    settings = queue.settings()
    entries = queue.entries()
    startable = not settings.paused and any(e.state == QUEUED and not e.held for e in entries)
    if not startable and not any(_interrupted(queue, e) for e in entries):
        return False
    if keeper_running(queue):
        return False
    ensure_private_dir(data_dir())
    log = _open_log()
    try:
        proc = subprocess.Popen(keeper_argv(), stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=log,
                                start_new_session=True, env={k: v for k, v in os.environ.items()
                                                             if k != "TRAINDECK_RUN_ID"})
    finally:
        os.close(log)
    out, _ = proc.communicate(timeout=30)
    return proc.returncode == 0 and out.strip().isdigit()


def _open_log() -> int:
    """queue.log for appending, never through a symbolic link: a link planted at its name is replaced by a fresh
    private log whose first line names the link and where it pointed (the file there is left as it is), so the
    queue keeps its keeper and the keeper its log."""
    path = log_path()
    try:
        return open_private_append(path)
    except SymlinkRefused:
        try:
            pointed = os.readlink(path)
        except OSError:
            pointed = "?"
        if os.path.islink(path):
            os.unlink(path)  # the link itself, never what it points at
        log = open_private_append(path)  # a link planted again meanwhile is refused (SymlinkRefused)
        os.write(log, f"{time.strftime('%Y-%m-%d %H:%M:%S')} {path} was a symbolic link (to {pointed}); replaced by "
                      "this file: the queue's log is never written through a link\n".encode())
        return log


def main(argv: list[str] | None = None) -> int:
    """Fork away from the starter (who gets the keeper's pid on stdout), take the lock, keep the queue going."""
    fork_away()
    ensure_private_dir(data_dir())
    try:
        fd = os.open(lock_path(), os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o600)
    except OSError as exc:
        _log(str(SymlinkRefused(lock_path())) if os.path.islink(lock_path()) else f"cannot open the queue lock: {exc}")
        return 1
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        _log("another keeper holds the queue lock; this one exits")
        return 0
    _log(f"keeper started (pid {os.getpid()})")
    with QueueStore() as queue:
        try:
            Keeper(queue).run_forever()
        except Exception:  # noqa: BLE001 - logged; a later command starts a fresh keeper
            import traceback

            _log("keeper failed:\n" + traceback.format_exc())
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
