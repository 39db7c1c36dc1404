"""QApplication start-up: theme, settings, the main window, reattaching to runs, screenshots."""

from __future__ import annotations

import os
import signal
import sys
import tempfile
from typing import TYPE_CHECKING, cast

if TYPE_CHECKING:  # Qt and the window are imported when the app starts, not with this module
    from PySide6.QtCore import QSettings
    from PySide6.QtWidgets import QApplication

    from traindeck.gui.context import AppContext
    from traindeck.gui.main_window import MainWindow

# Platforms that draw without a screen: chosen on purpose (tests, screenshots), so no display is needed.
HEADLESS_PLATFORMS = ("offscreen", "minimal", "vnc", "eglfs", "linuxfb", "vkkhrdisplay")


def run_app(demo: bool = False, screenshot_dir: str | None = None) -> int:
    # Qt is imported here, not at module level, so `traindeck --help` never loads it.
    if screenshot_dir and not os.environ.get("QT_QPA_PLATFORM"):
        os.environ["QT_QPA_PLATFORM"] = "offscreen"
    problem = display_problem()
    if problem:
        print(f"traindeck: {problem}", file=sys.stderr)
        return 1
    from PySide6.QtCore import QTimer
    from PySide6.QtWidgets import QApplication

    # Screenshots keep their window state in a scratch file: the user's window.ini (theme, last preset, page,
    # geometry) is neither read into the shots nor written by them.
    scratch = tempfile.TemporaryDirectory(prefix="traindeck-screenshots-") if screenshot_dir else None
    settings_path = os.path.join(scratch.name, "window.ini") if scratch else None
    app, window = create_window(demo=demo or bool(screenshot_dir), settings_path=settings_path)
    from traindeck.gui.error_log import install

    install(lambda line: window.statusBar().showMessage(line, 30000))
    from traindeck.backend.runs import on_store_rebuilt

    on_store_rebuilt(lambda line: window.ctx.status.emit(f"Recovered: {line}"))  # also those rebuilt already
    window.show()
    # Ctrl+C in the terminal closes the window (runs keep running, as when the window is closed): Qt's event loop
    # runs in C++, so a timer lets Python look at its signals a few times a second.
    signal.signal(signal.SIGINT, lambda *_: app.exit(130))
    wake = QTimer(app)
    wake.timeout.connect(lambda: None)
    wake.start(200)
    if screenshot_dir:
        from traindeck.gui.main_window import take_screenshots

        def grab() -> None:
            for path in take_screenshots(window, screenshot_dir):
                print(path)
            app.quit()

        QTimer.singleShot(100, grab)
    assert isinstance(app, QApplication)
    try:
        return app.exec()
    finally:
        if scratch is not None:
            scratch.cleanup()


def display_problem() -> str | None:
    """Why no window could be seen or opened here, in one message with what to do; None when it can.

    Without DISPLAY / WAYLAND_DISPLAY Qt would either abort or, with an offscreen platform left in the
    environment, open a window nobody sees that runs until killed. On X11, Qt's xcb plugin needs libraries that
    pip's Qt does not bring; without them Qt aborts with a message that does not say which to install.
    """
    from traindeck.backend.system_check import NO_DISPLAY, has_display, install_line, missing_qt_libraries

    platform = os.environ.get("QT_QPA_PLATFORM", "").split(":")[0]
    if platform in HEADLESS_PLATFORMS:
        return None
    if not has_display():
        return NO_DISPLAY
    plugin = _xcb_plugin()  # (a frozen app's Qt lies elsewhere: then Qt's own message has to do)
    if plugin and platform in ("", "xcb") and not os.environ.get("WAYLAND_DISPLAY"):
        missing = missing_qt_libraries(plugin)
        if missing:
            return f"Qt's X11 (xcb) plugin needs libraries this machine lacks: {install_line(missing)}"
    return None


def _xcb_plugin() -> str | None:
    import importlib.util

    spec = importlib.util.find_spec("PySide6")
    if spec is None or not spec.submodule_search_locations:
        return None
    path = os.path.join(list(spec.submodule_search_locations)[0], "Qt", "plugins", "platforms", "libqxcb.so")
    return path if os.path.exists(path) else None


def create_window(demo: bool = False, settings_path: str | None = None) -> tuple[QApplication, MainWindow]:
    """The application (created if needed) and a main window, not yet shown. Tests use this.

    settings_path: the window state's INI file; None for the user's (window.ini in the config dir)."""
    from PySide6.QtCore import QCoreApplication, Qt
    from PySide6.QtGui import QGuiApplication
    from PySide6.QtWidgets import QApplication

    from traindeck.gui.context import AppContext
    from traindeck.gui.main_window import MainWindow
    from traindeck.gui.theme import apply_theme

    if QApplication.instance() is None:
        QGuiApplication.setHighDpiScaleFactorRoundingPolicy(Qt.HighDpiScaleFactorRoundingPolicy.PassThrough)
    # No organisation: QStandardPaths and QSettings then use ~/.local/share/traindeck and ~/.config/traindeck,
    # the same places as the backend's XDG paths (TRAINDECK_HOME moves the settings along with the data).
    QCoreApplication.setOrganizationName("")
    QCoreApplication.setApplicationName("traindeck")
    app = cast(QApplication, QApplication.instance() or QApplication(sys.argv[:1]))  # never a bare QCoreApplication here
    app.setApplicationDisplayName("traindeck")
    # Wayland app id / X11 class: the desktop shows packaging/traindeck.desktop's icon and name for the window.
    app.setDesktopFileName("traindeck")
    collect_garbage_on_ui_thread()
    from traindeck.gui.button_keys import install_button_keys

    install_button_keys(app)
    settings = _settings(settings_path)
    apply_theme(app, str(settings.value("theme", "system")))
    ctx = AppContext(demo=demo, settings=settings)
    _load_draft(ctx, None if demo else settings.value("draft/preset"))
    window = MainWindow(ctx)
    return app, window


_collector: object = None


def collect_garbage_on_ui_thread() -> object:
    """Python's cyclic garbage collection, moved onto the UI thread (pyqtgraph's GarbageCollector: automatic
    collection off, the same generation thresholds checked by a one-second timer); idempotent, returns the
    collector (its `check()` collects what the thresholds call for, now).

    Automatic collection runs on whichever thread happens to allocate. On a background read's thread it can free a
    cycle holding a closed page's widgets: Qt then destroys them there, takes its own lock and waits for the GIL,
    while the UI thread, holding the GIL, waits on that lock to delete a menu: the window hangs for good (seen in
    the tests' CI as two stacks, a pool thread in sqlite's fetchall under gc and the main thread in a chart's
    flush). On the UI thread a collection frees widgets where Qt wants them freed."""
    global _collector
    if _collector is None:
        from pyqtgraph.util.garbage_collector import GarbageCollector

        _collector = GarbageCollector(interval=1.0)
    return _collector


def _settings(path: str | None = None) -> QSettings:
    """Window state and page choices in the backend's config dir (XDG, or TRAINDECK_HOME): one place for all of
    traindeck's settings, private like the rest (QSettings' own default would be ~/.config/Unknown Organization).
    With a path, that INI file instead."""
    from PySide6.QtCore import QSettings

    if path is not None:
        return QSettings(path, QSettings.Format.IniFormat)
    from traindeck.backend.core import paths

    directory = paths.ensure_private_dir(paths.config_dir())
    return QSettings(str(directory / "window.ini"), QSettings.Format.IniFormat)


def _load_draft(ctx: AppContext, name: object) -> None:
    """The preset edited last time (or the CPU demo preset on first start and with --demo)."""
    from traindeck.backend.presets import PresetError, load_preset
    from traindeck.gui.context import DEFAULT_PRESET

    for candidate in (str(name) if name else None, DEFAULT_PRESET):
        if not candidate:
            continue
        try:
            ctx.draft.replace(load_preset(candidate), candidate)
            return
        except PresetError:
            continue
