"""Configure page costs, measured: what runs on the UI thread per keystroke / preset switch, and what runs on the
pool (validation, preview) and why it is there. Prints a table (median and worst of N runs, milliseconds).

    QT_QPA_PLATFORM=offscreen .venv/bin/python tests/perf/bench_gui_configure.py
    QT_QPA_PLATFORM=offscreen .venv/bin/python tests/perf/bench_gui_configure.py --smoke   # 2 runs a row

Budgets it checks on the 95th percentile (exit 1 when exceeded): a keystroke's UI-thread work <= 16 ms (one
frame), a preset switch <= 100 ms. validate_preset is reported for the decision in the page: above ~10 ms it belongs on ctx.tasks.
--smoke times every row twice and leaves the budgets out of the exit code: it checks the bench runs end to end.
"""

from __future__ import annotations

import argparse
import copy
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
os.environ.setdefault("TRAINDECK_HOME", tempfile.mkdtemp(prefix="traindeck-bench-"))

from PySide6.QtCore import QSettings  # noqa: E402
from PySide6.QtWidgets import QApplication  # noqa: E402

from traindeck.backend.launch.preview import preview_launch  # noqa: E402
from traindeck.backend.presets import BUILTIN_NAMES, load_preset, validate_preset  # noqa: E402

KEYSTROKE_BUDGET_MS = 16.0
SWITCH_BUDGET_MS = 100.0
RUNS = int(os.environ.get("BENCH_RUNS", "30"))


def timed(fn: Callable[[], object], runs: int) -> tuple[float, float, float]:
    """(median, 95th percentile, worst) in ms. Budgets use the 95th percentile: on a shared 2-core machine the
    single worst sample is another process's, not ours."""
    fn()  # warm caches (imports, schema tables)
    samples = []
    for _ in range(runs):
        start = time.perf_counter()
        fn()
        samples.append((time.perf_counter() - start) * 1000)
    samples.sort()
    return statistics.median(samples), samples[min(len(samples) - 1, int(len(samples) * 0.95))], samples[-1]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--smoke", action="store_true",
                        help="2 runs a row: checks the bench runs end to end, measures nothing")
    args = parser.parse_args()
    runs = 2 if args.smoke else RUNS
    app = QApplication.instance() or QApplication(sys.argv[:1])
    from traindeck.gui.context import AppContext
    from traindeck.gui.pages.configure import ConfigurePage

    rows: list[tuple[str, float, float, float, str]] = []
    for name in ("cpu-demo", "zero2", "zero3-offload", "fsdp-full-shard", "zero-infinity-nvme"):
        preset = load_preset(name)
        rows.append((f"validate_preset({name}) [pool]", *timed(lambda p=preset: validate_preset(copy.deepcopy(p)), runs),
                     ""))
    rows.append(("preview_launch(zero3-offload) [pool]", *timed(lambda: preview_launch(load_preset("zero3-offload")), runs),
                 ""))

    ctx = AppContext(settings=QSettings(os.path.join(os.environ["TRAINDECK_HOME"], "w.ini"),
                                        QSettings.Format.IniFormat))
    ctx.draft.replace(load_preset("cpu-demo"), "cpu-demo")
    start = time.perf_counter()
    page = ConfigurePage(ctx)
    page.resize(1130, 780)
    page.show()
    app.processEvents()
    shell = (time.perf_counter() - start) * 1000
    rows.append(("build the page before its first paint, once [UI]", shell, shell, shell, ""))
    start = time.perf_counter()
    page.ensure_built()
    app.processEvents()
    forms = (time.perf_counter() - start) * 1000
    rows.append(("build the forms after the first paint, once [UI]", forms, forms, forms, ""))
    ctx.tasks.wait(10000)
    app.processEvents()

    form = page.editor.forms["deepspeed"]
    batch = form.editor("train_micro_batch_size_per_gpu")
    values = iter(range(1, 10**6))

    def keystroke() -> None:  # what one typed character costs the UI thread (the check itself is on the pool)
        batch.setText(str(next(values)))
        batch.textEdited.emit(batch.text())
        app.processEvents()

    med, p95, worst = timed(keystroke, runs * 3)
    ok = p95 <= KEYSTROKE_BUDGET_MS
    rows.append(("keystroke in a field (edit + filters) [UI]", med, p95, worst,
                 f"p95 budget {KEYSTROKE_BUDGET_MS:g}: {'ok' if ok else 'OVER'}"))
    page.checks._timer.stop()
    ctx.tasks.wait(10000)
    app.processEvents()

    stage = form.child("zero_optimization").editor("stage")

    def stage_switch() -> None:
        stage.setCurrentText("3" if stage.currentText() != "3" else "2")
        app.processEvents()

    rows.append(("ZeRO stage switch (rows shown/hidden) [UI]", *timed(stage_switch, runs), ""))
    page.checks._timer.stop()
    ctx.tasks.wait(10000)

    names = iter(BUILTIN_NAMES * (runs + 2))

    def switch() -> None:
        ctx.draft.dirty = False  # no unsaved-changes question in a benchmark
        page.files.load_named(next(names))
        app.processEvents()

    med, p95, worst = timed(switch, runs)
    switch_ok = p95 <= SWITCH_BUDGET_MS
    rows.append(("switch preset (load + rebind + filters) [UI]", med, p95, worst,
                 f"p95 budget {SWITCH_BUDGET_MS:g}: {'ok' if switch_ok else 'OVER'}"))
    page.shutdown()
    ctx.tasks.wait(10000)

    width = max(len(r[0]) for r in rows)
    print(f"{'what':<{width}}  {'median ms':>9}  {'p95 ms':>7}  {'worst ms':>8}  note")
    for what, med, p95, worst, note in rows:
        print(f"{what:<{width}}  {med:9.2f}  {p95:7.2f}  {worst:8.2f}  {note}")
    return 0 if (ok and switch_ok) or args.smoke else 1


if __name__ == "__main__":
    sys.exit(main())
