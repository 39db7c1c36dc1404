"""Labels that change every second (the Runs page's clock, its last metrics) must not lay the page out again."""

from __future__ import annotations

from PySide6.QtCore import QEvent, QObject
from PySide6.QtWidgets import QHBoxLayout, QLabel, QWidget

from traindeck.gui.widgets.labels import SteadyLabel


class _LayoutRequests(QObject):
    def __init__(self) -> None:
        super().__init__()
        self.count = 0

    def eventFilter(self, _watched: QObject, event: QEvent) -> bool:  # noqa: N802
        self.count += event.type() == QEvent.Type.LayoutRequest
        return False


def _row(qtbot, label: QLabel) -> tuple[QWidget, _LayoutRequests]:  # type: ignore[no-untyped-def]
    row = QWidget()
    qtbot.addWidget(row)
    layout = QHBoxLayout(row)
    layout.addWidget(QLabel("loss"))
    layout.addWidget(label)
    row.show()
    qtbot.waitExposed(row)
    qtbot.wait(20)  # the row's own first layout pass
    requests = _LayoutRequests()
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
