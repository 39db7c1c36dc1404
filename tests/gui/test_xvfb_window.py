"""The real window on a real X server (Xvfb with Qt's xcb plugin, not offscreen): it maps, paints, and a screen
capture of the X root window shows it. The long tour (tests/gui/xvfb_tour.py, `make tour`) builds on this."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("PySide6")

REPO = Path(__file__).resolve().parents[2]

SHOW = r"""
import sys
from PySide6.QtCore import QTimer
from traindeck.gui.app import create_window
app, window = create_window()
window.resize(1100, 700)
window.show()
def done():
    print("platform", app.platformName(), "exposed", window.windowHandle().isExposed(), flush=True)
    window.grab().save(sys.argv[1])
    app.quit()
QTimer.singleShot(1500, done)
app.exec()
"""


def _missing_xcb_packages() -> list[str]:
    from traindeck.backend.system_check import missing_qt_libraries

    return missing_qt_libraries()


@pytest.mark.skipif(shutil.which("Xvfb") is None, reason="Xvfb is not installed (apt-get install xvfb xauth)")
def test_the_window_shows_on_a_real_x_server(tmp_path: Path) -> None:
    missing = _missing_xcb_packages()
    if missing:
        pytest.skip("Qt's xcb plugin lacks its libraries: apt-get install " + " ".join(missing))
    sys.path.insert(0, str(REPO))
    from tests.gui.xvfb_tour import start_xvfb

    server, display = start_xvfb()
    try:
        env = {**os.environ, "DISPLAY": display, "QT_QPA_PLATFORM": "xcb", "TRAINDECK_HOME": str(tmp_path / "home"),
               "TRAINDECK_NO_CLOSE_PROMPT": "1"}
        shot = tmp_path / "window.png"
        result = subprocess.run([sys.executable, "-c", SHOW, str(shot)], env=env, capture_output=True, text=True,
                                timeout=120)
        assert result.returncode == 0, result.stderr[-2000:]
        assert "platform xcb exposed True" in result.stdout, (result.stdout, result.stderr[-2000:])
        from PySide6.QtGui import QImage

        image = QImage(str(shot))
        assert image.width() >= 1100 and image.height() >= 700
        colours = {image.pixel(x, y) for x in range(0, image.width(), 37) for y in range(0, image.height(), 29)}
        assert len(colours) > 8  # painted: text, frames and the selected page, not one flat colour
    finally:
        server.terminate()
        server.wait(10)
        sys.path.remove(str(REPO))


CTRL_U = r"""
import sys
from PySide6.QtCore import QSettings, Qt
from PySide6.QtGui import QShortcut
from PySide6.QtTest import QTest
from PySide6.QtWidgets import QApplication, QLineEdit
app = QApplication(sys.argv)
from traindeck.gui.context import AppContext
from traindeck.gui.pages.estimate import EstimatePage
page = EstimatePage(AppContext(settings=QSettings(sys.argv[1], QSettings.Format.IniFormat)))
used = []
for shortcut in page.findChildren(QShortcut):
    if shortcut.key().toString() == "Ctrl+U":  # Use this: counted here instead of opening Configure
        shortcut.activated.disconnect()
        shortcut.activated.connect(lambda: used.append(1))
page.show()
QTest.qWaitForWindowExposed(page)
page.activateWindow()
QTest.qWaitForWindowActive(page)
field = page.inputs.findChildren(QLineEdit)[0]
field.setFocus()
field.setText("1.5B")
QTest.keyClick(field, Qt.Key.Key_U, Qt.KeyboardModifier.ControlModifier)
QTest.qWait(200)
print("platform", app.platformName(), "text", repr(field.text()), "used", len(used), flush=True)
"""


@pytest.mark.skipif(shutil.which("Xvfb") is None, reason="Xvfb is not installed (apt-get install xvfb xauth)")
def test_ctrl_u_in_an_estimate_field_is_use_this_not_clear_the_line_on_x11(tmp_path: Path) -> None:
    """Under X11 a text field takes Ctrl+U as "delete to the line's start" before any shortcut (the offscreen
    platform does not): the field being typed in was emptied and Use this never ran."""
    missing = _missing_xcb_packages()
    if missing:
        pytest.skip("Qt's xcb plugin lacks its libraries: apt-get install " + " ".join(missing))
    sys.path.insert(0, str(REPO))
    from tests.gui.xvfb_tour import start_xvfb

    server, display = start_xvfb()
    try:
        env = {**os.environ, "DISPLAY": display, "QT_QPA_PLATFORM": "xcb", "TRAINDECK_HOME": str(tmp_path / "home")}
        result = subprocess.run([sys.executable, "-c", CTRL_U, str(tmp_path / "w.ini")], env=env, capture_output=True,
                                text=True, timeout=120)
        assert result.returncode == 0, result.stderr[-2000:]
        assert "platform xcb text '1.5B' used 1" in result.stdout, (result.stdout, result.stderr[-2000:])
    finally:
        server.terminate()
        server.wait(10)
        sys.path.remove(str(REPO))
