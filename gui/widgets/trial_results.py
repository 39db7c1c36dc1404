"""A strategy trial's results: which trial (any in the data folder), how far it is (k of n, the time left) while it
runs, the table as `traindeck trial show` prints it, the winner and why faster candidates were passed over, a plot
of samples/s against peak memory (each point named, the winner marked, the memory in the table's unit), "Stop trial" (after a confirmation
that says what is kept) and "Use this…", which saves the winner as a preset as `trial use` does and says what changes
for the script. No button is a default: Enter never stops a trial.

The window only presents backend.trials: the trial's folder is read (read_trial_view) off the UI thread every
POLL_MS while the trial runs; stopping writes the trial's stop request, which its detached driver acts on.
"""

from __future__ import annotations

import pyqtgraph as pg
from PySide6.QtCore import QEvent, Qt, QTimer
from PySide6.QtGui import QPalette
from PySide6.QtWidgets import (
    QAbstractButton,
    QAbstractItemView,
    QComboBox,
    QDialog,
    QHBoxLayout,
    QHeaderView,
    QInputDialog,
    QLabel,
    QLineEdit,
    QMessageBox,
    QPushButton,
    QSplitter,
    QTableWidget,
    QTableWidgetItem,
    QVBoxLayout,
    QWidget,
)

from traindeck.backend.trials import COLUMNS, TrialView, list_trials, read_trial_view
from traindeck.gui.context import AppContext
from traindeck.gui.widgets.message_list import rich_line

POLL_MS = 1000
RIGHT_ALIGNED = (0, 2, 3, 4, 5)


def stop_trial(trial_id: str) -> str:
    """Ask the trial's driver to stop the candidate running now and end the trial (as `trial stop` does); where
    its driver is gone, stop the candidate and end the trial here. The outcome (backend.trials.stop_trial)."""
    from traindeck.backend.trials import TrialFolder
    from traindeck.backend.trials import stop_trial as stop

    return stop(TrialFolder(trial_id), wait_s=0.0)  # the poll shows the driver's end: no wait on a worker


def use_winner(trial_id: str, name: str) -> tuple[str, str, list[str]]:
    """Save the winner as user preset `name` (as `trial use` does); (its path, its description, what changes for
    the script). Raises ValueError/PresetError with one line."""
    from traindeck.backend.presets import save_preset
    from traindeck.backend.trials import TrialFolder, use_notes, winner_preset

    folder = TrialFolder(trial_id)
    spec, state = folder.spec(), folder.state()
    preset = winner_preset(spec, state, name)
    path = save_preset(preset)
    return str(path), preset.description, use_notes(spec, state)


def _tip(x: float, y: float, data: object) -> str:
    label, unit = data if isinstance(data, tuple) else (data, "GiB")
    return f"{label}: {y:.1f} samples/s at {x:.3g} {unit}"


class TrialResults(QDialog):
    """One trial at a time, chosen in the list at the top; non-modal, it may stay open beside the window."""

    def __init__(self, ctx: AppContext, trial_id: str | None = None, driver_pid: int | None = None,
                 parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.ctx = ctx
        self.setWindowTitle("Trials")
        self.setObjectName("trialResults")
        self.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)
        self.view: TrialView | None = None  # the chosen trial as last read
        self.said: tuple[str, ...] | None = None  # the last action's (severity, line[, details])
        self._pid = driver_pid  # the driver's pid before it has written its state
        self._reads = ctx.tasks.lane()
        self._poll = QTimer(self, interval=POLL_MS)
        self._poll.timeout.connect(self.refresh)

        self.trials = QComboBox()
        self.trials.setObjectName("trialPicker")
        self.trials.setMinimumContentsLength(24)
        self.trials.currentIndexChanged.connect(self._chosen)
        self.progress = QLabel()
        self.progress.setObjectName("trialProgress")
        self.progress.setWordWrap(True)
        top = QHBoxLayout()
        top.addWidget(QLabel("Trial"))
        top.addWidget(self.trials)
        top.addWidget(self.progress, 1)

        self.table = QTableWidget(0, len(COLUMNS))
        self.table.setObjectName("trialTable")
        self.table.setHorizontalHeaderLabels(list(COLUMNS))
        self.table.verticalHeader().setVisible(False)
        self.table.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
        self.table.setSelectionBehavior(QAbstractItemView.SelectionBehavior.SelectRows)
        self.table.setWordWrap(False)
        self.table.setTabKeyNavigation(False)  # Tab leaves the table (the arrows move in it)
        header = self.table.horizontalHeader()
        header.setSectionResizeMode(QHeaderView.ResizeMode.ResizeToContents)
        header.setStretchLastSection(True)
        self.table.verticalHeader().setDefaultSectionSize(self.fontMetrics().height() + 8)

        self.plot = pg.PlotWidget()
        self.plot.setObjectName("trialPlot")
        self.plot.setMinimumSize(260, 180)
        item = self.plot.getPlotItem()
        item.setMenuEnabled(False)
        item.hideButtons()
        item.showGrid(x=True, y=True, alpha=0.15)
        item.setLabel("left", "samples/s")
        item.setLabel("bottom", "peak memory")
        for side in ("left", "bottom"):
            item.getAxis(side).enableAutoSIPrefix(False)  # GiB stay GiB (no "x0.001" under close peaks)
        item.getViewBox().disableAutoRange()  # the view's padded ranges (backend.trials.padded_range)
        self.points = pg.ScatterPlotItem(size=10, pen=pg.mkPen(None), brush=pg.mkBrush(90, 140, 220, 200),
                                         hoverable=True, tip=_tip)
        self.tight_points = pg.ScatterPlotItem(size=10, symbol="x", pen=pg.mkPen(200, 120, 60, width=2),
                                               hoverable=True, tip=_tip)
        self.winner_point = pg.ScatterPlotItem(size=22, symbol="star", pen=pg.mkPen(30, 30, 30),
                                               brush=pg.mkBrush(240, 190, 40))
        for scatter in (self.points, self.tight_points, self.winner_point):
            item.addItem(scatter)
        self.labels: list[pg.TextItem] = []  # each point's candidate

        self.verdict = QLabel()
        self.verdict.setObjectName("trialWinner")
        self.verdict.setWordWrap(True)
        self.verdict.setTextFormat(Qt.TextFormat.RichText)
        self.verdict.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.stop_button = QPushButton("Stop trial")
        self.stop_button.setToolTip("Stop the candidate running now and end the trial; what was measured is kept")
        self.stop_button.clicked.connect(self.stop)
        self.use_button = QPushButton("Use this…")
        self.use_button.setToolTip("Save the winner as a preset (as `traindeck trial use`)")
        self.use_button.clicked.connect(self.ask_preset_name)
        close = QPushButton("Close")
        close.clicked.connect(self.close)
        for button in (self.stop_button, self.use_button, close):
            button.setAutoDefault(False)  # Enter is no button's: stopping is asked, never pressed by accident
            button.setDefault(False)
        self._stop_box: QMessageBox | None = None  # "Stop trial?" (made at the first ask)
        buttons = QHBoxLayout()
        buttons.addWidget(self.stop_button)
        buttons.addStretch(1)
        buttons.addWidget(self.use_button)
        buttons.addWidget(close)

        split = QSplitter(Qt.Orientation.Vertical)
        split.addWidget(self.table)
        split.addWidget(self.plot)
        split.setChildrenCollapsible(False)
        layout = QVBoxLayout(self)
        layout.addLayout(top)
        layout.addWidget(split, 1)
        layout.addWidget(self.verdict)
        layout.addLayout(buttons)
        self.resize(900, 640)
        self._apply_theme()
        self._wanted = trial_id
        self._update_buttons()
        self.list_trials()

    # ============================================================================================ reading
    def list_trials(self) -> None:
        """Read the trials' ids (off the UI thread) and show the wanted one, else the newest."""
        self.ctx.tasks.run(list_trials, done=self._listed, failed=self._failed)

    def _listed(self, ids: list[str]) -> None:
        wanted = self._wanted or (ids[-1] if ids else None)
        if wanted is not None and wanted not in ids:
            ids = [*ids, wanted]  # just started: its folder may be newer than the read
        self.trials.blockSignals(True)
        self.trials.clear()
        for trial_id in reversed(ids):  # the newest first
            self.trials.addItem(trial_id, trial_id)
        self.trials.blockSignals(False)
        if wanted is None:
            self.progress.setText("No trial yet: start one with Try setups… on the Launch page.")
            return
        self.trials.setCurrentIndex(self.trials.findData(wanted))
        self._chosen()

    def trial_id(self) -> str | None:
        data = self.trials.currentData()
        return str(data) if data else None

    def _chosen(self) -> None:
        if self.trial_id() != self._wanted:
            self._pid = None  # the pid given belongs to the trial opened first
        self._wanted = self.trial_id()
        self.view, self.said = None, None
        self._reads.invalidate()
        self.refresh()
        self._poll.start()

    def refresh(self) -> None:
        trial_id = self.trial_id()
        if trial_id is not None:
            self._reads.run(read_trial_view, trial_id, started_pid=self._pid, done=self.show_view,
                            failed=self._failed)

    def _failed(self, error: str) -> None:
        self._poll.stop()
        self.progress.setText(f"The trial could not be read: {str(error).splitlines()[0] if error else ''}")

    # ============================================================================================ drawing
    def show_view(self, view: TrialView) -> None:
        self.view = view
        if view.finished or not view.driver_alive:
            self._poll.stop()  # nothing changes any more (a gone driver writes nothing)
        self.progress.setText(view.progress_line)
        self._fill_table(view)
        self._draw_plot(view)
        lines = [rich_line("note", view.state.detail, self)] if view.state.detail else []
        if view.time_line:
            lines.append(rich_line("note", view.time_line, self))
        for text in view.winner_lines:
            severity = "ok" if text.startswith("winner: ") and view.winner is not None else "note"
            lines.append(rich_line(severity, text, self, bold=text.startswith("winner: ")))
        if self.said:
            lines.append(rich_line(self.said[0], self.said[1], self))
        self.verdict.setText("<br>".join(lines))
        self.verdict.setToolTip(self.said[2] if self.said and len(self.said) > 2 else "")
        self._update_buttons()

    def _fill_table(self, view: TrialView) -> None:
        self.table.setRowCount(len(view.rows))
        for r, cells in enumerate(view.rows):
            for c, text in enumerate(cells):
                item = QTableWidgetItem(("★ " if r == view.winner and c == 1 else "") + text)
                item.setToolTip(text)
                if c in RIGHT_ALIGNED:
                    item.setTextAlignment(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)
                if r == view.winner:
                    font = item.font()
                    font.setBold(True)
                    item.setFont(font)
                self.table.setItem(r, c, item)

    def _draw_plot(self, view: TrialView) -> None:
        measured = [p for p in view.points if p.state == "measured"]
        tight = [p for p in view.points if p.state != "measured"]
        unit = view.memory_unit
        self.points.setData([p.peak for p in measured], [p.samples_per_s for p in measured],
                            data=[(p.label, unit) for p in measured])
        self.tight_points.setData([p.peak for p in tight], [p.samples_per_s for p in tight],
                                  data=[(f"{p.label} (too tight)", unit) for p in tight])
        best = [p for p in view.points if p.index == view.winner]
        self.winner_point.setData([p.peak for p in best], [p.samples_per_s for p in best])
        item = self.plot.getPlotItem()
        for label in self.labels:
            item.removeItem(label)
        self.labels = []
        foreground = self.palette().color(QPalette.ColorRole.Text)
        for (x, y), names in _label_groups(view).items():
            # Points drawn on top of each other (set-ups measured alike) share one label, a name a line,
            # instead of names printed over one another.
            label = pg.TextItem("\n".join(f" {name}" for name in names), color=foreground, anchor=(0, 1))
            label.setPos(x, y)
            item.addItem(label)
            self.labels.append(label)
        on_gpu = any(p.on_gpu for p in view.points)
        item.setLabel("bottom", f"peak GPU memory ({unit})" if on_gpu else f"peak host memory per rank ({unit})")
        item.getViewBox().setRange(xRange=view.x_range, yRange=view.y_range, padding=0)

    def _update_buttons(self) -> None:
        view = self.view
        self.stop_button.setEnabled(view is not None and not view.finished)
        self.use_button.setEnabled(view is not None and view.finished and view.winner is not None)

    # ============================================================================================ actions
    def stop(self) -> None:
        """"Stop trial": ask first (without blocking the window), saying what is kept; Cancel is the default."""
        trial_id = self.trial_id()
        if trial_id is None or self.view is None or self.view.finished:
            return
        box = self._stop_box
        if box is None:  # one box, kept hidden between asks (the window owns it)
            box = self._stop_box = QMessageBox(self)
            box.setObjectName("trialStopConfirm")
            box.setIcon(QMessageBox.Icon.Question)
            box.setWindowTitle("Stop trial")
            box.setInformativeText("The candidate running now is stopped and no further one starts. The "
                                   "candidates measured so far are kept, with their runs; the winner is the best "
                                   "of them.")
            box.addButton("Stop trial", QMessageBox.ButtonRole.DestructiveRole)
            box.addButton(QMessageBox.StandardButton.Cancel)
            box.buttonClicked.connect(self._answered)
        box.setDefaultButton(QMessageBox.StandardButton.Cancel)
        box.setText(f"Stop trial {trial_id}?")
        box.setProperty("trial", trial_id)
        box.open()

    def _answered(self, button: QAbstractButton) -> None:
        box = self._stop_box
        if box is not None and box.buttonRole(button) == QMessageBox.ButtonRole.DestructiveRole:
            self.confirmed_stop(str(box.property("trial")))

    def confirmed_stop(self, trial_id: str) -> None:
        """Stop the trial (once confirmed); the poll shows it stopped (its measured rows stay)."""
        if trial_id != self.trial_id() or self.view is None or self.view.finished:
            return
        self.stop_button.setEnabled(False)
        self.ctx.tasks.run(stop_trial, trial_id, done=lambda outcome: self._stop_asked(trial_id, outcome),
                           failed=lambda error: self._say("error", f"Could not stop it: {error}"))

    def _stop_asked(self, trial_id: str, outcome: str) -> None:
        if outcome == "stopped_without_driver":
            self._say("note", f"Trial {trial_id} stopped here: its driver was gone; what was measured is kept.")
        else:
            self._say("note", f"Asked trial {trial_id} to stop: the candidate running now is stopped; what was "
                      "measured is kept.")
        self.ctx.status.emit(f"Stopping trial {trial_id}")
        self._poll.start()

    def ask_preset_name(self) -> None:
        """"Use this…": ask the preset's name (without blocking the window), then save it."""
        if self.view is None:
            return
        box = QInputDialog(self)
        box.setObjectName("trialPresetName")
        box.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)
        box.setWindowTitle("Use the winner")
        box.setLabelText("Save the winner as the preset named:")
        box.setTextEchoMode(QLineEdit.EchoMode.Normal)
        box.setTextValue(f"{self.view.spec.name}-fastest")
        box.textValueSelected.connect(self.use)
        box.open()

    def use(self, name: str) -> None:
        trial_id = self.trial_id()
        name = name.strip()
        if trial_id is None or not name:
            return
        self.use_button.setEnabled(False)
        self.ctx.tasks.run(use_winner, trial_id, name, done=lambda saved: self._used(name, saved),
                           failed=lambda error: self._use_failed(error))

    def _used(self, name: str, saved: tuple[str, str, list[str]]) -> None:
        """One line in the window (the chart keeps its room); the preset's description, path and what changes for
        the script in its tooltip."""
        path, description, notes = saved
        self._say("ok", f"Saved preset '{name}': choose it on the Launch page (details: hover).",
                  "\n".join([f"{description}", f"Saved to {path}.", *notes]))
        self.ctx.status.emit(f"Saved preset '{name}'")

    def _use_failed(self, error: str) -> None:
        self._say("error", f"Not saved: {str(error).splitlines()[0] if error else 'unknown error'}")

    def _say(self, severity: str, text: str, details: str = "") -> None:
        self.said = (severity, text, details) if details else (severity, text)
        if self.view is not None:
            self.show_view(self.view)

    def _apply_theme(self) -> None:
        """The plot in the window's colours (pyqtgraph draws its own background and axes)."""
        palette = self.palette()
        foreground = palette.color(QPalette.ColorRole.Text)
        self.plot.setBackground(palette.color(QPalette.ColorRole.Base))
        for entry in self.plot.getPlotItem().axes.values():
            entry["item"].setPen(pg.mkPen(foreground))
            entry["item"].setTextPen(pg.mkPen(foreground))
        for label in self.labels:
            label.setColor(foreground)

    def changeEvent(self, event: QEvent) -> None:  # noqa: N802
        if event.type() in (QEvent.Type.PaletteChange, QEvent.Type.ApplicationPaletteChange):
            self._apply_theme()
            if self.view is not None:
                self.show_view(self.view)  # the verdict's rich text keeps the colours it was laid out with
        super().changeEvent(event)

    def closeEvent(self, event: object) -> None:
        self._poll.stop()
        self._reads.invalidate()
        super().closeEvent(event)  # type: ignore[arg-type]


# Points within a fortieth of the plot's width and height of each other share a label (about a label's height
# at the window's size), so set-ups measured alike do not print their names over one another.
_LABEL_CELLS = 40


def _label_groups(view: TrialView) -> dict[tuple[float, float], list[str]]:
    """Each label's position (the first point of its group) and the candidates named there, in view order."""
    (x0, x1), (y0, y1) = view.x_range, view.y_range
    width, height = (x1 - x0) or 1.0, (y1 - y0) or 1.0
    groups: dict[tuple[int, int], tuple[tuple[float, float], list[str]]] = {}
    for point in view.points:
        cell = (round((point.peak - x0) / width * _LABEL_CELLS),
                round((point.samples_per_s - y0) / height * _LABEL_CELLS))
        at, names = groups.setdefault(cell, ((point.peak, point.samples_per_s), []))
        names.append(point.label)
    return dict(groups.values())
