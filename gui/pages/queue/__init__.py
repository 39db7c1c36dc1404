"""The Queue page: the runs waiting to start unattended, what each waits for, and the queue's controls.

Thin over `backend/queue/listing.py`: every read and action runs on the task pool; the keeper (not this window)
starts the runs, so closing the window changes nothing.
"""

from __future__ import annotations

from typing import Any

from PySide6.QtGui import QKeySequence, QShortcut
from PySide6.QtWidgets import (
    QAbstractItemView,
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QPushButton,
    QTableWidget,
    QTableWidgetItem,
    QVBoxLayout,
)

from traindeck.gui.context import AppContext
from traindeck.gui.pages.base import Page
from traindeck.gui.polling import Poller

REFRESH_MS = 2000
COLUMNS = ("Pos", "Name", "State", "Waiting for", "GPUs", "Id")


class QueuePage(Page):
    key = "queue"
    title = "Queue"
    order = 70

    def __init__(self, ctx: AppContext):
        super().__init__(ctx)
        self.rows: list[dict[str, Any]] = []
        self.paused = False
        self._busy = False
        self._showing_demo = False  # `gui --screenshot`'s made-up queue: kept, never replaced by a real read
        self.poller = Poller(self, self.refresh, live_ms=REFRESH_MS)  # paused while the page is not seen
        self._build()

    def _build(self) -> None:
        self.summary = QLabel("Reading the queue…")
        self.summary.setWordWrap(True)  # a long pause reason or the empty-queue hint must not widen the window
        self.table = QTableWidget(0, len(COLUMNS))
        self.table.setHorizontalHeaderLabels(COLUMNS)
        self.table.setSelectionBehavior(QAbstractItemView.SelectionBehavior.SelectRows)
        self.table.setSelectionMode(QAbstractItemView.SelectionMode.SingleSelection)
        self.table.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
        # Pos is the order: no row numbers beside it. The id is read whole (it is what `traindeck queue` takes), the
        # reason for waiting gets the room left.
        self.table.verticalHeader().hide()
        self.table.setWordWrap(False)
        header = self.table.horizontalHeader()
        for column in range(len(COLUMNS)):
            header.setSectionResizeMode(column, QHeaderView.ResizeMode.ResizeToContents)
        header.setSectionResizeMode(3, QHeaderView.ResizeMode.Stretch)
        self.table.doubleClicked.connect(self._open)
        self.table.itemSelectionChanged.connect(self._update_buttons)
        bar = QHBoxLayout()
        self.buttons: dict[str, QPushButton] = {}
        for action, text, tip in (
                ("pause", "&Pause queue", "Start no more runs (running ones go on); press again to resume"),
                ("start", "&Start now", "Start the selected run now, ahead of the order"),
                ("up", "Move &up", "Start the selected run earlier"),
                ("down", "Move &down", "Start the selected run later"),
                ("hold", "&Hold", "Keep the selected run from starting; press again to release it"),
                ("remove", "&Remove", "Take the selected run out of the queue (it never ran)")):
            button = QPushButton(text)
            button.setToolTip(tip)
            button.clicked.connect(lambda _checked=False, a=action: self.act(a))
            bar.addWidget(button)
            self.buttons[action] = button
        bar.addStretch(1)
        QShortcut(QKeySequence("F5"), self, self.refresh)
        layout = QVBoxLayout(self)
        layout.addWidget(self.summary)
        layout.addLayout(bar)
        layout.addWidget(self.table, 1)
        self._update_buttons()

    # ---------------------------------------------------------------------------------------------- reading
    def page_shown(self) -> None:
        self.refresh()
        self.poller.start()

    def hideEvent(self, event: Any) -> None:  # noqa: N802 - only a shown (or soon shown) queue is read
        self.poller.off_screen()
        super().hideEvent(event)

    def window_minimised(self, minimised: bool) -> None:
        if minimised:
            self.poller.off_screen()
        else:
            self.page_shown()

    def refresh(self) -> None:
        # Not ctx.demo: `make demo` (gui --demo) launches real runs and queues real sweeps, so its queue is real.
        if self._busy or self._showing_demo:
            return
        self._busy = True
        from traindeck.backend.queue import queue_state

        self.ctx.tasks.run(queue_state, done=self._read, failed=self._failed)

    def _read(self, state: dict[str, Any]) -> None:
        if self._showing_demo:  # a read that was under way when the made-up queue was shown
            self._busy = False
            return
        self.show_state(state)

    def show_state(self, state: dict[str, Any]) -> None:
        self._busy = False
        selected = self.selected()
        self.paused = bool(state["paused"])
        rows = state["runs"]
        waiting = sum(1 for r in rows if r["state"] == "queued")
        running = sum(1 for r in rows if r["state"] == "running")
        text = f"{waiting} waiting, {running} running; "
        text += ("paused" + (f" ({state['pause_reason']})" if state["pause_reason"] else "")) if self.paused \
            else ("keeper running" if state["keeper_running"] else "nothing to start")
        if not rows:  # an empty table said nothing of how runs get here
            text = ("The queue is empty" + (" (paused)" if self.paused else "") + ": a sweep on the Launch page, "
                    "or `traindeck queue add`, puts runs here to start one after another, unattended.")
        self.summary.setText(text)
        self.buttons["pause"].setText("&Resume queue" if self.paused else "&Pause queue")
        # Waiting runs first, in order; then running; then the ones that ended, newest first.
        ended = [r for r in rows if r["state"] not in ("queued", "running")]
        self.rows = [r for r in rows if r["state"] == "queued"] + [r for r in rows if r["state"] == "running"] + \
            ended[::-1]
        self.table.setRowCount(len(self.rows))
        for i, row in enumerate(self.rows):
            gpus = ",".join(map(str, row["assigned_gpus"])) if row["assigned_gpus"] else row["gpus"]
            state_text = row["state"] + (" (held)" if row["held"] else "")
            for column, value in enumerate((str(row["position"] or ""), row["name"], state_text,
                                            row["waiting_for"], gpus, row["id"])):
                self.table.setItem(i, column, QTableWidgetItem(value))
            if row["id"] == selected:
                self.table.selectRow(i)
        self._update_buttons()

    def _failed(self, error: str) -> None:
        self._busy = False
        self.summary.setText(f"Could not read the queue: {error}")

    def selected(self) -> str | None:
        rows = self.table.selectionModel().selectedRows()
        return self.rows[rows[0].row()]["id"] if rows and rows[0].row() < len(self.rows) else None

    def _selected_row(self) -> dict[str, Any] | None:
        run_id = self.selected()
        return next((r for r in self.rows if r["id"] == run_id), None)

    def _update_buttons(self) -> None:
        row = self._selected_row()
        queued = row is not None and row["state"] == "queued"
        for action in ("start", "up", "down", "hold", "remove"):
            self.buttons[action].setEnabled(queued)
        self.buttons["hold"].setText("Re&lease" if row is not None and row["held"] else "&Hold")

    def _open(self) -> None:
        row = self._selected_row()
        if row is not None and row["state"] != "queued":
            self.ctx.open_run.emit(row["id"])

    # ---------------------------------------------------------------------------------------------- actions
    def act(self, action: str) -> None:
        from traindeck.backend.queue import queue_action

        row = self._selected_row()
        if action == "pause":
            args: tuple[Any, ...] = ("resume" if self.paused else "pause",)
        elif row is None:
            return
        elif action in ("up", "down"):
            position = (row["position"] or 1) + (-1 if action == "up" else 1)
            args = ("move", row["id"], max(1, position))
        elif action == "hold":
            args = ("release" if row["held"] else "hold", row["id"])
        else:
            args = (action, row["id"])
        self.ctx.tasks.run(queue_action, *args, done=self._acted, failed=self._acted)

    def _acted(self, message: str) -> None:
        self.ctx.status.emit(message)
        self._busy = False
        self.refresh()

    def load_demo(self) -> None:
        self._showing_demo = True
        self.poller.stop()
        self.show_state({"paused": False, "pause_reason": "", "keeper_running": True, "runs": [
            {"id": "20260101-090000-a1b2", "name": "sweep-lr=1e-5", "position": None, "waiting_for": "",
             "state": "running", "held": False, "gpus": "any:1", "assigned_gpus": [0]},
            {"id": "20260101-090001-c3d4", "name": "sweep-lr=3e-5", "position": 1,
             "waiting_for": "1 free GPU (0 free of 1)", "state": "queued", "held": False, "gpus": "any:1",
             "assigned_gpus": None},
            {"id": "20260101-090002-e5f6", "name": "zero3-long", "position": 2, "waiting_for": "held",
             "state": "queued", "held": True, "gpus": "", "assigned_gpus": None}]})

    def shutdown(self) -> None:
        self.poller.stop()


PAGE = QueuePage
