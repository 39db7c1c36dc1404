"""Work off the UI thread: backend calls that may block (SQLite, /proc, subprocess probes, NVML, estimator) run on
a thread pool and hand their result back to the UI thread through a queued signal.

Pages never call a blocking backend function directly from a slot; they call `tasks.run(fn, ..., done=slot)`.
Work where only the newest answer counts (a check of the draft as it is now, a preview, an estimate) goes through a
`Lane` (`tasks.lane()`): an answer overtaken by a newer request, or asked before `lane.invalidate()`, is dropped
there, so no page counts generations itself. A failure reaches `failed` as a TaskError: the one-line text pages
show (it is a str) with the exception object kept (`.exception`) for those that tell kinds apart.
"""

from __future__ import annotations

import types
from collections.abc import Callable
from typing import Any

import shiboken6
from PySide6.QtCore import QObject, QThreadPool, Signal, Slot


class TaskError(str):
    """A job's failure: its text (what pages show; a str, so a `failed` slot that expects text takes it as it is)
    and the exception object itself."""

    exception: BaseException

    def __new__(cls, exception: BaseException) -> TaskError:
        if str(exception):
            text = str(exception)
        else:  # no message of its own: its name and where the traceback went, never the traceback itself
            from traindeck.gui.error_log import one_line

            text = one_line(exception, "a background job failed")
        error = super().__new__(cls, text)
        error.exception = exception
        return error


class _Relay(QObject):
    # Emitted from the worker threads; it lives in the UI thread, so Qt queues the delivery there.
    finished = Signal(int, object, object)  # (job number, result, exception or None)


def _job(number: int, fn: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any],
         relay: _Relay) -> Callable[[], None]:
    """The work as a plain callable for QThreadPool.start. Not a QRunnable subclass: PySide6 (6.11) keeps the
    Python side of such a runnable alive for good when it finishes before start() returns (a quick store read
    often does), and with it everything the job refers to."""

    def run() -> None:
        error: BaseException | None
        try:
            result, error = fn(*args, **kwargs), None
        except Exception as exc:  # reported to the page as the object, never a crash of the window
            result, error = None, exc
        try:
            relay.finished.emit(number, result, error)
        except RuntimeError:  # the Tasks object (the window) was deleted while the job ran
            pass

    return run


class Tasks(QObject):
    """A small thread pool for the pages. Results arrive on the UI thread; a job whose owner is gone is dropped.

    One relay for every job, its answers matched by job number: a QObject and a connection made per job would
    cost ~300 bytes each that PySide6 never gives back, and a window watching a run starts two jobs a second
    (tests/perf/bench_gui_soak.py)."""

    def __init__(self, parent: QObject | None = None, max_threads: int = 4):
        super().__init__(parent)
        self.pool = QThreadPool(self)
        self.pool.setMaxThreadCount(max_threads)
        self._relay = _Relay(self)
        self._relay.finished.connect(self._deliver)
        self._waiting: dict[int, tuple[Callable[[Any], None] | None, Callable[[TaskError], None] | None]] = {}
        self._last_number = 0

    def lane(self) -> Lane:
        """Jobs where only the newest answer counts (see Lane)."""
        return Lane(self)

    def run(self, fn: Callable[..., Any], *args: Any, done: Callable[[Any], None] | None = None,
            failed: Callable[[TaskError], None] | None = None, **kwargs: Any) -> None:
        """Run `fn(*args, **kwargs)` on the pool; `done(result)` or `failed(TaskError)` is called on the UI thread."""
        self._last_number += 1
        self._waiting[self._last_number] = (done, failed)
        self.pool.start(_job(self._last_number, fn, args, kwargs, self._relay))

    @property
    def waiting(self) -> int:
        """Jobs asked for and not answered yet (tests: nothing is kept once answered)."""
        return len(self._waiting)

    @Slot(int, object, object)
    def _deliver(self, number: int, result: Any, error: Any) -> None:
        done, failed = self._waiting.pop(number, (None, None))
        if not (_owner_alive(done) and _owner_alive(failed)):
            return  # the page (or window) that asked was closed while the job ran: nobody to tell
        if error is not None:
            if failed is not None:
                failed(TaskError(error))
        elif done is not None:
            done(result)

    def wait(self, timeout_ms: int = 30000) -> bool:
        """Tests and shutdown: wait for running jobs (never called from a slot during normal use)."""
        return self.pool.waitForDone(timeout_ms)


class Lane:
    """A line of requests about one changing thing: only the newest request's answer is delivered; `invalidate()`
    drops the answers of everything asked so far (the thing changed). Jobs already running are not interrupted
    (a thread cannot be stopped safely): their answers are dropped when they arrive."""

    def __init__(self, tasks: Tasks) -> None:
        self._tasks = tasks
        self._ticket = 0  # the newest request (or invalidation)

    @property
    def ticket(self) -> int:
        """The lane's current ticket: `current(ticket)` tells later whether nothing newer happened since."""
        return self._ticket

    def current(self, ticket: int) -> bool:
        return ticket == self._ticket

    def invalidate(self) -> None:
        self._ticket += 1

    def run(self, fn: Callable[..., Any], *args: Any, done: Callable[[Any], None] | None = None,
            failed: Callable[[TaskError], None] | None = None, **kwargs: Any) -> None:
        """Like Tasks.run, but the answer is dropped when a newer run() or invalidate() came after it."""
        self._ticket += 1
        ticket = self._ticket

        def deliver_done(result: Any) -> None:
            if ticket == self._ticket and done is not None:
                done(result)

        def deliver_failed(error: TaskError) -> None:
            if ticket == self._ticket and failed is not None:
                failed(error)

        # The owner check (a closed page's slots are never called) looks at the callbacks given, not at ours.
        self._tasks.run(fn, *args, done=_owned(deliver_done, done), failed=_owned(deliver_failed, failed), **kwargs)


def _owned(wrapper: Callable[[Any], None], callback: Callable[..., Any] | None) -> Callable[[Any], None]:
    """`wrapper`, dropped like `callback` would be when the Qt object owning `callback` is deleted."""
    owner = getattr(callback, "__self__", None)
    if not isinstance(owner, QObject):
        return wrapper
    return types.MethodType(lambda _self, value: wrapper(value), owner)


def owned(owner: QObject, callback: Callable[[Any], None]) -> Callable[[Any], None]:
    """`callback` (a lambda carrying a request's context) as a method of `owner`: `run` then drops the answer when
    `owner` was deleted meanwhile (its page closed), as it does for bound methods; a bare lambda would reach the
    deleted widgets."""
    return types.MethodType(lambda _owner, value: callback(value), owner)


def _owner_alive(callback: Callable[..., Any] | None, depth: int = 2) -> bool:
    """False when `callback` belongs to a Qt object whose C++ side was deleted (a closed page's slot): a method of
    it, or a closure over it (a nested `done` that uses `self`), looked for through `depth` nested closures (a
    Lane's wrapper around the page's closure)."""
    if callback is None:
        return True
    owner = getattr(callback, "__self__", None)
    if isinstance(owner, QObject) and not shiboken6.isValid(owner):
        return False
    if depth <= 0:
        return True
    function = getattr(callback, "__func__", callback)
    for cell in getattr(function, "__closure__", None) or ():
        try:
            value = cell.cell_contents
        except ValueError:  # a cell not filled yet
            continue
        if isinstance(value, QObject):
            if not shiboken6.isValid(value):
                return False
        elif callable(value) and not _owner_alive(value, depth - 1):
            return False
    return True
