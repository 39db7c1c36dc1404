"""What the Charts tab's grids of charts share (the metrics grid and the System view): a cell with a pin and a
title above its chart, the bar with the filter box over the cells (and the pages, where a view has them), and the
pins remembered in the app's settings. Which charts show is each view's ChartChoice (backend: filter_metrics); this
module only presents it."""

from __future__ import annotations

from PySide6.QtCore import QSettings, Qt
from PySide6.QtWidgets import (
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QSizePolicy,
    QToolButton,
    QVBoxLayout,
    QWidget,
)

from traindeck.gui.theme import set_muted
from traindeck.gui.widgets.labels import ElidedLabel

CELL_MIN_HEIGHT = 150  # px: room for a chart's tick labels and legend; a low pane scrolls rather than squeezing
PINNED, UNPINNED = "★", "☆"


def read_pins(settings: QSettings, key: str) -> list[str]:
    """The names pinned under `key`, in the order pinned."""
    value = settings.value(key, [])
    if isinstance(value, str):  # QSettings gives one string for a one-item list in INI files
        return [value] if value else []
    return [str(v) for v in value] if isinstance(value, list) else []


class ChartCell(QWidget):
    """A chart (or what stands in its place) under a header: a pin button (`pin_tip` None: no pin) and its title,
    cut at the cell's edge with "…" (the whole of it and `note` in the tooltip) rather than widening the grid."""

    def __init__(self, name: str, title: str, body: QWidget, pinned: bool = False, *,
                 pin_tip: str | None = None, note: str = "") -> None:
        super().__init__()
        self.name, self.body = name, body
        self.pin = QToolButton()
        self.pin.setCheckable(True)
        self.pin.setAutoRaise(True)
        self.pin.setChecked(pinned)
        self.pin.setText(PINNED if pinned else UNPINNED)
        self.pin.setToolTip(pin_tip or "")
        self.pin.toggled.connect(lambda on: self.pin.setText(PINNED if on else UNPINNED))
        self.title = ElidedLabel(title, mode=Qt.TextElideMode.ElideRight)
        self.title.set_full_text(title, note)
        self.title.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Preferred)
        header = QHBoxLayout()
        header.setContentsMargins(0, 0, 0, 0)
        header.setSpacing(2)
        header.addWidget(self.pin)
        header.addWidget(self.title, 1)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.setSpacing(0)
        layout.addLayout(header)
        layout.addWidget(body, 1)
        if pin_tip is None:  # its room kept: the title and the chart line up with the pinned cells' beside it
            policy = self.pin.sizePolicy()
            policy.setRetainSizeWhenHidden(True)
            self.pin.setSizePolicy(policy)
            self.pin.hide()  # (once in the layout: a parentless widget shown would be a window of its own)
        self.setMinimumHeight(CELL_MIN_HEIGHT)


class FilterBar(QWidget):
    """The filter box over a view's cells, what it lets through ("4 of 6"), and where the view has pages, the
    buttons to page through them."""

    def __init__(self, placeholder: str, *, paged: bool = False) -> None:
        super().__init__()
        self.filter_box = QLineEdit()
        self.filter_box.setPlaceholderText(placeholder)
        self.filter_box.setClearButtonEnabled(True)
        self.previous = QToolButton()
        self.previous.setText("◀")
        self.previous.setToolTip("Previous page of charts")
        self.next = QToolButton()
        self.next.setText("▶")
        self.next.setToolTip("Next page of charts")
        self.count = QLabel()
        set_muted(self.count)
        self.paged = paged
        layout = QHBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addWidget(self.filter_box, 1)
        if paged:
            layout.addWidget(self.previous)
        layout.addWidget(self.count)
        if paged:
            layout.addWidget(self.next)
        else:
            self.previous.hide()
            self.next.hide()

    def show_count(self, shown: int, total: int, page: int = 0, pages: int = 1) -> None:
        """What the filter lets through of `total` (and, paged, which page of how many)."""
        self.previous.setEnabled(page > 0)
        self.next.setEnabled(page < pages - 1)
        of = f"{shown} of {total}"
        self.count.setText(f"{page + 1} / {pages}  ({of})" if self.paged else of)
