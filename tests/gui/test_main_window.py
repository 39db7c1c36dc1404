"""Desktop manners of the main window: Ctrl+<n> shows page n, window geometry and page come back next start, the
theme changes the palette, closing with a running run asks (keep it running, stop it, or cancel), and
`traindeck gui --screenshot DIR` writes one non-blank PNG per page.

Works with whatever pages exist: when fewer than two are written yet, stand-in pages are added so the shortcuts
and the saved page are still exercised.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import NamedTuple

import pytest
from PySide6.QtCore import Qt
from PySide6.QtGui import QImage, QPalette
from PySide6.QtWidgets import QApplication, QLabel, QMessageBox, QVBoxLayout

from traindeck.gui.pages import PageEntry, discover_entries
from traindeck.gui.pages.base import Page

REPO = Path(__file__).resolve().parents[2]
_CLOSED: list[object] = []  # windows of finished tests (see make_window)


class _StandIn(Page):
    def __init__(self, ctx):  # type: ignore[no-untyped-def]
        super().__init__(ctx)
        layout = QVBoxLayout(self)
        layout.addWidget(QLabel(f"stand-in page {self.key}"))


class StandInA(_StandIn):
    key, title, order = "standin_a", "Stand-in A", 901


class StandInB(_StandIn):
    key, title, order = "standin_b", "Stand-in B", 902


def _page_types() -> list:  # type: ignore[type-arg]
    found = discover_entries()
    return found if len(found) >= 2 else [*found, StandInA, StandInB][: max(2, len(found))]


@pytest.fixture
def make_window(qapp, monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[[], object]]:  # type: ignore[no-untyped-def]
    """create_window() as the app does it (settings under the test's TRAINDECK_HOME), with the page list above."""
    from traindeck.gui import main_window
    from traindeck.gui.app import create_window

    page_types = _page_types()
    monkeypatch.setattr(main_window, "discover_entries", lambda: list(page_types))
    saved_palette = QPalette(qapp.palette())
    windows = []

    def make():  # type: ignore[no-untyped-def]
        _app, window = create_window()
        windows.append(window)
        return window

    yield make
    os.environ["TRAINDECK_NO_CLOSE_PROMPT"] = "1"  # teardown closes without asking (monkeypatch restores it)
    monkeypatch.setenv("TRAINDECK_NO_CLOSE_PROMPT", "1")
    for window in windows:
        window.close()
        for _ in range(3):
            window.ctx.tasks.wait(10000)
            qapp.processEvents()
    # Kept, not deleted: a page's background job may still answer later (the app itself just exits), and
    # gui/tasks.py delivers to the page's slot whether or not its widgets still exist.
    _CLOSED.extend(windows)
    qapp.setPalette(saved_palette)
    qapp.processEvents()


@pytest.fixture
def no_prompt(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TRAINDECK_NO_CLOSE_PROMPT", "1")


def _show(qtbot, window) -> None:  # type: ignore[no-untyped-def]
    window.show()
    qtbot.waitExposed(window)
    window.activateWindow()
    qtbot.waitUntil(lambda: QApplication.activeWindow() is window, timeout=5000)


def test_ctrl_number_shows_that_page(qtbot, make_window, no_prompt) -> None:  # type: ignore[no-untyped-def]
    window = make_window()
    _show(qtbot, window)
    keys = [p.key for p in window.page_types][:9]
    assert len(keys) >= 2
    for position in [*range(len(keys), 0, -1), 1]:  # last to first, then back to 1: each press changes the page
        qtbot.keyClick(window, getattr(Qt.Key, f"Key_{position}"), Qt.KeyboardModifier.ControlModifier)
        key = keys[position - 1]
        assert window.nav.currentRow() == position - 1
        assert window.stack.currentWidget() is window.pages[key]
        assert window.pages[key].isVisible()


def test_no_key_means_two_things_on_one_page(qtbot, make_window, no_prompt) -> None:  # type: ignore[no-untyped-def]
    """Qt fires neither of two shortcuts with one key that are active together (activatedAmbiguously): on each page
    every key, the window's own included, has one meaning."""
    from PySide6.QtGui import QShortcut

    window = make_window()
    _show(qtbot, window)
    window_keys = [s.key().toString() for s in window.findChildren(QShortcut)
                   if not any(page.isAncestorOf(s.parent()) for page in window.pages.values())]
    for position, page_type in enumerate(window.page_types[:9], start=1):
        qtbot.keyClick(window, getattr(Qt.Key, f"Key_{position}"), Qt.KeyboardModifier.ControlModifier)
        page = window.pages[page_type.key]
        shortcuts = [s for s in page.findChildren(QShortcut) if s.isEnabled() and s.key().toString()]
        taken = {a.key().toString() for a in shortcuts if a.key().toString() in window_keys}
        for i, a in enumerate(shortcuts):
            for b in shortcuts[i + 1:]:
                if a.key() == b.key() and _together(a, b):
                    taken.add(a.key().toString())
        assert not taken, (page_type.key, sorted(taken))


def _together(a, b) -> bool:  # type: ignore[no-untyped-def]
    """Whether two shortcuts can be active at once: either is the window's, or one's widget holds the other's."""
    from PySide6.QtCore import Qt as _Qt

    scoped = _Qt.ShortcutContext.WidgetWithChildrenShortcut
    if a.context() != scoped or b.context() != scoped:
        return True
    wa, wb = a.parent(), b.parent()
    return wa is wb or wa.isAncestorOf(wb) or wb.isAncestorOf(wa)


def test_no_alt_letter_means_two_things_on_one_page(qtbot, make_window, no_prompt) -> None:  # type: ignore[no-untyped-def]
    """An Alt letter two visible things share (two buttons' "&R", a tab's "&H" and the Help menu's) only moves the
    focus between them: neither is pressed. On each page, with the window's menus, every Alt letter - a button's,
    a buddied label's, a group box's, a tab's or an Alt+letter shortcut's - belongs to one thing, except things
    on different pages of one stack (tabs, stacked panels), which are never shown together."""
    import re

    from PySide6.QtGui import QShortcut
    from PySide6.QtWidgets import QAbstractButton, QGroupBox, QMenuBar, QStackedWidget, QTabBar, QWidget

    def letter(text: str) -> str | None:
        found = re.search(r"&([^&])", text.replace("&&", ""))
        return found.group(1).lower() if found else None

    def keyed(root):  # type: ignore[no-untyped-def]
        out = []
        for w in root.findChildren(QWidget):
            if isinstance(w, QAbstractButton):
                out.append((w.text(), w))
            elif isinstance(w, QLabel) and w.buddy() is not None:
                out.append((w.text(), w))
            elif isinstance(w, QGroupBox):
                out.append((w.title(), w))
            elif isinstance(w, QTabBar):
                out.extend((w.tabText(i), w) for i in range(w.count()))
            elif isinstance(w, QMenuBar):
                out.extend((a.text(), w) for a in w.actions())
        for s in root.findChildren(QShortcut):
            key = s.key().toString()
            if re.fullmatch(r"Alt\+[A-Z0-9]", key):
                out.append((f"&{key[-1]} ({key} shortcut)", s.parent()))
        return [(letter(text), text, w) for text, w in out if letter(text)]

    def apart(a, b) -> bool:  # type: ignore[no-untyped-def]
        """a and b lie on different pages of one QStackedWidget (a QTabWidget's included)."""
        above = [a]
        while above[-1].parentWidget() is not None:
            above.append(above[-1].parentWidget())
        child, common = b, b.parentWidget()
        while common is not None and common not in above:
            child, common = common, common.parentWidget()
        if common is None or common is a or common is b:
            return False
        return isinstance(common, QStackedWidget) and above[above.index(common) - 1] is not child

    window = make_window()
    _show(qtbot, window)
    for page_type in window.page_types:
        window.show_page(page_type.key)
    every = keyed(window)
    pages = list(window.pages.values())
    shared = [k for k in every if not any(page.isAncestorOf(k[2]) for page in pages)]
    clashes = []
    for key, page in window.pages.items():
        mine = [k for k in every if page.isAncestorOf(k[2])] + shared
        for i, (a_letter, a_text, a) in enumerate(mine):
            for b_letter, b_text, b in mine[i + 1:]:
                if a_letter == b_letter and not apart(a, b):
                    clashes.append((key, a_letter, a_text, b_text))
    assert not clashes, clashes
    assert {k[0] for k in shared} >= {"f", "v", "h"}, shared  # the menus are seen: the check reaches the window's


# Two starts in one process on a desktop-sized offscreen screen (the default offscreen screen, 800x800, is smaller
# than some pages' minimum width, and Qt clamps a restored geometry to the screen). dpr 2: a high-DPI screen
# (the window keeps its logical size and is drawn at twice the pixels).
TWO_STARTS = r"""
import json, sys
from PySide6.QtCore import QPoint, QSize
from PySide6.QtWidgets import QApplication, QLabel
from traindeck.gui import main_window
from traindeck.gui.app import create_window
from traindeck.gui.pages import PageEntry, discover_entries
from traindeck.gui.pages.base import Page

class StandIn(Page):
    def __init__(self, ctx):
        super().__init__(ctx)
        QLabel(self.title, self)

found = discover_entries()
stand_ins = [type(f"StandIn{i}", (StandIn,), {"key": f"standin{i}", "title": f"Stand-in {i}", "order": 900 + i})
             for i in range(2)]
page_types = found if len(found) >= 2 else [*found, *stand_ins][:2]
main_window.discover_entries = lambda: list(page_types)

def settle(window):
    for _ in range(3):
        window.ctx.tasks.wait(10000)
        QApplication.processEvents()

app, first = create_window()
first.show()
key = first.page_types[1].key
first.show_page(key)
settle(first)
size = first.minimumSizeHint().expandedTo(QSize(900, 600)) + QSize(23, 17)
first.resize(size)
first.move(QPoint(37, 41))
settle(first)
saved = {"size": [first.width(), first.height()], "pos": [first.x(), first.y()], "key": key}
first.close()

app, second = create_window()
restored = {"row": second.nav.currentRow(), "current_is_page": second.stack.currentWidget() is second.pages.get(key)}
second.show()
settle(second)
shot = second.grab()
restored.update(size=[second.width(), second.height()], pos=[second.x(), second.y()],
                dpr=shot.devicePixelRatio(), shot=[shot.width(), shot.height()],
                screen=[app.primaryScreen().size().width(), app.primaryScreen().size().height()])
second.close()
print("RESULT " + json.dumps({"saved": saved, "restored": restored}))
"""


@pytest.mark.parametrize("dpr", [1, 2])
def test_geometry_and_page_come_back_in_the_next_window(tmp_path: Path, dpr: int) -> None:
    screen = tmp_path / "screen.json"
    # 1920x1200 logical; dpr 2 through Qt's own scaling (the offscreen backing store ignores a screen's "dpr").
    screen.write_text(json.dumps({"screens": [{"name": "desk", "x": 0, "y": 0, "width": 1920 * dpr,
                                               "height": 1200 * dpr, "logicalDpi": 96, "logicalBaseDpi": 96}]}))
    env = dict(os.environ, QT_QPA_PLATFORM=f"offscreen:configfile={screen}", TRAINDECK_NO_CLOSE_PROMPT="1",
               QT_SCALE_FACTOR=str(dpr))
    done = subprocess.run([sys.executable, "-c", TWO_STARTS], capture_output=True, text=True, timeout=120, env=env,
                          cwd=REPO)
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(next(ln for ln in done.stdout.splitlines() if ln.startswith("RESULT "))[len("RESULT "):])
    saved, restored = result["saved"], result["restored"]
    assert saved["size"][0] > 900 and saved["pos"] == [37, 41], "the first window took the test's geometry"
    assert restored["row"] == 1 and restored["current_is_page"], "the page shown last is shown again"
    assert restored["size"] == saved["size"]
    assert restored["pos"] == saved["pos"]
    # High-DPI: drawn at the screen's device pixel ratio (crisp), laid out in the same logical size.
    assert restored["dpr"] == dpr
    assert restored["shot"] == [restored["size"][0] * dpr, restored["size"][1] * dpr]


def test_first_start_opens_the_first_page_at_a_usable_size(qtbot, make_window, no_prompt) -> None:  # type: ignore[no-untyped-def]
    window = make_window()
    assert window.nav.currentRow() == 0
    assert window.width() >= 700 and window.height() >= 480


def test_theme_switch_changes_the_palette_and_is_remembered(qtbot, make_window, no_prompt, qapp) -> None:  # type: ignore[no-untyped-def]
    window = make_window()
    window.set_theme("dark")
    dark = qapp.palette()
    assert dark.color(QPalette.ColorRole.Window).lightness() < 100
    assert dark.color(QPalette.ColorRole.WindowText).lightness() > 180
    # Widgets take the new palette when the change event is delivered (the next event-loop pass).
    qtbot.waitUntil(lambda: window.nav.palette().color(QPalette.ColorRole.Base) == dark.color(QPalette.ColorRole.Base))
    assert window.palette().color(QPalette.ColorRole.Window) == dark.color(QPalette.ColorRole.Window)
    window.set_theme("light")
    light = qapp.palette()
    assert light.color(QPalette.ColorRole.Window).lightness() > 180
    assert light.color(QPalette.ColorRole.WindowText).lightness() < 100
    qtbot.waitUntil(lambda: window.palette().color(QPalette.ColorRole.Window) == light.color(QPalette.ColorRole.Window))
    assert window.ctx.settings.value("theme") == "light"
    window.set_theme("dark")
    assert window.close()
    make_window()  # the next start applies the saved theme before building the window
    assert qapp.palette().color(QPalette.ColorRole.Window).lightness() < 100



def _mean_icon_contrast(icon, background) -> float:  # type: ignore[no-untyped-def]
    from PySide6.QtGui import QColor

    from traindeck.gui.theme import contrast

    image = icon.pixmap(20, 20).toImage()
    opaque = [c for c in (image.pixelColor(x, y) for x in range(image.width()) for y in range(image.height()))
              if c.alpha() > 128]
    n = len(opaque)
    mean = QColor.fromRgbF(sum(c.redF() for c in opaque) / n, sum(c.greenF() for c in opaque) / n,
                           sum(c.blueF() for c in opaque) / n)
    return contrast(mean, background)


def test_page_icons_stay_visible_after_switching_to_the_dark_theme(qtbot, make_window, no_prompt, qapp) -> None:  # type: ignore[no-untyped-def]
    """The walk-through's dark screenshot: Launch's black play triangle on the dark list was nearly invisible."""
    window = make_window()
    window.set_theme("light")
    window.set_theme("dark")
    base = qapp.palette().color(QPalette.ColorRole.Base)
    low = {}
    for row in range(window.nav.count()):
        item = window.nav.item(row)
        ratio = _mean_icon_contrast(item.icon(), base)
        if ratio < 3.0:  # WCAG's 3:1 for graphics
            low[item.text()] = round(ratio, 2)
    window.set_theme("light")
    assert not low, low

# ---- closing while a run runs (a real supervised run; the dialog is answered at QMessageBox.exec) ------------
@pytest.fixture
def running_run() -> Iterator[object]:
    from support.runhelp import python_job, wait_finished, wait_until

    from traindeck.backend.runs.control.lifecycle import stop_run
    from traindeck.backend.runs.record.run_store import RunStore

    run = python_job("--steps", "400", "--step-time", "0.05")  # ~20 s: outlives the test's close
    with RunStore() as store:
        wait_until(lambda: (store.get_run(run.id) or run).supervisor_pid, timeout=30)
    yield run
    with RunStore() as store:
        record = store.get_run(run.id)
        if record is not None and not record.finished:
            stop_run(store, run.id, grace_s=1.0, wait=False)
    wait_finished(run.id, 60)


def _answer(monkeypatch: pytest.MonkeyPatch, button_text: str | None) -> list[str]:
    """Make QMessageBox.exec click the button with this text (None: Cancel); returns the texts the box showed."""
    shown: list[str] = []

    def exec_(box: QMessageBox) -> int:
        shown.append(box.text())
        for button in box.buttons():
            role = box.buttonRole(button)
            if (button_text is None and role == QMessageBox.ButtonRole.RejectRole) or button.text() == button_text:
                button.click()
                return 0
        raise AssertionError(f"no button {button_text!r} in {[b.text() for b in box.buttons()]}")

    monkeypatch.setattr(QMessageBox, "exec", exec_)
    return shown


def _state(run_id: str) -> str:
    from traindeck.backend.runs.record.run_store import RunStore

    with RunStore() as store:
        record = store.get_run(run_id)
    assert record is not None
    return record.state


@pytest.mark.launch
@pytest.mark.slow
def test_close_keep_running_leaves_the_run_running(qtbot, make_window, running_run, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    from support.runhelp import get

    from traindeck.backend.runs.record.layout import RunDir

    monkeypatch.delenv("TRAINDECK_NO_CLOSE_PROMPT", raising=False)
    shown = _answer(monkeypatch, "Keep running")
    window = make_window()
    _show(qtbot, window)
    assert window.close()
    assert shown == ["1 run is still running."]
    assert not window.isVisible()
    assert _state(running_run.id) == "running"
    assert not RunDir(Path(running_run.run_dir)).stop_file.exists()
    import psutil

    assert psutil.pid_exists(get(running_run.id).supervisor_pid)

    # Reopening the window reattaches: the Runs page comes to the front with the run open.
    monkeypatch.setenv("TRAINDECK_NO_CLOSE_PROMPT", "1")
    again = make_window()
    _show(qtbot, again)
    if any(p.key == "runs" for p in again.page_types):
        qtbot.waitUntil(lambda: "runs" in again.pages and again.pages["runs"].run_id == running_run.id,
                        timeout=10000)
        assert again.stack.currentWidget() is again.pages["runs"]


@pytest.mark.launch
@pytest.mark.slow
def test_close_stop_them_writes_the_stop_request(qtbot, make_window, running_run, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    from support.runhelp import wait_finished

    from traindeck.backend.runs.record.layout import RunDir

    monkeypatch.delenv("TRAINDECK_NO_CLOSE_PROMPT", raising=False)
    shown = _answer(monkeypatch, "Stop them")
    window = make_window()
    _show(qtbot, window)
    assert window.close()  # returns at once: the supervisor does the stopping
    assert shown == ["1 run is still running."]
    assert RunDir(Path(running_run.run_dir)).stop_request() is not None
    assert wait_finished(running_run.id, 60).state == "stopped"


@pytest.mark.launch
@pytest.mark.slow
def test_close_cancel_keeps_the_window_open(qtbot, make_window, running_run, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    from traindeck.backend.runs.record.layout import RunDir

    monkeypatch.delenv("TRAINDECK_NO_CLOSE_PROMPT", raising=False)
    shown = _answer(monkeypatch, None)
    window = make_window()
    _show(qtbot, window)
    assert not window.close()
    assert shown and window.isVisible()
    assert _state(running_run.id) == "running"
    assert not RunDir(Path(running_run.run_dir)).stop_file.exists()


def test_close_without_running_runs_does_not_ask(qtbot, make_window, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.delenv("TRAINDECK_NO_CLOSE_PROMPT", raising=False)
    shown = _answer(monkeypatch, "Keep running")
    window = make_window()
    _show(qtbot, window)
    assert window.close()
    assert shown == []


# ---- screenshots (a real `traindeck gui --screenshot DIR` process) ------------------------------------------
SHIPPED_PAGES = {"configure", "launch", "runs", "queue", "monitor", "estimate", "history"}


def _distinct_colours(path: Path) -> int:
    """Colours in the page's own area: right of the navigation list (150 px), below the menu, above the status bar
    (those alone would make any shot look busy)."""
    image = QImage(str(path)).convertToFormat(QImage.Format.Format_RGB32)
    assert not image.isNull(), path
    colours = set()
    for y in range(40, image.height() - 40, 2):
        for x in range(170, image.width(), 2):
            colours.add(image.pixel(x, y))
    return len(colours)


# A user's window.ini, there before the screenshot run.
USER_INI = (b"[General]\ntheme=dark\n\n[draft]\npreset=my-zero3\n\n[launch]\nscript=/home/me/train.py\n"
            b"arguments=--lr 3e-4 --epochs 2\nenvironment=NCCL_DEBUG=INFO\n\n[window]\npage=history\n")


class ScreenshotRun(NamedTuple):
    done: subprocess.CompletedProcess[str]
    out: Path
    home: Path


@pytest.fixture(scope="module")
def screenshot_run(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ScreenshotRun]:
    """One `traindeck gui --screenshot` run (a window with every page drawn, the slow part) for the two tests below,
    in a home of its own holding a user's window.ini from before the run."""
    home = tmp_path_factory.mktemp("screenshot-home")
    ini = home / "config" / "window.ini"
    ini.parent.mkdir(parents=True)
    ini.write_bytes(USER_INI)
    ini.chmod(0o600)
    out = tmp_path_factory.mktemp("screenshot") / "shots"
    env = dict(os.environ, QT_QPA_PLATFORM="offscreen", TRAINDECK_HOME=str(home))
    done = subprocess.run([sys.executable, "-m", "traindeck", "gui", "--screenshot", str(out)], capture_output=True,
                          text=True, timeout=180, env=env, cwd=REPO)
    yield ScreenshotRun(done, out, home)


def shot_names(pages: Sequence[PageEntry]) -> set[str]:
    """A PNG per page, and the views pages name for a screenshot of their own (the Runs page's System view)."""
    views = {"runs": ["system"]}
    return {f"{i + 1}-{p.key}{suffix}.png" for i, p in enumerate(pages)
            for suffix in ["", *(f"-{view}" for view in views.get(p.key, []))]}


def test_screenshot_writes_one_non_blank_png_per_page(screenshot_run: ScreenshotRun, qapp) -> None:  # type: ignore[no-untyped-def]
    done, out = screenshot_run.done, screenshot_run.out
    assert done.returncode == 0, done.stderr[-3000:]
    pages = discover_entries()
    # The shipped pages, named here and not only discovered: a discovery that finds none (or loses one) must fail
    # this test, not leave it nothing to check.
    assert {p.key for p in pages} == SHIPPED_PAGES
    expected = shot_names(pages)
    written = {p.name for p in out.glob("*.png")} if out.exists() else set()
    assert written == expected
    assert sorted(done.stdout.split()) == sorted(str(out / name) for name in expected)
    for name in sorted(expected):
        image = QImage(str(out / name))
        assert image.width() >= 600 and image.height() >= 400, name
        # A blank or one-colour page has a handful of colours; text, widgets and charts give hundreds.
        assert _distinct_colours(out / name) > 40, f"{name} looks blank"


def test_screenshots_leave_the_users_settings_byte_identical(screenshot_run: ScreenshotRun) -> None:
    """The user's window.ini (theme, last preset, page, window state) is theirs: a screenshot run uses settings of
    its own and leaves the file as it found it, byte for byte."""
    done, home = screenshot_run.done, screenshot_run.home
    assert done.returncode == 0, done.stderr[-3000:]
    assert (home / "config" / "window.ini").read_bytes() == USER_INI
    assert sorted(p.name for p in (home / "config").iterdir()) == ["window.ini"]
    assert len(list(screenshot_run.out.glob("*.png"))) == len(shot_names(discover_entries()))


def test_an_empty_page_counts_as_blank(qtbot, qapp, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, no_prompt) -> None:  # type: ignore[no-untyped-def]
    # The measure above must tell a page that drew nothing: same window, an empty page, same crop.
    from traindeck.gui import main_window
    from traindeck.gui.app import create_window

    class Empty(Page):
        key, title, order = "empty", "Empty", 1

    monkeypatch.setattr(main_window, "discover_entries", lambda: [Empty])
    _app, window = create_window()
    window.resize(1280, 820)
    window.show()
    qtbot.waitExposed(window)
    shot = tmp_path / "empty.png"
    assert window.grab().save(str(shot))
    window.close()
    _CLOSED.append(window)
    assert _distinct_colours(shot) < 10


def test_ctrl_2_then_ctrl_enter_reaches_the_launch_page_without_clicking_a_field(qtbot, make_window, no_prompt) -> None:  # type: ignore[no-untyped-def]
    """Issue 12: the key did nothing, with no feedback, until a field of the page had focus."""
    window = make_window()
    assert "launch" in {p.key for p in window.page_types}
    _show(qtbot, window)
    window.show_page("configure" if "configure" in window._holders else window.page_types[0].key)
    window.nav.setFocus()
    position = next(i for i, p in enumerate(window.page_types) if p.key == "launch") + 1
    qtbot.keyClick(window, getattr(Qt.Key, f"Key_{position}"), Qt.KeyboardModifier.ControlModifier)
    page = window.pages["launch"]
    qtbot.waitUntil(page.isVisible)
    focus = QApplication.focusWidget()
    assert focus is not None and page.isAncestorOf(focus), focus  # keys now go to the page, not the list
    # A launch that cannot start: the key must say why instead of doing nothing.
    page.script_box.script.setText("")
    qtbot.keyClick(QApplication.focusWidget(), Qt.Key.Key_Return, Qt.KeyboardModifier.ControlModifier)
    assert "Not launched: Script: choose the training script" in page.launch_bar.result.toolTip()
    # The disabled button has its reason beside it, not an old "Run ... started" line alone.
    assert not page.launch_bar.launch_button.isEnabled()
    assert "To launch: Script: choose the training script" in page.launch_bar.result.toolTip()


def test_theme_menu_marks_the_current_theme_and_help_offers_the_readme(qtbot, make_window, no_prompt) -> None:  # type: ignore[no-untyped-def]
    window = make_window()
    checked = [a.data() for a in window.theme_actions.actions() if a.isChecked()]
    assert checked == [str(window.ctx.settings.value("theme", "system"))]
    window.set_theme("dark")
    assert [a.data() for a in window.theme_actions.actions() if a.isChecked()] == ["dark"]
    assert window.readme_action.isEnabled()  # a source checkout has the README beside the package
    keys = [keys for keys, _ in window.shortcut_rows()]
    assert "Ctrl+1" in keys and "Ctrl+Enter" in keys
    window.set_theme("light")


def test_minimising_the_window_pauses_the_page_in_front_and_restoring_resumes_it(qtbot, make_window) -> None:  # type: ignore[no-untyped-def]
    window = make_window()
    qtbot.addWidget(window)
    window.show()
    window.show_page("runs")
    page = window.page("runs")
    calls: list[bool] = []
    original = page.window_minimised
    page.window_minimised = lambda minimised: (calls.append(minimised), original(minimised))  # type: ignore[method-assign]
    qtbot.waitUntil(page.on_screen, timeout=5000)
    window.showMinimized()
    qtbot.waitUntil(lambda: calls[-1:] == [True], timeout=5000)
    assert not page.on_screen() and page.console.paused  # a minimised window's widgets still say isVisible()
    window.showNormal()
    qtbot.waitUntil(lambda: calls[-1:] == [False], timeout=5000)
    qtbot.waitUntil(lambda: page.on_screen() and not page.console.paused, timeout=5000)


def test_a_low_then_full_data_disk_is_said_above_every_page_until_space_is_freed(make_window, qtbot, tmp_path: Path,
                                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """A run's log is cut when the data folder's disk fills: the window says so above whatever page is shown, a
    warning under the low-disk threshold first, and the line goes once space is freed."""
    from support.smalldisk import fill, small_disk

    with small_disk(tmp_path, "16m") as mount:
        monkeypatch.setenv("TRAINDECK_HOME", str(mount / "home"))
        monkeypatch.setenv("TRAINDECK_LOW_DISK_MB", "8")
        window = make_window()
        window.show()
        banner = window.disk_banner
        qtbot.waitUntil(lambda: not banner._asking, timeout=10000)
        assert banner.isHidden() and banner.notice is None
        filler = mount / "filler"
        fill(filler, leave=4 << 20)  # under 8 MiB, and room for what the window writes meanwhile
        banner.check()
        qtbot.waitUntil(lambda: banner.isVisible(), timeout=10000)
        assert banner.notice is not None and not banner.notice.full
        assert f"Low disk space at {mount / 'home' / 'data'}" in banner.plain_text()
        for row in (1, 2):  # another page: still said
            window.nav.setCurrentRow(row)
            assert banner.isVisible()
        fill(filler)
        banner.check()
        qtbot.waitUntil(lambda: banner.notice is not None and banner.notice.full, timeout=10000)
        assert banner.plain_text().startswith(f"Disk full at {mount / 'home' / 'data'}")
        filler.unlink()
        banner.check()
        qtbot.waitUntil(lambda: banner.isHidden(), timeout=10000)
