"""History's comparison follows a live run as W&B's does: the Figures and the Overlay move on with each refresh while
a compared run is running, read only what it logged since, and stop once none is; the overlay's log y and x by wall
time or time since start (remembered); a running run's "Final" value marked as its latest; the Throughput column
sorting by one unit. A real run store and run directories; the live run's supervisor is this test's process."""

from __future__ import annotations

import os
import time
from pathlib import Path

import psutil
import pytest

pytest.importorskip("PySide6")

from fixtures.history_runs import T0, make_run  # noqa: E402
from PySide6.QtCore import Qt  # noqa: E402

from traindeck.backend.runs.record.run_store import RunStore  # noqa: E402

SPS = 0.5  # seconds per step of the fixture's runs


def _loss(started: float, first: int, last: int) -> list[tuple[str, int, float, float, int]]:
    return [("loss", s, started + 30 + s * SPS, 3.0 - s / 400, 0) for s in range(first, last + 1, 5)]


def _live(store: RunStore, run_id: str, steps: int) -> None:
    """Make the run a running one, at `steps` (its supervisor is this process: it is not marked lost)."""
    me = psutil.Process()
    store.update_run(run_id, state="running", ended_at=None, exit_code=None, supervisor_pid=me.pid,
                     supervisor_started=me.create_time(),
                     progress={"current": steps, "total": 300, "rate": 2.0, "eta_s": 100, "unit": "it"})


@pytest.fixture
def make_page(make_history_page):
    return lambda: make_history_page((1300, 850))


def _figure(page, what: str) -> list[str]:
    table = page.compare_panel.figures_table
    for row in range(table.rowCount()):
        if table.item(row, 0).text() == what:
            return [table.item(row, c).text() for c in range(1, table.columnCount())]
    raise AssertionError(f"no row {what!r}")


def _two_runs(store: RunStore):
    """A finished run of 300 steps and one running, at step 65."""
    done = make_run(store, "finished", steps=300, seconds_per_step=SPS, samples=0, port=29700,
                    metrics=_loss(T0, 5, 300))
    live = make_run(store, "live", steps=65, seconds_per_step=SPS, started=T0 + 1000, samples=0, port=29701,
                    metrics=_loss(T0 + 1000, 5, 65))
    _live(store, live.id, 65)
    return done, live


def _compared(qtbot, page, ids):
    page.page_shown()
    qtbot.waitUntil(lambda: page.run_table.proxy.rowCount() == len(ids), timeout=10000)
    overlay = page.compare_panel.overlay
    page.compare_panel.tabs.setCurrentWidget(overlay)
    page.run_table.select_runs(ids)
    page.compare_selected()
    qtbot.waitUntil(lambda: page.compare_panel.comparison is not None and overlay.result is not None
                    and len(overlay.result.curves) == len(ids), timeout=10000)
    return overlay


def test_compare_and_overlay_follow_a_live_run_and_stop_when_it_ends(qtbot, make_page):
    with RunStore() as store:
        done, live = _two_runs(store)
    page = make_page()
    page.poller.stop()  # the test says when the page refreshes
    overlay = _compared(qtbot, page, [done.id, live.id])
    assert overlay.result.curves[1].last_step == 65 and _figure(page, "Steps")[:2] == ["300", "65"]

    # The run logs on: the page's next refresh moves the Figures and the overlay's curve B on to step 105.
    with RunStore() as store:
        store.add_metrics(live.id, _loss(T0 + 1000, 70, 105))
        _live(store, live.id, 105)
    page.refresh()
    qtbot.waitUntil(lambda: overlay.result.curves[1].last_step == 105, timeout=10000)
    qtbot.waitUntil(lambda: _figure(page, "Steps")[1] == "105", timeout=10000)
    b = overlay.result.curves[1]
    assert b.steps == list(range(5, 106, 5))  # every point once: the new ones appended, none read twice
    x, y = overlay.chart.data(b.label)
    assert x[-1] == 105 and y[-1] == pytest.approx(3.0 - 105 / 400)
    assert page.compare_panel.live and "B is running" in overlay.note.text()

    # Hidden behind another tab, the overlay reads nothing; shown again, it reads what it missed.
    page.compare_panel.tabs.setCurrentWidget(page.compare_panel.figures_table)
    with RunStore() as store:
        store.add_metrics(live.id, _loss(T0 + 1000, 110, 120))
        _live(store, live.id, 120)
    page.refresh()
    qtbot.waitUntil(lambda: _figure(page, "Steps")[1] == "120", timeout=10000)
    page.ctx.tasks.wait(10000)
    assert overlay.result.curves[1].last_step == 105
    page.compare_panel.tabs.setCurrentWidget(overlay)
    qtbot.waitUntil(lambda: overlay.result.curves[1].last_step == 120, timeout=10000)

    # It ends: one last read, then the comparison is left alone (no reads for finished runs).
    with RunStore() as store:
        store.add_metrics(live.id, _loss(T0 + 1000, 125, 125))
        store.finish_run(live.id, "succeeded", ended_at=T0 + 1200, exit_code=0)
    page.refresh()
    qtbot.waitUntil(lambda: overlay.result.curves[1].last_step == 125 and not overlay.result.live, timeout=10000)
    qtbot.waitUntil(lambda: _figure(page, "State")[1] == "succeeded", timeout=10000)
    assert not page.compare_panel.live and "running" not in overlay.note.text()
    result = overlay.result
    with RunStore() as store:
        store.add_metrics(live.id, _loss(T0 + 1000, 130, 130))  # not a live run's: never read by a refresh
    page.refresh()
    qtbot.waitUntil(lambda: not page._refreshing, timeout=10000)
    page.ctx.tasks.wait(10000)
    assert overlay.result is result


def test_overlay_x_by_wall_time_or_time_since_start_and_log_y_are_remembered(qtbot, make_page):
    with RunStore() as store:
        done, live = _two_runs(store)
        store.finish_run(live.id, "succeeded", ended_at=T0 + 1100, exit_code=0)
    page = make_page()
    overlay = _compared(qtbot, page, [done.id, live.id])
    chart = overlay.chart
    assert overlay.x_mode == "step" and not overlay.log_y and not chart.log_y

    overlay.x_box.setCurrentIndex(overlay.x_box.findData("time"))
    assert chart.x_mode == "time"
    a, b = overlay.result.curves
    x, _y = chart.data(b.label)
    assert x[0] == pytest.approx(T0 + 1000 + 30 + 5 * SPS)  # the wall time the point was logged at
    overlay.x_box.setCurrentIndex(overlay.x_box.findData("relative"))
    assert chart.x_mode == "relative"
    xa, _ = chart.data(a.label)
    xb, _ = chart.data(b.label)
    # Each run's own time since its start: runs started 1000 s apart set side by side.
    assert xa[0] == pytest.approx(30 + 5 * SPS) and xb[0] == pytest.approx(30 + 5 * SPS)
    overlay.log_box.setChecked(True)
    assert chart.log_y

    again = make_page().compare_panel.overlay
    assert again.x_mode == "relative" and again.x_box.currentData() == "relative"
    assert again.log_y and again.log_box.isChecked() and again.chart.log_y and again.chart.x_mode == "relative"
    assert page.ctx.settings.value("runs/charts/x_mode") is None  # the Runs page keeps its own


def test_a_running_runs_final_value_reads_as_its_latest(qtbot, make_page):
    with RunStore() as store:
        done, live = _two_runs(store)
    page = make_page()
    page.page_shown()
    table = page.run_table
    qtbot.waitUntil(lambda: table.proxy.rowCount() == 2, timeout=10000)
    final = table.model.headers.index("Final loss")
    cells = {table.proxy.index(r, 0).data(Qt.ItemDataRole.ToolTipRole).split("\n")[0]: table.proxy.index(r, final)
             for r in range(2)}
    running, finished = cells[f"Run {live.id}"], cells[f"Run {done.id}"]
    assert (running.data(), finished.data()) == ("2.837 @ 65", "2.25 @ 300")  # the runs ended at different steps
    assert running.data(Qt.ItemDataRole.FontRole).italic()
    assert running.data(Qt.ItemDataRole.ToolTipRole).startswith("2.837 at step 65 (latest): the running run's latest")
    assert finished.data(Qt.ItemDataRole.FontRole) is None
    assert finished.data(Qt.ItemDataRole.ToolTipRole) == "Final loss: 2.25 at step 300"


def test_every_figure_is_in_sight_at_the_windows_usual_width(qtbot, make_page):
    """The page as wide as in a 1360-pixel window beside the sidebar, runs named as the demo's: the Final column
    holds its text whole and the Best column stands inside the view (no scrolling to read it)."""
    with RunStore() as store:
        done, live = _two_runs(store)
        store.update_run(live.id, name="train_tiny-cpu-demo", started_at=time.time() - 80)  # "1:20" so far
    page = make_page()
    page.resize(1190, 850)
    page.page_shown()
    table = page.run_table
    qtbot.waitUntil(lambda: table.proxy.rowCount() == 2, timeout=10000)
    header, view = table.table.header(), table.table
    final = table.model.headers.index("Final loss")
    for row in range(2):
        text = table.proxy.index(row, final).data()
        assert view.fontMetrics().horizontalAdvance(text) + 8 <= header.sectionSize(final), text
    best = final + 1
    assert header.sectionViewportPosition(best) + header.sectionSize(best) <= view.viewport().width()
    if os.environ.get("S16_SHOTS"):
        page.grab().save(os.path.join(os.environ["S16_SHOTS"], "history-final-column.png"))


def test_throughput_sorts_by_samples_per_second_and_sets_other_units_apart(qtbot, make_page):
    with RunStore() as store:
        fast = make_run(store, "fast", steps=100, seconds_per_step=0.2, samples=0, port=29710)
        slow = make_run(store, "slow", steps=100, seconds_per_step=0.5, started=T0 + 100, samples=0, port=29711)
        # No batch known (its config files gone): only the progress bar's rate, in it/s.
        bare = make_run(store, "bare", steps=100, seconds_per_step=0.005, started=T0 + 200, samples=0, port=29712)
    for name in ("ds_config.json", "accelerate_config.yaml"):
        (Path(bare.run_dir) / name).unlink(missing_ok=True)
    page = make_page()
    page.page_shown()
    table = page.run_table
    qtbot.waitUntil(lambda: table.proxy.rowCount() == 3, timeout=10000)
    column = table.model.headers.index("Throughput")
    table.table.sortByColumn(column, Qt.SortOrder.DescendingOrder)
    names = [table.proxy.index(r, 0).data() for r in range(3)]
    texts = [table.proxy.index(r, column).data() for r in range(3)]
    # The bare run's 200 it/s is not above fast's samples/s as if comparable: it stands apart, bracketed and grey.
    assert names == ["fast", "slow", "bare"], (names, texts)
    assert texts[0].endswith("samples/s") and texts[1].endswith("samples/s")
    assert texts[2] == "(200 it/s)"
    bare_cell = table.proxy.index(2, column)
    assert bare_cell.data(Qt.ItemDataRole.FontRole).italic()
    assert "Not in samples/s" in bare_cell.data(Qt.ItemDataRole.ToolTipRole)
    assert {fast.id, slow.id} <= {table.proxy.index(r, 0).data(Qt.ItemDataRole.UserRole + 2) for r in range(3)}
