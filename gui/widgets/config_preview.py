"""Read-only previews of the files a launch writes and of its command, one tab each, with a Copy button."""

from __future__ import annotations

from PySide6.QtGui import QFontDatabase, QGuiApplication
from PySide6.QtWidgets import (
    QHBoxLayout,
    QLabel,
    QPlainTextEdit,
    QPushButton,
    QTabWidget,
    QVBoxLayout,
    QWidget,
)

from traindeck.gui.widgets.config_form import note_style


class ConfigPreview(QWidget):
    COMMAND = "Command"

    def __init__(self, file_names: tuple[str, ...], parent: QWidget | None = None):
        super().__init__(parent)
        self.tabs = QTabWidget()
        self.tabs.setDocumentMode(True)
        self._views: dict[str, QPlainTextEdit] = {}
        self._copy_text: dict[str, str] = {}
        mono = QFontDatabase.systemFont(QFontDatabase.SystemFont.FixedFont)
        for name in (*file_names, self.COMMAND):
            view = QPlainTextEdit()
            view.setReadOnly(True)
            view.setTabChangesFocus(True)  # read-only: Tab moves on, as from any other field
            view.setFont(mono)
            view.setLineWrapMode(QPlainTextEdit.LineWrapMode.WidgetWidth if name == self.COMMAND
                                 else QPlainTextEdit.LineWrapMode.NoWrap)
            view.setObjectName(f"preview:{name}")
            self._views[name] = view
            self.tabs.addTab(view, name)
        self.copy_button = QPushButton("Copy")
        self.copy_button.setToolTip("Copy the text of this tab (the command line only, on the Command tab)")
        self.copy_button.clicked.connect(self.copy_current)
        head = QHBoxLayout()
        title = QLabel("<b>What a launch uses</b>")
        title.setToolTip("The files written into the run directory and the command, exactly as the launch builds "
                         "them")
        head.addWidget(title, 1)
        head.addWidget(self.copy_button)
        # Typed text that is not a value never reaches the files: say so above them, or the preview's last valid
        # value reads as if the typing had been taken.
        self.not_applied = QLabel()
        self.not_applied.setWordWrap(True)
        self.not_applied.hide()
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addLayout(head)
        layout.addWidget(self.not_applied)
        layout.addWidget(self.tabs)

    def set_not_applied(self, lines: list[str]) -> None:
        """Fields whose typed text is not in the files below (each "path: why"); [] hides the note."""
        self.not_applied.setText("Not in the files below until corrected (they keep the last valid value):\n"
                                 + "\n".join(f"• {line}" for line in lines) if lines else "")
        self.not_applied.setStyleSheet(note_style("warning", self.not_applied) if lines else "")
        self.not_applied.setVisible(bool(lines))

    def set_text(self, name: str, text: str | None, copy_text: str | None = None) -> None:
        """Show `text` in tab `name`; None hides the tab (the launch writes no such file)."""
        view = self._views[name]
        index = self.tabs.indexOf(view)
        self.tabs.setTabVisible(index, text is not None)
        if text is None:
            return
        if view.toPlainText() != text:  # keeps the reader's scroll position when nothing changed
            bar = view.verticalScrollBar().value()
            view.setPlainText(text)
            view.verticalScrollBar().setValue(bar)
        self._copy_text[name] = text if copy_text is None else copy_text
        if not self.tabs.isTabVisible(self.tabs.currentIndex()):
            self.tabs.setCurrentIndex(index)

    def text(self, name: str) -> str:
        return self._views[name].toPlainText()

    def is_shown(self, name: str) -> bool:
        return self.tabs.isTabVisible(self.tabs.indexOf(self._views[name]))

    def show_tab(self, name: str) -> None:
        """Bring tab `name` to the front (when it is shown)."""
        if self.is_shown(name):
            self.tabs.setCurrentWidget(self._views[name])

    def current_name(self) -> str:
        return self.tabs.tabText(self.tabs.currentIndex())

    def copy_current(self) -> None:
        name = self.current_name()
        QGuiApplication.clipboard().setText(self._copy_text.get(name, self.text(name)))
