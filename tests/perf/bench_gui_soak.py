"""A dashboard left open beside a long run: memory growth and CPU share of the real window over a set time.

    QT_QPA_PLATFORM=offscreen .venv/bin/python tests/perf/bench_gui_soak.py                  # 30 min, 50 lines/s
    QT_QPA_PLATFORM=offscreen .venv/bin/python tests/perf/bench_gui_soak.py --minutes 6 --warmup 2
    QT_QPA_PLATFORM=offscreen .venv/bin/python tests/perf/bench_gui_soak.py --phases runs,minimised
    QT_QPA_PLATFORM=offscreen .venv/bin/python tests/perf/bench_gui_soak.py --diag mem.jsonl [--no-trim]  # what grows
    QT_QPA_PLATFORM=offscreen .venv/bin/python tests/perf/bench_gui_soak.py --paints paints.json  # what repaints
    QT_QPA_PLATFORM=offscreen .venv/bin/python tests/perf/bench_gui_soak.py --smoke    # 2 s warm-up, 2 s a phase

A real supervised run (plain python launcher, the environment real runs get) prints `--rate` lines a second, each
an HF-Trainer-style dict of 4 metrics, with a tqdm-style bar redrawn on stderr every 10 lines; the real main
window (offscreen) watches it: the Runs page opens the run as a user would. The first `--warmup` minutes are the
warm-up: the console fills toward its 20,000-line cap and the series toward their whole-resolution window
(both go on while the Runs page is hidden), and each page measured is shown as a user would in a window's first
minutes: the Runs page for the first minute, a minute on each other page measured, the window minimised for 30 s
when that is measured, and the rest on the first phase's page (by default the Monitor, whose 10 min charts are
then nearly full, and which its phase then goes on showing). So the figures after the warm-up are the window's
steady state, not pages being built or first filled: a window open for days spends almost all its time there. The
rest of the time is split evenly between the `--phases`, in their order (default monitor, runs, minimised):
  runs       the Runs page in front (console, charts, last metrics)
  monitor    the Monitor page in front (its sampler and charts; the Runs page hidden)
  minimised  the window minimised, the Runs page the current one
Measured (this process is the window; the run and its supervisor are other processes):
  cpu %      the window process's CPU time / wall time over the phase (after its first 20 s), in % of one core:
             load on the machine distorts this much less than wall-clock timings; the load average is printed
  rss MB/h   RSS growth per hour: least-squares slope of RSS samples (every 5 s) over the phase, and over
             everything after the warm-up (the figure the goal is about: under 2 MB/h)
  anon MB/h  the same for the process's anonymous memory (RssAnon, /proc/self/status): its heap, without the
             shared libraries' file pages, which a machine short of memory evicts and reloads (RSS then
             falls and rises with the machine, not with the window)
The event loop is the application's own (app.exec()): the benchmark only adds a 5 s sampling timer.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import textwrap
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import psutil

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
SCRATCH = Path(tempfile.mkdtemp(prefix="traindeck-bench-soak-"))
os.environ["TRAINDECK_HOME"] = str(SCRATCH / "home")  # the window's settings and run store, private
os.environ["TRAINDECK_NO_CLOSE_PROMPT"] = "1"

from PySide6.QtCore import QEvent, QObject, QTimer  # noqa: E402

from traindeck.backend.launch.environ import training_env  # noqa: E402
from traindeck.backend.launch.plan import LaunchPlan  # noqa: E402
from traindeck.backend.runs.control.lifecycle import new_run_dir, start_run  # noqa: E402
from traindeck.backend.runs.control.view import force_stop  # noqa: E402
from traindeck.backend.runs.record.run_store import RunStore  # noqa: E402
from traindeck.gui.app import create_window  # noqa: E402

JOB = textwrap.dedent("""
    import math, sys, time
    rate, seconds = float(sys.argv[1]), float(sys.argv[2])
    total = int(rate * seconds)
    t0 = time.monotonic()
    for i in range(1, total + 1):
        due = t0 + i / rate
        pause = due - time.monotonic()
        if pause > 0:
            time.sleep(pause)
        loss = 2.0 * math.exp(-i / 50000) + 0.05 * math.sin(i / 7)
        print({"loss": round(loss, 4), "grad_norm": round(1 + 0.3 * math.sin(i / 13), 4),
               "learning_rate": 5e-05 * (1 - i / total), "epoch": round(i / 1000, 3)}, flush=True)
        if i % 10 == 0:
            done = 100 * i // total
            sys.stderr.write(f"\\r{done:3d}%|{'#' * (done // 10):10s}| {i}/{total} [00:10<00:20, {rate:.2f}it/s]")
            sys.stderr.flush()
""")

SAMPLE_MS = 5000
SETTLE_S = 20.0  # a phase's first seconds (the switch itself) are not counted in its CPU share


@dataclass
class Phase:
    name: str
    start: float = 0.0
    end: float = 0.0
    cpu_start: float = 0.0
    cpu_end: float = 0.0
    samples: list[tuple[float, float]] = field(default_factory=list)  # (monotonic s, rss MB)
    anon: list[tuple[float, float]] = field(default_factory=list)  # (monotonic s, anonymous MB)
    loads: list[float] = field(default_factory=list)


def _slope_per_hour(samples: list[tuple[float, float]]) -> float:
    if len(samples) < 3:
        return float("nan")
    n = len(samples)
    mt = sum(t for t, _ in samples) / n
    mr = sum(r for _, r in samples) / n
    var = sum((t - mt) ** 2 for t, _ in samples)
    return 3600 * sum((t - mt) * (r - mr) for t, r in samples) / var if var else float("nan")


def _anon_mb() -> float:
    # /proc/self/status's RssAnon: the same figure as smaps_rollup's "Anonymous", which walks every mapping: that
    # walk (~9 ms in this window, every 5 s) was a sixth of the minimised window's CPU share under py-spy.
    try:
        with open("/proc/self/status") as status:
            for line in status:
                if line.startswith("RssAnon:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return float("nan")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=30.0, help="total time, warm-up included")
    parser.add_argument("--warmup", type=float, default=10.0, help="minutes before measuring (see the doc for its pages)")
    parser.add_argument("--rate", type=float, default=50.0, help="lines per second the run prints")
    parser.add_argument("--phases", default="monitor,runs,minimised", help="comma-separated, measured in order")
    parser.add_argument("--json", type=Path, help="also write the figures here")
    parser.add_argument("--no-trim", action="store_true",
                        help="turn off the window's own malloc_trim once a minute (gui/heap.py), to compare")
    parser.add_argument("--diag", type=Path, metavar="FILE",
                        help="every minute, append where the memory is (glibc's arenas, Python's blocks, each "
                             "mapping's anonymous kB) to FILE as JSON lines: to find what grows")
    parser.add_argument("--smoke", action="store_true",
                        help="a 2 s warm-up and 2 s a phase, sampled every 0.5 s: checks the soak runs end to end, "
                             "measures nothing")
    parser.add_argument("--paints", type=Path, metavar="FILE",
                        help="count the window's paint and layout events per widget in each phase and write them "
                             "to FILE as JSON: what redraws, and how often (its event filter costs CPU: not for "
                             "the CPU figures)")
    args = parser.parse_args()
    sample_ms = SAMPLE_MS
    if args.smoke:
        count = len([p for p in args.phases.split(",") if p.strip()])
        args.warmup, args.minutes, sample_ms = 2 / 60, (2 + 2 * count) / 60, 500
    phases = [Phase(p.strip()) for p in args.phases.split(",") if p.strip()]
    unknown = [p.name for p in phases if p.name not in ("runs", "monitor", "minimised")]
    if unknown or not phases or args.warmup >= args.minutes:
        parser.error(f"phases are runs, monitor, minimised (got {unknown}); warm-up must be shorter than the total")

    if args.no_trim:
        os.environ["TRAINDECK_HEAP_TRIM_S"] = "0"
    script = SCRATCH / "soak_job.py"
    script.write_text(JOB)
    store = RunStore()
    plan = LaunchPlan(launcher="python", argv=[sys.executable, str(script), str(args.rate), str(args.minutes * 60 + 120)],
                      env=training_env(None), cwd=str(SCRATCH))
    run = start_run(plan, new_run_dir(), name="soak")

    app, window = create_window()
    window.resize(1280, 820)
    window.show()
    window.show_page("monitor")  # built now (warm-up), so its construction is not counted as growth
    window.show_page("runs")
    window.ctx.open_run.emit(run.id)
    warm_steps = _warm_up(args.warmup, [p.name for p in phases])
    me = psutil.Process()
    t0 = time.monotonic()
    warm_end = t0 + args.warmup * 60
    span = (args.minutes - args.warmup) * 60 / len(phases)
    for i, phase in enumerate(phases):
        phase.start = warm_end + i * span
        phase.end = phase.start + span
    after_warmup: list[tuple[float, float]] = []
    anon_after_warmup: list[tuple[float, float]] = []
    state = {"phase": -1}
    held: dict[str, int] = {}

    def cpu() -> float:
        times = me.cpu_times()
        return times.user + times.system

    def current() -> str:
        return "minimised" if window.isMinimized() else str(getattr(window.stack.currentWidget(), "key", "?"))

    def enter(phase: Phase) -> None:
        if window.isMinimized():
            window.showNormal()
        if phase.name == "minimised":
            window.show_page("runs")
            window.showMinimized()
        else:
            window.show_page(phase.name)

    def tick() -> None:
        now = time.monotonic()
        rss = me.memory_info().rss / 2**20
        index = state["phase"]
        if index >= 0:
            phase = phases[index]
            if phase.cpu_start == 0.0 and now - phase.start >= min(SETTLE_S, span / 3):
                phase.cpu_start, phase.start = cpu(), now
            phase.samples.append((now, rss))
            phase.anon.append((now, _anon_mb()))
            anon_after_warmup.append(phase.anon[-1])
            phase.loads.append(os.getloadavg()[0])
            after_warmup.append((now, rss))
            if now >= phase.end:
                if phase.cpu_start == 0.0:  # never settled (shorter than the sampling): no figure
                    phase.cpu_start = float("nan")
                phase.cpu_end, phase.end = cpu(), now
                index += 1
                state["phase"] = index
                if index >= len(phases):
                    page = window.page("runs")  # read before quitting: the window's shutdown closes the console
                    held.update({name: len(series) for name, series in page.watched.series.items()})  # type: ignore
                    held["console lines"] = page.console.total_lines if page is not None else 0  # type: ignore
                    app.quit()
                    return
                enter(phases[index])
        elif now >= warm_end:
            state["phase"] = 0
            phases[0].start = now
            enter(phases[0])
        elif warm_steps and now - t0 >= warm_steps[0][0] * 60:
            enter(Phase(warm_steps.pop(0)[1]))
        elapsed = (now - t0) / 60
        print(f"{elapsed:6.1f} min  rss {rss:7.1f} MB  cpu {cpu():7.1f} s  load {os.getloadavg()[0]:.2f}  "
              f"{['warm-up', *[p.name for p in phases]][index + 1] if index < len(phases) else 'done'}"
              f"{'' if index >= 0 else ' (' + current() + ')'}", flush=True)

    if args.diag:
        from memory_diag import snapshot  # tests/perf/memory_diag.py

        diag_timer = QTimer()
        diag_timer.setInterval(60_000)
        diag_timer.timeout.connect(lambda: _append_json(args.diag, snapshot(time.monotonic() >= warm_end) | {"t": time.monotonic() - t0}))
        diag_timer.start()

    census = _EventCensus(lambda: ["warm-up", *[p.name for p in phases]][state["phase"] + 1]
                          if state["phase"] < len(phases) else "done") if args.paints else None
    if census is not None:
        app.installEventFilter(census)

    timer = QTimer()
    timer.setInterval(sample_ms)
    timer.timeout.connect(tick)
    timer.start()
    app.exec()

    console_lines = held.pop("console lines", 0)
    rows = store._db.execute("SELECT count(*) FROM run_metrics WHERE run_id = ?", (run.id,)).fetchone()[0]
    force_stop(store, run.id)
    window.close()
    store.close()

    results = []
    for phase in phases:
        wall = phase.end - phase.start
        results.append({"phase": phase.name, "minutes": wall / 60,
                        "cpu % of a core": 100 * (phase.cpu_end - phase.cpu_start) / wall if wall > 0 else float("nan"),
                        "rss MB start": phase.samples[0][1] if phase.samples else float("nan"),
                        "rss MB end": phase.samples[-1][1] if phase.samples else float("nan"),
                        "rss MB/h": _slope_per_hour(phase.samples),
                        "anon MB/h": _slope_per_hour(phase.anon),
                        "load avg": sum(phase.loads) / len(phase.loads) if phase.loads else float("nan")})
    growth = _slope_per_hour(after_warmup)
    anon_growth = _slope_per_hour(anon_after_warmup)
    print(f"\nmachine: {os.cpu_count()} cpus; {args.minutes:g} min at {args.rate:g} lines/s (4 metrics a line, a bar "
          f"redraw every 10 lines), first {args.warmup:g} min warm-up (its page changes: {_warm_up(args.warmup, [p.name for p in phases])})")
    columns = list(results[0])
    widths = [max(len(c), *(len(_fmt(r[c])) for r in results)) for c in columns]
    print("  ".join(c.rjust(w) for c, w in zip(columns, widths, strict=True)))
    for r in results:
        print("  ".join(_fmt(r[c]).rjust(w) for c, w in zip(columns, widths, strict=True)))
    print(f"RSS growth after the warm-up: {growth:.2f} MB/h (goal < 2), anonymous memory {anon_growth:.2f} MB/h; metric rows in the store: {rows:,}; "
          f"points held by the Runs page's series: {held}; display lines the console took in: {console_lines:,}")
    if args.json:
        args.json.write_text(json.dumps({"args": {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()}, "phases": results,
                                         "rss_growth_mb_per_h": growth,
                                         "anon_growth_mb_per_h": anon_growth, "store_rows": rows, "held": held}, indent=1))
    if census is not None:
        args.paints.write_text(json.dumps(census.report({p.name: (p.end - p.start) / 60 for p in phases}), indent=1))
    shutil.rmtree(SCRATCH, ignore_errors=True)
    return 0


class _EventCensus(QObject):
    """Counts paint and layout events per receiver (class and object name) and phase (the --paints diagnostic)."""

    KINDS = {QEvent.Type.Paint: "paint", QEvent.Type.LayoutRequest: "layout", QEvent.Type.UpdateRequest: "update"}

    def __init__(self, phase: Callable[[], str]):
        super().__init__()
        self.phase = phase
        self.counts: dict[str, dict[str, int]] = {}

    def eventFilter(self, watched: QObject, event: QEvent) -> bool:  # noqa: N802
        kind = self.KINDS.get(event.type())
        if kind is not None:
            key = f"{kind} {type(watched).__name__}" + (f" #{watched.objectName()}" if watched.objectName() else "")
            counts = self.counts.setdefault(self.phase(), {})
            counts[key] = counts.get(key, 0) + 1
        return False

    def report(self, minutes: dict[str, float]) -> dict[str, dict[str, float]]:
        """Events per minute in each measured phase, most frequent first."""
        return {phase: dict(sorted(((k, round(n / minutes[phase], 1)) for k, n in counts.items()),
                                   key=lambda kv: -kv[1]))
                for phase, counts in self.counts.items() if minutes.get(phase)}


def _warm_up(minutes: float, phases: list[str]) -> list[tuple[float, str]]:
    """The warm-up's page changes, (minutes from the start, page), after its first minute on the Runs page: a
    minute on each other page measured, the window minimised for 30 s (when measured), and the rest on the first
    phase's page, so that phase goes on from the state the warm-up left."""
    first = phases[0]
    steps: list[tuple[float, str]] = []
    at = 1.0
    for page in dict.fromkeys(phases):
        if page not in (first, "minimised", "runs"):
            steps.append((at, page))
            at += 1.0
    steps.append((at, first))
    if "minimised" in phases and first != "minimised":
        steps += [(max(at, minutes - 3.0), "minimised"), (max(at, minutes - 3.0) + 0.5, first)]
    return [(m, page) for m, page in steps if m < minutes]


def _append_json(path: Path, record: dict) -> None:
    with path.open("a") as out:
        out.write(json.dumps(record) + "\n")


def _fmt(value: object) -> str:
    if isinstance(value, float):
        return f"{value:.1f}" if abs(value) >= 10 else f"{value:.2f}"
    return str(value)


if __name__ == "__main__":
    sys.exit(main())
