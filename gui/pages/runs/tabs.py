"""The Runs page's tabs below the console: Charts, Checkpoints, Step (inside the run's steps), and Nodes (shown only
for a run with nodes). The tabs are titled from what their panels say they show."""

from __future__ import annotations

from PySide6.QtWidgets import QTabWidget

from traindeck.gui.pages.runs.charts_panel import ChartsPanel
from traindeck.gui.pages.runs.leftovers_panel import CheckpointsTab
from traindeck.gui.pages.runs.nodes_panel import NodesTable
from traindeck.gui.pages.runs.step_panel import StepPanel


class RunTabs(QTabWidget):
    """Charts, Checkpoints, Step and Nodes, each tab titled with what its panel counts."""

    def __init__(self, charts: ChartsPanel, checkpoints: CheckpointsTab, step: StepPanel, nodes: NodesTable) -> None:
        super().__init__()
        self.setDocumentMode(True)
        self.addTab(charts, "Charts")
        self.checkpoints_tab = self.addTab(checkpoints, "Checkpoints")
        self.step_tab = self.addTab(step, "Step")
        self.setTabToolTip(self.step_tab, "Inside each step: forward, backward, communication, optimizer, swap and "
                                          "other time per rank, memory peaks, what bounds the run")
        self.nodes_tab = self.addTab(nodes, "Nodes")
        self.setTabVisible(self.nodes_tab, False)
        checkpoints.listed.connect(lambda count, _companion: self._show_checkpoints(count))
        nodes.rows_shown.connect(self._show_nodes)

    def open_run(self, remote: bool) -> None:
        """Another run is open: no counts yet, no Nodes tab until its nodes are read; no Checkpoints tab for a run
        of another machine (read from this machine's files: not over SSH yet), and its charts say they stay empty
        (the series are not read over SSH; the latest metrics beside them are)."""
        self.setTabText(0, "Charts (latest metrics only: not over SSH)" if remote else "Charts")
        self.setTabText(self.checkpoints_tab, "Checkpoints")
        self.setTabEnabled(self.checkpoints_tab, not remote)
        if remote:
            self.setCurrentIndex(0)
        self.setTabVisible(self.nodes_tab, False)

    def _show_checkpoints(self, count: int) -> None:
        self.setTabText(self.checkpoints_tab, f"Checkpoints ({count})" if count else "Checkpoints")

    def _show_nodes(self, count: int) -> None:
        self.setTabVisible(self.nodes_tab, bool(count))
        self.setTabText(self.nodes_tab, f"Nodes ({count})" if count else "Nodes")
