"""Starting the dashboard and showing every page imports no training library and never initialises NVML on the UI
thread (a real `python -m traindeck gui` start in a subprocess, through tests/gui/startup_harness.py)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

HARNESS = Path(__file__).resolve().parent / "startup_harness.py"


def _start(*args: str) -> dict:  # type: ignore[type-arg]
    env = dict(os.environ, TRAINDECK_NO_CLOSE_PROMPT="1", QT_QPA_PLATFORM="offscreen")  # TRAINDECK_HOME: conftest
    done = subprocess.run([sys.executable, str(HARNESS), *args], capture_output=True, text=True, timeout=120,
                          env=env, cwd=HARNESS.parents[2])
    assert done.returncode == 0, done.stderr[-3000:]
    line = next(ln for ln in done.stdout.splitlines() if ln.startswith("STARTUP "))
    return json.loads(line[len("STARTUP "):])


def test_window_with_every_page_imports_no_training_library_and_no_nvml_on_the_ui_thread() -> None:
    started = _start("--all-pages")
    assert started["first_paint"] >= started["window_built"] >= started["python_ready"]
    assert started["built"] == sorted(started["pages"]), "every page was built and shown"
    assert started["heavy"] == [], f"the GUI process imported {started['heavy']}: only training subprocesses may"
    on_ui_thread = [call for call in started["nvml_inits"] if call["ui_thread"]]
    assert on_ui_thread == [], "NVML was initialised on the UI thread (use ctx.tasks)"


def test_start_imports_only_the_page_it_shows() -> None:
    # The other pages' modules (charts, numpy, pyqtgraph, schemas) load when first shown, not at start.
    started = _start()
    assert len(started["built"]) == 1 or started["pages"] == []
    assert started["page_modules"] == [f"traindeck.gui.pages.{key}" for key in started["built"]]


def test_page_entries_read_from_source_match_the_page_classes() -> None:
    from traindeck.gui.pages import discover, discover_entries

    entries = discover_entries()
    assert [(e.key, e.title, e.order) for e in entries] == [(c.key, c.title, c.order) for c in discover()]
    assert [e.load() for e in entries] == discover()


def test_harness_sees_a_heavy_import_and_an_nvml_init_on_the_ui_thread(tmp_path: Path) -> None:
    # The checks above must be able to fail: a stand-in `torch` and a UI-thread nvmlInit are reported.
    (tmp_path / "torch.py").write_text("")
    code = (
        "import runpy, sys\n"
        f"sys.argv = [{str(HARNESS)!r}, '--all-pages']\n"
        "import traindeck.gui.main_window as mw\n"
        "build = mw.MainWindow.__init__\n"
        "def init(self, ctx):\n"
        "    build(self, ctx)\n"
        "    import torch, pynvml\n"
        "    try:\n"
        "        pynvml.nvmlInit()\n"
        "    except Exception:\n"
        "        pass\n"
        "mw.MainWindow.__init__ = init\n"
        f"runpy.run_path({str(HARNESS)!r}, run_name='__main__')\n"
    )
    env = dict(os.environ, TRAINDECK_NO_CLOSE_PROMPT="1", QT_QPA_PLATFORM="offscreen",
               PYTHONPATH=os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")]))
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env=env,
                          cwd=HARNESS.parents[2])
    assert done.returncode == 0, done.stderr[-3000:]
    line = next(ln for ln in done.stdout.splitlines() if ln.startswith("STARTUP "))
    started = json.loads(line[len("STARTUP "):])
    assert started["heavy"] == ["torch"]
    assert [c["ui_thread"] for c in started["nvml_inits"]][:1] == [True]
