"""The run console under a flood: prints a table.

    QT_QPA_PLATFORM=offscreen .venv/bin/python tests/perf/bench_gui_console.py            # 100k lines/s, 10 s each
    QT_QPA_PLATFORM=offscreen .venv/bin/python tests/perf/bench_gui_console.py --rate 200000 --seconds 5
    QT_QPA_PLATFORM=offscreen .venv/bin/python tests/perf/bench_gui_console.py --smoke     # 5k lines/s, 1 s each

A writer process appends to an output.log at a fixed rate ("lines": two ranks' lines in torchrun's `[defaultN]:`
tags; "bars": one process printing through tqdm.write, so each line erases the bar, prints and redraws it, the bar
advancing every 10 lines) while this process shows the log in
the Runs page's `LogConsole` in the real main window (its ConsoleFeed thread reads and assembles, the widget
applies a batch every 80 ms).
Measured:
  stall      the UI event loop's longest gap, from a 5 ms QTimer heartbeat (p99 and max, minus the 5 ms period)
  shown      display lines the console took in vs the display lines the log makes ("expected": bar redraws
             replace the previous drawing); when the reader falls MAX_LAG_BYTES behind it jumps to the newest
             output and says so ("skipped MiB")
  catch-up   how long after the writer's last line the console shows it
  memory     this process's RSS growth over the flood (the widget keeps 20,000 lines; the log stays on disk)
  cpu        this process's CPU time per second of flood (both threads: reading + drawing)
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

import psutil

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
SCRATCH = Path(tempfile.mkdtemp(prefix="traindeck-bench-console-"))
os.environ["TRAINDECK_HOME"] = str(SCRATCH / "home")  # the window's settings and (empty) run store
os.environ["TRAINDECK_NO_CLOSE_PROMPT"] = "1"

from PySide6.QtCore import QElapsedTimer, QTimer  # noqa: E402
from PySide6.QtWidgets import QApplication  # noqa: E402

from traindeck.backend.logparse import ConsoleBuffer, LineAssembler  # noqa: E402
from traindeck.backend.runs.control.console_feed import MAX_LAG_BYTES  # noqa: E402
from traindeck.gui.app import create_window  # noqa: E402
from traindeck.gui.widgets.console import LogConsole  # noqa: E402

WRITER = textwrap.dedent("""
    import sys, time
    path, rate, seconds, mode = sys.argv[1], int(sys.argv[2]), float(sys.argv[3]), sys.argv[4]
    pad = "lorem ipsum dolor sit amet, consectetur adipiscing elit"
    out = open(path, "ab", buffering=0)

    def bar(i):
        return f"\\rtrain: {i % 100:3d}%|#####     | {i}/100000000 [01:00<01:00, 9.99it/s]"

    def lines(n, due):
        if mode == "lines":  # two ranks through torchrun --tee: every line tagged
            return "".join([f"[default{i % 2}]:step {i:09d} {pad}\\n" for i in range(n, due)])
        # one process printing through tqdm.write while its bar is on screen: erase the bar, print, redraw it;
        # the bar itself advances every 10 lines
        erase = "\\r" + " " * 72 + "\\r"
        return "".join([f"{erase}step {i:09d} {pad}\\n{bar(i - i % 10)}" for i in range(n, due)])

    tick = 0.01
    t0 = time.perf_counter()
    n = 0
    next_t = t0
    while True:
        next_t += tick
        due = int(min(next_t - t0, seconds) * rate)
        if due > n:
            out.write(lines(n, due).encode())
            n = due
        if next_t - t0 >= seconds:
            break
        time.sleep(max(0.0, next_t - time.perf_counter()))
    out.write((("\\n" if mode == "bars" else "") + "[default0]:the last line\\n").encode())
    print(n + 1, time.time(), time.perf_counter() - t0, flush=True)
""")


def expected_display_lines(path: Path) -> int:
    """Display lines the log makes, counted the way the console counts them (bar redraws replace, not append)."""
    assembler, buffer = LineAssembler(), ConsoleBuffer(64)
    count = 0
    with open(path, "rb") as handle:
        while chunk := handle.read(1 << 20):
            for line in assembler.feed(chunk):
                version = buffer.version
                if buffer.add(line) is None and buffer.version != version:
                    count += 1
    for line in assembler.flush():
        version = buffer.version
        if buffer.add(line) is None and buffer.version != version:
            count += 1
    return count


def idle_case(app: QApplication, seconds: float) -> dict[str, object]:
    """The same heartbeat with nothing to show: the machine's own noise floor."""
    gaps = _heartbeat(app, seconds)
    return {"case": f"idle (no writer) x {seconds:g}s", "written": 0, "shown": 0, "expected": 0, "in widget": 0,
            "skipped MiB": 0.0, **_gap_stats(gaps), "catch-up s": 0.0, "rss growth MiB": 0.0, "rss peak growth MiB": 0.0,
            "cpu s/s": 0.0}


class Heartbeat:
    """A 5 ms QTimer noting the gap between its beats: a gap well over 5 ms is the UI thread stalling."""

    def __init__(self) -> None:
        self.gaps: list[float] = []
        self._clock = QElapsedTimer()
        self._clock.start()
        self._last = self._clock.nsecsElapsed()
        self._timer = QTimer()
        self._timer.setInterval(5)
        self._timer.timeout.connect(self._beat)
        self._timer.start()

    def _beat(self) -> None:
        now = self._clock.nsecsElapsed()
        self.gaps.append((now - self._last) / 1e6)
        self._last = now

    def stop(self) -> list[float]:
        self._timer.stop()
        return self.gaps


def _heartbeat(app: QApplication, seconds: float) -> list[float]:
    heartbeat = Heartbeat()
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        app.processEvents()
        time.sleep(0.001)
    return heartbeat.stop()


def _gap_stats(gaps: list[float]) -> dict[str, float]:
    late = sorted(g - 5.0 for g in gaps[5:])
    return {"stall p99 ms": late[int(0.99 * (len(late) - 1))] if late else float("nan"),
            "stall max ms": late[-1] if late else float("nan"),
            "median beat ms": statistics.median(gaps) if gaps else float("nan")}


def run_case(app: QApplication, console: LogConsole, mode: str, rate: int, seconds: float) -> dict[str, object]:
    directory = Path(tempfile.mkdtemp(prefix=f"{mode}-", dir=SCRATCH))
    log = directory / "output.log"
    log.write_bytes(b"")
    for _ in range(20):
        app.processEvents()
    me = psutil.Process()
    rss_before = me.memory_info().rss
    cpu_before = sum(me.cpu_times()[:2])

    heartbeat = Heartbeat()
    gaps = heartbeat.gaps

    console.open_log(log)
    writer = subprocess.Popen([sys.executable, "-c", WRITER, str(log), str(rate), str(seconds), mode],
                              stdout=subprocess.PIPE, text=True)
    rss_peak = rss_before
    finished_at: float | None = None
    written = 0
    while True:
        app.processEvents()
        time.sleep(0.001)
        if len(gaps) % 200 == 0:
            rss_peak = max(rss_peak, me.memory_info().rss)
        if finished_at is None and writer.poll() is not None:
            assert writer.stdout is not None
            count, wall, _elapsed = writer.stdout.read().split()
            written, finished_at = int(count), float(wall)
            flood_cpu = sum(me.cpu_times()[:2]) - cpu_before
        if finished_at is not None:
            lines = console.shown_lines()
            if lines and lines[-1] == "[0] the last line":
                caught_up = time.time() - finished_at
                break
            if time.time() - finished_at > 60:
                caught_up = float("nan")
                break
    heartbeat.stop()
    rss_after = me.memory_info().rss
    rss_peak = max(rss_peak, rss_after)
    expected = expected_display_lines(log)
    skipped = console.feed.skipped_bytes if console.feed is not None else 0
    result = {
        "case": f"{mode} {rate / 1000:g}k/s x {seconds:g}s",
        "written": written,
        "shown": console.total_lines,
        "expected": expected,
        "in widget": len(console.shown_lines()),
        "skipped MiB": skipped / 2**20,
        **_gap_stats(gaps),
        "catch-up s": caught_up,
        "rss growth MiB": (rss_after - rss_before) / 2**20,
        "rss peak growth MiB": (rss_peak - rss_before) / 2**20,
        "cpu s/s": flood_cpu / seconds,
    }
    console.close_log()
    for _ in range(10):
        app.processEvents()
    return result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rate", type=int, default=100_000, help="lines per second written")
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--mode", choices=("lines", "bars", "all"), default="all")
    parser.add_argument("--smoke", action="store_true",
                        help="5,000 lines/s for 1 s each: checks the bench runs end to end, measures nothing")
    args = parser.parse_args()
    if args.smoke:
        args.rate, args.seconds = 5_000, 1.0
    # The real window (every page's modules loaded, as in use) with the Runs page in front: its console is measured.
    app, window = create_window()
    window.resize(1280, 820)
    window.show()
    window.show_page("runs")
    console = window.page("runs").console  # type: ignore[union-attr]
    modes = ("lines", "bars") if args.mode == "all" else (args.mode,)
    results = [idle_case(app, min(5.0, args.seconds))]
    results += [run_case(app, console, mode, args.rate, args.seconds) for mode in modes]
    window.close()
    print(f"machine: {os.cpu_count()} cpus, Qt platform {app.platformName()}, the Runs page's console "
          f"(keeps {console.max_lines:,} lines)")
    columns = list(results[0])
    widths = [max(len(c), *(len(_fmt(r[c])) for r in results)) for c in columns]
    print("  ".join(c.rjust(w) for c, w in zip(columns, widths, strict=True)))
    for r in results:
        print("  ".join(_fmt(r[c]).rjust(w) for c, w in zip(columns, widths, strict=True)))
    shutil.rmtree(SCRATCH, ignore_errors=True)
    for r in results[1:]:
        if r["skipped MiB"]:
            print(f"{r['case']}: the reader fell {MAX_LAG_BYTES >> 20} MiB behind and jumped ahead "
                  f"({r['skipped MiB']:.1f} MiB skipped, said so in the console; output.log has every line)")
        elif r["shown"] != r["expected"]:
            print(f"{r['case']}: LINES MISSING: {r['shown']:,} shown of {r['expected']:,}")
            return 1
    print("newest line on screen at the end of every case; stalls measured with a 5 ms heartbeat")
    return 0

def _fmt(value: object) -> str:
    if isinstance(value, float):
        return f"{value:.1f}" if abs(value) >= 10 else f"{value:.2f}"
    if isinstance(value, int):
        return f"{value:,}"
    return str(value)


if __name__ == "__main__":
    sys.exit(main())
