"""The Runs page's stop: the header's buttons (Stacks, Save now, Stop, Force stop) and the stop the run supports,
the story of a stop as it happens; and the diagnosis of an ended run.

StopPanel owns widgets that sit in two places of the page (the header's row, the banner under it): the page lays
out `header_widgets()` and `story`. It reads the open run from the WatchedRun it is given and asks the page for a
poll (poll_wanted) once a stop request is on its way."""

from __future__ import annotations

from typing import Any

from PySide6.QtCore import QObject, Qt, Signal
from PySide6.QtGui import QKeySequence, QShortcut
from PySide6.QtWidgets import QFrame, QLabel, QMessageBox, QPushButton, QVBoxLayout, QWidget

from traindeck.backend.runs import MEMORY_WORDS, STOPPED_TRACEBACK_NOTE, RunRecord, WatchedRun
from traindeck.backend.runs.control import view as watch
from traindeck.gui.context import AppContext
from traindeck.gui.pages.runs.source import RunsSource
from traindeck.gui.theme import set_muted
from traindeck.gui.widgets.labels import label as _label
from traindeck.gui.widgets.labels import panel as _panel
from traindeck.gui.widgets.run_state import panel_style

STOP_GRACE_S = 10.0


class StopPanel(QObject):
    """Stop (graceful, forced), Save now and Stacks for the open run, and the stop's story."""

    poll_wanted = Signal()  # a stop request was sent: read the run again now
    save_now_asked = Signal()  # Save now pressed for a run whose script has the companion

    def __init__(self, ctx: AppContext, watched: WatchedRun, source: RunsSource, parent: QWidget) -> None:
        super().__init__(parent)
        self._ctx, self._watched, self._source = ctx, watched, source
        self._boxes_parent = parent  # the message boxes' (the page: never disabled, unlike a button)
        self.confirm = True  # ask before stopping (tests of the stop itself turn this off)
        self.companion = False  # the open run's script has traindeck's companion (from its Checkpoints tab)
        self.last_stacks: Any = None  # the last StackReport taken here
        self.stacks_box: QMessageBox | None = None

        self.stop_button = QPushButton("Stop")
        # Ctrl+. belongs to the page, not to the button: it works wherever the focus is on the page (console,
        # search field, run list, charts) and asks for the stop at once, as a click on Stop does. A button's own
        # shortcut would compete with this one (Qt then fires neither) and only click after an animation.
        self.stop_shortcut = QShortcut(QKeySequence("Ctrl+."), parent)
        self.stop_shortcut.setContext(Qt.ShortcutContext.WidgetWithChildrenShortcut)
        self.stop_shortcut.activated.connect(lambda: self.stop())
        self.stop_button.setToolTip("Stop the run gracefully (Ctrl+.): SIGINT to every process, SIGTERM after "
                                    f"{STOP_GRACE_S:g} s, SIGKILL if anything is still running after that")
        self.stop_button.clicked.connect(lambda: self.stop())
        self.force_button = QPushButton("Force stop")
        self.force_button.setToolTip("Kill every process of the run now (SIGKILL): nothing gets to save or clean up")
        self.force_button.clicked.connect(lambda: self.force_stop())
        self.stacks_button = QPushButton("Stacks")
        self.stacks_button.setToolTip("Dump every rank's Python stack (all threads) without stopping the run, and "
                                      "see which rank is not where the others are (a hang)")
        self.stacks_button.clicked.connect(lambda: self.take_stacks())
        self.save_now_button = QPushButton("Save now")
        self.save_now_button.setToolTip("Ask the script to save a checkpoint at its next step, without stopping "
                                        "(its traindeck companion does it)")
        self.save_now_button.clicked.connect(lambda: self.save_now())
        self.save_now_button.setVisible(False)
        self.kind_label = QLabel()  # which stop the run supports
        set_muted(self.kind_label)

        self.story, story_layout = _panel("stopPanel")
        self.story.setStyleSheet(panel_style("info", "stopPanel"))
        self.story_title = _label("Stopping", bold=True)
        self.story_label = _label(selectable=True, wrap=True)
        story_layout.addWidget(self.story_title)
        story_layout.addWidget(self.story_label)

    def header_widgets(self) -> list[QWidget]:
        """The header's stop widgets, in their order at the row's end."""
        return [self.stacks_button, self.kind_label, self.save_now_button, self.stop_button, self.force_button]

    # ================================================================================================ showing
    def open_run(self) -> None:
        """Another run is open: nothing to stop until its record arrives, and no companion known yet."""
        self.story.setVisible(False)
        self.stop_button.setVisible(False)
        self.force_button.setVisible(False)
        self.stacks_button.setVisible(False)
        self.companion = False
        self.save_now_button.setVisible(False)
        self.kind_label.clear()

    def show_record(self, record: RunRecord) -> None:
        """The buttons for the run as its record says: shown while it runs, disabled while it stops."""
        running = record.state == "running"
        stopping = running and (record.stop_requested_at is not None or self._watched.stop_pending)
        self.stop_button.setVisible(running)
        self.force_button.setVisible(running)
        self.stacks_button.setVisible(running and self._source.remote is None)  # stacks: not over SSH yet
        self.stop_button.setEnabled(running and not stopping)
        self.stop_button.setText("Stopping…" if stopping else "Stop")
        self._show_stop_kind(record)  # "Stop and save" and Save now with the companion

    def set_companion(self, companion: bool) -> None:
        """What the run's Checkpoints tab read: whether its script has traindeck's companion."""
        self.companion = companion
        record = self._watched.record
        if record is not None:
            self._show_stop_kind(record)

    def _show_stop_kind(self, record: RunRecord) -> None:
        """The header says which stop the run supports; Save now / Stop and save only with the companion."""
        running = record.state == "running"
        self.save_now_button.setVisible(running and self.companion)
        if not running:
            self.kind_label.clear()
            return
        stopping = record.stop_requested_at is not None or self._watched.stop_pending
        if self.companion:
            self.kind_label.setText("stop saves a checkpoint first")
            self.kind_label.setToolTip("The script has traindeck's companion: Stop asks it to save a "
                                       "checkpoint and end by itself; signals follow only if it does not")
            if not stopping:
                self.stop_button.setText("Stop and save")
        else:
            self.kind_label.setText("stop does not save")
            self.kind_label.setToolTip("The script has no traindeck companion: Stop interrupts it as Ctrl+C "
                                       "would (SIGINT, then SIGTERM, then SIGKILL); what it learnt since its "
                                       "last checkpoint is lost unless it saves when interrupted")

    def show_story(self) -> None:
        """The stop as it happens: our request, the supervisor's signals, and whether anything remains."""
        story = self._watched.stop_story()
        if story is None:
            return
        title, lines = story
        self.story_title.setText(title)
        self.story_label.setText("\n".join(lines))
        self.story.setVisible(True)

    def story_shown(self) -> bool:
        return not self.story.isHidden()

    # ================================================================================================ actions
    def stop(self, force: bool = False) -> None:
        """Stop the open run (Ctrl+.): graceful, or SIGKILL now with force. Asks first unless `confirm` is off."""
        record = self._watched.record
        if record is None or record.state != "running":
            return
        if self.confirm and not self._confirm(record, force):
            return
        self._watched.stop_asked(force, STOP_GRACE_S)
        self.stop_button.setEnabled(False)
        self.stop_button.setText("Stopping…")
        self.show_story()
        generation = self._watched.generation
        fn = watch.force_stop if force else watch.request_stop
        args = (record.id,) if force else (record.id, STOP_GRACE_S)
        self._source.call(fn, *args, done=lambda _messages: self._stop_sent(generation),
                          failed=lambda text: self._stop_failed(generation, text))

    def force_stop(self) -> None:
        self.stop(force=True)

    def save_now(self) -> None:
        record = self._watched.record
        if record is None or record.state != "running" or not self.companion:
            return
        self.save_now_asked.emit()

    def take_stacks(self) -> None:
        record = self._watched.record
        if record is None or record.state != "running" or self._source.remote is not None:  # not over SSH (yet)
            return
        self.stacks_button.setEnabled(False)
        self._ctx.tasks.run(watch.take_stacks, record, done=self._show_stacks,
                            failed=lambda text: self._show_stacks(None, text))

    def _show_stacks(self, report: Any, error: str = "") -> None:
        from traindeck.backend.runs import report_text

        self.stacks_button.setEnabled(True)
        self.last_stacks = report
        box = QMessageBox(self._boxes_parent)
        box.setWindowTitle("Stacks")
        box.setText(report.summary if report is not None else (error or "no living rank to dump (yet)"))
        if report is not None:
            box.setInformativeText("Every rank's stack, main thread first (kept as stacks.json in the run directory).")
            box.setDetailedText(report_text(report))
        box.setModal(False)
        box.show()
        self.stacks_box = box

    def _confirm(self, record: RunRecord, force: bool) -> bool:
        box = QMessageBox(self._boxes_parent)
        box.setIcon(QMessageBox.Icon.Warning if force else QMessageBox.Icon.Question)
        box.setWindowTitle("Force stop" if force else "Stop run")
        box.setText(f"{'Kill' if force else 'Stop'} the run “{record.name or record.id}”?")
        box.setInformativeText(
            "Every process of the run gets SIGKILL now: nothing is saved, checkpoints being written are lost."
            if force else
            "The script has traindeck's companion: it saves a checkpoint at its next step and ends by itself; "
            "signals (SIGINT, SIGTERM, SIGKILL) follow only if it is still running after its hold."
            if self.companion else
            f"Every process gets SIGINT (the script may save and exit), SIGTERM after {STOP_GRACE_S:g} s, and "
            "SIGKILL if anything is still running after that.")
        yes = box.addButton("Force stop" if force else "Stop and save" if self.companion else "Stop",
                            QMessageBox.ButtonRole.DestructiveRole)
        box.addButton(QMessageBox.StandardButton.Cancel)
        box.setDefaultButton(QMessageBox.StandardButton.Cancel)
        box.exec()
        return box.clickedButton() is yes

    def _stop_sent(self, generation: int) -> None:
        if self._watched.current(generation):
            self.poll_wanted.emit()

    def _stop_failed(self, generation: int, text: str) -> None:
        if not self._watched.stop_failed(generation, text):
            return
        self.stop_button.setEnabled(True)
        self.stop_button.setText("Stop")
        self.show_story()


class DiagnosisPanel(QFrame):
    """An ended run's diagnosis: what happened, the evidence, what to do."""

    def __init__(self) -> None:
        super().__init__()
        self.setObjectName("diagnosisPanel")
        layout = QVBoxLayout(self)
        layout.setContentsMargins(10, 6, 10, 6)  # as every banner of the page (widgets/labels.py panel())
        layout.setSpacing(2)
        self.setVisible(False)
        self.summary = _label(wrap=True, selectable=True, bold=True)
        self.evidence = _label(wrap=True, selectable=True)
        self.advice = _label(wrap=True, selectable=True)
        for widget in (self.summary, self.evidence, self.advice):
            layout.addWidget(widget)

    def show_record(self, record: RunRecord, stop_story_shown: bool) -> None:
        diagnosis = record.diagnosis
        if not record.finished or not diagnosis or (record.state == "stopped" and stop_story_shown):
            self.setVisible(False)  # a stop we watched: the stop story says it all
            return
        kind = record.state if record.state in ("failed", "lost", "stopped") else "info"
        self.setStyleSheet(panel_style(kind, "diagnosisPanel"))
        prefix = {"failed": "Failed: ", "lost": "Lost: "}.get(record.state, "")
        self.summary.setText(prefix + str(diagnosis.get("summary", "")))
        summary_font = self.summary.font()
        summary_font.setPointSizeF(self.font().pointSizeF() * (1.15 if record.state == "failed" else 1.0))
        self.summary.setFont(summary_font)
        evidence = [str(e) for e in diagnosis.get("evidence") or []]
        follow_ons = [str(e) for e in diagnosis.get("follow_ons") or []]
        text = "\n".join(f"• {e}" for e in evidence)
        memory = MEMORY_WORDS.get(str(diagnosis.get("memory") or ""))
        if memory:
            text = f"Out of: {memory}\n" + text
        if follow_ons:  # what failed after the cause, because of it
            text += ("\n" if text else "") + "Then (consequences, not the cause):\n" + "\n".join(f"• {e}" for e in follow_ons)
        self.evidence.setText(text)
        self.evidence.setVisible(bool(text))
        advice = str(diagnosis.get("advice") or "")
        if record.state == "stopped":
            evidence.append(STOPPED_TRACEBACK_NOTE)
            self.evidence.setText("\n".join(f"• {e}" for e in evidence))
            self.evidence.setVisible(True)
        self.advice.setText(f"What to do: {advice}" if advice else "")
        self.advice.setVisible(bool(advice))
        self.setVisible(True)
