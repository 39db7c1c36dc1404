"""The run view: a list of runs (running first) and the open run's console, progress, charts, step anatomy, stop and
diagnosis.

Everything the page shows is read off the UI thread: the run store through `ctx.tasks` (the open run every POLL_MS,
the list every LIST_MS), the log by the console's own reading thread. Opening the page while runs are running shows
the newest one and follows it: closing and reopening the window reattaches to a run, which never noticed either.

The page is an assembly of panels, each owning its widgets and state and given the models it reads: the watched
run (WatchedRun, backend/runs/control/watched_run.py, without widgets) and where runs are read from (RunsSource,
source.py). The page owns the timing: when to poll, when to draw what the polls read (on its 1 s clock, at once for
news that cannot wait, nothing while off screen, a catch-up on return), and hands each panel its part.

The console and the tabs below it (charts first) share the height: the tabs get CHARTS_SHARE of it once the run
has metrics, unless the person moved the divider (remembered, SPLITTER_KEY); Ctrl+Shift+M gives the tabs the whole
height and back. The page's keys (KEYS, listed by F1) reach the tabs and the charts' options without the mouse.
"""

from __future__ import annotations

import atexit
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from PySide6.QtCore import QByteArray, Qt, QTimer
from PySide6.QtGui import QDragEnterEvent, QDropEvent, QKeySequence, QShortcut
from PySide6.QtWidgets import (
    QApplication,
    QPushButton,
    QSplitter,
    QStackedWidget,
    QVBoxLayout,
    QWidget,
)

from traindeck.backend.remote import RemoteRuns
from traindeck.backend.runs import STOPPED_TRACEBACK_NOTE, RunRecord, WatchedRun, rate_text  # noqa: F401 (the note: tests read it here)
from traindeck.backend.runs.control import view as watch
from traindeck.gui.context import AppContext
from traindeck.gui.pages.base import Page
from traindeck.gui.pages.runs.charts_panel import ChartsPanel
from traindeck.gui.pages.runs.header import RunHeader
from traindeck.gui.pages.runs.leftovers_panel import CheckpointsTab
from traindeck.gui.pages.runs.log_diagnosis import LogDiagnosisDialog
from traindeck.gui.pages.runs.nodes_panel import NodesTable
from traindeck.gui.pages.runs.run_list import RunList
from traindeck.gui.pages.runs.source import RunsSource, create_demo_store
from traindeck.gui.pages.runs.step_panel import StepPanel
from traindeck.gui.pages.runs.stop_panel import DiagnosisPanel, StopPanel
from traindeck.gui.pages.runs.tabs import RunTabs
from traindeck.gui.polling import Poller
from traindeck.gui.widgets.console import LogConsole
from traindeck.gui.widgets.labels import label as _label

# The open run: record, events, metrics. Every 2 s, like nvitop's refresh: at 1 s the reads and what they redraw
# take about a fifth of the window's CPU watching a 50 lines/s run (py-spy on tests/perf/bench_gui_soak.py); the
# console and the run's clock still move every second.
POLL_MS = 2000
POLL_MAX_MS = 4000  # ... backing off (doubling) while nothing changes
HIDDEN_POLL_MS = 10_000  # ... while the page is hidden or the window minimised: data only, nothing drawn
LIST_MS = 2000  # the list of runs (and marking runs whose supervisor is gone as lost)
WRAP_KEY = "runs/console_wrap"  # in the app's settings: whether the console wraps long lines
SPLITTER_KEY = "runs/splitter"  # the console's and the tabs' heights, as the person left them
CHARTS_SHARE = 0.55  # the tabs' share of the height once the run has metrics (until the divider is moved)
MAXIMISE_KEY = "Ctrl+Shift+M"
# The page's keys: the window's (they work right after Ctrl+3, wherever the focus is); Qt ignores a hidden page's,
# so other pages may use the same keys. F1 lists them (main_window.SHORTCUTS).
KEYS = ("Alt+C", "Alt+K", "Alt+S", "Alt+B", "Alt+O", "Alt+A", "Alt+Y", "Alt+M", "Alt+L", "Alt+X", "Alt+End",
        MAXIMISE_KEY)


def _true(value: object) -> bool:
    """A boolean read back from QSettings (an INI file gives the string "true")."""
    return value is True or str(value).lower() == "true"


class RunsPage(Page):
    key = "runs"
    title = "Runs"
    order = 30

    def __init__(self, ctx: AppContext) -> None:
        super().__init__(ctx)
        self.source = RunsSource(ctx)  # where the runs are read from, shared with the panels that read them
        self.watched = WatchedRun()  # what was read of the open run, what is on its way, the stop story
        self._demo_dir: str | None = None
        self._opened_by_user = False  # the user asked for a run: reattaching opens none of its own
        self._stale = False  # news arrived while off screen: shown on return
        self._catch_up = False  # back on screen: the next view read is drawn at once, charts included

        self._build()
        ctx.open_run.connect(self.open_run)
        ctx.run_started.connect(self.open_run)  # opening the same run twice does nothing

        self.poller = Poller(self, self.poll, live_ms=POLL_MS, max_ms=POLL_MAX_MS, hidden_ms=HIDDEN_POLL_MS)
        self.poll_timer = self.poller.timer
        self.list_timer = QTimer(self)
        self.list_timer.setInterval(LIST_MS)
        self.list_timer.timeout.connect(self._list_tick)
        self.list_timer.start()
        # The page's clock: once a second it moves the run's duration, draws what the last poll read and (through
        # follow_clock) applies the console's stream, in one pass: 3.2 repaint cycles of the window a second watching
        # a 50 lines/s run, against 5.8 drawing each as it arrives (bench_gui_soak --paints, with SteadyLabel; the
        # progress bar's own immediate repaint still splits a pass in two).
        self.clock_timer = QTimer(self)
        self.clock_timer.setInterval(1000)
        self.clock_timer.timeout.connect(self._clock_tick)
        self.console.follow_clock(self.clock_timer.timeout)
        self.clock_timer.start()
        self.run_list.refresh(reattach=True)

    # ================================================================================================ layout
    def _build(self) -> None:
        self.run_list = RunList(self.watched, self.source)
        self.run_list.chosen.connect(self.open_run)
        self.run_list.running_found.connect(self._reattach)

        # -- header (with the stop buttons), banners: stall, diagnosis, stop -------------------------------------
        self.stop_panel = StopPanel(self.ctx, self.watched, self.source, self)
        self.stop_panel.poll_wanted.connect(self.poll)
        self.header = RunHeader(self.stop_panel.header_widgets())
        self.diagnosis_panel = DiagnosisPanel()
        # -- console above the tabs: charts, checkpoints, step, nodes ---------------------------------------------
        self.console = LogConsole()
        self.console.set_wrap(_true(self.ctx.settings.value(WRAP_KEY, False)))  # the user's last choice
        self.console.wrap_changed.connect(lambda wrap: self.ctx.settings.setValue(WRAP_KEY, wrap))
        self.charts = ChartsPanel(self.watched, self.source)
        self.charts.poll_wanted.connect(self.poll)
        self.splitter = QSplitter(Qt.Orientation.Vertical)
        self.splitter.addWidget(self.console)
        self.leftovers = CheckpointsTab(self.ctx.tasks, self.watched, self.source)
        self.leftovers.message.connect(self.ctx.status.emit)
        self.leftovers.run_started.connect(self.ctx.run_started.emit)
        self.nodes_table = NodesTable(self.ctx.tasks, self.watched, self.source)
        self.step_panel = StepPanel(self.watched, self.source)
        self.lower_tabs = RunTabs(self.charts, self.leftovers, self.step_panel, self.nodes_table)
        self.lower_tabs.currentChanged.connect(lambda _index: self.leftovers.due(self.on_screen(), force=True))
        # The Step tab's table, verdict and bars need the room the charts get (a quiet script has no metrics).
        self.lower_tabs.currentChanged.connect(
            lambda index: self._give_charts_room() if index == self.lower_tabs.step_tab else None)
        self.leftovers.listed.connect(lambda _count, companion: self.stop_panel.set_companion(companion))
        self.stop_panel.save_now_asked.connect(self.leftovers.save_now)
        self.splitter.addWidget(self.lower_tabs)
        self.splitter.setStretchFactor(0, 3)
        self.splitter.setStretchFactor(1, 2)
        self.splitter.setChildrenCollapsible(False)
        state = self.ctx.settings.value(SPLITTER_KEY)
        # The divider as the person left it; else the console gets most of the height until metrics come.
        self._split_chosen = isinstance(state, QByteArray) and not state.isEmpty() and \
            self.splitter.restoreState(state)
        if not self._split_chosen:
            self.splitter.setSizes([600, 300])
        self._split_before_maximised: list[int] | None = None  # the tabs fill the height: the sizes to go back to
        self.splitter.splitterMoved.connect(lambda *_args: self._split_moved())

        run_view = QWidget()
        view_layout = QVBoxLayout(run_view)
        view_layout.setContentsMargins(8, 4, 4, 4)
        view_layout.addWidget(self.header)
        view_layout.addWidget(self.diagnosis_panel)
        view_layout.addWidget(self.stop_panel.story)
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
        diagnose = QPushButton("Diagnose a log…")
        diagnose.setToolTip("Why a job ended, from its log alone: a file, a paste, or a log dropped on this page "
                            "(Ctrl+Shift+L)")
        diagnose.clicked.connect(lambda: self.diagnose_log())
        empty_layout.addWidget(diagnose, 0, Qt.AlignmentFlag.AlignHCenter)
        empty_layout.addStretch(2)

        self.views = QStackedWidget()
        self.views.addWidget(empty)
        self.views.addWidget(run_view)
        # Under the list: the strategy trials (their candidates are runs in this list; the trial's table is not).
        self.trials_button = QPushButton("Trials…")
        self.trials_button.setToolTip("Strategy trials: how far each is, its results and winner")
        self.trials_button.clicked.connect(lambda: self.show_trials())
        left = QWidget()
        left_layout = QVBoxLayout(left)
        left_layout.setContentsMargins(0, 0, 0, 0)
        left_layout.addWidget(self.run_list.filter_box)
        left_layout.addWidget(self.run_list, 1)
        left_layout.addWidget(self.trials_button)
        split = QSplitter()
        split.addWidget(left)
        split.addWidget(self.views)
        split.setStretchFactor(1, 1)
        split.setSizes([250, 1000])
        split.setChildrenCollapsible(False)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addWidget(split)
        QShortcut(QKeySequence("Ctrl+Shift+L"), self, lambda: self.diagnose_log())
        self._add_keys()
        self.setAcceptDrops(True)  # a log file dropped here is diagnosed

    def _add_keys(self) -> None:
        """KEYS: the tabs, the Step tab's "Bars of" box, the charts' views and options, and the tabs' share of the
        height."""
        tabs, charts, step = self.lower_tabs, self.charts, self.step_panel

        def show_tab(panel: QWidget) -> Callable[[], None]:
            def show() -> None:
                if tabs.isTabEnabled(tabs.indexOf(panel)):  # (no Checkpoints tab for another machine's run)
                    tabs.setCurrentWidget(panel)
            return show

        def in_charts(action: Callable[[], object]) -> Callable[[], None]:
            def act() -> None:
                tabs.setCurrentWidget(charts)
                action()
            return act

        def bars_of() -> None:
            """The Step tab, with the focus in its "Bars of" box (whose rank: the arrow keys then choose)."""
            tabs.setCurrentWidget(step)
            step.rank_box.setFocus(Qt.FocusReason.ShortcutFocusReason)

        actions: dict[str, Callable[[], object]] = {
            "Alt+C": show_tab(charts),
            "Alt+K": show_tab(self.leftovers),
            "Alt+S": show_tab(step),
            "Alt+B": bars_of,
            "Alt+O": in_charts(charts.overview_button.click),
            "Alt+A": in_charts(charts.grid_button.click),
            "Alt+Y": in_charts(charts.system_button.click),
            "Alt+M": in_charts(lambda: charts.smoothing_slider.setFocus(Qt.FocusReason.ShortcutFocusReason)),
            "Alt+L": in_charts(charts.log_box.toggle),
            "Alt+X": in_charts(charts.next_x_mode),
            "Alt+End": in_charts(charts.follow_newest),
            MAXIMISE_KEY: self.toggle_maximised,
        }
        assert set(actions) == set(KEYS)
        self.shortcuts: dict[str, QShortcut] = {}
        for keys, action in actions.items():
            shortcut = self.shortcuts[keys] = QShortcut(QKeySequence(keys), self)
            shortcut.setContext(Qt.ShortcutContext.WindowShortcut)
            shortcut.activated.connect(action)
        tabs.setTabToolTip(0, "The run's metrics as charts (Alt+C; Alt+O overview, Alt+A all metrics, Alt+Y system; "
                              f"{MAXIMISE_KEY}: the tabs fill the height and back)")
        tabs.setTabToolTip(tabs.checkpoints_tab, "The run's checkpoints (Alt+K)")
        tabs.setTabToolTip(tabs.step_tab, f"{tabs.tabToolTip(tabs.step_tab)} (Alt+S; Alt+B: its Bars of box)")

    # ------------------------------------------------------------------------------------------ the divider
    def _split_moved(self) -> None:
        """The person moved the divider: kept, and remembered for the next start."""
        self._split_chosen = True
        self._split_before_maximised = None
        if self.console.isHidden():
            self.console.show()
        self.ctx.settings.setValue(SPLITTER_KEY, self.splitter.saveState())

    def _give_charts_room(self) -> None:
        """The run has metrics, or the person opened the Step tab: the tabs get CHARTS_SHARE of the height,
        unless the person chose the split."""
        if self._split_chosen or self._split_before_maximised is not None:
            return
        sizes = self.splitter.sizes()
        total = sum(sizes) or 900
        lower = round(total * CHARTS_SHARE)
        if sizes[1] < lower:
            self.splitter.setSizes([total - lower, lower])

    @property
    def maximised(self) -> bool:
        """Whether the tabs fill the height (the console hidden)."""
        return self._split_before_maximised is not None

    def toggle_maximised(self) -> None:
        """The tabs below the console fill the run view's height, or go back to the split they had."""
        if self._split_before_maximised is None:
            self._split_before_maximised = self.splitter.sizes()
            self.console.hide()
        else:
            sizes, self._split_before_maximised = self._split_before_maximised, None
            self.console.show()
            self.splitter.setSizes(sizes)

    def show_trials(self, trial_id: str | None = None) -> QWidget:
        """The trials window (the newest trial, or `trial_id`)."""
        from traindeck.gui.widgets.trial_results import TrialResults

        window = TrialResults(self.ctx, trial_id, parent=self)
        window.show()
        return window

    # ================================================================================================ any log
    def diagnose_log(self, path: str | None = None) -> LogDiagnosisDialog:
        """The "Diagnose a log" dialog, diagnosing `path` at once when given (a dropped file)."""
        dialog = LogDiagnosisDialog(self.ctx.tasks, self)
        dialog.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)
        dialog.show()
        if path:
            dialog.open_file(path)
        return dialog

    def dragEnterEvent(self, event: QDragEnterEvent) -> None:  # noqa: N802
        if any(url.isLocalFile() for url in event.mimeData().urls()):
            event.acceptProposedAction()

    def dropEvent(self, event: QDropEvent) -> None:  # noqa: N802
        files = [url.toLocalFile() for url in event.mimeData().urls() if url.isLocalFile()]
        if files:
            event.acceptProposedAction()
            self.diagnose_log(files[0])

    # ================================================================================================ the open run
    @property
    def run_id(self) -> str | None:
        return self.watched.run_id

    @property
    def record(self) -> RunRecord | None:
        return self.watched.record

    @property
    def remaining(self) -> list[int] | None:
        """The run's processes still alive after it ended (None: not asked yet)."""
        return self.watched.remaining

    @property
    def confirm_stop(self) -> bool:
        """Whether Stop asks first (tests of the stop itself turn this off)."""
        return self.stop_panel.confirm

    @confirm_stop.setter
    def confirm_stop(self, confirm: bool) -> None:
        self.stop_panel.confirm = confirm

    def stop_run(self, force: bool = False) -> None:
        """Stop the open run: graceful, or SIGKILL now with force (asks first unless confirm_stop is off)."""
        self.stop_panel.stop(force)

    def open_run(self, run_id: str) -> None:
        """Show this run (ctx.open_run, ctx.run_started, a click in the list)."""
        self._open(run_id, by_user=True)

    def _list_tick(self) -> None:
        if self.on_screen():
            self.run_list.refresh()

    def _reattach(self, run_id: str) -> None:
        """The newest running run, found by the first look at the runs: opened unless one was asked for."""
        if self.run_id is None and not self._opened_by_user:
            self._open(run_id, by_user=False)  # the window was closed while it ran

    def _open(self, run_id: str, by_user: bool, poll: bool = True) -> None:
        self._opened_by_user = self._opened_by_user or by_user
        if not self.watched.open(run_id):
            return
        self._stale = False
        self._catch_up = False
        self.console.close_log()
        self.charts.open_run()
        self.diagnosis_panel.setVisible(False)
        self.stop_panel.open_run()
        self.header.open_run(run_id)
        self.lower_tabs.open_run(remote=self.source.remote is not None)
        self.leftovers.open_run(run_id)
        self.nodes_table.open_run()
        self.step_panel.open_run()
        self.views.setCurrentIndex(1)
        self.run_list.select(run_id)
        if poll:
            self.poll()
        self.poller.start()
        if not self.run_list.has(run_id):
            self.run_list.refresh()  # just launched: not in the list yet

    def poll(self) -> None:
        """Ask for the open run's news (the poller calls this at its pace)."""
        if self.source.closing:
            return
        generation = self.watched.begin_poll()
        if generation is None:
            return  # nothing open, or a read is on its way (another follows it)
        arguments = self.watched.read_arguments()
        self.source.call(watch.read_view, self.run_id, **arguments,
                   done=lambda view: self._view_arrived(generation, view),
                   failed=lambda text: self._view_failed(generation, text))

    def _view_failed(self, generation: int, text: str) -> None:
        self.watched.poll_failed(generation)
        self.source.report_failure(text)

    def _view_arrived(self, generation: int, view: watch.RunView | None) -> None:
        if self.source.closing:
            return
        change = self.watched.apply(generation, view)
        if change is None:
            if self.watched.current(generation) and view is None:
                self.poller.stop()
                self.header.no_such_run(str(self.run_id))
            return  # or about a run no longer open
        record = change.record
        if change.first:
            self.console.open_log(record.log_path, ended=record.finished)
            self.console.set_paused(not self.on_screen())
        self.charts.news(change)
        if self.watched.metrics:
            self._give_charts_room()
        self.leftovers.news(change, self.on_screen())
        self.nodes_table.news(change, self.on_screen())
        self.step_panel.news(change, self.on_screen())
        # A run going on as before is drawn on the clock's next tick (with the console and the clock, in one
        # repaint); a run just opened, ending or being stopped at once.
        steady = (record.state == "running" and not change.first and record.stop_requested_at is None
                  and not self.watched.stop_pending)
        if self.on_screen() and (not steady or self._catch_up):
            self._show_run_state()
            if self._catch_up:
                self._catch_up = False
                self.charts.draw(force=True)
        else:
            self._stale = True  # drawn on the clock's next tick, or when the page is back on screen
        self._pace_polling(change.news)
        if change.ended_now:
            self.console.run_ended()
        if change.done:
            self.poller.stop()  # nothing more will change
        if change.poll_again:
            QTimer.singleShot(0, self.poll)

    def _pace_polling(self, changed: bool) -> None:
        """Poll often while the run reports and the page is seen; back off while nothing changes; rarely off screen."""
        self.poller.settle(changed, self.on_screen())

    def _show_run_state(self) -> None:
        """Everything drawn from the state read so far (after each poll on screen, and on return to the screen)."""
        self._stale = False
        record = self.record
        if record is None:
            return
        self.run_list.update_item(record)  # the list's line from the same record as the header (same percent)
        self.header.show_record(record)
        self.header.show_rate(rate_text(record, self.watched.metrics, self.watched.shape))  # the same read's
        self._update_duration()
        self.stop_panel.show_record(record)
        self.stop_panel.show_story()
        self.diagnosis_panel.show_record(record, self.stop_panel.story_shown())
        self.charts.show_run(record)

    def _clock_tick(self) -> None:
        if self._stale and self.on_screen():
            self._show_run_state()
        self._update_duration()

    def _back_on_screen(self) -> None:
        """The page is shown again or the window restored: draw what came meanwhile, then poll at the live pace."""
        if not self.on_screen():
            return
        self.console.set_paused(False)
        if self._stale:
            self._show_run_state()
            self.charts.draw(force=True)
        self._update_duration()
        self.poller.on_screen()
        # What was drawn just now is the last hidden poll's (up to HIDDEN_POLL_MS old): this poll's news is drawn
        # as soon as it arrives, charts too, not CHART_MS later: an old chart beside new labels looks wrong.
        self._catch_up = True
        self.poll()
        self.leftovers.due(self.on_screen(), force=True)

    def _off_screen(self) -> None:
        self.console.set_paused(True)
        self.poller.off_screen()

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

    def _update_duration(self) -> None:
        if not self.on_screen() and self.record is not None:
            return  # the clock ticks every second: nobody sees it now (updated on return)
        self.header.show_duration(self.record)

    # ================================================================================================ page hooks
    def page_shown(self) -> None:
        self.run_list.refresh()
        if self.run_id is not None:
            self.poll()
        focus = QApplication.focusWidget()
        if focus is None or not self.isAncestorOf(focus):
            # Keys after Ctrl+3 go to the runs (arrows pick one, Ctrl+F filters), not to the page list.
            self.run_list.setFocus(Qt.FocusReason.ShortcutFocusReason)

    def load_demo(self) -> None:
        """A run in progress and a few finished ones, in a store of their own (never the user's)."""
        self._remove_demo_dir()
        self._demo_dir = tempfile.mkdtemp(prefix="traindeck-demo-runs-")
        atexit.register(shutil.rmtree, self._demo_dir, True)  # `gui --screenshot` quits without closing pages
        store_path, run_id = create_demo_store(Path(self._demo_dir))
        self.use_store(store_path, mark_lost=False)  # demo runs have no supervisor: do not mark them lost
        self._open(run_id, by_user=True, poll=False)
        # Screenshots are grabbed right after this returns: read the demo's own store here (a private file, no
        # lock to wait for) and put everything on screen now instead of on the next timer ticks.
        for _ in range(2):  # the second read fetches the chart series the first one named
            generation = self.watched.begin_poll()
            assert generation is not None  # opened just above, nothing on its way
            arguments = self.watched.read_arguments()
            view = self.source.in_store(store_path, watch.read_view, run_id, **arguments)
            self._view_arrived(generation, view)
        self._show_run_state()  # also when the page is not on screen yet (screenshots grab it anyway)
        self.console.catch_up()
        self.charts.flush()
        self.run_list.show_records(self.source.in_store(store_path, watch.runs_for_list, mark_lost=False))

    def demo_views(self) -> list[tuple[str, Callable[[], None]]]:
        """The Charts tab's System view: the demo run's GPUs, memory, CPU, disk and network beside its loss."""
        return [("system", self.charts.system_button.click)]

    def use_source(self, remote: RemoteRuns | None) -> None:
        """Show another machine's runs (None: this machine's again); closes the current run view."""
        self.use_store(None)
        self.source.remote = remote
        self._opened_by_user = False
        self.run_list.forget()
        self.views.setCurrentIndex(0)
        self.run_list.refresh(reattach=True)

    def use_store(self, path: Path | None, mark_lost: bool = True) -> None:
        """Read runs from another store (the demo's); closes the current run view."""
        self.watched.close()
        self.console.close_log()
        self.poller.stop()
        self.source.store_path = path
        self.source.mark_lost = mark_lost

    def shutdown(self) -> None:
        self.source.closing = True
        for timer in (self.poll_timer, self.list_timer, self.clock_timer):
            timer.stop()
        self.console.close_log()
        self.ctx.tasks.run(self.source.close_stores)
        self._remove_demo_dir()

    def _remove_demo_dir(self) -> None:
        if self._demo_dir:
            shutil.rmtree(self._demo_dir, ignore_errors=True)
            self._demo_dir = None

    def state_text(self) -> str:
        """The open run's state as its badge shows it."""
        return self.header.state_text()


PAGE = RunsPage
