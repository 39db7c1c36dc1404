"""The Runs page's charts over a real run store: the metrics grid (a page of charts however many metrics, filter,
pins kept in the settings), smoothing, log scale, x by time since start, one zoom for the grid, PNG and CSV
export, and the legends naming their lines' newest points (what "Last metrics" says once the lines are redrawn)."""

from __future__ import annotations

import csv
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from PySide6.QtCore import QSettings
from PySide6.QtGui import QImage
from PySide6.QtWidgets import QApplication

from traindeck.backend.core import paths
from traindeck.backend.runs.record.layout import create_run_dir
from traindeck.backend.runs.record.run_store import RunRecord, RunStore
from traindeck.gui.pages.runs import RunsPage
from traindeck.gui.pages.runs.metrics_grid import CELL_MIN_HEIGHT, GRID_PAGE, PINS_KEY

T0 = float(int(time.time()) - 1000)


@pytest.fixture
def make_page(make_runs_page) -> Callable[[], RunsPage]:  # type: ignore[no-untyped-def]
    return lambda: make_runs_page((1400, 900))  # type: ignore[no-any-return]


def add_run(name: str, metrics: list[tuple[str, int | None, float, float, int | None]]) -> RunRecord:
    run_dir = create_run_dir()
    run_dir.output.write_bytes(b"")
    record = RunRecord(id=run_dir.run_id, run_dir=str(run_dir.path), created_at=time.time(), name=name,
                       started_at=T0)  # created just now: a running run without a supervisor is not lost yet
    with RunStore() as store:
        store.add_run(record)
        store.add_metrics(record.id, metrics)
    return record


def many_metrics(count: int, steps: range) -> list[tuple[str, int | None, float, float, int | None]]:
    names = ["loss"] + [f"{'eval' if i % 4 == 0 else 'train'}/m{i:03d}" for i in range(1, count)]
    return [(n, s, T0 + 10 + s, 1.0 + i + 0.5 * np.sin(s), None) for s in steps for i, n in enumerate(names)]


def open_grid(qtbot, page: RunsPage, record: RunRecord) -> None:  # type: ignore[no-untyped-def]
    page.open_run(record.id)
    qtbot.waitUntil(lambda: page.charts.loss_chart.point_count("loss") > 0, timeout=15000)
    page.charts.grid_button.click()
    qtbot.waitUntil(lambda: page.charts.grid.charts and all(
        chart.point_count(name) > 0 for name, chart in page.charts.grid.charts.items()), timeout=15000)


def test_a_run_of_200_metrics_has_one_page_of_charts_with_filter_and_pins(qtbot, make_page) -> None:  # type: ignore[no-untyped-def]
    record = add_run("wide", many_metrics(200, range(0, 40, 2)))
    page = make_page()
    open_grid(qtbot, page, record)
    charts = page.charts
    grid = charts.grid
    assert len(grid.charts) == GRID_PAGE and grid.pages == 23
    # Only what is on screen is read and held: the losses, the overview's metric and the page's charts.
    assert len(page.watched.series) <= GRID_PAGE + 2
    assert "1 / 23" in grid.page_label.text()
    grid.next.click()
    qtbot.waitUntil(lambda: all(chart.point_count(name) > 0 for name, chart in grid.charts.items()), timeout=15000)
    assert list(grid.charts) == grid.filtered()[GRID_PAGE:2 * GRID_PAGE]
    assert len(page.watched.series) <= GRID_PAGE + 2

    grid.filter_box.setText("EVAL/m01")  # substring, any case
    assert list(grid.charts) == ["eval/m012", "eval/m016"] and grid.page == 0

    grid.filter_box.setText("")
    pinned = "train/m150"
    grid.set_pinned(pinned, True)
    assert grid.filtered()[0] == pinned and list(grid.charts)[0] == pinned
    assert "★" in grid._cells[0].pin.text()
    page.ctx.settings.sync()
    # Remembered: a new window's grid puts it first too.
    again = make_page()
    assert again.charts.grid.pins == [pinned]
    assert QSettings(str(paths.config_dir() / "window.ini"), QSettings.Format.IniFormat).value(PINS_KEY) in (
        pinned, [pinned])
    grid._cells[0].pin.click()  # unpin from the chart's own button
    assert grid.pins == [] and grid.filtered()[0] == "eval/m004"


def test_smoothing_log_scale_time_axis_and_one_zoom(qtbot, make_page) -> None:  # type: ignore[no-untyped-def]
    rows = [("loss", s, T0 + 100 + 2 * s, 3.0 - s / 50, None) for s in range(0, 200)]
    rows += [("grad_norm", s, T0 + 100 + 2 * s, (-1.0 if s % 10 == 0 else 2.0 + np.cos(s)), None) for s in range(200)]
    rows += [("lr", s, T0 + 100 + 2 * s, 1e-4, None) for s in range(200)]
    record = add_run("options", rows)
    page = make_page()
    open_grid(qtbot, page, record)
    charts = page.charts
    grid_charts = charts.grid.charts
    assert set(grid_charts) == {"loss", "grad_norm", "lr"}

    charts.smoothing_slider.setValue(90)
    assert all(chart.smoothing == pytest.approx(0.9) for chart in grid_charts.values())
    grid_charts["loss"].flush()
    assert grid_charts["loss"]._series["loss"].raw_curve is not None

    charts.log_box.setChecked(True)
    norm = grid_charts["grad_norm"]
    norm.flush()
    qtbot.wait(20)  # painted with values <= 0 in it: nothing raised from the event loop
    assert norm.log_y and norm.masked_count == 20 and norm.mask_note.isVisible()

    charts.x_box.setCurrentIndex(charts.x_box.findData("relative"))
    # Seconds since the run's start (T0): the step clock read from the store maps step s to 100 + 2 s.
    qtbot.waitUntil(lambda: grid_charts["loss"].data("loss")[0][:1].tolist() == [pytest.approx(100.0)],
                    timeout=15000)
    x = grid_charts["loss"].data("loss")[0]
    assert x[-1] == pytest.approx(100 + 2 * 199)
    assert grid_charts["loss"].x_mode == "relative"

    # One zoom for the page: the charts share x; "A" (follow) on any resumes following on all.
    first, other = grid_charts["grad_norm"], grid_charts["lr"]
    other.plot_item.getViewBox().setXRange(150, 200, padding=0)
    other._range_changed_by_user()
    assert first.plot_item.getViewBox().viewRange()[0] == pytest.approx([150, 200], abs=1)
    assert not first.following and not other.following
    other.follow()
    assert first.following and other.following
    assert first.plot_item.getViewBox().viewRange()[0][1] == pytest.approx(498, abs=8)

    # Remembered for the next window.
    again = make_page()
    assert again.charts.smoothing == pytest.approx(0.9) and again.charts.log_y and again.charts.x_mode == "relative"


def test_export_png_and_csv_rows(qtbot, make_page, tmp_path) -> None:  # type: ignore[no-untyped-def]
    rows = [("loss", s, T0 + s, 1.0 / (1 + s), None) for s in range(30)]
    rows += [("eval/acc", s, T0 + s + 0.5, s / 30, None) for s in range(0, 30, 5)]
    record = add_run("export", rows)
    page = make_page()
    open_grid(qtbot, page, record)
    charts = page.charts
    charts.set_smoothing(0.5)

    png = charts.export_png(tmp_path / "out" / "grid.png")
    image = QImage(str(png))
    assert not image.isNull() and image.width() > 600
    one = charts.export_png(tmp_path / "out" / "loss.png", charts.grid.charts["loss"])
    assert not QImage(str(one)).isNull()
    menu = charts.grid.charts["loss"].context_menu()
    assert menu is not None and [a.text() for a in menu.actions()] == ["Save chart as PNG…", "Save its data as CSV…"]

    written: list[Path] = []
    charts.export_csv(tmp_path / "out" / "metrics.csv", done=written.append)
    qtbot.waitUntil(lambda: bool(written), timeout=15000)
    with open(written[0], newline="") as handle:
        table = list(csv.DictReader(handle))
    assert [r["metric"] for r in table] == ["eval/acc"] * 6 + ["loss"] * 30  # the grid's metrics, in its order
    loss = [r for r in table if r["metric"] == "loss"]
    assert [int(r["step"]) for r in loss] == list(range(30))
    assert float(loss[3]["wall_time"]) == T0 + 3 and float(loss[3]["value"]) == pytest.approx(0.25)
    assert float(loss[0]["smoothed"]) == pytest.approx(1.0)  # debiased: the first point is its value
    assert float(loss[1]["smoothed"]) == pytest.approx((0.5 * 0.5 + 0.5 * 1.0 * 0.5) / (1 - 0.25))
    assert not list((tmp_path / "out").glob(".*tmp"))


@pytest.mark.parametrize("grid", [False, True])
def test_legends_name_their_lines_newest_point_as_metrics_arrive(qtbot, make_page, grid) -> None:  # type: ignore[no-untyped-def]
    record = add_run("live", [("loss", s, T0 + s, 2.0 / (1 + s / 20), None) for s in range(10, 190, 10)])
    page = make_page()
    page.open_run(record.id)
    qtbot.waitUntil(lambda: page.charts.figure_shown("loss") is not None
                    and page.charts.legend_figure("loss") is not None, timeout=15000)
    if grid:
        page.charts.grid_button.click()
        qtbot.waitUntil(lambda: page.charts.legend_figure("loss") is not None, timeout=15000)
    assert page.charts.legend_figure("loss") == page.charts.figure_shown("loss")
    # Points arrive between reads, faster than the charts redraw (CHART_MS): each legend names its line's newest
    # point, and says what Last metrics says once the line is redrawn.
    chart = page.charts.grid.charts["loss"] if grid else page.charts.loss_chart
    for step, value in ((190, 0.26), (200, 0.1025), (210, 0.0987)):
        with RunStore() as store:
            store.add_metrics(record.id, [("loss", step, time.time(), value, None)])
        expected = f"{value:.4g}"
        qtbot.waitUntil(lambda e=expected: page.charts.figure_shown("loss") == e, timeout=15000)
        assert page.charts.legend_figure("loss") == f"{chart.last('loss'):.4g}"
        qtbot.waitUntil(lambda e=expected: page.charts.legend_figure("loss") == e, timeout=15000)
        assert "step 2" in page.charts._metric_labels["loss"].toolTip() or step == 190


def test_last_metrics_and_the_legends_change_with_the_same_read(qtbot, make_page) -> None:  # type: ignore[no-untyped-def]
    """Each read's values reach "Last metrics" and the legends together: between two draws of the charts (none
    under way) the two never say different things; they did for up to a second, the legends drawn as a read
    arrived and Last metrics on the page's next clock tick."""
    from PySide6.QtCore import QTimer

    record = add_run("together", [("loss", s, T0 + s, 2.0 / (1 + s / 20), None) for s in range(10, 100, 10)])
    page = make_page()
    page.open_run(record.id)
    charts = page.charts
    qtbot.waitUntil(lambda: charts.figure_shown("loss") is not None and charts.legend_figure("loss") is not None,
                    timeout=15000)
    apart: list[float] = []  # how long each disagreement at rest lasted
    since: list[float] = []

    def look() -> None:
        if charts._to_draw:
            return  # a draw under way: its charts are handed their points one after another
        if charts.figure_shown("loss") != charts.legend_figure("loss"):
            since[:] = since or [time.monotonic()]
        elif since:
            apart.append(time.monotonic() - since.pop())

    sampler = QTimer()
    sampler.setInterval(5)
    sampler.timeout.connect(look)
    sampler.start()
    for step, value in ((100, 0.4321), (110, 0.3999), (120, 0.3876), (130, 0.3712)):
        with RunStore() as store:
            store.add_metrics(record.id, [("loss", step, time.time(), value, None)])
        expected = f"{value:.4g}"
        qtbot.waitUntil(lambda e=expected: charts.figure_shown("loss") == e and charts.legend_figure("loss") == e,
                        timeout=15000)
        qtbot.wait(300)
    sampler.stop()
    assert not since and max(apart, default=0.0) < 0.1, apart


def test_printed_values_made_exact_reach_an_open_runs_chart_and_last_metrics(qtbot, make_page) -> None:  # type: ignore[no-untyped-def]
    """The sidecar revises printed values to their TensorBoard twins' after the page read them: the page's line
    and its last metrics take the exact values (it reads only newer rows, so the revisions come by themselves)."""
    exact = {s: 2.0 / (1 + s / 20) + 1.234567e-4 for s in range(10, 110, 10)}
    record = add_run("exact", [("loss", s, T0 + s, float(f"{v:.4g}"), None) for s, v in exact.items()])
    page = make_page()
    page.open_run(record.id)
    charts = page.charts
    qtbot.waitUntil(lambda: charts.loss_chart.point_count("loss") == len(exact), timeout=15000)
    assert charts.loss_chart.last("loss") == float(f"{exact[100]:.4g}")
    with RunStore() as store:
        rows = {step: (row, value) for row, name, step, _t, value in store.metric_rows_after(record.id, 0)}
        store.revise_metrics(record.id, [(rows[s][0], rows[s][1], exact[s]) for s in (50, 100)])
    qtbot.waitUntil(lambda: charts.figures["loss"].value == exact[100] and charts.loss_chart.last("loss") == exact[100],
                    timeout=15000)
    x, y = charts.loss_chart.data("loss")
    assert dict(zip(x.tolist(), y.tolist(), strict=True)) == {
        float(s): (v if s in (50, 100) else float(f"{v:.4g}")) for s, v in exact.items()}
    assert charts.loss_chart.point_count("loss") == len(exact)  # revised in place, nothing added


def test_a_low_window_scrolls_the_grid_rather_than_squeezing_its_charts(qtbot, make_runs_page) -> None:  # type: ignore[no-untyped-def]
    # At 1360x860 the Runs page's lower pane gave each of 9 charts about 60 px: tick labels ran into each other.
    record = add_run("low", many_metrics(12, range(0, 40, 2)))
    page = make_runs_page((1360, 700))
    open_grid(qtbot, page, record)
    grid = page.charts.grid
    qtbot.waitUntil(lambda: grid.scroll_area.verticalScrollBar().maximum() > 0, timeout=5000)
    assert all(cell.height() >= CELL_MIN_HEIGHT for cell in grid._cells), [c.height() for c in grid._cells]


def test_deepspeeds_engine_figures_say_what_they_measure_in_last_metrics(qtbot, make_page) -> None:  # type: ignore[no-untyped-def]
    # DeepSpeed's samples_per_sec counts only the engine's time: beside the header's samples/s (step rate x global
    # batch) a newcomer read the two as contradicting each other.
    record = add_run("engine", [(n, s, T0 + s, v, None) for s in range(1, 6)
                                for n, v in (("loss", 1.0 / s), ("samples_per_sec", 677.4))])
    page = make_page()
    page.open_run(record.id)
    qtbot.waitUntil(lambda: page.charts.figure_shown("samples_per_sec") is not None, timeout=15000)
    grid = page.charts.metrics_grid
    keys = {grid.itemAtPosition(row, 0).widget().text(): grid.itemAtPosition(row, 0).widget()
            for row in range(grid.rowCount()) if grid.itemAtPosition(row, 0) is not None}
    assert "engine" in keys["samples_per_sec"].toolTip() and "step rate x global batch" in keys["samples_per_sec"].toolTip()
    assert keys["loss"].toolTip() == ""


def test_a_long_live_runs_new_points_are_drawn_by_the_read_that_brings_them(qtbot, make_page) -> None:  # type: ignore[no-untyped-def]
    """A run long past what a chart holds whole (its older part folded): each read's new points are in the drawn
    curves within a few turns of the event loop after the read is taken (a chart a turn, once the draws' pace
    allows: no clock tick or fixed 5 s to wait for), handed as only the new points, and what each chart holds
    stays what the series gives whole, through a fold and through a zoom into the folded part (re-read from the
    store at full resolution) and back."""
    from traindeck.backend.runs.record.series import DEFAULT_RECENT

    total = 2 * DEFAULT_RECENT + 500  # past twice the recent points: the oldest are folded into buckets
    names = ("loss", "train/acc", "train/lr")

    def rows(steps: range) -> list[tuple[str, int | None, float, float, int | None]]:
        return [(n, s, T0 + s / 100, v, None) for s in steps
                for n, v in (("loss", 2.0 / (1 + s / 500) + 0.01 * np.sin(s)), ("train/acc", 1 - 1 / (1 + s)),
                             ("train/lr", 0.001))]

    record = add_run("long", rows(range(1, total + 1)))
    page = make_page()
    page.charts.set_smoothing(0.6)
    open_grid(qtbot, page, record)
    charts = page.charts
    assert set(charts.grid.charts) == set(names)

    def held_as_series(name: str) -> bool:
        chart, series = charts.grid.charts[name], page.watched.series[name]
        (cx, cy), (sx, sy) = chart.data(name), series.arrays()
        return bool(np.array_equal(cx, sx) and np.array_equal(cy, sy))

    def read(steps: range) -> None:
        # The pace first: a draw within draw_interval() of the last is left for later, as on screen.
        qtbot.wait(int(charts.draw_interval() * 1000) + 50)
        with RunStore() as store:
            store.add_metrics(record.id, rows(steps))
        page.poll()
        qtbot.waitUntil(lambda: all(page.watched.series[n].last_x == steps[-1] for n in names), timeout=15000)
        for _ in range(2 * len(names)):  # the read's handler draws a chart, the event loop's next turns the others
            QApplication.processEvents()

    assert page.watched.series["loss"].folded
    for step in range(total + 1, total + 4):
        read(range(step, step + 1))
        for name in names:
            chart = charts.grid.charts[name]
            assert chart.data(name)[0][-1] == step
            assert chart.drawn_last_x(name) == step
            assert held_as_series(name)
    reshapes = page.watched.series["loss"].reshapes
    read(range(total + 4, total + 4 + DEFAULT_RECENT))  # enough to fold again: the charts take the series whole
    assert page.watched.series["loss"].reshapes > reshapes
    assert all(held_as_series(name) and charts.grid.charts[name].drawn_last_x(name) == total + 3 + DEFAULT_RECENT
               for name in names)

    chart = charts.grid.charts["loss"]  # the page's first chart: the others follow its x range
    chart.plot_item.getViewBox().setXRange(100, 300, padding=0)
    chart._range_changed_by_user()  # what a wheel zoom or a drag calls

    def shown_between(low: float, high: float) -> int:
        xs, _ys = chart.data("loss")
        return int(((xs >= low) & (xs <= high)).sum())

    qtbot.waitUntil(lambda: shown_between(100, 300) == 201, timeout=20000)  # every step of the range, re-read
    last = total + 3 + DEFAULT_RECENT
    read(range(last + 1, last + 2))  # a live point while zoomed: the range stays whole, the point is added
    assert shown_between(100, 300) == 201 and chart.data("loss")[0][-1] == last + 1
    chart.follow()  # "A": back to the newest data, and to the bounded history
    qtbot.waitUntil(lambda: held_as_series("loss"), timeout=20000)


def test_tensorboards_section_prefixes_find_the_metrics_a_trainer_prints(qtbot, make_page) -> None:  # type: ignore[no-untyped-def]
    # The HF Trainer prints eval_loss where TensorBoard shows eval/loss; a TensorBoard-only tag keeps its slash.
    names = ["loss", "grad_norm", "eval_loss", "eval_runtime", "train/total_flos"]
    record = add_run("hf", [(n, s, T0 + s, 1.0 + i / (s + 1), None) for s in range(10, 60, 10)
                            for i, n in enumerate(names)])
    page = make_page()
    open_grid(qtbot, page, record)
    grid = page.charts.grid
    assert "eval/" in grid.filter_box.placeholderText()
    grid.filter_box.setText("eval/")
    assert list(grid.charts) == ["eval_loss", "eval_runtime"]
    grid.filter_box.setText("train_total")
    assert list(grid.charts) == ["train/total_flos"]
    grid.filter_box.setText("grad-norm")
    assert list(grid.charts) == ["grad_norm"]
