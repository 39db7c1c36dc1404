"""`Collector`: a background sampling loop with start/stop, a context manager, and no drift.

The loop schedules by absolute deadlines (next = timer() + interval; sleep(max(0, next - timer())); next += interval)
so that a 1 s sampler still takes 86,400 samples a day however long each sample takes. When a sample overruns a
whole interval the schedule restarts from now instead of firing a burst of catch-up samples: rates computed over
a burst would be noise.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from types import TracebackType

logger = logging.getLogger(__name__)

MIN_INTERVAL_S = 0.1  # 10 Hz
MAX_INTERVAL_S = 5.0  # 0.2 Hz


def check_interval(interval_s: float) -> float:
    """The interval as a float, or ValueError when outside what the monitor supports (0.2-10 Hz)."""
    value = float(interval_s)
    if not MIN_INTERVAL_S <= value <= MAX_INTERVAL_S:
        raise ValueError(f"sampling interval must be between {MIN_INTERVAL_S} and {MAX_INTERVAL_S} s, got {value:g}")
    return value


class Collector:
    """Runs `_tick()` every `interval_s` seconds on a daemon thread between `start()` and `stop()`.

    `interval_s` may be changed while the loop runs (a viewer slowing it down while nobody looks): the next
    deadline is the first to use it. Subclasses override `_tick` and optionally `_prime` (once on the thread before the first interval, e.g. to
    take the first counter readings that rates are computed against) and `_finish` (once on the thread after the
    last tick). An exception in a tick is logged and the loop goes on: a monitor must outlive a bad sample.
    """

    def __init__(self, interval_s: float, *, name: str | None = None) -> None:
        self.interval_s = check_interval(interval_s)
        self._name = name or type(self).__name__
        self._stop_event = threading.Event()
        self._thread: threading.Thread | None = None
        self.ticks = 0
        self.failed_ticks = 0

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def start(self) -> None:
        if self.running:
            return
        self._stop_event.clear()
        self._thread = threading.Thread(target=self._run, name=self._name, daemon=True)
        self._thread.start()

    def stop(self, timeout: float | None = 10.0) -> bool:
        """Ask the loop to end and wait for the tick in progress (if any); False if it is still running."""
        self._stop_event.set()
        thread, self._thread = self._thread, None
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout)
            return not thread.is_alive()
        return True

    def __enter__(self) -> Collector:
        self.start()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    def _prime(self) -> None:
        """Runs once on the thread before the first interval."""

    def _tick(self) -> None:
        raise NotImplementedError

    def _finish(self) -> None:
        """Runs once on the thread after the last tick."""

    def _run(self) -> None:
        timer = time.monotonic
        try:
            self._guarded(self._prime)
            next_at = timer() + self.interval_s
            while not self._stop_event.wait(max(0.0, next_at - timer())):
                self._guarded(self._tick)
                self.ticks += 1
                next_at += self.interval_s
                if next_at < timer() - self.interval_s:  # fell a whole interval behind: restart the schedule
                    next_at = timer() + self.interval_s
        finally:
            self._guarded(self._finish)

    def _guarded(self, step: Callable[[], None]) -> None:
        try:
            step()
        except Exception:
            self.failed_ticks += 1
            # Once per failure is enough to diagnose; the loop keeps its cadence either way.
            logger.warning("%s: sampling step failed", self._name, exc_info=True)
