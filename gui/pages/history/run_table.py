"""History's table of runs: the model behind it (cells formatted once per refresh, only changed rows reported)
and its columns. Part of HistoryPage (gui/pages/history/__init__.py), split off along its seams."""

from __future__ import annotations

import functools
import time
from typing import Any

from PySide6.QtCore import QAbstractTableModel, QModelIndex, QPersistentModelIndex, Qt
from PySide6.QtGui import QBrush, QColor, QIcon
from PySide6.QtWidgets import QWidget

from traindeck.backend.runs import (
    RunFigures,
    format_bytes,
    format_duration,
    format_rate,
    format_seconds_per_step,
)
from traindeck.gui.widgets.message_list import tone
from traindeck.gui.widgets.run_state import state_icon

COLUMNS = ("Name", "State", "Started", "Duration", "Preset", "Peak GPU mem", "Peak host RAM", "s/step", "Throughput")
COLUMN_TIPS = (
    "The run's name (the script's, unless given)",
    "running, succeeded, failed, stopped, or lost (its supervisor disappeared)",
    "When the run was started",
    "From start to end (to now while running)",
    "The preset it was launched with",
    "The fullest GPU's memory at its peak, as NVML reports it (CUDA context and other processes included)",
    "The run's processes' resident memory at its peak (ranks and launcher together)",
    "Seconds per optimizer step (hover a cell to see how it was measured)",
    "Samples or tokens per second the run reported, else its progress rate",
)
STATE_SEVERITY = {"succeeded": "ok", "failed": "error", "lost": "error", "stopped": "warning", "running": "note"}
SORT_ROLE = Qt.ItemDataRole.UserRole + 1
ID_ROLE = Qt.ItemDataRole.UserRole + 2


def _started(t: float | None) -> str:
    return time.strftime("%Y-%m-%d %H:%M", time.localtime(t)) if t else "-"


class RunsModel(QAbstractTableModel):
    """The runs as the table shows them. Cells are formatted once per refresh (views ask for data thousands of
    times); `set_rows` reports only the rows that changed, so the view keeps its selection and scroll position."""

    def __init__(self, parent: QWidget):
        super().__init__(parent)
        self.rows: list[RunFigures] = []
        self._text: list[tuple[str, ...]] = []
        self._sort: list[tuple[Any, ...]] = []
        self._view = parent
        self._brushes: dict[str, QBrush | None] = {}

    def rowCount(self, parent: QModelIndex | QPersistentModelIndex = QModelIndex()) -> int:  # noqa: B008
        return 0 if parent.isValid() else len(self.rows)

    def columnCount(self, parent: QModelIndex | QPersistentModelIndex = QModelIndex()) -> int:  # noqa: B008
        return 0 if parent.isValid() else len(COLUMNS)

    def headerData(self, section: int, orientation: Qt.Orientation, role: int = Qt.ItemDataRole.DisplayRole) -> Any:
        if orientation == Qt.Orientation.Horizontal:
            if role == Qt.ItemDataRole.DisplayRole:
                return COLUMNS[section]
            if role == Qt.ItemDataRole.ToolTipRole:
                return COLUMN_TIPS[section]
        return None

    def set_rows(self, rows: list[RunFigures]) -> bool:
        """Take a new list; True when the set or order of runs changed (the view was reset)."""
        texts = [_cells(r) for r in rows]
        sorts = [_sort_keys(r) for r in rows]
        if [r.run_id for r in rows] == [r.run_id for r in self.rows]:
            changed = [i for i, (old, new) in enumerate(zip(self.rows, rows, strict=True)) if old != new]
            self.rows, self._text, self._sort = rows, texts, sorts
            for i in changed:
                self.dataChanged.emit(self.index(i, 0), self.index(i, len(COLUMNS) - 1))
            return False
        self.beginResetModel()
        self.rows, self._text, self._sort = rows, texts, sorts
        self.endResetModel()
        return True

    def texts(self) -> list[tuple[str, ...]]:
        return self._text

    def restyle(self) -> None:
        """The theme changed: state colours are looked up again."""
        self._brushes.clear()
        if self.rows:
            self.dataChanged.emit(self.index(0, 1), self.index(len(self.rows) - 1, 1))

    def _state_brush(self, state: str) -> QBrush | None:
        if state not in self._brushes:
            colour = tone(STATE_SEVERITY.get(state, "note"), self._view)
            self._brushes[state] = QBrush(QColor(colour)) if colour else None
        return self._brushes[state]

    def data(self, index: QModelIndex | QPersistentModelIndex, role: int = Qt.ItemDataRole.DisplayRole) -> Any:
        if not index.isValid():
            return None
        row, column = index.row(), index.column()
        if role == Qt.ItemDataRole.DisplayRole:
            return self._text[row][column]
        if role == SORT_ROLE:
            return self._sort[row][column]
        if role == Qt.ItemDataRole.TextAlignmentRole:
            return _RIGHT if column in _NUMERIC else None
        if role == Qt.ItemDataRole.ForegroundRole:
            return self._state_brush(self.rows[row].state) if column == 1 else None
        if role == Qt.ItemDataRole.DecorationRole and column == 1:
            return _state_icon(self.rows[row].state)  # the state at a glance: the Runs list's icon and colour
        if role == ID_ROLE:
            return self.rows[row].run_id
        if role == Qt.ItemDataRole.ToolTipRole:
            run = self.rows[row]
            if column == 7 and run.seconds_per_step_source:
                return f"From {run.seconds_per_step_source}"
            lines = [f"Run {run.run_id}"] + ([run.summary] if run.summary else []) + [f"Folder: {run.run_dir}"]
            return "\n".join(lines)
        return None


@functools.lru_cache(maxsize=16)
def _state_icon(state: str) -> QIcon:
    return state_icon(state)  # painted once per state, not on every repaint of the table


_NUMERIC = frozenset({3, 5, 6, 7, 8})
_RIGHT = int(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)


def _cells(run: RunFigures) -> tuple[str, ...]:
    return (
        run.name or run.run_id,
        run.state + (f" ({run.exit_code})" if run.state == "failed" and run.exit_code else ""),
        _started(run.started_at or run.created_at),
        format_duration(run.duration_s),
        run.preset or "-",
        format_bytes(run.peak_gpu_mem_bytes),
        format_bytes(run.peak_host_ram_bytes),
        format_seconds_per_step(run.seconds_per_step),
        format_rate(run.throughput, run.throughput_unit),
    )


def _sort_keys(run: RunFigures) -> tuple[Any, ...]:
    values = (run.name.lower(), run.state, run.started_at or run.created_at, run.duration_s, run.preset or "",
              run.peak_gpu_mem_bytes, run.peak_host_ram_bytes, run.seconds_per_step, run.throughput)
    return tuple(-1.0 if v is None else v for v in values)
