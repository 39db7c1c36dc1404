"""The presets to choose from: the built-in ones (read-only, marked) and the user's own, under two headings."""

from __future__ import annotations

from collections.abc import Iterable

from PySide6.QtCore import QModelIndex, Qt, Signal
from PySide6.QtGui import QFocusEvent, QFont
from PySide6.QtWidgets import QAbstractItemView, QListWidget, QListWidgetItem, QWidget

from traindeck.backend.presets import Preset

_NAME_ROLE = Qt.ItemDataRole.UserRole
_BUILTIN_ROLE = Qt.ItemDataRole.UserRole + 1


class PresetList(QListWidget):
    """`chosen(name)` when the user picks another preset; `select(name)` shows the current one without emitting."""

    chosen = Signal(str)

    def __init__(self, parent: QWidget | None = None):
        super().__init__(parent)
        self.setObjectName("presetList")
        self.setMinimumWidth(170)
        self._quiet = False
        self._current: str | None = None
        self.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self.setTextElideMode(Qt.TextElideMode.ElideRight)
        self.currentItemChanged.connect(self._changed)

    def set_presets(self, presets: Iterable[Preset], problems: Iterable[str] = ()) -> None:
        self._quiet = True
        try:
            self.clear()
            presets = list(presets)
            builtin = [p for p in presets if p.builtin]
            own = [p for p in presets if not p.builtin]
            self._heading("Built-in (read-only)")
            for preset in builtin:
                self._add(preset, builtin=True)
            self._heading("Your presets")
            for preset in own:
                self._add(preset, builtin=False)
            if not own:
                hint = QListWidgetItem("(none yet)")
                hint.setFlags(Qt.ItemFlag.NoItemFlags)
                self.addItem(hint)
            for problem in problems:  # an unreadable preset file: said, not hidden
                item = QListWidgetItem(f"⚠ {problem.splitlines()[0][:80]}")
                item.setToolTip(problem)
                item.setFlags(Qt.ItemFlag.NoItemFlags)
                self.addItem(item)
        finally:
            self._quiet = False
        self.select(self._current)

    def _heading(self, text: str) -> None:
        item = QListWidgetItem(text)
        font = QFont(self.font())
        font.setBold(True)
        item.setFont(font)
        item.setFlags(Qt.ItemFlag.NoItemFlags)
        self.addItem(item)

    def _add(self, preset: Preset, builtin: bool) -> None:
        item = QListWidgetItem(preset.name)
        if builtin:  # read-only: shown in italics under the "Built-in" heading
            font = QFont(self.font())
            font.setItalic(True)
            item.setFont(font)
        item.setData(_NAME_ROLE, preset.name)
        item.setData(_BUILTIN_ROLE, builtin)
        tip = preset.description or preset.name
        item.setToolTip(f"{tip}\n\nlauncher: {preset.launcher}" + ("\nbuilt-in: editing it saves a copy" if builtin
                                                                     else ""))
        self.addItem(item)

    def names(self) -> list[str]:
        return [str(self.item(i).data(_NAME_ROLE)) for i in range(self.count()) if self.item(i).data(_NAME_ROLE)]

    def is_builtin(self, name: str) -> bool:
        item = self._item(name)
        return bool(item.data(_BUILTIN_ROLE)) if item is not None else False

    def select(self, name: str | None) -> None:
        """Mark `name` as the current preset (None: none, e.g. an unsaved new one) without emitting `chosen`."""
        self._current = name
        self._quiet = True
        try:
            item = self._item(name) if name else None
            if item is None:
                self.setCurrentRow(-1)
                self.clearSelection()
            else:
                self.setCurrentItem(item)
                self.scrollToItem(item)
        finally:
            self._quiet = False

    def current_name(self) -> str | None:
        return self._current

    def _item(self, name: str | None) -> QListWidgetItem | None:
        for i in range(self.count()):
            item = self.item(i)
            if item.data(_NAME_ROLE) == name:
                return item
        return None

    def focusInEvent(self, event: QFocusEvent) -> None:  # noqa: N802
        # A list with no current item makes its first item current when it gets the focus (a page switch, Tab):
        # that is no choice of the user's, so no preset is loaded and no unsaved-changes question asked for it.
        self._quiet = True
        try:
            super().focusInEvent(event)
        finally:
            self._quiet = False
        if self._current is None and self.currentRow() >= 0:
            self.select(None)

    def moveCursor(self, action: QAbstractItemView.CursorAction,  # noqa: N802
                   modifiers: Qt.KeyboardModifier) -> QModelIndex:
        """Home and End go to the first and last preset: the headings and notes at either end cannot be current,
        and Qt's own Home stops at the first row, a heading, so the key did nothing."""
        Move = QAbstractItemView.CursorAction
        if action in (Move.MoveHome, Move.MoveEnd):
            rows = [row for row in range(self.count()) if self.item(row).flags() & Qt.ItemFlag.ItemIsEnabled]
            if rows:
                return self.indexFromItem(self.item(rows[0] if action == Move.MoveHome else rows[-1]))
        return super().moveCursor(action, modifiers)

    def _changed(self, item: QListWidgetItem | None, _previous: QListWidgetItem | None) -> None:
        if self._quiet or item is None:
            return
        name = item.data(_NAME_ROLE)
        if name and name != self._current:
            self.chosen.emit(str(name))
