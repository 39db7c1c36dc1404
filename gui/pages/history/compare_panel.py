"""History's comparison of two to eight runs, as one panel: figures side by side (one column a run), config
differences, the launch commands argument by argument, the configs' unified diff, the overlay of their curves
(overlay_panel.py) and, for two runs, "Code and packages" (git commits and dirty state, versions, and which packages
differ in their pip freeze, and how) and "Step anatomy" (each run's slowest rank's typical phase times, called the
slowest only where it holds the others up, and the run's verdict: ZeRO-2 against ZeRO-3, say). Two runs read as A
and B with B's ratio to A; more read as A, B, C ... with each one's ratio to A beside its value. The comparisons
themselves are backend/runs/control/compare.py (compare_runs, compare_many, overlay), compare_provenance and
run_step_anatomy; all are read on the thread pool, from the run store the page names. While a compared run is live
(and once more when it ends) each of the page's reads of the history (`runs_read`) brings its figures up to date
from the rows read, with nothing read again, and the overlay reads its newer points; a comparison of finished runs
is read once."""

from __future__ import annotations

import html
from collections.abc import Callable, Sequence
from pathlib import Path

from PySide6.QtCore import QEvent, Qt
from PySide6.QtGui import QColor, QFont, QFontDatabase, QSyntaxHighlighter, QTextCharFormat
from PySide6.QtWidgets import (
    QAbstractItemView,
    QHeaderView,
    QLabel,
    QPlainTextEdit,
    QTableWidget,
    QTableWidgetItem,
    QTabWidget,
    QVBoxLayout,
    QWidget,
)

from traindeck.backend.core import format_bytes
from traindeck.backend.runs import (
    MAX_COMPARED,
    ColumnsRow,
    ManyComparison,
    ProvenanceComparison,
    RunComparison,
    RunFigures,
    RunStore,
    compare_many,
    compare_provenance,
    compare_runs,
    run_step_anatomy,
)
from traindeck.backend.steps import PHASES, RankAnatomy, StepAnatomy
from traindeck.gui.context import AppContext
from traindeck.gui.pages.history.overlay_panel import OverlayPanel
from traindeck.gui.widgets.message_list import tone
from traindeck.gui.widgets.run_leftovers import one_line

# The metrics' heading while a compared run is running: its values are its latest, not final ones.
LATEST_METRICS = "Final metrics (a running run's: its latest)"


def _compare(store_path: Path, id_a: str, id_b: str) -> RunComparison:
    with RunStore(store_path) as store:
        return compare_runs(store, id_a, id_b)


def _compare_many(store_path: Path, ids: list[str]) -> ManyComparison:
    with RunStore(store_path) as store:
        return compare_many(store, ids)


def _provenance_of(store_path: Path, id_a: str, id_b: str) -> ProvenanceComparison:
    with RunStore(store_path) as store:
        a, b = store.get_run(id_a), store.get_run(id_b)
    if a is None or b is None:
        raise LookupError(f"no run {id_a if a is None else id_b} in the run store")
    return compare_provenance(a.run_dir, b.run_dir)


def _step_anatomies(store_path: Path, id_a: str, id_b: str) -> tuple[StepAnatomy, StepAnatomy]:
    with RunStore(store_path) as store:
        a, b = store.get_run(id_a), store.get_run(id_b)
        if a is None or b is None:
            raise LookupError(f"no run {id_a if a is None else id_b} in the run store")
        return run_step_anatomy(a, store), run_step_anatomy(b, store)


def _ratio(a: float | None, b: float | None) -> str:
    """B relative to A ("0.62x"); "" when either is unknown or zero."""
    if a is None or b is None or a <= 0 or b <= 0:
        return ""
    ratio = b / a
    if abs(ratio - 1) < 0.005:
        return "same"
    # Two significant digits below 0.1x: 50 ms -> 0.2 ms is 0.004x, not "0.00x".
    return f"{ratio:.2f}x" if ratio >= 0.1 else f"{ratio:.2g}x"


def _ms_change(a: float | None, b: float | None) -> str:
    """B against A in milliseconds and as a ratio ("+190.0 ms (20.00x)"); "same" within 0.05 ms."""
    if a is None or b is None:
        return ""
    if abs(b - a) < 0.05:
        return "same"
    ratio = _ratio(a, b)
    return f"{b - a:+.1f} ms" + (f" ({ratio})" if ratio and ratio != "same" else "")


def anatomy_rows(a: StepAnatomy, b: StepAnatomy) -> list[tuple[str, str, str, str]]:
    """Two runs' step anatomies side by side: one rank of each (its slowest, called so only where it holds the
    others up), its typical phase times, step time, GPU and host peaks, and what bounds each run."""
    def slowest(anatomy: StepAnatomy) -> RankAnatomy | None:
        return anatomy.ranks.get(anatomy.slowest_rank) if anatomy.slowest_rank is not None else None

    sa, sb = slowest(a), slowest(b)

    def rank(anatomy: StepAnatomy, r: RankAnatomy | None) -> str:
        # The slowest only where it holds the others up (the straggler the Runs page's Step tab marks).
        if r is None:
            return "-"
        if r.rank == anatomy.straggler:
            return f"rank {r.rank} of {len(anatomy.ranks)}, the slowest"
        return f"rank {r.rank} of {len(anatomy.ranks)}" + (" (ranks evenly matched)" if len(anatomy.ranks) > 1 else "")

    def ms(value: float | None) -> str:
        return "-" if value is None else f"{value:.1f} ms"

    rows = [("Rank", rank(a, sa), rank(b, sb), "")]
    for phase in PHASES:
        va = sa.phases_ms.get(phase, 0.0) if sa else None
        vb = sb.phases_ms.get(phase, 0.0) if sb else None
        rows.append((f"  {phase}", ms(va), ms(vb), _ms_change(va, vb)))
    rows.append(("Step", ms(sa.step_ms if sa else None), ms(sb.step_ms if sb else None),
                 _ms_change(sa.step_ms if sa else None, sb.step_ms if sb else None)))
    for title, field in (("GPU peak (allocated)", "peak_gpu_allocated"), ("Host peak (RSS)", "peak_host")):
        # The host row: offloaded optimizer state and parameters live in host RAM, where the GPU row has nothing.
        ma, mb = getattr(sa, field) if sa else None, getattr(sb, field) if sb else None
        peak = _ratio(ma, mb)
        rows.append((title, format_bytes(ma), format_bytes(mb),
                     f"{peak} ({'lower' if (mb or 0) < (ma or 0) else 'higher'})" if peak not in ("", "same") else peak))
    def bound(anatomy: StepAnatomy) -> str:
        second = f" ({anatomy.close_second} close behind)" if anatomy.close_second else ""
        return (anatomy.bound or "-") + second

    rows.append(("Bound by", bound(a), bound(b), "" if a.bound == b.bound else "differs"))
    return rows


def column_cells(row: ColumnsRow) -> tuple[str, ...]:
    """An N-run row's cells: each value, with its ratio to the first run's where there is one ("0.8 s (1.60x)")."""
    changes = row.changes or ("",) * len(row.values)
    return tuple(f"{value} ({change.split(' ')[0]})" if change and change != "same" else value
                 for value, change in zip(row.values, changes, strict=True))


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


class ComparePanel(QWidget):
    """Two to eight runs side by side, in tabs; `comparison` holds the latest two-run comparison read, `many` the
    latest comparison of more (and the commands of any)."""

    def __init__(self, ctx: AppContext, store_path: Callable[[], Path], parent: QWidget | None = None):
        super().__init__(parent)
        self.ctx = ctx
        self._store_path = store_path  # the page's run store (the demo switches it)
        self.comparison: RunComparison | None = None
        self.many: ManyComparison | None = None
        self.count = 0  # the runs of the comparison shown
        self.live = False  # a compared run was running at the last read: the figures and curves follow it
        self._filled: dict[int, tuple[object, ...]] = {}  # per table (by id): the cells it shows
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        self.compare_title = QLabel(f"Select two to {MAX_COMPARED} runs and press Compare to see them side by side.")
        self.compare_title.setWordWrap(True)
        self.compare_title.setTextFormat(Qt.TextFormat.RichText)
        layout.addWidget(self.compare_title)
        self.tabs = QTabWidget()
        self.figures_table = self._side_by_side(("", "A", "B", "B vs A"))
        self.config_table = self._side_by_side(("Setting", "A", "B"))
        self.diff_view = QPlainTextEdit()
        self.diff_view.setReadOnly(True)
        self.diff_view.setTabChangesFocus(True)  # read-only: Tab moves on, as from any other field
        self.diff_view.setLineWrapMode(QPlainTextEdit.LineWrapMode.NoWrap)
        self.diff_view.setFont(QFontDatabase.systemFont(QFontDatabase.SystemFont.FixedFont))
        self.diff_view.setPlaceholderText("The configs' unified diff appears here.")
        self._highlighter = DiffHighlighter(self.diff_view)
        self.provenance_table = self._side_by_side(("", "A", "B", "B vs A"))  # as on Figures: "differs", "upgraded"
        # Step anatomy: each run's slowest rank's typical phases side by side, each run's verdict below them.
        self.steps_table = self._side_by_side(("Typical step of one rank", "A", "B", "B vs A"))
        self.steps_verdicts = QLabel()
        self.steps_verdicts.setObjectName("stepVerdicts")
        self.steps_verdicts.setWordWrap(True)
        self.steps_verdicts.setTextFormat(Qt.TextFormat.RichText)
        self.steps_verdicts.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        steps = QWidget()
        steps_layout = QVBoxLayout(steps)
        steps_layout.setContentsMargins(0, 0, 0, 0)
        steps_layout.addWidget(self.steps_table, 1)
        steps_layout.addWidget(self.steps_verdicts)
        self.step_anatomies: tuple[StepAnatomy, StepAnatomy] | None = None
        self.command_table = self._side_by_side(("#", "A", "B"))
        self.command_table.setToolTip("Each run's launch command, one argument a row; rows that differ are bold")
        self.overlay = OverlayPanel(ctx, store_path)
        self.tabs.addTab(self.figures_table, "Figures")
        self.tabs.addTab(self.config_table, "Config differences")
        self.tabs.addTab(self.diff_view, "Unified diff")
        self.tabs.addTab(self.provenance_table, "Code and packages")
        self.tabs.addTab(steps, "&Step anatomy")  # Alt+S, as the Runs page's Step tab
        self.tabs.addTab(self.command_table, "Command")
        self.tabs.addTab(self.overlay, "Overlay")
        layout.addWidget(self.tabs, 1)

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

    def changeEvent(self, event: QEvent) -> None:
        super().changeEvent(event)
        if event.type() in (QEvent.Type.PaletteChange, QEvent.Type.ApplicationPaletteChange):
            self._highlighter.rehighlight()  # diff colours follow the theme

    # ------------------------------------------------------------------------------------------------ live runs
    def runs_read(self, rows: Sequence[RunFigures]) -> None:
        """The page's newest read of the runs: while a compared run is live, or has just ended, the figures follow
        these rows and the overlay reads what the live runs logged since; else nothing is done."""
        ids = self._compared_ids()
        if not ids:
            return
        by_id = {r.run_id: r for r in rows if r.run_id in ids}
        live = any(r.state == "running" for r in by_id.values())
        if not (live or self.live):
            return
        self.live = live
        if self.count == 2 and self.comparison is not None:
            self.comparison = self.comparison.with_figures(by_id)
            self._show_two_figures(self.comparison)
        elif self.count > 2 and self.many is not None:
            self.many = self.many.with_figures(by_id)
            self._show_many_figures(self.many)
        self.overlay.follow()

    def _compared_ids(self) -> list[str]:
        """The runs of the comparison shown (none until its first read arrived)."""
        if self.count == 2 and self.comparison is not None:
            return [self.comparison.a.run_id, self.comparison.b.run_id]
        if self.count > 2 and self.many is not None:
            return [r.run_id for r in self.many.runs]
        return []

    # ------------------------------------------------------------------------------------------------ compare
    def show_overlay(self) -> None:
        """Bring the Overlay tab forward (a sweep's runs: their curves answer which setting was best)."""
        self.tabs.setCurrentWidget(self.overlay)

    def compare_selected(self, ids: list[str], rows: list[RunFigures]) -> None:
        """Compare the runs selected among `rows`, oldest first (A): "B vs A" then reads as what changed since;
        fewer than two or more than MAX_COMPARED selected says so."""
        if not 2 <= len(ids) <= MAX_COMPARED:
            self.compare_title.setText(f"Select two to {MAX_COMPARED} runs to compare (Ctrl+click to add one).")
            return
        by_id = {r.run_id: r for r in rows}
        ordered = sorted(ids, key=lambda i: by_id[i].created_at if i in by_id else 0)
        if len(ordered) == 2:
            self.compare(*ordered)
        else:
            self.compare_runs(ordered)

    def compare_runs(self, ids: list[str]) -> None:
        """Three to eight runs side by side (A is the first): figures, settings, commands, diffs, curves."""
        store_path = self._store_path()
        self.count = len(ids)
        self.comparison = None
        self.compare_title.setText("Comparing…")
        self._read_many(store_path, ids, full=True)
        self.overlay.show_runs(ids)
        self.tabs.setTabText(3, "Code and packages")
        self.step_anatomies = None
        self.steps_verdicts.setText("")
        for table in (self.provenance_table, self.steps_table):
            self._fill(table, [("Select two runs to compare this.", "", "", "")])

    def _read_many(self, store_path: Path, ids: list[str], full: bool) -> None:
        """compare_many on the pool: every tab's N columns (full), or only the commands (two runs)."""
        def failed(error: str) -> None:
            if full:
                self.compare_title.setText(f"Cannot compare: {one_line(error)}")
            self._fill(self.command_table, [(f"Cannot compare: {one_line(error)}",)])

        self.ctx.tasks.run(_compare_many, store_path, ids, done=lambda result: self._show_many(result, full),
                           failed=failed)

    def compare(self, id_a: str, id_b: str) -> None:
        store_path = self._store_path()
        self.count = 2
        self.many = None
        self.comparison = None  # until this pair's is read (a live run's refresh leaves it alone meanwhile)
        self.compare_title.setText("Comparing…")
        self._read_many(store_path, [id_a, id_b], full=False)
        self.overlay.show_runs([id_a, id_b])
        self.ctx.tasks.run(_compare, store_path, id_a, id_b, done=self._show_comparison,
                           failed=lambda error: self.compare_title.setText(
                               f"Cannot compare: {error.splitlines()[0] if error else 'unknown error'}"))
        self.tabs.setTabText(3, "Code and packages")
        self._fill(self.provenance_table, [("Reading…", "", "", "")])
        self.ctx.tasks.run(_provenance_of, store_path, id_a, id_b,
                           done=self._show_provenance,
                           failed=lambda text: self._fill(self.provenance_table,
                                                          [(f"Cannot compare: {one_line(text)}", "", "", "")]))
        self.step_anatomies = None
        self._fill(self.steps_table, [("Reading…", "", "", "")])
        self.steps_verdicts.setText("")
        self.ctx.tasks.run(_step_anatomies, store_path, id_a, id_b, done=self._show_step_anatomies,
                           failed=lambda text: self._fill(self.steps_table,
                                                          [(f"Cannot compare: {one_line(text)}", "", "", "")]))

    def _show_many(self, result: ManyComparison, full: bool) -> None:
        if len(result.runs) != self.count:
            return  # another comparison was asked for meanwhile
        letters = list(result.labels)
        self._set_columns(self.command_table, ["#", *letters])
        self._fill(self.command_table, [(row.what, *row.values) for row in result.command],
                   bold_rows={i for i, row in enumerate(result.command) if row.differs})
        differing = sum(1 for row in result.command if row.differs)
        self.tabs.setTabText(5, f"Command ({differing} differ)" if differing else "Command")
        if not full:
            return
        self.many = result
        self.live = any(r.state == "running" for r in result.runs)
        self.compare_title.setText(" &nbsp;·&nbsp; ".join(
            f"<b>{label}</b>: {html.escape(r.name or r.run_id)} <span style='color:gray'>({r.run_id})</span>"
            for label, r in zip(letters, result.runs, strict=True))
            + (f"<br>{html.escape('; '.join(result.problems))}" if result.problems else ""))
        self._show_many_figures(result)
        self._set_columns(self.config_table, ["Setting", *letters])
        self._fill(self.config_table, [(setting_name(d.what), *d.values) for d in result.differences])
        self.tabs.setTabText(1, f"Config differences ({len(result.differences)})")
        self.config_table.setToolTip(f"{result.same} settings are the same in every run")
        self.diff_view.setPlainText(result.unified_diff or "The runs' config files are the same.")

    def _show_many_figures(self, result: ManyComparison) -> None:
        letters = list(result.labels)
        self._set_columns(self.figures_table, ["", *letters])
        rows = [(f.what, *column_cells(f)) for f in result.figures]
        if result.metrics:
            rows.append((LATEST_METRICS if self.live else "Final metrics", *[""] * len(letters)))
            rows += [(f"  {m.what}", *column_cells(m)) for m in result.metrics]
        self._fill(self.figures_table, rows, bold_rows={len(result.figures)} if result.metrics else set())
        self.figures_table.setToolTip("Each run's figures; in brackets, its ratio to A's")

    def _set_columns(self, table: QTableWidget, headers: list[str]) -> None:
        items = [table.horizontalHeaderItem(c) for c in range(table.columnCount())]
        if [item.text() if item is not None else "" for item in items] != headers:
            table.setColumnCount(len(headers))
            table.setHorizontalHeaderLabels(headers)

    def _show_comparison(self, result: RunComparison) -> None:
        if self.count != 2:
            return  # a comparison of more runs was asked for meanwhile
        self.comparison = result
        self.live = any(r.state == "running" for r in (result.a, result.b))
        self._set_columns(self.config_table, ["Setting", "A", "B"])
        a, b = result.a, result.b
        self.compare_title.setText(
            f"<b>A</b>: {a.name or a.run_id} <span style='color:gray'>({a.run_id})</span> &nbsp;·&nbsp; "
            f"<b>B</b>: {b.name or b.run_id} <span style='color:gray'>({b.run_id})</span>"
            + (f"<br>{'; '.join(result.problems)}" if result.problems else ""))
        self._show_two_figures(result)
        differing = [(setting_name(d.key), d.text("a"), d.text("b")) for d in result.differences]
        self._fill(self.config_table, differing)
        self.tabs.setTabText(1, f"Config differences ({len(differing)})")
        self.config_table.setToolTip(f"{result.same} settings are the same in both runs")
        self.diff_view.setPlainText(result.unified_diff or "The two runs' config files are the same.")

    def _show_two_figures(self, result: RunComparison) -> None:
        self._set_columns(self.figures_table, ["", "A", "B", "B vs A"])
        rows = [(f.what, f.a, f.b, f.change) for f in result.figures]
        if result.metrics:
            rows.append((LATEST_METRICS if self.live else "Final metrics", "", "", ""))
            rows += [(f"  {m.what}", m.a, m.b, m.change) for m in result.metrics]
        self._fill(self.figures_table, rows, bold_rows={len(result.figures)} if result.metrics else set())

    def _show_provenance(self, result: ProvenanceComparison) -> None:
        if self.count != 2:
            return
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

    def _show_step_anatomies(self, result: tuple[StepAnatomy, StepAnatomy]) -> None:
        if self.count != 2:
            return
        self.step_anatomies = a, b = result
        self._fill(self.steps_table, anatomy_rows(a, b))
        self.steps_verdicts.setText("<br>".join(f"<b>{side}</b>: {html.escape(anatomy.summary)}"
                                                for side, anatomy in (("A", a), ("B", b))))

    def _fill(self, table: QTableWidget, rows: Sequence[tuple[str, ...]], bold_rows: set[int] | None = None) -> None:
        # A live run's refresh every few seconds mostly brings the same cells: those are left alone (no repaint, the
        # user's selection kept).
        shown = (table.columnCount(), tuple(rows), frozenset(bold_rows or ()))
        if self._filled.get(id(table)) == shown:
            return
        self._filled[id(table)] = shown
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
