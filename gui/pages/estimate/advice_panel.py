"""The Estimate page's recommendation: the advisor's strategy and preset, what to set where, what was passed over
and why, and "Use this", which loads the advised preset (with the estimate's settings) into Configure's draft."""

from __future__ import annotations

import html

from PySide6.QtCore import QEvent, Qt
from PySide6.QtGui import QFont
from PySide6.QtWidgets import (
    QFrame,
    QGroupBox,
    QHBoxLayout,
    QLabel,
    QMessageBox,
    QPushButton,
    QScrollArea,
    QVBoxLayout,
)

from traindeck.backend.estimate import AdvisedPreset, Estimate, preset_from_advice
from traindeck.gui.context import AppContext
from traindeck.gui.pages.estimate.results_panel import page_words
from traindeck.gui.widgets.message_list import tone


class AdvicePanel(QScrollArea):
    """The advice scrolls when it is long: the table above it keeps the room its rows need."""

    def __init__(self, ctx: AppContext) -> None:
        super().__init__()
        self.ctx = ctx
        self._estimate: Estimate | None = None  # the estimate whose advice is shown
        self._blocked = False  # the fields have problems: the advice shown no longer matches them
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
        self.setWidget(advice_box)
        self.setWidgetResizable(True)
        self.setFrameShape(QFrame.Shape.NoFrame)

    def set_blocked(self, blocked: bool) -> None:
        """While the fields have problems the advice is greyed and cannot be used."""
        self._blocked = blocked
        self.advice_box.setEnabled(not blocked)
        if blocked:
            self.use_button.setEnabled(False)

    def show_advice(self, result: Estimate | None) -> None:
        self._estimate = result
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

    def changeEvent(self, event: QEvent) -> None:
        super().changeEvent(event)
        if event.type() in (QEvent.Type.PaletteChange, QEvent.Type.ApplicationPaletteChange) and self._estimate:
            self.show_advice(self._estimate)  # the passed-over reasons' colour follows the theme

    # ------------------------------------------------------------------------------------------------ use this
    def use_advice(self) -> None:
        """Load the advised preset (with the estimate's settings) into the draft and show Configure."""
        advice = self._estimate.advice if self._estimate else None
        if advice is None or advice.preset is None or self._blocked:
            return
        self.use_button.setEnabled(False)
        estimate = self._estimate  # the one clicked on, not a newer one shown while the preset is made
        self.ctx.tasks.run(preset_from_advice, advice, done=lambda made: self._apply_advised(made, estimate),
                           failed=self._advised_failed)

    def _advised_failed(self, error: str) -> None:
        self.use_button.setEnabled(True)
        QMessageBox.warning(self, "Cannot use this preset", error)

    def _apply_advised(self, made: AdvisedPreset, estimate: Estimate | None = None) -> None:
        self.use_button.setEnabled(True)
        draft = self.ctx.draft
        if draft.dirty and not self._confirm_replace(draft.saved_as or (draft.preset.name if draft.preset else "")):
            return
        draft.replace(made.preset, None if made.changed else made.preset.name)
        if made.changed:
            draft.mark_edited()  # a new preset, not saved yet: Configure's Save asks for its name
        if estimate is not None and estimate.model_size:
            self.ctx.choose_model(estimate.model_size, estimate.shape)  # Launch checks memory for this model
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
