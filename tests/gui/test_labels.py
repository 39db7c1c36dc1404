"""Labels that change every second (the Runs page's clock, its last metrics) must not lay the page out again."""

from __future__ import annotations

from PySide6.QtCore import QEvent
from PySide6.QtWidgets import QHBoxLayout, QLabel, QProgressBar, QWidget
from support.qt_events import EventCount

from traindeck.gui.widgets.labels import SteadyLabel, SteadyProgressBar


def _row(qtbot, label: QWidget) -> tuple[QWidget, EventCount]:  # type: ignore[no-untyped-def]
    row = QWidget()
    qtbot.addWidget(row)
    layout = QHBoxLayout(row)
    layout.addWidget(QLabel("loss"))
    layout.addWidget(label)
    row.show()
    qtbot.waitExposed(row)
    qtbot.wait(20)  # the row's own first layout pass
    requests = EventCount(QEvent.Type.LayoutRequest)
    row.installEventFilter(requests)
    return row, requests


def test_a_steady_label_takes_new_values_without_a_layout_pass_and_widens_for_a_wider_one(qtbot) -> None:  # type: ignore[no-untyped-def]
    label = SteadyLabel("-8.888e-08")
    _row_widget, requests = _row(qtbot, label)
    width = label.width()
    for value in (2.0071, 1.755, 3.286e-05, 0.7):
        label.setText(f"{value:.4g}")
        qtbot.wait(5)
    assert requests.count == 0 and label.width() == width and label.text() == "0.7"

    label.setText("a much longer text than the sample")  # wider than the sample: widens once, whole
    assert label.width() > width
    assert label.fontMetrics().horizontalAdvance(label.text()) <= label.contentsRect().width()
    wide = label.width()
    label.setText("1")
    assert label.width() == wide  # never narrows


def test_a_plain_label_lays_its_row_out_again_at_each_new_text(qtbot) -> None:  # type: ignore[no-untyped-def]
    """What SteadyLabel avoids (so the test above can fail): Qt asks the parent for a layout pass."""
    label = QLabel("-8.888e-08")
    _row_widget, requests = _row(qtbot, label)
    label.setText("2.007")
    qtbot.wait(20)
    assert requests.count >= 1


def _bar_paints(qtbot, bar: QProgressBar) -> tuple[QWidget, EventCount]:  # type: ignore[no-untyped-def]
    bar.setRange(0, 1000)
    bar.setTextVisible(False)
    row, _requests = _row(qtbot, bar)
    paints = EventCount(QEvent.Type.Paint)
    bar.installEventFilter(paints)
    return row, paints


def test_a_steady_progress_bar_paints_with_the_next_repaint_not_at_once(qtbot) -> None:  # type: ignore[no-untyped-def]
    bar = SteadyProgressBar()
    _row_widget, paints = _bar_paints(qtbot, bar)
    bar.setValue(500)
    assert paints.count == 0 and bar.value() == 500  # nothing painted inside setValue
    qtbot.waitUntil(lambda: paints.count >= 1, timeout=2000)  # but painted with the next repaint
    painted = paints.count
    bar.setValue(500)  # the same value: nothing to paint
    qtbot.wait(30)
    assert paints.count == painted


def test_qts_progress_bar_paints_inside_set_value(qtbot) -> None:  # type: ignore[no-untyped-def]
    """What SteadyProgressBar avoids (so the test above can fail): QProgressBar.setValue repaints at once."""
    bar = QProgressBar()
    _row_widget, paints = _bar_paints(qtbot, bar)
    bar.setValue(500)
    assert paints.count >= 1
