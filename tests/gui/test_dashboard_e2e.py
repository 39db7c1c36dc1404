"""The dashboard as a user drives it, end to end (issue 6's acceptance): an invalid value typed into the form blocks
the launch; fixed, the CPU demo is launched from the window with the real deepspeed launcher (2 ranks, ZeRO-2 +
CPU optimizer offload), its output and progress stream into the run view, and Stop ends every process."""

from __future__ import annotations

import importlib.util

import pytest
from PySide6.QtCore import Qt
from PySide6.QtWidgets import QMessageBox

from traindeck.backend.runs.control.lifecycle import stop_run
from traindeck.backend.runs.record.run_store import RunStore
from traindeck.backend.runs.supervisor.liveness import run_processes


@pytest.fixture
def window(qtbot, monkeypatch):  # type: ignore[no-untyped-def]
    from traindeck.gui.app import create_window

    monkeypatch.setenv("TRAINDECK_NO_CLOSE_PROMPT", "1")
    _app, win = create_window(demo=True)
    win.show()
    qtbot.waitExposed(win)
    yield win
    # The test edited the preset: answer the unsaved-changes question with Discard (a modal box would wait).
    monkeypatch.setattr(QMessageBox, "question", lambda *a, **k: QMessageBox.StandardButton.Discard)
    assert win.close()
    win.ctx.draft.dirty = False  # no second question if Qt closes it again at exit
    win.ctx.tasks.wait(10000)


def _set_micro_batch(qtbot, page, text: str) -> None:  # type: ignore[no-untyped-def]
    editor = page.ensure_built().forms["deepspeed"].editor("train_micro_batch_size_per_gpu")
    editor.selectAll()
    qtbot.keyClicks(editor, text)


@pytest.mark.launch
@pytest.mark.slow
@pytest.mark.train
@pytest.mark.skipif(importlib.util.find_spec("deepspeed") is None, reason="needs the train extra")
def test_invalid_value_blocks_launch_then_the_cpu_demo_runs_streams_and_stops(qtbot, window, heavy_imports):
    ctx = window.ctx
    launch = window.page("launch")
    qtbot.waitUntil(lambda: launch.command_box.plan is not None and launch.command_box.plan.ok, timeout=60000)
    assert launch.launch_bar.launch_button.isEnabled()

    # An invalid value on the Configure page: its message is shown and the Launch button is disabled.
    window.show_page("configure")
    configure = window.pages["configure"]
    _set_micro_batch(qtbot, configure, "0")
    qtbot.waitUntil(lambda: any("train_micro_batch_size_per_gpu" in m.format() for m in ctx.draft.errors()),
                    timeout=10000)
    window.show_page("launch")
    qtbot.waitUntil(lambda: not launch.launch_bar.launch_button.isEnabled(), timeout=10000)
    assert "train_micro_batch_size_per_gpu" in launch.banner.draft_errors.plain_text()

    # Fixed: the demo launches from the window (Ctrl+Enter is tested on the Launch page itself).
    window.show_page("configure")
    _set_micro_batch(qtbot, configure, "4")
    qtbot.waitUntil(lambda: not ctx.draft.errors(), timeout=10000)
    window.show_page("launch")
    launch.script_box.args.setText(
        "--deepspeed_config {ds_config} --steps 2000 --batch-size 4 --step-time 0.05 --log-every 1")
    qtbot.waitUntil(lambda: launch.launch_bar.launch_button.isEnabled()
                    and launch.command_box.plan is not None and launch.command_box.plan.ok
                    and "--step-time 0.05" in launch.command_box.command.toPlainText(), timeout=30000)
    with qtbot.waitSignal(ctx.run_started, timeout=120000) as started:
        qtbot.mouseClick(launch.launch_bar.launch_button, Qt.MouseButton.LeftButton)
    (run_id,) = started.args
    try:
        # The run view comes to the front and follows the run: output of both ranks and progress.
        qtbot.waitUntil(lambda: "runs" in window.pages and window.pages["runs"].run_id == run_id, timeout=10000)
        runs = window.pages["runs"]
        assert window.stack.currentWidget() is runs
        qtbot.waitUntil(lambda: "train_tiny: mode=deepspeed world_size=2" in runs.console.text(), timeout=240000)
        qtbot.waitUntil(lambda: int(((runs.record.progress if runs.record else None) or {}).get("current") or 0)
                        >= 3, timeout=120000)
        # (drawn on the page's next clock tick, within a second of the read)
        qtbot.waitUntil(lambda: "/ 2,000 steps" in runs.header.progress_label.text(), timeout=5000)
        # Each rank's lines can be shown alone (DeepSpeed's launcher tags nothing; the site hook does).
        qtbot.waitUntil(lambda: runs.console.rank_box.count() == 3, timeout=30000)  # All, Rank 0, Rank 1
        runs.console.set_rank_filter(1)
        qtbot.waitUntil(lambda: "train_tiny: mode=deepspeed" not in runs.console.text(), timeout=10000)
        assert any(line for line in runs.console.shown_lines() if "[INFO]" in line or "[WARNING]" in line)
        runs.console.set_rank_filter(None)
        qtbot.waitUntil(lambda: "train_tiny: mode=deepspeed world_size=2" in runs.console.text(), timeout=10000)

        # Stop: every rank ends, and the page says so.
        runs.confirm_stop = False
        qtbot.mouseClick(runs.stop_panel.stop_button, Qt.MouseButton.LeftButton)
        qtbot.waitUntil(lambda: runs.record is not None and runs.record.state == "stopped", timeout=90000)
        qtbot.waitUntil(lambda: runs.remaining is not None, timeout=30000)
        assert runs.remaining == []
        assert runs.stop_panel.story_label.text().splitlines()[-1] == "confirmed: no process of the run remains"
        with RunStore() as store:
            done = store.get_run(run_id)
        assert done is not None and run_processes(run_id, done) == []
        assert {p["rank"] for p in done.processes if p["role"] == "rank"} == {0, 1}
    finally:
        with RunStore() as store:
            record = store.get_run(run_id)
            if record is not None and not record.finished:
                stop_run(store, run_id, grace_s=1.0)
    assert heavy_imports == []
