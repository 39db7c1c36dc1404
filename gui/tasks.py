"""Work off the UI thread: backend calls that may block (SQLite, /proc, subprocess probes, NVML, estimator) run on
a thread pool and hand their result back to the UI thread through a queued signal.

Pages never call a blocking backend function directly from a slot; they call `tasks.run(fn, ..., done=slot)`.
"""

from __future__ import annotations

import traceback
from collections.abc import Callable
from typing import Any

import shiboken6
from PySide6.QtCore import QObject, QRunnable, QThreadPool, Signal, Slot


class _Relay(QObject):
    # Emitted from the worker thread; the receiver lives in the UI thread, so Qt queues the call there.
    finished = Signal(object, object)  # (result, error text or None)


class _Job(QRunnable):
    def __init__(self, fn: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any], relay: _Relay):
        super().__init__()
        self.setAutoDelete(True)
        self._fn, self._args, self._kwargs, self._relay = fn, args, kwargs, relay

    def run(self) -> None:
        try:
            result, error = self._fn(*self._args, **self._kwargs), None
        except Exception as exc:  # reported to the page, never a crash of the window
            result, error = None, f"{exc}\n\n{traceback.format_exc(limit=6)}" if not str(exc) else str(exc)
        try:
            self._relay.finished.emit(result, error)
        except RuntimeError:  # the page (and its relay) was deleted while the job ran
            pass


class Tasks(QObject):
    """A small thread pool for the pages. Results arrive on the UI thread; a job whose owner is gone is dropped."""

    def __init__(self, parent: QObject | None = None, max_threads: int = 4):
        super().__init__(parent)
        self.pool = QThreadPool(self)
        self.pool.setMaxThreadCount(max_threads)
        self._relays: set[_Relay] = set()

    def run(self, fn: Callable[..., Any], *args: Any, done: Callable[[Any], None] | None = None,
            failed: Callable[[str], None] | None = None, **kwargs: Any) -> None:
        relay = _Relay()
        self._relays.add(relay)

        @Slot(object, object)
        def deliver(result: Any, error: Any) -> None:
            self._relays.discard(relay)
            relay.deleteLater()
            if not (_owner_alive(done) and _owner_alive(failed)):
                return  # the page (or window) that asked was closed while the job ran: nobody to tell
            if error is not None:
                if failed is not None:
                    failed(str(error))
            elif done is not None:
                done(result)

        relay.finished.connect(deliver)
        self.pool.start(_Job(fn, args, kwargs, relay))

    def wait(self, timeout_ms: int = 30000) -> bool:
        """Tests and shutdown: wait for running jobs (never called from a slot during normal use)."""
        return self.pool.waitForDone(timeout_ms)


def _owner_alive(callback: Callable[..., Any] | None) -> bool:
    """False when `callback` is a method of a Qt object whose C++ side was deleted (a closed page's slot)."""
    owner = getattr(callback, "__self__", None)
    return not isinstance(owner, QObject) or shiboken6.isValid(owner)
