"""The Runs page's Nodes tab (issue 15): a multi-node run's nodes side by side, one row each: host, ranks, peak
ranks memory, peak RAM used, peak CPU, peak GPU memory and whether the node answers (from the node watch's
nodes_state.json through backend/runs/control/node_report.py, as `runs show` prints them). The tab is there only for a run
with nodes; it is read on the thread pool with the page's own poll, at most every NODES_MS and only on screen."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from PySide6.QtWidgets import QHeaderView, QTableWidget, QTableWidgetItem, QTabWidget

from traindeck.backend.runs import ViewChange
from traindeck.gui.pages.runs.shared import RunsPageShared

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


class RunNodesPart(RunsPageShared):
    lower_tabs: QTabWidget  # built by RunLeftoversPart
    nodes_table: QTableWidget
    _nodes_read_at: float
    _nodes_tab: int

    def _build_nodes(self) -> None:
        """The Nodes tab, added after the Checkpoints tab and hidden until a run has nodes."""
        self._nodes_read_at = 0.0
        self.nodes_table = QTableWidget(0, len(COLUMNS))
        self.nodes_table.setObjectName("nodesTable")
        self.nodes_table.setHorizontalHeaderLabels(list(COLUMNS))
        self.nodes_table.verticalHeader().setVisible(False)
        self.nodes_table.setEditTriggers(QTableWidget.EditTrigger.NoEditTriggers)
        self.nodes_table.horizontalHeader().setSectionResizeMode(QHeaderView.ResizeMode.ResizeToContents)
        self.nodes_table.horizontalHeader().setStretchLastSection(True)
        self._nodes_tab = self.lower_tabs.addTab(self.nodes_table, "Nodes")
        self.lower_tabs.setTabVisible(self._nodes_tab, False)

    def _nodes_opened(self) -> None:
        self.nodes_table.setRowCount(0)
        self.lower_tabs.setTabVisible(self._nodes_tab, False)
        self._nodes_read_at = 0.0

    def _nodes_news(self, change: ViewChange) -> None:
        if self.source.remote is not None or not (change.first or self.on_screen()):
            return  # the node watch's files are on this machine; off screen, only the first read (the tab)
        now = time.monotonic()
        if not (change.first or change.ended_now) and now - self._nodes_read_at < NODES_MS / 1000:
            return
        if not change.first and change.record.state != "running" and not change.ended_now:
            return
        self._nodes_read_at = now
        run_id = change.record.id
        self.ctx.tasks.run(read_nodes, change.record.run_dir,
                           done=lambda nodes: self._nodes_arrived(run_id, nodes))

    def _nodes_arrived(self, run_id: str, nodes: list[dict[str, Any]] | None) -> None:
        if self.source.closing or run_id != self.run_id:
            return
        self.lower_tabs.setTabVisible(self._nodes_tab, bool(nodes))
        rows = [node_row(n) for n in nodes or []]
        self.nodes_table.setRowCount(len(rows))
        for r, row in enumerate(rows):
            for c, text in enumerate(row):
                item = self.nodes_table.item(r, c)
                if item is None:
                    self.nodes_table.setItem(r, c, QTableWidgetItem(text))
                elif item.text() != text:
                    item.setText(text)
        self.lower_tabs.setTabText(self._nodes_tab, f"Nodes ({len(rows)})" if rows else "Nodes")
