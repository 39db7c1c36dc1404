"""Rate and ETA from progress timestamps, for sources that do not print their own (tqdm does)."""

from __future__ import annotations


class RateEstimator:
    """Items per second, smoothed: each estimate spans at least `window` seconds (so a burst of buffered lines
    read at once does not produce absurd rates) and is blended into the previous one with weight `alpha`."""

    __slots__ = ("window", "alpha", "rate", "_n0", "_t0", "_last_n")

    def __init__(self, window: float = 1.0, alpha: float = 0.3) -> None:
        self.window = window
        self.alpha = alpha
        self.rate: float | None = None
        self._n0: int | None = None
        self._t0 = 0.0
        self._last_n = 0

    def update(self, n: int, t: float) -> float | None:
        if self._n0 is None or n < self._last_n:
            # First sample, or the counter restarted (next epoch's bar): start a new span, keep the last rate.
            self._n0, self._t0 = n, t
        else:
            dt = t - self._t0
            if dt >= self.window and n > self._n0:
                inst = (n - self._n0) / dt
                self.rate = inst if self.rate is None else self.alpha * inst + (1 - self.alpha) * self.rate
                self._n0, self._t0 = n, t
        self._last_n = n
        return self.rate

    @staticmethod
    def eta(current: int, total: int | None, rate: float | None) -> float | None:
        if total is None or not rate or rate <= 0:
            return None
        return max(0.0, (total - current) / rate)
