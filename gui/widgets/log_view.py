"""`LogView`: a read-only monospace text view that draws only the lines on screen.

Why not QPlainTextEdit: it lays out every inserted line (to size its scroll bars), so 8,000 new lines cost it
30-200 ms per insert on this machine, and trimming old lines costs as much again; a console fed 100k lines/s stalls.
Here lines are plain strings in a bounded deque: appending is a deque extend, trimming is free (maxlen), and a
repaint draws the ~50 visible rows, clipped to the visible columns. The font is monospace, so positions are
arithmetic (column = x / advance): selection, copy, search and horizontal scrolling need no text layout.

Lines carry an increasing number (the console's absolute line number) so a line can be replaced in place (a
progress bar redrawn) after others were appended, and a selection stays on its text while old lines fall out.

Long lines either scroll sideways or wrap (`set_wrap`): wrapped, a line takes as many screen rows as its length
needs, the vertical scroll bar counts lines (its top is the first line shown) and there is no sideways scrolling.
Scrolled sideways, a line's rank tag ("[3] ") stays in a fixed gutter at the left edge, so a match far right still
shows which rank printed it.
"""

from __future__ import annotations

import bisect
import math
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
        self._wrap = False
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

    def replace(self, number: int, text: str) -> bool:
        """Replace the text of line `number` (a bar redrawn where it was first drawn); False when it is not shown."""
        index = self._index_of(number)
        if index is None:
            return False
        self._texts[index] = text
        if len(text) > self._max_chars:
            self._max_chars = len(text)
            self._update_scrollbars()
        self.viewport().update()
        return True

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

    @property
    def wrap(self) -> bool:
        return self._wrap

    def set_wrap(self, wrap: bool) -> None:
        """Wrap long lines (True) or scroll them sideways; the first line shown stays the first."""
        if wrap == self._wrap:
            return
        first = self.verticalScrollBar().value()
        self._wrap = wrap
        self.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff if wrap
                                          else Qt.ScrollBarPolicy.ScrollBarAsNeeded)
        self.horizontalScrollBar().setValue(0)
        self._update_scrollbars()
        self.verticalScrollBar().setValue(first)
        self.viewport().update()

    def columns(self) -> int:
        """Characters a screen row holds (where a wrapped line breaks)."""
        return max(1, int((self.viewport().width() - 2 * MARGIN) / self._advance))

    def _rows_of(self, text: str, columns: int) -> int:
        return max(1, math.ceil(len(text) / columns)) if self._wrap else 1

    def _last_first(self) -> int:
        """The greatest first line: the one that shows the last line at the bottom (wrapped lines take more rows)."""
        n = len(self._texts)
        if not self._wrap:
            return max(0, n - self.visible_rows())
        rows, columns, texts = self.visible_rows(), self.columns(), self._texts
        index = n
        while index > 0:
            rows -= self._rows_of(texts[index - 1], columns)
            if rows < 0:
                break
            index -= 1
        return min(index, max(0, n - 1))

    def _update_scrollbars(self) -> None:
        rows = self.visible_rows()
        vertical = self.verticalScrollBar()
        vertical.setRange(0, self._last_first())
        vertical.setPageStep(rows)
        vertical.setSingleStep(1)
        width = 0 if self._wrap else int(self._max_chars * self._advance) + 2 * MARGIN
        horizontal = self.horizontalScrollBar()
        horizontal.setRange(0, max(0, width - self.viewport().width()))
        horizontal.setPageStep(self.viewport().width())
        horizontal.setSingleStep(int(self._advance * 4))

    def _screen_rows(self) -> list[tuple[int, int, int]]:
        """(line index, first column, last column) of each screen row from the top, one more than fits."""
        first, n = self.verticalScrollBar().value(), len(self._texts)
        rows = self.visible_rows() + 1
        if not self._wrap:
            first_col = int(self.horizontalScrollBar().value() / self._advance)
            last_col = first_col + int(self.viewport().width() / self._advance) + 2
            return [(index, first_col, last_col) for index in range(first, min(n, first + rows))]
        columns, out = self.columns(), []
        for index in range(first, n):
            length = len(self._texts[index])
            for start in range(0, max(1, length), columns):
                out.append((index, start, start + columns))
                if len(out) >= rows:
                    return out
        return out

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
        base = palette.color(QPalette.ColorRole.Base)
        x_offset = 0 if self._wrap else self.horizontalScrollBar().value()
        advance = self._advance
        selection = self._ordered_selection()
        colours: dict[int, QColor] = {}
        for row, (index, first_col, last_col) in enumerate(self._screen_rows()):
            text = self._texts[index]
            number = self._numbers[index]
            y = row * self._line_height
            # Where column 0 of this row is: scrolled sideways, or the row's first column at the left margin.
            left = MARGIN - (first_col * advance if self._wrap else x_offset)
            if selection is not None:
                self._paint_selection(painter, number, len(text), y, selection, left, first_col, last_col, highlight)
            colour = colours.get(index)
            if colour is None:
                colour = colours[index] = (error if _ERROR.search(text) else warning if _WARNING.search(text)
                                           else text_colour)
            start = first_col
            prefix = _RANK_PREFIX.match(text) if text[:1] == "[" else None
            if prefix and start < prefix.end():
                painter.setPen(dim)
                painter.drawText(int(left + start * advance), y + self._ascent, text[start:prefix.end()])
                start = prefix.end()
            if start < len(text):
                painter.setPen(colour)
                painter.drawText(int(left + start * advance), y + self._ascent, text[start:last_col])
            if selection is not None and selection[0][0] <= number <= selection[1][0]:
                # Selected characters in the highlighted text colour, drawn over the line.
                low = selection[0][1] if number == selection[0][0] else 0
                high = selection[1][1] if number == selection[1][0] else len(text)
                low, high = max(low, first_col), min(high, last_col)
                if high > low:
                    painter.setPen(highlighted_text)
                    painter.drawText(int(left + low * advance), y + self._ascent, text[low:high])
            if prefix and first_col >= prefix.end() and not self._wrap:
                # Scrolled sideways past the rank tag: it stays in a gutter at the left edge.
                painter.fillRect(0, y, int(MARGIN + prefix.end() * advance), self._line_height, base)
                painter.setPen(dim)
                painter.drawText(MARGIN, y + self._ascent, prefix.group())

    def _paint_selection(self, painter: QPainter, number: int, length: int, y: int,
                         selection: tuple[Position, Position], left: float, first_col: int, last_col: int,
                         colour: QColor) -> None:
        (first_number, low_col), (last_number, high_col) = selection
        if not first_number <= number <= last_number:
            return
        low = low_col if number == first_number else 0
        high = high_col if number == last_number else length + 1  # a selected line break shows as one cell
        low, high = max(low, first_col), min(high, last_col)
        if high <= low:
            return
        painter.fillRect(int(left + low * self._advance), y, int((high - low) * self._advance), self._line_height,
                         colour)

    # ---- positions, selection, copy -----------------------------------------------------------------------------
    def _index_of(self, number: int) -> int | None:
        index = bisect.bisect_left(self._numbers, number)
        return index if index < len(self._numbers) and self._numbers[index] == number else None

    def position_at(self, point: QPoint) -> Position | None:
        if not self._texts:
            return None
        row = max(0, point.y()) // self._line_height
        if not self._wrap:
            index = min(len(self._texts) - 1, self.verticalScrollBar().value() + row)
            col = round((point.x() - MARGIN + self.horizontalScrollBar().value()) / self._advance)
            return self._numbers[index], max(0, min(col, len(self._texts[index])))
        rows = self._screen_rows()  # wrapped: find the line and the part of it on that screen row
        if not rows:
            return None
        index, first_col, last_col = rows[min(row, len(rows) - 1)]
        col = max(first_col, min(first_col + round((point.x() - MARGIN) / self._advance), last_col))
        return self._numbers[index], min(col, len(self._texts[index]))

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
    def find_text(self, needle: str, backward: bool = False, again: bool = False) -> bool:
        """Select the next match of `needle` (case-insensitive) after the selection (before it with backward; from
        where it starts with `again`: the match typed so far, if it still matches), wrapping around; scrolls it
        into view."""
        if not needle or not self._texts:
            return False
        needle = needle.lower()
        n = len(self._texts)
        selection = self._ordered_selection()
        if selection is None:
            start_index, start_col = (n - 1, None) if backward else (0, 0)
        else:
            (number, col) = selection[0] if backward or again else selection[1]
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

    def match_count(self, needle: str) -> tuple[int | None, int]:
        """(which match the selection is, counting from 1, or None when it is none; how many there are): the
        matches find_text steps through, case-insensitive, not overlapping."""
        if not needle:
            return None, 0
        needle = needle.lower()
        total, current = 0, None
        selection = self._ordered_selection()
        at = self._index_of(selection[0][0]) if selection is not None else None
        for index, text in enumerate(self._texts):
            haystack = text.lower()
            if index == at and selection is not None:
                col = selection[0][1]
                if haystack[col:selection[1][1]] == needle:  # the selection is a match: the how-manieth?
                    current = total + haystack.count(needle, 0, col) + 1
            total += haystack.count(needle)
        return current, total

    def _reveal(self, index: int, low: int, high: int) -> None:
        vertical = self.verticalScrollBar()
        shown = [row[0] for row in self._screen_rows()[:self.visible_rows()]]
        if not shown or not shown[0] <= index <= shown[-1] or (self._wrap and index == shown[-1] and
                                                             len(shown) >= self.visible_rows()):
            vertical.setValue(self._first_to_centre(index))
        if self._wrap:
            return  # nothing scrolls sideways: the line's rank tag is in view with it
        horizontal = self.horizontalScrollBar()
        prefix = _RANK_PREFIX.match(self._texts[index])
        gutter = int(prefix.end() * self._advance) if prefix and horizontal.value() else 0
        left, right = int(low * self._advance), int(high * self._advance) + 2 * MARGIN
        if left < horizontal.value() + gutter or right > horizontal.value() + self.viewport().width():
            # A third of the way in: the rank tag's gutter (when scrolled) never covers it.
            horizontal.setValue(max(0, left - self.viewport().width() // 3))

    def _first_to_centre(self, index: int) -> int:
        """The first line to show for line `index` to be about halfway down."""
        half = self.visible_rows() // 2
        if not self._wrap:
            return max(0, index - half)
        columns = self.columns()
        first = index
        while first > 0:
            half -= self._rows_of(self._texts[first - 1], columns)
            if half < 0:
                break
            first -= 1
        return first

    def selection_row(self) -> int | None:
        """Index (0 = oldest line shown) of the line where the selection starts, for tests."""
        start = self.selection_start()
        return None if start is None else self._index_of(start[0])
