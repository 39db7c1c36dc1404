"""The Runs page's Step tab: inside the open run's steps. A stacked bar per step (the chosen rank's latest steps, or
each rank's typical step side by side), one colour per phase (forward, backward, communication, optimizer, swap,
other); a table of each rank's typical phase times, step time and memory peaks with the slowest rank marked; and the
run's verdict, slow-down, notes (why a phase is missing) and advice.

What it shows is backend/runs/control/step_view.py's `read_step_view`, read on the thread pool with the page's own
poll: while the tab is on screen, at most every STEP_MS while the run goes, once when it ends. The shaping of the
bars and the table's rows (`step_bars`, `rank_rows`) is plain Python; the widget only draws it."""

from __future__ import annotations

import html
import statistics
import time
from dataclasses import dataclass
from typing import Any

import pyqtgraph as pg
from PySide6.QtCore import QEvent, Qt
from PySide6.QtGui import QColor, QCursor, QPalette
from PySide6.QtWidgets import (
    QAbstractItemView,
    QComboBox,
    QFrame,
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QScrollArea,
    QSplitter,
    QStackedWidget,
    QTableWidget,
    QTableWidgetItem,
    QToolTip,
    QVBoxLayout,
    QWidget,
)

from traindeck.backend.core import format_bytes
from traindeck.backend.runs import RunRecord, StepView, ViewChange, WatchedRun, read_step_view
from traindeck.backend.steps import PHASES, StepAnatomy
from traindeck.gui.pages.runs.source import RunsSource
from traindeck.gui.theme import set_muted
from traindeck.gui.widgets.labels import label as _label
from traindeck.gui.widgets.message_list import tone
from traindeck.gui.widgets.phase_colours import phase_colours

STEP_MS = 5000  # a running run's steps are read again this often while the tab is on screen
ALL_RANKS = "All ranks side by side"
TABLE_ROWS = 6  # ranks shown in the table before it scrolls
COLUMNS = ("Rank", "Steps", *PHASES, "Step", "GPU peak", "Host peak")
SLOWEST = "slowest"
OUTLIER = 3.0  # a bar this many times the median bar is left off the y axis' fit (its time is written above it)
TABLE_TIP = ("A typical step: each phase's mean over the middle half of the steps by time (after the first "
             "steps), adding up to the step, and its share of it")
NAMED_TICKS = 8  # more ranks than this: the ticks say the rank's number only


# ------------------------------------------------------------------------------------------------ shaping
@dataclass(frozen=True)
class StepBars:
    """Stacked bars: their x positions, tick labels (None: x is the step number) and each phase's heights in ms,
    stacked in PHASES order."""

    x: list[float]
    ticks: list[str] | None
    heights: dict[str, list[float]]

    def bottoms(self, phase: str) -> list[float]:
        """Where `phase`'s part of each bar starts: the sum of the phases stacked below it."""
        below = PHASES[:PHASES.index(phase)]
        return [sum(self.heights[p][i] for p in below) for i in range(len(self.x))]

    def totals(self) -> list[float]:
        return [sum(self.heights[p][i] for p in PHASES) for i in range(len(self.x))]

    def index_at(self, x: float, width: float) -> int | None:
        """The bar whose body covers `x` (in the plot's x units), None between bars."""
        for i, bx in enumerate(self.x):
            if abs(x - bx) <= width / 2:
                return i
        return None

    def words(self, index: int, label: str) -> str:
        """The bar's phases, largest first, with its total: what hovering it says."""
        parts = sorted(((self.heights[p][index], p) for p in PHASES), reverse=True)
        lines = [f"{label}: {sum(h for h, _ in parts):.1f} ms"]
        lines += [f"  {phase} {ms:.1f} ms" for ms, phase in parts if ms > 0]
        return "\n".join(lines)

    def y_top(self) -> float:
        """The top of the y axis: the tallest bar, leaving out bars over OUTLIER times the median bar (a warm-up
        step of seconds beside steps of milliseconds), which run off the top instead of flattening the rest."""
        totals = self.totals()
        if not totals:
            return 1.0
        limit = OUTLIER * statistics.median(totals)
        return max((t for t in totals if t <= limit), default=max(totals)) or 1.0


def rank_name(anatomy: StepAnatomy, rank: int) -> str:
    """"rank 1", marked "(slowest)" where the others wait for it (not where the ranks are evenly matched)."""
    return f"rank {rank}" + (f" ({SLOWEST})" if rank == anatomy.straggler else "")


def step_bars(view: StepView, rank: int | None) -> StepBars:
    """Rank `rank`'s latest steps, one bar per step; None: each rank's typical step, one bar per rank."""
    if rank is None:
        ranks = sorted(view.anatomy.ranks.items())
        many = len(ranks) > NAMED_TICKS
        return StepBars(x=[float(i) for i in range(len(ranks))],
                        ticks=[str(r) if many else rank_name(view.anatomy, r) for r, _ in ranks],
                        heights={p: [a.phases_ms.get(p, 0.0) for _, a in ranks] for p in PHASES})
    steps = view.recent.get(rank, ())
    return StepBars(x=[float(s.step) for s in steps], ticks=None,
                    heights={p: [s.phase(p) for s in steps] for p in PHASES})


@dataclass(frozen=True)
class RankRow:
    """One rank's row of the table, as text, and whether it is the slowest rank."""

    cells: tuple[str, ...]
    slowest: bool


def rank_rows(anatomy: StepAnatomy) -> list[RankRow]:
    """Each rank's typical phase times (ms and share of the step), step time, GPU peak and host peak."""
    rows = []
    for rank, a in sorted(anatomy.ranks.items()):
        total = sum(a.phases_ms.values()) or 1.0
        phases = [f"{a.phases_ms.get(p, 0.0):.1f} ms  {a.phases_ms.get(p, 0.0) / total:.0%}" for p in PHASES]
        slowest = rank == anatomy.straggler
        label = anatomy.rank_label(rank)
        rows.append(RankRow(cells=(f"{label} ({SLOWEST})" if slowest else label, str(a.steps), *phases,
                                   f"{a.step_ms:.1f} ms", format_bytes(a.peak_gpu_allocated),
                                   format_bytes(a.peak_host)), slowest=slowest))
    return rows


# ------------------------------------------------------------------------------------------------ the panel
class StepPanel(QWidget):
    """The Step tab: read on the thread pool after the page's polls while it is on screen (the page hands it their
    news); `view` is the latest reading of the open run."""

    def __init__(self, watched: WatchedRun, source: RunsSource) -> None:
        super().__init__()
        self._watched, self._source = watched, source
        self.view: StepView | None = None
        self._record: RunRecord | None = None  # the open run as its last poll read it
        self._read_at = 0.0  # monotonic time of the last read asked (0: none yet for this run)
        self._reading = False  # a read is on its way
        self._final = False  # read after the run ended: nothing more will change
        self._owed = True  # a read is wanted whatever the time since the last (the run opened, or it ended)
        self._bars: list[pg.GraphicsObject] = []  # the bars, then the times of bars off the top
        self.setObjectName("stepPanel")

        self.rank_box = QComboBox()
        self.rank_box.setToolTip("The bars: one rank's latest steps, or each rank's typical step side by side "
                                 "(Alt+B, then the arrow keys)")
        self.rank_box.currentIndexChanged.connect(lambda _index: self._draw_bars())
        self.verdict = _label(wrap=True, selectable=True, bold=True)
        self.verdict.setObjectName("stepVerdict")
        self.freshness = _label()  # "live: read 05:35:12, every 5 s" while the run goes: the figures move
        self.freshness.setObjectName("stepFreshness")
        set_muted(self.freshness)
        picker = QVBoxLayout()
        picker.setContentsMargins(0, 0, 0, 0)
        row = QHBoxLayout()
        row.addWidget(QLabel("Bars of"))
        row.addWidget(self.rank_box)
        picker.addLayout(row)
        picker.addWidget(self.freshness)
        top = QHBoxLayout()
        top.setContentsMargins(0, 0, 0, 0)
        top.addLayout(picker)
        top.addWidget(self.verdict, 1)

        self.plot = pg.PlotWidget()
        self.plot.setMinimumSize(260, 150)
        item = self.plot.getPlotItem()
        item.setMenuEnabled(False)
        item.hideButtons()
        item.setMouseEnabled(x=False, y=False)
        item.showGrid(x=False, y=True, alpha=0.15)
        item.setLabel("left", "ms")
        # The legend in its own row above the plot (the title's row): never over a bar.
        self.legend = pg.LegendItem(offset=None, labelTextSize="8pt", verSpacing=-6, colCount=len(PHASES))
        item.layout.removeItem(item.titleLabel)  # no title: the tab and the rank box say what the bars are
        item.titleLabel.hide()
        item.layout.addItem(self.legend, 0, 1, alignment=Qt.AlignmentFlag.AlignLeft)
        self.plot.installEventFilter(self)  # a narrower plot: the legend in more rows (see _fit_legend)

        self.hover_text = ""  # what hovering a bar says (its phases and total), "" off the bars
        self._shown_bars: tuple[StepBars, float, int | None] | None = None  # the bars drawn, their width, the rank
        self.plot.scene().sigMouseMoved.connect(self._hovered)

        self.table = QTableWidget(0, len(COLUMNS))
        self.table.setObjectName("stepTable")
        self.table.setHorizontalHeaderLabels(list(COLUMNS))
        self.table.verticalHeader().setVisible(False)
        self.table.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
        self.table.setWordWrap(False)
        self.table.horizontalHeader().setSectionResizeMode(QHeaderView.ResizeMode.ResizeToContents)
        self.table.verticalHeader().setDefaultSectionSize(self.fontMetrics().height() + 8)
        self.table.setToolTip(TABLE_TIP)
        self.details = _label(wrap=True, selectable=True)
        self.details.setTextFormat(Qt.TextFormat.RichText)
        self.details.setAlignment(Qt.AlignmentFlag.AlignTop | Qt.AlignmentFlag.AlignLeft)
        self.details_area = QScrollArea()  # long advice scrolls instead of growing the tab
        self.details_area.setWidgetResizable(True)
        self.details_area.setFrameShape(QFrame.Shape.NoFrame)
        self.details_area.setWidget(self.details)
        split = QSplitter(Qt.Orientation.Horizontal)
        split.addWidget(self.plot)
        split.addWidget(self.details_area)
        split.setStretchFactor(0, 3)
        split.setStretchFactor(1, 2)
        split.setChildrenCollapsible(False)
        split.setSizes([600, 400])  # the chart, and the advice beside it readable (scaled to the width there is)
        self.details_area.setMinimumWidth(220)
        shown = QWidget()
        shown_layout = QVBoxLayout(shown)
        shown_layout.setContentsMargins(0, 0, 0, 0)
        shown_layout.addLayout(top)
        shown_layout.addWidget(self.table)
        shown_layout.addWidget(split, 1)

        self.empty = _label(wrap=True, selectable=True)
        self.empty.setObjectName("stepEmpty")
        self.empty.setAlignment(Qt.AlignmentFlag.AlignCenter)
        set_muted(self.empty)
        self.pages = QStackedWidget()
        self.pages.addWidget(self.empty)
        self.pages.addWidget(shown)
        # Scrolled when the tab is short: the panel never raises the window's minimum height.
        scroll = QScrollArea()
        scroll.setWidgetResizable(True)
        scroll.setFrameShape(QFrame.Shape.NoFrame)
        scroll.setWidget(self.pages)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(4, 4, 4, 4)
        layout.addWidget(scroll)
        self._apply_theme()
        self._show_empty("No step read yet.")

    # ------------------------------------------------------------------------------------------------ reading
    def open_run(self) -> None:
        """Another run is open: nothing shown until its first read (made when the tab is on screen)."""
        self.view, self._record = None, None
        self._read_at, self._reading, self._final, self._owed = 0.0, False, False, True
        self.rank_box.blockSignals(True)
        self.rank_box.clear()
        self.rank_box.blockSignals(False)
        self.freshness.setText("")
        self._show_empty("No step read yet." if self._source.remote is None else
                         "Step timing is read from this machine's run store: not shown for another machine's runs.")

    def news(self, change: ViewChange, on_screen: bool) -> None:
        """After each poll of the open run: read its steps again while it goes (the tab on screen, every STEP_MS)
        and once more when it ends, at once or when the tab is next seen."""
        self._record = change.record
        if change.record.state != "running":
            self.freshness.setText("")
        if change.ended_now:
            self._owed = True  # its last steps
        if change.first or change.ended_now or change.record.state == "running":
            self.due(on_screen)

    def due(self, on_screen: bool) -> None:
        """Read now if the tab is seen and a read is owed (the run just opened or ended) or the last is STEP_MS
        old; not again once a read after the run's end arrived."""
        record = self._record
        if (record is None or record.id != self._watched.run_id or self._reading or self._source.remote is not None
                or not on_screen or not self.isVisible() or (self._final and not self._owed)):
            return  # a read on its way asks again when it arrives (see _arrived)
        now = time.monotonic()
        if not self._owed and now - self._read_at < STEP_MS / 1000:
            return
        self._read_at, self._reading, self._owed = now, True, False
        final = record.finished
        self._source.call(read_step_view, record, done=lambda view: self._arrived(record.id, final, view),
                          failed=lambda text: self._failed(record.id, text))

    def showEvent(self, event: Any) -> None:  # noqa: N802
        super().showEvent(event)
        self.due(True)  # the tab chosen or the page back: what is owed, or a fresh read if one is due

    def _failed(self, run_id: str, text: str) -> None:
        if run_id != self._watched.run_id:
            return
        self._reading = False
        self._source.report_failure(text)

    def _arrived(self, run_id: str, final: bool, view: StepView) -> None:
        if self._source.closing or run_id != self._watched.run_id:
            return  # another run opened meanwhile
        self._reading = False
        self._final = final
        self.view = view
        self.freshness.setText("" if final else
                               f"live: read {time.strftime('%H:%M:%S')}, again every {STEP_MS // 1000} s")
        self.show_view(view)
        if self._owed:
            self.due(self.isVisible())  # the run ended while this read was on its way: its last steps

    # ------------------------------------------------------------------------------------------------ drawing
    def show_view(self, view: StepView) -> None:
        anatomy = view.anatomy
        if not anatomy.ranks:
            summary = anatomy.summary
            live = self._record is not None and self._record.state == "running"
            self._show_empty(summary[:1].upper() + summary[1:] + "."
                             + (f"\nRead again every {STEP_MS // 1000} s while the run goes." if live else ""))
            return
        self.pages.setCurrentIndex(1)
        self._fill_ranks(anatomy)
        self.verdict.setText(anatomy.summary)
        self._fill_table(anatomy)
        details = self._details_html(anatomy)
        self.details.setText(details)
        self.details_area.setVisible(bool(details))
        self._draw_bars()

    def _show_empty(self, text: str) -> None:
        self.pages.setCurrentIndex(0)
        self.empty.setText(text)

    def _fill_ranks(self, anatomy: StepAnatomy) -> None:
        """The rank box's choices: all ranks (where there are several), then each rank; the choice kept."""
        wanted: list[tuple[str, int | None]] = [(ALL_RANKS, None)] if len(anatomy.ranks) > 1 else []
        wanted += [(rank_name(anatomy, r), r) for r in sorted(anatomy.ranks)]
        box = self.rank_box
        if [(box.itemText(i), box.itemData(i)) for i in range(box.count())] == wanted:
            return
        chosen = box.currentData() if box.currentIndex() >= 0 else None
        box.blockSignals(True)
        box.clear()
        for text, rank in wanted:
            box.addItem(text, rank)
        index = next((i for i, (_, r) in enumerate(wanted) if r == chosen), 0)
        box.setCurrentIndex(index)
        box.blockSignals(False)

    def chosen_rank(self) -> int | None:
        """The rank whose latest steps the bars show; None: each rank's typical step."""
        data = self.rank_box.currentData()
        return int(data) if isinstance(data, int) else None

    def _fill_table(self, anatomy: StepAnatomy) -> None:
        rows = rank_rows(anatomy)
        even = len(anatomy.ranks) > 1 and anatomy.straggler is None
        self.table.setToolTip(TABLE_TIP + ("; the ranks are evenly matched: none holds the others up" if even else ""))
        self.table.setRowCount(len(rows))
        for r, row in enumerate(rows):
            for c, text in enumerate(row.cells):
                item = QTableWidgetItem(text)
                if c >= 2:
                    item.setTextAlignment(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)
                if row.slowest:
                    font = item.font()
                    font.setBold(True)
                    item.setFont(font)
                    item.setToolTip("The slowest rank: the most work of its own per step (its step time minus "
                                    "communication); the other ranks wait for it in their collectives")
                self.table.setItem(r, c, item)
        self._fit_table()

    def _fit_table(self) -> None:
        """The table as tall as its rows (up to TABLE_ROWS, then it scrolls): the chart gets the rest."""
        table = self.table
        rows = min(table.rowCount(), TABLE_ROWS)
        height = table.horizontalHeader().sizeHint().height() + rows * table.verticalHeader().defaultSectionSize()
        if table.horizontalHeader().length() > table.viewport().width():
            height += table.horizontalScrollBar().sizeHint().height()
        table.setFixedHeight(height + 2 * table.frameWidth())

    def resizeEvent(self, event: Any) -> None:  # noqa: N802
        super().resizeEvent(event)
        if self.table.rowCount():
            self._fit_table()  # narrower: room for the table's scroll bar

    def _details_html(self, anatomy: StepAnatomy) -> str:
        lines = []
        if anatomy.slowdown is not None:
            lines.append(f"<span style='color:{tone('warning', self)}'>{html.escape(anatomy.slowdown.text())}</span>")
        muted = self.palette().color(QPalette.ColorRole.PlaceholderText).name()
        lines += [f"<span style='color:{muted}'>Note: {html.escape(n)}</span>" for n in anatomy.notes]
        lines += [f"• {html.escape(a)}" for a in anatomy.advice]
        return "<br>".join(lines)

    def _draw_bars(self) -> None:
        item = self.plot.getPlotItem()
        for bar in self._bars:
            item.removeItem(bar)
        self._bars = []
        self.legend.clear()
        if self.view is None:
            return
        rank = self.chosen_rank()
        bars = step_bars(self.view, rank)
        colours = self._colours()
        step = min((b - a for a, b in zip(bars.x, bars.x[1:], strict=False) if b > a), default=1.0)
        width = (0.6 if bars.ticks is not None else 0.8) * step
        self._shown_bars = (bars, width, rank)
        self.hover_text = ""
        for phase in PHASES:
            bar = pg.BarGraphItem(x=bars.x, height=bars.heights[phase], y0=bars.bottoms(phase), width=width,
                                  brush=colours[phase], pen=pg.mkPen(colours[phase]), name=phase)
            item.addItem(bar)
            self.legend.addItem(bar, phase)
            self._bars.append(bar)
        self._fit_legend()
        axis = item.getAxis("bottom")
        if bars.ticks is not None:
            axis.setTicks([list(enumerate(bars.ticks))])
            axis.setLabel("rank" if len(bars.ticks) > NAMED_TICKS else "")
        else:
            axis.setTicks(None)
            axis.setLabel(f"step of rank {rank}")
        if not bars.x:
            return
        item.setXRange(min(bars.x) - step, max(bars.x) + step, padding=0)
        top = bars.y_top() * 1.1
        item.setYRange(0, top, padding=0)
        foreground = self.palette().color(QPalette.ColorRole.Text)
        for x, total in zip(bars.x, bars.totals(), strict=True):
            if total > top:  # off the top: its time written at the top instead
                text = pg.TextItem(f"{total:.0f} ms ↑", color=foreground, anchor=(0, 0))
                text.setPos(x - width / 2, top)  # from the bar's left edge rightwards: never under the y axis
                item.addItem(text)
                self._bars.append(text)

    def _fit_legend(self) -> None:
        """The legend in as few rows as the plot's width allows (6 phases in a row, else 3 or 2 a row): never cut
        at the plot's right edge."""
        room = self.plot.width() - self.plot.getPlotItem().getAxis("left").width() - 16
        for count in (len(PHASES), 3, 2, 1):
            self.legend.setColumnCount(count)
            if self.legend.layout.preferredWidth() <= room:
                break

    def eventFilter(self, watched: Any, event: QEvent) -> bool:  # noqa: N802
        if watched is self.plot and event.type() == QEvent.Type.Resize:
            self._fit_legend()
        return super().eventFilter(watched, event)

    def hover_at(self, x: float) -> str:
        """What hovering the bars at `x` (in the plot's x units) says: the bar's phases and total, "" off them."""
        if self._shown_bars is None:
            return ""
        bars, width, rank = self._shown_bars
        index = bars.index_at(x, width)
        if index is None:
            return ""
        if bars.ticks is not None:  # each rank's typical step
            ranks = sorted(self.view.anatomy.ranks) if self.view is not None else []
            label = f"rank {ranks[index]}, its typical step" if index < len(ranks) else bars.ticks[index]
        else:
            label = f"step {int(bars.x[index])} of rank {rank}"
        return bars.words(index, label)

    def _hovered(self, position: Any) -> None:
        view_box = self.plot.getPlotItem().getViewBox()
        if not view_box.sceneBoundingRect().contains(position):
            text = ""
        else:
            text = self.hover_at(view_box.mapSceneToView(position).x())
        if text != self.hover_text:
            self.hover_text = text
            if text:
                QToolTip.showText(QCursor.pos(), text, self.plot)
            else:
                QToolTip.hideText()

    def _colours(self) -> dict[str, str]:
        return phase_colours(self)

    def _apply_theme(self) -> None:
        palette = self.palette()
        background = palette.color(QPalette.ColorRole.Base)
        foreground = palette.color(QPalette.ColorRole.Text)
        self.plot.setBackground(background)
        item = self.plot.getPlotItem()
        for entry in item.axes.values():
            axis = entry["item"]
            axis.setPen(pg.mkPen(foreground))
            axis.setTextPen(pg.mkPen(foreground))
        self.legend.setLabelTextColor(foreground)
        legend_bg = QColor(background)
        legend_bg.setAlpha(170)
        self.legend.setBrush(pg.mkBrush(legend_bg))
        if self.view is not None:
            self.show_view(self.view)

    def changeEvent(self, event: QEvent) -> None:  # noqa: N802
        if event.type() in (QEvent.Type.PaletteChange, QEvent.Type.ApplicationPaletteChange):
            self._apply_theme()
        super().changeEvent(event)
