"""Chart redraw budget: a day at 1 Hz (86,400 points x 4 series + a reference line) redraws in <= 16 ms.

    QT_QPA_PLATFORM=offscreen .venv/bin/python tests/perf/bench_gui_charts.py
    QT_QPA_PLATFORM=offscreen .venv/bin/python tests/perf/bench_gui_charts.py --smoke   # one width, 2,000 points
    QT_QPA_PLATFORM=offscreen .venv/bin/python tests/perf/bench_gui_charts.py --live-only --steps 200000

For each chart width, three timings (median and worst of REPEAT, wall clock, offscreen raster engine):
- full redraw: every series replaced (`set_series`), pushed to the curves (`flush`: pyqtgraph's clip and peak
  downsampling) and the whole widget painted into an image.
- live tick: one point appended to each series, flushed and painted (what the monitor does every second).
- paint only: the widget painted again with unchanged data (a resize or an expose).
A last row times the Runs page's metrics grid: a page of GRID_PAGE small charts (x linked, smoothing on, as the
page draws them), each series of 10,000 steps (what a run's chart holds whole), redrawn and painted together.

A second table watches a live run on the whole Runs page (offscreen, "All metrics" shown, smoothing 0.6): a run
store (SQLite) already holding `steps` x METRICS rows, and a writer process appending one step of every metric
every 1/LIVE_RATE s (each row's time is when it was written), as a run's supervisor does, for LIVE_SECONDS:
  apply ms    the UI thread's cost of taking a poll's answer into the model (new rows into the held series)
  draw ms     the UI thread's cost of one chart update that drew (the charts handed their points and flushed),
              all its pieces together (a draw may take its charts in turns of the event loop)
  held ms     the longest the chart drawing held the UI thread at once (one piece; painting not included)
  stall ms    the event loop's gaps (a 5 ms heartbeat; painting included), minus the heartbeat: p99 and longest
  latency s   from a row's write to its point being in the drawn curve of its grid chart, median / p95 / max (the
              first rows wait for a poll backed off to POLL_MAX_MS while the run was quiet before the writer began)
  RSS MB      this process at the end (the page holds bounded series whatever the run's length)
Exits 1 when a full redraw's median wall time exceeds the budget at some width, or a live update stalls the
event loop past STALL_BUDGET_MS (not under --smoke, which checks that the bench runs end to end on 2,000 points at
one width, twice, and a short live run, and measures nothing).
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
SCRATCH = Path(tempfile.mkdtemp(prefix="traindeck-bench-charts-"))
os.environ["TRAINDECK_HOME"] = str(SCRATCH / "home")  # the live run's store and the page's settings, never the user's
os.environ["TRAINDECK_NO_CLOSE_PROMPT"] = "1"

import numpy as np  # noqa: E402
import psutil  # noqa: E402
from PySide6.QtCore import QElapsedTimer, QSettings, QTimer  # noqa: E402
from PySide6.QtGui import QImage  # noqa: E402
from PySide6.QtWidgets import QApplication, QGridLayout, QWidget  # noqa: E402

from traindeck.backend.core import paths  # noqa: E402
from traindeck.backend.runs.record.layout import create_run_dir  # noqa: E402
from traindeck.backend.runs.record.run_store import RunRecord, RunStore  # noqa: E402
from traindeck.gui.context import AppContext  # noqa: E402
from traindeck.gui.pages.runs import RunsPage  # noqa: E402
from traindeck.gui.pages.runs.metrics_grid import GRID_COLUMNS, GRID_PAGE  # noqa: E402
from traindeck.gui.widgets.charts import TimeSeriesChart  # noqa: E402

DAY = 86_400
SERIES = 4
BUDGET_MS = 16.0
REPEAT = int(os.environ.get("BENCH_REPEAT", "15"))
WIDTHS = (400, 800, 1280, 1920, 2560)
HEIGHT = 260
METRICS = 12
LIVE_STEPS = (10_000, 50_000, 200_000)  # steps already in the store when the page opens the run
LIVE_RATE = 10.0  # steps a second the writer appends (each step: every metric)
LIVE_SECONDS = float(os.environ.get("BENCH_LIVE_SECONDS", "40"))
STALL_BUDGET_MS = 100.0  # the dashboard's budget for one stall of the UI thread (bench_gui_console.py's)


def _day(seed: int, points: int = DAY) -> tuple[np.ndarray, list[np.ndarray]]:
    rng = np.random.default_rng(seed)
    t = time.time() - points + np.arange(points, dtype=np.float64)
    ys = []
    for i in range(SERIES):
        base = 20e9 + 4e9 * i + 6e9 * np.sin(np.arange(points) / (2500 + 700 * i))
        y = base + rng.normal(0, 3e8, points)  # noise and rare spikes, like real memory samples
        y[rng.integers(0, points, 40)] += 8e9
        y[rng.integers(0, points, 5)] = np.nan  # a few gaps (a sample a device could not report)
        ys.append(y)
    return t, ys


def _paint(chart: TimeSeriesChart, image: QImage) -> None:
    chart.render(image)


def _timed(fn, repeat: int) -> tuple[float, float, float]:
    """(median wall ms, worst wall ms, median CPU ms of this thread): on a shared machine the wall clock also
    counts time other processes held the cores; the thread's CPU time is this chart's own cost."""
    fn()  # warm-up
    walls, cpus = [], []
    for _ in range(repeat):
        started, cpu = time.perf_counter(), time.thread_time()
        fn()
        walls.append((time.perf_counter() - started) * 1e3)
        cpus.append((time.thread_time() - cpu) * 1e3)
    return statistics.median(walls), max(walls), statistics.median(cpus)


def _measure(app: QApplication, width: int, t: np.ndarray, ys: list[np.ndarray], repeat: int) -> tuple[float, ...]:
    chart = TimeSeriesChart("GPU memory", "B")
    chart.resize(width, HEIGHT)
    chart.show()
    app.processEvents()
    image = QImage(chart.size(), QImage.Format.Format_ARGB32_Premultiplied)
    chart.add_reference(38e9, "estimate")
    clock = [t[-1]]

    def full() -> None:
        for i, y in enumerate(ys):
            chart.set_series(f"GPU {i}", t, y)
        chart.flush()
        _paint(chart, image)

    def tick() -> None:
        clock[0] += 1.0
        for i in range(SERIES):
            chart.append(f"GPU {i}", clock[0], 25e9)
        chart.flush()
        _paint(chart, image)

    def paint() -> None:
        _paint(chart, image)

    row = (width, *_timed(full, repeat), *_timed(tick, repeat), *_timed(paint, repeat))
    chart.close()
    chart.deleteLater()
    app.processEvents()
    return row


def _measure_grid(app: QApplication, points: int, repeat: int) -> tuple[float, ...]:
    holder = QWidget()
    layout = QGridLayout(holder)
    charts = []
    for i in range(GRID_PAGE):
        chart = TimeSeriesChart("", x_is_time=False, smoothing=0.6)
        if charts:
            chart.link_x(charts[0])
        layout.addWidget(chart, i // GRID_COLUMNS, i % GRID_COLUMNS)
        charts.append(chart)
    holder.resize(1280, 3 * HEIGHT)
    holder.show()
    app.processEvents()
    image = QImage(holder.size(), QImage.Format.Format_ARGB32_Premultiplied)
    rng = np.random.default_rng(2)
    steps = np.arange(points, dtype=np.float64)
    ys = [2.0 / (1 + steps / 500) + rng.normal(0, 0.05, points) for _ in charts]
    last = [steps[-1]]

    def full() -> None:
        for chart, y in zip(charts, ys, strict=True):
            chart.set_series("metric", steps, y)
        for chart in charts:
            chart.flush()
        holder.render(image)

    def tick() -> None:
        last[0] += 1.0
        for chart in charts:
            chart.append("metric", last[0], 0.5)
        for chart in charts:
            chart.flush()
        holder.render(image)

    row = (*_timed(full, repeat), *_timed(tick, repeat))
    holder.close()
    holder.deleteLater()
    app.processEvents()
    return row


# The run's supervisor, as far as the store sees it: one step of every metric every 1/rate s, each row stamped with
# the time it is written. It starts appending once `go` exists (the page has read the history by then).
WRITER = textwrap.dedent("""
    import os, sys, time
    from traindeck.backend.runs.record.run_store import RunStore
    run_dir, run_id, first, rate, seconds, go = sys.argv[1:7]
    first, rate, seconds = int(first), float(rate), float(seconds)
    names = sys.argv[7:]
    while not os.path.exists(go):
        time.sleep(0.02)
    with RunStore() as store:
        t0 = time.time()
        step = first
        while time.time() - t0 < seconds:
            now = time.time()
            store.add_metrics(run_id, [(n, step, now, 1.0 + i + 1.0 / (1 + step / 500), None)
                                       for i, n in enumerate(names)])
            step += 1
            time.sleep(max(0.0, t0 + (step - first) / rate - time.time()))
""")


def _metric_names(count: int) -> list[str]:
    return ["loss"] + [f"train/m{i:02d}" for i in range(1, count)]


def _prefill(run_id: str, names: list[str], steps: int) -> None:
    rng = np.random.default_rng(3)
    t0 = time.time() - steps
    with RunStore() as store:
        for start in range(0, steps, 20_000):
            chunk = range(start, min(steps, start + 20_000))
            noise = rng.normal(0, 0.05, (len(chunk), len(names)))
            store.add_metrics(run_id, [(n, s, t0 + s, 1.0 + i + 1.0 / (1 + s / 500) + noise[s - start, i], None)
                                       for s in chunk for i, n in enumerate(names)])


def _wait(app: QApplication, condition: Callable[[], bool], timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise TimeoutError("the Runs page did not show the run in time")
        app.processEvents()
        time.sleep(0.005)


def _drawn_last(chart: TimeSeriesChart, name: str) -> float | None:
    """The newest x in the curve the chart drew last (its flush)."""
    return chart.drawn_last_x(name) if hasattr(chart, "drawn_last_x") else (
        float(chart._series[name].ring.view()[0][-1]) if name in chart.series_names() else None)


def _timed_draws(charts: Any, costs: dict[float, list[float]]) -> None:
    """Note the wall ms of each piece of chart drawing on the UI thread in `costs`, by the draw it belongs to (the
    panel's `_drawn_at`): a draw taking its charts in turns (`_draw_next`) gives one entry a turn; one drawing
    them all at once (the older panel) one entry a draw."""
    method = "_draw_next" if hasattr(charts, "_draw_next") else "draw"
    original = getattr(charts, method)

    def timed(*args: Any, **kwargs: Any) -> Any:
        before, started = charts._drawn_at, time.perf_counter()
        try:
            return original(*args, **kwargs)
        finally:
            if method == "_draw_next" or charts._drawn_at != before:  # (a draw the pace refused did nothing)
                costs.setdefault(charts._drawn_at, []).append((time.perf_counter() - started) * 1e3)

    setattr(charts, method, timed)


def _timed_applies(watched: Any, costs: list[float]) -> None:
    original = watched.apply

    def timed(*args: Any, **kwargs: Any) -> Any:
        started = time.perf_counter()
        try:
            return original(*args, **kwargs)
        finally:
            costs.append((time.perf_counter() - started) * 1e3)

    watched.apply = timed


def _measure_live(app: QApplication, steps: int, metrics: int, seconds: float) -> dict[str, float]:
    """A live run watched on the Runs page (see the module's doc); the figures of one table row."""
    names = _metric_names(metrics)
    run_dir = create_run_dir()
    run_dir.output.write_bytes(b"")
    go = SCRATCH / f"go-{run_dir.run_id}"
    writer = subprocess.Popen([sys.executable, "-c", WRITER, str(run_dir.path), run_dir.run_id, str(steps),
                               str(LIVE_RATE), str(seconds), str(go), *names], stdin=subprocess.DEVNULL)
    try:
        # The writer is the run's supervisor as far as the page can tell (its command line names the run folder).
        record = RunRecord(id=run_dir.run_id, run_dir=str(run_dir.path), created_at=time.time(), name="live",
                           started_at=time.time() - steps, supervisor_pid=writer.pid)
        with RunStore() as store:
            store.add_run(record)
        _prefill(record.id, names, steps)
        settings = QSettings(str(paths.config_dir() / "window.ini"), QSettings.Format.IniFormat)
        settings.setValue("runs/charts/smoothing", 0.6)
        settings.setValue("runs/charts/view", "grid")
        page = RunsPage(AppContext(settings=settings))
        page.resize(1400, 900)
        page.show()
        page.open_run(record.id)
        charts = page.charts
        watched = names[1]  # the first metric of the grid's page (the loss is on it too)
        _wait(app, lambda: watched in charts.grid.charts and _drawn_last(charts.grid.charts[watched], watched)
              == steps - 1, 600)
        applied: list[float] = []
        draws: dict[float, list[float]] = {}
        _timed_applies(page.watched, applied)
        _timed_draws(charts, draws)
        beats: list[float] = []
        clock = QElapsedTimer()
        heartbeat = QTimer()
        heartbeat.setInterval(5)
        heartbeat.timeout.connect(lambda: beats.append(clock.nsecsElapsed() / 1e6))
        seen: dict[int, float] = {}  # step: when its point was first in the drawn curve
        last_seen = [float(steps - 1)]

        def sample() -> None:
            chart = charts.grid.charts.get(watched)
            newest = _drawn_last(chart, watched) if chart is not None else None
            if newest is not None and newest > last_seen[0]:
                now = time.time()
                for step in range(int(last_seen[0]) + 1, int(newest) + 1):
                    seen[step] = now
                last_seen[0] = newest

        sampler = QTimer()
        sampler.setInterval(20)
        sampler.timeout.connect(sample)
        rss_before = psutil.Process().memory_info().rss
        go.touch()
        clock.start()
        heartbeat.start()
        sampler.start()
        end = time.monotonic() + seconds + 3.0
        while time.monotonic() < end:
            app.processEvents()
            time.sleep(0.001)
        heartbeat.stop()
        sampler.stop()
        rss = psutil.Process().memory_info().rss
        with RunStore() as store:
            written = {int(s): t for s, t, _ in store.metric_series(record.id, watched) if s is not None and s >= steps}
        page.shutdown()
        page.ctx.tasks.wait(30000)
        page.close()
        page.deleteLater()
        app.processEvents()
    finally:
        writer.kill()
        writer.wait()
    latencies = sorted(seen[s] - t for s, t in written.items() if s in seen)
    missed = len(written) - len(latencies)  # written but never drawn (the newest, after the measuring ended)
    gaps = sorted(b - a - 5.0 for a, b in zip(beats, beats[1:], strict=False))
    totals = [sum(pieces) for pieces in draws.values()]
    pieces = [piece for pieces in draws.values() for piece in pieces]
    return {"steps": steps, "metrics": metrics,
            "apply med": statistics.median(applied) if applied else float("nan"),
            "apply max": max(applied, default=float("nan")),
            "draw med": statistics.median(totals) if totals else float("nan"),
            "draw max": max(totals, default=float("nan")), "draws": len(totals),
            "hold max": max(pieces, default=float("nan")),
            "stall p99": gaps[int(0.99 * (len(gaps) - 1))] if gaps else float("nan"),
            "stall max": gaps[-1] if gaps else float("nan"),
            "latency med": statistics.median(latencies) if latencies else float("nan"),
            "latency p95": latencies[int(0.95 * (len(latencies) - 1))] if latencies else float("nan"),
            "latency max": latencies[-1] if latencies else float("nan"), "missed": missed,
            "rss": rss / 2**20, "rss growth": (rss - rss_before) / 2**20}


def _print_live(rows: list[dict[str, float]], seconds: float) -> None:
    print()
    print(f"Live run on the Runs page ('All metrics', smoothing 0.6, 1400 x 900): a writer process appends "
          f"{LIVE_RATE:g} steps/s x every metric for {seconds:g} s into the run store (SQLite)")
    print(f"{'steps':>8} | {'metrics':>7} | {'apply ms med/max':>16} | {'draw ms med/max':>16} | {'draws':>5} | "
          f"{'held ms max':>11} | {'stall ms p99/max':>16} | {'latency s med/p95/max':>21} | {'RSS MB (growth)':>15}")
    print("-" * 150)
    for r in rows:
        print(f"{r['steps']:>8,} | {r['metrics']:>7} | {r['apply med']:7.2f} / {r['apply max']:6.2f} | "
              f"{r['draw med']:7.2f} / {r['draw max']:6.2f} | {r['draws']:>5} | {r['hold max']:>11.1f} | "
              f"{r['stall p99']:7.1f} / {r['stall max']:6.1f} | "
              f"{r['latency med']:5.2f} / {r['latency p95']:5.2f} / {r['latency max']:5.2f} | "
              f"{r['rss']:7.0f} ({r['rss growth']:+.0f})")


def _static_tables(app: QApplication, points: int, widths: tuple[int, ...], repeat: int, smoke: bool) -> bool:
    """The first table (a chart's redraw at each width, and the grid's row); whether within the budget."""
    t, ys = _day(1, points)
    rows = [_measure(app, width, t, ys, repeat) for width in widths]
    span = "a day at 1 Hz" if points == DAY else "smoke"
    print(f"Chart: {SERIES} series x {points:,} points ({span}) + 1 reference line, height {HEIGHT} px; "
          f"ms over {repeat} runs: wall median / wall worst / CPU median")
    print(f"{'width px':>8} | {'full redraw':>23} | {'live tick':>23} | {'paint only':>23}")
    print("-" * 8 + "-+-" + "-+-".join(["-" * 23] * 3))
    for width, *cells in rows:
        groups = [cells[i:i + 3] for i in (0, 3, 6)]
        print(f"{width:>8} | " + " | ".join(f"{a:6.2f} / {b:6.2f} / {c:5.2f}" for a, b, c in groups))
    grid_points = 2_000 if smoke else 10_000
    grid = _measure_grid(app, grid_points, repeat)
    print(f"{'grid':>8} | " + " | ".join(f"{a:6.2f} / {b:6.2f} / {c:5.2f}" for a, b, c in (grid[:3], grid[3:]))
          + f" | (Runs grid: {GRID_PAGE} charts x {grid_points:,} steps, smoothing 0.6, 1280 px wide)")
    worst = max(r[1] for r in rows)
    ok = worst <= BUDGET_MS
    print(f"budget: full redraw median <= {BUDGET_MS:g} ms at every width: {'OK' if ok else 'EXCEEDED'} "
          f"(worst median {worst:.2f} ms)")
    return ok


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--smoke", action="store_true",
                        help="2,000 points, one width, 2 runs: checks the bench runs end to end, measures nothing")
    parser.add_argument("--steps", type=int, nargs="*", help="the live table's run lengths (default: %(default)s)")
    parser.add_argument("--live-only", action="store_true", help="only the live Runs page table")
    args = parser.parse_args()
    points, widths, repeat = (2_000, WIDTHS[:1], 2) if args.smoke else (DAY, WIDTHS, REPEAT)
    app = QApplication.instance() or QApplication(sys.argv[:1])
    ok = True
    if not args.live_only:
        ok = _static_tables(app, points, widths, repeat, args.smoke)
    live_steps, metrics, seconds = ((2_000,), 3, 4.0) if args.smoke else (args.steps or LIVE_STEPS, METRICS,
                                                                         LIVE_SECONDS)
    live = [_measure_live(app, n, metrics, seconds) for n in live_steps]
    _print_live(live, seconds)
    stall = max(r["stall max"] for r in live)
    live_ok = stall <= STALL_BUDGET_MS
    print(f"budget: a live update stalls the UI thread <= {STALL_BUDGET_MS:g} ms: {'OK' if live_ok else 'EXCEEDED'} "
          f"(worst {stall:.1f} ms)")
    return 0 if (ok and live_ok) or args.smoke else 1


if __name__ == "__main__":
    sys.exit(main())
