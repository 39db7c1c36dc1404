"""A short run of bench_monitor.py (the full table, with a day of samples and 1 Hz recording:
`python tests/perf/bench_monitor.py`).

The per-sample budget (2 ms of CPU for host + 8 ranks) and the chart-read budget (200 ms) are checked on 20,000
samples instead of a day's 86,400, so a busy CI machine has room; the 1 Hz share of a core is only in the full
run, since it needs tens of seconds of quiet to mean anything.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import bench_monitor  # noqa: E402


def test_monitor_sample_and_chart_read_budgets(capsys):
    rows = bench_monitor.measure(samples=20_000, record_s=0)
    with capsys.disabled():
        bench_monitor.print_table(rows)
    failed = [row for row in rows if not row[3]]
    assert failed == []
