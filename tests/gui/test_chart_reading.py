"""TimeSeriesChart as a chart is read: y fitted to a metric's data (0 kept for resources), y zoom and the way back,
the hover readout, a legend that leaves the data visible, and an empty chart that says it waits for data."""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest
from PySide6.QtCore import QEvent, QPoint, QPointF, Qt
from PySide6.QtGui import QImage, QMouseEvent, QPainter, QWheelEvent
from PySide6.QtWidgets import QApplication

from traindeck.gui.widgets.charts import TimeSeriesChart

STEPS = np.arange(1, 501.0)
LOSS = 2.30 - 0.08 * (1 - np.exp(-STEPS / 150)) + 0.01 * np.sin(STEPS / 7)  # 2.30 -> 2.22, as a loss goes


def shown(qtbot, chart: TimeSeriesChart, size: tuple[int, int] = (600, 300)) -> TimeSeriesChart:
    chart.set_axis_width(60)  # a y axis as wide whatever its labels: the plot area stays where the test maps to
    chart.resize(*size)
    qtbot.addWidget(chart)
    chart.show()
    qtbot.waitExposed(chart)
    return chart


def settle(chart: TimeSeriesChart) -> None:
    """Let the layout settle (the y axis takes its new labels' width when painted), redrawing until it has."""
    view = chart.plot_item.getViewBox()
    for _ in range(5):
        before = view.sceneBoundingRect()
        chart.flush()
        chart.repaint()
        QApplication.processEvents()
        if view.sceneBoundingRect() == before:
            return


def y_range(chart: TimeSeriesChart) -> tuple[float, float]:
    low, high = chart.plot_item.getViewBox().viewRange()[1]
    return float(low), float(high)


def test_a_metric_chart_fits_y_to_its_data_and_a_resource_chart_keeps_zero(qtbot):
    metric = shown(qtbot, TimeSeriesChart("loss", x_mode="step"))
    # Non-finite values (a diverged step, a gap) take no part in the fit.
    metric.set_series("loss", np.append(STEPS, [501.0, 502.0]), np.append(LOSS, [np.inf, np.nan]))
    metric.flush()
    low, high = y_range(metric)
    span = LOSS.max() - LOSS.min()
    assert LOSS.min() - 0.2 * span < low < LOSS.min() and LOSS.max() < high < LOSS.max() + 0.2 * span, (low, high)
    assert not metric.y_from_zero  # no unit: a metric

    resource = shown(qtbot, TimeSeriesChart("GPU utilisation", "%"))
    assert resource.y_from_zero  # a unit: a resource, read against 0
    resource.set_series("GPU 0", STEPS, 60 + 30 * LOSS - 60)
    resource.flush()
    low, high = y_range(resource)
    assert low <= 0 and high >= 100

    logged = shown(qtbot, TimeSeriesChart("loss", x_mode="step", log_y=True))
    logged.set_series("loss", STEPS, np.geomspace(3.0, 0.05, len(STEPS)))
    logged.flush()
    low, high = y_range(logged)  # in decades: log10(0.05) = -1.30, log10(3) = 0.48
    assert -1.45 < low < math.log10(0.05) and math.log10(3.0) < high < 0.62, (low, high)


def wheel(chart: TimeSeriesChart, delta: int, modifiers: Qt.KeyboardModifier) -> None:
    viewport = chart.plot_widget.viewport()
    centre = QPointF(viewport.rect().center())
    event = QWheelEvent(centre, QPointF(viewport.mapToGlobal(centre.toPoint())), QPoint(), QPoint(0, delta),
                        Qt.MouseButton.NoButton, modifiers, Qt.ScrollPhase.NoScrollPhase, False)
    QApplication.sendEvent(viewport, event)


def test_ctrl_wheel_zooms_a_metric_charts_y_and_the_menu_resets_it_while_x_follows(qtbot):
    chart = shown(qtbot, TimeSeriesChart("loss", x_mode="step"))
    chart.set_series("loss", STEPS, LOSS)
    chart.flush()
    fitted = y_range(chart)
    wheel(chart, 240, Qt.KeyboardModifier.ControlModifier)
    zoomed = y_range(chart)
    assert zoomed[1] - zoomed[0] < 0.9 * (fitted[1] - fitted[0])
    assert not chart.fitting_y and chart.following  # y is the user's; x still follows the newest data
    chart.append("loss", 501.0, 2.5)  # new data neither moves y nor stops x following
    chart.flush()
    assert y_range(chart) == pytest.approx(zoomed)
    assert chart.plot_item.getViewBox().viewRange()[0][1] >= 501
    menu = chart.context_menu()
    assert menu is not None and menu.actions()[0].text() == "Reset view"
    menu.actions()[0].trigger()
    assert chart.fitting_y and y_range(chart)[1] > 2.5  # fitted again, the new point included
    assert chart.context_menu() is None  # nothing to reset, no other entries

    # A box zoom (Shift+drag) shows the box: x and y.
    chart._view.zoom_to(chart._view.childGroup.mapRectFromParent(chart._view.rect().adjusted(100, 50, -200, -50)))
    assert not chart.fitting_y and not chart.following
    chart.follow()
    assert chart.fitting_y and chart.following

    resource = shown(qtbot, TimeSeriesChart("RAM", "B"))
    resource.set_series("used", STEPS, 1e9 + STEPS)
    resource.flush()
    before = y_range(resource)
    wheel(resource, 240, Qt.KeyboardModifier.ControlModifier)
    assert y_range(resource) == pytest.approx(before) and resource.fitting_y  # a resource's y stays from 0


def move_mouse(chart: TimeSeriesChart, x: float, y: float) -> None:
    """A real mouse move over the chart, to where (x, y) is drawn."""
    settle(chart)
    view = chart.plot_item.getViewBox()
    scene_pos = view.mapViewToScene(QPointF(x, y))
    viewport = chart.plot_widget.viewport()
    local = QPointF(chart.plot_widget.mapFromScene(scene_pos))
    event = QMouseEvent(QEvent.Type.MouseMove, local, QPointF(viewport.mapToGlobal(local.toPoint())),
                        Qt.MouseButton.NoButton, Qt.MouseButton.NoButton, Qt.KeyboardModifier.NoModifier)
    QApplication.sendEvent(viewport, event)


def test_the_hover_readout_names_each_series_value_at_the_nearest_x(qtbot):
    chart = shown(qtbot, TimeSeriesChart("loss", x_mode="step"))
    chart.set_series("run A", STEPS, 1.0 + STEPS / 1000)
    chart.set_series("run B", STEPS[:300], 3.0 - STEPS[:300] / 1000)  # ends at step 300
    chart.flush()
    move_mouse(chart, 250.4, 1.5)
    qtbot.waitUntil(lambda: chart.hover_text != "")
    assert chart.hover_text == "step 250\nrun A  1.25\nrun B  2.75"
    assert chart.hover_line.isVisible() and chart.hover_line.value() == 250
    move_mouse(chart, 420.0, 1.5)  # past run B's end: only run A is read
    qtbot.waitUntil(lambda: chart.hover_text.startswith("step 420"))
    assert chart.hover_text == "step 420\nrun A  1.42"
    QApplication.sendEvent(chart.plot_widget.viewport(), QEvent(QEvent.Type.Leave))
    assert chart.hover_text == "" and not chart.hover_line.isVisible()

    chart.smoothing = 0.5  # smoothed, then raw
    chart.flush()
    move_mouse(chart, 3.0, 1.5)
    qtbot.waitUntil(lambda: chart.hover_text != "")
    # EMA of 1.001, 1.002, 1.003 debiased at weight 0.5: (0.25 * 1.001 + 0.5 * 1.002 + 1.003) / 1.75
    smoothed = (0.25 * 1.001 + 0.5 * 1.002 + 1.003) / 1.75
    assert chart.hover_text.splitlines()[:2] == ["step 3", f"run A  {smoothed:.4g} (raw 1.003)"]

    units = shown(qtbot, TimeSeriesChart("Throughput", "B/s", x_mode="relative"))
    units.set_series("disk", np.arange(0.0, 3600.0, 10.0), np.full(360, 3 * 2**20))
    units.flush()
    move_mouse(units, 1800.0, 3 * 2**20)
    qtbot.waitUntil(lambda: units.hover_text != "")
    assert units.hover_text == "30:00 since start\ndisk  3 MiB/s"


def points_under_legend(chart: TimeSeriesChart) -> int:
    view = chart.plot_item.getViewBox()
    area = chart.legend.sceneBoundingRect()
    low = view.mapSceneToView(area.bottomLeft())
    high = view.mapSceneToView(area.topRight())
    count = 0
    for name in chart.series_names():
        x, y = chart.data(name)
        count += int(np.count_nonzero((x >= low.x()) & (x <= high.x()) & (y >= low.y()) & (y <= high.y())))
    return count


def test_the_legend_sits_where_it_covers_no_points(qtbot):
    # Accuracies rising to the top right (where the legend used to sit): the legend moves to a free corner.
    chart = shown(qtbot, TimeSeriesChart("accuracy", x_mode="step"), (420, 220))
    for k in range(4):
        chart.set_series(f"run-{k}", STEPS, 0.5 + 0.4 * (1 - np.exp(-STEPS / (80 + 40 * k))))
    chart.flush()
    assert points_under_legend(chart) == 0
    assert chart.legend.pos().y() > 4  # moved down to the free corner, bottom right

    # Noise over the whole chart, no free corner: the scale makes room above the data for it.
    crowded = shown(qtbot, TimeSeriesChart("grad norm", x_mode="step"), (420, 220))
    rng = np.random.default_rng(3)
    crowded.set_series("a", STEPS, rng.uniform(0, 1, len(STEPS)))
    crowded.set_series("b", STEPS, rng.uniform(0, 1, len(STEPS)))
    settle(crowded)
    assert points_under_legend(crowded) == 0


def test_an_empty_chart_says_it_waits_for_data_and_shows_no_made_up_ticks(qtbot):
    chart = shown(qtbot, TimeSeriesChart("Loss", x_mode="step"))
    chart.flush()
    assert chart.waiting_note.isVisible() and chart.waiting_note.text == "waiting for data"
    assert tick_labels(chart, "left") == [] and tick_labels(chart, "bottom") == []
    chart.append("loss", [1.0, 2.0], [2.3, 2.2])
    chart.flush()
    assert not chart.waiting_note.isVisible()
    assert tick_labels(chart, "left") and tick_labels(chart, "bottom")


def tick_labels(chart: TimeSeriesChart, side: str) -> list[str]:
    """The tick labels the axis draws now."""
    image = QImage(10, 10, QImage.Format.Format_ARGB32)
    painter = QPainter(image)
    try:
        specs = chart.plot_item.getAxis(side).generateDrawSpecs(painter)
    finally:
        painter.end()
    return [] if specs is None else [text for _, _, text in specs[2]]


def test_a_log_chart_whose_one_point_becomes_a_gap_draws_without_a_warning(qtbot):
    chart = shown(qtbot, TimeSeriesChart("loss", x_mode="step", log_y=True))
    chart.set_series("loss", [1.0, 2.0], [0.5, -1.0])  # one value a log scale can show: a marked point
    chart.flush()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        chart.set_series("loss", [1.0, 2.0], [-0.5, -1.0])  # none left
        chart.flush()
        chart.grab()
        QApplication.processEvents()
    # pyqtgraph bounding the point's marker over NaN only warns "All-NaN slice encountered".
    assert [str(w.message) for w in caught if "NaN" in str(w.message)] == []
    assert chart.masked_count == 2 and chart.waiting_note.isVisible()


def scene_rect_in_view_pixels(chart: TimeSeriesChart, item) -> tuple[float, float, float, float]:
    """An item's drawn box as (left, top, right, bottom) in the plot's pixels."""
    rect = chart.plot_item.mapRectFromScene(item.sceneBoundingRect())
    return rect.left(), rect.top(), rect.right(), rect.bottom()


def overlap(a: tuple[float, float, float, float], b: tuple[float, float, float, float]) -> bool:
    return a[0] < b[2] and b[0] < a[2] and a[1] < b[3] and b[1] < a[3]


def test_the_legend_leaves_a_reference_lines_label_readable(qtbot):
    # The Monitor's RAM chart: the total as a reference line at the top, its label at the left end; "available" high
    # at the right (the top right corner is taken), "used" low at the right; the left half empty (just opened).
    chart = shown(qtbot, TimeSeriesChart("RAM and swap", "B"), (580, 280))
    gib = 2**30
    t = np.arange(540.0, 600.0)
    chart.set_series("used", t, np.full(len(t), 3.7 * gib), fill=True)
    chart.set_series("available", t, np.full(len(t), 19.8 * gib))
    chart.set_series("swap used", t, np.zeros(len(t)))
    chart.add_reference(23.5 * gib, "total")
    chart.set_series("used", np.arange(0.0, 600.0), np.r_[np.full(540, np.nan), np.full(60, 3.7 * gib)], fill=True)
    settle(chart)
    label = next(line.label for line in chart.plot_item.items if getattr(line, "label", None) is not None
                 and "total" in str(line.label.toPlainText()))
    assert not overlap(scene_rect_in_view_pixels(chart, chart.legend), scene_rect_in_view_pixels(chart, label))
    assert points_under_legend(chart) == 0


def test_a_lines_end_just_beside_the_legend_moves_it(qtbot):
    # A total rising to the top right corner, its last point a few pixels left of the legend's box there: the legend
    # would seem to sit on the line's end; it takes the free top left corner instead.
    chart = shown(qtbot, TimeSeriesChart("CPU", x_mode="step"), (420, 220))
    chart.set_series("floor", np.arange(0.0, 101.0), np.zeros(101))  # the bottom corners taken, x from 0 to 100
    chart.set_series("total", [0.0, 50.0], [0.0, 1.0])
    settle(chart)
    view = chart.plot_item.getViewBox()
    (x_low, x_high), _ = view.viewRange()
    edge = view.width() - chart.legend.boundingRect().width() - 4  # the legend's left edge in the top right corner
    end = x_low + (edge - 3) / view.width() * (x_high - x_low)
    chart.set_series("total", [0.0, end], [0.0, 1.0])
    settle(chart)
    assert chart.legend.pos().x() < view.width() / 2


def test_the_hover_box_never_covers_the_y_axis_numbers(qtbot):
    # A chart as narrow as one of the Runs page's grid: the mouse left of the middle, too near the right edge for
    # the box to fit right of it and too near the axis to fit left of it.
    chart = shown(qtbot, TimeSeriesChart("", x_mode="step"), (230, 150))  # the grid titles it above
    chart.set_series("curr_samples_per_sec (DeepSpeed)", STEPS[:160], 600 + 100 * np.sin(STEPS[:160]))
    chart.smoothing = 0.6  # "561.3 (raw 565)": a box wider than the room either side of the mouse
    chart.flush()
    for x in (20.0, 60.0, 86.0, 150.0):
        move_mouse(chart, x, 600.0)
        qtbot.waitUntil(lambda x=x: chart.hover_text.startswith(f"step {x:.0f}"))
        box = scene_rect_in_view_pixels(chart, chart.hover_label)
        axis = chart.plot_item.getAxis("left").geometry()  # its numbers' column, left of the data area
        assert box[0] >= axis.right() - 1, (x, box, axis)

    wide = shown(qtbot, TimeSeriesChart("Loss", x_mode="step"), (360, 660))  # the Runs page's overview chart
    wide.set_series("loss", STEPS[:65], 0.3 + 0.4 * np.exp(-STEPS[:65] / 20))
    wide.smoothing = 0.6
    wide.flush()
    move_mouse(wide, 35.0, 0.45)
    qtbot.waitUntil(lambda: wide.hover_text.startswith("step 35"))
    box = scene_rect_in_view_pixels(wide, wide.hover_label)
    assert box[0] >= wide.plot_item.getAxis("left").geometry().right() - 1
