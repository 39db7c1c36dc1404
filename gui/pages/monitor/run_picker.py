"""The Monitor's run picker: the runs of the run store listed (through `ctx.tasks`, every few seconds while on
screen) and the one watched, as the backend's `RunWatch` decides: the newest live run, wherever it was started
(this window, the CLI, the queue), a run just launched from this window first; the newest run when none is live; a
run the person picked holds until a new run starts. Beside the choice a note says when the watched run ended and
which live run is watched now, or offers the live run while the person watches one that is not running."""

from __future__ import annotations

from PySide6.QtCore import QTimer, Signal
from PySide6.QtGui import QKeySequence, QShortcut
from PySide6.QtWidgets import QComboBox, QHBoxLayout, QLabel, QPushButton, QSizePolicy, QWidget

from traindeck.backend.monitor import RunChoice, RunWatch, run_choices
from traindeck.gui.context import AppContext
from traindeck.gui.pages.monitor.shared import NO_RUN
from traindeck.gui.widgets.run_state import state_icon

RUNS_REFRESH_MS = 3_000  # a run started from the CLI or the queue is watched within this (a store read, off-thread)


class RunPicker(QWidget):
    """`chosen(RunChoice | None)`: the run to watch now (None: host and GPUs only), said on every choice, the same
    run again included. `reread()`: the person pressed Refresh (or F5): read the watched run's recording again.
    `listed(list[RunChoice])`: the runs listed, when they changed."""

    chosen = Signal(object)
    reread = Signal()
    listed = Signal(list)

    def __init__(self, ctx: AppContext) -> None:
        super().__init__()
        self.ctx = ctx
        self.model = RunWatch()  # the run watched, and the rules that change it
        self._demo = False  # demo data: the store is not listed
        self._offered: RunChoice | None = None  # the live run the note offers
        self._choices: list[RunChoice] | None = None  # the last listing (an unchanged one leaves the combo alone)

        self.combo = QComboBox()
        self.combo.setMinimumContentsLength(40)  # "name · state · 24 Nov 02:33 · 2835" whole
        self.combo.setSizeAdjustPolicy(QComboBox.SizeAdjustPolicy.AdjustToMinimumContentsLengthWithIcon)
        self.combo.setToolTip("The run whose processes are charted on the Run tab and whose recording feeds "
                              "the Offload tab. Running runs are sampled live; finished ones are read back.")
        self.combo.addItem(NO_RUN, None)
        self.combo.activated.connect(self._picked)  # the person's pick (programmatic changes block signals)
        self.combo.currentIndexChanged.connect(lambda index: self.choose(self.combo.itemData(index)))
        self.note = QLabel()
        self.note.setToolTip("Which run is live while the one watched is not")
        # A long note (two long run names) is cut at the bar's end, never widening the window past the screen:
        # the whole of it is in the tooltip.
        self.note.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Preferred)
        self.note.hide()
        self.watch_live = QPushButton("Watch it")
        self.watch_live.setToolTip("Watch the run that is running")
        self.watch_live.clicked.connect(self._watch_offered)
        self.watch_live.hide()
        self.refresh_button = QPushButton("Refresh")
        self.refresh_button.setToolTip("Look for new runs and read the watched run's recording again (F5)")
        self.refresh_button.clicked.connect(self._refresh_pressed)
        QShortcut(QKeySequence("F5"), self, self._refresh_pressed)
        row = QHBoxLayout(self)
        row.setContentsMargins(0, 0, 0, 0)
        for widget in (QLabel("Watch run:"), self.combo, self.note, self.watch_live, self.refresh_button):
            row.addWidget(widget)

        self.timer = QTimer(self, interval=RUNS_REFRESH_MS)
        self.timer.timeout.connect(self.refresh)

    @property
    def watched(self) -> RunChoice | None:
        return self.model.watched

    def choose(self, choice: RunChoice | None) -> None:
        """Watch `choice` (None: host and GPUs only)."""
        self.model.watch(choice)
        self._show_note()
        self.chosen.emit(choice)

    def resume(self) -> None:
        """On screen: list the runs now and every RUNS_REFRESH_MS (not in the demo)."""
        self.refresh()
        if not self._demo:
            self.timer.start()

    def pause(self) -> None:
        self.timer.stop()

    def refresh(self) -> None:
        if self._demo:
            return
        from traindeck.backend.runs import supervisor_alive

        self.ctx.tasks.run(run_choices, alive=supervisor_alive, done=self._listed, failed=self._failed)

    def _refresh_pressed(self) -> None:
        self.refresh()
        if not self._demo:
            self.reread.emit()

    def run_started(self, run_id: str) -> None:
        """A run launched from this window: watch it as soon as it is listed, over a pick."""
        self.model.launched_here(run_id)
        self.refresh()

    def show_demo(self, choice: RunChoice) -> None:
        """The demo's run, the only one listed, watched; the store is no longer listed."""
        self._demo = True
        self.timer.stop()
        self.combo.blockSignals(True)
        self.combo.clear()
        self.combo.addItem(NO_RUN, None)
        self.combo.addItem(choice.label, choice)
        self.combo.setCurrentIndex(1)
        self.combo.blockSignals(False)
        self.choose(choice)

    def run_to_follow(self, choices: list[RunChoice]) -> str | None:
        """The run to watch now instead of the current one, or None to stay (`RunWatch.to_follow`)."""
        return self.model.to_follow(choices)

    def _failed(self, error: str) -> None:
        self.ctx.status.emit(f"Monitor: could not list runs: {error.splitlines()[0]}")

    def _listed(self, choices: list[RunChoice]) -> None:
        if self._demo:
            return  # a listing started before the demo data replaced the live view
        launched = self.model.launched
        if choices == self._choices and (launched is None or all(c.id != launched for c in choices)):
            return  # nothing new (and an open drop-down list is left alone)
        self._choices = choices
        self.listed.emit(choices)
        watched = self.model.watched
        current = watched.id if watched is not None else None
        self.combo.blockSignals(True)
        try:
            self.combo.clear()
            self.combo.addItem(NO_RUN, None)
            for choice in choices:
                self.combo.addItem(state_icon(choice.state), choice.label, choice)
            follow = self.model.listed(choices)
            if follow is not None:
                current = follow
            index = next((i for i in range(1, self.combo.count()) if self.combo.itemData(i).id == current), 0)
            self.combo.setCurrentIndex(index)
        finally:
            self.combo.blockSignals(False)
        chosen = self.combo.currentData()
        if follow is not None and (watched is None or watched.id != follow):
            self.choose(chosen)
        elif current is not None and chosen is None:
            self.choose(None)  # the run disappeared from the store
        elif chosen is not None and watched is not None and (chosen.state, chosen.live) != (watched.state,
                                                                                          watched.live):
            # It finished, or started, or its supervisor has just recorded the launcher's pid (a run picked in the
            # first second of its launch): switch between live and recorded
            self.choose(chosen)
        else:
            self._show_note()

    def _picked(self, index: int) -> None:
        self.model.picked(self.combo.itemData(index))
        self._show_note()

    def _show_note(self) -> None:
        text, self._offered = self.model.note(self._choices or []) if not self._demo else ("", None)
        self.note.setText(text)
        self.note.setToolTip(text or "Which run is live while the one watched is not")
        self.note.setVisible(bool(text))
        self.watch_live.setVisible(self._offered is not None)

    def _watch_offered(self) -> None:
        """The note's button: watch the live run it names (following it, as a pick of the running run does)."""
        offered = self._offered
        if offered is None:
            return
        index = next((i for i in range(1, self.combo.count()) if self.combo.itemData(i).id == offered.id), -1)
        if index < 0:
            return
        self.combo.blockSignals(True)
        self.combo.setCurrentIndex(index)
        self.combo.blockSignals(False)
        self.model.picked(offered)
        self.choose(offered)

