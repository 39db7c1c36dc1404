"""The Estimate page's results: the input problems, the model and machine the estimate is for, the table of
strategies (verdicts coloured for the theme, ★ on the recommended one), why ZeRO-2 can read above ZeRO-1, and what
was assumed."""

from __future__ import annotations

import html

from PySide6.QtCore import QEvent, QObject, Qt, Signal
from PySide6.QtGui import QBrush, QColor, QPalette
from PySide6.QtWidgets import (
    QAbstractItemView,
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QPushButton,
    QTableWidget,
    QTableWidgetItem,
    QVBoxLayout,
    QWidget,
)

from traindeck.backend.estimate import (
    Estimate,
    EstimateRow,
    InputProblem,
    format_count,
    format_gib,
    zero2_above_zero1,
)
from traindeck.backend.trials import trial_axes
from traindeck.gui.widgets.message_list import MessageList

COLUMNS = ("Strategy", "Verdict", "GPU total", "States", "Activ.", "Host/node", "NVMe/node")
COLUMN_TIPS = (
    "The way to train: framework, ZeRO stage (or its FSDP equivalent) and what is offloaded where",
    "fits: under 85% of every limit; tight: above 85% of one; does not fit: over one",
    "GiB per GPU in all: model states + activations + allocator reserve + CUDA context (+ ZeRO-1/2 step buffers)",
    "Model states, GiB per GPU (parameters, gradients, optimizer state): DeepSpeed's own arithmetic",
    "Activations, GiB per GPU, for the micro batch and sequence length",
    "GiB of host RAM per node: DeepSpeed's arithmetic, including its 1.5 buffer factor",
    "GiB of NVMe space per node (ZeRO-Infinity rows)",
)
VERDICT_COLUMN = 1
# verdict -> (background on a light theme, background on a dark one)
VERDICT_BACKGROUND = {
    "fits": ("#d4efd9", "#1f4d2c"),
    "tight": ("#ffecb3", "#5a4708"),
    "does not fit": ("#f8d0cd", "#5f1d19"),
}

# The estimator's notes name the command line's options; on this page the same thing is a field (or not asked).
_OPTION_WORDS = (
    ("pass --largest-layer for your model", "enter Largest layer for your model"),
    ("give --gpu-mem GiB", "enter GPU memory"),
    ("or pass --params N", "or enter Parameters"),
    ("give --nvme-path or --disk-free", "this page does not ask for it (traindeck estimate --nvme-path DIR does)"),
)


def page_words(text: str) -> str:
    """A note of the estimator as this page says it: its fields instead of the CLI's options."""
    for option, words in _OPTION_WORDS:
        text = text.replace(option, words)
    return text


class EstimateResults(QWidget):
    try_setups = Signal(list, list)  # "Try these setups…": the ZeRO stages and offloads to measure in a trial

    def __init__(self) -> None:
        super().__init__()
        self._estimate: Estimate | None = None  # the estimate shown (kept greyed while the fields have problems)
        side = QVBoxLayout(self)
        side.setContentsMargins(0, 0, 0, 0)
        self.messages = MessageList()
        side.addWidget(self.messages)
        self.model_summary = QLabel()
        self.model_summary.setWordWrap(True)
        self.model_summary.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        side.addWidget(self.model_summary)

        self.table = QTableWidget(0, len(COLUMNS))
        self.table.setHorizontalHeaderLabels(list(COLUMNS))
        for i, tip in enumerate(COLUMN_TIPS):
            header_item = self.table.horizontalHeaderItem(i)
            if header_item is not None:
                header_item.setToolTip(tip)
        self.table.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
        self.table.setSelectionBehavior(QAbstractItemView.SelectionBehavior.SelectRows)
        self.table.setSelectionMode(QAbstractItemView.SelectionMode.SingleSelection)
        self.table.verticalHeader().setVisible(False)
        self.table.verticalHeader().setDefaultSectionSize(self.fontMetrics().height() + 8)
        header = self.table.horizontalHeader()
        header.setSectionResizeMode(QHeaderView.ResizeMode.ResizeToContents)
        # The strategy keeps a readable width (middle-elided) and the verdict sits beside it, so a narrow window
        # scrolls the figures, never the answer.
        header.setSectionResizeMode(0, QHeaderView.ResizeMode.Fixed)
        self.table.setTextElideMode(Qt.TextElideMode.ElideMiddle)
        # The viewport, not the table: a table's Resize reaches a filter before the table lays out its viewport,
        # so the width read there is the old one (widening the window left the names elided).
        self.table.viewport().installEventFilter(self)
        self.table.setWordWrap(False)
        self.table.setTabKeyNavigation(False)  # Tab leaves the table (the arrows move in it)
        self.table.setMinimumHeight(8 * (self.fontMetrics().height() + 8))

        self.assumptions = QLabel()
        self.assumptions.setWordWrap(True)
        self.assumptions.setForegroundRole(QPalette.ColorRole.PlaceholderText)
        self.assumptions.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)

        self.units = QLabel("Memory in GiB. Hover a row for why; ★ marks the recommendation.")
        self.units.setForegroundRole(QPalette.ColorRole.PlaceholderText)
        self.stage_note = QLabel()  # why ZeRO-2 can read above ZeRO-1 (backend/estimate/explain.py)
        self.stage_note.setWordWrap(True)
        self.stage_note.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.stage_note.hide()
        # The estimate's strategies that may fit, measured on the user's own script (a strategy trial).
        self.try_button = QPushButton("Try these setups…")
        self.try_button.setToolTip("Measure the DeepSpeed set-ups this table says may fit with the Launch page's "
                                   "script and preset (a trial: short runs, ranked by samples/s)")
        self.try_button.setEnabled(False)
        self.try_button.clicked.connect(lambda: self.try_setups.emit(*self.trial_axes()))
        units_row = QHBoxLayout()
        units_row.addWidget(self.units, 1)
        units_row.addWidget(self.try_button)
        side.addWidget(self.table)
        side.addLayout(units_row)
        side.addWidget(self.stage_note)
        side.addWidget(self.assumptions)

    def show_note(self, text: str) -> None:
        """A line above the results while the estimate waits for something (a model config being counted)."""
        self.messages.set_items([("note", text)])

    def show_problems(self, problems: list[InputProblem]) -> None:
        """The problems, said above the results; the last good figures stay readable but greyed, as they no longer
        match what the fields say."""
        self.messages.set_items([("error", p.message) for p in problems])
        for widget in (self.table, self.model_summary):
            widget.setEnabled(not problems)

    def show_estimate(self, result: Estimate) -> None:
        self._estimate = result
        shape, machine, workload = result.shape, result.machine, result.workload
        source = "" if shape.source == "params" else f" ({shape.model_class or 'model'} from {shape.source})"
        tied = {True: ", tied embeddings", False: ", untied embeddings", None: ""}[shape.tied_embeddings]
        gpu = f"{format_gib(machine.gpu_mem_bytes)} GiB per GPU" if machine.gpu_mem_bytes else "GPU memory unknown"
        host = f"{format_gib(machine.host_mem_bytes)} GiB host RAM" if machine.host_mem_bytes else "host RAM unknown"
        nodes = f"{machine.num_nodes} node{'s' if machine.num_nodes != 1 else ''}"
        gpus = f"{machine.gpus_per_node} GPU{'s' if machine.gpus_per_node != 1 else ''}"
        self.model_summary.setText(
            f"<b>{format_count(shape.total_params)} parameters</b>{html.escape(source)}, largest layer "
            f"{format_count(shape.largest_layer_params)}{tied}; hidden {shape.hidden_size}, {shape.num_layers} layers, "
            f"{shape.num_heads} heads, vocabulary {shape.vocab_size:,}.<br>"
            f"{nodes} × {gpus}, {gpu}, {host}; {workload.precision}, "
            f"{workload.optimizer}, micro batch {workload.micro_batch}, sequence {workload.seq_len:,}"
            f"{', activation checkpointing' if workload.activation_checkpointing else ''}.")
        notes = [page_words(n) for n in result.notes]
        explained = zero2_above_zero1(result.rows)
        self.stage_note.setText(explained or "")
        self.stage_note.setVisible(bool(explained))
        self.assumptions.setText("Assumed: " + "; ".join(notes) + "." if notes else "")
        self.assumptions.setVisible(bool(notes))
        self._fill_table(result.rows)
        self.try_button.setEnabled(bool(self.trial_axes()[0]))

    def trial_axes(self) -> tuple[list[int], list[str]]:
        """The stages and offloads of the DeepSpeed rows that may fit (all of them when none is judged to)."""
        rows = self._estimate.rows if self._estimate else []
        maybe = [r for r in rows if r.fits is not False]
        return trial_axes(maybe if trial_axes(maybe)[0] else rows)

    def _fill_table(self, rows: list[EstimateRow]) -> None:
        chosen = self._estimate.advice.row.strategy if self._estimate and self._estimate.advice and \
            self._estimate.advice.row else None
        dark = self.palette().color(self.backgroundRole()).lightness() < 128
        self.table.setRowCount(len(rows))
        for r, row in enumerate(rows):
            disk = format_gib(row.disk_bytes_per_node) if row.disk_bytes_per_node else "–"
            cells = (row.label, row.verdict, format_gib(row.gpu_total_bytes_per_device),
                     format_gib(row.gpu_bytes_per_device), format_gib(row.activation_bytes_per_device),
                     format_gib(row.cpu_bytes_per_node), disk)
            tip = row.why + ("".join(f"\n• {page_words(n)}" for n in row.notes) if row.notes else "")
            for c, text in enumerate(cells):
                item = QTableWidgetItem(text)
                item.setToolTip(tip)
                item.setData(Qt.ItemDataRole.UserRole, row.strategy)
                if c > VERDICT_COLUMN:
                    item.setTextAlignment(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)
                if row.strategy == chosen:
                    font = item.font()
                    font.setBold(True)
                    item.setFont(font)
                    if c == 0:
                        item.setText("★ " + text)
                if c == VERDICT_COLUMN:
                    colours = VERDICT_BACKGROUND.get(row.verdict)
                    if colours is not None:
                        item.setBackground(QBrush(QColor(colours[1] if dark else colours[0])))
                        item.setForeground(QBrush(QColor("#f1f3f4" if dark else "#202124")))
                    item.setTextAlignment(Qt.AlignmentFlag.AlignCenter)
                self.table.setItem(r, c, item)
        self._fit_strategy_column()
        rows_height = sum(self.table.rowHeight(r) for r in range(len(rows)))
        needed = (self.table.horizontalHeader().height() + rows_height + 2 * self.table.frameWidth()
                  + self.table.horizontalScrollBar().sizeHint().height())
        self.table.setFixedHeight(needed)  # every strategy in view; the advice below scrolls instead

    def eventFilter(self, watched: QObject, event: QEvent) -> bool:
        if watched is self.table.viewport() and event.type() == QEvent.Type.Resize:
            self._fit_strategy_column()
        return super().eventFilter(watched, event)

    def _fit_strategy_column(self) -> None:
        """The strategy takes the room the figures leave; when there is too little, it is elided (its tooltip and
        the advice name it whole) before any figure column is pushed out of view."""
        others = sum(self.table.columnWidth(c) for c in range(1, self.table.columnCount()))
        room = self.table.viewport().width() - others
        readable = self.fontMetrics().horizontalAdvance("ZeRO-3 + opt…") + 24
        self.table.setColumnWidth(0, max(readable, room))

    def clipped_columns(self) -> list[str]:
        """Columns not wholly in view (for tests: none at a usual window size)."""
        width = self.table.viewport().width()
        return [COLUMNS[c] for c in range(self.table.columnCount())
                if self.table.columnViewportPosition(c) + self.table.columnWidth(c) > width]

    def changeEvent(self, event: QEvent) -> None:
        super().changeEvent(event)
        if event.type() in (QEvent.Type.PaletteChange, QEvent.Type.ApplicationPaletteChange) and self._estimate:
            self._fill_table(self._estimate.rows)  # verdict colours follow the theme
