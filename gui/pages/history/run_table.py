"""History's table of runs: a panel (RunTable) that shows the runs and keeps their selection, and the model behind it
(cells formatted once per refresh, only changed rows reported). The page gives it each new list and listens to its
signals: the selection changed, a run is to be opened.

Beside each run's figures the table answers "which was best": the swept values as columns, the final and best
value of a metric the panel lets the user choose (loss unless chosen), a sweep's runs together under the sweep's
name and its best run marked. A trial's runs stand under one parent row (the trial, its size and winner), each
named by its candidate's set-up; selecting that row selects its measured candidates, to be compared side by side.
A sweep of two or more runs stands under its row the same way: selecting it selects its runs (the best first, at
most MAX_COMPARED) to be compared and overlaid.
That table is `backend.runs.history_table` (Qt-free, groups included); this module presents it."""

from __future__ import annotations

import functools
import math
import time
from typing import Any

from PySide6.QtCore import (
    QAbstractItemModel,
    QEvent,
    QItemSelection,
    QItemSelectionModel,
    QModelIndex,
    QObject,
    QPersistentModelIndex,
    QSettings,
    QSize,
    QSortFilterProxyModel,
    Qt,
    Signal,
)
from PySide6.QtGui import QBrush, QColor, QFont, QFontMetrics, QIcon, QKeySequence, QPalette, QShortcut
from PySide6.QtWidgets import (
    QAbstractItemView,
    QComboBox,
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QStyle,
    QTreeView,
    QVBoxLayout,
    QWidget,
)

from traindeck.backend.core import format_bytes
from traindeck.backend.runs import (
    HistoryRow,
    HistoryTable,
    RunFigures,
    RunFilter,
    SweepGroup,
    TrialGroup,
    TrialSummary,
    figures_words,
    format_duration,
    format_metric,
    format_rate,
    format_seconds_per_step,
    history_table,
    parse_filter,
)
from traindeck.gui.widgets.message_list import tone
from traindeck.gui.widgets.run_filter import RunFilterBox
from traindeck.gui.widgets.run_state import state_icon

COLUMNS = ("Name", "State", "Started", "Duration", "Preset", "Peak GPU mem", "Peak host RAM", "s/step", "Throughput")
COLUMN_TIPS = (
    "The run's name (the script's, then the preset's, unless given); a trial's candidates are named by their set-up "
    "under the trial's row, a sweep's runs stand under the sweep's row (select such a row to compare its runs)",
    "running, succeeded, failed, stopped, or lost (its supervisor disappeared)",
    "When the run was started",
    "From start to end (to now while running)",
    "The preset it was launched with",
    "The fullest GPU's memory at its peak, as NVML reports it (CUDA context and other processes included)",
    "The run's processes' resident memory at its peak (ranks and launcher together)",
    "Seconds per optimizer step (hover a cell to see how it was measured)",
    "Samples per second over the wall clock: the measured step rate x the global batch (hover a cell for its "
    "source and DeepSpeed's engine-only figure). A run whose batch is unknown shows its rate in another unit "
    "(steps/s, tokens/s) in brackets and grey, and sorts apart from the samples/s figures: compare s/step instead",
)
SWEEP_TIP = ("The sweep the run was queued by (its runs together when sorted by Started); ★ marks the sweep's best "
             "run by the chosen metric's best value")
BEST_MARK = "★ "
STATE_SEVERITY = {"succeeded": "ok", "failed": "error", "lost": "error", "stopped": "warning", "running": "note"}
SORT_ROLE = Qt.ItemDataRole.UserRole + 1
# A missing figure's sort key: below every number, so runs without one stay together at an end (first ascending,
# last descending) instead of among the values (a final reward of -3 and -0.5 around a run that logged none).
NO_FIGURE = -math.inf
ID_ROLE = Qt.ItemDataRole.UserRole + 2  # a run's id (None on a trial's row)
GROUP_ROLE = Qt.ItemDataRole.UserRole + 3  # a trial's or sweep's row: its key, "trial:ID" or "sweep:ID" (None on a run)
COMPARE_ROLE = Qt.ItemDataRole.UserRole + 4  # a group's row: the runs selecting it selects
LEFT_OUT_ROLE = Qt.ItemDataRole.UserRole + 5  # a sweep's row: how many of its runs selecting it leaves out
WORDS_ROLE = Qt.ItemDataRole.UserRole + 6  # what the filter searches in a row (backend.runs.figures_words)
# The one unit the Throughput column sorts by: a rate in another (a progress bar's steps/s, a reported tokens/s)
# is shown, in brackets, but sorts with the runs without a figure, never among samples/s as if comparable.
COMMON_UNIT = "samples/s"
FILTER_KEY = "history/filter"


def _started(t: float | None) -> str:
    return time.strftime("%Y-%m-%d %H:%M", time.localtime(t)) if t else "-"


class RunsModel(QAbstractItemModel):
    """The runs as the table shows them: the fixed figure columns, then the sweep, the swept values and the chosen
    metric's final and best values (history_table). A trial's runs are the children of its row, a sweep's (of two
    or more runs) of its row; every other run is a top-level row. Cells are formatted once per refresh (views ask for data thousands of times); `set_table`
    reports only the rows that changed, so the view keeps its selection, scroll position and open groups.

    An index's internal id tells its level: 0 for a top-level row, else one more than its parent's row."""

    def __init__(self, parent: QWidget):
        super().__init__(parent)
        self.rows: list[RunFigures] = []  # every run, in the table's order (a trial's candidates included)
        self.table = history_table([])
        self.headers: tuple[str, ...] = COLUMNS
        self.tips: tuple[str, ...] = COLUMN_TIPS
        self._text: list[tuple[str, ...]] = []
        self._sort: list[tuple[Any, ...]] = []
        self._best: list[bool] = []
        self._winner: list[bool] = []
        self._words: list[tuple[str, ...]] = []  # per run: what the filter searches
        self._shape: list[tuple[str, str]] = []  # (run id, group key) per run: what decides the rows' places
        self._top: list[tuple[bool, int]] = []  # per top-level row: (is a group, run or group number)
        self._groups: list[TrialGroup | SweepGroup] = []
        self._children: list[list[int]] = []  # per group, its runs' numbers
        self._gtext: list[tuple[str, ...]] = []
        self._gsort: list[tuple[Any, ...]] = []
        self._where: list[tuple[int, int]] = []  # per run: (internal id, row)
        self._view = parent
        self._brushes: dict[str, QBrush | None] = {}
        self._bold = QFont(parent.font())
        self._bold.setBold(True)
        self._italic = QFont(parent.font())
        self._italic.setItalic(True)
        self._row_size = QSize(1, parent.fontMetrics().height() + 8)  # the height of a row (views ask the first)

    # ---- the tree -------------------------------------------------------------------------------------------
    def index(self, row: int, column: int,
              parent: QModelIndex | QPersistentModelIndex = QModelIndex()) -> QModelIndex:  # noqa: B008
        if not 0 <= column < len(self.headers) or row < 0:
            return QModelIndex()
        if not parent.isValid():
            return self.createIndex(row, column, 0) if row < len(self._top) else QModelIndex()
        group = self._group_at(parent)
        if group is None or row >= len(self._children[group]):
            return QModelIndex()
        return self.createIndex(row, column, parent.row() + 1)

    def parent(self, index: QModelIndex | QPersistentModelIndex = QModelIndex()) -> QModelIndex:  # type: ignore[override]  # noqa: B008
        if not index.isValid() or index.internalId() == 0:
            return QModelIndex()
        return self.createIndex(int(index.internalId()) - 1, 0, 0)

    def rowCount(self, parent: QModelIndex | QPersistentModelIndex = QModelIndex()) -> int:  # noqa: B008
        if not parent.isValid():
            return len(self._top)
        group = self._group_at(parent) if parent.column() == 0 else None
        return 0 if group is None else len(self._children[group])

    def columnCount(self, parent: QModelIndex | QPersistentModelIndex = QModelIndex()) -> int:  # noqa: B008
        return len(self.headers)

    def _group_at(self, index: QModelIndex | QPersistentModelIndex) -> int | None:
        """The group number of a top-level group's row (a trial, a sweep), else None."""
        if not index.isValid() or index.internalId() != 0 or not 0 <= index.row() < len(self._top):
            return None
        is_group, number = self._top[index.row()]
        return number if is_group else None

    def _run_at(self, index: QModelIndex | QPersistentModelIndex) -> int | None:
        """The run number of a run's row (top-level or a group's child), else None."""
        if not index.isValid():
            return None
        parent = int(index.internalId())
        if parent == 0:
            if not 0 <= index.row() < len(self._top):
                return None
            is_group, number = self._top[index.row()]
            return None if is_group else number
        group = self._top[parent - 1][1]
        children = self._children[group]
        return children[index.row()] if 0 <= index.row() < len(children) else None

    def _run_index(self, run: int, column: int) -> QModelIndex:
        parent, row = self._where[run]
        return self.createIndex(row, column, parent)

    def headerData(self, section: int, orientation: Qt.Orientation, role: int = Qt.ItemDataRole.DisplayRole) -> Any:
        if orientation == Qt.Orientation.Horizontal and 0 <= section < len(self.headers):
            if role == Qt.ItemDataRole.DisplayRole:
                return self.headers[section]
            if role == Qt.ItemDataRole.ToolTipRole:
                return self.tips[section]
        return None

    def set_table(self, table: HistoryTable) -> bool:
        """Take a new table; True when the set or order of runs, their groups, or the columns, changed (the view was
        reset)."""
        headers, tips = _headers(table)
        rows = [r.run for r in table.rows]
        params = table.param_sort_keys()
        say_step = table.final_steps_differ
        texts = [_cells(r, say_step) for r in table.rows]
        sorts = [_sort_keys(r, keys) for r, keys in zip(table.rows, params, strict=True)]
        best = [r.is_best for r in table.rows]
        winner = [r.is_winner for r in table.rows]
        self._words = [figures_words(r.run, (r.group_label,)) for r in table.rows]
        owners: list[TrialGroup | SweepGroup | None] = [
            table.groups[r.trial] if r.trial else table.sweeps.get(r.group) if r.group else None for r in table.rows]
        shape = [(r.run.run_id, owner.key if owner else "") for r, owner in zip(table.rows, owners, strict=True)]
        top: list[tuple[bool, int]] = []
        groups: list[TrialGroup | SweepGroup] = []
        children: list[list[int]] = []
        numbers: dict[str, int] = {}
        for i, owner in enumerate(owners):
            if owner is None:
                top.append((False, i))
                continue
            if owner.key not in numbers:
                numbers[owner.key] = len(groups)
                top.append((True, len(groups)))
                groups.append(owner)
                children.append([])
            children[numbers[owner.key]].append(i)
        gtexts = [_group_cells(g, len(headers)) for g in groups]
        gsorts = [_group_sort_keys(g, sorts[kids[0]]) for g, kids in zip(groups, children, strict=True)]
        if shape == self._shape and headers == self.headers:
            changed = [i for i in range(len(rows)) if texts[i] != self._text[i] or rows[i] != self.rows[i]
                       or best[i] != self._best[i] or winner[i] != self._winner[i]]
            changed_groups = [g for g in range(len(groups)) if gtexts[g] != self._gtext[g] or groups[g] != self._groups[g]]
            self.rows, self.table, self._text, self._sort, self._best, self._winner = rows, table, texts, sorts, best, winner
            self._groups, self._gtext, self._gsort = groups, gtexts, gsorts
            for i in changed:
                self.dataChanged.emit(self._run_index(i, 0), self._run_index(i, len(headers) - 1))
            for g in changed_groups:
                position = top.index((True, g))
                self.dataChanged.emit(self.index(position, 0), self.index(position, len(headers) - 1))
            return False
        self.beginResetModel()
        self.rows, self.table, self._text, self._sort, self._best, self._winner = rows, table, texts, sorts, best, winner
        self.headers, self.tips, self._shape = headers, tips, shape
        self._top, self._groups, self._children, self._gtext, self._gsort = top, groups, children, gtexts, gsorts
        self._where = [(0, 0)] * len(rows)
        for position, (is_group, number) in enumerate(top):
            if is_group:
                for k, run in enumerate(children[number]):
                    self._where[run] = (position + 1, k)
            else:
                self._where[number] = (0, position)
        self.endResetModel()
        return True

    def is_bold_name(self, run: int) -> bool:
        """The run's name is drawn bold (its trial's winner, its sweep's best)."""
        return bool(self._winner[run] or self._best[run])

    def texts(self) -> list[tuple[str, ...]]:
        """Every row's cells, runs then trials' rows (for the columns' widths)."""
        return self._text + self._gtext

    def restyle(self) -> None:
        """The theme changed: state colours are looked up again."""
        self._brushes.clear()
        for run in range(len(self.rows)):
            index = self._run_index(run, 1)
            self.dataChanged.emit(index, index)

    def _muted_brush(self) -> QBrush | None:
        """Grey, in the theme's colours: a figure shown but not comparable with its column's."""
        if "" not in self._brushes:
            self._brushes[""] = QBrush(self._view.palette().color(QPalette.ColorRole.PlaceholderText))
        return self._brushes[""]

    def _state_brush(self, state: str) -> QBrush | None:
        if state not in self._brushes:
            colour = tone(STATE_SEVERITY.get(state, "note"), self._view)
            self._brushes[state] = QBrush(QColor(colour)) if colour else None
        return self._brushes[state]

    def data(self, index: QModelIndex | QPersistentModelIndex, role: int = Qt.ItemDataRole.DisplayRole) -> Any:
        if not index.isValid():
            return None
        if role == Qt.ItemDataRole.SizeHintRole:
            return self._row_size
        column = index.column()
        row = self._run_at(index)
        if row is None:
            group = self._group_at(index)
            return None if group is None else self._group_data(group, column, role)
        if role == Qt.ItemDataRole.DisplayRole:
            return self._text[row][column]
        if role == SORT_ROLE:
            return self._sort[row][column]
        if role == Qt.ItemDataRole.TextAlignmentRole:
            return _RIGHT if column in _NUMERIC or column >= len(self.headers) - 2 else None
        if role == Qt.ItemDataRole.ForegroundRole:
            if column == THROUGHPUT_COLUMN and _other_unit(self.rows[row]):
                return self._muted_brush()
            return self._state_brush(self.rows[row].state) if column == 1 else None
        if role == Qt.ItemDataRole.FontRole:
            if column == 0 and self._winner[row]:
                return self._bold
            if column == len(self.headers) - 2 and self.table.rows[row].is_latest:
                return self._italic  # not final yet: the running run's latest value
            if column == THROUGHPUT_COLUMN and _other_unit(self.rows[row]):
                return self._italic
            return self._bold if self._best[row] and column in (0, SWEEP_COLUMN) else None
        if role == WORDS_ROLE:
            return self._words[row]
        if role == Qt.ItemDataRole.DecorationRole and column == 1:
            return _state_icon(self.rows[row].state)  # the state at a glance: the Runs list's icon and colour
        if role == ID_ROLE:
            return self.rows[row].run_id
        if role == Qt.ItemDataRole.ToolTipRole:
            run = self.rows[row]
            if column == 7 and run.seconds_per_step_source:
                return f"From {run.seconds_per_step_source}"
            if column == THROUGHPUT_COLUMN:
                return run.throughput_note + (
                    f"\nNot in {COMMON_UNIT} (the run's global batch is unknown): it sorts apart from the {COMMON_UNIT} "
                    "figures; compare s/step instead" if _other_unit(run) else "")
            if column == len(self.headers) - 2 and self.table.rows[row].final is not None:
                figures = self.table.rows[row]
                whole = figures.final_text(self.table.final_steps_differ)
                if figures.is_latest:
                    return (f"{whole}: the running run's latest {self.table.metric}, not its final one: it changes "
                            "until the run ends")
                return f"Final {self.table.metric}: {whole}"
            if self._best[row] and column == SWEEP_COLUMN:
                word = "highest" if self.table.higher_is_better else "lowest"
                return f"The best run of its sweep: the {word} {self.table.metric}"
            shown = self._text[row][0].strip()  # a candidate's set-up, whole where the column elides it
            lines = ([shown] if run.trial is not None and shown != run.name else []) + [f"Run {run.run_id}"]
            lines += ([f"{run.name}: the winner of its trial"] if self._winner[row] else
                      [run.name] if run.trial is not None and run.name else [])
            lines += ([run.summary] if run.summary else []) + [f"Folder: {run.run_dir}"]
            return "\n".join(lines)
        return None

    def _group_data(self, group: int, column: int, role: int) -> Any:
        if role == Qt.ItemDataRole.DisplayRole:
            return self._gtext[group][column]
        if role == SORT_ROLE:
            return self._gsort[group][column]
        if role == Qt.ItemDataRole.FontRole:
            return self._bold if column == 0 else None
        if role == Qt.ItemDataRole.ToolTipRole:
            return self._groups[group].detail
        if role == WORDS_ROLE:
            return (self._groups[group].label, self._groups[group].key)
        if role == GROUP_ROLE:
            return self._groups[group].key
        if role == COMPARE_ROLE:
            return list(self._groups[group].compare_ids)
        if role == LEFT_OUT_ROLE:
            found = self._groups[group]
            return found.left_out if isinstance(found, SweepGroup) else 0
        return None


def _other_unit(run: RunFigures) -> bool:
    """The run's throughput is a rate in another unit than the column's (see COMMON_UNIT)."""
    return run.throughput is not None and run.throughput_unit != COMMON_UNIT


def _throughput_text(run: RunFigures) -> str:
    text = format_rate(run.throughput, run.throughput_unit)
    return f"({text})" if _other_unit(run) else text


@functools.lru_cache(maxsize=16)
def _state_icon(state: str) -> QIcon:
    return state_icon(state)  # painted once per state, not on every repaint of the table


_NUMERIC = frozenset({3, 5, 6, 7, 8})
_RIGHT = int(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)


SWEEP_COLUMN = len(COLUMNS)  # the first column after the fixed ones
THROUGHPUT_COLUMN = COLUMNS.index("Throughput")
NAME_SHARE = 0.4  # of the list's width, at most, that the widest name takes before the figures scroll
# The narrowest the throughput column gets: a five-digit rate and its unit stay whole while runs come and go.
THROUGHPUT_SAMPLE = "88,888 samples/s"


def _headers(table: HistoryTable) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """The columns for this table (the swept names and the metric vary) and their tips."""
    better = "highest" if table.higher_is_better else "lowest"
    headers = (*COLUMNS, "Sweep", *table.params, f"Final {table.metric}", f"Best {table.metric}")
    tips = (*COLUMN_TIPS, SWEEP_TIP, *(f"The value of {name} the sweep gave the run" for name in table.params),
            f"The last {table.metric} the run logged (a running run's latest, in italics: not final yet)" + (
                " (and the step it was logged at: the runs ended at different steps; the Overlay tab compares "
                "them at equal steps)" if table.final_steps_differ else ""),
            f"The {better} {table.metric} the run logged ({better} is best); choose the metric above the table")
    return headers, tips


def _cells(row: HistoryRow, say_step: bool = False) -> tuple[str, ...]:
    run = row.run
    return (
        (BEST_MARK if row.is_winner else "") + row.name,
        run.state + (f" ({run.exit_code})" if run.state == "failed" and run.exit_code else ""),
        _started(run.started_at or run.created_at),
        format_duration(run.duration_s),
        run.preset or "-",
        format_bytes(run.peak_gpu_mem_bytes),
        format_bytes(run.peak_host_ram_bytes),
        format_seconds_per_step(run.seconds_per_step),
        _throughput_text(run),
        (BEST_MARK if row.is_best else "") + (row.group_label or "-"),
        *(value or "-" for value in row.params),
        _final_cell(row, say_step),
        format_metric(row.best),
    )


def _final_cell(row: HistoryRow, say_step: bool) -> str:
    """The final value in few words, so the column fits beside the others at the window's usual size: "2.93 @ 216"
    with the step. A running run's latest value is in italics instead of "(latest)"; the tooltip says it whole."""
    text = format_metric(row.final)
    if say_step and row.final is not None and row.final_step is not None:
        text = f"{text} @ {row.final_step}"
    return text


def _sort_keys(row: HistoryRow, params: tuple[float | str, ...]) -> tuple[Any, ...]:
    run = row.run
    # Started sorts by sort_time: a sweep's runs stay together, newest first.
    values = (row.name.lower(), run.state, row.sort_time, run.duration_s, run.preset or "",
              run.peak_gpu_mem_bytes, run.peak_host_ram_bytes, run.seconds_per_step,
              None if _other_unit(run) else run.throughput,
              f"{row.group_label} {row.group}" if row.group else "", *params, row.final, row.best)
    return tuple(NO_FIGURE if v is None else v for v in values)


def _group_cells(group: TrialGroup | SweepGroup, count: int) -> tuple[str, ...]:
    """A group's row: its line under Name, its state, when its newest run started; the figures are its runs'."""
    return (group.label, group.state or "-", _started(group.sort_time), *("",) * (count - 3))


def _group_sort_keys(group: TrialGroup | SweepGroup, child: tuple[Any, ...]) -> tuple[Any, ...]:
    """A group's row sorts by its line, state and newest start; it has no figures of its own (blank: as a run
    without them), and a swept value's key has the type of its column's (its first candidate's)."""
    blank = tuple("" if isinstance(key, str) else NO_FIGURE for key in child[3:SWEEP_COLUMN + 1])
    params = child[SWEEP_COLUMN + 1:-2]
    return (group.label.lower(), group.state, group.sort_time, *blank, *params, NO_FIGURE, NO_FIGURE)


class RunFilterProxy(QSortFilterProxyModel):
    """The rows sorted, and only those the filter box's text matches: a group's row stays while one of its runs
    matches, and a group whose own line matches keeps all its runs."""

    def __init__(self, parent: QObject) -> None:
        super().__init__(parent)
        self.run_filter: RunFilter = parse_filter("")
        self.setRecursiveFilteringEnabled(True)
        self.setAutoAcceptChildRows(True)

    def set_run_filter(self, found: RunFilter) -> None:
        if hasattr(self, "beginFilterChange"):  # Qt 6.10 on (invalidateFilter is deprecated there)
            self.beginFilterChange()
            self.run_filter = found
            self.endFilterChange()
        else:
            self.run_filter = found
            self.invalidateFilter()

    def filterAcceptsRow(self, row: int, parent: QModelIndex | QPersistentModelIndex) -> bool:  # noqa: N802
        if not self.run_filter.active:
            return True
        words = self.sourceModel().index(row, 0, parent).data(WORDS_ROLE)
        return self.run_filter.matches(words or ())


class RunTable(QWidget):
    """The runs, newest first (a sweep's and a trial's runs under their row), sortable by any column; one or more
    selected (a trial's row stands for its measured candidates, a sweep's for its best runs). Figure columns are as wide as their widest
    cell, the name takes the rest. Enter or a double-click asks to open the selected run. The panel keeps the metric
    whose final and best values it shows (loss until one is chosen) and which groups' rows are open."""

    selection_changed = Signal(list)  # the selected runs' ids, in the order shown
    open_requested = Signal()  # Enter, Return or a double-click on the list

    def __init__(self, parent: QWidget | None = None, settings: QSettings | None = None):
        super().__init__(parent)
        self._sized = False
        self._runs: list[RunFigures] = []
        self._metric: str | None = None  # chosen by the user; None: history_table's default (loss)
        self._trials: dict[str, TrialSummary] = {}  # what the trials' records say of the trials shown
        self._open: set[str] = set()  # the trials whose rows are expanded (kept over a reset of the list)
        self.model = RunsModel(self)
        # The filter box's text, remembered (with the page's settings) as the user left it.
        self.filter_box = RunFilterBox(settings, FILTER_KEY)
        self.proxy = RunFilterProxy(self)
        self.proxy.set_run_filter(self.filter_box.filter)
        self.proxy.setSourceModel(self.model)
        self.proxy.setSortRole(SORT_ROLE)
        self.table = QTreeView()
        self.table.setModel(self.proxy)
        self.table.setUniformRowHeights(True)
        self.table.setAllColumnsShowFocus(True)
        self.table.setSortingEnabled(True)
        self.table.sortByColumn(2, Qt.SortOrder.DescendingOrder)
        self.table.setSelectionBehavior(QAbstractItemView.SelectionBehavior.SelectRows)
        self.table.setSelectionMode(QAbstractItemView.SelectionMode.ExtendedSelection)
        self.table.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
        self.table.setAlternatingRowColors(True)
        self.table.setTextElideMode(Qt.TextElideMode.ElideMiddle)  # a long name keeps its start and its end
        header = self.table.header()
        header.setStretchLastSection(False)
        # Widths come from the formatted cells when the list changes (ResizeToContents would measure every cell at
        # every refresh: a quarter second for 200 runs).
        header.setSectionResizeMode(QHeaderView.ResizeMode.Interactive)
        header.setSectionResizeMode(0, QHeaderView.ResizeMode.Fixed)
        self._name_min = self.fontMetrics().horizontalAdvance("llama-7b-offload-run") + 16
        self.table.installEventFilter(self)
        self.filter_box.lead_to(self.table, self._arrive_from_filter)
        self.table.doubleClicked.connect(self._double_clicked)
        self.table.expanded.connect(lambda index: self._open.add(str(index.data(GROUP_ROLE))))
        self.table.collapsed.connect(lambda index: self._open.discard(str(index.data(GROUP_ROLE))))
        self.table.selectionModel().selectionChanged.connect(
            lambda *_args: self.selection_changed.emit(self.selected_ids()))
        for keys in ("Return", "Enter"):
            shortcut = QShortcut(QKeySequence(keys), self.table)
            shortcut.setContext(Qt.ShortcutContext.WidgetShortcut)
            shortcut.activated.connect(self.open_requested.emit)

        self.metric_box = QComboBox()
        self.metric_box.setToolTip("The metric whose final and best values the last two columns show, and by which "
                                   "each sweep's best run is marked (★)")
        self.metric_box.setSizeAdjustPolicy(QComboBox.SizeAdjustPolicy.AdjustToContents)
        self.metric_box.currentTextChanged.connect(self._metric_chosen)
        label = QLabel("Bes&t by:")
        label.setBuddy(self.metric_box)
        self.filter_box.changed.connect(self._filter_changed)
        chooser = QHBoxLayout()
        chooser.addWidget(self.filter_box, 2)
        chooser.addStretch(1)
        chooser.addWidget(label)
        chooser.addWidget(self.metric_box)

        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addLayout(chooser)
        layout.addWidget(self.table)

    @property
    def rows(self) -> list[RunFigures]:
        """The runs listed, in the table's order (a sweep's runs together)."""
        return self.model.rows

    @property
    def history(self) -> HistoryTable:
        """The table shown: its swept names, its metric, each row's final and best values and group."""
        return self.model.table

    def show_rows(self, rows: list[RunFigures], trials: dict[str, TrialSummary] | None = None) -> None:
        """A new list (and what the trials' records say of its trials): changed rows are redrawn, the selection
        stays on its rows, open trials stay open, columns fit a changed set."""
        self._runs = rows
        self._trials = dict(trials or {})
        table = history_table(rows, self._metric, self._trials)
        self._offer_metrics(table)
        selected = self._selected_keys()
        reset = self.model.set_table(table)
        if reset:
            self._reopen()
        if reset or not self._sized or self._outgrown():
            self._size_columns()
        if selected and self._selected_keys() != selected:
            self._select_keys(selected)
        self._show_count()

    def _filter_changed(self, found: RunFilter) -> None:
        self.proxy.set_run_filter(found)
        self._reopen()
        self._show_count()

    def shown_count(self) -> tuple[int, int]:
        """(runs the filter shows, runs listed)."""
        shown = sum(1 for index in self._rows_shown() if index.data(ID_ROLE))
        return shown, len(self.model.rows)

    def _show_count(self) -> None:
        self.filter_box.show_count(*self.shown_count())

    def choose_metric(self, metric: str) -> None:
        """Show the final and best values of `metric` (and mark each sweep's best by it)."""
        self._metric = metric
        self.show_rows(self._runs, self._trials)

    def _metric_chosen(self, metric: str) -> None:
        if metric and metric != self.model.table.metric:
            self.choose_metric(metric)

    def _offer_metrics(self, table: HistoryTable) -> None:
        """The metrics the runs logged, in the chooser, with the table's one current."""
        names = list(table.metrics) if table.metric in table.metrics else [table.metric, *table.metrics]
        if [self.metric_box.itemText(i) for i in range(self.metric_box.count())] != names:
            self.metric_box.blockSignals(True)
            self.metric_box.clear()
            self.metric_box.addItems(names)
            self.metric_box.blockSignals(False)
        if self.metric_box.currentText() != table.metric:
            self.metric_box.blockSignals(True)
            self.metric_box.setCurrentText(table.metric)
            self.metric_box.blockSignals(False)

    def selected_ids(self) -> list[str]:
        """The selected runs' ids, in the order shown; a selected group's row gives the runs it compares (a trial's
        measured candidates, a sweep's best runs)."""
        ids: list[str] = []
        for index in self._selected_indexes():
            group = index.data(GROUP_ROLE)
            ids += index.data(COMPARE_ROLE) if group else [str(index.data(ID_ROLE))]
        return list(dict.fromkeys(ids))

    def select_current_if_none(self) -> None:
        """With nothing selected, the row the keyboard is on becomes the selection (a refresh can leave a current
        row unselected; Ctrl+D on it then compares it, as the person expects)."""
        current = self.table.currentIndex()
        if current.isValid() and not self._selected_indexes():
            self.table.selectionModel().select(
                current, QItemSelectionModel.SelectionFlag.ClearAndSelect | QItemSelectionModel.SelectionFlag.Rows)

    def select_runs(self, run_ids: list[str]) -> None:
        """Select the rows of these runs (a trial's candidate's row opens its trial's)."""
        self._select_keys([("run", i) for i in run_ids])

    def select_trial(self, trial_id: str) -> None:
        """Select a trial's row: its measured candidates are the selection."""
        self._select_keys([("group", f"trial:{trial_id}")])

    def select_sweep(self, sweep_id: str) -> None:
        """Select a sweep's row: its runs (the best first, at most MAX_COMPARED) are the selection."""
        self._select_keys([("group", f"sweep:{sweep_id}")])

    def selected_group(self) -> tuple[str, int] | None:
        """When the selection is one group's row alone: its key and how many of its runs it leaves out."""
        chosen = self._selected_indexes()
        if len(chosen) != 1 or not chosen[0].data(GROUP_ROLE):
            return None
        return str(chosen[0].data(GROUP_ROLE)), int(chosen[0].data(LEFT_OUT_ROLE) or 0)

    def _rows_shown(self) -> list[QModelIndex]:
        """Every row's first cell in the order shown: top-level rows, each trial's candidates after its row."""
        out = []
        for row in range(self.proxy.rowCount()):
            index = self.proxy.index(row, 0)
            out.append(index)
            out += [self.proxy.index(child, 0, index) for child in range(self.proxy.rowCount(index))]
        return out

    def _selected_indexes(self) -> list[QModelIndex]:
        chosen = self.table.selectionModel()
        return [index for index in self._rows_shown() if chosen.isRowSelected(index.row(), index.parent())]

    def _selected_keys(self) -> list[tuple[str, str]]:
        """The selected rows as ("run", id) or ("group", key): what a new list selects again."""
        return [("group", str(group)) if (group := index.data(GROUP_ROLE)) else ("run", str(index.data(ID_ROLE)))
                for index in self._selected_indexes()]

    def _select_keys(self, keys: list[tuple[str, str]]) -> None:
        wanted = set(keys)
        selection = QItemSelection()
        last = self.model.columnCount() - 1
        for index in self._rows_shown():
            group = index.data(GROUP_ROLE)
            if (("group", str(group)) if group else ("run", str(index.data(ID_ROLE)))) in wanted:
                selection.select(index, index.sibling(index.row(), last))
                if index.parent().isValid():
                    self.table.expand(index.parent())
        self.table.selectionModel().select(selection, QItemSelectionModel.SelectionFlag.ClearAndSelect)

    def _reopen(self) -> None:
        """After a new set of rows: each group's line spans the row (it is longer than a name), and the groups that
        were open are opened again."""
        for row in range(self.proxy.rowCount()):
            index = self.proxy.index(row, 0)
            group = index.data(GROUP_ROLE)
            # Every row's span set (a filter moves the groups' rows up and down).
            self.table.setFirstColumnSpanned(row, QModelIndex(), bool(group))
            if group in self._open:
                self.table.expand(index)

    def _double_clicked(self, index: QModelIndex) -> None:
        if index.data(ID_ROLE):  # a trial's row opens and closes instead
            self.open_requested.emit()

    def _arrive_from_filter(self) -> None:
        """Down from the filter box: the current row stays; without one, the first row the filter shows."""
        if not self.table.currentIndex().isValid() and self.proxy.rowCount() > 0:
            self.table.setCurrentIndex(self.proxy.index(0, 0))

    def eventFilter(self, watched: QObject, event: QEvent) -> bool:
        if watched is self.table and event.type() == QEvent.Type.Resize:
            self._fit_name_column()
        return super().eventFilter(watched, event)

    def changeEvent(self, event: QEvent) -> None:
        super().changeEvent(event)
        if event.type() in (QEvent.Type.PaletteChange, QEvent.Type.ApplicationPaletteChange):
            self.model.restyle()  # state colours follow the theme

    def _size_columns(self) -> None:
        """Each figure column as wide as its widest cell (of the first few hundred runs); the name takes the rest."""
        metrics = self.table.fontMetrics()
        header = self.table.header().fontMetrics()
        texts = self.model.texts()[:300]
        headers = self.model.headers
        for column in range(1, len(headers)):
            widest = max((metrics.horizontalAdvance(t[column]) for t in texts), default=0)
            if column == 1:  # the state's icon sits before its word
                widest += self.table.style().pixelMetric(QStyle.PixelMetric.PM_SmallIconSize) + 8
            if column == SWEEP_COLUMN:  # the best run's name is drawn bold
                widest += metrics.horizontalAdvance(BEST_MARK) + 8
            if column == THROUGHPUT_COLUMN:
                widest = max(widest, metrics.horizontalAdvance(THROUGHPUT_SAMPLE))
            self.table.setColumnWidth(column, max(widest, header.horizontalAdvance(headers[column]) + 14) + 14)
        self._sized = bool(texts)
        self._fit_name_column()

    def _outgrown(self) -> bool:
        """A throughput or final value became wider than its column (a running run's first figures)."""
        metrics = self.table.fontMetrics()
        texts = self.model.texts()[:300]
        for column in (THROUGHPUT_COLUMN, self.model.columnCount() - 2):
            widest = max((metrics.horizontalAdvance(t[column]) for t in texts), default=0)
            if widest + 14 > self.table.columnWidth(column):
                return True
        return False

    def _fit_name_column(self) -> None:
        """The name takes the room the figures leave, but stays readable (the view scrolls instead): as wide as the
        widest run's name (a trial's candidates are indented, the winner bold), up to a share of the view; narrower,
        down to a 20-character name, where that brings every figure into sight. A longer name is elided in the
        middle, whole in its tooltip."""
        others = sum(self.table.columnWidth(c) for c in range(1, self.model.columnCount()))
        viewport = self.table.viewport().width()
        needed = min(self._names_width(), max(self._name_min, int(viewport * NAME_SHARE)))
        room = viewport - others
        self.table.setColumnWidth(0, room if room >= self._name_min else max(self._name_min, needed))

    def _names_width(self) -> int:
        """The widest run's name as drawn: its font (bold for a winner or a sweep's best) and its indentation."""
        plain = self.table.fontMetrics()
        font = QFont(self.table.font())
        font.setBold(True)
        bold = QFontMetrics(font)
        widest = 0
        for row, texts in enumerate(self.model.texts()[:len(self.model.rows)][:300]):
            metrics = bold if self.model.is_bold_name(row) else plain
            widest = max(widest, metrics.horizontalAdvance(texts[0]))
        return widest + 2 * self.table.indentation() + 16
