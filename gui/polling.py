"""One cadence for a page's reads: how often it asks, backing off while nothing changes, and what it does off screen.

A page that keeps something fresh (the open run, the run history, the queue) gives a `Poller` its read and its
paces; the poller owns the timer. The read itself runs on `ctx.tasks`, and a page's lane drops stale answers, so
the poller only says when to ask:

- `live_ms` while the page is on screen and the last answer brought news;
- doubling up to `max_ms` while answers bring nothing new (`settle(news=False, ...)`);
- `hidden_ms` while the page is off screen or its window minimised, or no reads at all when `hidden_ms` is 0;
- back to `live_ms` (and started again if it was paused) when the page is back on screen.
"""

from __future__ import annotations

from collections.abc import Callable

from PySide6.QtCore import QObject, QTimer


class Poller(QObject):
    """Calls `read` on a timer whose interval follows the page's news and visibility."""

    def __init__(self, parent: QObject, read: Callable[[], None], *, live_ms: int, max_ms: int | None = None,
                 hidden_ms: int = 0) -> None:
        super().__init__(parent)
        self.live_ms, self.max_ms, self.hidden_ms = live_ms, max_ms or live_ms, hidden_ms
        self.timer = QTimer(self)
        self.timer.setInterval(live_ms)
        self.timer.timeout.connect(read)
        self._paused = False  # stopped because the page went off screen (restarted when it comes back)

    def start(self) -> None:
        self._paused = False
        self.timer.start()

    def stop(self) -> None:
        self._paused = False
        self.timer.stop()

    def active(self) -> bool:
        return self.timer.isActive()

    def interval(self) -> int:
        return self.timer.interval()

    def settle(self, news: bool, on_screen: bool) -> None:
        """After an answer: the live pace while news comes, backing off while none does, the hidden pace off screen."""
        if not on_screen:
            interval = self.hidden_ms or self.timer.interval()
        elif news:
            interval = self.live_ms
        else:
            interval = min(self.max_ms, 2 * self.timer.interval())
        if interval != self.timer.interval():
            self.timer.setInterval(interval)

    def off_screen(self) -> None:
        """The page is hidden or its window minimised: read at the hidden pace, or not at all."""
        if self.hidden_ms:
            self.timer.setInterval(self.hidden_ms)
        elif self.timer.isActive():
            self.timer.stop()
            self._paused = True

    def on_screen(self, start: bool = False) -> None:
        """The page is seen again: the live pace; a paused poller (or any, with `start`) runs again."""
        self.timer.setInterval(self.live_ms)
        if start or self._paused:
            self._paused = False
            self.timer.start()
