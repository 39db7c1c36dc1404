"""TimeSeriesChart's options for metric charts: smoothing over a faint raw line, log scale with values <= 0 left
out in words, x by step / clock time / time since start, legend figures without a redraw, PNG export and the
right-click menu."""

from __future__ import annotations

import math

import numpy as np
import pyqtgraph as pg
import pytest
from PySide6.QtCore import QPoint
from PySide6.QtGui import QContextMenuEvent, QFontMetricsF, QImage, QPainter
from PySide6.QtWidgets import QApplication, QMenu

from traindeck.backend.runs import ema
from traindeck.gui.widgets.chart_axis import DurationAxisItem, duration_tick, log_labels, log_ticks
from traindeck.gui.widgets.charts import TimeSeriesChart


@pytest.fixture
def chart(qtbot):
    widget = TimeSeriesChart("loss", x_is_time=False)
    widget.resize(640, 240)
    qtbot.addWidget(widget)
    widget.show()
    qtbot.waitExposed(widget)
    return widget


def test_smoothing_draws_the_ema_over_a_faint_raw_line(chart):
    rng = np.random.default_rng(1)
    y = 2.0 + rng.normal(0, 0.5, 300)
    chart.set_series("loss", np.arange(300.0), y)
    chart.flush()
    series = chart._series["loss"]
    assert series.raw_curve is None  # off: one line, the raw one
    chart.smoothing = 0.9
    chart.flush()
    assert series.raw_curve is not None
    np.testing.assert_allclose(series.curve.getData()[1], ema(y, 0.9))
    np.testing.assert_allclose(series.raw_curve.getData()[1], y)
    assert series.raw_curve.opts["pen"].color().alpha() < 255  # faint
    assert chart.last("loss") == pytest.approx(y[-1])  # the legend's figure stays the raw value
    chart.smoothing = 0
    chart.flush()
    assert series.raw_curve is None
    np.testing.assert_allclose(series.curve.getData()[1], y)


def test_a_live_series_is_smoothed_as_if_smoothed_whole_after_every_update(chart):
    """Fed as the Runs page feeds a live run (points appended, the whole set again after a fold of the older part
    into min/max buckets), the smoothed line is ema() of the points held, exactly, gaps and a constant start
    included: only the new points are smoothed, with the same figures."""
    from traindeck.backend.runs import BoundedSeries

    rng = np.random.default_rng(5)
    chart.resize(4000, 240)  # wide enough that every point held is drawn as it is (no decimation)
    chart.smoothing = 0.6
    series = BoundedSeries(recent=300, max_buckets=50)
    count = reshapes = 0
    folds = 0
    for update in range(60):
        k = int(rng.integers(1, 80))
        y = 1.0 + rng.normal(0, 0.1, k).cumsum() if update > 3 else np.full(k, 0.5)  # constant at first
        y[rng.random(k) < 0.1] = np.nan
        series.add(np.arange(series.count, series.count + k, dtype=np.float64), y)
        tail = series.points_after(count, reshapes)
        if tail is None:
            chart.set_series("loss", *series.arrays())
            folds += 1
        else:
            chart.append("loss", *tail)
        count, reshapes = series.count, series.reshapes
        chart.flush()
        held_x, held_y = chart.data("loss")
        assert np.array_equal(held_y, series.arrays()[1], equal_nan=True)
        drawn_x, drawn_y = chart._series["loss"].curve.getData()
        assert np.array_equal(drawn_x, held_x)
        assert np.array_equal(drawn_y, ema(held_y, 0.6), equal_nan=True)
    assert folds > 1


def test_log_scale_leaves_non_positive_values_out_in_words(chart, qtbot):
    chart.set_series("loss", np.arange(6.0), [10.0, 1.0, 0.0, -3.0, 0.1, 0.01])
    chart.log_y = True
    chart.flush()
    qtbot.wait(10)  # a paint with the masked values: pyqtgraph must not raise from the event loop
    assert chart.masked_count == 2
    assert chart.mask_note.isVisible() and "2 values ≤ 0 not shown" in chart.mask_note.text
    low, high = chart.plot_item.getViewBox().viewRange()[1]
    assert low < -2 < 1 < high  # decades: 0.01 .. 10 in view
    assert chart.plot_item.getAxis("left").logMode
    chart.log_y = False
    chart.flush()
    assert chart.masked_count == 0 and not chart.mask_note.isVisible()


def test_x_modes_label_the_axis(chart):
    assert chart.x_mode == "step" and not chart.x_is_time
    chart.x_mode = "relative"
    assert isinstance(chart.plot_item.getAxis("bottom"), DurationAxisItem)
    chart.x_mode = "time"
    assert isinstance(chart.plot_item.getAxis("bottom"), pg.DateAxisItem) and chart.x_is_time
    with pytest.raises(ValueError):
        chart.x_mode = "epochs"  # type: ignore[assignment]
    assert duration_tick(90) == "1:30" and duration_tick(3725) == "1:02:05" and duration_tick(2 * 86400) == "2 d 00:00:00"


def test_time_since_start_reads_as_the_runs_duration_does() -> None:
    """One formatter (backend duration_text): the relative axis' ticks, its readout and "exited at 0:42" write a
    duration as the run's header and list do, days with their seconds; to the nearest second; signed left of 0."""
    from traindeck.backend.runs import duration_text, moment_words

    two_days = 2 * 86400 + 3 * 3600 + 4 * 60 + 5
    assert duration_tick(two_days) == duration_text(two_days) == "2 d 03:04:05"
    assert moment_words(1_000.0 + two_days, "relative", start=1_000.0) == "2 d 03:04:05"
    assert duration_tick(41.6) == moment_words(1_041.6, "relative", start=1_000.0) == "0:42"
    assert duration_tick(-30) == duration_text(-30) == "-0:30"
    assert duration_text(-0.4) == "0:00" and duration_text(None) == ""


def test_legend_values_change_without_a_redraw(chart):
    chart.set_series("loss", [1.0, 2.0], [0.5, 0.26])
    chart.flush()
    assert chart.legend_text("loss") == "loss  0.26"
    chart.show_legend_values({"loss": 0.1025})
    assert chart.legend_text("loss") == "loss  0.102"  # three digits unless asked
    chart.legend_digits = 4
    chart.show_legend_values({"loss": 0.1025})
    assert chart.legend_text("loss") == "loss  0.1025"
    assert not chart._dirty  # nothing to redraw for it


def test_export_png_and_the_menu(chart, tmp_path):
    chart.set_series("loss", np.arange(50.0), np.linspace(3, 1, 50))
    path = chart.export_png(tmp_path / "charts" / "loss.png")
    image = QImage(str(path))
    assert not image.isNull() and image.width() >= 600
    assert not list(path.parent.glob(".*tmp"))
    assert chart.context_menu() is None
    asked = []
    chart.add_menu_action("Save as PNG…", lambda: asked.append("png"))
    menu = chart.context_menu()
    assert menu is not None and [a.text() for a in menu.actions()] == ["Save as PNG…"]
    menu.actions()[0].trigger()
    assert asked == ["png"]
    # A right-click on the plot opens it (pyqtgraph's own menu is off).
    viewport = chart.plot_widget.viewport()
    QApplication.sendEvent(viewport, QContextMenuEvent(QContextMenuEvent.Reason.Mouse, QPoint(50, 50),
                                                       viewport.mapToGlobal(QPoint(50, 50))))
    popped = [m for m in chart.findChildren(QMenu) if m.isVisible()]
    assert popped and [a.text() for a in popped[0].actions()] == ["Save as PNG…"]
    popped[0].close()


def test_log_axis_labels_decades_and_not_every_minor_tick(chart):
    chart.set_series("loss", np.arange(5.0), [1e-3, 1e-2, 1e-1, 1.0, 10.0])
    chart.log_y = True
    chart.flush()
    axis = chart.plot_item.getAxis("left")
    low, high = axis.range
    levels = axis.tickValues(low, high, 200)
    labels = [s for spacing, values in levels for s in axis.tickStrings(values, 1.0, spacing) if s]
    assert "0.01" in labels and "1" in labels and "0.03" not in labels
    chart.set_series("loss", np.arange(3.0), [2.7, 3.5, 4.2])  # under a decade: the 3 and 4 ticks are labelled
    chart.flush()
    low, high = axis.range
    labels = [s for spacing, values in axis.tickValues(low, high, 200) for s in axis.tickStrings(values, 1.0, spacing)
              if s]
    assert "3" in labels and "4" in labels


def _drawn_labels(axis) -> list[tuple[float, str]]:
    """The y labels the axis draws now, (centre y in px, text), top to bottom: its own drawing specs, computed with
    a painter in the font it paints with."""
    image = QImage(10, 10, QImage.Format.Format_ARGB32)
    painter = QPainter(image)
    painter.setFont(axis.style["tickFont"] or axis.font())
    try:
        _axis, _ticks, texts = axis.generateDrawSpecs(painter)
    finally:
        painter.end()
    return sorted((rect.center().y(), text) for rect, _flags, text in texts if text)


@pytest.mark.parametrize(("values", "height"), [
    (0.5 + 30 * np.exp(-np.arange(400) / 30), 150),  # a loss from 30 to 0.5 in a metrics grid cell
    (0.3 + 8 * np.exp(-np.arange(400) / 60), 150),
    (10 ** np.linspace(-3, 3, 400), 150),  # a gradient norm over six decades
    (10 ** np.linspace(-6, -4, 400), 150),  # a learning rate's warm-up
    (0.5 + 30 * np.exp(-np.arange(400) / 30), 240),
    (3 + 0.1 * np.sin(np.arange(400) / 20), 150),  # a flat loss: under a tenth of a decade
])
def test_log_axis_labels_never_overlap_on_a_short_chart(qtbot, values, height):
    chart = TimeSeriesChart("", x_is_time=False, log_y=True)
    chart.plot_widget.setMinimumHeight(90)  # as the Runs page's metrics grid makes its cells' charts
    chart.resize(300, height)
    qtbot.addWidget(chart)
    chart.show()
    qtbot.waitExposed(chart)
    chart.set_series("m", np.arange(len(values), dtype=float), values)
    chart.flush()
    for _ in range(2):  # painted: the axis widens to its labels on a paint, and draws them on the next one
        chart.grab()
        QApplication.processEvents()
    axis = chart.plot_item.getAxis("left")
    labels = _drawn_labels(axis)
    text_height = QFontMetricsF(axis.style["tickFont"] or axis.font()).height()
    gaps = [b[0] - a[0] for a, b in zip(labels, labels[1:], strict=False)]
    assert len(labels) >= 2, labels  # still says where the values are
    assert min(gaps) >= text_height, (labels, text_height)


def test_log_ticks_keep_labels_apart_at_every_length_and_span():
    for span in (0.02, 0.3, 0.7, 1.5, 2.2, 4.0, 9.0, 40.0):
        for pixels in (40, 66, 120, 300, 900):
            for low in (-7.3, -0.4, 0.1, 2.6):
                labelled, plain = log_ticks(low, low + span, pixels, 14.0)
                gaps = np.diff(labelled) * pixels / span
                assert not len(gaps) or gaps.min() >= 14.0, (span, pixels, low, labelled)
                assert all(low <= v <= low + span for v in labelled + plain)
                assert not set(labelled) & set(plain)
                if pixels >= 66:
                    assert len(labelled) >= 2 or span > 2, (span, pixels, low, labelled)
    assert log_labels([math.log10(2.931), math.log10(2.932)]) == ["2.931", "2.932"]
