"""The Runs page's list of runs (running first, then recent): read every LIST_MS while on screen, redrawn only
when what it shows changed. Part of RunsPage (gui/pages/runs/__init__.py), split off along its seams."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from PySide6.QtCore import Qt
from PySide6.QtWidgets import QListWidgetItem

from traindeck.backend.remote import RemoteRuns
from traindeck.backend.runs import RunRecord
from traindeck.backend.runs.control import view as watch
from traindeck.gui.pages.runs.shared import RunsPageShared
from traindeck.gui.widgets.run_state import state_icon

if TYPE_CHECKING:
    from pathlib import Path


_RUN_ID = Qt.ItemDataRole.UserRole


class RunListPart(RunsPageShared):
    """The run list's methods of RunsPage ."""

    def refresh_list(self, reattach: bool = False) -> None:
        if self._listing:
            return
        self._listing = True
        path = self.source.where()
        self.source.call(watch.runs_for_list, mark_lost=self.source.mark_lost,
                   done=lambda records: self._list_arrived(records, reattach, path),
                   failed=self._list_failed)

    def _list_tick(self) -> None:
        if self.on_screen():
            self.refresh_list()

    def _list_failed(self, text: str) -> None:
        self._listing = False
        self.source.report_failure(text)

    def _list_arrived(self, records: list[RunRecord], reattach: bool, path: Path | RemoteRuns | None) -> None:
        self._listing = False
        if self.source.closing:
            return
        if path is not self.source.where() and path != self.source.where():  # read from a store used before: ask the current one
            self.refresh_list(reattach)
            return
        self.records = records
        self._fill_list(records)
        if reattach and self.run_id is None and not self._opened_by_user:
            newest = watch.newest_running(records)
            if newest is not None:
                self._open(newest.id, by_user=False)  # reattach: the window was closed while it ran

    def _fill_list(self, records: list[RunRecord]) -> None:
        shown = [(r.id, r.state, self._list_text(r), r.state_detail, r.id == self.run_id) for r in records]
        if shown == self._listed:
            return  # every 2 s: rebuilding an unchanged list cost a relayout and a repaint each time
        self._listed = shown
        box = self.run_list
        box.blockSignals(True)
        try:
            box.clear()
            running = [r for r in records if r.state == "running"]
            queued = [r for r in records if r.state == "queued"]  # waiting in the queue: not yet run, not recent
            others = [r for r in records if r.state not in ("running", "queued")]
            for title, group in (("Running", running), ("Queued", queued), ("Recent", others)):
                if not group:
                    continue
                header = QListWidgetItem(title.upper())
                header.setFlags(Qt.ItemFlag.NoItemFlags)
                font = header.font()
                font.setBold(True)
                font.setPointSizeF(font.pointSizeF() * 0.85)
                header.setFont(font)
                box.addItem(header)
                for record in group:
                    item = QListWidgetItem(state_icon(record.state), self._list_text(record))
                    item.setData(_RUN_ID, record.id)
                    item.setToolTip(f"{record.id}\n{record.state}"
                                    + (f": {record.state_detail}" if record.state_detail else ""))
                    box.addItem(item)
                    if record.id == self.run_id:
                        box.setCurrentItem(item)
        finally:
            box.blockSignals(False)

    def _update_list_item(self, record: RunRecord) -> None:
        for row in range(self.run_list.count()):
            item = self.run_list.item(row)
            if item.data(_RUN_ID) == record.id:
                item.setText(self._list_text(record))
                item.setIcon(state_icon(record.state))

    @staticmethod
    def _list_text(record: RunRecord) -> str:
        when = time.localtime(record.started_at or record.created_at)
        # Today's runs by the hour only: the list is narrow, and "since Nov 24 02:…" was cut off.
        started = time.strftime("%H:%M" if when[:3] == time.localtime()[:3] else "%b %d %H:%M", when)
        if record.state == "running":
            progress = watch.progress_text(record.progress)
            done = f" · {100 * progress.fraction:.0f}%" if progress is not None and progress.fraction is not None else ""
            detail = f"running{done} · since {started}"
        elif record.state == "queued":  # it has not run: no duration, and when it was queued
            detail = f"queued at {started}"
        else:
            detail = f"{record.state} · {watch.duration_text(watch.run_duration(record))} · {started}"
        return f"{record.name or record.id}\n{detail}"

    def _item_chosen(self, current: QListWidgetItem | None, _previous: QListWidgetItem | None) -> None:
        if current is not None and current.data(_RUN_ID):
            self._open(str(current.data(_RUN_ID)), by_user=True)
