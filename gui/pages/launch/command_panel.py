"""The Launch page's command box: the preview of the plan the choices make (built on ctx.tasks), the command line
it becomes, the environment it adds, the plan's errors and warnings, and Copy. The plan itself is backend/launch.
"""

from __future__ import annotations

import html
import shlex
from collections.abc import Callable
from typing import TYPE_CHECKING

from PySide6.QtCore import Qt, Signal
from PySide6.QtGui import QFontDatabase, QGuiApplication, QPalette
from PySide6.QtWidgets import (
    QGroupBox,
    QHBoxLayout,
    QLabel,
    QPlainTextEdit,
    QPushButton,
    QVBoxLayout,
    QWidget,
)

from traindeck.backend.launch import LaunchPlan, masked_env
from traindeck.gui.widgets.message_list import MessageList

if TYPE_CHECKING:
    from traindeck.backend.launch import LaunchRequest, TrainingEnvironment
    from traindeck.gui.tasks import Tasks


class CommandBox(QGroupBox):
    """Holds `plan`, the preview for the current choices (None until it is built, and again once they change)."""

    copied = Signal()
    planned = Signal()  # `plan` has a new answer (a plan, or None when nothing can be planned)

    def __init__(self, tasks: Tasks, env: Callable[[], dict[str, str]]) -> None:
        super().__init__("Command")
        self.plan: LaunchPlan | None = None
        self._env = env  # the run's extra environment, shown beside the command as it is when a plan arrives
        self._previews = tasks.lane()
        command_layout = QVBoxLayout(self)
        self.command = QPlainTextEdit()
        self.command.setReadOnly(True)
        self.command.setTabChangesFocus(True)  # read-only: Tab moves on, as from any other field
        self.command.setFont(QFontDatabase.systemFont(QFontDatabase.SystemFont.FixedFont))
        self.command.setFixedHeight(self.command.fontMetrics().lineSpacing() * 4 + 12)
        self.command.setToolTip("RUN_ID and FREE_PORT are decided when the run starts")
        self.copy_button = QPushButton("Copy")
        self.copy_button.setToolTip("Copy the command line (secrets are never part of it)")
        self.copy_button.clicked.connect(self._copy_command)
        row = QHBoxLayout()
        row.addWidget(self.command, 1)
        row.addWidget(self.copy_button, 0, Qt.AlignmentFlag.AlignTop)
        self.command_env = QLabel()
        self.command_env.setWordWrap(True)
        self.plan_messages = MessageList()
        command_layout.addLayout(row)
        command_layout.addWidget(self.command_env)
        command_layout.addWidget(self.plan_messages)

    # ============================================================================================ preview
    def preview(self, request: LaunchRequest, environment: TrainingEnvironment | None) -> None:
        """Build the plan for `request` in the background; only the newest request's answer is shown."""
        # Bound methods: the lane drops an answer whose box was deleted (its page closed) instead of reaching
        # deleted widgets.
        self._previews.run(_preview, request, environment, done=self._show_plan, failed=self.show_failure)

    def clear(self) -> None:
        """Nothing can be planned (no script, or arguments that do not split): no command, and no answer pending."""
        self._previews.invalidate()
        self._show_plan(None)

    def mark_stale(self) -> None:
        """The choices changed: `plan` is forgotten until the next preview, while the old command stays shown."""
        self.plan = None

    def _show_plan(self, plan: LaunchPlan | None) -> None:
        self.plan = plan
        self.show_plan(plan, self._env())
        self.planned.emit()

    def show_plan(self, plan: LaunchPlan | None, env: dict[str, str]) -> None:
        if plan is None:
            self.command.setPlainText("")
            self.command_env.setText("")
            self.plan_messages.set_items([])
        else:
            self.command.setPlainText(plan.command_line())
            added = masked_env(env)
            # Read, not pasted: quoted only where a space would make it ambiguous (*** stays as it is).
            env_text = " ".join(f"{k}={shlex.quote(v) if any(c.isspace() for c in v) else v}"
                                for k, v in added.items())
            self.command_env.setText(f"In {plan.cwd}" + (f", with {env_text}" if env_text else "")
                                     + f"; {plan.nproc} process" + ("" if plan.nproc == 1 else "es"))
            self.plan_messages.set_items([("error", e) for e in plan.errors] + [("warning", w) for w in plan.warnings])

    def show_failure(self, text: str) -> None:
        self.command.setPlainText("")
        self.plan_messages.set_items([("error", f"The command could not be built: {text}")])

    def _copy_command(self) -> None:
        text = self.command.toPlainText()
        if text:
            QGuiApplication.clipboard().setText(text)
            self.copied.emit()


# Worker-side: the backend modules the preview uses (run store, psutil) are imported on the worker thread the first
# time, so their import time never stalls the UI.
def _preview(request: LaunchRequest, environment: TrainingEnvironment | None) -> LaunchPlan:
    from traindeck.backend.launch import preview_plan

    return preview_plan(request, environment)


NB_HYPHEN = "\u2011"


def argv_html(args: list[str], widget: QWidget, who: str = "script") -> str:
    """The arguments as the script (`who`: the module, the command) gets them, one framed word each (a Python
    list's quotes and commas read as part of the values)."""
    background = widget.palette().color(QPalette.ColorRole.AlternateBase).name()
    # A line may break between the words, never inside one: Qt breaks after a hyphen ("--" / "steps", "--batch-" /
    # "size") whatever CSS white-space or <nobr> say, so hyphens are shown as non-breaking ones (U+2011). Only
    # shown: the label is not selectable, and the Arguments field and Copy give the real text.
    words = "&nbsp; ".join(f'<code style="background:{background}">&nbsp;{html.escape(a).replace("-", NB_HYPHEN)}'
                           '&nbsp;</code>' for a in args)
    return f"The {who} gets {len(args)} argument{'s' if len(args) != 1 else ''}: {words}"
