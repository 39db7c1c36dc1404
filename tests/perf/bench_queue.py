"""Unattended runs: prints a table.

    .venv/bin/python tests/perf/bench_queue.py            # 5 queued runs, 5 NaN runs (about a minute or two)
    .venv/bin/python tests/perf/bench_queue.py --runs 3
    .venv/bin/python tests/perf/bench_queue.py --smoke    # 2 queued runs (one gap), 1 NaN run

Measures, with real supervised runs of a stdlib script (plain python launcher) started by the real CLI:
  gap    one queued run's end -> the next one's start (`--max-running 1`), from the run store's times
  nan    `--stop-on-nan`: the NaN loss line printed (the script stamps the time) -> the watchdog asked to stop
         (its event) and -> the run ended (the store's ended_at); the goal is the end within 5 s
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

SCRATCH = Path(tempfile.mkdtemp(prefix="traindeck-bench-queue-"))
os.environ["TRAINDECK_HOME"] = str(SCRATCH / "home")

from traindeck.backend.runs.record.run_store import RunStore  # noqa: E402

JOB = Path(__file__).resolve().parent.parent / "fixtures" / "scripts" / "queue_job.py"


def cli(*args: str) -> str:
    done = subprocess.run([sys.executable, "-m", "traindeck", *args], capture_output=True, text=True, timeout=300,
                          cwd=JOB.parent)
    if done.returncode != 0:
        raise SystemExit(f"traindeck {' '.join(args)} failed: {done.stderr}")
    return done.stdout


def wait_ended(ids: list[str], timeout: float = 600.0) -> list:  # type: ignore[type-arg]
    deadline = time.monotonic() + timeout
    with RunStore() as store:
        while time.monotonic() < deadline:
            records = [store.get_run(i) for i in ids]
            if all(r is not None and r.finished for r in records):
                return records
            time.sleep(0.2)
    raise SystemExit("runs did not end in time")


def summary(values: list[float]) -> str:
    return f"median {statistics.median(values):.2f} s, max {max(values):.2f} s (n={len(values)})"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5, help="queued runs, and NaN runs")
    parser.add_argument("--smoke", action="store_true",
                        help="2 queued runs (one gap) and 1 NaN run: checks the bench runs end to end")
    args = parser.parse_args()
    queued, nan_runs = (2, 1) if args.smoke else (max(2, args.runs), args.runs)
    cli("queue", "--max-running", "1")
    ids = [cli("queue", "add", "--launcher", "python", JOB.name, "--steps", "3").split()[-1] for _ in range(queued)]
    records = wait_ended(ids)
    gaps = [b.started_at - a.ended_at for a, b in zip(records, records[1:], strict=False)]
    overlaps = sum(1 for a, b in zip(records, records[1:], strict=False) if b.started_at < a.ended_at)

    asked, ended = [], []
    for i in range(nan_runs):
        stamp = SCRATCH / f"nan{i}.json"
        out = cli("run", "--detach", "--launcher", "python", "--stop-on-nan", JOB.name, "--steps", "600",
                  "--step-time", "0.1", "--nan-at", "10", "--stamp", str(stamp))
        (record,) = wait_ended([out.split()[-1]])
        printed = json.loads(stamp.read_text())["nan_printed"]
        with RunStore() as store:
            stop_t = next(e.t for e in store.events(record.id) if e.kind == "watchdog_stop")
        asked.append(stop_t - printed)
        ended.append(record.ended_at - printed)
        assert record.state == "stopped", record.state

    print("| what | measured |")
    print("| --- | --- |")
    print(f"| queued run's end -> next start (`--max-running 1`) | {summary(gaps)}; overlaps: {overlaps} |")
    print(f"| NaN line printed -> stop asked | {summary(asked)} |")
    print(f"| NaN line printed -> run ended (goal <= 5 s) | {summary(ended)} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
