"""A tour of the real dashboard under a real X server (Xvfb), as a person would take it, with screenshots.

    python -m tests.gui.xvfb_tour [OUT_DIR] [--readme]      (or: make tour)

Starts Xvfb, opens the window with the xcb platform plugin (not offscreen), and drives the demo: Configure,
Ctrl+2 then Ctrl+Enter to launch the cpu-demo (DeepSpeed, 2 CPU ranks), the run live on Runs (console search,
the metrics grid, the Step tab) and Monitor (the machine's processes), Stop, a second, shorter run that finishes,
the two compared in History (figures and overlaid curves), the Estimate page, and the dark theme. Every
step's screenshot is taken from the X server's root window (ImageMagick's `import`, as a screen capture tool
sees it) or, without ImageMagick, grabbed from the window. `--readme` also copies the six page screenshots to
resources/screenshots/ (the README's pictures).

Everything happens in a throwaway TRAINDECK_HOME, never the user's presets, runs or settings. The first DeepSpeed
launch uses the CPU ops `make setup` built for the training interpreter (its own folder under
~/.cache/traindeck/torch_extensions, as every run does); a TORCH_EXTENSIONS_DIR you set is used instead.
Needs: Xvfb, xauth, and Qt's xcb libraries (Debian: xvfb xauth libxcb-icccm4 libxcb-keysyms1 libxcb-image0
libxcb-render-util0 libxcb-xinerama0 libxcb-cursor0 libxkbcommon-x11-0; imagemagick for root-window captures).
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
SIZE = (1360, 860)
README_SHOTS = {"configure": "1-configure.png", "launch": "2-launch.png", "runs": "3-runs.png",
                "monitor": "4-monitor.png", "estimate": "5-estimate.png", "history": "6-history.png"}
# The second run differs from the first by one script argument: what History's comparison must make visible.
SECOND_RUN_ARGS = "--deepspeed_config {ds_config} --steps 60 --batch-size 4 --step-time 0.2 --log-every 5"


class TourError(RuntimeError):
    """A step of the tour did not happen (the message says which)."""


def start_xvfb() -> tuple[subprocess.Popen[bytes], str]:
    """Xvfb on a free display number (it picks one and writes it to a pipe)."""
    if shutil.which("Xvfb") is None:
        raise TourError("Xvfb is not installed (Debian: apt-get install xvfb xauth)")
    read, write = os.pipe()
    server = subprocess.Popen(["Xvfb", "-displayfd", str(write), "-screen", "0", f"{SIZE[0]}x{SIZE[1]}x24",
                               "-nolisten", "tcp"], pass_fds=(write,), stderr=subprocess.DEVNULL)
    os.close(write)
    with os.fdopen(read) as pipe:
        number = pipe.readline().strip()
    if not number:
        server.kill()
        raise TourError("Xvfb did not start")
    return server, f":{number}"


class Tour:
    def __init__(self, out: Path):
        self.out = out
        self.shots: dict[str, Path] = {}
        self.count = 0

    # ------------------------------------------------------------------------------------------------ helpers
    def wait(self, seconds: float) -> None:
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            self.app.processEvents()
            time.sleep(0.02)

    def wait_until(self, what: str, condition: Callable[[], object], timeout: float) -> None:
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            self.app.processEvents()
            if condition():
                return
            time.sleep(0.05)
        raise TourError(f"waited {timeout:.0f} s for {what}")

    def shot(self, name: str) -> Path:
        """A screenshot of what the X server shows now (the root window: the window as a person sees it)."""
        self.wait(0.6)  # let charts redraw and layouts settle
        self.count += 1
        path = self.out / f"{self.count:02d}-{name}.png"
        display = os.environ["DISPLAY"]
        if shutil.which("import") is not None:
            subprocess.run(["import", "-display", display, "-window", "root", str(path)], check=True,
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=60)
        else:
            self.window.grab().save(str(path))
        self.shots[name] = path
        print(f"  {path}", flush=True)
        return path

    def key(self, key: object, modifier: object | None = None) -> None:
        """A key press where the focus is, through Qt's shortcut handling as a real keystroke would go."""
        from PySide6.QtCore import Qt
        from PySide6.QtTest import QTest
        from PySide6.QtWidgets import QApplication

        target = QApplication.focusWidget() or self.window
        QTest.keyClick(target, key, modifier or Qt.KeyboardModifier.NoModifier)  # type: ignore[arg-type]
        self.app.processEvents()

    def run_state(self, run_id: str) -> str:
        from traindeck.backend.runs.record.run_store import RunStore

        with RunStore() as store:
            record = store.get_run(run_id)
        return record.state if record is not None else "missing"

    # ------------------------------------------------------------------------------------------------ the tour
    def run(self) -> None:
        from PySide6.QtCore import Qt

        from traindeck.gui.app import create_window

        self.app, self.window = create_window()
        window = self.window
        window.resize(*SIZE)
        window.move(0, 0)
        window.show()
        window.activateWindow()
        self.wait_until("the window to be shown", window.isVisible, 30)
        self.wait(2)

        print("Configure", flush=True)
        window.show_page("configure")
        self.wait(3)
        self.shot("configure")

        print("Launch: Ctrl+2, then Ctrl+Enter", flush=True)
        window.nav.setFocus()
        self.key(Qt.Key.Key_2, Qt.KeyboardModifier.ControlModifier)
        launch = window.pages["launch"]
        self.wait_until("a launchable demo (the command preview)", lambda: launch.command_box.plan is not None
                        and not launch.launch_bar.why_not_launchable(), 120)
        self.wait(1)
        self.shot("launch")
        started: list[str] = []
        window.ctx.run_started.connect(started.append)
        self.key(Qt.Key.Key_Return, Qt.KeyboardModifier.ControlModifier)
        self.wait_until("the run to start (Ctrl+Enter)", lambda: started, 120)
        first = started[0]
        self.shot("launch-started")
        # Open Monitor once now: it samples from its first showing on (and for a minute while hidden), so its
        # charts have the run's start-up when the tour comes back to them.
        window.show_page("monitor")
        self.wait(1)
        window.show_page("runs")

        # The demo trains 100 steps of 0.2 s once DeepSpeed is up: Monitor first, then Runs, then Stop, all while
        # it runs (the first launch on a machine waits minutes for DeepSpeed's CPU Adam build).
        print(f"Monitor: watching {first} live", flush=True)
        runs = window.pages["runs"]
        runs.confirm_stop = False  # the tour answers the question itself
        self.wait_until("training steps (DeepSpeed starts, CPU Adam may build)",
                        lambda: runs.record is not None and (runs.record.progress or {}).get("current", 0) >= 8,
                        1500)
        window.show_page("monitor")
        monitor = window.pages["monitor"]
        self.wait_until("Monitor to watch the running run", lambda: monitor.picker.watched is not None
                        and monitor.picker.watched.id == first, 30)
        monitor.toolbar.window_combo.setCurrentIndex(0)  # the last minute: the tour's run is young
        self.wait(2)
        self.shot("monitor")
        monitor.tabs.setCurrentIndex(2)
        self.wait(1.5)
        self.shot("monitor-run")
        monitor.tabs.setCurrentWidget(monitor.processes)  # the whole machine, the run's processes marked
        self.wait(2.5)
        self.shot("monitor-processes")

        print("Runs: live, then Stop", flush=True)
        window.show_page("runs")
        self.wait_until("more steps", lambda: runs.record is not None
                        and (runs.record.progress or {}).get("current", 0) >= 40, 120)
        self.shot("runs")
        from PySide6.QtTest import QTest

        QTest.keyClicks(runs.console.search, "loss")  # search as you type: the match count, the rank tags kept
        self.wait(1.5)
        self.shot("runs-console-search")
        runs.console.search.clear()
        runs.lower_tabs.setCurrentWidget(runs.charts)
        runs.charts.grid_button.click()  # every metric the run logs, in a grid
        self.wait(2)
        self.shot("runs-metrics-grid")
        runs.charts.overview_button.click()
        runs.lower_tabs.setCurrentWidget(runs.step_panel)  # the Step tab: each rank's step phases, live
        self.wait_until("timed steps", lambda: runs.step_panel.table.rowCount() >= 2, 60)
        self.wait(2)
        self.shot("runs-step")
        runs.lower_tabs.setCurrentIndex(0)
        runs.stop_run()
        self.wait_until("the run to stop", lambda: self.run_state(first) != "running", 120)
        self.wait_until("the page to show the stop", lambda: runs.record is not None and runs.record.finished, 30)
        self.wait(3)
        self.shot("runs-stopped")

        print("Monitor: the stopped run's offload view, read back", flush=True)
        window.show_page("monitor")
        monitor.tabs.setCurrentIndex(3)
        self.wait(4)
        self.shot("monitor-offload")
        monitor.tabs.setCurrentIndex(1)

        print("A second, shorter run", flush=True)
        window.show_page("launch")
        launch.script_box.args.setText(SECOND_RUN_ARGS)
        self.wait_until("the second command", lambda: launch.command_box.plan is not None
                        and not launch.launch_bar.why_not_launchable(), 120)
        launch.launch()
        self.wait_until("the second run to start", lambda: len(started) >= 2, 120)
        second = started[1]
        self.wait_until("the second run to finish", lambda: self.run_state(second) not in ("running", "missing"),
                        900)
        self.wait(3)
        self.shot("runs-finished")

        print("History: the two runs compared", flush=True)
        window.show_page("history")
        history = window.pages["history"]
        compared = history.compare_panel
        self.wait_until("History to list both runs", lambda: history.run_table.model.rowCount() >= 2, 60)
        compared.compare(first, second)
        self.wait_until("the comparison", lambda: "Comparing" not in compared.compare_title.text(), 60)
        compared.tabs.setCurrentIndex(1)  # "Config differences": what the two runs were given differently
        self.wait(2)
        self.shot("history")
        compared.tabs.setCurrentIndex(2)
        self.wait(1)
        self.shot("history-diff")
        compared.tabs.setCurrentIndex(0)
        self.wait(1)
        self.shot("history-figures")
        compared.tabs.setCurrentWidget(compared.overlay)  # both runs' curves on one chart
        self.wait(2)
        self.shot("history-overlay")

        print("Estimate", flush=True)
        window.show_page("estimate")
        estimate = window.pages["estimate"]
        self.wait_until("the machine's detection", lambda: estimate.detection_finished, 60)
        gpu_mem = estimate.inputs.gpu_mem
        if not gpu_mem.text():  # no GPU here: the figure a person would type for a 24 GiB card
            gpu_mem.setText("24")
        self.wait_until("the estimate", lambda: estimate.estimate is not None and estimate.estimate.advice
                        is not None, 60)
        self.wait(2)
        self.shot("estimate")

        print("Dark theme", flush=True)
        window.set_theme("dark")
        window.show_page("runs")
        runs.open_run(first)
        self.wait(4)
        self.shot("runs-dark")
        window.show_page("monitor")
        self.wait(3)
        self.shot("monitor-dark")
        window.set_theme("light")
        os.environ["TRAINDECK_NO_CLOSE_PROMPT"] = "1"
        window.close()
        window.ctx.tasks.wait(10000)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", nargs="?", default=str(REPO / "build" / "tour"), help="where the screenshots go")
    parser.add_argument("--readme", action="store_true", help="also replace resources/screenshots/*.png")
    args = parser.parse_args(argv)
    out = Path(args.out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    for old in out.glob("*.png"):
        old.unlink()

    server, display = start_xvfb()
    home = tempfile.mkdtemp(prefix="traindeck-tour-")
    os.environ.update(DISPLAY=display, QT_QPA_PLATFORM="xcb", TRAINDECK_HOME=home, DS_ACCELERATOR="cpu")
    os.environ.pop("WAYLAND_DISPLAY", None)
    print(f"Xvfb on {display}; TRAINDECK_HOME={home}; screenshots in {out}", flush=True)
    tour = Tour(out)
    try:
        tour.run()
    except TourError as exc:
        print(f"tour: {exc}", file=sys.stderr)
        try:
            tour.shot("where-it-stopped")
        except Exception:
            pass
        return 1
    finally:
        try:  # leave no run behind
            from traindeck.backend.runs.control.lifecycle import stop_run
            from traindeck.backend.runs.record.run_store import RunStore

            with RunStore() as store:
                for record in store.list_runs(state="running"):
                    stop_run(store, record.id, grace_s=2.0)
        except Exception as exc:  # the store may not exist when the tour failed early
            print(f"tour: clean-up: {exc}", file=sys.stderr)
        server.terminate()
        server.wait(10)
        shutil.rmtree(home, ignore_errors=True)
    if args.readme:
        target = REPO / "resources" / "screenshots"
        for key, name in README_SHOTS.items():
            shutil.copyfile(tour.shots[key], target / name)
            print(f"  -> {target / name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
