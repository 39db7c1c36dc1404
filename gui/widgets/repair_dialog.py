"""Before a pasted or opened config is loaded: what is wrong with its text and what the repair (the same code as
`traindeck config fix`) would change, as a list and as a diff. The user repairs, loads it as it is, or cancels."""

from __future__ import annotations

import html

from PySide6.QtGui import QFontDatabase
from PySide6.QtWidgets import (
    QDialog,
    QDialogButtonBox,
    QLabel,
    QPlainTextEdit,
    QPushButton,
    QVBoxLayout,
    QWidget,
)

from traindeck.backend.presets import ConfigText
from traindeck.gui.widgets.message_list import tone

REPAIR, AS_IS = "repair", "as-is"


class RepairDialog(QDialog):
    """`exec()` then `choice`: REPAIR, AS_IS, or None (cancelled)."""

    def __init__(self, config: ConfigText, parent: QWidget | None = None, verb: str = "load", as_is: bool = True):
        """`verb`: what the choice does with the config ("load", "import"); `as_is`: the unchanged text may be
        chosen (an import that refused the text offers only the repair)."""
        super().__init__(parent)
        self.config = config
        self.choice: str | None = None
        self.setWindowTitle("Repair the config?")
        self.resize(720, 560)
        repair = config.repair
        kind = {"accelerate": "accelerate config", "deepspeed": "DeepSpeed config"}.get(
            (repair.kind if repair else None) or config.doc.kind or "", "config")
        where = config.file or "the pasted text"
        layout = QVBoxLayout(self)

        summary = QLabel()
        summary.setWordWrap(True)
        lines = []
        if not config.readable:
            first = config.syntax[0] if config.syntax else None
            why = f" (line {first.line}: {first.message})" if first and first.line else \
                f" ({first.message})" if first else ""
            lines.append(f"<b>{html.escape(where)}</b> cannot be read as it is{html.escape(why)}.")
        if repair is not None and repair.changes:
            lines.append(f"traindeck can repair this {kind} ({len(repair.changes)} change"
                         f"{'s' * (len(repair.changes) != 1)}, the same as <code>traindeck config fix</code>):")
        summary.setText("<br>".join(lines) or f"Load this {kind}?")
        layout.addWidget(summary)

        self.changes = QLabel()
        self.changes.setWordWrap(True)
        items = [f"• {html.escape(c)}" for c in (repair.changes if repair else [])]
        if repair is not None and repair.problems:
            colour = tone("warning", self)
            items.append(f'<span style="color:{colour}"><b>Still needs your decision after loading:</b></span>')
            items += [f'<span style="color:{colour}">⚠ {html.escape(p)}</span>' for p in repair.problems]
        self.changes.setText("<br>".join(items))
        self.changes.setVisible(bool(items))
        layout.addWidget(self.changes)

        self.diff = QPlainTextEdit()
        self.diff.setReadOnly(True)
        self.diff.setTabChangesFocus(True)  # read-only: Tab moves on, as from any other field
        self.diff.setLineWrapMode(QPlainTextEdit.LineWrapMode.NoWrap)
        self.diff.setFont(QFontDatabase.systemFont(QFontDatabase.SystemFont.FixedFont))
        self.diff.setPlainText(config.diff() or "(the repair changes nothing)")
        self.diff.setVisible(config.offers_repair)
        layout.addWidget(self.diff, 1)

        buttons = QDialogButtonBox()
        self.repair_button = QPushButton(f"Repair and {verb}")
        self.repair_button.setEnabled(config.offers_repair)
        self.as_is_button = QPushButton(f"{verb.capitalize()} as it is")
        self.as_is_button.setEnabled(config.readable and as_is)
        self.as_is_button.setToolTip(f"{verb.capitalize()} the text unchanged; the checks will show what is wrong in it")
        buttons.addButton(self.repair_button, QDialogButtonBox.ButtonRole.AcceptRole)
        if as_is:
            buttons.addButton(self.as_is_button, QDialogButtonBox.ButtonRole.AcceptRole)
        buttons.addButton(QDialogButtonBox.StandardButton.Cancel)
        self.repair_button.clicked.connect(lambda: self.choose(REPAIR))
        self.as_is_button.clicked.connect(lambda: self.choose(AS_IS))
        buttons.rejected.connect(self.reject)
        layout.addWidget(buttons)
        (self.repair_button if config.offers_repair else self.as_is_button).setDefault(True)

    def choose(self, choice: str | None) -> None:
        self.choice = choice
        if choice is None:
            self.reject()
        else:
            self.accept()
