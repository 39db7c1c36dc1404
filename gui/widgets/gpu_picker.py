"""The Launch page's GPU picker: every GPU with its use now (utilization, memory, who is on it: process, user,
traindeck run), and the choice a run takes (`--gpus`): the launcher's default, these GPUs, or any N free ones.

The list comes from backend.queue.gpu_use on ctx.tasks (NVML is never read on the UI thread); free/busy is the
queue's own rule. Without an NVIDIA GPU the box says so in one line and chooses nothing.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import (
    QButtonGroup,
    QCheckBox,
    QGridLayout,
    QGroupBox,
    QHBoxLayout,
    QLabel,
    QPushButton,
    QRadioButton,
    QSpinBox,
    QVBoxLayout,
    QWidget,
)

if TYPE_CHECKING:
    from traindeck.backend.monitor import NvmlLibrary
    from traindeck.backend.queue import GpuUse
    from traindeck.gui.tasks import Tasks

NO_GPU_NOTE = "No NVIDIA GPU here: runs use the CPU, and queued runs start one at a time."


class GpuPicker(QGroupBox):
    changed = Signal()  # the choice changed (gpus_text)
    refreshed = Signal()  # a new list of GPUs is shown

    def __init__(self, tasks: Tasks) -> None:
        super().__init__("GPUs")
        self._tasks = tasks
        self.uses: list[GpuUse] | None = None  # None: not read yet
        # None: the real NVML; tests hand a stand-in (a factory: each read opens and closes its own library)
        self.gpu_library_factory: Callable[[], NvmlLibrary] | None = None
        self._wanted = ""  # the choice restored before the GPUs were read
        self._refreshing = False
        layout = QVBoxLayout(self)
        self.note = QLabel("Reading the GPUs…")
        self.note.setWordWrap(True)
        layout.addWidget(self.note)
        self.table = QWidget()
        self.grid = QGridLayout(self.table)
        self.grid.setContentsMargins(0, 0, 0, 0)
        self.grid.setHorizontalSpacing(12)
        self.grid.setColumnStretch(3, 1)
        layout.addWidget(self.table)
        self.checks: dict[int, QCheckBox] = {}

        self.mode_default = QRadioButton("All GPUs (the launcher's default)")
        self.mode_chosen = QRadioButton("The GPUs ticked above")
        self.mode_any = QRadioButton("Any")
        self.any_count = QSpinBox()
        self.any_count.setRange(1, 64)
        self.any_count.setSuffix(" free")
        self.any_count.setToolTip("Take this many GPUs that are free when the run starts (--gpus any:N)")
        self.modes = QButtonGroup(self)
        for button in (self.mode_default, self.mode_chosen, self.mode_any):
            self.modes.addButton(button)
        self.mode_default.setChecked(True)
        self.choices = QWidget()
        row = QHBoxLayout(self.choices)
        row.setContentsMargins(0, 0, 0, 0)
        row.addWidget(self.mode_default)
        row.addWidget(self.mode_chosen)
        row.addWidget(self.mode_any)
        row.addWidget(self.any_count)
        row.addStretch(1)
        self.refresh_button = QPushButton("Refresh")
        self.refresh_button.setToolTip("Read the GPUs' use again")
        self.refresh_button.clicked.connect(self.refresh)
        row.addWidget(self.refresh_button)
        layout.addWidget(self.choices)
        layout.addStretch(1)
        self.modes.buttonToggled.connect(self._mode_toggled)
        self.any_count.valueChanged.connect(self._changed)
        self.table.hide()
        self.choices.hide()

    # ------------------------------------------------------------------------------------------------ reading
    def refresh(self) -> None:
        if self._refreshing:
            return
        self._refreshing = True
        from traindeck.backend.queue import gpu_use_now

        library = self.gpu_library_factory() if self.gpu_library_factory is not None else None
        self._tasks.run(gpu_use_now, library, done=self._show, failed=self._failed)

    def _failed(self, error: str) -> None:
        self._refreshing = False
        self.uses = []
        self.note.setText("The GPUs could not be read: " + (error.splitlines()[0] if error else "unknown error"))
        self.note.show()
        self.refreshed.emit()

    def _show(self, uses: list[GpuUse]) -> None:
        self._refreshing = False
        wanted = self.gpus_text() if self.uses is not None else self._wanted
        self.uses = uses
        while self.grid.count():
            item = self.grid.takeAt(0)
            widget = item.widget() if item is not None else None
            if widget is not None:
                widget.deleteLater()
        self.checks = {}
        if not uses:
            self.note.setText(NO_GPU_NOTE)
            self.note.show()
            self.table.hide()
            self.choices.hide()
            self.refreshed.emit()
            self._changed()
            return
        self.note.hide()
        for column, heading in enumerate(("GPU", "Use", "State", "Who is on it")):
            label = QLabel(f"<b>{heading}</b>")
            self.grid.addWidget(label, 0, column)
        for row, use in enumerate(uses, start=1):
            check = QCheckBox(f"{use.index}: {use.name}")
            check.setToolTip("Run on this GPU (--gpus)")
            check.toggled.connect(self._ticked)
            self.checks[use.index] = check
            state = QLabel(use.state)
            who = QLabel("; ".join(use.who) if use.who else "nobody")
            who.setWordWrap(True)
            who.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
            self.grid.addWidget(check, row, 0)
            self.grid.addWidget(QLabel(use.use_text), row, 1)
            self.grid.addWidget(state, row, 2)
            self.grid.addWidget(who, row, 3)
        self.any_count.setMaximum(max(1, len(uses)))
        self.table.show()
        self.choices.show()
        self.set_gpus_text(wanted)
        self.refreshed.emit()

    # ------------------------------------------------------------------------------------------------ choice
    def gpus_text(self) -> str:
        """As `--gpus` takes it: "" (the launcher's default), "0,2", or "any:2"."""
        if not self.uses:
            return "" if self.uses is not None else self._wanted
        if self.mode_any.isChecked():
            return f"any:{self.any_count.value()}"
        if self.mode_chosen.isChecked():
            chosen = [i for i, check in self.checks.items() if check.isChecked()]
            return ",".join(map(str, chosen))
        return ""

    def set_gpus_text(self, text: str) -> None:
        if self.uses is None:
            self._wanted = text  # shown once the GPUs are read
            return
        from traindeck.backend.queue import parse_gpus

        try:
            request = parse_gpus(text) if text else None
        except ValueError:
            request = None
        for index, check in self.checks.items():
            check.blockSignals(True)
            check.setChecked(bool(request and index in request.ids))
            check.blockSignals(False)
        if request is None:
            self.mode_default.setChecked(True)
        elif request.ids:
            self.mode_chosen.setChecked(True)
        else:
            self.any_count.setValue(request.count)
            self.mode_any.setChecked(True)
        self._changed()

    def problem(self) -> str:
        """Why the choice cannot be used ("" when it can)."""
        if self.uses and self.mode_chosen.isChecked() and not any(c.isChecked() for c in self.checks.values()):
            return "GPUs: tick the GPUs to run on, or choose all or any N"
        return ""

    def free_now(self) -> list[int]:
        return [u.index for u in self.uses or [] if u.free]

    def _mode_toggled(self, _button: object, on: bool) -> None:
        if on:
            self._changed()

    def _ticked(self) -> None:
        if any(c.isChecked() for c in self.checks.values()):
            self.mode_chosen.setChecked(True)
        self._changed()

    def _changed(self) -> None:
        self.changed.emit()
