"""Start the dashboard exactly as `python -m traindeck gui` does, note when the window is first painted, and exit.

    python tests/gui/startup_harness.py [--all-pages]

Prints one line `STARTUP {json}` with wall-clock times (time.time(), so the parent can subtract its own start):
  python_ready   this script's first line ran (interpreter and site are up)
  window_built   create_window() returned (Qt imported, settings read, main window and first page built)
  first_expose   the main window's QWindow was first exposed
  first_paint    a widget of the main window was first painted
With --all-pages, every page is then shown in turn (built, page_shown), background tasks are waited for, and the
JSON also lists the heavy modules that got imported and every NVML initialisation with the thread it ran on.

Used by tests/perf/bench_gui_startup.py (timings) and tests/gui/test_startup_imports.py (what a start imports).
Set TRAINDECK_HOME to a scratch folder and TRAINDECK_NO_CLOSE_PROMPT=1 (the close must not wait on a dialog).
"""

import time

PYTHON_READY = time.time()

import importlib.abc  # noqa: E402
import importlib.machinery  # noqa: E402
import json  # noqa: E402
import sys  # noqa: E402
import threading  # noqa: E402

# Never imported by the dashboard's process (only training subprocesses may).
HEAVY = ("torch", "deepspeed", "accelerate", "transformers", "triton", "tensorflow", "jax")

marks: dict[str, float] = {"python_ready": PYTHON_READY}
nvml_inits: list[dict[str, object]] = []


class _WatchNvml(importlib.abc.MetaPathFinder):
    """Wraps pynvml's init functions when (and only if) something imports pynvml, to see which thread calls them."""

    def find_spec(self, name, path=None, target=None):  # type: ignore[no-untyped-def]
        if name != "pynvml":
            return None
        spec = importlib.machinery.PathFinder.find_spec(name, path)
        if spec is None or spec.loader is None:
            return spec
        run_module = spec.loader.exec_module

        def exec_module(module):  # type: ignore[no-untyped-def]
            run_module(module)
            for fn_name in ("nvmlInit", "nvmlInitWithFlags"):
                original = getattr(module, fn_name, None)
                if original is not None:
                    setattr(module, fn_name, _recording(fn_name, original))

        spec.loader.exec_module = exec_module  # type: ignore[method-assign]
        return spec


def _recording(fn_name, original):  # type: ignore[no-untyped-def]
    def wrapper(*args, **kwargs):  # type: ignore[no-untyped-def]
        nvml_inits.append({"call": fn_name, "ui_thread": threading.current_thread() is threading.main_thread()})
        return original(*args, **kwargs)

    return wrapper


sys.meta_path.insert(0, _WatchNvml())


def _report(window, all_pages: bool) -> None:  # type: ignore[no-untyped-def]
    data: dict[str, object] = dict(marks)
    if window is not None:
        data["pages"] = [p.key for p in window.page_types]
        data["built"] = sorted(window.pages)
    data["page_modules"] = sorted(m for m in sys.modules if m.startswith("traindeck.gui.pages.") and m.count(".") == 3
                                  and m != "traindeck.gui.pages.base")
    if all_pages:
        data["heavy"] = sorted(m for m in sys.modules if m.split(".")[0] in HEAVY)
        data["nvml_inits"] = nvml_inits
        data["modules"] = len(sys.modules)
    print("STARTUP " + json.dumps(data), flush=True)


def main() -> int:
    all_pages = "--all-pages" in sys.argv[1:]
    from traindeck.gui import app as gui_app

    build = gui_app.create_window

    def create_window(*args, **kwargs):  # type: ignore[no-untyped-def]
        app, window = build(*args, **kwargs)
        marks["window_built"] = time.time()
        _watch_first_paint(app, window, all_pages)
        return app, window

    gui_app.create_window = create_window  # run_app looks it up at call time
    from traindeck.__main__ import main as traindeck_main

    return traindeck_main(["gui"])


def _watch_first_paint(app, window, all_pages: bool) -> None:  # type: ignore[no-untyped-def]
    from PySide6.QtCore import QEvent, QObject, QTimer
    from PySide6.QtWidgets import QWidget

    class FirstPaint(QObject):
        def eventFilter(self, obj, event):  # type: ignore[no-untyped-def]
            kind = event.type()
            if kind == QEvent.Type.Expose and "first_expose" not in marks:
                marks["first_expose"] = time.time()
            elif kind == QEvent.Type.Paint and isinstance(obj, QWidget) and obj.window() is window:
                marks["first_paint"] = time.time()
                app.removeEventFilter(self)
                QTimer.singleShot(0, lambda: _after_first_paint(app, window, all_pages))
            return False

    window._startup_filter = FirstPaint(window)  # kept alive with the window
    app.installEventFilter(window._startup_filter)


def _after_first_paint(app, window, all_pages: bool) -> None:  # type: ignore[no-untyped-def]
    if all_pages:
        for page_type in window.page_types:
            window.show_page(page_type.key)
            for _ in range(5):
                app.processEvents()
        window.ctx.tasks.wait(20000)
        for _ in range(10):
            app.processEvents()
    _report(window, all_pages)
    window.close()
    app.quit()


if __name__ == "__main__":
    sys.exit(main())
