"""The moment each of the run's processes ends, and how, seen from a thread that does nothing else.

Ranks are the launcher's children, not the supervisor's, so their exit status can only be read from /proc in the
short time they are zombies: DeepSpeed's launch.py reaps them within a second, then ends the other ranks. The
supervisor's loop scans 4x a second, but a slow SQLite commit or a busy machine can hold it back for a second, and
then the failed rank and the ranks ended after it all seem to have gone in the same instant, so the run is blamed
on the wrong rank. A pidfd (Linux >= 5.3) turns readable the moment its process exits, whoever its parent is: a
thread waiting on them notes the time and reads the zombie's status at once, whatever the loop is doing.

Without pidfds (older kernels) `watch` does nothing and the supervisor keeps its own scan's view.
"""

from __future__ import annotations

import os
import select
import threading
import time

from traindeck.backend.runs import processes as procs


class ExitWatcher:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._fds: dict[int, int] = {}  # pidfd -> pid
        self._ended: dict[int, tuple[float, int | None]] = {}  # pid -> (time.time() of the exit, wait status)
        self._wake_read, self._wake_write = os.pipe()
        os.set_blocking(self._wake_write, False)
        self._closed = False
        self.available = hasattr(os, "pidfd_open")
        self._thread = threading.Thread(target=self._run, name="exit-watcher", daemon=True)
        self._thread.start()

    def watch(self, pid: int) -> None:
        """Note pid's exit from now on (a second call for the same pid is harmless)."""
        if not self.available or self._closed:
            return
        with self._lock:
            if pid in self._fds.values():
                return
            self._ended.pop(pid, None)  # a number now given to a new process: forget the old one's end
            try:
                fd = os.pidfd_open(pid)
            except ProcessLookupError:
                return  # already reaped: the scan records it as it always did
            except OSError:
                self.available = False  # ENOSYS (kernel < 5.3) or a sandbox refusing it
                return
            self._fds[fd] = pid
        self._wake()

    def ended(self, pid: int) -> tuple[float, int | None] | None:
        """(when, raw wait status or None if it was reaped before it could be read) for a watched pid that ended."""
        with self._lock:
            return self._ended.get(pid)

    def close(self) -> None:
        self._closed = True
        self._wake()
        self._thread.join(timeout=2.0)
        with self._lock:
            for fd in self._fds:
                os.close(fd)
            self._fds.clear()
        for fd in (self._wake_read, self._wake_write):
            try:
                os.close(fd)
            except OSError:
                pass

    def _wake(self) -> None:
        try:
            os.write(self._wake_write, b"x")
        except (BlockingIOError, OSError):
            pass  # the pipe is full or closed: the thread is awake already

    def _run(self) -> None:
        poller = select.poll()
        poller.register(self._wake_read, select.POLLIN)
        registered: set[int] = set()
        while not self._closed:
            with self._lock:
                for fd in self._fds:
                    if fd not in registered:
                        poller.register(fd, select.POLLIN)
                        registered.add(fd)
            for fd, _events in poller.poll():
                if fd == self._wake_read:
                    try:
                        os.read(self._wake_read, 4096)
                    except OSError:
                        pass
                    continue
                when = time.time()
                with self._lock:
                    pid = self._fds.pop(fd, None)
                poller.unregister(fd)
                registered.discard(fd)
                os.close(fd)
                if pid is None:
                    continue
                # Read while it is still a zombie: its parent may reap it any moment now.
                status = procs.zombie_exit_status(pid)
                with self._lock:
                    self._ended[pid] = (when, status)
