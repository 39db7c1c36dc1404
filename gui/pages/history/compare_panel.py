"""History's comparison of two runs, drawn: figures side by side, config differences, the configs' unified diff.
The comparison itself is backend/runs/control/compare.py. Part of HistoryPage (gui/pages/history/__init__.py), split off
along its seams."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from PySide6.QtGui import QColor, QFont, QSyntaxHighlighter, QTextCharFormat
from PySide6.QtWidgets import (
    QAbstractItemView,
    QHeaderView,
    QLabel,
    QPlainTextEdit,
    QTableWidget,
    QTableWidgetItem,
    QTabWidget,
)

from traindeck.backend.runs import RunComparison, RunHistory, RunStore, compare_runs
from traindeck.gui.pages.base import Page
from traindeck.gui.pages.history.run_table import RunsModel
from traindeck.gui.widgets.message_list import tone


def _compare(store_path: Path, id_a: str, id_b: str) -> RunComparison:
    with RunStore(store_path) as store:
        return compare_runs(store, id_a, id_b)


def setting_name(key: str) -> str:
    """A difference's key as the table names it: the command's arguments in words, config keys as written."""
    if key.startswith("launch.argv["):
        return f"command: argument {int(key[len('launch.argv['):-1]) + 1}"
    if key.startswith("launch.argv "):
        return f"command: {key[len('launch.argv '):]}"
    return key


class DiffHighlighter(QSyntaxHighlighter):
    """Colours a unified diff in `view`: additions, removals, hunk headers (in the theme's colours)."""

    def __init__(self, view: QPlainTextEdit):
        super().__init__(view.document())
        self.view = view

    def highlightBlock(self, text: str) -> None:
        fmt = QTextCharFormat()
        if text.startswith(("+++", "---")):
            fmt.setFontWeight(QFont.Weight.Bold)
        elif text.startswith(("+", "-")):
            fmt.setForeground(QColor(tone("ok" if text[0] == "+" else "error", self.view)))
        elif text.startswith("@@"):
            fmt.setFontItalic(True)
        else:
            return
        self.setFormat(0, len(text), fmt)


class HistoryComparePart(Page):
    """The comparison's part of HistoryPage: what it reads of the page, declared here; its methods."""

    history: RunHistory
    model: RunsModel
    comparison: RunComparison | None
    compare_title: QLabel
    tabs: QTabWidget
    figures_table: QTableWidget
    config_table: QTableWidget
    diff_view: QPlainTextEdit

    def selected_ids(self) -> list[str]:
        raise NotImplementedError  # HistoryPage (its list)

    def _side_by_side(self, headers: tuple[str, ...]) -> QTableWidget:
        table = QTableWidget(0, len(headers))
        table.setHorizontalHeaderLabels(list(headers))
        table.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
        table.setSelectionBehavior(QAbstractItemView.SelectionBehavior.SelectRows)
        table.verticalHeader().setVisible(False)
        table.verticalHeader().setDefaultSectionSize(self.fontMetrics().height() + 8)
        table.setWordWrap(False)
        header = table.horizontalHeader()
        header.setSectionResizeMode(QHeaderView.ResizeMode.Stretch)
        header.setSectionResizeMode(0, QHeaderView.ResizeMode.ResizeToContents)
        return table

    # ------------------------------------------------------------------------------------------------ compare
    def compare_selected(self) -> None:
        ids = self.selected_ids()
        if len(ids) != 2:
            self.compare_title.setText("Select exactly two runs to compare (Ctrl+click the second).")
            return
        by_id = {r.run_id: r for r in self.model.rows}
        # The older run is A: "B vs A" then reads as what changed since.
        a, b = sorted(ids, key=lambda i: by_id[i].created_at if i in by_id else 0)
        self.compare(a, b)

    def compare(self, id_a: str, id_b: str) -> None:
        self.compare_title.setText("Comparing…")
        self.ctx.tasks.run(_compare, self.history.store_path, id_a, id_b, done=self._show_comparison,
                           failed=lambda error: self.compare_title.setText(
                               f"Cannot compare: {error.splitlines()[0] if error else 'unknown error'}"))

    def _show_comparison(self, result: RunComparison) -> None:
        self.comparison = result
        a, b = result.a, result.b
        self.compare_title.setText(
            f"<b>A</b>: {a.name or a.run_id} <span style='color:gray'>({a.run_id})</span> &nbsp;·&nbsp; "
            f"<b>B</b>: {b.name or b.run_id} <span style='color:gray'>({b.run_id})</span>"
            + (f"<br>{'; '.join(result.problems)}" if result.problems else ""))

        rows = [(f.what, f.a, f.b, f.change) for f in result.figures]
        if result.metrics:
            rows.append(("Final metrics", "", "", ""))
            rows += [(f"  {m.what}", m.a, m.b, m.change) for m in result.metrics]
        self._fill(self.figures_table, rows, bold_rows={len(result.figures)} if result.metrics else set())
        differing = [(setting_name(d.key), d.text("a"), d.text("b")) for d in result.differences]
        self._fill(self.config_table, differing)
        self.tabs.setTabText(1, f"Config differences ({len(differing)})")
        self.config_table.setToolTip(f"{result.same} settings are the same in both runs")
        self.diff_view.setPlainText(result.unified_diff or "The two runs' config files are the same.")

    def _fill(self, table: QTableWidget, rows: Sequence[tuple[str, ...]], bold_rows: set[int] | None = None) -> None:
        table.setRowCount(len(rows))
        for r, values in enumerate(rows):
            for c, text in enumerate(values):
                item = QTableWidgetItem(text)
                item.setToolTip(text)
                if bold_rows and r in bold_rows:
                    font = item.font()
                    font.setBold(True)
                    item.setFont(font)
                table.setItem(r, c, item)
