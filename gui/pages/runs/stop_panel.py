"""The Runs page's stop (graceful, forced), stacks, the stop story and the diagnosis of an ended run. Part of
RunsPage (gui/pages/runs/__init__.py), split off along its seams."""

from __future__ import annotations

from typing import Any

from PySide6.QtWidgets import QMessageBox

from traindeck.backend.runs import MEMORY_WORDS, STOPPED_TRACEBACK_NOTE, RunRecord
from traindeck.backend.runs.control import view as watch
from traindeck.gui.pages.runs.shared import RunsPageShared
from traindeck.gui.widgets.run_state import panel_style

STOP_GRACE_S = 10.0


class RunStopPart(RunsPageShared):
    """The stop's and diagnosis' methods of RunsPage ."""

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
        self.source.call(fn, *args, done=lambda _messages: self._stop_sent(generation),
                   failed=lambda text: self._stop_failed(generation, text))

    def force_stop(self) -> None:
        self.stop_run(force=True)

    def take_stacks(self) -> None:
        record = self.record
        if record is None or record.state != "running" or self.source.remote is not None:  # not over SSH (yet)
            return
        self.stacks_button.setEnabled(False)
        self.ctx.tasks.run(watch.take_stacks, record, done=self._show_stacks,
                           failed=lambda text: self._show_stacks(None, text))

    def _show_stacks(self, report: Any, error: str = "") -> None:
        from traindeck.backend.runs import report_text

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
        if self.watched.current(generation):
            self.poll()

    def _stop_failed(self, generation: int, text: str) -> None:
        if not self.watched.stop_failed(generation, text):
            return
        self.stop_button.setEnabled(True)
        self.stop_button.setText("Stop")
        self._show_stop_story()
