"""The Launch page's sweep editor: rows `NAME = V1, V2` over script arguments (`--NAME`) and preset values
(zero_stage, deepspeed.KEY.PATH), the number of runs they make and their names. Launching a sweep queues one run
per combination, named after its values, exactly as `traindeck run --sweep` does (backend.queue.adding).
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from PySide6.QtCore import Signal
from PySide6.QtGui import QFontDatabase
from PySide6.QtWidgets import QGroupBox, QLabel, QPlainTextEdit, QVBoxLayout

from traindeck.backend.queue import SweepPoint

if TYPE_CHECKING:
    from traindeck.backend.presets import Preset

_SHOWN_NAMES = 4


class SweepEditor(QGroupBox):
    changed = Signal()

    def __init__(self) -> None:
        super().__init__("Sweep (optional)")
        layout = QVBoxLayout(self)
        self.rows = QPlainTextEdit()
        self.rows.setPlaceholderText("lr = 1e-5, 3e-5\nzero_stage = 2, 3")
        self.rows.setTabChangesFocus(True)  # a form field: Tab moves to the next field, a row never holds a tab
        self.rows.setToolTip("One NAME = V1, V2 per line. A NAME is a script option (--NAME VALUE replaces the "
                             "script's own) or a preset value (zero_stage, gradient_accumulation_steps, "
                             "deepspeed.KEY.PATH). lr reaches the DeepSpeed config's optimizer.params.lr when the config "
                             "defines the optimizer (DeepSpeed trains with that, not the script's --lr). Every "
                             "combination becomes a queued run named after its values.")
        self.rows.setFont(QFontDatabase.systemFont(QFontDatabase.SystemFont.FixedFont))
        self.rows.setFixedHeight(self.rows.fontMetrics().lineSpacing() * 4 + 12)
        self.summary = QLabel()
        self.summary.setWordWrap(True)
        layout.addWidget(self.rows)
        layout.addWidget(self.summary)
        layout.addStretch(1)
        self.rows.textChanged.connect(self.changed)
        self.points: list[SweepPoint] = []
        self.notes: list[str] = []  # where values go when that is not what their names say
        self.error = ""

    def axes(self) -> list[str]:
        """The rows as `--sweep` takes them (NAME=V1,V2), blank lines left out."""
        return [re.sub(r"\s+", "", line) for line in self.rows.toPlainText().splitlines() if line.strip()]

    def set_axes(self, axes: list[str]) -> None:
        self.rows.setPlainText("\n".join(a.replace("=", " = ", 1) for a in axes))

    def update_summary(self, script_args: list[str], preset: Preset | None, base_name: str) -> None:
        """Expand the rows (backend.queue.adding, as `--sweep`) for this preset, say how many runs they make and
        where a value goes when that is not what its name says (`lr` into the DeepSpeed config that defines the
        optimizer)."""
        from traindeck.backend.queue import sweep_plan, sweep_run_name

        self.points, self.notes, self.error = [], [], ""
        axes = self.axes()
        if not axes:
            self.summary.setText("No sweep: one run. A row NAME = V1, V2 queues one run per value.")
            return
        try:
            plan = sweep_plan(axes, script_args, preset)
        except ValueError as exc:
            self.error = "Sweep: " + str(exc).removeprefix("--sweep ")
            self.summary.setText(self.error)
            return
        self.points, self.notes = plan.points, plan.notes
        names = [sweep_run_name(base_name, p) for p in self.points[:_SHOWN_NAMES]]
        more = f", and {len(self.points) - _SHOWN_NAMES} more" if len(self.points) > _SHOWN_NAMES else ""
        self.summary.setText(f"Makes {len(self.points)} queued run{'s' if len(self.points) != 1 else ''}: "
                             + ", ".join(names) + more + "".join(f"\n{note}." for note in self.notes))

    @property
    def active(self) -> bool:
        return bool(self.axes())
