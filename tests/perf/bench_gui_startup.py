"""Window shown <= 1 s after start: time from process start to the main window's first paint, and what it costs.

    .venv/bin/python tests/perf/bench_gui_startup.py            # BENCH_RUNS=5 by default
    .venv/bin/python tests/perf/bench_gui_startup.py --smoke    # one run (and the -X importtime one)

Each run is a new process started like `python -m traindeck gui` (through tests/gui/startup_harness.py, which only
notes the time of the first paint and exits), offscreen, with a fresh TRAINDECK_HOME (a first start: no saved
window state, the cpu-demo preset loaded). The clock starts just before the process is spawned, so interpreter
start-up is included. Then one more run under `-X importtime` shows where the import time goes.
Prints tables; exits 1 when the median first paint exceeds the budget (not under --smoke, which checks that the
bench runs end to end).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
HARNESS = REPO / "tests" / "gui" / "startup_harness.py"
RUNS = int(os.environ.get("BENCH_RUNS", "5"))
BUDGET_S = 1.0
PHASES = (("python_ready", "interpreter up"), ("window_built", "window built"), ("first_expose", "exposed"),
          ("first_paint", "first paint"))


def _env(home: str) -> dict[str, str]:
    env = dict(os.environ, TRAINDECK_HOME=home, TRAINDECK_NO_CLOSE_PROMPT="1", QT_QPA_PLATFORM="offscreen")
    env.pop("PYTHONPROFILEIMPORTTIME", None)
    return env


def one_run(extra: list[str] | None = None) -> tuple[dict[str, float], float, str]:
    """(phase -> seconds since spawn, whole process seconds, stderr)."""
    with tempfile.TemporaryDirectory(prefix="traindeck-bench-") as home:
        started = time.time()
        done = subprocess.run([sys.executable, *(extra or []), str(HARNESS)], capture_output=True, text=True,
                              env=_env(home), cwd=REPO, timeout=120)
        ended = time.time()
    line = next((ln for ln in done.stdout.splitlines() if ln.startswith("STARTUP ")), None)
    if done.returncode != 0 or line is None:
        raise SystemExit(f"the harness failed (exit {done.returncode}):\n{done.stderr[-3000:]}")
    marks = json.loads(line[len("STARTUP "):])
    return {key: marks[key] - started for key, _ in PHASES if key in marks}, ended - started, done.stderr


def baseline(code: str) -> float:
    started = time.perf_counter()
    subprocess.run([sys.executable, "-c", code], check=True, env=_env(tempfile.gettempdir()))
    return time.perf_counter() - started


_IMPORTTIME = re.compile(r"^import time:\s+(\d+) \|\s+(\d+) \|( *)(\S+)")


def import_breakdown(stderr: str) -> tuple[list[tuple[str, int]], list[tuple[str, int]], int]:
    """(top-level imports by cumulative us, modules by self us, total us) from -X importtime output."""
    top: list[tuple[str, int]] = []
    selfs: list[tuple[str, int]] = []
    for line in stderr.splitlines():
        m = _IMPORTTIME.match(line)
        if not m:
            continue
        self_us, cumulative_us, indent, name = int(m[1]), int(m[2]), len(m[3]), m[4]
        selfs.append((name, self_us))
        if indent <= 1:  # imported directly by the harness/entry point, not by another module
            top.append((name, cumulative_us))
    total = sum(us for _, us in top)
    return sorted(top, key=lambda x: -x[1]), sorted(selfs, key=lambda x: -x[1]), total


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--smoke", action="store_true", help="one run: checks the bench runs end to end")
    args = parser.parse_args()
    runs = 1 if args.smoke else RUNS
    print(f"GUI start-up, {runs} runs, offscreen, fresh TRAINDECK_HOME each (budget: first paint <= {BUDGET_S:g} s)")
    print(f"  python -c pass: {baseline('pass') * 1e3:.0f} ms;  "
          f"python -c 'import PySide6.QtWidgets': {baseline('import PySide6.QtWidgets') * 1e3:.0f} ms")
    samples: dict[str, list[float]] = {key: [] for key, _ in PHASES}
    totals: list[float] = []
    for _ in range(runs):
        phases, total, _stderr = one_run()
        for key, value in phases.items():
            samples[key].append(value)
        totals.append(total)
    print()
    print(f"| {'since spawn':<16} | {'median':>8} | {'max':>8} | {'min':>8} |")
    print(f"| {'-' * 16} | {'-' * 8}:| {'-' * 8}:| {'-' * 8}:|")
    for key, label in PHASES:
        values = samples[key]
        if values:
            print(f"| {label:<16} | {statistics.median(values) * 1e3:6.0f} ms | {max(values) * 1e3:6.0f} ms | "
                  f"{min(values) * 1e3:6.0f} ms |")
    print(f"| {'process exit':<16} | {statistics.median(totals) * 1e3:6.0f} ms | {max(totals) * 1e3:6.0f} ms | "
          f"{min(totals) * 1e3:6.0f} ms |")

    _phases, _total, stderr = one_run(["-X", "importtime"])
    top, selfs, total_us = import_breakdown(stderr)
    print()
    print(f"Imports (one run under -X importtime, which inflates them; {total_us / 1e3:.0f} ms in all):")
    print(f"| {'top-level import':<40} | {'cumulative':>10} |")
    print(f"| {'-' * 40} | {'-' * 10}:|")
    for name, us in top[:15]:
        print(f"| {name:<40} | {us / 1e3:7.1f} ms |")
    print()
    print(f"| {'module (own time)':<40} | {'self':>10} |")
    print(f"| {'-' * 40} | {'-' * 10}:|")
    for name, us in selfs[:12]:
        print(f"| {name:<40} | {us / 1e3:7.1f} ms |")

    median = statistics.median(samples["first_paint"])
    print()
    print(f"first paint: median {median * 1e3:.0f} ms, max {max(samples['first_paint']) * 1e3:.0f} ms "
          f"-> {'within' if median <= BUDGET_S else 'OVER'} the {BUDGET_S:g} s budget")
    return 0 if median <= BUDGET_S or args.smoke else 1


if __name__ == "__main__":
    sys.exit(main())
