"""The Estimate page's form: the model (a parameter count or a config), the machine (filled from this machine once
it is detected) and the training settings, read as the backend's EstimateForm. Fields named by a problem are
marked, with the problem as their tooltip. The training fields a preset says (precision, optimizer, micro batch,
checkpointing) start from the preset being edited (`follow_preset`), and a note says which; a field the user set
keeps their value (also on the next start) until they set it back to the preset's."""

from __future__ import annotations

from typing import Any

from PySide6.QtCore import QSettings, Qt, Signal
from PySide6.QtGui import QPalette
from PySide6.QtWidgets import (
    QCheckBox,
    QComboBox,
    QFormLayout,
    QFrame,
    QGroupBox,
    QLabel,
    QLineEdit,
    QScrollArea,
    QSpinBox,
    QVBoxLayout,
    QWidget,
)

from traindeck.backend.estimate import (
    FIELD_LABELS,
    GIB,
    OPTIMIZERS,
    PRECISIONS,
    DetectedMachine,
    EstimateForm,
    InputProblem,
)
from traindeck.gui.widgets.path_field import PathField

# The training fields a preset can say (backend preset_workload's names), as the note names them.
PRESET_FIELDS = {"precision": "precision", "optimizer": "optimizer", "micro_batch": "micro batch",
                 "activation_checkpointing": "activation checkpointing"}
DEFAULTS = EstimateForm()  # what a field the preset does not say goes back to

TIPS = {
    "params": "Parameter count of the model: 1.5B, 350M, 125K, 7e9 or 1500000000 (decimal suffixes)",
    "model_config": "A Hugging Face config.json (or its folder), or a model id whose config is in the local HF cache; "
                    "parameters are counted on the meta device in a child process, never downloaded",
    "largest_layer": "Parameters of the largest single layer (ZeRO-3 gathers it whole on each GPU); empty: the "
                     "embedding, vocabulary x hidden size",
    "hidden_size": "Hidden size (activations depend on it); empty: from the config or derived from the count",
    "layers": "Transformer layers; empty: from the config or derived from the count",
    "heads": "Attention heads (activations depend on them); empty: from the config or hidden size / 128",
    "vocab_size": "Vocabulary size (the logits and, when Largest layer is empty, the embedding); empty: from the "
                  "config or 32,000",
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


_S = "estimate/"  # QSettings group


def _gib_text(n: int) -> str:
    return f"{n / GIB:.1f}".removesuffix(".0")


class EstimateInputs(QScrollArea):
    edited = Signal()  # a field changed (the page estimates again after a pause)
    config_committed = Signal(str, bool)  # the model config to count (text), and whether it was picked again

    def __init__(self) -> None:
        super().__init__()
        self.fields: dict[str, QWidget] = {}
        self.model_config_text = ""  # the committed model config (typing a path does not count at every key)
        self._keep_machine_fields = False  # demo values must not be replaced by what this machine has
        self.typed: set[str] = set()  # the PRESET_FIELDS the user set, which a preset leaves alone
        self._preset_values: dict[str, Any] = {}  # what the preset followed says of PRESET_FIELDS
        self._filling = 0  # > 0: fields set by the page, not by the user
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
        # A path is long: the field takes the form's whole width, under its label.
        model.addRow(self._label("model_config"))
        model.addRow(self.model_config)
        self.largest_layer = self._line("largest_layer", "embedding")
        model.addRow(self._label("largest_layer"), self.largest_layer)
        self.hidden_size = self._line("hidden_size", "derived")
        model.addRow(self._label("hidden_size"), self.hidden_size)
        self.layers = self._line("layers", "derived")
        model.addRow(self._label("layers"), self.layers)
        self.heads = self._line("heads", "derived")
        model.addRow(self._label("heads"), self.heads)
        self.vocab_size = self._line("vocab_size", "32,000")
        model.addRow(self._label("vocab_size"), self.vocab_size)

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
        self.checkpointing.toggled.connect(lambda _on: self._edited(name="activation_checkpointing"))
        self.fields["activation_checkpointing"] = self.checkpointing
        training.addRow(self.checkpointing)
        self.preset_note = QLabel()
        self.preset_note.setWordWrap(True)
        self.preset_note.setForegroundRole(QPalette.ColorRole.PlaceholderText)
        self.preset_note.hide()
        training.addRow(self.preset_note)
        column.addStretch(1)

        self.setWidget(form_panel)
        self.setWidgetResizable(True)
        self.setFrameShape(QFrame.Shape.NoFrame)
        self.setMinimumWidth(300)
        self.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)

    # ------------------------------------------------------------------------------------------------ fields
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
        edit.textChanged.connect(lambda _text: self._edited(name=name))
        edit.setMinimumHeight(edit.sizeHint().height())  # the red "invalid" border must not shrink the row
        self.fields[name] = edit
        return edit

    def _spin(self, name: str, low: int, high: int, value: int) -> QSpinBox:
        spin = QSpinBox()
        spin.setRange(low, high)
        spin.setValue(value)
        spin.setToolTip(TIPS[name])
        spin.setGroupSeparatorShown(True)
        spin.valueChanged.connect(lambda _value: self._edited(name=name))
        self.fields[name] = spin
        return spin

    def _combo(self, name: str, choices: tuple[str, ...], value: str) -> QComboBox:
        combo = QComboBox()
        combo.addItems(list(choices))
        combo.setCurrentText(value)
        combo.setToolTip(TIPS[name])
        combo.currentTextChanged.connect(lambda _text: self._edited(name=name))
        self.fields[name] = combo
        return combo

    def _edited(self, *_args: Any, name: str = "") -> None:
        if name in PRESET_FIELDS and not self._filling:
            if name in self._preset_values and self._value(name) == self._preset_values[name]:
                self.typed.discard(name)  # set back to the preset's: it follows the preset again
            else:
                self.typed.add(name)
        self.edited.emit()

    def _value(self, name: str) -> Any:
        widget = self.fields[name]
        if isinstance(widget, QSpinBox):
            return widget.value()
        if isinstance(widget, QComboBox):
            return widget.currentText()
        if isinstance(widget, QCheckBox):
            return widget.isChecked()
        return widget.text() if isinstance(widget, QLineEdit) else None

    def _set_value(self, name: str, value: Any) -> None:
        widget = self.fields[name]
        if isinstance(widget, QSpinBox):
            widget.setValue(int(value))
        elif isinstance(widget, QComboBox):
            if widget.findText(str(value)) >= 0:
                widget.setCurrentText(str(value))
        elif isinstance(widget, QCheckBox):
            widget.setChecked(bool(value))

    def follow_preset(self, name: str | None, values: dict[str, Any]) -> None:
        """The preset being edited (`name`, None: none) says `values` (backend `preset_workload`): each training
        field the user has not set takes the preset's value, or its default where the preset says nothing."""
        self._preset_values = {key: value for key, value in values.items() if key in PRESET_FIELDS}
        if name is None:  # no preset: the fields stay as they are
            self.preset_note.hide()
            return
        taken: list[str] = []
        self._filling += 1
        try:
            for field in PRESET_FIELDS:
                if field in self.typed:
                    continue
                if field in self._preset_values:
                    self._set_value(field, self._preset_values[field])
                    taken.append(field)
                else:
                    self._set_value(field, getattr(DEFAULTS, field))
        finally:
            self._filling -= 1
        kept = [field for field in PRESET_FIELDS if field in self.typed and field in self._preset_values]
        parts = []
        if taken:
            parts.append(", ".join(f"{PRESET_FIELDS[f]} {self._said(f)}" for f in taken) + f" from preset “{name}”")
        if kept:
            parts.append(", ".join(f"{PRESET_FIELDS[f]}: yours, the preset says {self._said(f)}" for f in kept))
        self.preset_note.setText("; ".join(parts) + "." if parts else "")
        self.preset_note.setVisible(bool(parts))

    def _said(self, field: str) -> str:
        value = self._preset_values[field]
        return ("on" if value else "off") if isinstance(value, bool) else str(value)

    # ------------------------------------------------------------------------------------------------ reading
    def form(self) -> EstimateForm:
        """The fields as the backend reads them."""
        return EstimateForm(
            params=self.params.text(), model_config=self.model_config_text, largest_layer=self.largest_layer.text(),
            hidden_size=self.hidden_size.text(), layers=self.layers.text(), heads=self.heads.text(),
            vocab_size=self.vocab_size.text(), gpus_per_node=self.gpus_per_node.value(),
            nodes=self.nodes.value(), gpu_mem=self.gpu_mem.text(), host_mem=self.host_mem.text(),
            precision=self.precision.currentText(), optimizer=self.optimizer.currentText(),
            micro_batch=self.micro_batch.value(), seq_len=self.seq_len.value(),
            activation_checkpointing=self.checkpointing.isChecked(),
        )

    # ------------------------------------------------------------------------------------------------ settings
    def save_settings(self, settings: QSettings) -> None:
        """Every field as typed, under "estimate/", so the page opens with the model and machine last used."""
        for name, widget in self.fields.items():
            key = _S + name
            if name == "model_config":
                settings.setValue(key, self.model_config_text)
            elif isinstance(widget, QLineEdit):
                settings.setValue(key, widget.text())
            elif isinstance(widget, QSpinBox):
                settings.setValue(key, widget.value())
            elif isinstance(widget, QComboBox):
                settings.setValue(key, widget.currentText())
            elif isinstance(widget, QCheckBox):
                settings.setValue(key, widget.isChecked())
        settings.setValue(_S + "set_by_user", ",".join(sorted(self.typed)))

    def restore(self, settings: QSettings) -> None:
        """The fields as last saved; a field never saved (or saved unreadable) keeps its default."""
        self._filling += 1
        try:
            self._restore(settings)
        finally:
            self._filling -= 1
        typed = str(settings.value(_S + "set_by_user", "") or "")
        self.typed = {name for name in typed.split(",") if name in PRESET_FIELDS}

    def _restore(self, settings: QSettings) -> None:
        for name, widget in self.fields.items():
            value = settings.value(_S + name)
            if value is None:
                continue
            text = str(value)
            if name == "model_config":
                self.model_config.setText(text)
                self.model_config_text = text
                self.params.setEnabled(not text)
            elif isinstance(widget, QLineEdit):
                widget.setText(text)
            elif isinstance(widget, QSpinBox):
                try:
                    widget.setValue(int(text))
                except ValueError:
                    pass
            elif isinstance(widget, QComboBox):
                if widget.findText(text) >= 0:
                    widget.setCurrentText(text)
            elif isinstance(widget, QCheckBox):
                widget.setChecked(text.lower() == "true")

    def _model_config_committed(self, force: bool = False) -> None:
        text = self.model_config.text()
        if text == self.model_config_text and not force:
            return
        self.model_config_text = text
        self.params.setEnabled(not text)  # the config replaces the count
        self.config_committed.emit(text, force)

    def mark_problems(self, problems: list[InputProblem]) -> None:
        """Fields named by a problem are outlined, with the problem as their tooltip; the others get theirs back."""
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

    # ------------------------------------------------------------------------------------------------ machine
    def machine_unknown(self, error: str) -> None:
        self.machine_note.setText(f"Could not detect this machine ({error.splitlines()[0] if error else 'no reason given'}): "
                                  "enter the GPU memory and host RAM")

    def machine_detected(self, detected: DetectedMachine) -> None:
        """Said below the machine's fields, and filled into those the user has not given (not after the demo)."""
        self.machine_note.setText(detected.describe())
        if self._keep_machine_fields:
            return
        if detected.gpus and self.gpus_per_node.value() == 1:
            self.gpus_per_node.setValue(detected.gpus)
        if detected.gpu_mem_bytes and not self.gpu_mem.text().strip():
            self.gpu_mem.setText(_gib_text(detected.gpu_mem_bytes))
        if detected.host_mem_bytes and not self.host_mem.text().strip():
            self.host_mem.setText(_gib_text(detected.host_mem_bytes))

    def fill_demo(self) -> None:
        """A 1.5B model on one 24 GiB GPU and 64 GiB of RAM, kept when this machine's answer arrives later."""
        self._keep_machine_fields = True
        self._filling += 1
        try:
            self._fill_demo()
        finally:
            self._filling -= 1

    def _fill_demo(self) -> None:
        self.model_config.setText("")
        self.model_config_text = ""
        self.params.setEnabled(True)
        self.params.setText("1.5B")
        self.gpus_per_node.setValue(1)
        self.nodes.setValue(1)
        self.gpu_mem.setText("24")
        self.host_mem.setText("64")
        self.micro_batch.setValue(1)
        self.seq_len.setValue(2048)
