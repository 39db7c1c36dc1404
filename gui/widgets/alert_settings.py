"""The Launch page's watch and alert settings: what the run itself watches (a NaN loss stops it; each rank's step
phases are timed), desktop notifications on or off, and the user's notify command (an argv, no shell) with a Test
button, saved where `traindeck notify` saves them (backend.runs.alerts), so the CLI and the dashboard show and change
the same settings. The two run switches are the page's to save, with its other choices.
"""

from __future__ import annotations

import shlex
from typing import TYPE_CHECKING

from PySide6.QtWidgets import QCheckBox, QGroupBox, QHBoxLayout, QLabel, QLineEdit, QPushButton, QVBoxLayout

from traindeck.backend.runs.supervisor import alerts

if TYPE_CHECKING:
    from traindeck.gui.tasks import Tasks


class AlertSettings(QGroupBox):
    def __init__(self, tasks: Tasks) -> None:
        super().__init__("Watch and alerts")
        self._tasks = tasks
        layout = QVBoxLayout(self)
        self.stop_on_nan = QCheckBox("Stop the run when its loss becomes NaN or inf (--stop-on-nan)")
        self.stop_on_nan.setToolTip("The run is stopped gracefully and its diagnosis says at which step")
        self.step_timing = QCheckBox("Time each rank's step phases (forward, backward, communication, optimizer)")
        self.step_timing.setChecked(True)
        self.step_timing.setToolTip(
            "Inside every rank, each optimizer step is split into forward, backward, communication, optimizer, "
            "NVMe swap and other time, with its memory peaks: the Runs page's Step tab and `traindeck steps` show "
            "them, with what bounds the run. No change to the script or its config; built to cost at most about 1% "
            "of a step. Unticked: the run is started without it (as `traindeck run --no-step-timing`).")
        self.desktop = QCheckBox("Desktop notification when a run ends, stalls or its loss becomes NaN "
                                 "(while traindeck is open)")
        self.desktop.setChecked(alerts.desktop_notifications())
        self.desktop.toggled.connect(alerts.save_desktop_notifications)
        self.command = QLineEdit()
        self.command.setPlaceholderText("notify-send traindeck   (gets TRAINDECK_EVENT, TRAINDECK_RUN_NAME, ...)")
        self.command.setToolTip("Run with the event in its environment (TRAINDECK_EVENT, TRAINDECK_RUN_ID, "
                                "TRAINDECK_RUN_NAME, TRAINDECK_DIAGNOSIS) whether or not traindeck is open; split "
                                "like a shell would, never run by one. Empty: no command.")
        saved = alerts.notify_command()
        self.command.setText(shlex.join(saved) if saved else "")
        self.save_button = QPushButton("Save")
        self.test_button = QPushButton("Test")
        self.test_button.setToolTip("Run the command now with a test event (as `traindeck notify --test`)")
        self.result = QLabel()
        self.result.setWordWrap(True)
        row = QHBoxLayout()
        row.addWidget(QLabel("Notify command"))
        row.addWidget(self.command, 1)
        row.addWidget(self.save_button)
        row.addWidget(self.test_button)
        layout.addWidget(self.stop_on_nan)
        layout.addWidget(self.step_timing)
        layout.addWidget(self.desktop)
        layout.addLayout(row)
        layout.addWidget(self.result)
        self.save_button.clicked.connect(self.save_command)
        self.command.returnPressed.connect(self.save_command)
        self.test_button.clicked.connect(self.test_command)

    def argv(self) -> list[str] | None:
        try:
            return shlex.split(self.command.text())
        except ValueError as exc:
            self.result.setText(f"Notify command: {exc} (close the quote)")
            return None

    def save_command(self) -> bool:
        argv = self.argv()
        if argv is None:
            return False
        alerts.save_command(argv or None, alerts.time_limit_s())
        self.result.setText(f"Saved: {shlex.join(argv)} (log: {alerts.log_path()})" if argv else
                            "No notify command: alerts run none")
        return True

    def test_command(self) -> None:
        argv = self.argv()
        if not argv:
            if argv is not None:
                self.result.setText("Type a command to test first")
            return
        self.test_button.setEnabled(False)
        self.result.setText(f"Running {argv[0]}…")
        self._tasks.run(alerts.run_test_alert, argv, done=self._tested, failed=self._tested)

    def _tested(self, outcome: str) -> None:
        self.test_button.setEnabled(True)
        self.result.setText(f"Test: {outcome or 'see the log'} (log: {alerts.log_path()})")
