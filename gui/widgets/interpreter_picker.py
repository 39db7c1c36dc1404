"""The training interpreter: a path (empty = the Python traindeck runs in), probed off the UI thread with
backend.launch.probe, and what it has shown: Python, torch and CUDA, accelerate, deepspeed, transformers."""

from __future__ import annotations

import time

from PySide6.QtCore import QEvent, Qt, QTimer, Signal
from PySide6.QtWidgets import QHBoxLayout, QLabel, QPushButton, QVBoxLayout, QWidget

from traindeck.backend.launch import TrainingEnvironment, probe_environment, resolve_python
from traindeck.gui.tasks import Tasks, owned
from traindeck.gui.widgets.message_list import rich_line
from traindeck.gui.widgets.path_field import PathField

# What each package is needed for, said when it is missing.
_NEEDED_FOR = {
    "accelerate": "needed by the accelerate launcher",
    "deepspeed": "needed by the deepspeed launcher and DeepSpeed configs",
    "transformers": "optional: Hugging Face models and the Trainer",
}


def describe_environment(env: TrainingEnvironment) -> list[tuple[str, str]]:
    """(severity, text) lines for a probe's answer: what is there and, clearly, what is missing."""
    if env.error:
        return [("error", env.error)]
    lines: list[tuple[str, str]] = [("ok", f"Python {env.python_version}  ({env.executable or env.python})")]
    if env.torch is None:
        lines.append(("error", "torch: not installed (pip install torch): nothing can train"))
    elif env.torch_error:
        lines.append(("error", f"torch {env.torch}: installed but does not import: {env.torch_error}"))
    elif env.cuda_available:
        names = ", ".join(env.device_names) if env.device_names else ""
        lines.append(("ok", f"torch {env.torch}: CUDA {env.torch_cuda}, {env.device_count} GPU(s)"
                            + (f": {names}" if names else "")))
    else:
        built = f"built for CUDA {env.torch_cuda}, but no GPU is usable" if env.torch_cuda else "CPU-only build"
        lines.append(("warning", f"torch {env.torch}: {built}: runs use the CPU"))
    for name in ("accelerate", "deepspeed", "transformers"):
        version = getattr(env, name)
        if version:
            lines.append(("ok", f"{name} {version}"))
        else:
            severity = "note" if name == "transformers" else "warning"
            lines.append((severity, f"{name}: not installed ({_NEEDED_FOR[name]}; pip install {name})"))
    return lines


class InterpreterPicker(QWidget):
    changed = Signal()  # the path was edited (the probe follows shortly)
    probed = Signal(object)  # a TrainingEnvironment for the current path

    def __init__(self, tasks: Tasks, parent: QWidget | None = None):
        super().__init__(parent)
        self.tasks = tasks
        self.environment: TrainingEnvironment | None = None  # the answer for the current path, once known
        self._asked = 0  # probe generation: answers for an older path are dropped
        self.field = PathField("file", caption="Choose the training interpreter (python)",
                               placeholder=f"this Python: {resolve_python(None)}")
        self.field.setToolTip("The Python that runs the training script (with torch, accelerate, deepspeed). "
                              "Empty: the one traindeck runs in.")
        self.check_button = QPushButton("Check again")
        self.check_button.setToolTip("Ask the interpreter again what it has installed")
        self.check_button.clicked.connect(lambda: self.probe(force=True))
        self.status = QLabel()
        self.status.setObjectName("interpreterStatus")
        self.status.setWordWrap(True)
        self.status.setTextFormat(Qt.TextFormat.RichText)
        self.status.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        row = QHBoxLayout()
        row.setContentsMargins(0, 0, 0, 0)
        row.addWidget(self.field, 1)
        row.addWidget(self.check_button)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addLayout(row)
        layout.addWidget(self.status)
        self._debounce = QTimer(self, singleShot=True, interval=600)
        self._debounce.timeout.connect(self.probe)
        self.field.textChanged.connect(self._edited)
        self.setFocusProxy(self.field)
        self._lines: list[tuple[str, str]] = []

    def python(self) -> str:
        """The path as typed ("" = traindeck's own Python)."""
        return self.field.text()

    def set_python(self, path: str) -> None:
        self.field.setText(path)

    def status_text(self) -> str:
        return "\n".join(text for _, text in self._lines)

    def _edited(self) -> None:
        self.environment = None
        self._asked += 1
        self._show([("note", "checking what this interpreter has…")])
        self._debounce.start()
        self.changed.emit()

    def probe(self, force: bool = False) -> None:
        """Ask the interpreter (cached by the probe unless `force`) off the UI thread."""
        self._debounce.stop()
        self._asked += 1
        asked, python = self._asked, resolve_python(self.python() or None)
        self._show([("note", f"checking {python}…")])
        self.tasks.run(probe_environment, python, use_cache=not force,
                       done=owned(self, lambda env: self._answer(asked, env)),
                       failed=owned(self, lambda text: self._answer(asked, TrainingEnvironment(python=python,
                                                                                               error=text))))

    def _answer(self, asked: int, env: TrainingEnvironment) -> None:
        if asked != self._asked:
            return  # the path changed meanwhile
        self.environment = env
        lines = describe_environment(env)
        if env.from_cache and not env.error:
            lines.append(("note", f"as found {time.strftime('%H:%M', time.localtime(env.probed_at))} "
                                  "(asked again when packages change)"))
        self._show(lines)
        self.probed.emit(env)

    def _show(self, lines: list[tuple[str, str]]) -> None:
        self._lines = lines
        self.status.setText("<br>".join(rich_line(sev, text, self) for sev, text in lines))

    def changeEvent(self, event: QEvent) -> None:
        super().changeEvent(event)
        if event.type() == event.Type.PaletteChange and self._lines:
            self._show(self._lines)
