"""The estimate as a form: what a person types (text and numbers) -> checked inputs -> rows and advice.

The dashboard's Estimate page fills an `EstimateForm` from its fields, shows `check_form`'s problems beside the
fields they name, and runs `estimate_form` off the UI thread (it may count a model config's parameters in a child
process). Field names are the form's attributes; `FIELD_LABELS` are the words shown for them.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from traindeck.backend.estimate.advisor import Advice, advise
from traindeck.backend.estimate.estimator import EstimateRow, Workload, estimate_rows
from traindeck.backend.estimate.machine import Machine, detect_gpus, host_memory
from traindeck.backend.estimate.model_shape import (
    ModelConfigError,
    ModelShape,
    count_model_config,
    shape_from_params,
    with_overrides,
)
from traindeck.backend.estimate.model_states import OPTIMIZER_STATE_BYTES, PRECISIONS
from traindeck.backend.estimate.quantity import QuantityError, parse_count, parse_size

OPTIMIZERS: tuple[str, ...] = tuple(OPTIMIZER_STATE_BYTES)

FIELD_LABELS: dict[str, str] = {
    "params": "Parameters",
    "model_config": "Model config",
    "largest_layer": "Largest layer",
    "hidden_size": "Hidden size",
    "layers": "Layers",
    "heads": "Attention heads",
    "vocab_size": "Vocabulary",
    "gpus_per_node": "GPUs per node",
    "nodes": "Nodes",
    "gpu_mem": "GPU memory",
    "host_mem": "Host RAM",
    "precision": "Precision",
    "optimizer": "Optimizer",
    "micro_batch": "Micro batch",
    "seq_len": "Sequence length",
    "activation_checkpointing": "Activation checkpointing",
}


@dataclass(frozen=True)
class EstimateForm:
    """The Estimate page's fields as typed. Empty text means "derive it" (model shape) or "unknown" (memory)."""

    params: str = ""  # "1.5B", "350M", "7e9"; ignored when model_config is given
    model_config: str = ""  # a config.json, its folder, or a model id in the local Hugging Face cache
    largest_layer: str = ""
    hidden_size: str = ""
    layers: str = ""
    heads: str = ""
    vocab_size: str = ""
    gpus_per_node: int = 1
    nodes: int = 1
    gpu_mem: str = ""  # GiB per GPU ("24", "24GiB", "80GB")
    host_mem: str = ""  # GiB per node
    precision: str = "bf16"
    optimizer: str = "adamw"
    micro_batch: int = 1
    seq_len: int = 2048
    activation_checkpointing: bool = False


class InputProblem(ValueError):
    """One field's value cannot be used; `message` starts with the field's label."""

    def __init__(self, field_name: str, message: str) -> None:
        super().__init__(message)
        self.field = field_name
        self.message = message


@dataclass(frozen=True)
class CheckedForm:
    """The form's values as numbers (None: derive or unknown)."""

    form: EstimateForm
    total_params: int | None
    largest_layer: int | None
    hidden_size: int | None
    layers: int | None
    gpu_mem_bytes: int | None
    host_mem_bytes: int | None
    heads: int | None = None
    vocab_size: int | None = None

    @property
    def machine(self) -> Machine:
        f = self.form
        return Machine(gpus_per_node=f.gpus_per_node, num_nodes=f.nodes, gpu_mem_bytes=self.gpu_mem_bytes,
                       host_mem_bytes=self.host_mem_bytes)

    @property
    def workload(self) -> Workload:
        f = self.form
        return Workload(precision=f.precision, optimizer=f.optimizer, micro_batch=f.micro_batch, seq_len=f.seq_len,
                        activation_checkpointing=f.activation_checkpointing)


@dataclass(frozen=True)
class Estimate:
    shape: ModelShape
    machine: Machine
    workload: Workload
    rows: list[EstimateRow]
    advice: Advice | None  # None when the advisor cannot advise (see advice_problem)
    advice_problem: str | None = None
    notes: tuple[str, ...] = field(default=())  # what was assumed (the shape's derivations)
    # The model as the Launch page's memory check reads it: the model config, else the parameter count as typed.
    model_size: str = ""


def _whole(text: str, name: str) -> int | None:
    text = text.strip()
    if not text:
        return None
    try:
        value = int(text.replace(",", "").replace("_", ""))
    except ValueError:
        raise InputProblem(name, f"{FIELD_LABELS[name]}: expected a whole number, got {text!r}") from None
    if value < 1:
        raise InputProblem(name, f"{FIELD_LABELS[name]}: must be at least 1, got {value}")
    return value


def _positive(value: int, name: str) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise InputProblem(name, f"{FIELD_LABELS[name]}: must be a whole number of at least 1, got {value!r}")


def check_form(form: EstimateForm) -> tuple[CheckedForm | None, list[InputProblem]]:
    """Every field read as a number, or the problems (one per field, in the form's order). Fast: no I/O."""
    problems: list[InputProblem] = []
    values: dict[str, int | None] = {}

    def read(name: str, parse: Callable[[str, str], int | None]) -> None:
        text = str(getattr(form, name)).strip()
        try:
            values[name] = parse(text, FIELD_LABELS[name]) if text else None
        except QuantityError as exc:
            problems.append(InputProblem(name, str(exc)))
        except InputProblem as exc:
            problems.append(exc)

    if form.model_config.strip():
        values["params"] = None
    elif not form.params.strip():
        problems.append(InputProblem("params", "Parameters: give a parameter count (like 1.5B) or a model config"))
    else:
        read("params", parse_count)
    read("largest_layer", parse_count)
    read("hidden_size", lambda text, _label: _whole(text, "hidden_size"))
    read("layers", lambda text, _label: _whole(text, "layers"))
    read("heads", lambda text, _label: _whole(text, "heads"))
    read("vocab_size", lambda text, _label: _whole(text, "vocab_size"))
    read("gpu_mem", parse_size)
    read("host_mem", parse_size)
    for name in ("gpus_per_node", "nodes", "micro_batch", "seq_len"):
        try:
            _positive(getattr(form, name), name)
        except InputProblem as exc:
            problems.append(exc)
    if form.precision not in PRECISIONS:
        problems.append(InputProblem("precision", f"Precision: one of {', '.join(PRECISIONS)}, not {form.precision!r}"))
    if form.optimizer not in OPTIMIZERS:
        problems.append(InputProblem("optimizer", f"Optimizer: one of {', '.join(OPTIMIZERS)}, not {form.optimizer!r}"))
    total, largest = values.get("params"), values.get("largest_layer")
    if total is not None and largest is not None and largest > total:
        problems.append(InputProblem("largest_layer", f"Largest layer: {largest:,} is more than the whole model "
                                                      f"({total:,} parameters)"))
    if problems:
        return None, problems
    return CheckedForm(form, total, largest, values.get("hidden_size"), values.get("layers"),
                       values.get("gpu_mem"), values.get("host_mem"), values.get("heads"),
                       values.get("vocab_size")), []


def model_shape(checked: CheckedForm, counted: ModelShape | None = None) -> ModelShape:
    """The model's shape: from the parameter count, or from the model config (counted in a child process unless
    `counted` is that count already). Raises InputProblem naming the field."""
    f = checked.form
    overrides = {"hidden_size": checked.hidden_size, "num_layers": checked.layers, "num_heads": checked.heads,
                 "vocab_size": checked.vocab_size}
    if f.model_config.strip():
        if counted is None:
            try:
                counted = count_model_config(f.model_config.strip())
            except ModelConfigError as exc:
                raise InputProblem("model_config", f"Model config: {exc}") from None
        return with_overrides(counted, largest_layer_params=checked.largest_layer, **overrides)
    assert checked.total_params is not None
    return shape_from_params(checked.total_params, checked.largest_layer, **overrides)


def estimate_form(form: EstimateForm, counted: ModelShape | None = None) -> Estimate:
    """Rows for every strategy and the advisor's choice for what the form says. Raises InputProblem (the first
    problem) for a bad field. May take seconds when a model config is counted: call it off the UI thread."""
    checked, problems = check_form(form)
    if problems:
        raise problems[0]
    assert checked is not None
    shape = model_shape(checked, counted)
    machine, workload = checked.machine, checked.workload
    rows = estimate_rows(shape, machine, workload)
    advice: Advice | None = None
    problem: str | None = None
    if machine.gpu_mem_bytes is None:
        problem = "GPU memory unknown (no NVIDIA GPU detected here): enter the memory of one GPU to get a recommendation"
    else:
        try:
            advice = advise(rows, workload)
        except ValueError as exc:
            problem = str(exc)
    return Estimate(shape=shape, machine=machine, workload=workload, rows=rows, advice=advice,
                    advice_problem=problem, notes=shape.assumptions,
                    model_size=form.model_config.strip() or form.params.strip())


def counted_shape(config: str) -> ModelShape:
    """A model config's parameters counted (child process); InputProblem naming the field when it cannot be."""
    try:
        return count_model_config(config)
    except ModelConfigError as exc:
        raise InputProblem("model_config", f"Model config: {exc}") from None


@dataclass(frozen=True)
class DetectedMachine:
    """What this node has, for the form's defaults; None where it cannot tell."""

    gpus: int | None
    gpu_mem_bytes: int | None
    gpu_name: str | None
    host_mem_bytes: int | None

    def describe(self) -> str:
        gpu = (f"{self.gpus} x {self.gpu_name} detected" if self.gpus else
               "no NVIDIA GPU detected: enter the memory of the GPUs you will train on")
        host = "host RAM detected" if self.host_mem_bytes else "host RAM unknown"
        return f"{gpu}; {host}"


def detect_machine() -> DetectedMachine:
    """This node's GPUs (NVML) and RAM (psutil). Blocks for NVML: never call it on a UI thread."""
    gpus = detect_gpus()
    mem = host_memory()
    return DetectedMachine(
        gpus=len(gpus) if gpus else None,
        gpu_mem_bytes=min(g.total_bytes for g in gpus) if gpus else None,
        gpu_name=gpus[0].name if gpus else None,
        host_mem_bytes=mem[0] if mem else None,
    )

