"""What making printed metric values exact from TensorBoard costs over a 3-hour run, printed as a table; nothing is
asserted.

    .venv/bin/python tests/perf/bench_exact_values.py            # 3 h at 5 logged steps/s: 54,000 steps
    .venv/bin/python tests/perf/bench_exact_values.py --smoke    # 3 minutes of such a run

The run is the HF Trainer's shape at logging_steps=1: every step 4 printed series (loss, grad_norm, learning_rate,
epoch; .4g, without a step) and their TensorBoard twins (train/*, float32, written just before the print), and a
TensorBoard-only tag (train/total_flos) every 100 steps. The sidecar's poll runs every 2 s of run time (10 steps);
time is simulated (event wall times, printed row times, the recorder's clock), the work is real: a real event file
read with TensorBoard's loader, a real run store on disk. Measured:
- the sidecar's polls (TensorBoardRecorder.poll): all of them, the median, the slowest, and their parts in the
  last hour; where the pre-revision sidecar instead paid `last_metrics` (a pass over the run's whole index) every
  poll, that query at the run's end;
- the store: rows, revisions logged (pruned to 10 minutes of run time), file size;
- a live view: one poll's revisions read (metric_revisions_after), the latest values (last_metric_rows), the loss
  series read whole (load_series, as a chart shown for the first time);
- a chart handed a revised series whole (the Runs page then redraws it) against being handed 10 new points.
On a tree without TensorBoardRecorder (before this change) it runs the sidecar's loop of then instead.
"""

from __future__ import annotations

import argparse
import functools
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

STEPS_PER_S = 5.0
POLL_STEPS = 10  # 2 s of run time
FIGURES = ("loss", "grad_norm", "learning_rate", "epoch")


def ms(seconds: float) -> str:
    return f"{seconds * 1000:.2f} ms"


def exact_values(step: int) -> dict[str, float]:
    """The Trainer's log at `step`: full-precision values, as TensorBoard gets them."""
    return {"loss": 2.0 + 1.5 / (1 + step / 500) + 0.013 * ((step * 7919) % 101) / 101,
            "grad_norm": 0.8 + 0.37 * ((step * 104729) % 997) / 997,
            "learning_rate": 5e-05 * (1 - step / 60_000),
            "epoch": step / 1200}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--smoke", action="store_true", help="3 minutes of the run: checks the bench runs end to end")
    args = parser.parse_args()
    hours = 0.05 if args.smoke else 3.0
    steps = int(hours * 3600 * STEPS_PER_S)
    work = Path(tempfile.mkdtemp(prefix="bench-exact-"))
    os.environ["TRAINDECK_HOME"] = str(work / "home")
    from tensorboard.compat.proto import event_pb2, summary_pb2
    from tensorboard.summary.writer.event_file_writer import EventFileWriter

    from traindeck.backend.runs.record import tensorboard
    from traindeck.backend.runs.record.run_store import RunRecord, RunStore

    new = hasattr(tensorboard, "TensorBoardRecorder")
    t0 = 1_800_000_000.0
    now = [t0]
    store = RunStore(work / "runs.db")
    store.add_run(RunRecord(id="r", run_dir=str(work), created_at=t0))
    logdir = work / "out" / "runs" / "exp"
    writer = EventFileWriter(str(logdir))
    reader = tensorboard.TensorBoardReader([logdir], since=0.0, clock=lambda: now[0])
    recorder = tensorboard.TensorBoardRecorder(store, "r", reader, clock=lambda: now[0]) if new else None
    polls: list[float] = []
    last_hour: dict[str, float] = {"printed rows": 0.0, "reader (event file, matching)": 0.0, "writes": 0.0}

    def poll(final: bool = False) -> None:
        started = time.perf_counter()
        if recorder is not None:
            if now[0] - t0 >= (hours - 1) * 3600 and not args.smoke:  # the last hour's polls, in parts
                mark = recorder.mark
                a = time.perf_counter()
                rows = store.metric_rows_after("r", mark)
                b = time.perf_counter()
                recorder.mark = rows[-1][0] if rows else mark
                written = reader.written
                read = reader.poll(recorder.parsed, final, [row for row in rows if row[1] not in written])
                recorder.parsed.clear()
                c = time.perf_counter()
                store.add_metrics("r", read.rows)
                recorder.revised += store.revise_metrics("r", read.revisions)
                recorder._revision_marks.append((now[0], store.revisions_mark()))
                recorder._prune(final)
                d = time.perf_counter()
                last_hour["printed rows"] += b - a
                last_hour["reader (event file, matching)"] += c - b
                last_hour["writes"] += d - c
            else:
                recorder.poll(final)
        else:  # the sidecar's loop before printed values were revised
            parsed = set(store.last_metrics("r")) - reader.written
            rows = reader.poll(parsed, final=final)
            if rows:
                store.add_metrics("r", rows)
        polls.append(time.perf_counter() - started)

    started = time.perf_counter()
    for first in range(1, steps + 1, POLL_STEPS):
        printed = []
        for step in range(first, min(first + POLL_STEPS, steps + 1)):
            wall = t0 + step / STEPS_PER_S
            logs = exact_values(step)
            tags = {f"train/{k}": v for k, v in logs.items()}
            if step % 100 == 0:
                tags["train/total_flos"] = 1.2e12 * step
            writer.add_event(event_pb2.Event(wall_time=wall, step=step, summary=summary_pb2.Summary(
                value=[summary_pb2.Summary.Value(tag=k, simple_value=v) for k, v in tags.items()])))
            printed += [(k, None, wall + 0.05, float(f"{v:.4g}"), 0) for k, v in logs.items()]
        writer.flush()
        store.add_metrics("r", printed)
        now[0] = t0 + (first + POLL_STEPS - 1) / STEPS_PER_S + 0.5
        poll()
    writer.close()
    now[0] += 2.0
    poll(final=True)
    simulated = time.perf_counter() - started

    with store._lock:
        rows_total = store._db.execute("SELECT count(*) FROM run_metrics").fetchone()[0]
    loss = [v for _s, _t, v in store.metric_series("r", "loss")]
    exact = sum(1 for step, v in enumerate(loss, 1) if v != float(f"{exact_values(step)['loss']:.4g}"))
    table: list[tuple[str, str]] = [
        ("tree", "revising (TensorBoardRecorder)" if new else "before (last_metrics each poll)"),
        ("run", f"{hours:g} h, {steps:,} steps, {len(polls):,} sidecar polls"),
        ("bench wall time (writing the run included)", f"{simulated:.1f} s"),
        ("sidecar polls: all", f"{sum(polls):.2f} s"),
        ("sidecar poll: median / slowest after the first (the first imports TensorBoard's loader)",
         f"{ms(statistics.median(polls))} / {ms(max(polls[1:]))}"),
        ("sidecar poll: the first", ms(polls[0])),
    ]
    if new and not args.smoke:
        count = sum(1 for _ in range(int((hours - 1) * 3600 * STEPS_PER_S), steps, POLL_STEPS))
        for part, spent in last_hour.items():
            table.append((f"  last hour, per poll: {part}", ms(spent / max(1, count))))
    timing = []
    for _ in range(5):
        a = time.perf_counter()
        store.last_metrics("r")
        timing.append(time.perf_counter() - a)
    table.append(("last_metrics at the end (the old sidecar's per-poll query)", ms(statistics.median(timing))))
    table.append(("loss values that are TensorBoard's, not the print's", f"{exact:,} of {len(loss):,}"))
    with store._lock:
        revisions = store._db.execute("SELECT count(*) FROM run_metric_revisions").fetchone()[0] if new else 0
    table.append(("store: rows / revisions logged (kept 10 min)", f"{rows_total:,} / {revisions:,}"))
    store.close()
    table.append(("store file (WAL merged)", f"{_merged_size(work / 'runs.db') / 1e6:.1f} MB"))

    if new:
        from traindeck.backend.runs.record.series import load_series

        with RunStore(work / "runs.db") as reading:
            mark = reading.revisions_mark()
            recent = max(0, mark - POLL_STEPS * 3)  # about one poll's revisions (loss, grad_norm, lr)
            timing = []
            for _ in range(20):
                a = time.perf_counter()
                reading.metric_revisions_after("r", recent, up_to=mark)
                timing.append(time.perf_counter() - a)
            table.append(("live view: one poll's revisions read", ms(statistics.median(timing))))
            timing = []
            for _ in range(5):
                a = time.perf_counter()
                reading.last_metric_rows("r")
                timing.append(time.perf_counter() - a)
            table.append(("live view: last_metric_rows (first read)", ms(statistics.median(timing))))
            a = time.perf_counter()
            series = load_series(functools.partial(reading.metric_series_chunks, "r", "loss"))
            table.append((f"live view: the loss series read whole ({series.count:,} points)",
                          ms(time.perf_counter() - a)))
        table += _chart_costs(series)

    width = max(len(what) for what, _ in table)
    print(f"{'what'.ljust(width)}  measured")
    for what, value in table:
        print(f"{what.ljust(width)}  {value}")
    return 0


def _merged_size(path: Path) -> int:
    import sqlite3

    with sqlite3.connect(path) as db:
        db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    return path.stat().st_size


def _chart_costs(series: object) -> list[tuple[str, str]]:
    """A Runs page chart (smoothing 0.6) handed a revised series whole, against 10 new points, each redrawn."""
    os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
    import numpy as np
    from PySide6.QtWidgets import QApplication

    from traindeck.backend.runs.record.series import BoundedSeries
    from traindeck.gui.widgets.charts import TimeSeriesChart

    assert isinstance(series, BoundedSeries)
    app = QApplication.instance() or QApplication([])
    chart = TimeSeriesChart("Loss", smoothing=0.6)
    chart.resize(900, 400)
    chart.show()
    x, y = series.arrays()
    chart.set_series("loss", x, y)
    chart.flush()
    app.processEvents()
    whole, tail = [], []
    last = float(x[-1])
    for _ in range(20):
        a = time.perf_counter()
        x, y = series.arrays()
        chart.set_series("loss", x, y)
        chart.flush()
        whole.append(time.perf_counter() - a)
        new_x = np.arange(last + 1, last + 11)
        last += 10
        a = time.perf_counter()
        chart.append("loss", new_x, np.full(10, 2.0))
        chart.flush()
        tail.append(time.perf_counter() - a)
    chart.close()
    return [(f"chart: handed the series whole ({len(x):,} points) and redrawn", ms(statistics.median(whole))),
            ("chart: handed 10 new points and redrawn", ms(statistics.median(tail)))]


if __name__ == "__main__":
    sys.exit(main())
