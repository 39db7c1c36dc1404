"""History and Estimate pages: what each refresh costs, off and on the UI thread.

    QT_QPA_PLATFORM=offscreen .venv/bin/python tests/perf/bench_gui_history.py
    QT_QPA_PLATFORM=offscreen .venv/bin/python tests/perf/bench_gui_history.py --smoke   # 3 runs x 60 samples, once

Writes RUNS finished runs (store rows, 20 logged steps, an hour of resource samples each: 3,600 samples, chunked as
the monitor writes them) into a private TRAINDECK_HOME, then times (median and worst of REPEAT, wall clock):
- history cold: RunHistory.rows() with nothing cached (every run's figures and resource peaks read), worker thread
- history refresh: the same call again (finished runs cached: what the page does every 3 s), worker thread
- list reset / refresh (UI thread): the page's model and view taking the rows: a new order (a run was added), and
  the usual tick (the same runs, one running run's figures moved)
- compare: compare_runs for two runs (config snapshots, diff, figures), worker thread
- estimate (form -> rows + advice): check_form + estimate_form for a 70B model, worker thread; check_form alone runs on
  the UI thread at every edit
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
os.environ["TRAINDECK_HOME"] = tempfile.mkdtemp(prefix="traindeck-bench-history-")
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # tests/: the fixtures package

from fixtures.history_runs import T0, make_run  # noqa: E402
from PySide6.QtWidgets import QApplication  # noqa: E402

from traindeck.backend.estimate.inputs import EstimateForm, check_form, estimate_form  # noqa: E402
from traindeck.backend.runs.control.compare import compare_runs  # noqa: E402
from traindeck.backend.runs.control.history import RunHistory  # noqa: E402
from traindeck.backend.runs.record.run_store import RunStore  # noqa: E402

RUNS = int(os.environ.get("BENCH_RUNS", "200"))
SAMPLES = int(os.environ.get("BENCH_SAMPLES", "3600"))
REPEAT = int(os.environ.get("BENCH_REPEAT", "7"))


def _time(fn, repeat: int) -> tuple[float, float]:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append((time.perf_counter() - start) * 1000)
    return statistics.median(times), max(times)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--smoke", action="store_true",
                        help="3 runs x 60 samples, each timing once: checks the bench runs end to end")
    args = parser.parse_args()
    runs, samples, repeat = (3, 60, 1) if args.smoke else (RUNS, SAMPLES, REPEAT)
    many = 1 if args.smoke else 50  # the estimate rows' repeats: cheap calls, timed many times in the full form
    app = QApplication.instance() or QApplication([])
    start = time.perf_counter()
    with RunStore() as store:
        ids = [make_run(store, f"run-{i}", stage=2 + i % 2, started=T0 + i * 3600, steps=200, samples=samples,
                        port=29500 + i).id for i in range(runs)]
    print(f"wrote {runs} runs x {samples} samples in {time.perf_counter() - start:.1f} s "
          f"({RunStore().path.stat().st_size / 1e6:.0f} MB store)")

    rows_out = []

    def cold() -> None:
        history = RunHistory()
        rows_out[:] = history.rows()
        history.close()

    results = [("history cold (worker)", *_time(cold, max(1, repeat // 3)))]
    history = RunHistory()
    history.rows()
    results.append(("history refresh, cached (worker)", *_time(history.rows, repeat)))

    from traindeck.gui.context import AppContext
    from traindeck.gui.pages.history import HistoryPage

    page = HistoryPage(AppContext())
    page.resize(1100, 700)
    page.show()
    app.processEvents()
    rows = history.rows()
    flip = [rows, list(reversed(rows))]  # a different order each time: the model resets, as after a new run

    def list_update() -> None:
        flip.reverse()
        page._loaded(page.history, flip[0])
        app.processEvents()

    page.history = history
    results.append((f"list reset, {runs} rows in a new order (UI thread)", *_time(list_update, repeat)))
    tick = [0]

    def one_running() -> None:  # the usual refresh: same runs, one of them still running (its duration moved)
        tick[0] += 1
        changed = list(flip[0])
        changed[0] = dataclasses.replace(changed[0], duration_s=(changed[0].duration_s or 0) + tick[0])
        page._loaded(page.history, changed)
        app.processEvents()

    results.append((f"list refresh, 1 of {runs} rows changed (UI thread)", *_time(one_running, repeat)))

    with RunStore() as store:
        results.append(("compare two runs (worker)", *_time(lambda: compare_runs(store, ids[0], ids[1]), repeat)))
    form = EstimateForm(params="70B", gpus_per_node=8, nodes=2, gpu_mem="80", host_mem="1024", micro_batch=4,
                        seq_len=4096)
    results.append(("estimate form -> rows + advice (worker)", *_time(lambda: estimate_form(form), many)))
    results.append(("check_form at an edit (UI thread)", *_time(lambda: check_form(form), 4 * many)))
    history.close()

    width = max(len(name) for name, _, _ in results)
    print(f"{'what':<{width}}  {'median ms':>10}  {'worst ms':>9}")
    for name, median, worst in results:
        print(f"{name:<{width}}  {median:>10.2f}  {worst:>9.2f}")
    return 0


if __name__ == "__main__":
    try:
        code = main()
    finally:
        shutil.rmtree(os.environ["TRAINDECK_HOME"], ignore_errors=True)  # half a gigabyte of samples
    sys.exit(code)
