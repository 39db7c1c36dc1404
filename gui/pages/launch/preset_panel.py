"""The Launch page's preset line: the preset the run uses (with a link to Configure, where it is edited) and the
preset's errors, which block a launch. It follows ctx.draft on its own."""

from __future__ import annotations

import html

from PySide6.QtCore import QEvent, Qt, QTimer
from PySide6.QtGui import QPalette
from PySide6.QtWidgets import QLabel, QVBoxLayout, QWidget

from traindeck.gui.context import AppContext
from traindeck.gui.pages.launch.launch_bar import processes_text
from traindeck.gui.widgets.message_list import MessageList

MAX_ERRORS = 12  # errors listed one by one; the rest are counted


class PresetBanner(QWidget):
    def __init__(self, ctx: AppContext) -> None:
        super().__init__()
        self._draft = ctx.draft
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        self.preset_label = QLabel()
        self.preset_label.setTextFormat(Qt.TextFormat.RichText)
        self.preset_label.linkActivated.connect(lambda _link: ctx.navigate.emit("configure"))
        self.draft_errors = MessageList()
        layout.addWidget(self.preset_label)
        layout.addWidget(self.draft_errors)
        ctx.draft.changed.connect(self.refresh)
        ctx.draft.validated.connect(self.refresh)
        self.refresh()

    def refresh(self) -> None:
        draft, preset = self._draft, self._draft.preset
        if preset is None:
            text = "No preset: the script runs with plain python. "
        else:
            name = draft.saved_as or preset.name
            text = (f"Preset: <b>{html.escape(name)}</b> ({html.escape(preset.launcher)}, "
                    f"{processes_text(preset.process_count())})")
            if draft.dirty:
                text += " <i>with unsaved changes</i>"
            text += " "
        link = self.palette().color(QPalette.ColorRole.Link).name()
        self.preset_label.setText(text + f'&nbsp;&nbsp;<a href="configure" style="color:{link}">Edit it on the '
                                  'Configure page</a>')
        errors = draft.errors()
        shown = [("error", f"{m.path}: {m.message}" if m.path else m.message) for m in errors[:MAX_ERRORS]]
        if len(errors) > MAX_ERRORS:
            shown.append(("error", f"and {len(errors) - MAX_ERRORS} more"))
        self.draft_errors.set_items(
            shown, heading="The preset has errors: fix these on the Configure page" if errors else "")

    def changeEvent(self, event: QEvent) -> None:
        super().changeEvent(event)
        if event.type() == event.Type.PaletteChange and hasattr(self, "draft_errors"):
            # The theme changed: the link keeps the colour it was laid out with, so lay it out again once the
            # children have the new palette too.
            QTimer.singleShot(0, self.refresh)
