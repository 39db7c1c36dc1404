"""The Runs page's list of runs (running first, then queued, then recent): read when the page asks (every LIST_MS
while on screen), redrawn only when what it shows changed. It reads through the RunsSource it is given, marks the
WatchedRun's run as the current one, and tells the page by signals which run the user chose and which one is
running when a read was asked to reattach.

The open run's line is drawn from the record the page's header shows (`update_item`, from the page's poll), never
from the list's own read of the runs, made at another moment: header and list always say the same progress.

The list comes with its filter box (`filter_box`, placed above it by the page; Ctrl+F from the list): runs whose
words do not hold the text typed (or match its /regex/) are hidden, a heading with none left too, and the box says
how many are shown; the text is remembered for the page."""

from __future__ import annotations

import time
from pathlib import Path

from PySide6.QtCore import Qt, Signal
from PySide6.QtGui import QKeySequence, QShortcut
from PySide6.QtWidgets import QListWidget, QListWidgetItem

from traindeck.backend.remote import RemoteRuns
from traindeck.backend.runs import RunRecord, WatchedRun, record_words
from traindeck.backend.runs.control import view as watch
from traindeck.gui.pages.runs.source import RunsSource
from traindeck.gui.widgets.run_filter import RunFilterBox
from traindeck.gui.widgets.run_state import state_icon

_RUN_ID = Qt.ItemDataRole.UserRole


GROUPS = ("Running", "Queued", "Recent")
FILTER_KEY = "runs/filter"


def _group(state: str) -> str:
    """The heading a run of this state is listed under."""
    return {"running": "Running", "queued": "Queued"}.get(state, "Recent")


class RunList(QListWidget):
    """The runs as the store lists them, grouped under RUNNING, QUEUED and RECENT headers."""

    chosen = Signal(str)  # the user picked this run
    running_found = Signal(str)  # a read asked to reattach found this run the newest running one

    def __init__(self, watched: WatchedRun, source: RunsSource) -> None:
        super().__init__()
        self._watched, self._source = watched, source
        self.records: list[RunRecord] = []  # as last read
        self._open_record: RunRecord | None = None  # the open run as the header shows it (the page's last poll)
        self._listed: list[tuple[str, str, str, str, bool]] = []  # what the list shows (see show_records)
        self._listing = False  # a read is on its way
        self.setObjectName("runList")
        self.setMinimumWidth(200)
        self.setMaximumWidth(320)
        self.setSpacing(1)
        self.setTextElideMode(Qt.TextElideMode.ElideRight)
        self.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self.currentItemChanged.connect(self._item_chosen)
        self.filter_box = RunFilterBox(source.ctx.settings, FILTER_KEY, note_below=True)
        self.filter_box.changed.connect(lambda _found: self._apply_filter())
        self.filter_box.lead_to(self, self._arrive_from_filter)
        find = QShortcut(QKeySequence.StandardKey.Find, self, self.filter_box.focus)
        find.setContext(Qt.ShortcutContext.WidgetWithChildrenShortcut)  # elsewhere on the page: the console's
        self._words: dict[str, tuple[str, ...]] = {}  # per run listed: what the filter searches

    def refresh(self, reattach: bool = False) -> None:
        """Read the runs again (unless a read is on its way); with reattach, say which one is running."""
        if self._listing:
            return
        self._listing = True
        path = self._source.where()
        self._source.call(watch.runs_for_list, mark_lost=self._source.mark_lost,
                          done=lambda records: self._arrived(records, reattach, path), failed=self._failed)

    def _failed(self, text: str) -> None:
        self._listing = False
        self._source.report_failure(text)

    def _arrived(self, records: list[RunRecord], reattach: bool, path: Path | RemoteRuns | None) -> None:
        self._listing = False
        if self._source.closing:
            return
        where = self._source.where()
        if path is not where and path != where:  # read from a store used before: ask the current one
            self.refresh(reattach)
            return
        self.show_records(records)
        if reattach:
            newest = watch.newest_running(records)
            if newest is not None:
                self.running_found.emit(newest.id)

    def forget(self) -> None:
        """Another source: its first read is shown whatever this list shows meanwhile."""
        self.records, self._listed = [], []
        self._open_record = None

    def has(self, run_id: str) -> bool:
        """Whether the last read listed this run."""
        return any(r.id == run_id for r in self.records)

    def show_records(self, records: list[RunRecord]) -> None:
        self.records = records
        open_record = self._open_record
        if open_record is not None and open_record.id == self._watched.run_id:
            records = watch.with_open_run(records, open_record)  # its line as the header shows it
        shown = [(r.id, r.state, self._list_text(r), r.state_detail, r.id == self._watched.run_id) for r in records]
        if shown == self._listed:
            return  # every 2 s: rebuilding an unchanged list costs a relayout and a repaint each time
        self._listed = shown
        self._words = {r.id: record_words(r) for r in records}
        self.blockSignals(True)
        try:
            self.clear()
            for title in GROUPS:
                group = [r for r in records if _group(r.state) == title]  # queued: waiting, not yet run, not recent
                if not group:
                    continue
                header = QListWidgetItem(title.upper())
                header.setFlags(Qt.ItemFlag.NoItemFlags)
                font = header.font()
                font.setBold(True)
                font.setPointSizeF(font.pointSizeF() * 0.85)
                header.setFont(font)
                self.addItem(header)
                for record in group:
                    item = QListWidgetItem(state_icon(record.state), self._list_text(record))
                    item.setData(_RUN_ID, record.id)
                    item.setToolTip(f"{record.id}\n{record.state}"
                                    + (f": {record.state_detail}" if record.state_detail else ""))
                    self.addItem(item)
                    if record.id == self._watched.run_id:
                        self.setCurrentItem(item)
        finally:
            self.blockSignals(False)
        self._apply_filter()

    def _apply_filter(self) -> None:
        """Hide the runs the filter box's text does not match, and a heading left with none; say how many show."""
        found = self.filter_box.filter
        shown = total = 0
        heading: QListWidgetItem | None = None
        heading_used = False
        for row in range(self.count()):
            item = self.item(row)
            run_id = item.data(_RUN_ID)
            if not run_id:  # a heading: shown while one of its runs is
                if heading is not None:
                    heading.setHidden(not heading_used)
                heading, heading_used = item, False
                continue
            keep = found.matches(self._words.get(str(run_id), (str(run_id),)))
            item.setHidden(not keep)
            total += 1
            shown += keep
            heading_used = heading_used or keep
        if heading is not None:
            heading.setHidden(not heading_used)
        self.filter_box.show_count(shown, total)

    def select(self, run_id: str) -> None:
        """Make this run's line the current one (as the page opens it: not a choice of the user's)."""
        for row in range(self.count()):
            item = self.item(row)
            if item.data(_RUN_ID) == run_id:
                self.blockSignals(True)
                self.setCurrentItem(item)
                self.blockSignals(False)

    def update_item(self, record: RunRecord) -> None:
        """The run's line from this record (the header's, at the header's pace: the same percent); kept for the
        list's later reads, which show this record for the run instead of their own."""
        before = self._open_record
        self._open_record = record
        if before is not None and before.id == record.id and _group(before.state) != _group(record.state) \
                and self.has(record.id):
            self.show_records(self.records)  # it ended (or started): under its new heading now, not at the next read
            return
        for row in range(self.count()):
            item = self.item(row)
            if item.data(_RUN_ID) == record.id:
                item.setText(self._list_text(record))
                item.setIcon(state_icon(record.state))

    @staticmethod
    def _list_text(record: RunRecord) -> str:
        when = time.localtime(record.started_at or record.created_at)
        # Today's runs by the hour only: the list is narrow: "since Nov 24 02:…" is cut off.
        started = time.strftime("%H:%M" if when[:3] == time.localtime()[:3] else "%b %d %H:%M", when)
        if record.state == "running":
            progress = watch.progress_text(record.progress)
            done = f" · {100 * progress.fraction:.0f}%" if progress is not None and progress.fraction is not None else ""
            detail = f"{'stalled' if watch.stall_warning(record) else 'running'}{done} · since {started}"
        elif record.state == "queued":  # it has not run: no duration, and when it was queued
            detail = f"queued at {started}"
        else:
            detail = f"{record.state} · {watch.duration_text(watch.run_duration(record))} · {started}"
        return f"{record.name or record.id}\n{detail}"

    def _arrive_from_filter(self) -> None:
        """Down from the filter box: the current run stays where the filter shows it; else the first run shown."""
        current = self.currentItem()
        if current is not None and not current.isHidden() and current.data(_RUN_ID):
            return
        for i in range(self.count()):
            item = self.item(i)
            if not item.isHidden() and item.data(_RUN_ID):
                self.setCurrentItem(item)
                return

    def _item_chosen(self, current: QListWidgetItem | None, _previous: QListWidgetItem | None) -> None:
        if current is not None and current.data(_RUN_ID):
            self.chosen.emit(str(current.data(_RUN_ID)))
