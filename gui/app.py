"""QApplication start-up. The main window is wiring only; pages live in gui/pages (coming with the dashboard issue)."""

from __future__ import annotations

import os
import sys


def run_app(demo: bool = False, screenshot_dir: str | None = None) -> int:
    # Qt is imported here, not at module level, so `traindeck --help` never loads it.
    from PySide6.QtCore import Qt, QTimer
    from PySide6.QtWidgets import QApplication, QLabel, QMainWindow

    if screenshot_dir and not os.environ.get("QT_QPA_PLATFORM"):
        os.environ["QT_QPA_PLATFORM"] = "offscreen"
    app = QApplication.instance() or QApplication(sys.argv[:1])
    app.setApplicationName("traindeck")
    app.setOrganizationName("traindeck")

    window = QMainWindow()
    window.setWindowTitle("traindeck")
    text = "traindeck — the dashboard pages are on their way.\nUse `traindeck --help` for the command line."
    if demo:
        text += "\n\nDemo: `traindeck presets show cpu-demo`, then `traindeck run --preset cpu-demo resources/demo/train_tiny.py`."
    label = QLabel(text)
    label.setAlignment(Qt.AlignmentFlag.AlignCenter)
    window.setCentralWidget(label)
    window.resize(900, 600)
    window.show()

    if screenshot_dir:
        os.makedirs(screenshot_dir, exist_ok=True)

        def grab() -> None:
            window.grab().save(os.path.join(screenshot_dir, "main.png"))
            app.quit()

        QTimer.singleShot(200, grab)
    return app.exec()
