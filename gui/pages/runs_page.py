"""The run view: a list of runs (running first) and the open run's console, progress, charts, stop and diagnosis.

Everything the page shows is read off the UI thread: the run store through `ctx.tasks` (a view every 0.5 s, the
list every 2 s), the log by the console's own reading thread. Opening the page while runs are running shows the
newest one and follows it: closing and reopening the window reattaches to a run, which never noticed either.

Size (~800 lines): layout and drawing only; the watched run's state is backend/runs/watched.py (WatchedRun).
Split candidate: the run list and the stop/diagnosis panels as widgets.
"""

from __future__ import annotations

import atexit
import functools
import shutil
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
from PySide6.QtCore import Qt, QTimer
from PySide6.QtGui import QKeySequence
from PySide6.QtWidgets import (
    QComboBox,
    QFrame,
    QGridLayout,
    QHBoxLayout,
    QLabel,
    QListWidget,
    QListWidgetItem,
    QMessageBox,
    QProgressBar,
    QPushButton,
    QSizePolicy,
    QSplitter,
    QStackedWidget,
    QVBoxLayout,
    QWidget,
)

from traindeck.backend.remote.runs import RemoteRuns, in_source
from traindeck.backend.runs import watch
from traindeck.backend.runs.diagnosis import MEMORY_WORDS
from traindeck.backend.runs.series import BoundedSeries
from traindeck.backend.runs.store import RunEvent, RunRecord, RunStore
from traindeck.backend.runs.watched import STOPPED_TRACEBACK_NOTE, ViewChange, WatchedRun
from traindeck.gui.context import AppContext
from traindeck.gui.pages.base import Page
from traindeck.gui.theme import set_muted
from traindeck.gui.widgets.charts import TimeSeriesChart
from traindeck.gui.widgets.console import LogConsole
from traindeck.gui.widgets.run_state import badge_style, panel_style, state_icon

POLL_MS = 1000  # the open run: record, events, metrics
POLL_MAX_MS = 4000  # ... backing off (doubling) while nothing changes
# Charts are redrawn for what the screen can show: at most every CHART_MS, and only once the new points reach a
# new pixel column or leave the drawn value range, or CHART_MAX_MS passed (the legend's latest value). Late in a
# long run a pixel column is minutes of steps: a redraw every poll moved nothing on screen and cost ~8 ms.
CHART_MS = 3000
CHART_MAX_MS = 30_000
HIDDEN_POLL_MS = 10_000  # ... while the page is hidden or the window minimised: data only, nothing drawn
LIST_MS = 2000  # the list of runs (and marking runs whose supervisor is gone as lost)
STOP_GRACE_S = 10.0
MAX_METRICS_SHOWN = 14
_RUN_ID = Qt.ItemDataRole.UserRole


def _panel(name: str) -> tuple[QFrame, QVBoxLayout]:
    frame = QFrame()
    frame.setObjectName(name)
    layout = QVBoxLayout(frame)
    layout.setContentsMargins(10, 6, 10, 6)
    layout.setSpacing(2)
    frame.setVisible(False)
    return frame, layout


def _label(text: str = "", *, selectable: bool = False, wrap: bool = False, bold: bool = False) -> QLabel:
    label = QLabel(text)
    if selectable:
        label.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
    label.setWordWrap(wrap)
    if bold:
        font = label.font()
        font.setBold(True)
        label.setFont(font)
    return label


class RunsPage(Page):
    key = "runs"
    title = "Runs"
    order = 30

    def __init__(self, ctx: AppContext):
        super().__init__(ctx)
        self.confirm_stop = True  # ask before stopping (tests of the stop itself turn this off)
        self._store_path: Path | None = None  # None: the user's run store; load_demo() uses a store of its own
        self.remote: RemoteRuns | None = None  # another machine's runs instead (use_source; gui/remote_connect.py)
        self._stores: dict[Path | None, RunStore] = {}  # by path; opened and used on worker threads only
        self._store_lock = threading.Lock()
        self._mark_lost = True
        self._demo_dir: str | None = None
        self._closing = False
        self._listed: list[tuple[str, str, str, str, bool]] = []  # what the run list shows (see _fill_list)

        # The watched run's state (what was read, what is on its way, the stop story) lives in a model without
        # widgets (backend/runs/watched.py, tested on its own); this page draws it.
        self.watched = WatchedRun()
        self.records: list[RunRecord] = []
        self._listing = False
        self._opened_by_user = False
        # What the page has drawn (the series themselves are the model's, watched.series): drawn only while
        # the page is on screen, and only when the screen would change.
        self._undrawn: set[str] = set()  # series changed since last drawn
        self._drawn: set[str] = set()  # series in a chart (one not yet drawn is drawn at once)
        self._drawn_extent: dict[str, tuple[float, float, float]] = {}  # name: (last x, low, high) when drawn
        # A chart zoomed into the folded (reduced) part of a series: that range re-read from the store at full
        # resolution, {name: (low, high, points)}; dropped when the chart follows the newest data again.
        self._detail: dict[str, tuple[float, float, BoundedSeries]] = {}
        self._stale = False  # news arrived while off screen: shown on return
        self._drawn_at = 0.0  # monotonic time the charts were last drawn
        self._metric_labels: dict[str, QLabel] = {}

        self._build()
        ctx.open_run.connect(self.open_run)
        ctx.run_started.connect(self.open_run)  # opening the same run twice does nothing

        self.poll_timer = QTimer(self)
        self.poll_timer.setInterval(POLL_MS)
        self.poll_timer.timeout.connect(self.poll)
        self.list_timer = QTimer(self)
        self.list_timer.setInterval(LIST_MS)
        self.list_timer.timeout.connect(self._list_tick)
        self.list_timer.start()
        self.clock_timer = QTimer(self)
        self.clock_timer.setInterval(1000)
        self.clock_timer.timeout.connect(self._update_duration)
        self.clock_timer.start()
        self.refresh_list(reattach=True)

    # ================================================================================================ layout
    def _build(self) -> None:
        self.run_list = QListWidget()
        self.run_list.setObjectName("runList")
        self.run_list.setMinimumWidth(200)
        self.run_list.setMaximumWidth(320)
        self.run_list.setSpacing(1)
        self.run_list.setTextElideMode(Qt.TextElideMode.ElideRight)
        self.run_list.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self.run_list.currentItemChanged.connect(self._item_chosen)

        # -- header: name, state, duration, stop -----------------------------------------------------------
        self.name_label = _label(bold=True, selectable=True)
        font = self.name_label.font()
        font.setPointSizeF(font.pointSizeF() * 1.35)
        self.name_label.setFont(font)
        self.state_badge = QLabel()
        self.duration_label = _label()
        self.duration_label.setToolTip("How long the run has been running (or ran)")
        self.stop_button = QPushButton("Stop")
        self.stop_button.setShortcut(QKeySequence("Ctrl+."))
        self.stop_button.setToolTip("Stop the run gracefully (Ctrl+.): SIGINT to every process, SIGTERM after "
                                    f"{STOP_GRACE_S:g} s, SIGKILL if anything is still running after that")
        self.stop_button.clicked.connect(lambda: self.stop_run())
        self.force_button = QPushButton("Force stop")
        self.force_button.setToolTip("Kill every process of the run now (SIGKILL): nothing gets to save or clean up")
        self.force_button.clicked.connect(lambda: self.force_stop())
        self.stacks_button = QPushButton("Stacks")
        self.stacks_button.setToolTip("Dump every rank's Python stack (all threads) without stopping the run, and "
                                      "see which rank is not where the others are (a hang)")
        self.stacks_button.clicked.connect(lambda: self.take_stacks())
        self.last_stacks: Any = None  # the last StackReport taken from this page
        self.stacks_box: QMessageBox | None = None
        header = QHBoxLayout()
        header.addWidget(self.name_label)
        header.addWidget(self.state_badge)
        header.addWidget(self.duration_label)
        header.addStretch(1)
        header.addWidget(self.stacks_button)
        header.addWidget(self.stop_button)
        header.addWidget(self.force_button)
        self.meta_label = _label(selectable=True)
        self.meta_label.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Preferred)
        set_muted(self.meta_label)

        # -- progress -----------------------------------------------------------------------------------------
        self.progress_bar = QProgressBar()
        self.progress_bar.setRange(0, 1000)
        self.progress_bar.setTextVisible(False)
        self.progress_bar.setFixedHeight(14)
        self.progress_label = _label()
        self.progress_label.setMinimumWidth(260)
        progress = QHBoxLayout()
        progress.addWidget(self.progress_bar, 1)
        progress.addWidget(self.progress_label)

        # -- banners: stall, stop escalation, diagnosis -------------------------------------------------------
        self.stall_panel, stall_layout = _panel("stallPanel")
        self.stall_panel.setStyleSheet(panel_style("warning", "stallPanel"))
        self.stall_label = _label(wrap=True, selectable=True)
        stall_layout.addWidget(self.stall_label)
        self.stop_panel, stop_layout = _panel("stopPanel")
        self.stop_panel.setStyleSheet(panel_style("info", "stopPanel"))
        self.stop_title = _label("Stopping", bold=True)
        self.stop_label = _label(selectable=True, wrap=True)
        stop_layout.addWidget(self.stop_title)
        stop_layout.addWidget(self.stop_label)
        self.diagnosis_panel, diagnosis_layout = _panel("diagnosisPanel")
        self.diagnosis_summary = _label(wrap=True, selectable=True, bold=True)
        self.diagnosis_evidence = _label(wrap=True, selectable=True)
        self.diagnosis_advice = _label(wrap=True, selectable=True)
        for widget in (self.diagnosis_summary, self.diagnosis_evidence, self.diagnosis_advice):
            diagnosis_layout.addWidget(widget)

        # -- console and charts -------------------------------------------------------------------------------
        self.console = LogConsole()
        self.loss_chart = self._make_chart("Loss")
        self.other_box = QComboBox()
        self.other_box.setToolTip("The metric shown in the second chart")
        self.other_box.setPlaceholderText("other metrics appear here as the run reports them")
        self.other_box.currentIndexChanged.connect(self._other_chosen)
        self.other_chart = self._make_chart("Metric")
        other = QWidget()
        other_layout = QVBoxLayout(other)
        other_layout.setContentsMargins(0, 0, 0, 0)
        other_layout.setSpacing(2)
        other_layout.addWidget(self.other_box)
        other_layout.addWidget(self.other_chart, 1)
        self._other_layout = other_layout
        self.metrics_grid = QGridLayout()
        self.metrics_grid.setVerticalSpacing(2)
        metrics_box = QWidget()
        metrics_outer = QVBoxLayout(metrics_box)
        metrics_outer.setContentsMargins(4, 0, 0, 0)
        metrics_outer.addWidget(_label("Last metrics", bold=True))
        metrics_outer.addLayout(self.metrics_grid)
        metrics_outer.addStretch(1)
        metrics_box.setMinimumWidth(170)
        charts = QWidget()
        charts_layout = QHBoxLayout(charts)
        charts_layout.setContentsMargins(0, 0, 0, 0)
        charts_layout.addWidget(self.loss_chart, 1)
        charts_layout.addWidget(other, 1)
        charts_layout.addWidget(metrics_box)
        self._charts_layout = charts_layout
        self.splitter = QSplitter(Qt.Orientation.Vertical)
        self.splitter.addWidget(self.console)
        self.splitter.addWidget(charts)
        self.splitter.setStretchFactor(0, 3)
        self.splitter.setStretchFactor(1, 2)
        self.splitter.setChildrenCollapsible(False)
        self.splitter.setSizes([600, 300])  # the console gets most of the height

        run_view = QWidget()
        view_layout = QVBoxLayout(run_view)
        view_layout.setContentsMargins(8, 4, 4, 4)
        view_layout.addLayout(header)
        view_layout.addWidget(self.meta_label)
        view_layout.addLayout(progress)
        view_layout.addWidget(self.stall_panel)
        view_layout.addWidget(self.diagnosis_panel)
        view_layout.addWidget(self.stop_panel)
        view_layout.addWidget(self.splitter, 1)

        empty = QWidget()
        empty_layout = QVBoxLayout(empty)
        empty_layout.addStretch(1)
        self.empty_label = _label("No run is open.\nLaunch one on the Launch page, or pick one from the list.",
                                  wrap=True)
        self.empty_label.setAlignment(Qt.AlignmentFlag.AlignCenter)
        empty_layout.addWidget(self.empty_label)
        launch = QPushButton("Go to Launch")
        launch.clicked.connect(lambda: self.ctx.navigate.emit("launch"))
        empty_layout.addWidget(launch, 0, Qt.AlignmentFlag.AlignHCenter)
        empty_layout.addStretch(2)

        self.views = QStackedWidget()
        self.views.addWidget(empty)
        self.views.addWidget(run_view)
        split = QSplitter()
        split.addWidget(self.run_list)
        split.addWidget(self.views)
        split.setStretchFactor(1, 1)
        split.setSizes([250, 1000])
        split.setChildrenCollapsible(False)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addWidget(split)

    # The watched run, as the page's callers and tests know it.
    @property
    def run_id(self) -> str | None:
        return self.watched.run_id

    @property
    def record(self) -> RunRecord | None:
        return self.watched.record

    @property
    def events(self) -> list[RunEvent]:
        return self.watched.events

    @property
    def stop_lines(self) -> list[str]:
        return self.watched.stop_lines

    @property
    def remaining(self) -> list[int] | None:
        return self.watched.remaining

    @property
    def _other_name(self) -> str | None:
        return self.watched.other

    # ================================================================================================ store calls
    def _call(self, fn: Callable[..., Any], *args: Any, done: Callable[[Any], None] | None = None,
              failed: Callable[[str], None] | None = None, **kwargs: Any) -> None:
        """fn(store, *args) on a worker thread, with the page's store connection (opened there on first use)."""
        self.ctx.tasks.run(self._in_store, self._where(), fn, *args, done=done,
                           failed=failed or self._report_failure, **kwargs)

    def _where(self) -> Path | RemoteRuns | None:
        return self.remote if self.remote is not None else self._store_path

    def _in_store(self, path: Path | RemoteRuns | None, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        if isinstance(path, RemoteRuns):  # the remote machine's counterpart of the same call, over SSH
            return in_source(path, fn, *args, **kwargs)
        # The lock is never taken on the UI thread: opening a store may wait for SQLite's write lock.
        with self._store_lock:
            store = self._stores.get(path)
            if store is None:
                store = self._stores[path] = RunStore(path)
        return fn(store, *args, **kwargs)

    def _close_stores(self) -> None:
        with self._store_lock:
            stores, self._stores = list(self._stores.values()), {}
        for store in stores:
            store.close()

    def _report_failure(self, text: str) -> None:
        if not self._closing:
            self.ctx.status.emit(f"Runs: {text.splitlines()[0] if text else 'failed'}")

    # ================================================================================================ the list
    def refresh_list(self, reattach: bool = False) -> None:
        if self._listing:
            return
        self._listing = True
        path = self._where()
        self._call(watch.runs_for_list, mark_lost=self._mark_lost,
                   done=lambda records: self._list_arrived(records, reattach, path),
                   failed=self._list_failed)

    def _list_tick(self) -> None:
        if self.on_screen():
            self.refresh_list()

    def _list_failed(self, text: str) -> None:
        self._listing = False
        self._report_failure(text)

    def _list_arrived(self, records: list[RunRecord], reattach: bool, path: Path | RemoteRuns | None) -> None:
        self._listing = False
        if self._closing:
            return
        if path is not self._where() and path != self._where():  # read from the store used before load_demo(): ask the current one
            self.refresh_list(reattach)
            return
        self.records = records
        self._fill_list(records)
        if reattach and self.run_id is None and not self._opened_by_user:
            newest = watch.newest_running(records)
            if newest is not None:
                self._open(newest.id, by_user=False)  # reattach: the window was closed while it ran

    def _fill_list(self, records: list[RunRecord]) -> None:
        shown = [(r.id, r.state, self._list_text(r), r.state_detail, r.id == self.run_id) for r in records]
        if shown == self._listed:
            return  # every 2 s: rebuilding an unchanged list cost a relayout and a repaint each time
        self._listed = shown
        box = self.run_list
        box.blockSignals(True)
        try:
            box.clear()
            running = [r for r in records if r.state == "running"]
            others = [r for r in records if r.state != "running"]
            for title, group in (("Running", running), ("Recent", others)):
                if not group:
                    continue
                header = QListWidgetItem(title.upper())
                header.setFlags(Qt.ItemFlag.NoItemFlags)
                font = header.font()
                font.setBold(True)
                font.setPointSizeF(font.pointSizeF() * 0.85)
                header.setFont(font)
                box.addItem(header)
                for record in group:
                    item = QListWidgetItem(state_icon(record.state), self._list_text(record))
                    item.setData(_RUN_ID, record.id)
                    item.setToolTip(f"{record.id}\n{record.state}"
                                    + (f": {record.state_detail}" if record.state_detail else ""))
                    box.addItem(item)
                    if record.id == self.run_id:
                        box.setCurrentItem(item)
        finally:
            box.blockSignals(False)

    def _update_list_item(self, record: RunRecord) -> None:
        for row in range(self.run_list.count()):
            item = self.run_list.item(row)
            if item.data(_RUN_ID) == record.id:
                item.setText(self._list_text(record))
                item.setIcon(state_icon(record.state))

    @staticmethod
    def _list_text(record: RunRecord) -> str:
        when = time.localtime(record.started_at or record.created_at)
        # Today's runs by the hour only: the list is narrow, and "since Nov 24 02:…" was cut off.
        started = time.strftime("%H:%M" if when[:3] == time.localtime()[:3] else "%b %d %H:%M", when)
        if record.state == "running":
            progress = watch.progress_text(record.progress)
            done = f" · {100 * progress.fraction:.0f}%" if progress is not None and progress.fraction is not None else ""
            detail = f"running{done} · since {started}"
        else:
            detail = f"{record.state} · {watch.duration_text(watch.run_duration(record))} · {started}"
        return f"{record.name or record.id}\n{detail}"

    def _item_chosen(self, current: QListWidgetItem | None, _previous: QListWidgetItem | None) -> None:
        if current is not None and current.data(_RUN_ID):
            self._open(str(current.data(_RUN_ID)), by_user=True)

    # ================================================================================================ one run
    def open_run(self, run_id: str) -> None:
        """Show this run (ctx.open_run, ctx.run_started, a click in the list)."""
        self._open(run_id, by_user=True)

    def _open(self, run_id: str, by_user: bool, poll: bool = True) -> None:
        self._opened_by_user = self._opened_by_user or by_user
        if not self.watched.open(run_id):
            return
        self._undrawn = set()
        self._drawn = set()
        self._drawn_extent = {}
        self._detail = {}
        self._stale = False
        self.console.close_log()
        self._new_loss_chart()
        self._set_other(None)
        self.other_box.blockSignals(True)
        self.other_box.clear()
        self.other_box.blockSignals(False)
        self._fill_metrics({})
        for panel in (self.stall_panel, self.stop_panel, self.diagnosis_panel):
            panel.setVisible(False)
        self.name_label.setText(run_id)
        self.state_badge.clear()
        self.meta_label.clear()
        self.progress_label.clear()
        self.progress_bar.setValue(0)
        self.stop_button.setVisible(False)
        self.force_button.setVisible(False)
        self.stacks_button.setVisible(False)
        self.views.setCurrentIndex(1)
        for row in range(self.run_list.count()):
            item = self.run_list.item(row)
            if item.data(_RUN_ID) == run_id:
                self.run_list.blockSignals(True)
                self.run_list.setCurrentItem(item)
                self.run_list.blockSignals(False)
        if poll:
            self.poll()
        self.poll_timer.start()
        if not any(r.id == run_id for r in self.records):
            self.refresh_list()  # just launched: not in the list yet

    def poll(self) -> None:
        """Ask for the open run's news (the timer calls this every POLL_MS)."""
        if self._closing:
            return
        generation = self.watched.begin_poll()
        if generation is None:
            return  # nothing open, or a read is on its way (another follows it)
        arguments = self.watched.read_arguments()
        self._call(watch.read_view, self.run_id, **arguments,
                   done=lambda view: self._view_arrived(generation, view),
                   failed=lambda text: self._view_failed(generation, text))

    def _view_failed(self, generation: int, text: str) -> None:
        self.watched.poll_failed(generation)
        self._report_failure(text)

    def _view_arrived(self, generation: int, view: watch.RunView | None) -> None:
        if self._closing:
            return
        change = self.watched.apply(generation, view)
        if change is None:
            if self.watched.current(generation) and view is None:
                self.poll_timer.stop()
                self.name_label.setText(f"{self.run_id}: no such run")
            return  # or about a run no longer open
        record = change.record
        if change.first:
            self.console.open_log(record.log_path, ended=record.finished)
            self.console.set_paused(not self.on_screen())
        self._update_metrics(change)
        if self.on_screen():
            self._show_run_state()
        else:
            self._stale = True  # drawn when the page is back on screen
        self._pace_polling(change.news)
        if change.ended_now:
            self.console.run_ended()
        if change.done:
            self.poll_timer.stop()  # nothing more will change
        if change.poll_again:
            QTimer.singleShot(0, self.poll)

    def _pace_polling(self, changed: bool) -> None:
        """Poll often while the run reports and the page is seen; back off while nothing changes; rarely off screen."""
        if not self.on_screen():
            interval = HIDDEN_POLL_MS
        elif changed:
            interval = POLL_MS
        else:
            interval = min(POLL_MAX_MS, 2 * self.poll_timer.interval())
        if interval != self.poll_timer.interval():
            self.poll_timer.setInterval(interval)

    def _show_run_state(self) -> None:
        """Everything drawn from the state read so far (after each poll on screen, and on return to the screen)."""
        self._stale = False
        record = self.record
        if record is None:
            return
        self._show_record(record)
        self._show_stop_story()
        self._show_diagnosis(record)
        self._draw_series()
        if self.watched.metrics:
            self._fill_metrics(self.watched.metrics)
        elif record.finished:
            self._fill_metrics({}, empty="none recorded")

    def _back_on_screen(self) -> None:
        """The page is shown again or the window restored: draw what came meanwhile, then poll at the live pace."""
        if not self.on_screen():
            return
        self.console.set_paused(False)
        if self._stale:
            self._show_run_state()
            self._draw_series(force=True)
        self._update_duration()
        self.poll_timer.setInterval(POLL_MS)
        self.poll()

    def _off_screen(self) -> None:
        self.console.set_paused(True)
        self.poll_timer.setInterval(HIDDEN_POLL_MS)

    def showEvent(self, event: Any) -> None:  # noqa: N802
        super().showEvent(event)
        QTimer.singleShot(0, self._back_on_screen)  # after the show: on_screen() is true then

    def hideEvent(self, event: Any) -> None:  # noqa: N802
        super().hideEvent(event)
        if not event.spontaneous():  # another page shown (a minimised window comes through window_minimised)
            self._off_screen()

    def window_minimised(self, minimised: bool) -> None:
        if minimised:
            self._off_screen()
        else:
            self._back_on_screen()

    # ================================================================================================ showing
    def _show_record(self, record: RunRecord) -> None:
        self._update_list_item(record)  # the list's line from the same record as the header (same percent)
        self.name_label.setText(record.name or record.id)
        self.name_label.setToolTip(record.id)
        self.state_badge.setText(record.state)
        style = badge_style(record.state)
        if self.state_badge.styleSheet() != style:  # every poll: setting a style sheet re-polishes, even the same
            self.state_badge.setStyleSheet(style)
        self.state_badge.setToolTip(record.state_detail or record.state)
        parts = [record.id, record.launcher]
        if record.preset:
            parts.append(f"preset {record.preset}")
        parts.append(" ".join([record.script, *self._script_args(record)]).strip() or "-")
        self.meta_label.setText(" · ".join(parts))
        self.meta_label.setToolTip(" ".join(record.argv))
        self._update_duration()
        running = record.state == "running"
        stopping = running and (record.stop_requested_at is not None or self.watched.stop_pending)
        self.stop_button.setVisible(running)
        self.force_button.setVisible(running)
        self.stacks_button.setVisible(running and self.remote is None)  # stacks: not over SSH yet
        self.stop_button.setEnabled(running and not stopping)
        self.stop_button.setText("Stopping…" if stopping else "Stop")
        self._show_progress(record)
        stall = watch.stall_warning(record)
        build = watch.op_build_note(record)
        self.stall_panel.setVisible(stall is not None or build is not None)
        if build is not None:  # not a hang: a first use compiles ops for minutes, often without a line of output
            self.stall_label.setText(f"⚙ {build[0].upper()}{build[1:]}: not a hang; the run goes on by itself "
                                     "once they are built (kept for later runs).")
        elif stall is not None:
            self.stall_label.setText(f"⚠ The run looks stalled: {stall.removeprefix('stalled: ')}. It may be "
                                     "waiting on another rank (a hang) or on slow I/O; the console shows its last "
                                     "output.")

    @staticmethod
    def _script_args(record: RunRecord) -> list[str]:
        if record.script and record.script in record.argv:
            return record.argv[record.argv.index(record.script) + 1:]
        return []

    def _update_duration(self) -> None:
        if not self.on_screen() and self.record is not None:
            return  # the clock ticks every second: nobody sees it now (updated on return)
        record = self.record
        if record is None:
            self.duration_label.clear()
            return
        seconds = watch.run_duration(record)
        verb = "running for" if record.state == "running" else "ran"
        self.duration_label.setText(f"{verb} {watch.duration_text(seconds)}" if seconds is not None else "")

    def _show_progress(self, record: RunRecord) -> None:
        text = watch.progress_text(record.progress)
        bar = self.progress_bar
        if text is None:
            if record.state == "running":
                bar.setRange(0, 0)  # busy: no progress reported (yet)
                self.progress_label.setText("no progress reported yet")
            else:
                bar.setRange(0, 1000)
                bar.setValue(0)
                self.progress_label.setText("no progress was reported")
            return
        bar.setRange(0, 1000)
        if text.fraction is None:
            bar.setRange(0, 0) if record.state == "running" else bar.setValue(1000)
        else:
            bar.setValue(int(1000 * text.fraction))
        self.progress_label.setText(text.line() if record.state == "running" else text.count
                                    + (f" ({100 * text.fraction:.0f}%)" if text.fraction is not None else "")
                                    + (f" · {text.rate}" if text.rate else ""))

    def _show_diagnosis(self, record: RunRecord) -> None:
        diagnosis = record.diagnosis
        if not record.finished or not diagnosis or (record.state == "stopped" and not self.stop_panel.isHidden()):
            self.diagnosis_panel.setVisible(False)  # a stop we watched: the stop story says it all
            return
        kind = record.state if record.state in ("failed", "lost", "stopped") else "info"
        self.diagnosis_panel.setStyleSheet(panel_style(kind, "diagnosisPanel"))
        prefix = {"failed": "Failed: ", "lost": "Lost: "}.get(record.state, "")
        self.diagnosis_summary.setText(prefix + str(diagnosis.get("summary", "")))
        summary_font = self.diagnosis_summary.font()
        summary_font.setPointSizeF(self.font().pointSizeF() * (1.15 if record.state == "failed" else 1.0))
        self.diagnosis_summary.setFont(summary_font)
        evidence = [str(e) for e in diagnosis.get("evidence") or []]
        follow_ons = [str(e) for e in diagnosis.get("follow_ons") or []]
        text = "\n".join(f"• {e}" for e in evidence)
        memory = MEMORY_WORDS.get(str(diagnosis.get("memory") or ""))
        if memory:
            text = f"Out of: {memory}\n" + text
        if follow_ons:  # what failed after the cause, because of it
            text += ("\n" if text else "") + "Then (consequences, not the cause):\n" + "\n".join(f"• {e}" for e in follow_ons)
        self.diagnosis_evidence.setText(text)
        self.diagnosis_evidence.setVisible(bool(text))
        advice = str(diagnosis.get("advice") or "")
        if record.state == "stopped":
            evidence.append(STOPPED_TRACEBACK_NOTE)
            self.diagnosis_evidence.setText("\n".join(f"• {e}" for e in evidence))
            self.diagnosis_evidence.setVisible(True)
        self.diagnosis_advice.setText(f"What to do: {advice}" if advice else "")
        self.diagnosis_advice.setVisible(bool(advice))
        self.diagnosis_panel.setVisible(True)

    def _show_stop_story(self) -> None:
        """The stop as it happens: our request, the supervisor's signals, and whether anything remains."""
        story = self.watched.stop_story()
        if story is None:
            return
        title, lines = story
        self.stop_title.setText(title)
        self.stop_label.setText("\n".join(lines))
        self.stop_panel.setVisible(True)

    # ================================================================================================ metrics
    def _update_metrics(self, change: ViewChange) -> None:
        if change.other_changed:
            self._new_other_chart()
        if change.names_changed:
            _losses, others = watch.chart_names(self.watched.metric_names)
            box = self.other_box
            box.blockSignals(True)
            box.clear()
            box.addItems(others)
            box.setEnabled(bool(others))
            box.setCurrentIndex(max(0, box.findText(self._other_name or "")))
            box.blockSignals(False)
        self._undrawn |= change.series
        # (the metric values are filled by _show_run_state, with the rest, while the page is on screen)

    def _draw_series(self, force: bool = False) -> None:
        """Hand the charts the series that changed: each a bounded set of points, whatever the run's length; at
        most every CHART_MS unless forced (a series newly shown, the page back on screen)."""
        wanted = set(self.watched.chart_series())
        now = time.monotonic()
        if not force and all(name in self._drawn for name in wanted if name in self.watched.series):
            since = now - self._drawn_at
            if since < CHART_MS / 1000 or (since < CHART_MAX_MS / 1000 and not any(
                    self._shows_more(name) for name in self._undrawn if name in wanted)):
                return
        self._drawn_at = now
        for name in sorted(self._undrawn):
            series = self.watched.series.get(name)
            if series is None or name not in wanted:
                continue
            xs, ys = series.points()
            if not xs:
                continue
            chart = self._chart_of(name)
            if series.x_is_time:
                chart.x_is_time = True
            x, y = np.frombuffer(xs, dtype=np.float64), np.frombuffer(ys, dtype=np.float64)
            detail = self._detail.get(name)
            if detail is not None:  # the zoomed range in full, the rest as held
                low, high, points = detail
                dx, dy = (np.frombuffer(a, dtype=np.float64) for a in points.points())
                before, after = x < low, x > high
                x = np.concatenate((x[before], dx, x[after]))
                y = np.concatenate((y[before], dy, y[after]))
            chart.set_series(name, x, y)
            self._drawn.add(name)
            if series.last_x is not None:
                self._drawn_extent[name] = (series.last_x, series.low, series.high)
        self._undrawn.clear()

    def _shows_more(self, name: str) -> bool:
        """Whether drawing the series now would change the chart: new points past the last pixel column drawn,
        or values outside the range drawn (the y axis is fitted to them)."""
        series, drawn = self.watched.series.get(name), self._drawn_extent.get(name)
        if series is None or drawn is None or series.last_x is None or series.first_x is None:
            return True
        last_x, low, high = drawn
        if series.low < low or series.high > high:
            return True
        span = series.last_x - series.first_x
        columns = max(1, self._chart_of(name).width())
        return span <= 0 or (series.last_x - last_x) * columns >= span

    def _chart_of(self, name: str) -> TimeSeriesChart:
        return self.loss_chart if "loss" in name.lower() else self.other_chart

    def _make_chart(self, title: str) -> TimeSeriesChart:
        chart = TimeSeriesChart(title, x_is_time=False)
        chart.x_range_chosen.connect(lambda low, high: self._zoomed(chart, low, high))
        chart.follow_resumed.connect(lambda: self._unzoomed(chart))
        return chart

    def _zoomed(self, chart: TimeSeriesChart, low: float, high: float) -> None:
        """The user zoomed or panned a chart: a range reaching into a series' folded part is read again from the
        store at full resolution (the page holds only min/max buckets of it)."""
        if chart is not self.loss_chart and chart is not self.other_chart:
            return  # replaced meanwhile
        generation = self.watched.generation
        for name, series in self.watched.series.items():
            if self._chart_of(name) is not chart or name not in self._drawn:
                continue
            first = series.first_recent_x
            if not series.folded or first is None or low >= first:
                if self._detail.pop(name, None) is not None:  # the held points cover this range whole
                    self._undrawn.add(name)
                continue
            self._call(watch.read_range, self.run_id, name, low, high, series.x_is_time,
                       done=functools.partial(self._detail_arrived, generation, name, low, high))
        self._draw_series(force=True)

    def _detail_arrived(self, generation: int, name: str, low: float, high: float, points: BoundedSeries) -> None:
        if generation != self.watched.generation or name not in self.watched.series or self._chart_of(name).following:
            return  # another run, series or zoom since
        self._detail[name] = (low, high, points)
        self._undrawn.add(name)
        self._draw_series(force=True)

    def _unzoomed(self, chart: TimeSeriesChart) -> None:
        for name in [n for n in self._detail if self._chart_of(n) is chart]:
            del self._detail[name]
            self._undrawn.add(name)
        self._draw_series(force=True)

    def _other_chosen(self, index: int) -> None:
        name = self.other_box.itemText(index) if index >= 0 else None
        if name and name != self._other_name:
            self._set_other(name)
            self.poll()

    def _set_other(self, name: str | None) -> None:
        """Show `name` in the second chart (a fresh chart: its title is the metric's name)."""
        if self._other_name is not None:  # the model forgets its points; the page what it drew of them
            self._drawn.discard(self._other_name)
            self._drawn_extent.pop(self._other_name, None)
            self._detail.pop(self._other_name, None)
            self._undrawn.discard(self._other_name)
        self.watched.set_other(name)
        self._new_other_chart()

    def _new_other_chart(self) -> None:
        chart = self._make_chart(self._other_name or "Metric")
        self._other_layout.replaceWidget(self.other_chart, chart)
        self.other_chart.hide()
        self.other_chart.deleteLater()
        self.other_chart = chart

    def _new_loss_chart(self) -> None:
        chart = self._make_chart("Loss")  # fresh: no axis range left from the previous run
        self._charts_layout.replaceWidget(self.loss_chart, chart)
        self.loss_chart.hide()  # at once: deleteLater() waits for the event loop
        self.loss_chart.deleteLater()
        self.loss_chart = chart

    def _fill_metrics(self, metrics: dict[str, float], empty: str = "none yet") -> None:
        shown = sorted(metrics.items())[:MAX_METRICS_SHOWN]
        if shown and [name for name, _ in shown] == list(self._metric_labels):
            for name, value in shown:  # the same series: new values only (this runs every poll)
                self._metric_labels[name].setText(f"{value:.4g}")
            return
        grid = self.metrics_grid
        while grid.count():
            item = grid.takeAt(0)
            widget = item.widget() if item is not None else None
            if widget is not None:
                widget.hide()  # at once: deleteLater() waits for the event loop
                widget.deleteLater()
        self._metric_labels = {}
        if not shown:
            grid.addWidget(_label(empty), 0, 0)
            return
        for row, (name, value) in enumerate(shown):
            key = _label(name)
            set_muted(key)
            grid.addWidget(key, row, 0)
            label = self._metric_labels[name] = _label(f"{value:.4g}", selectable=True)
            grid.addWidget(label, row, 1, Qt.AlignmentFlag.AlignRight)

    # ================================================================================================ stop
    def stop_run(self, force: bool = False) -> None:
        """Stop the open run (Ctrl+.): graceful, or SIGKILL now with force. Asks first unless confirm_stop is off."""
        record = self.record
        if record is None or record.state != "running":
            return
        if self.confirm_stop and not self._confirm(record, force):
            return
        self.watched.stop_asked(force, STOP_GRACE_S)
        self.stop_button.setEnabled(False)
        self.stop_button.setText("Stopping…")
        self._show_stop_story()
        generation = self.watched.generation
        fn = watch.force_stop if force else watch.request_stop
        args = (record.id,) if force else (record.id, STOP_GRACE_S)
        self._call(fn, *args, done=lambda _messages: self._stop_sent(generation),
                   failed=lambda text: self._stop_failed(generation, text))

    def force_stop(self) -> None:
        self.stop_run(force=True)

    def take_stacks(self) -> None:
        record = self.record
        if record is None or record.state != "running" or self.remote is not None:  # not over SSH (yet)
            return
        self.stacks_button.setEnabled(False)
        self.ctx.tasks.run(watch.take_stacks, record, done=self._show_stacks,
                           failed=lambda text: self._show_stacks(None, text))

    def _show_stacks(self, report: Any, error: str = "") -> None:
        from traindeck.backend.runs.stacks import report_text

        self.stacks_button.setEnabled(True)
        self.last_stacks = report
        box = QMessageBox(self)
        box.setWindowTitle("Stacks")
        box.setText(report.summary if report is not None else (error or "no living rank to dump (yet)"))
        if report is not None:
            box.setInformativeText("Every rank's stack, main thread first (kept as stacks.json in the run directory).")
            box.setDetailedText(report_text(report))
        box.setModal(False)
        box.show()
        self.stacks_box = box

    def _confirm(self, record: RunRecord, force: bool) -> bool:
        box = QMessageBox(self)
        box.setIcon(QMessageBox.Icon.Warning if force else QMessageBox.Icon.Question)
        box.setWindowTitle("Force stop" if force else "Stop run")
        box.setText(f"{'Kill' if force else 'Stop'} the run “{record.name or record.id}”?")
        box.setInformativeText(
            "Every process of the run gets SIGKILL now: nothing is saved, checkpoints being written are lost."
            if force else
            f"Every process gets SIGINT (the script may save and exit), SIGTERM after {STOP_GRACE_S:g} s, and "
            "SIGKILL if anything is still running after that.")
        yes = box.addButton("Force stop" if force else "Stop", QMessageBox.ButtonRole.DestructiveRole)
        box.addButton(QMessageBox.StandardButton.Cancel)
        box.setDefaultButton(QMessageBox.StandardButton.Cancel)
        box.exec()
        return box.clickedButton() is yes

    def _stop_sent(self, generation: int) -> None:
        if self.watched.current(generation):
            self.poll()

    def _stop_failed(self, generation: int, text: str) -> None:
        if not self.watched.stop_failed(generation, text):
            return
        self.stop_button.setEnabled(True)
        self.stop_button.setText("Stop")
        self._show_stop_story()

    # ================================================================================================ page hooks
    def page_shown(self) -> None:
        self.refresh_list()
        if self.run_id is not None:
            self.poll()

    def load_demo(self) -> None:
        """A run in progress and a few finished ones, in a store of their own (never the user's)."""
        from traindeck.backend.runs.demo_history import create_demo_runs
        from traindeck.backend.runs.demo_live import create_failed_demo, create_running_demo

        self._remove_demo_dir()
        self._demo_dir = tempfile.mkdtemp(prefix="traindeck-demo-runs-")
        atexit.register(shutil.rmtree, self._demo_dir, True)  # `gui --screenshot` quits without closing pages
        store_path = Path(self._demo_dir) / "runs.sqlite3"
        create_demo_runs(store_path, Path(self._demo_dir) / "runs")
        create_failed_demo(store_path, Path(self._demo_dir) / "runs")
        run_id = create_running_demo(store_path, Path(self._demo_dir) / "runs")
        self.use_store(store_path, mark_lost=False)  # demo runs have no supervisor: do not mark them lost
        self._open(run_id, by_user=True, poll=False)
        # Screenshots are grabbed right after this returns: read the demo's own store here (a private file, no
        # lock to wait for) and put everything on screen now instead of on the next timer ticks.
        for _ in range(2):  # the second read fetches the chart series the first one named
            generation = self.watched.begin_poll()
            assert generation is not None  # opened just above, nothing on its way
            arguments = self.watched.read_arguments()
            view = self._in_store(store_path, watch.read_view, run_id, **arguments)
            self._view_arrived(generation, view)
        self._show_run_state()  # also when the page is not on screen yet (screenshots grab it anyway)
        self.console.catch_up()
        self.loss_chart.flush()
        self.other_chart.flush()
        self.records = self._in_store(store_path, watch.runs_for_list, mark_lost=False)
        self._fill_list(self.records)

    def use_source(self, remote: RemoteRuns | None) -> None:
        """Show another machine's runs (None: this machine's again); closes the current run view."""
        self.use_store(None)
        self.remote = remote
        self.records, self._listed, self._opened_by_user = [], [], False
        self._fill_list([])
        self.views.setCurrentIndex(0)
        self.refresh_list(reattach=True)

    def use_store(self, path: Path | None, mark_lost: bool = True) -> None:
        """Read runs from another store (the demo's); closes the current run view."""
        self.watched.close()
        self.console.close_log()
        self.poll_timer.stop()
        self._store_path = path
        self._mark_lost = mark_lost

    def shutdown(self) -> None:
        self._closing = True
        for timer in (self.poll_timer, self.list_timer, self.clock_timer):
            timer.stop()
        self.console.close_log()
        self.ctx.tasks.run(self._close_stores)
        self._remove_demo_dir()

    def _remove_demo_dir(self) -> None:
        if self._demo_dir:
            shutil.rmtree(self._demo_dir, ignore_errors=True)
            self._demo_dir = None

    # ================================================================================================ tests
    def state_text(self) -> str:
        return self.state_badge.text()


PAGE = RunsPage
