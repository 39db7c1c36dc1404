"""What a run leaves behind, from History: Rerun and Bundle for the selected run, and its line of work
(parent -> resumed runs). Everything is read on the thread pool; outcomes and one-line failures go to the status
bar."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from PySide6.QtCore import Signal
from PySide6.QtWidgets import QFileDialog, QHBoxLayout, QPushButton, QWidget

from traindeck.backend.runs import ChainPlace, LineageIndex, checkpoint_name, line_of_work
from traindeck.backend.runs.control import leftbehind
from traindeck.gui.context import AppContext
from traindeck.gui.pages.history.run_table import RunTable
from traindeck.gui.widgets.run_leftovers import one_line, size_text


class LeftoversPanel(QWidget):
    """Rerun and Bundle, for the one run selected in `runs`; the selected run's line of work, said as it is read.

    Both buttons wait while one of them works (`busy` names which)."""

    line_of_work = Signal(object)  # the selected run's line of work as rich text; None: no line to show

    def __init__(self, ctx: AppContext, runs: RunTable, store_path: Callable[[], Path],
                 parent: QWidget | None = None):
        super().__init__(parent)
        self.ctx = ctx
        self.runs = runs
        self._store_path = store_path  # the page's run store (the demo switches it)
        self.busy = ""
        self.lineage = LineageIndex()
        self.rerun_button = QPushButton("Rer&un")
        self.rerun_button.setToolTip("Start the selected run again: same script, arguments, configs, launcher")
        self.rerun_button.clicked.connect(lambda: self.rerun_selected())
        self.bundle_button = QPushButton("&Bundle…")
        self.bundle_button.setToolTip("One zip of the selected run for a bug report (logs, configs, command, "
                                      "diagnosis, provenance, resources; secrets masked)")
        self.bundle_button.clicked.connect(lambda: self.bundle_selected())
        layout = QHBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addWidget(self.rerun_button)
        layout.addWidget(self.bundle_button)
        runs.selection_changed.connect(self.follow_selection)
        self.follow_selection(runs.selected_ids())

    def follow_selection(self, ids: list[str]) -> None:
        """The buttons for one selected run (and no work running); its line of work, read on the pool."""
        idle = not self.busy
        self.rerun_button.setEnabled(len(ids) == 1 and idle)
        self.bundle_button.setEnabled(len(ids) == 1 and idle)
        if len(ids) != 1:
            self.line_of_work.emit(None)
            return
        runs = [(r.run_id, r.run_dir, r.created_at) for r in self.runs.rows]
        self.ctx.tasks.run(self.lineage.places, runs, done=lambda places: self._show_chain(ids[0], places))

    def _show_chain(self, run_id: str, places: dict[str, ChainPlace]) -> None:
        if self.runs.selected_ids() != [run_id]:
            return
        rows = {r.run_id: r for r in self.runs.rows}
        created = {r.run_id: r.created_at for r in self.runs.rows}
        chain = line_of_work(places, run_id, created)
        place = places.get(run_id)
        if len(chain) < 2 and (place is None or place.how != "rerun"):
            self.line_of_work.emit(None)
            return
        parts = []
        for member in chain:
            name = rows[member].name or member if member in rows else member
            there = places.get(member)
            text = f"<b>{name}</b>" if member == run_id else name
            if there is not None and there.depth > 0:
                text += f" (from {checkpoint_name(there.resumed_from)})"
            parts.append(text)
        line = "Line of work: " + " → ".join(parts) if len(chain) > 1 else ""
        if place is not None and place.how == "rerun" and place.parent:
            line += ("; " if line else "") + f"rerun of {place.parent}"
        self.line_of_work.emit(line)

    def rerun_selected(self) -> None:
        ids = self.runs.selected_ids()
        if len(ids) != 1 or self.busy:
            return
        run_id = ids[0]
        self._begin("rerun", f"Starting {run_id} again…")
        self.ctx.tasks.run(leftbehind.relaunch_run, str(self._store_path()), run_id, "rerun",
                           done=lambda new_id: self._rerun_started(run_id, new_id),
                           failed=lambda text: self._end(f"Cannot rerun {run_id}: {one_line(text)}"))

    def _rerun_started(self, run_id: str, new_id: str) -> None:
        self._end(f"Reran {run_id} as run {new_id}")
        self.ctx.run_started.emit(new_id)

    def bundle_selected(self) -> None:
        ids = self.runs.selected_ids()
        if len(ids) != 1:
            return
        target, _ = QFileDialog.getSaveFileName(self, "Bundle for a bug report", f"{ids[0]}.zip", "Zip (*.zip)")
        if target:
            self.write_bundle(ids[0], target)

    def write_bundle(self, run_id: str, target: str) -> None:
        if self.busy:
            return
        self._begin("bundle", f"Writing the bug-report bundle of {run_id} to {target}…")
        self.ctx.tasks.run(leftbehind.bundle_run, str(self._store_path()), run_id, target,
                           done=lambda size: self._end(f"wrote {target} ({size_text(size)})"),
                           failed=lambda text: self._end(f"Cannot write the bundle: {one_line(text)}"))

    def _begin(self, busy: str, text: str) -> None:
        self.busy = busy
        self.follow_selection(self.runs.selected_ids())
        self.ctx.status.emit(text)

    def _end(self, text: str) -> None:
        self.busy = ""
        self.follow_selection(self.runs.selected_ids())
        self.ctx.status.emit(text)
