"""Alt keys for the standard buttons Qt leaves without one.

Qt names a dialog's standard buttons through its platform theme (`QPlatformTheme` texts: "&Yes", "&No", "Save",
"Discard", ...): Yes and No have Alt keys, Save and Discard have none, so at the keyboard an unsaved-changes
question's Discard was a Tab away. A translator installed with the application gives them "&Save" and "&Discard"
in every dialog (Escape stays Cancel, Enter the default); every other text is left as it is."""

from __future__ import annotations

from PySide6.QtCore import QCoreApplication, QTranslator

KEYED = {"Save": "&Save", "Discard": "&Discard"}


class ButtonKeys(QTranslator):
    def translate(self, context: str, source: str, disambiguation: str | None = None,  # noqa: ARG002
                  n: int = -1) -> str | None:
        # None (a null string) is "no translation here": Qt then keeps the text. An empty string would replace it.
        return KEYED.get(source) if context == "QPlatformTheme" else None


_installed: ButtonKeys | None = None


def install_button_keys(app: QCoreApplication) -> None:
    """Once per application."""
    global _installed
    if _installed is None:
        _installed = ButtonKeys(app)
        app.installTranslator(_installed)
