"""Cadence of the sampling loop (backend.monitor.loop.Collector) when each tick does work: prints a table.

    .venv/bin/python tests/perf/bench_monitor_cadence.py

The loop keeps absolute deadlines, so ticks land every interval however long a tick takes (up to the interval);
a sleep(interval) loop would drift to interval + work. tests/test_monitor_host.py counts ticks; the spacing in
time is measured here, where a busy machine's jitter is a number to read, not a failed assert.
"""

from __future__ import annotations

import statistics
import time

from traindeck.backend.monitor.loop import Collector


class _Ticker(Collector):
    def __init__(self, interval_s: float, work_s: float) -> None:
        super().__init__(interval_s, name="bench-ticker")
        self.work_s = work_s
        self.times: list[float] = []

    def _tick(self) -> None:
        self.times.append(time.monotonic())
        time.sleep(self.work_s)


def main() -> None:
    print(f"{'interval s':>10} {'work s':>7} {'ticks':>6} {'median span ms':>15} {'p90 span ms':>12}")
    for interval, work in ((0.1, 0.0), (0.1, 0.04), (0.1, 0.08), (0.05, 0.02)):
        ticker = _Ticker(interval, work)
        with ticker:
            time.sleep(2.0)
        spans = sorted(b - a for a, b in zip(ticker.times, ticker.times[1:], strict=False))
        p90 = spans[int(len(spans) * 0.9)] if spans else float("nan")
        print(f"{interval:>10.3f} {work:>7.3f} {len(ticker.times):>6} {statistics.median(spans) * 1000:>15.1f} "
              f"{p90 * 1000:>12.1f}")


if __name__ == "__main__":
    main()
