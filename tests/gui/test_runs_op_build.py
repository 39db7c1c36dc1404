"""A first-use op build is shown as a build, not a stall: a real run JIT-builds a torch C++ extension into an empty
TORCH_EXTENSIONS_DIR (the same torch.utils.cpp_extension.load + ninja + c++ path DeepSpeed's cpu_adam takes, one
small source file instead of DeepSpeed's two large ones, so ~1 min instead of 2-6), with a stall threshold far below
the build's length. `traindeck runs show` and the Runs page's banner say "building", no stall is ever declared."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest
from PySide6.QtCore import QSettings
from support.runhelp import SCRIPTS, events, get, job_env, start, wait_finished

from traindeck.backend.core import paths
from traindeck.backend.runs.record.run_store import RunStore
from traindeck.gui.context import AppContext
from traindeck.gui.pages.runs import RunsPage

pytestmark = [pytest.mark.slow, pytest.mark.train]
# Far below the build's length (checked below), above `import torch` on a busy machine.
STALL_S = 6.0  # far below the build: ~20 s on a quiet machine (CI here: 19.6 s), minutes under load


@pytest.mark.launch
def test_a_first_use_build_shows_as_a_build_in_runs_show_and_on_the_runs_page(qtbot, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    pytest.importorskip("torch", reason="needs the train extra")
    empty = tmp_path / "extensions"
    empty.mkdir()
    env = job_env(TORCH_EXTENSIONS_DIR=str(empty))
    run = start([sys.executable, str(SCRIPTS / "build_tiny_op.py"), str(tmp_path)], env=env, name="first-use",
                stall_min_s=STALL_S)
    page = RunsPage(AppContext(settings=QSettings(str(paths.config_dir() / "w.ini"), QSettings.Format.IniFormat)))
    qtbot.addWidget(page)
    page.show()
    try:
        page.open_run(run.id)
        deadline = time.monotonic() + 240
        while not get(run.id).state_detail.startswith("building") and not get(run.id).finished:
            assert time.monotonic() < deadline, "the build was never recognised"
            qtbot.wait(200)
        shown = subprocess.run([sys.executable, "-m", "traindeck", "runs", "show", run.id], capture_output=True,
                               text=True, timeout=60)
        assert "state     running (building the torch extension tiny_op (first use, a few minutes))" in shown.stdout
        qtbot.waitUntil(lambda: page.header.stall_panel.isVisible(), timeout=10000)
        assert page.header.stall_label.text().startswith("⚙ Building the torch extension tiny_op (first use, a few minutes)"
                                                  ": not a hang")
        done = wait_finished(run.id, 600)
    finally:
        page.shutdown()
        page.ctx.tasks.wait(30000)
    log = Path(done.run_dir, "output.log").read_text()
    assert done.state == "succeeded" and "tiny_op works: [2.0, 2.0]" in log, log
    with RunStore() as store:
        story = {e.kind: e for e in store.events(run.id)}
        stalls = [e.t for e in store.events(run.id) if e.kind == "stall"]
    # No stall while building (`import torch` on a machine shared by 8 jobs may take longer than STALL_S before it).
    assert not [t for t in stalls if story["op_build"].t <= t <= story["op_built"].t], events(run.id)
    assert story["op_build"].text == "building the torch extension tiny_op (first use, a few minutes)"
    # The build outlasted the stall threshold (so without recognising it the run would have been called stalled).
    assert story["op_built"].t - story["op_build"].t > STALL_S + 5, events(run.id)
    assert (empty / "tiny_op").is_dir(), "built into the run's own TORCH_EXTENSIONS_DIR"
