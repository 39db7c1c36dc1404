"""Cadence of the sampling loop (backend.monitor.loop.Collector) when each tick does work: prints a table.

    .venv/bin/python tests/perf/bench_monitor_cadence.py            # 2 s per row
    .venv/bin/python tests/perf/bench_monitor_cadence.py --smoke    # 3 ticks per row: the table, not a measure

The loop keeps absolute deadlines, so ticks land every interval however long a tick takes (up to the interval);
a sleep(interval) loop would drift to interval + work. tests/test_monitor_host.py counts ticks; the spacing in
time is measured here, where a busy machine's jitter is a number to read, not a failed assert.
"""

from __future__ import annotations

import argparse
import statistics
import time

from traindeck.backend.monitor.loop import MIN_INTERVAL_S, Collector

# (interval s, work s a tick): the loop's fastest cadence idle and with 40% and 80% of it spent working, then a
# slower cadence; intervals stay within what Collector accepts (check_interval).
ROWS = ((MIN_INTERVAL_S, 0.0), (MIN_INTERVAL_S, 0.04), (MIN_INTERVAL_S, 0.08), (0.2, 0.08))


class _Ticker(Collector):
    def __init__(self, interval_s: float, work_s: float) -> None:
        super().__init__(interval_s, name="bench-ticker")
        self.work_s = work_s
        self.times: list[float] = []

    def _tick(self) -> None:
        self.times.append(time.monotonic())
        time.sleep(self.work_s)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=2.0, help="how long each row's loop runs")
    parser.add_argument("--smoke", action="store_true",
                        help="about 3 ticks a row: checks the bench runs end to end, measures nothing")
    args = parser.parse_args()
    print(f"{'interval s':>10} {'work s':>7} {'ticks':>6} {'median span ms':>15} {'p90 span ms':>12}")
    for interval, work in ROWS:
        ticker = _Ticker(interval, work)
        with ticker:
            time.sleep(3.5 * interval if args.smoke else args.seconds)
        spans = sorted(b - a for a, b in zip(ticker.times, ticker.times[1:], strict=False))
        p90 = spans[int(len(spans) * 0.9)] if spans else float("nan")
        print(f"{interval:>10.3f} {work:>7.3f} {len(ticker.times):>6} {statistics.median(spans) * 1000:>15.1f} "
              f"{p90 * 1000:>12.1f}")


if __name__ == "__main__":
    main()
