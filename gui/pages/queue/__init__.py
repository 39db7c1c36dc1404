"""The Queue page: the runs waiting to start unattended, what each waits for, and the queue's controls.

Thin over `backend/queue/listing.py`: every read and action runs on the task pool; the keeper (not this window)
starts the runs, so closing the window changes nothing. Connected to another machine (gui/remote_connect.py), the
page reads and acts on that machine's queue instead, through the same calls of the remote source
(backend/remote/runs.py), and its summary names the machine.
"""

from __future__ import annotations

import time
from typing import Any

from PySide6.QtCore import Qt
from PySide6.QtGui import QKeySequence, QShortcut
from PySide6.QtWidgets import (
    QAbstractItemView,
    QApplication,
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QPushButton,
    QTableWidget,
    QTableWidgetItem,
    QVBoxLayout,
)

from traindeck.backend.remote import RemoteRuns
from traindeck.gui.context import AppContext
from traindeck.gui.pages.base import Page
from traindeck.gui.polling import Poller

REFRESH_MS = 2000
# Another machine's queue: each read is an ssh call running that machine's traindeck (about 0.5 s there), so
# less often, as its resources in the status bar.
REMOTE_REFRESH_MS = 5000
# The reason for waiting is the long, varying text: last, taking the room left.
COLUMNS = ("Pos", "Name", "Runs", "State", "GPUs", "Id", "Waiting for")
POS, NAME, RUNS, STATE, GPUS, ID, WAITING = range(len(COLUMNS))
NAME_MAX_CHARS = 48  # the Name column fits its names up to about this many characters (the whole name: tooltip)
RUNS_MAX_CHARS = 40  # the Runs column (script, `-m module` or command, and arguments) likewise


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
        self.remote: RemoteRuns | None = None  # another machine's queue instead (use_remote)
        self._generation = 0  # bumped when the source changes: a read of the previous one is dropped
        self._fitted: dict[int, int] = {}  # column -> its width as last fitted (Name, Runs)
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
        # Pos is the order: no row numbers beside it. The id is read whole (it is what `traindeck queue` takes), a
        # name up to NAME_MAX_CHARS (fitted in show_state; the person may widen it), the reason for waiting, last,
        # gets the room left.
        self.table.verticalHeader().hide()
        self.table.setWordWrap(False)
        self.table.setTabKeyNavigation(False)  # Tab leaves the table (the arrows move in it)
        header = self.table.horizontalHeader()
        for column in range(len(COLUMNS)):
            header.setSectionResizeMode(column, QHeaderView.ResizeMode.ResizeToContents)
        header.setSectionResizeMode(NAME, QHeaderView.ResizeMode.Interactive)
        header.setSectionResizeMode(RUNS, QHeaderView.ResizeMode.Interactive)
        header.setStretchLastSection(True)
        self.table.doubleClicked.connect(self._open)
        self.table.itemSelectionChanged.connect(self._update_buttons)
        bar = QHBoxLayout()
        self.buttons: dict[str, QPushButton] = {}
        for action, text, tip in (
                ("pause", "&Pause queue", "Start no more runs (running ones go on); press again to resume"),
                ("start", "&Start now", "Start the selected run now, ahead of the order"),
                ("up", "Move &up", "Start the selected run earlier"),
                ("down", "Move &down", "Start the selected run later"),
                ("hold", "Ho&ld", "Keep the selected run from starting; press again to release it"),
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
        focus = QApplication.focusWidget()
        if focus is None or not self.isAncestorOf(focus):
            self.table.setFocus(Qt.FocusReason.ShortcutFocusReason)  # keys after Ctrl+7 go to the queue's rows

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
        generation = self._generation
        if self.remote is not None:
            read: Any = self.remote.queue_state
        else:
            from traindeck.backend.queue import queue_state as read
        self.ctx.tasks.run(read, done=lambda state: self._read(generation, state),
                           failed=lambda error: self._failed(generation, error))

    def use_remote(self, remote: RemoteRuns | None) -> None:
        """Show another machine's queue (None: this machine's again); a read of the previous one is dropped."""
        self.remote = remote
        self.poller.live_ms = self.poller.max_ms = REMOTE_REFRESH_MS if remote is not None else REFRESH_MS
        self.poller.timer.setInterval(self.poller.live_ms)
        self._generation += 1
        self._busy = False
        self.rows = []
        self.table.setRowCount(0)
        self.summary.setText(f"Reading {remote.host}'s queue…" if remote is not None else "Reading the queue…")
        self._update_buttons()
        if self.on_screen():
            self.refresh()

    def _read(self, generation: int, state: dict[str, Any]) -> None:
        if generation != self._generation:  # a read of the source shown before
            return
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
        if self.remote is not None:  # which machine's queue this is, in the line read first
            text = f"{self.remote.host}'s queue: " + text[0].lower() + text[1:]
        self.summary.setText(text)
        self.buttons["pause"].setText("&Resume queue" if self.paused else "&Pause queue")
        # Waiting runs first, in order; then running; then the ones that ended, newest first.
        ended = [r for r in rows if r["state"] not in ("queued", "running")]
        self.rows = [r for r in rows if r["state"] == "queued"] + [r for r in rows if r["state"] == "running"] + \
            ended[::-1]
        self.table.setRowCount(len(self.rows))
        for i, row in enumerate(self.rows):
            for column, (value, tip) in enumerate(row_cells(row)):
                item = QTableWidgetItem(value)
                if tip:
                    item.setToolTip(tip)
                self.table.setItem(i, column, item)
            if row["id"] == selected:
                self.table.selectRow(i)
        for column, most in ((NAME, NAME_MAX_CHARS), (RUNS, RUNS_MAX_CHARS)):
            self._fit_column(column, most)
        self._update_buttons()

    def _fit_column(self, column: int, max_chars: int) -> None:
        """The names (or what runs) whole up to `max_chars`: refitted when the texts need another width, so a width
        the person dragged stays while the texts stay the same."""
        metrics = self.table.fontMetrics()
        widest = max(self.table.sizeHintForColumn(column), self.table.horizontalHeader().sectionSizeHint(column)) + 8
        width = min(widest, metrics.horizontalAdvance("x" * max_chars) + 16)
        if width != self._fitted.get(column):
            self._fitted[column] = width
            self.table.setColumnWidth(column, width)

    def _failed(self, generation: int, error: str) -> None:
        if generation != self._generation:
            return
        self._busy = False
        where = f"{self.remote.host}'s queue" if self.remote is not None else "the queue"
        self.summary.setText(f"Could not read {where}: {error.splitlines()[0] if error else 'failed'}")

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
        self.buttons["hold"].setText("Re&lease" if row is not None and row["held"] else "Ho&ld")

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
        act: Any = self.remote.queue_action if self.remote is not None else queue_action
        generation = self._generation
        self.ctx.tasks.run(act, *args, done=lambda m: self._acted(generation, m),
                           failed=lambda m: self._acted(generation, m))

    def _acted(self, generation: int, message: str) -> None:
        self.ctx.status.emit(message)
        if generation != self._generation:  # another machine's queue is shown now: it reads itself
            return
        self._busy = False
        self.refresh()

    def load_demo(self) -> None:
        self._showing_demo = True
        self.poller.stop()
        self.show_state({"paused": False, "pause_reason": "", "keeper_running": True, "runs": [
            {"id": "20260101-090000-a1b2", "name": "sweep-lr=1e-5", "position": None, "waiting_for": "",
             "state": "running", "held": False, "gpus": "any:1", "assigned_gpus": [0], "entry": "script",
             "runs": "train.py --lr 1e-5"},
            {"id": "20260101-090001-c3d4", "name": "sweep-lr=3e-5", "position": 1,
             "waiting_for": "1 free GPU (0 free of 1)", "state": "queued", "held": False, "gpus": "any:1",
             "assigned_gpus": None, "entry": "script", "runs": "train.py --lr 3e-5"},
            {"id": "20260101-090002-e5f6", "name": "zero3-long", "position": 2, "waiting_for": "held",
             "state": "queued", "held": True, "gpus": "", "assigned_gpus": None, "entry": "module",
             "runs": "-m axolotl.cli.train zero3.yaml"}]})

    def shutdown(self) -> None:
        self.poller.stop()


def row_cells(row: dict[str, Any]) -> list[tuple[str, str]]:
    """One row's cells in COLUMNS order, each (text, tooltip). Every state says something in every column: a
    running run is out of the order, waits for nothing and shows since when it runs."""
    state = row["state"]
    if row.get("assigned_gpus"):
        gpus, gpus_tip = ",".join(map(str, row["assigned_gpus"])), "the GPUs it was started on"
    elif row.get("gpus"):
        gpus, gpus_tip = str(row["gpus"]), "the GPUs it asked for"
    else:
        gpus, gpus_tip = "–", "no GPUs asked for: it starts whenever a slot is free"
    if state == "queued":
        position, waiting = str(row["position"] or ""), row["waiting_for"] or "its turn"
    else:
        position = "–"
        if state == "running":
            started = row.get("started_at")
            waiting = ("nothing: running since " + time.strftime("%H:%M:%S", time.localtime(started))
                       if started else "nothing: running")
        else:
            waiting = "nothing: it ended"
    state_text = state + (" (held)" if row["held"] else "")
    # What it starts, as `traindeck queue add` was given it: `train.py ARGS`, `-m pkg.train ARGS` or the command.
    # A queue read from an older traindeck (another machine) does not say: a dash then.
    runs = str(row.get("runs") or "") or "–"
    runs_tip = {"module": "a module, run as python -m", "command": "a command on PATH, run as it is"}.get(
        str(row.get("entry") or ""), "a script file")
    return [(position, "its place in the order" if state == "queued" else "started: out of the order"),
            (row["name"], row["name"]), (runs, f"{runs_tip}: {runs}" if row.get("runs") else "not said"),
            (state_text, ""), (gpus, gpus_tip), (row["id"], ""), (waiting, waiting)]


PAGE = QueuePage
