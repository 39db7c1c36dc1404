"""History's part for what runs leave behind (issue 14): Rerun and Bundle for the selected run, its line of work
(parent -> resumed runs) under the list, and the compare's "Code and packages" tab (two runs' git commits and
dirty state, versions, and which packages differ in their pip freeze, and how). Everything is read on the thread
pool; outcomes and one-line failures go to the status bar."""

from __future__ import annotations

from pathlib import Path

from PySide6.QtWidgets import QFileDialog, QLabel, QPushButton, QTableWidget

from traindeck.backend.runs import (
    ChainPlace,
    LineageIndex,
    ProvenanceComparison,
    RunStore,
    checkpoint_name,
    compare_provenance,
    line_of_work,
)
from traindeck.backend.runs.control import leftbehind
from traindeck.gui.pages.history.compare_panel import HistoryComparePart
from traindeck.gui.widgets.run_leftovers import one_line, size_text


def _provenance_of(store_path: Path, id_a: str, id_b: str) -> ProvenanceComparison:
    with RunStore(store_path) as store:
        a, b = store.get_run(id_a), store.get_run(id_b)
    if a is None or b is None:
        raise LookupError(f"no run {id_a if a is None else id_b} in the run store")
    return compare_provenance(a.run_dir, b.run_dir)


class HistoryLeftoversPart(HistoryComparePart):
    rerun_button: QPushButton
    bundle_button: QPushButton
    chain_label: QLabel
    provenance_table: QTableWidget
    lineage: LineageIndex
    busy: str

    def _build_leftovers(self) -> list[QPushButton]:
        self.busy = ""
        self.lineage = LineageIndex()
        self.rerun_button = QPushButton("Re&run")
        self.rerun_button.setToolTip("Start the selected run again: same script, arguments, configs, launcher")
        self.rerun_button.clicked.connect(lambda: self.rerun_selected())
        self.bundle_button = QPushButton("&Bundle…")
        self.bundle_button.setToolTip("One zip of the selected run for a bug report (logs, configs, command, "
                                      "diagnosis, provenance, resources; secrets masked)")
        self.bundle_button.clicked.connect(lambda: self.bundle_selected())
        self.chain_label = QLabel("")
        self.chain_label.setWordWrap(True)
        self.chain_label.setVisible(False)
        self.provenance_table = self._side_by_side(("", "A", "B", "B vs A"))  # as on Figures: "differs", "upgraded"
        return [self.rerun_button, self.bundle_button]

    def _leftovers_selection(self, ids: list[str]) -> None:
        idle = not self.busy
        self.rerun_button.setEnabled(len(ids) == 1 and idle)
        self.bundle_button.setEnabled(len(ids) == 1 and idle)
        if len(ids) != 1:
            self.chain_label.setVisible(False)
            return
        runs = [(r.run_id, r.run_dir, r.created_at) for r in self.model.rows]
        self.ctx.tasks.run(self.lineage.places, runs, done=lambda places: self._show_chain(ids[0], places))

    def _show_chain(self, run_id: str, places: dict[str, ChainPlace]) -> None:
        if self.selected_ids() != [run_id]:
            return
        rows = {r.run_id: r for r in self.model.rows}
        created = {r.run_id: r.created_at for r in self.model.rows}
        chain = line_of_work(places, run_id, created)
        place = places.get(run_id)
        if len(chain) < 2 and (place is None or place.how != "rerun"):
            self.chain_label.setVisible(False)
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
        self.chain_label.setText(line)
        self.chain_label.setVisible(True)

    def rerun_selected(self) -> None:
        ids = self.selected_ids()
        if len(ids) != 1 or self.busy:
            return
        run_id = ids[0]
        self._begin("rerun", f"Starting {run_id} again…")
        self.ctx.tasks.run(leftbehind.relaunch_run, str(self.history.store_path), run_id, "rerun",
                           done=lambda new_id: self._rerun_started(run_id, new_id),
                           failed=lambda text: self._end(f"Cannot rerun {run_id}: {one_line(text)}"))

    def _rerun_started(self, run_id: str, new_id: str) -> None:
        self._end(f"Reran {run_id} as run {new_id}")
        self.ctx.run_started.emit(new_id)

    def bundle_selected(self) -> None:
        ids = self.selected_ids()
        if len(ids) != 1:
            return
        target, _ = QFileDialog.getSaveFileName(self, "Bundle for a bug report", f"{ids[0]}.zip", "Zip (*.zip)")
        if target:
            self.write_bundle(ids[0], target)

    def write_bundle(self, run_id: str, target: str) -> None:
        if self.busy:
            return
        self._begin("bundle", f"Writing the bug-report bundle of {run_id} to {target}…")
        self.ctx.tasks.run(leftbehind.bundle_run, str(self.history.store_path), run_id, target,
                           done=lambda size: self._end(f"wrote {target} ({size_text(size)})"),
                           failed=lambda text: self._end(f"Cannot write the bundle: {one_line(text)}"))

    def _begin(self, busy: str, text: str) -> None:
        self.busy = busy
        self._leftovers_selection(self.selected_ids())
        self.ctx.status.emit(text)

    def _end(self, text: str) -> None:
        self.busy = ""
        self._leftovers_selection(self.selected_ids())
        self.ctx.status.emit(text)

    # -- compare: code and packages ---------------------------------------------------------------------------
    def compare(self, id_a: str, id_b: str) -> None:
        super().compare(id_a, id_b)
        self._compare_provenance(id_a, id_b)

    def _compare_provenance(self, id_a: str, id_b: str) -> None:
        self.tabs.setTabText(3, "Code and packages")
        self._fill(self.provenance_table, [("Reading…", "", "", "")])
        self.ctx.tasks.run(_provenance_of, self.history.store_path, id_a, id_b,
                           done=self._show_provenance,
                           failed=lambda text: self._fill(self.provenance_table,
                                                          [(f"Cannot compare: {one_line(text)}", "", "", "")]))

    def _show_provenance(self, result: ProvenanceComparison) -> None:
        rows = [(what, a, b, "" if a == b else "differs") for what, a, b in result.rows]
        bold = set()
        if result.packages or result.same_packages:
            bold.add(len(rows))
            rows.append((f"Packages that differ ({len(result.packages)}; {result.same_packages} the same)", "", "",
                         ""))
            rows += [(f"  {d.name}", d.a or "-", d.b or "-", d.how) for d in result.packages]
        rows += [(problem, "", "", "") for problem in result.problems]
        self._fill(self.provenance_table, rows, bold_rows=bold)
        self.tabs.setTabText(3, f"Code and packages ({len(result.packages)} differ)" if result.packages or
                             result.same_packages else "Code and packages")
