"""Estimate: memory per strategy for a model on a machine, the advisor's choice, and "Use this" to edit it as a preset.

The page only presents `traindeck.backend.estimate`: the form's text goes to `check_form` (instant, names the bad
field), the estimate runs on the thread pool, a model config is counted by the backend in a child process (torch
and transformers never load in the window), and NVML is asked for the GPUs off the UI thread.

Size (~640 lines): the form's many fields and their tooltips; the arithmetic is backend/estimate.
"""

from __future__ import annotations

import functools
import html
from dataclasses import dataclass
from typing import Any

from PySide6.QtCore import QEvent, QObject, Qt, QTimer
from PySide6.QtGui import QBrush, QColor, QFont, QKeySequence, QPalette, QShortcut
from PySide6.QtWidgets import (
    QAbstractItemView,
    QCheckBox,
    QComboBox,
    QFormLayout,
    QFrame,
    QGroupBox,
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QLineEdit,
    QMessageBox,
    QPushButton,
    QScrollArea,
    QSpinBox,
    QSplitter,
    QTableWidget,
    QTableWidgetItem,
    QVBoxLayout,
    QWidget,
)

from traindeck.backend.estimate import (
    FIELD_LABELS,
    GIB,
    OPTIMIZERS,
    PRECISIONS,
    AdvisedPreset,
    DetectedMachine,
    Estimate,
    EstimateForm,
    EstimateRow,
    InputProblem,
    ModelShape,
    check_form,
    counted_shape,
    detect_machine,
    estimate_form,
    format_count,
    format_gib,
    preset_from_advice,
    zero2_above_zero1,
)
from traindeck.gui.context import AppContext
from traindeck.gui.pages.base import Page
from traindeck.gui.widgets.message_list import MessageList, tone
from traindeck.gui.widgets.path_field import PathField

DEBOUNCE_MS = 250
COLUMNS = ("Strategy", "Verdict", "GPU total", "States", "Activ.", "Host/node", "NVMe/node")
COLUMN_TIPS = (
    "The way to train: framework, ZeRO stage (or its FSDP equivalent) and what is offloaded where",
    "fits: under 85% of every limit; tight: above 85% of one; does not fit: over one",
    "GiB per GPU in all: model states + activations + CUDA context and fragmentation allowance",
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
TIPS = {
    "params": "Parameter count of the model: 1.5B, 350M, 125K, 7e9 or 1500000000 (decimal suffixes)",
    "model_config": "A Hugging Face config.json (or its folder), or a model id whose config is in the local HF cache; "
                    "parameters are counted on the meta device in a child process, never downloaded",
    "largest_layer": "Parameters of the largest single layer (ZeRO-3 gathers it whole on each GPU); empty: the "
                     "embedding, vocabulary x hidden size",
    "hidden_size": "Hidden size (activations depend on it); empty: from the config or derived from the count",
    "layers": "Transformer layers; empty: from the config or derived from the count",
    "gpus_per_node": "GPUs per node (one training process each)",
    "nodes": "Machines taking part in the run",
    "gpu_mem": "Memory of one GPU in GiB (24, 80, or with a unit: 24GiB, 80GB); detected on this machine",
    "host_mem": "Host RAM per node in GiB; detected on this machine",
    "precision": "Precision of the weights in training (bf16/fp16 keep an fp32 master copy for the optimizer)",
    "optimizer": "Optimizer: decides the optimizer state per parameter (Adam(W): 8 bytes)",
    "micro_batch": "Micro batch per GPU (train_micro_batch_size_per_gpu)",
    "seq_len": "Sequence length in tokens",
    "activation_checkpointing": "Recompute activations in the backward pass: much less activation memory, ~30% "
                                "slower (the training script enables it)",
}


@dataclass
class _Outcome:
    """What a background estimate hands back: the estimate, or the problem naming a field."""

    estimate: Estimate | None = None
    problem: InputProblem | None = None


def _estimate(form: EstimateForm, counted: ModelShape | None) -> _Outcome:
    try:
        return _Outcome(estimate=estimate_form(form, counted))
    except InputProblem as exc:
        return _Outcome(problem=exc)


def _count(config: str) -> ModelShape | InputProblem:
    try:
        return counted_shape(config)
    except InputProblem as exc:
        return exc


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


def _gib_text(n: int) -> str:
    return f"{n / GIB:.1f}".removesuffix(".0")


class EstimatePage(Page):
    key = "estimate"
    title = "Estimate"
    order = 50

    def __init__(self, ctx: AppContext):
        super().__init__(ctx)
        self.estimate: Estimate | None = None
        self.problems: list[InputProblem] = []
        self.detected: DetectedMachine | None = None
        self.detection_finished = False
        self._estimates = ctx.tasks.lane()  # only the newest edit's estimate is shown
        self._model_config = ""  # the committed model config (typing a path does not count at every key)
        self._counted: dict[str, ModelShape] = {}
        self._count_failed: dict[str, InputProblem] = {}
        self._counting: str | None = None
        self._keep_machine_fields = False  # demo values must not be replaced by what this machine has
        self._debounce = QTimer(self)
        self._debounce.setSingleShot(True)
        self._debounce.setInterval(DEBOUNCE_MS)
        self._debounce.timeout.connect(self.recompute)
        self._build()
        self.recompute()
        ctx.tasks.run(detect_machine, done=self._machine_detected, failed=self._detection_failed)

    # ------------------------------------------------------------------------------------------------ layout
    def _build(self) -> None:
        self.fields: dict[str, QWidget] = {}
        form_panel = QWidget()
        column = QVBoxLayout(form_panel)
        column.setContentsMargins(0, 0, 6, 0)

        model = self._group(column, "Model")
        self.params = self._line("params", "1.5B")
        self.params.setText("1.5B")
        model.addRow(self._label("params"), self.params)
        self.model_config = PathField("file", caption="Model config", placeholder="config.json or cached model id",
                                      name_filter="Model config (*.json);;All files (*)")
        self.model_config.setToolTip(TIPS["model_config"])
        self.model_config.line.editingFinished.connect(self._model_config_committed)
        self.model_config.picked.connect(lambda _path: self._model_config_committed(force=True))
        self.fields["model_config"] = self.model_config.line
        self.model_config.line.setMinimumHeight(self.model_config.line.sizeHint().height())
        model.addRow(self._label("model_config"), self.model_config)
        self.largest_layer = self._line("largest_layer", "embedding")
        model.addRow(self._label("largest_layer"), self.largest_layer)
        self.hidden_size = self._line("hidden_size", "derived")
        model.addRow(self._label("hidden_size"), self.hidden_size)
        self.layers = self._line("layers", "derived")
        model.addRow(self._label("layers"), self.layers)

        machine = self._group(column, "Machine")
        self.gpus_per_node = self._spin("gpus_per_node", 1, 1024, 1)
        machine.addRow(self._label("gpus_per_node"), self.gpus_per_node)
        self.nodes = self._spin("nodes", 1, 4096, 1)
        machine.addRow(self._label("nodes"), self.nodes)
        self.gpu_mem = self._line("gpu_mem", "GiB per GPU")
        machine.addRow(self._label("gpu_mem", "GPU memory (GiB)"), self.gpu_mem)
        self.host_mem = self._line("host_mem", "GiB per node")
        machine.addRow(self._label("host_mem", "Host RAM (GiB)"), self.host_mem)
        self.machine_note = QLabel("Detecting this machine…")
        self.machine_note.setWordWrap(True)
        self.machine_note.setForegroundRole(QPalette.ColorRole.PlaceholderText)  # quieter, in either theme
        machine.addRow(self.machine_note)

        training = self._group(column, "Training")
        self.precision = self._combo("precision", PRECISIONS, "bf16")
        training.addRow(self._label("precision"), self.precision)
        self.optimizer = self._combo("optimizer", OPTIMIZERS, "adamw")
        training.addRow(self._label("optimizer"), self.optimizer)
        self.micro_batch = self._spin("micro_batch", 1, 1 << 16, 1)
        training.addRow(self._label("micro_batch"), self.micro_batch)
        self.seq_len = self._spin("seq_len", 1, 1 << 22, 2048)
        self.seq_len.setSingleStep(256)
        training.addRow(self._label("seq_len"), self.seq_len)
        self.checkpointing = QCheckBox(FIELD_LABELS["activation_checkpointing"])
        self.checkpointing.setToolTip(TIPS["activation_checkpointing"])
        self.checkpointing.toggled.connect(self._schedule)
        self.fields["activation_checkpointing"] = self.checkpointing
        training.addRow(self.checkpointing)
        column.addStretch(1)

        scroll = QScrollArea()
        scroll.setWidget(form_panel)
        scroll.setWidgetResizable(True)
        scroll.setFrameShape(QFrame.Shape.NoFrame)
        scroll.setMinimumWidth(300)
        scroll.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)

        # Right: problems, the advice, the table, what was assumed.
        right = QWidget()
        side = QVBoxLayout(right)
        side.setContentsMargins(6, 0, 0, 0)
        self.messages = MessageList()
        side.addWidget(self.messages)
        self.model_summary = QLabel()
        self.model_summary.setWordWrap(True)
        self.model_summary.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        side.addWidget(self.model_summary)

        advice_box = self.advice_box = QGroupBox("Recommendation")
        advice_layout = QVBoxLayout(advice_box)
        top = QHBoxLayout()
        self.advice_title = QLabel("—")
        bigger = QFont(self.advice_title.font())
        bigger.setPointSizeF(bigger.pointSizeF() * 1.15)
        bigger.setBold(True)
        self.advice_title.setFont(bigger)
        self.advice_title.setWordWrap(True)
        top.addWidget(self.advice_title, 1)
        self.use_button = QPushButton("&Use this")
        self.use_button.setToolTip("Load the advised preset, with the settings this estimate assumed, into "
                                   "Configure (Ctrl+U)")
        self.use_button.setEnabled(False)
        self.use_button.clicked.connect(self.use_advice)
        top.addWidget(self.use_button, 0, Qt.AlignmentFlag.AlignTop)
        advice_layout.addLayout(top)
        self.advice_text = QLabel()
        self.advice_text.setWordWrap(True)
        self.advice_text.setTextFormat(Qt.TextFormat.RichText)
        self.advice_text.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        advice_layout.addWidget(self.advice_text)
        advice_layout.addStretch(1)  # a short advice sits at the top of its box, not in its middle
        shortcut = QShortcut(QKeySequence("Ctrl+U"), self)
        shortcut.setContext(Qt.ShortcutContext.WidgetWithChildrenShortcut)
        shortcut.activated.connect(self.use_advice)

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
        self.table.installEventFilter(self)
        self.table.setWordWrap(False)
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
        # The table first, as tall as its rows: it is the answer, and the advice's long text squeezed it (the NVMe
        # column cut off). The advice takes the rest and scrolls when it is long.
        advice_scroll = QScrollArea()
        advice_scroll.setWidget(advice_box)
        advice_scroll.setWidgetResizable(True)
        advice_scroll.setFrameShape(QFrame.Shape.NoFrame)
        side.addWidget(self.table)
        side.addWidget(self.units)
        side.addWidget(self.stage_note)
        side.addWidget(self.assumptions)
        side.addWidget(advice_scroll, 1)

        splitter = QSplitter()
        splitter.addWidget(scroll)
        splitter.addWidget(right)
        splitter.setStretchFactor(1, 1)
        splitter.setChildrenCollapsible(False)
        splitter.setSizes([320, 900])
        layout = QVBoxLayout(self)
        layout.addWidget(splitter)

    def _group(self, column: QVBoxLayout, title: str) -> QFormLayout:
        box = QGroupBox(title)
        form = QFormLayout(box)
        form.setFieldGrowthPolicy(QFormLayout.FieldGrowthPolicy.AllNonFixedFieldsGrow)
        column.addWidget(box)
        return form

    def _label(self, name: str, text: str | None = None) -> QLabel:
        label = QLabel(text or FIELD_LABELS[name])
        label.setToolTip(TIPS[name])
        return label

    def _line(self, name: str, placeholder: str) -> QLineEdit:
        edit = QLineEdit()
        edit.setPlaceholderText(placeholder)
        edit.setToolTip(TIPS[name])
        edit.setClearButtonEnabled(True)
        edit.textChanged.connect(self._schedule)
        edit.setMinimumHeight(edit.sizeHint().height())  # the red "invalid" border must not shrink the row
        self.fields[name] = edit
        return edit

    def _spin(self, name: str, low: int, high: int, value: int) -> QSpinBox:
        spin = QSpinBox()
        spin.setRange(low, high)
        spin.setValue(value)
        spin.setToolTip(TIPS[name])
        spin.setGroupSeparatorShown(True)
        spin.valueChanged.connect(self._schedule)
        self.fields[name] = spin
        return spin

    def _combo(self, name: str, choices: tuple[str, ...], value: str) -> QComboBox:
        combo = QComboBox()
        combo.addItems(list(choices))
        combo.setCurrentText(value)
        combo.setToolTip(TIPS[name])
        combo.currentTextChanged.connect(self._schedule)
        self.fields[name] = combo
        return combo

    # ------------------------------------------------------------------------------------------------ input
    def form(self) -> EstimateForm:
        """The fields as the backend reads them."""
        return EstimateForm(
            params=self.params.text(), model_config=self._model_config, largest_layer=self.largest_layer.text(),
            hidden_size=self.hidden_size.text(), layers=self.layers.text(), gpus_per_node=self.gpus_per_node.value(),
            nodes=self.nodes.value(), gpu_mem=self.gpu_mem.text(), host_mem=self.host_mem.text(),
            precision=self.precision.currentText(), optimizer=self.optimizer.currentText(),
            micro_batch=self.micro_batch.value(), seq_len=self.seq_len.value(),
            activation_checkpointing=self.checkpointing.isChecked(),
        )

    def _schedule(self, *_args: Any) -> None:
        self._debounce.start()

    def _model_config_committed(self, force: bool = False) -> None:
        text = self.model_config.text()
        if text == self._model_config and not force:
            return
        self._model_config = text
        if force:  # picked again: count again (the file may have changed)
            self._counted.pop(text, None)
        self._count_failed.pop(text, None)
        self.params.setEnabled(not text)
        self.recompute()

    def _detection_failed(self, error: str) -> None:
        self.detection_finished = True
        self.machine_note.setText(f"Could not detect this machine ({error.splitlines()[0] if error else 'no reason given'}): "
                                  "enter the GPU memory and host RAM")

    def _machine_detected(self, detected: DetectedMachine) -> None:
        self.detected = detected
        self.detection_finished = True
        self.machine_note.setText(detected.describe())
        if self._keep_machine_fields:
            return
        # Fill only what the user has not given.
        if detected.gpus and self.gpus_per_node.value() == 1:
            self.gpus_per_node.setValue(detected.gpus)
        if detected.gpu_mem_bytes and not self.gpu_mem.text().strip():
            self.gpu_mem.setText(_gib_text(detected.gpu_mem_bytes))
        if detected.host_mem_bytes and not self.host_mem.text().strip():
            self.host_mem.setText(_gib_text(detected.host_mem_bytes))

    # ------------------------------------------------------------------------------------------------ compute
    def recompute(self) -> None:
        """Check the form now; estimate in the background (counting a model config first when needed)."""
        self._debounce.stop()
        self._estimates.invalidate()  # an older edit's estimate still on its way is dropped
        form = self.form()
        _, problems = check_form(form)
        config = form.model_config.strip()
        if not problems and config in self._count_failed:
            problems = [self._count_failed[config]]
        self._show_problems(problems)
        if problems:
            return
        counted = self._counted.get(config) if config else None
        if config and counted is None:
            self.messages.set_items([("note", f"Counting the parameters of {config} (a child process builds the model "
                                               "on the meta device; this can take a while)…")])
            if self._counting != config:
                self._counting = config
                self.ctx.tasks.run(_count, config, done=functools.partial(self._config_counted, config),
                                   failed=functools.partial(self._config_not_counted, config))
            return
        self._estimates.run(_estimate, form, counted, done=self._estimated, failed=self._estimate_failed)

    def _config_not_counted(self, config: str, error: str) -> None:
        self._config_counted(config, InputProblem("model_config", f"Model config: {error}"))

    def _config_counted(self, config: str, result: ModelShape | InputProblem) -> None:
        if self._counting == config:
            self._counting = None
        if isinstance(result, InputProblem):
            self._count_failed[config] = result
        else:
            self._counted[config] = result
        if config == self._model_config:
            self.recompute()

    def _estimate_failed(self, error: str) -> None:
        self._estimated(_Outcome(problem=InputProblem("", f"The estimate failed: {error}")))

    def _estimated(self, outcome: _Outcome) -> None:
        if outcome.problem is not None:
            self._show_problems([outcome.problem])
            return
        self._show_problems([])
        self.estimate = outcome.estimate
        self._show_estimate()

    def _show_problems(self, problems: list[InputProblem]) -> None:
        self.problems = list(problems)
        bad = {p.field for p in problems}
        for name, widget in self.fields.items():
            mark = name in bad
            if bool(widget.property("invalid")) != mark:
                widget.setProperty("invalid", mark)
                widget.setStyleSheet("border: 1px solid #d93025;" if mark and isinstance(widget, QLineEdit) else "")
        for problem in problems:
            field = self.fields.get(problem.field)
            if field is not None:
                field.setToolTip(problem.message)
        for name, widget in self.fields.items():
            if name not in bad:
                widget.setToolTip(TIPS.get(name, ""))
        self.messages.set_items([("error", p.message) for p in problems])
        # The last good estimate stays readable but greyed: it no longer matches what the fields say.
        for widget in (self.table, self.advice_box, self.model_summary):
            widget.setEnabled(not problems)
        if problems:
            self.use_button.setEnabled(False)

    # ------------------------------------------------------------------------------------------------ output
    def _show_estimate(self) -> None:
        result = self.estimate
        if result is None:
            return
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
        self._show_advice()

    def _fill_table(self, rows: list[EstimateRow]) -> None:
        chosen = self.estimate.advice.row.strategy if self.estimate and self.estimate.advice and \
            self.estimate.advice.row else None
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

    def _show_advice(self) -> None:
        result = self.estimate
        advice = result.advice if result else None
        if result is None or advice is None:
            self.advice_title.setText("No recommendation yet")
            self.advice_text.setText(html.escape(page_words(result.advice_problem or "")) if result else "")
            self.use_button.setEnabled(False)
            return
        if advice.row is None:
            self.advice_title.setText("Nothing fits")
            body = [html.escape(advice.reason)]
        else:
            self.advice_title.setText(f"{advice.row.label}  →  preset “{advice.preset}”")
            body = [html.escape(advice.reason)]
            settings = {k: v for k, v in advice.settings.items() if k.partition(".")[0] in ("accelerate", "deepspeed")}
            script = [f"{v}" for k, v in advice.settings.items() if k not in settings]
            if settings:
                body.append("<b>Set in the preset:</b> " + ", ".join(
                    f"<code>{html.escape(k)}</code> = {html.escape(str(v))}" for k, v in settings.items()))
            if script:
                body.append("<b>In your training script:</b> " + html.escape("; ".join(script)))
            if advice.alternative_preset:
                body.append(f"FSDP alternative: preset “{html.escape(advice.alternative_preset)}”.")
            for note in advice.row.notes:
                body.append(f"Note: {html.escape(page_words(note))}")
        if advice.rejected:
            colour = tone("warning", self)
            style = f' style="color:{colour}"' if colour else ""
            body.append("<b>Passed over (faster, but):</b>")
            body += [f"&nbsp;&nbsp;• {html.escape(r.label)}: <span{style}>{html.escape(r.why)}</span>"
                     for r in advice.rejected]
        self.advice_text.setText("<br>".join(body))
        self.use_button.setEnabled(advice.preset is not None)

    def eventFilter(self, watched: QObject, event: QEvent) -> bool:
        if watched is self.table and event.type() == QEvent.Type.Resize:
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
        if event.type() in (QEvent.Type.PaletteChange, QEvent.Type.ApplicationPaletteChange) and self.estimate:
            self._fill_table(self.estimate.rows)  # verdict colours follow the theme
            self._show_advice()

    # ------------------------------------------------------------------------------------------------ use this
    def use_advice(self) -> None:
        """Load the advised preset (with the estimate's settings) into the draft and show Configure."""
        advice = self.estimate.advice if self.estimate else None
        if advice is None or advice.preset is None or self.problems:
            return
        self.use_button.setEnabled(False)
        self.ctx.tasks.run(preset_from_advice, advice, done=self._apply_advised, failed=self._advised_failed)

    def _advised_failed(self, error: str) -> None:
        self.use_button.setEnabled(True)
        QMessageBox.warning(self, "Cannot use this preset", error)

    def _apply_advised(self, made: AdvisedPreset) -> None:
        self.use_button.setEnabled(True)
        draft = self.ctx.draft
        if draft.dirty and not self._confirm_replace(draft.saved_as or (draft.preset.name if draft.preset else "")):
            return
        draft.replace(made.preset, None if made.changed else made.preset.name)
        if made.changed:
            draft.mark_edited()  # a new preset, not saved yet: Configure's Save asks for its name
        what = f"“{made.base_name}”" + (" with the estimate's settings" if made.changed else "")
        self.ctx.status.emit(f"Preset {what} loaded into Configure" +
                             (": save it to keep it" if made.changed else ""))
        self.ctx.navigate.emit("configure")

    def _confirm_replace(self, name: str) -> bool:
        answer = QMessageBox.question(
            self, "Unsaved changes",
            f"The preset being edited{f' ({name})' if name else ''} has unsaved changes.\n\n"
            "Replace it with the advised preset? Your changes will be lost.",
            QMessageBox.StandardButton.Discard | QMessageBox.StandardButton.Cancel,
            QMessageBox.StandardButton.Cancel)
        return answer == QMessageBox.StandardButton.Discard

    # ------------------------------------------------------------------------------------------------ hooks
    def load_demo(self) -> None:
        """A 1.5B model on one 24 GiB GPU and 64 GiB of RAM: needs optimizer offload."""
        self._keep_machine_fields = True
        self.model_config.setText("")
        self._model_config = ""
        self.params.setEnabled(True)
        self.params.setText("1.5B")
        self.gpus_per_node.setValue(1)
        self.nodes.setValue(1)
        self.gpu_mem.setText("24")
        self.host_mem.setText("64")
        self.micro_batch.setValue(1)
        self.seq_len.setValue(2048)
        self.recompute()

    def shutdown(self) -> None:
        self._debounce.stop()


PAGE = EstimatePage
