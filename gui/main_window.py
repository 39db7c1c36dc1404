"""The main window: navigation, pages, menus, window state, and what happens to running runs when it closes.

Wiring only: every decision about configs, runs and resources is the backend's; pages present them.
"""

from __future__ import annotations

import copy
import gc
import logging
import os
from pathlib import Path

from PySide6.QtCore import QByteArray, QEvent, QSize, Qt, QUrl
from PySide6.QtGui import (
    QAction,
    QActionGroup,
    QCloseEvent,
    QColor,
    QDesktopServices,
    QIcon,
    QImage,
    QKeySequence,
    QPainter,
    QPalette,
    QPixmap,
    QShowEvent,
)
from PySide6.QtWidgets import (
    QApplication,
    QLabel,
    QListWidget,
    QListWidgetItem,
    QMainWindow,
    QMessageBox,
    QSplitter,
    QStackedWidget,
    QVBoxLayout,
    QWidget,
)

from traindeck.gui.context import AppContext
from traindeck.gui.desktop_notify import DesktopNotifier
from traindeck.gui.heap import HeapTrimmer
from traindeck.gui.pages import discover_entries
from traindeck.gui.pages.base import Page
from traindeck.gui.theme import THEMES, apply_theme, is_dark
from traindeck.gui.widgets.disk_banner import DiskBanner

logger = logging.getLogger(__name__)

# The shortcuts each page offers (its own tooltips and menus say the same); Help > Keyboard shortcuts lists them.
SHORTCUTS = (
    ("Ctrl+N / Ctrl+S / Ctrl+Shift+S", "Configure: new preset / save it / save it as"),
    ("F2 / Ctrl+Del", "Configure: rename / delete your preset"),
    ("Ctrl+I / Ctrl+E", "Configure: import configs as a preset / export the preset's files"),
    ("Ctrl+O / Ctrl+Shift+V", "Configure: open / paste a config"),
    ("Ctrl+Enter", "Launch: start the run"),
    ("Ctrl+.", "Runs: stop the run (asks first)"),
    ("Ctrl+F / F3", "Runs: search the console / next match"),
    ("Ctrl+F", "History, Runs' run list: filter the runs"),
    ("Ctrl+Shift+L", "Runs: diagnose a log from anywhere (or drop the file on the page)"),
    ("Alt+C / Alt+K / Alt+S", "Runs: the Charts / Checkpoints / Step tab"),
    ("Alt+B", "Runs: the Step tab's \"Bars of\" box (then the arrow keys)"),
    ("Alt+O / Alt+A / Alt+Y", "Runs: charts overview / all metrics / system (GPU, CPU, memory, disk, network)"),
    ("Alt+M", "Runs: charts smoothing (then the arrow keys)"),
    ("Alt+L / Alt+X", "Runs: charts log y on or off / next x axis (step, wall time, since start)"),
    ("Alt+End", "Runs: charts follow the newest data again"),
    ("Ctrl+Shift+M", "Runs: the tabs below the console fill the page, and back"),
    ("Ctrl+U", "Estimate: use the advised preset"),
    ("Ctrl+D", "History: compare the two selected runs"),
    ("Alt+S", "History: the comparison's Step anatomy tab"),
    ("F5", "Monitor, History: refresh"),
    ("Ctrl+T", "Monitor's processes: tree (children under their parent)"),
    ("T / I / K", "Monitor's processes: terminate / interrupt / kill the selected one (Shift: and its children)"),
    ("F1", "this list"),
)


def readme_path() -> Path | None:
    """The README shipped beside the package (a source checkout or an editable install); None when absent."""
    path = Path(__file__).resolve().parent.parent / "README.md"
    return path if path.is_file() else None


def page_icon(key: str) -> QIcon:
    """A standard icon for each page in the navigation list (from the style: no image files to ship)."""
    from PySide6.QtWidgets import QStyle

    names = {"configure": "SP_FileDialogDetailedView", "launch": "SP_MediaPlay", "runs": "SP_ComputerIcon",
             "monitor": "SP_DriveHDIcon", "estimate": "SP_FileDialogInfoView", "history": "SP_FileDialogListView",
             "queue": "SP_FileDialogContentsView"}
    style = QApplication.style()
    pixmap = getattr(QStyle.StandardPixmap, names.get(key, "SP_FileIcon"), QStyle.StandardPixmap.SP_FileIcon)
    icon = style.standardIcon(pixmap)
    app = QApplication.instance()
    if isinstance(app, QApplication) and is_dark(app):
        return _readable_on_dark(icon, app.palette().color(QPalette.ColorRole.WindowText))
    return icon


def _readable_on_dark(icon: QIcon, text: QColor, size: int = 20) -> QIcon:
    """The style's black glyphs (Launch's play triangle) vanish on the dark theme's list: draw those in the text
    colour, keeping their shape (alpha); icons with colours of their own stay as they are."""
    image = icon.pixmap(size, size).toImage().convertToFormat(QImage.Format.Format_ARGB32)
    opaque = [image.pixelColor(x, y) for x in range(image.width()) for y in range(image.height())]
    opaque = [c for c in opaque if c.alpha() > 128]
    if not opaque or sum(c.lightnessF() for c in opaque) / len(opaque) > 0.3:
        return icon
    painter = QPainter(image)
    painter.setCompositionMode(QPainter.CompositionMode.CompositionMode_SourceIn)
    painter.fillRect(image.rect(), text)
    painter.end()
    return QIcon(QPixmap.fromImage(image))


class MainWindow(QMainWindow):
    def __init__(self, ctx: AppContext):
        super().__init__()
        self.ctx = ctx
        self.setWindowTitle("traindeck")
        # Titles and order only: a page's module is imported when the page is first built (fast start).
        self.page_types = discover_entries()
        self.pages: dict[str, Page] = {}  # built on first show, so the window appears fast
        self._holders: dict[str, int] = {}
        self._closed = False
        self.heap_trimmer = HeapTrimmer(self)  # left open for days: freed memory goes back to the system

        self.nav = QListWidget()
        self.nav.setObjectName("navigation")
        self.nav.setFixedWidth(150)
        self.nav.setIconSize(QSize(20, 20))
        self.nav.setSpacing(2)
        self.stack = QStackedWidget()
        for index, page_type in enumerate(self.page_types):
            item = QListWidgetItem(page_icon(page_type.key), page_type.title)
            item.setData(Qt.ItemDataRole.UserRole, page_type.key)
            if index < 9:
                item.setToolTip(f"Ctrl+{index + 1}")
            self.nav.addItem(item)
            self.stack.addWidget(QWidget())  # placeholder until the page is first shown
            self._holders[page_type.key] = index
        self.nav.currentRowChanged.connect(self._row_changed)
        # Which machine the page shows, above every page: hidden on this machine, set by the remote connection.
        self.machine_line = QLabel()
        self.machine_line.setObjectName("machine_line")
        self.machine_line.setWordWrap(True)
        self.machine_line.hide()
        shown = QWidget()
        column = QVBoxLayout(shown)
        column.setContentsMargins(0, 0, 0, 0)
        column.addWidget(self.machine_line)
        column.addWidget(self.stack, 1)
        splitter = QSplitter()
        splitter.addWidget(self.nav)
        splitter.addWidget(shown)
        splitter.setStretchFactor(1, 1)
        splitter.setChildrenCollapsible(False)
        splitter.setSizes([150, 10_000])  # the list has a fixed width: the pages get the rest (no empty gap)
        self.disk_banner = DiskBanner(ctx.tasks)  # above every page while the data folder's disk is low or full
        central = QWidget()
        column = QVBoxLayout(central)
        column.setContentsMargins(0, 0, 0, 0)
        column.setSpacing(0)
        column.addWidget(self.disk_banner)
        column.addWidget(splitter, 1)
        self.setCentralWidget(central)
        self._build_menus()

        ctx.navigate.connect(self.show_page)
        ctx.run_started.connect(self._open_run)
        ctx.open_run.connect(self._show_run)
        ctx.status.connect(lambda text: self.statusBar().showMessage(text, 8000))
        self.statusBar().showMessage("Ready")
        self._restore_state()
        # Desktop notifications of run ends, stalls and NaN losses: only while this window is open.
        self.notifier = DesktopNotifier(ctx, self)
        if not ctx.demo:  # runs that kept going while the window was closed: go back to them
            ctx.tasks.run(_running_run_ids, done=self._reattach)

    # ------------------------------------------------------------------------------------------------ pages
    def page(self, key: str) -> Page | None:
        """The page with this key, built now if it was not yet."""
        if key in self.pages:
            return self.pages[key]
        index = self._holders.get(key)
        if index is None:
            return None
        page = self.page_types[index](self.ctx)
        old = self.stack.widget(index)
        self.stack.insertWidget(index, page)
        if old is not None:
            self.stack.removeWidget(old)
            old.deleteLater()
        self.pages[key] = page
        # The page and the modules it imported live as long as the window: keep them out of the cyclic GC's full
        # passes, which otherwise walk ~100k objects (30-60 ms, GIL held) about once a second while a run floods
        # the console with short-lived objects (the Runs page's 100 ms stall budget; tests/perf/bench_gui_console).
        gc.freeze()
        return page

    def show_page(self, key: str, build_only: bool = False) -> None:
        index = self._holders.get(key)
        if index is None:
            return
        self.page(key)
        if not build_only:
            self.nav.setCurrentRow(index)

    def _row_changed(self, row: int) -> None:
        if row < 0:
            return
        key = self.page_types[row].key
        page = self.page(key)
        self.stack.setCurrentIndex(row)
        if page is not None:
            page.page_shown()

    def showEvent(self, event: QShowEvent) -> None:  # noqa: N802
        super().showEvent(event)
        if not self._closed:
            self.notifier.start()

    def changeEvent(self, event: QEvent) -> None:  # noqa: N802
        super().changeEvent(event)
        if event.type() == QEvent.Type.WindowStateChange:
            minimised = self.isMinimized()
            page = self.stack.currentWidget()
            if isinstance(page, Page):
                page.window_minimised(minimised)
                if not minimised:  # charts skip redraws while minimised: draw what came meanwhile
                    # (imported here: pyqtgraph is loaded with the first page that charts, not at start)
                    from traindeck.gui.widgets.charts import TimeSeriesChart
                    for chart in page.findChildren(TimeSeriesChart):
                        chart.flush()

    def _show_run(self, run_id: str) -> None:
        built = "runs" in self.pages
        self.show_page("runs")
        if not built and "runs" in self.pages:
            # The page connected to open_run while this emission was under way, so Qt does not deliver it there.
            self.ctx.open_run.emit(run_id)

    def _reattach(self, run_ids: list[str]) -> None:
        if not run_ids:
            return
        count = len(run_ids)
        self.ctx.status.emit(f"{count} run{'s are' if count > 1 else ' is'} still running: showing "
                             f"{'the newest' if count > 1 else 'it'} on the Runs page")
        self._show_run(run_ids[0])  # newest first

    def _open_run(self, run_id: str) -> None:
        # The Runs page listens to run_started itself; make sure it exists and is in front.
        self.show_page("runs")
        self.ctx.open_run.emit(run_id)

    # ------------------------------------------------------------------------------------------------ menus
    def _build_menus(self) -> None:
        file_menu = self.menuBar().addMenu("&File")
        from traindeck.gui.remote_connect import RemoteConnector  # (File > Connect to machine...)

        self.remote = RemoteConnector(self, self.ctx, self.page)
        self.remote.add_actions(file_menu)
        quit_action = QAction("&Quit", self)
        quit_action.setShortcut(QKeySequence.StandardKey.Quit)
        quit_action.triggered.connect(self.close)
        file_menu.addAction(quit_action)

        view = self.menuBar().addMenu("&View")
        for index, page_type in enumerate(self.page_types[:9]):
            action = QAction(page_type.title, self)
            action.setShortcut(QKeySequence(f"Ctrl+{index + 1}"))
            action.triggered.connect(lambda _=False, k=page_type.key: self.show_page(k))
            view.addAction(action)
            self.addAction(action)
        view.addSeparator()
        theme_menu = view.addMenu("&Theme")
        self.theme_actions = QActionGroup(self)  # exclusive: the current theme carries the check mark
        current = str(self.ctx.settings.value("theme", "system"))
        for theme in THEMES:
            action = QAction(theme.capitalize(), self, checkable=True)
            action.setData(theme)
            action.setChecked(theme == current)
            action.triggered.connect(lambda _=False, t=theme: self.set_theme(t))
            self.theme_actions.addAction(action)
            theme_menu.addAction(action)

        help_menu = self.menuBar().addMenu("&Help")
        shortcuts = QAction("&Keyboard shortcuts", self)
        shortcuts.setShortcut(QKeySequence("F1"))
        shortcuts.triggered.connect(self.show_shortcuts)
        help_menu.addAction(shortcuts)
        self.readme_action = QAction("&Read the README", self)
        self.readme_action.setToolTip("The guide that comes with traindeck (opens in your viewer for Markdown)")
        self.readme_action.triggered.connect(self._open_readme)
        self.readme_action.setEnabled(readme_path() is not None)
        help_menu.addAction(self.readme_action)
        help_menu.addSeparator()
        about = QAction("&About traindeck", self)
        about.triggered.connect(self._about)
        help_menu.addAction(about)

    def set_theme(self, theme: str) -> None:
        app = QApplication.instance()
        if isinstance(app, QApplication):
            apply_theme(app, theme)
        self.ctx.settings.setValue("theme", theme)
        for action in self.theme_actions.actions():
            action.setChecked(action.data() == theme)
        for row in range(self.nav.count()):  # the icons were drawn for the theme shown before
            item = self.nav.item(row)
            item.setIcon(page_icon(str(item.data(Qt.ItemDataRole.UserRole))))

    def shortcut_rows(self) -> list[tuple[str, str]]:
        """(keys, what they do) for the shortcuts people use most, pages first."""
        rows = [(f"Ctrl+{i + 1}", f"show {p.title}") for i, p in enumerate(self.page_types[:9])]
        return rows + list(SHORTCUTS)

    def show_shortcuts(self) -> None:
        rows = "".join(f"<tr><td style='padding-right:16px'><b>{keys}</b></td><td>{what}</td></tr>"
                       for keys, what in self.shortcut_rows())
        box = QMessageBox(self)
        box.setWindowTitle("Keyboard shortcuts")
        box.setTextFormat(Qt.TextFormat.RichText)
        box.setText(f"<table>{rows}</table>")
        box.open()

    def _open_readme(self) -> None:
        path = readme_path()
        if path is None or not QDesktopServices.openUrl(QUrl.fromLocalFile(str(path))):
            self.ctx.status.emit(f"No viewer opened the README: it is {path}" if path else "The README is not installed")

    def _about(self) -> None:
        from traindeck.backend.core import paths

        QMessageBox.about(self, "About traindeck",
                          "traindeck: configure, launch and watch Accelerate/DeepSpeed runs.\n\n"
                          f"Presets and runs: {paths.data_dir()}\nSettings: {self.ctx.settings.fileName()}")

    # ------------------------------------------------------------------------------------------ window state
    def _restore_state(self) -> None:
        settings = self.ctx.settings
        geometry = settings.value("window/geometry")
        if isinstance(geometry, QByteArray) and not geometry.isEmpty():
            self.restoreGeometry(geometry)
        else:
            self.resize(1280, 820)
        state = settings.value("window/state")
        if isinstance(state, QByteArray) and not state.isEmpty():
            self.restoreState(state)
        key = settings.value("window/page") or (self.page_types[0].key if self.page_types else "")
        if self.ctx.demo and any(p.key == "launch" for p in self.page_types):
            key = "launch"
        if key not in self._holders and self.page_types:
            key = self.page_types[0].key
        if key:
            self.show_page(str(key))

    def _save_state(self) -> None:
        settings = self.ctx.settings
        settings.setValue("window/geometry", self.saveGeometry())
        settings.setValue("window/state", self.saveState())
        row = self.nav.currentRow()
        if 0 <= row < len(self.page_types):
            settings.setValue("window/page", self.page_types[row].key)
        settings.sync()

    # ------------------------------------------------------------------------------------------------ close
    def closeEvent(self, event: QCloseEvent) -> None:
        if self._closed:  # closed once already (Qt may close it again at exit): nothing more to ask or save
            event.accept()
            return
        for page in self.pages.values():
            if not page.confirm_close():
                event.ignore()
                return
        running = self._running_runs()
        if running and not self._ask_about_running(running):
            event.ignore()
            return
        self._save_state()
        self.notifier.stop()
        for page in self.pages.values():
            page.shutdown()
        self.remote.shutdown()
        self.ctx.tasks.wait(5000)
        self._closed = True
        event.accept()

    def _running_runs(self) -> list[str]:
        # One small indexed SQLite read; the store's busy timeout is short enough for a close.
        if os.environ.get("TRAINDECK_NO_CLOSE_PROMPT"):
            return []
        return _running_run_ids()

    def _ask_about_running(self, run_ids: list[str]) -> bool:
        """Keep running (the default: runs outlive the window) or stop them. False = cancel the close."""
        box = QMessageBox(self)
        box.setIcon(QMessageBox.Icon.Question)
        box.setWindowTitle("Runs still running")
        count = len(run_ids)
        box.setText(f"{count} run{'s are' if count > 1 else ' is'} still running.")
        box.setInformativeText("They keep running after the window closes; reopen traindeck to see them again.")
        keep = box.addButton("Keep running", QMessageBox.ButtonRole.AcceptRole)
        stop = box.addButton("Stop them", QMessageBox.ButtonRole.DestructiveRole)
        box.addButton(QMessageBox.StandardButton.Cancel)
        box.setDefaultButton(keep)
        box.exec()
        clicked = box.clickedButton()
        if clicked is stop:
            from traindeck.backend.runs import RunStore, stop_run

            with RunStore() as store:  # writes each run's stop request; the supervisors do the rest
                for run_id in run_ids:
                    stop_run(store, run_id, wait=False)
            return True
        return clicked is keep


def _running_run_ids() -> list[str]:
    """Runs the store says are running, newest first ([] without a store, or when it cannot be read)."""
    try:
        from traindeck.backend.core import run_store_path

        if not Path(run_store_path()).exists():
            return []
        from traindeck.backend.runs import RunStore

        with RunStore() as store:
            return [r.id for r in store.list_runs(state="running")]
    except Exception:  # closing the window must never fail on the store: say nothing runs, but leave a trace
        logger.warning("could not read the running runs from the run store", exc_info=True)
        return []


def take_screenshots(window: MainWindow, directory: str) -> list[str]:
    """Every page with demo data, one PNG each (`<position>-<key>.png`), and one per view a page names
    (`<position>-<key>-<view>.png`, Page.demo_views)."""
    os.makedirs(directory, exist_ok=True)
    app = QApplication.instance()
    written = []
    draft = window.ctx.draft
    start = (copy.deepcopy(draft.preset), draft.saved_as)
    for index, page_type in enumerate(window.page_types):
        if index and start[0] is not None:  # what one page's demo did to the shared draft stays on that page
            draft.replace(copy.deepcopy(start[0]), start[1])
        window.show_page(page_type.key)
        page = window.page(page_type.key)
        if page is not None:
            page.load_demo()
        views = [("", lambda: None), *(page.demo_views() if page is not None else [])]
        for name, show in views:
            show()
            # Let layouts, charts and queued results settle before grabbing.
            for _ in range(30):
                if app is not None:
                    app.processEvents()
                window.ctx.tasks.wait(50)
            path = os.path.join(directory, f"{index + 1}-{page_type.key}{'-' + name if name else ''}.png")
            window.grab().save(path)
            written.append(path)
    return written
