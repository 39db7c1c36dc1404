"""The Monitor page's Nodes tab (issue 15): a multi-node run's nodes side by side, one row each with its latest
figures (ranks' memory and CPU, host RAM and CPU, GPU memory) beside its peaks, and two charts with a line per node
(host RAM used, host CPU), so a node drifting away from the others shows.

It reads what the Runs page's Nodes tab reads: backend/runs/control/node_report.py's nodes_summary over the node watch's
files (nodes.json, nodes_state.json), here with `now=True` for the latest sample. Light: one file read on the task
pool per tick, a tick at the Monitor's sampling interval (at least NODES_MIN_S: the watch writes twice a second and
the agents sample once), only while the page is on screen and the Nodes tab is the one shown, one read at a time.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from PySide6.QtCore import Qt, QTimer, Signal
from PySide6.QtWidgets import QGridLayout, QLabel, QTableWidget, QVBoxLayout, QWidget

from traindeck.gui.pages.monitor.shared import new_chart, new_table, set_row
from traindeck.gui.tasks import owned
from traindeck.gui.theme import set_muted
from traindeck.gui.widgets.chart_axis import format_value

if TYPE_CHECKING:
    from traindeck.gui.tasks import Tasks

NODES_MIN_S = 1.0
COLUMNS = ["Node", "Ranks", "Ranks' memory", "Ranks' CPU", "RAM used", "CPU", "GPU memory", "Peak ranks' memory",
           "Peak RAM used", "State"]  # the state last: it takes the width left (an unreachable node's reason)


def read_run_nodes(run_id: str, run_dir: str | None) -> tuple[str | None, list[dict[str, Any]] | None]:
    """Worker side: (the run's directory, its nodes now); the directory is looked up once, then passed back in."""
    from traindeck.backend.runs import nodes_summary

    if run_dir is None:
        from traindeck.backend.core import run_store_path
        from traindeck.backend.runs import RunStore

        if not run_store_path().exists():
            return None, None
        with RunStore(busy_timeout_s=2.0) as store:
            record = store.get_run(run_id)
        run_dir = record.run_dir if record is not None else None
    return run_dir, nodes_summary(Path(run_dir), now=True) if run_dir else None


def node_cells(node: dict[str, Any], live: bool) -> list[str]:
    now, peaks = node.get("now") or {}, node.get("peaks") or {}
    if not node.get("reachable", True):
        now = {}  # its last figures are not the node's figures now

    def size(figures: dict[str, Any], key: str) -> str:
        return format_value(figures.get(key), "B") if live or figures is peaks else "-"

    def pct(key: str) -> str:
        value = now.get(key)
        return f"{value:.0f} %" if live and isinstance(value, (int, float)) else "-"

    ram = size(now, "ram_used_bytes")
    if ram != "-" and isinstance(now.get("ram_total_bytes"), (int, float)):
        ram += f" of {format_value(now['ram_total_bytes'], 'B')}"
    if not node.get("reachable", True):
        state = f"unreachable: {node.get('unreachable') or '?'}"
    elif live:
        state = f"{now.get('ranks_running') or 0} rank(s) running" if now.get("written_at") else "waiting for its agent"
    else:
        state = "ended"
    if node.get("ended_ranks"):
        state += f"; ended ranks {', '.join(str(r) for r in node['ended_ranks'])}"
    return [str(node.get("host")), ", ".join(str(r) for r in node.get("ranks") or []), size(now, "ranks_rss_bytes"),
            pct("ranks_cpu_percent"), ram, pct("cpu_percent"), size(now, "gpu_memory_bytes"),
            size(peaks, "ranks_rss_bytes"), size(peaks, "ram_used_bytes"), state]


class MonitorNodes(QWidget):
    """`has_nodes(bool)` says whether the run watched has nodes (the page shows the tab only then)."""

    has_nodes = Signal(bool)

    def __init__(self, tasks: Tasks, interval_s: float) -> None:
        super().__init__()
        self.tasks = tasks
        self.run_id: str | None = None
        self.live = False
        self.nodes: list[dict[str, Any]] = []
        self._run_dir: str | None = None
        self._reading = False
        self._request = 0
        self._last_t: dict[str, float] = {}
        self.title = QLabel()
        self.table = new_table(COLUMNS)
        self.table.setObjectName("monitorNodesTable")
        self.table.setSelectionMode(QTableWidget.SelectionMode.NoSelection)
        self.table.setTextElideMode(Qt.TextElideMode.ElideRight)
        self.ram_chart = new_chart("Host RAM used, per node", "B")
        self.cpu_chart = new_chart("Host CPU, per node (all cores)", "%")
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addWidget(self.title)
        layout.addWidget(self.table)
        self.charts = QWidget()  # live runs only: a finished run's table has its peaks, nothing to draw over time
        charts = QGridLayout(self.charts)
        charts.setContentsMargins(0, 0, 0, 0)
        charts.addWidget(self.ram_chart, 0, 0)
        charts.addWidget(self.cpu_chart, 0, 1)
        layout.addWidget(self.charts, 1)
        self.after_note = QLabel("The nodes are charted while the run runs (the node watch keeps each node's "
                                 "latest figures and its peaks, not a history); this machine's recording of the "
                                 "run is on the Run and Offload tabs.")
        self.after_note.setWordWrap(True)
        set_muted(self.after_note)
        self.after_note.hide()
        layout.addWidget(self.after_note)
        layout.addStretch(0)  # takes the room only while the charts (stretch 1) are hidden
        self.timer = QTimer(self)
        self.timer.timeout.connect(self.refresh)
        self.set_interval(interval_s)

    def set_interval(self, seconds: float) -> None:
        self.timer.setInterval(int(max(NODES_MIN_S, seconds) * 1000))

    def set_window(self, seconds: float) -> None:
        """Show the newest `seconds` of both charts (and follow the newest data again)."""
        for chart in (self.ram_chart, self.cpu_chart):
            chart.x_window = seconds

    def set_run(self, run_id: str | None, live: bool) -> None:
        """Watch this run's nodes (None: none); one read at once tells whether it has any."""
        self._request += 1  # a read under way is for the run as it was: its answer is dropped, and does not hold
        self._reading = False  # back the read this one starts
        self.run_id, self.live, self._run_dir = run_id, live, None
        self.nodes, self._last_t = [], {}
        self.table.setRowCount(0)
        for chart in (self.ram_chart, self.cpu_chart):
            for name in chart.series_names():
                chart.remove_series(name)
        self.timer.stop()
        if run_id is None:
            self.has_nodes.emit(False)
            return
        self.refresh(force=True)

    def resume(self) -> None:
        """On screen: follow a live run again."""
        if self.live and self.run_id is not None and self.nodes and not self.timer.isActive():
            self.timer.start()
            self.refresh()

    def pause(self) -> None:
        self.timer.stop()

    def refresh(self, force: bool = False) -> None:
        if self.run_id is None or self._reading or not (force or self.isVisible()):
            return
        self._reading = True
        request = self._request
        self.tasks.run(read_run_nodes, self.run_id, self._run_dir,
                       done=owned(self, lambda result: self._arrived(request, *result)),
                       failed=owned(self, lambda _error: self._failed(request)))

    def _failed(self, request: int) -> None:
        if request == self._request:
            self._reading = False

    def _arrived(self, request: int, run_dir: str | None, nodes: list[dict[str, Any]] | None) -> None:
        if request != self._request:
            return
        self._reading = False
        first = not self.nodes
        self._run_dir = run_dir
        self.nodes = nodes or []
        if first:
            self.has_nodes.emit(bool(self.nodes))
            if self.nodes and self.live:
                self.timer.start()
        if not self.nodes:
            return
        if self.table.rowCount() != len(self.nodes):
            self.table.setRowCount(len(self.nodes))
            self._fit_table()
        for row, node in enumerate(self.nodes):
            cells = node_cells(node, self.live)
            set_row(self.table, row, cells, right_from=2)
            state = self.table.item(row, len(cells) - 1)
            assert state is not None  # set_row made it
            state.setTextAlignment(Qt.AlignmentFlag.AlignLeft | Qt.AlignmentFlag.AlignVCenter)
            state.setToolTip(cells[-1])
        self.charts.setVisible(self.live)
        for column in range(2, 7):  # the latest figures: nothing to show once the run has ended
            self.table.setColumnHidden(column, not self.live)
        self.after_note.setVisible(not self.live)
        self._chart(self.nodes)
        written = max((n["now"].get("written_at") or 0.0 for n in self.nodes), default=0.0)
        how = (f"the agents' latest figures, {max(0.0, time.time() - written):.0f} s old" if self.live and written
               else "waiting for the agents' first figures" if self.live else "ended: the peaks each node reached")
        self.title.setText(f"<b>{len(self.nodes)} nodes</b> — {how}")

    def _fit_table(self) -> None:
        """As tall as its rows (up to 12, then it scrolls): no empty block between the nodes and the charts."""
        rows = min(max(self.table.rowCount(), 1), 12)
        self.table.setFixedHeight(self.table.horizontalHeader().sizeHint().height()
                                  + rows * self.table.verticalHeader().defaultSectionSize()
                                  + self.table.horizontalScrollBar().sizeHint().height() + 4)

    def _chart(self, nodes: list[dict[str, Any]]) -> None:
        if not self.live:
            return
        for chart in (self.ram_chart, self.cpu_chart):
            known = set(chart.series_names())
            for node in nodes:  # a line per node in the table's order, whichever node reports first, so each node
                host = str(node.get("host"))  # keeps its colour from one run to the next
                if host not in known:
                    chart.append(host, [], [])
        for node in nodes:
            now, host = node.get("now") or {}, str(node.get("host"))
            t = now.get("written_at") if node.get("reachable", True) else None
            if not isinstance(t, (int, float)) or t <= self._last_t.get(host, 0.0):
                continue  # the watch has not written since the last read: no repeated point
            self._last_t[host] = t
            self.ram_chart.append(host, [t], [_number(now.get("ram_used_bytes"))])
            self.cpu_chart.append(host, [t], [_number(now.get("cpu_percent"))])


def _number(value: Any) -> float:
    return float(value) if isinstance(value, (int, float)) else float("nan")
