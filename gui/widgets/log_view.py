"""`LogView`: a read-only monospace text view that draws only the lines on screen.

Why not QPlainTextEdit: it lays out every inserted line (to size its scroll bars), so 8,000 new lines cost it
30-200 ms per insert on this machine, and trimming old lines costs as much again; a console fed 100k lines/s stalls.
Here lines are plain strings in a bounded deque: appending is a deque extend, trimming is free (maxlen), and a
repaint draws the ~50 visible rows, clipped to the visible columns. The font is monospace, so positions are
arithmetic (column = x / advance): selection, copy, search and horizontal scrolling need no text layout.

Lines carry an increasing number (the console's absolute line number) so a line can be replaced in place (a
progress bar redrawn) after others were appended, and a selection stays on its text while old lines fall out.
"""

from __future__ import annotations

import bisect
import re
from collections import deque
from collections.abc import Sequence

from PySide6.QtCore import QEvent, QPoint, QRect, Qt, QTimer, Signal
from PySide6.QtGui import (
    QColor,
    QContextMenuEvent,
    QFontDatabase,
    QGuiApplication,
    QKeyEvent,
    QKeySequence,
    QMouseEvent,
    QPainter,
    QPaintEvent,
    QPalette,
    QResizeEvent,
)
from PySide6.QtWidgets import QAbstractScrollArea, QMenu, QWidget

MARGIN = 4
_RANK_PREFIX = re.compile(r"\[\d+\] ")
_ERROR = re.compile(r"Traceback \(most recent call last\)|\b\w*(?:Error|Exception)\b|\bFAILED\b|\bfatal\b|error:",
                    re.IGNORECASE)
_WARNING = re.compile(r"\bWARN(?:ING)?\b|\bWarning\b")

Position = tuple[int, int]  # (line number, column)


class LogView(QAbstractScrollArea):
    """Shows up to `max_lines` numbered lines; the oldest fall out as new ones are appended."""

    selection_changed = Signal()

    def __init__(self, max_lines: int = 20_000, parent: QWidget | None = None):
        super().__init__(parent)
        self.max_lines = max_lines
        self._numbers: deque[int] = deque(maxlen=max_lines)
        self._texts: deque[str] = deque(maxlen=max_lines)
        self._max_chars = 0
        self._anchor: Position | None = None
        self._cursor: Position | None = None
        self._selecting = False
        self.placeholder = "No output yet."
        self.setFont(QFontDatabase.systemFont(QFontDatabase.SystemFont.FixedFont))
        self.setFocusPolicy(Qt.FocusPolicy.StrongFocus)
        self.viewport().setCursor(Qt.CursorShape.IBeamCursor)
        self.setContextMenuPolicy(Qt.ContextMenuPolicy.DefaultContextMenu)
        self._scroll_timer = QTimer(self)  # scrolls while a selection is dragged past an edge
        self._scroll_timer.setInterval(50)
        self._scroll_timer.timeout.connect(self._drag_scroll)
        self._drag_point = QPoint()
        self._metrics_changed()

    # ---- content ------------------------------------------------------------------------------------------------
    def __len__(self) -> int:
        return len(self._texts)

    def append(self, numbers: Sequence[int], texts: Sequence[str]) -> int:
        """Add lines at the end (numbers must keep increasing); returns how many old lines fell out."""
        dropped = max(0, len(self._texts) + len(texts) - self.max_lines)
        self._numbers.extend(numbers)
        self._texts.extend(texts)
        longest = max(map(len, texts), default=0)
        if longest > self._max_chars:
            self._max_chars = longest
        self._update_scrollbars()
        self.viewport().update()
        return min(dropped, len(self._texts))

    def replace(self, number: int, text: str, lookback: int = 64) -> bool:
        """Replace the text of line `number` if it is among the last `lookback` lines (a bar redrawn)."""
        numbers, n = self._numbers, len(self._numbers)
        for back in range(1, min(n, lookback) + 1):
            found = numbers[n - back]
            if found == number:
                self._texts[n - back] = text
                if len(text) > self._max_chars:
                    self._max_chars = len(text)
                    self._update_scrollbars()
                self.viewport().update()
                return True
            if found < number:
                return False
        return False

    def clear(self) -> None:
        self._numbers.clear()
        self._texts.clear()
        self._max_chars = 0
        self._anchor = self._cursor = None
        self._update_scrollbars()
        self.viewport().update()

    def lines(self) -> list[str]:
        return list(self._texts)

    def text(self) -> str:
        return "\n".join(self._texts)

    def numbers(self) -> list[int]:
        return list(self._numbers)

    # ---- geometry -----------------------------------------------------------------------------------------------
    def _metrics_changed(self) -> None:
        metrics = self.fontMetrics()
        self._line_height = max(1, metrics.lineSpacing())
        self._ascent = metrics.ascent()
        self._advance = max(1.0, metrics.horizontalAdvance("M" * 10) / 10.0)
        self._update_scrollbars()

    def visible_rows(self) -> int:
        return max(1, self.viewport().height() // self._line_height)

    def _update_scrollbars(self) -> None:
        rows = self.visible_rows()
        vertical = self.verticalScrollBar()
        vertical.setRange(0, max(0, len(self._texts) - rows))
        vertical.setPageStep(rows)
        vertical.setSingleStep(1)
        width = int(self._max_chars * self._advance) + 2 * MARGIN
        horizontal = self.horizontalScrollBar()
        horizontal.setRange(0, max(0, width - self.viewport().width()))
        horizontal.setPageStep(self.viewport().width())
        horizontal.setSingleStep(int(self._advance * 4))

    def resizeEvent(self, event: QResizeEvent) -> None:  # noqa: N802
        super().resizeEvent(event)
        self._update_scrollbars()

    def changeEvent(self, event: QEvent) -> None:  # noqa: N802
        super().changeEvent(event)
        if event.type() == QEvent.Type.FontChange:
            self._metrics_changed()

    def scroll_to_end(self) -> None:
        bar = self.verticalScrollBar()
        bar.setValue(bar.maximum())

    def at_end(self) -> bool:
        bar = self.verticalScrollBar()
        return bar.value() >= bar.maximum()

    def scrollContentsBy(self, dx: int, dy: int) -> None:  # noqa: N802
        self.viewport().update()

    # ---- painting -----------------------------------------------------------------------------------------------
    def paintEvent(self, event: QPaintEvent) -> None:  # noqa: N802
        painter = QPainter(self.viewport())
        palette = self.palette()
        painter.fillRect(event.rect(), palette.color(QPalette.ColorRole.Base))
        painter.setFont(self.font())
        if not self._texts:
            painter.setPen(palette.color(QPalette.ColorRole.PlaceholderText))
            painter.drawText(QRect(MARGIN, MARGIN, self.viewport().width(), self._line_height * 2),
                             Qt.AlignmentFlag.AlignLeft | Qt.AlignmentFlag.AlignTop, self.placeholder)
            return
        text_colour = palette.color(QPalette.ColorRole.Text)
        dim = palette.color(QPalette.ColorRole.PlaceholderText)
        dark = palette.color(QPalette.ColorRole.Base).lightness() < 128
        error = QColor("#f28b82" if dark else "#c5221f")
        warning = QColor("#fdd663" if dark else "#a56300")
        highlight = palette.color(QPalette.ColorRole.Highlight)
        highlighted_text = palette.color(QPalette.ColorRole.HighlightedText)
        first = self.verticalScrollBar().value()
        x_offset = self.horizontalScrollBar().value()
        advance = self._advance
        first_col = int(x_offset / advance)
        cols = int(self.viewport().width() / advance) + 2
        selection = self._ordered_selection()
        rows = self.visible_rows() + 1
        for row in range(rows):
            index = first + row
            if index >= len(self._texts):
                break
            text = self._texts[index]
            number = self._numbers[index]
            y = row * self._line_height
            if selection is not None:
                self._paint_selection(painter, number, len(text), y, selection, x_offset, highlight)
            if len(text) <= first_col:
                continue
            colour = text_colour
            if _ERROR.search(text):
                colour = error
            elif _WARNING.search(text):
                colour = warning
            start = first_col
            prefix = _RANK_PREFIX.match(text)
            if prefix and start < prefix.end():
                painter.setPen(dim)
                painter.drawText(int(MARGIN + start * advance - x_offset), y + self._ascent,
                                 text[start:prefix.end()])
                start = prefix.end()
            painter.setPen(colour)
            painter.drawText(int(MARGIN + start * advance - x_offset), y + self._ascent,
                             text[start:first_col + cols])
            if selection is not None and selection[0][0] <= number <= selection[1][0]:
                # Selected characters in the highlighted text colour, drawn over the line.
                low = selection[0][1] if number == selection[0][0] else 0
                high = selection[1][1] if number == selection[1][0] else len(text)
                low, high = max(low, first_col), min(high, first_col + cols)
                if high > low:
                    painter.setPen(highlighted_text)
                    painter.drawText(int(MARGIN + low * advance - x_offset), y + self._ascent, text[low:high])

    def _paint_selection(self, painter: QPainter, number: int, length: int, y: int,
                         selection: tuple[Position, Position], x_offset: int, colour: QColor) -> None:
        (first_number, first_col), (last_number, last_col) = selection
        if not first_number <= number <= last_number:
            return
        low = first_col if number == first_number else 0
        high = last_col if number == last_number else length + 1  # a selected line break shows as one cell
        if high <= low:
            return
        left = int(MARGIN + low * self._advance - x_offset)
        painter.fillRect(left, y, int((high - low) * self._advance), self._line_height, colour)

    # ---- positions, selection, copy -----------------------------------------------------------------------------
    def _index_of(self, number: int) -> int | None:
        index = bisect.bisect_left(self._numbers, number)
        return index if index < len(self._numbers) and self._numbers[index] == number else None

    def position_at(self, point: QPoint) -> Position | None:
        if not self._texts:
            return None
        row = max(0, point.y()) // self._line_height
        index = min(len(self._texts) - 1, self.verticalScrollBar().value() + row)
        col = round((point.x() - MARGIN + self.horizontalScrollBar().value()) / self._advance)
        return self._numbers[index], max(0, min(col, len(self._texts[index])))

    def _ordered_selection(self) -> tuple[Position, Position] | None:
        if self._anchor is None or self._cursor is None or self._anchor == self._cursor:
            return None
        return (self._anchor, self._cursor) if self._anchor <= self._cursor else (self._cursor, self._anchor)

    def set_selection(self, start: Position | None, end: Position | None) -> None:
        self._anchor, self._cursor = start, end
        self.viewport().update()
        self.selection_changed.emit()

    def selected_text(self) -> str:
        selection = self._ordered_selection()
        if selection is None:
            return ""
        (first_number, first_col), (last_number, last_col) = selection
        start = bisect.bisect_left(self._numbers, first_number)
        out = []
        for index in range(start, len(self._numbers)):
            number = self._numbers[index]
            if number > last_number:
                break
            text = self._texts[index]
            low = first_col if number == first_number else 0
            high = last_col if number == last_number else len(text)
            out.append(text[low:high])
        return "\n".join(out)

    def selection_start(self) -> Position | None:
        selection = self._ordered_selection()
        return selection[0] if selection else None

    def copy(self) -> None:
        text = self.selected_text()
        if text:
            QGuiApplication.clipboard().setText(text)

    def select_all(self) -> None:
        if self._texts:
            self.set_selection((self._numbers[0], 0), (self._numbers[-1], len(self._texts[-1])))

    def mousePressEvent(self, event: QMouseEvent) -> None:  # noqa: N802
        if event.button() == Qt.MouseButton.LeftButton:
            position = self.position_at(event.position().toPoint())
            if event.modifiers() & Qt.KeyboardModifier.ShiftModifier and self._anchor is not None:
                self.set_selection(self._anchor, position)
            else:
                self.set_selection(position, position)
            self._selecting = True
        super().mousePressEvent(event)

    def mouseMoveEvent(self, event: QMouseEvent) -> None:  # noqa: N802
        if self._selecting:
            self._drag_point = event.position().toPoint()
            self.set_selection(self._anchor, self.position_at(self._drag_point))
            inside = self.viewport().rect().contains(self._drag_point)
            if inside:
                self._scroll_timer.stop()
            elif not self._scroll_timer.isActive():
                self._scroll_timer.start()

    def mouseReleaseEvent(self, event: QMouseEvent) -> None:  # noqa: N802
        self._selecting = False
        self._scroll_timer.stop()
        super().mouseReleaseEvent(event)

    def mouseDoubleClickEvent(self, event: QMouseEvent) -> None:  # noqa: N802
        position = self.position_at(event.position().toPoint())
        index = self._index_of(position[0]) if position else None
        if position is None or index is None:
            return
        text = self._texts[index]
        low = high = position[1]
        while low > 0 and (text[low - 1].isalnum() or text[low - 1] in "_."):
            low -= 1
        while high < len(text) and (text[high].isalnum() or text[high] in "_."):
            high += 1
        self.set_selection((position[0], low), (position[0], high))

    def _drag_scroll(self) -> None:
        bar = self.verticalScrollBar()
        if self._drag_point.y() < 0:
            bar.setValue(bar.value() - 3)
        elif self._drag_point.y() > self.viewport().height():
            bar.setValue(bar.value() + 3)
        self.set_selection(self._anchor, self.position_at(self._drag_point))

    def keyPressEvent(self, event: QKeyEvent) -> None:  # noqa: N802
        if event.matches(QKeySequence.StandardKey.Copy):
            self.copy()
        elif event.matches(QKeySequence.StandardKey.SelectAll):
            self.select_all()
        elif event.key() == Qt.Key.Key_Home and event.modifiers() & Qt.KeyboardModifier.ControlModifier:
            self.verticalScrollBar().setValue(0)
        elif event.key() == Qt.Key.Key_End and event.modifiers() & Qt.KeyboardModifier.ControlModifier:
            self.scroll_to_end()
        else:
            super().keyPressEvent(event)  # arrows and page keys scroll

    def contextMenuEvent(self, event: QContextMenuEvent) -> None:  # noqa: N802
        menu = QMenu(self)
        copy = menu.addAction("Copy", self.copy)
        copy.setShortcut(QKeySequence.StandardKey.Copy)
        copy.setEnabled(self._ordered_selection() is not None)
        select = menu.addAction("Select all", self.select_all)
        select.setShortcut(QKeySequence.StandardKey.SelectAll)
        menu.exec(event.globalPos())

    # ---- search -------------------------------------------------------------------------------------------------
    def find_text(self, needle: str, backward: bool = False) -> bool:
        """Select the next match of `needle` (case-insensitive) after the selection (before it with backward),
        wrapping around; scrolls it into view."""
        if not needle or not self._texts:
            return False
        needle = needle.lower()
        n = len(self._texts)
        selection = self._ordered_selection()
        if selection is None:
            start_index, start_col = (n - 1, None) if backward else (0, 0)
        else:
            (number, col) = selection[0] if backward else selection[1]
            index = bisect.bisect_left(self._numbers, number)
            if index >= n or self._numbers[index] != number:  # the selected line fell out: start over
                start_index, start_col = (n - 1, None) if backward else (0, 0)
            else:
                start_index, start_col = index, col
        texts = self._texts
        for step in range(n + 1):
            if backward:
                index = (start_index - step) % n
                haystack = texts[index].lower()
                end = start_col if step == 0 and start_col is not None else len(haystack)
                found = haystack.rfind(needle, 0, end) if end >= len(needle) else -1
            else:
                index = (start_index + step) % n
                haystack = texts[index].lower()
                found = haystack.find(needle, start_col if step == 0 else 0)
            if found >= 0:
                number = self._numbers[index]
                self.set_selection((number, found), (number, found + len(needle)))
                self._reveal(index, found, found + len(needle))
                return True
        return False

    def _reveal(self, index: int, low: int, high: int) -> None:
        vertical = self.verticalScrollBar()
        rows = self.visible_rows()
        if not vertical.value() <= index < vertical.value() + rows:
            vertical.setValue(index - rows // 2)
        horizontal = self.horizontalScrollBar()
        left, right = int(low * self._advance), int(high * self._advance) + 2 * MARGIN
        if left < horizontal.value() or right > horizontal.value() + self.viewport().width():
            horizontal.setValue(max(0, left - self.viewport().width() // 3))

    def selection_row(self) -> int | None:
        """Index (0 = oldest line shown) of the line where the selection starts, for tests."""
        start = self.selection_start()
        return None if start is None else self._index_of(start[0])
