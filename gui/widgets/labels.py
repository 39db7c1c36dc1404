"""Small label and panel makers shared by the pages' parts."""

from __future__ import annotations

from PySide6.QtCore import QSize, Qt
from PySide6.QtGui import QResizeEvent
from PySide6.QtWidgets import QFrame, QLabel, QProgressBar, QSizePolicy, QVBoxLayout


def panel(name: str) -> tuple[QFrame, QVBoxLayout]:
    """A hidden framed panel named `name` (for its style sheet), with its layout."""
    frame = QFrame()
    frame.setObjectName(name)
    layout = QVBoxLayout(frame)
    layout.setContentsMargins(10, 6, 10, 6)
    layout.setSpacing(2)
    frame.setVisible(False)
    return frame, layout


def label(text: str = "", *, selectable: bool = False, wrap: bool = False, bold: bool = False) -> QLabel:
    widget = QLabel(text)
    if selectable:
        widget.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
    widget.setWordWrap(wrap)
    if bold:
        font = widget.font()
        font.setBold(True)
        widget.setFont(font)
    return widget


class ReasonLabel(QLabel):
    """Words said in a chart's place (why it has nothing to draw): wrapped, centred, selectable, in the room the
    chart has. Not height-for-width: a wrapped QLabel is, and a page holding one turns height-for-width with its
    preferred height, so a scroll area around it sizes it to that and scrolls where it fits (as would any parent
    that honours height-for-width); the words never ask the page for room either (Ignored: they take the chart's)."""

    def __init__(self, text: str = "") -> None:
        super().__init__(text)
        self.setWordWrap(True)
        self.setAlignment(Qt.AlignmentFlag.AlignCenter)
        self.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Ignored)

    def hasHeightForWidth(self) -> bool:  # noqa: N802 (Qt's name)
        return False


class SteadyLabel(QLabel):
    """A label whose text changes every second or poll (a clock, a live value), of fixed size: as wide as the
    widest text it has shown (at least `sample`), so a new text repaints the label alone. A label sized by its text
    asks its layout to lay the page out again at each change, which repaints the labels and boxes around it a
    moment later, a second repaint of the window (bench_gui_soak --paints); Qt skips that for a widget of fixed
    size. A wider text widens it (once), nothing narrows it."""

    def __init__(self, sample: str = "", *, selectable: bool = False,
                 align: Qt.AlignmentFlag = Qt.AlignmentFlag.AlignLeft) -> None:
        super().__init__()
        if selectable:
            self.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.setAlignment(align | Qt.AlignmentFlag.AlignVCenter)
        self._fit(sample)

    def setText(self, text: str) -> None:  # noqa: N802
        if text == self.text():
            return
        if self.fontMetrics().horizontalAdvance(text) + 2 > self.contentsRect().width() - 2 * self.margin():
            self._fit(text)
        super().setText(text)

    def _fit(self, text: str) -> None:
        shown = self.text()
        super().setText(text)
        hint = self.sizeHint()
        self.setFixedSize(max(hint.width() + 2, self.minimumWidth()), hint.height())
        super().setText(shown)


class SteadyProgressBar(QProgressBar):
    """A progress bar that repaints with the rest of the window. Qt's setValue paints the bar at once
    (QWidget::repaint, when the change shows) instead of asking for a repaint: a run's poll then paints the window
    twice a second, once for the bar and once for everything else the same pass changed. Here the new value is
    taken with updates off and the bar is marked for the next repaint."""

    def setValue(self, value: int) -> None:  # noqa: N802 (Qt's name)
        if value == self.value():
            return
        self.setUpdatesEnabled(False)
        super().setValue(value)
        self.setUpdatesEnabled(True)
        self.update()


class ElidedLabel(QLabel):
    """One line that never widens its window: the text is cut in the middle ("…") to the width the layout gives,
    the whole of it in the tooltip (with `detail` below it). A run's name can be 90 characters: as a plain label it
    made the window wider than the screen, with Stop off its edge."""

    MIN_WIDTH = 80

    def __init__(self, text: str = "", *, bold: bool = False, max_width: int = 520,
                 mode: Qt.TextElideMode = Qt.TextElideMode.ElideMiddle) -> None:
        super().__init__()
        self._full, self._detail = "", ""
        self._mode = mode  # ElideRight where the start names the thing and the end qualifies it
        # Preferred: as wide as its text up to max_width when there is room, down to MIN_WIDTH when there is not
        self.setSizePolicy(QSizePolicy.Policy.Preferred, QSizePolicy.Policy.Preferred)
        self._max_width = max_width
        if bold:
            font = self.font()
            font.setBold(True)
            self.setFont(font)
        self.set_full_text(text)

    def set_full_text(self, text: str, detail: str = "") -> None:
        self._full, self._detail = text, detail
        self.setToolTip("\n".join(t for t in (text, detail) if t))
        self.updateGeometry()
        self._elide()

    def full_text(self) -> str:
        return self._full

    def sizeHint(self) -> QSize:  # noqa: N802 (Qt's name)
        hint = super().sizeHint()
        wanted = self.fontMetrics().horizontalAdvance(self._full) + 8
        return QSize(min(wanted, self._max_width), hint.height())

    def minimumSizeHint(self) -> QSize:  # noqa: N802
        return QSize(self.MIN_WIDTH, super().minimumSizeHint().height())

    def resizeEvent(self, event: QResizeEvent) -> None:  # noqa: N802
        super().resizeEvent(event)
        self._elide()

    def _elide(self) -> None:
        width = max(self.width(), self.MIN_WIDTH)
        super().setText(self.fontMetrics().elidedText(self._full, self._mode, width))
