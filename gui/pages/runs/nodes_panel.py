"""The Runs page's Nodes tab: a multi-node run's nodes side by side, one row each: host, ranks, peak
ranks memory, peak RAM used, peak CPU, peak GPU memory and whether the node answers (from the node watch's
nodes_state.json through backend/runs/control/node_report.py, as `runs show` prints them). The tab is there only for a run
with nodes; it is read on the thread pool with the page's own poll, at most every NODES_MS and only on screen."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from PySide6.QtCore import Signal
from PySide6.QtWidgets import QHeaderView, QTableWidget, QTableWidgetItem

from traindeck.backend.runs import ViewChange, WatchedRun
from traindeck.gui.pages.runs.source import RunsSource
from traindeck.gui.tasks import Tasks

NODES_MS = 5000
COLUMNS = ("Node", "Ranks", "Peak ranks memory", "Peak RAM used", "Peak CPU", "Peak GPU memory", "State")


def _gib(value: Any) -> str:
    return f"{value / 2**30:.2f} GiB" if isinstance(value, (int, float)) else "-"


def node_row(node: dict[str, Any]) -> list[str]:
    peaks = node.get("peaks") or {}
    ram = _gib(peaks.get("ram_used_bytes"))
    if isinstance(peaks.get("ram_total_bytes"), (int, float)):
        ram += f" of {_gib(peaks['ram_total_bytes'])}"
    cpu = f"{peaks['cpu_percent']:.0f} %" if isinstance(peaks.get("cpu_percent"), (int, float)) else "-"
    state = "answering" if node.get("reachable", True) else f"unreachable: {node.get('unreachable') or '?'}"
    if node.get("ended_ranks"):
        state += f"; ended ranks {', '.join(str(r) for r in node['ended_ranks'])}"
    return [str(node.get("host")), ", ".join(str(r) for r in node.get("ranks") or []),
            _gib(peaks.get("ranks_rss_bytes")), ram, cpu, _gib(peaks.get("gpu_memory_bytes")), state]


def read_nodes(run_dir: str) -> list[dict[str, Any]] | None:
    from traindeck.backend.runs import nodes_summary

    return nodes_summary(Path(run_dir)) if run_dir else None


class NodesTable(QTableWidget):
    """The Nodes tab's table: read on the thread pool after the open run's polls (the page hands it their news)."""

    rows_shown = Signal(int)  # how many nodes are shown now (0: none, the page hides the tab)

    def __init__(self, tasks: Tasks, watched: WatchedRun, source: RunsSource) -> None:
        super().__init__(0, len(COLUMNS))
        self._tasks, self._watched, self._source = tasks, watched, source
        self._read_at = 0.0  # monotonic time of the last read
        self.setObjectName("nodesTable")
        self.setHorizontalHeaderLabels(list(COLUMNS))
        self.verticalHeader().setVisible(False)
        self.setEditTriggers(QTableWidget.EditTrigger.NoEditTriggers)
        self.horizontalHeader().setSectionResizeMode(QHeaderView.ResizeMode.ResizeToContents)
        self.horizontalHeader().setStretchLastSection(True)

    def open_run(self) -> None:
        """Another run is open: nothing shown until its first read."""
        self.setRowCount(0)
        self._read_at = 0.0

    def news(self, change: ViewChange, on_screen: bool) -> None:
        """After each poll of the open run: read the nodes again while it goes (on screen, every NODES_MS), once
        when it is opened and once more when it ends."""
        if self._source.remote is not None or not (change.first or on_screen):
            return  # the node watch's files are on this machine; off screen, only the first read (the tab)
        now = time.monotonic()
        if not (change.first or change.ended_now) and now - self._read_at < NODES_MS / 1000:
            return
        if not change.first and change.record.state != "running" and not change.ended_now:
            return
        self._read_at = now
        run_id = change.record.id
        self._tasks.run(read_nodes, change.record.run_dir, done=lambda nodes: self._arrived(run_id, nodes))

    def _arrived(self, run_id: str, nodes: list[dict[str, Any]] | None) -> None:
        if self._source.closing or run_id != self._watched.run_id:
            return
        rows = [node_row(n) for n in nodes or []]
        self.setRowCount(len(rows))
        for r, row in enumerate(rows):
            for c, text in enumerate(row):
                item = self.item(r, c)
                if item is None:
                    self.setItem(r, c, QTableWidgetItem(text))
                elif item.text() != text:
                    item.setText(text)
        self.rows_shown.emit(len(rows))
