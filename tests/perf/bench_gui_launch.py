"""Launch page responsiveness: what a keystroke costs on the UI thread, and the longest UI stall while the page
probes the interpreter (a torch import in a child process), builds the command preview and runs the memory check.

    QT_QPA_PLATFORM=offscreen .venv/bin/python tests/perf/bench_gui_launch.py
    QT_QPA_PLATFORM=offscreen .venv/bin/python tests/perf/bench_gui_launch.py --smoke   # fewer keystrokes

Runs in a temporary TRAINDECK_HOME. The stall is the largest gap between ticks of a 5 ms QTimer on the UI thread
(minus the 5 ms), while the background work is under way. Exits 1 when a piece of that work ends without its result
(it is named), or when the stall exceeds 100 ms, except under --smoke, which types a few keys per field (the probe,
preview and memory check are the same) to check that the bench runs end to end.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
os.environ["TRAINDECK_HOME"] = tempfile.mkdtemp(prefix="bench-launch-")

from PySide6.QtCore import QElapsedTimer, QSettings, Qt, QTimer  # noqa: E402
from PySide6.QtTest import QTest  # noqa: E402
from PySide6.QtWidgets import QApplication  # noqa: E402

from traindeck.backend.core import paths  # noqa: E402
from traindeck.backend.presets import load_preset  # noqa: E402

STALL_BUDGET_MS = 100.0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--smoke", action="store_true",
                        help="a few keystrokes per field: checks the bench runs end to end, measures nothing")
    args = parser.parse_args()
    typed = " --title 'a long run name with spaces' --epochs 3" * 3
    env_typed = "some-value-typed-here"
    if args.smoke:
        typed, env_typed = " --epochs 3", env_typed[:4]
    app = QApplication.instance() or QApplication(sys.argv[:1])
    from traindeck.gui.context import AppContext
    from traindeck.gui.pages.launch import LaunchPage

    settings = QSettings(str(paths.config_dir() / "window.ini"), QSettings.Format.IniFormat)
    ctx = AppContext(demo=True, settings=settings)
    ctx.draft.replace(load_preset("cpu-demo"), "cpu-demo")
    t0 = time.perf_counter()
    page = LaunchPage(ctx)
    page.resize(1200, 800)
    page.show()
    app.processEvents()
    build_ms = (time.perf_counter() - t0) * 1000

    # Keystrokes: each runs the page's field handler (argument split, checks, launch_choice, timers).
    keys = []
    page.script_box.args.setFocus()
    for ch in typed:
        start = time.perf_counter()
        QTest.keyClick(page.script_box.args, ch)
        keys.append((time.perf_counter() - start) * 1000)
    for i in range(40):
        page.env_box.env.add_row(f"VAR_{i}", "x")
    env_keys = []
    edit = page.env_box.env.value_edit("VAR_20")
    for ch in env_typed:
        start = time.perf_counter()
        QTest.keyClick(edit, ch)
        env_keys.append((time.perf_counter() - start) * 1000)

    # Background work with the UI thread watched: a real probe (no cache), the preview, a memory check.
    gaps: list[float] = []
    clock = QElapsedTimer()
    clock.start()
    last = [clock.nsecsElapsed()]

    def tick() -> None:
        now = clock.nsecsElapsed()
        gaps.append((now - last[0]) / 1e6)
        last[0] = now

    ticker = QTimer(interval=5, timerType=Qt.TimerType.PreciseTimer)
    ticker.timeout.connect(tick)
    ticker.start()
    page.runner.interpreter.probe(force=True)
    page.memory_box.model_size.setText("7B")
    memory_box = page.memory_box

    def memory_failed() -> list[str]:  # the check's own error line, once it has ended without a result
        if memory_box.memory is not None or memory_box.check_timer.isActive():
            return []
        return [text for severity, text in memory_box.memory_result.items() if severity == "error"]

    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        app.processEvents()
        if page.runner.interpreter.environment is not None \
                and (memory_box.memory is not None or memory_failed()) \
                and page.command_box.plan is not None and ctx.tasks.pool.activeThreadCount() == 0:
            break
        time.sleep(0.001)
    ticker.stop()
    # What the background work did not deliver: the timings above would otherwise describe work that never ended.
    missing = [what for what, done in (
        ("the interpreter probe", page.runner.interpreter.environment is not None),
        ("the command preview", page.command_box.plan is not None)) if not done]
    if memory_box.memory is None:
        missing.append(f"the memory check ({'; '.join(memory_failed()) or 'no result in 60 s'})")
    work_s = clock.elapsed() / 1000
    stall = max(gaps) - 5 if gaps else 0.0

    rows = [
        ("page built and shown", f"{build_ms:.1f} ms"),
        ("keystroke in Arguments (median / max)", f"{statistics.median(keys):.2f} / {max(keys):.2f} ms"),
        ("keystroke in a 40-row env table (median / max)",
         f"{statistics.median(env_keys):.2f} / {max(env_keys):.2f} ms"),
        ("probe + preview + memory check in background", f"{work_s:.2f} s"),
        ("longest UI stall meanwhile", f"{stall:.1f} ms (budget {STALL_BUDGET_MS:.0f} ms)"),
    ]
    width = max(len(r[0]) for r in rows)
    for name, value in rows:
        print(f"{name.ljust(width)}  {value}")
    for what in missing:
        print(f"NOT DONE: {what}")
    page.shutdown()
    ctx.tasks.wait(30000)
    return 1 if missing or (stall > STALL_BUDGET_MS and not args.smoke) else 0


if __name__ == "__main__":
    sys.exit(main())
