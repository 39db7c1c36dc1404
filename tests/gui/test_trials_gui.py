"""The strategy trial in the dashboard: "Try setups…" (the axes, the candidate count and the estimator's skips
before anything starts; Enter starts the real detached driver), the results window over a trial's folder (table,
winner, plot), Stop (the real stop request the driver reads) and "Use this" (a preset that `config check` passes),
and where they open (Launch, Estimate, Runs).

The finished trial's folder is written with the backend's own record writers; two of its rows are what a real trial
of tests/launch/test_trials.py's tiny DeepSpeed script measured on 2 CPU ranks (zero2 and zero3, no offload,
micro-batch 2, 2 warm-up + 5 steps: 102 s on this machine, too long for a dashboard test); the real trial itself
is tests/launch/test_trials.py.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from support.probe_fixture import probe_cache  # noqa: F401 (a fixture)

from traindeck.backend.cli import main
from traindeck.backend.presets import load_preset, preset_to_mapping
from traindeck.backend.trials import (
    Result,
    TrialFolder,
    TrialOptions,
    TrialSpec,
    TrialState,
    plan_trial,
    winner_lines,
)
from traindeck.gui.context import AppContext, LaunchChoice

MIB = 2**20
TRIAL = "20260102-000000-abcdef"


def _candidate(stage: int, offload: str, micro: int) -> dict:  # type: ignore[type-arg]
    return {"stage": stage, "offload": offload, "micro_batch": micro, "checkpointing": False, "nvme_path": ""}


def _measured() -> list[Result]:
    """Rows 0 and 2: what a real trial measured (see the module's docstring; times from its start); rows 1 and 3:
    a candidate the memory limit ended and a faster one too tight, as the driver writes them."""
    return [
        Result(_candidate(2, "none", 2), "measured", "20261127-192622-ec49", 12.943, 309.047, 4, None, 409260032,
               started_at=1000.322, measured_at=1043.096, ended_at=1044.461,
               steps_ms=[18.82, 12.943, 17.955, 10.887, 9.301]),
        Result(_candidate(2, "none", 4), "failed", "20261127-192650-bbbb", reason="host_oom: rank 0 used 1636 MiB "
               "of host memory, over the trial's limit of 1024 MiB; stopped", kind="host_oom", started_at=1044.5,
               ended_at=1052.0),
        Result(_candidate(3, "none", 2), "measured", "20261127-192704-d4bc", 52.396, 76.342, 4, None, 410464256,
               started_at=1052.0, measured_at=1102.554, ended_at=1103.374,
               steps_ms=[42.395, 58.476, 40.388, 58.931, 52.396]),
        Result(_candidate(3, "cpu", 4), "too_tight", "20261127-192730-dddd", 13.1, 612.4, 8, None, 948 * MIB,
               reason="peak host memory per rank 948 MiB leaves less than 10% of 1024 MiB", started_at=1103.4,
               measured_at=1150.0, ended_at=1151.0),
    ]


def _finished_trial(trial_id: str = TRIAL) -> TrialFolder:
    results = _measured()
    spec = TrialSpec(id=trial_id, name="tiny", script="tiny_ds.py",
                     script_args=["--deepspeed_config", "{ds_config}"],
                     base_preset=preset_to_mapping(load_preset("cpu-demo")), candidates=[r.candidate for r in results],
                     world_size=2, warmup=2, steps=5, memory_limit=1024 * MIB)
    folder = TrialFolder(trial_id)
    folder.create(spec)
    folder.write_state(TrialState(trial_id, state="finished", results=results, started_at=999.0, ended_at=1152.0))
    return folder


def _ctx(tmp_path: Path) -> AppContext:
    from PySide6.QtCore import QSettings

    (tmp_path / "tiny_ds.py").write_text("print('the script is not run by these tests')\n")
    ctx = AppContext(settings=QSettings(str(tmp_path / "window.ini"), QSettings.Format.IniFormat))
    ctx.draft.replace(load_preset("cpu-demo"), "cpu-demo")
    ctx.set_launch_choice(LaunchChoice(script=str(tmp_path / "tiny_ds.py"),
                                       script_args=["--deepspeed_config", "{ds_config}"], cwd=str(tmp_path),
                                       nproc=2))
    return ctx


def test_the_dialog_counts_the_candidates_and_says_which_the_estimate_skips_and_why(qtbot, tmp_path: Path) -> None:
    from traindeck.gui.widgets.trial_dialog import TrialDialog, request_from_context

    ctx = _ctx(tmp_path)
    dialog = TrialDialog(ctx, lambda: request_from_context(ctx), stages=[0, 2, 3], offloads=["none", "cpu"])
    qtbot.addWidget(dialog)
    qtbot.waitUntil(lambda: dialog.spec is not None, timeout=20000)
    # 0/2/3 x none/cpu, one micro-batch each on the ladder; ZeRO-0 with CPU offload is left out.
    assert dialog.count_line() == ("5 candidates to measure: zero0-none-mb1, zero2-none-mb1, zero2-cpu-mb1, "
                                   "zero3-none-mb1, zero3-cpu-mb1 (micro-batches double from 1 while they fit); "
                                   "3 warm-up + 20 measured steps each")
    assert "ZeRO-0 with offload cpu: left out (off-loading needs ZeRO stage 1 or more)" in dialog.summary.text()

    dialog.offload_boxes["cpu+params"].setChecked(True)
    dialog.micro_batch.setText("1,2")
    dialog.model_size.setText("70B")  # far over this machine: the estimator skips what cannot fit
    qtbot.waitUntil(lambda: dialog.spec is not None and bool(dialog.spec.skipped), timeout=20000)
    expected = plan_trial(TrialOptions(script="tiny_ds.py", stages="0,2,3", offload="none,cpu,cpu+params",
                                       micro_batch="1,2", nproc=2, model_size="70B"), load_preset("cpu-demo"), "x")
    assert len(expected.candidates) + len(expected.skipped) == 12  # 6 pairs DeepSpeed takes x 2 micro-batches
    assert dialog.count_line().startswith(f"{len(expected.candidates)} candidates to measure: ")
    assert dialog.count_line().endswith(f"; {len(expected.skipped)} skipped by the estimate; 3 warm-up + 20 measured "
                                        "steps each")
    lines = dialog.skipped_lines()
    assert len(lines) == len(expected.skipped) and lines[0].startswith("zero0-none-mb1: the estimate does not fit: ")
    assert "skips zero0-none-mb1: the estimate does not fit" in dialog.summary.text()
    assert dialog.start_button.isEnabled()

    for box in dialog.stage_boxes.values():  # nothing to try: said, and Start is off
        box.setChecked(False)
    qtbot.waitUntil(lambda: bool(dialog.problem), timeout=5000)
    assert "tick at least one ZeRO stage" in dialog.summary.text() and not dialog.start_button.isEnabled()


def test_a_preset_without_deepspeed_makes_no_trial_and_says_why(qtbot, tmp_path: Path) -> None:
    from traindeck.gui.widgets.trial_dialog import TrialDialog, request_from_context

    ctx = _ctx(tmp_path)
    ctx.draft.replace(load_preset("single-process"), "single-process")
    dialog = TrialDialog(ctx, lambda: request_from_context(ctx))
    qtbot.addWidget(dialog)
    qtbot.waitUntil(lambda: bool(dialog.problem), timeout=20000)
    assert "does not use DeepSpeed" in dialog.problem and not dialog.start_button.isEnabled()


def test_the_results_window_shows_a_finished_trial_as_trial_show_does(qtbot) -> None:
    from traindeck.gui.widgets.trial_results import TrialResults

    folder = _finished_trial()
    window = TrialResults(_app_ctx(), TRIAL)
    qtbot.addWidget(window)
    qtbot.waitUntil(lambda: window.view is not None, timeout=20000)
    assert window.progress.text() == f"Trial {TRIAL} finished: 4 of 4 candidates done"
    table = window.table
    cells = [[table.item(r, c).text() for c in range(table.columnCount())] for r in range(table.rowCount())]
    assert cells[0] == ["0", "★ zero2-none-mb2", "309.0", "12.9", "-", "390M", "measured"]  # ★: the winner
    assert cells[1][1] == "zero2-none-mb4" and cells[1][6].startswith("failed: host_oom: rank 0 used 1636 MiB")
    assert cells[3][6] == "too tight: peak host memory per rank 948 MiB leaves less than 10% of 1024 MiB"
    # The winner and why the faster one was passed over, the lines `trial show` prints.
    text = window.verdict.text()
    for line in winner_lines(folder.state()):
        assert line.split(" (")[0] in text
    assert f"winner: {TRIAL} #0 zero2-none-mb2" in text and "#3 zero3-cpu-mb4 was faster" in text
    # The plot: two measured points and a too tight one at their peak host memory (in MiB, as the table's 390M),
    # the winner starred.
    xs, ys = window.points.getData()
    assert sorted(zip(list(xs), list(ys), strict=True)) == [(409260032 / 2**20, 309.047),
                                                            (410464256 / 2**20, 76.342)]
    assert list(window.tight_points.getData()[1]) == [612.4]
    assert list(window.winner_point.getData()[1]) == [309.047]
    assert window.use_button.isEnabled() and not window.stop_button.isEnabled()


def test_use_this_saves_the_winner_as_a_preset_that_config_check_passes(qtbot, tmp_path: Path,
                                                                     capsys: pytest.CaptureFixture[str]) -> None:
    from traindeck.gui.widgets.trial_results import TrialResults

    _finished_trial()
    window = TrialResults(_app_ctx(), TRIAL)
    qtbot.addWidget(window)
    qtbot.waitUntil(lambda: window.view is not None, timeout=20000)
    from PySide6.QtWidgets import QInputDialog

    window.use_button.click()  # asks the name, without blocking the window
    box = window.findChild(QInputDialog, "trialPresetName")
    assert box is not None and box.isVisible() and box.textValue() == "tiny-fastest"
    box.accept()
    qtbot.waitUntil(lambda: window.said is not None, timeout=20000)
    severity, said, details = window.said
    assert severity == "ok", said
    # One line in the window (the chart keeps its room), the rest in its tooltip; no CLI hint beside the button.
    assert said == "Saved preset 'tiny-fastest': choose it on the Launch page (details: hover)."
    assert window.verdict.toolTip() == details
    assert details.startswith("The winner of trial 20260102-000000-abcdef (ZeRO-2, offload none, micro-batch 2)")
    assert "The script's arguments stay as they are: tiny_ds.py --deepspeed_config '{ds_config}'" in details
    # cpu-demo trains 4 a GPU on 2 ranks; the winner's micro-batch of 2 halves that.
    assert "The global batch becomes 4 samples a step (the base preset's: 8): the learning rate" in details
    assert "winner: 20260102-000000-abcdef #0 zero2-none-mb2" in window.verdict.text()
    assert "traindeck trial use" not in window.verdict.text() and "--preset NAME" not in window.verdict.text()
    preset = load_preset("tiny-fastest")
    assert (preset.deepspeed or {})["zero_optimization"]["stage"] == 2
    assert main(["presets", "export", "tiny-fastest", "--dir", str(tmp_path)]) == 0
    capsys.readouterr()
    assert main(["config", "check", str(tmp_path / "ds_config.json"), "--world-size", "2", "--plain-script"]) == 0, \
        capsys.readouterr()
    window.use("tiny-fastest")  # the same name again: refused in one line, the preset kept
    qtbot.waitUntil(lambda: window.said is not None and window.said[0] == "error", timeout=20000)
    assert "tiny-fastest" in window.said[1] and "Traceback" not in window.said[1]


def test_use_notes_say_the_changed_batch_argument_and_the_new_global_batch() -> None:
    from traindeck.backend.trials import use_notes

    results = [Result(_candidate(3, "cpu", 8), "measured", "r0", 50.0, 320.0, 16, None, 400 * MIB)]
    spec = TrialSpec(id="t", name="hf", script="train.py", script_args=["--per_device_train_batch_size", "2"],
                     base_preset=preset_to_mapping(load_preset("cpu-demo")), candidates=[results[0].candidate],
                     world_size=2)
    notes = use_notes(spec, TrialState("t", "finished", results))
    assert notes[0] == ("The script's arguments change: --per_device_train_batch_size 8. Run it with: train.py "
                        "--per_device_train_batch_size 8")
    assert notes[1].startswith("The global batch becomes 16 samples a step (the base preset's: ")


def test_stop_asks_the_trials_driver_to_stop_and_the_measured_rows_stay(qtbot) -> None:
    from traindeck.gui.widgets.trial_results import TrialResults

    spec = plan_trial(TrialOptions(script="tiny.py", stages="2,3", offload="none", micro_batch="2", nproc=2),
                      load_preset("cpu-demo"), "20260102-000000-running")
    folder = TrialFolder(spec.id)
    folder.create(spec)
    first = Result(spec.candidates[0], "measured", "r0", 41.6, 96.15, 4, None, 412 * MIB, started_at=1000.0,
                   measured_at=1019.5, ended_at=1021.0)
    running = Result(spec.candidates[1], "running", "r1", started_at=1021.0)
    folder.write_state(TrialState(spec.id, "running", [first, running], current=1, driver_pid=os.getpid(),
                                  started_at=999.0))
    window = TrialResults(_app_ctx(), spec.id)
    qtbot.addWidget(window)
    qtbot.waitUntil(lambda: window.view is not None, timeout=20000)
    assert window.progress.text().startswith(f"Trial {spec.id} running: 1 of 2 candidates done")
    assert window.stop_button.isEnabled() and not window.use_button.isEnabled()
    _confirm_stop(qtbot, window)
    qtbot.waitUntil(folder.stop_requested, timeout=20000)
    qtbot.waitUntil(lambda: window.said is not None, timeout=20000)
    assert "what was measured is kept" in window.said[1]
    # The driver ends the trial stopped (as its loop writes it on the request): the measured row stays, shown.
    folder.write_state(TrialState(spec.id, "stopped", [first, Result(spec.candidates[1], "skipped", "r1",
                                                                     reason="the trial was stopped")],
                                  driver_pid=os.getpid(), started_at=999.0, ended_at=1030.0))
    qtbot.waitUntil(lambda: window.view is not None and window.view.finished, timeout=20000)
    assert window.progress.text() == f"Trial {spec.id} stopped: 1 of 2 candidates measured"
    assert window.table.item(0, 6).text() == "measured" and not window.stop_button.isEnabled()


def _confirm_stop(qtbot, window) -> None:  # type: ignore[no-untyped-def]
    """Click "Stop trial" and confirm in the box it opens."""
    from PySide6.QtWidgets import QMessageBox

    window.stop_button.click()
    box = window.findChild(QMessageBox, "trialStopConfirm")
    assert box is not None and box.isVisible()
    [yes] = [b for b in box.buttons() if box.buttonRole(b) == QMessageBox.ButtonRole.DestructiveRole]
    yes.click()


def _running_trial(trial_id: str) -> tuple[TrialSpec, TrialFolder, Result]:
    spec = plan_trial(TrialOptions(script="tiny.py", stages="2,3", offload="none", micro_batch="2", nproc=2),
                      load_preset("cpu-demo"), trial_id)
    folder = TrialFolder(spec.id)
    folder.create(spec)
    first = Result(spec.candidates[0], "measured", "r0", 41.6, 96.15, 4, None, 412 * MIB, started_at=1000.0,
                   measured_at=1019.5, ended_at=1021.0)
    running = Result(spec.candidates[1], "running", "r1", started_at=1021.0)
    folder.write_state(TrialState(spec.id, "running", [first, running], current=1, driver_pid=os.getpid(),
                                  started_at=999.0))
    return spec, folder, first


def test_enter_in_the_results_window_never_stops_the_trial_and_stop_asks_first(qtbot) -> None:
    from PySide6.QtCore import Qt
    from PySide6.QtWidgets import QMessageBox, QPushButton

    from traindeck.gui.widgets.trial_results import TrialResults

    spec, folder, _ = _running_trial("20260102-000000-enter0")
    window = TrialResults(_app_ctx(), spec.id)
    qtbot.addWidget(window)
    window.show()
    qtbot.waitUntil(lambda: window.view is not None and window.stop_button.isEnabled(), timeout=20000)
    assert not any(b.autoDefault() or b.isDefault() for b in window.findChildren(QPushButton))
    window.stop_button.setFocus()
    for key in (Qt.Key.Key_Return, Qt.Key.Key_Enter):
        qtbot.keyClick(window, key)
        qtbot.keyClick(window.stop_button, key)
    assert window.findChild(QMessageBox, "trialStopConfirm") is None and not folder.stop_requested()
    window.stop_button.click()  # asks, without blocking the window; Cancel is the default
    box = window.findChild(QMessageBox, "trialStopConfirm")
    assert box is not None and box.isVisible() and box.windowModality() == Qt.WindowModality.WindowModal
    assert "measured so far are kept" in box.informativeText()
    assert box.defaultButton() is box.button(QMessageBox.StandardButton.Cancel)
    box.button(QMessageBox.StandardButton.Cancel).click()
    assert not folder.stop_requested() and window.stop_button.isEnabled()


def test_stop_of_a_trial_whose_driver_is_gone_ends_it_here_and_keeps_what_was_measured(qtbot) -> None:
    import subprocess
    import sys

    from traindeck.gui.widgets.trial_results import TrialResults

    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    spec = plan_trial(TrialOptions(script="tiny.py", stages="2,3", offload="none", micro_batch="2", nproc=2),
                      load_preset("cpu-demo"), "20260102-000000-orphan")
    folder = TrialFolder(spec.id)
    folder.create(spec)
    first = Result(spec.candidates[0], "measured", "r0", 41.6, 96.15, 4, None, 412 * MIB, started_at=1000.0,
                   measured_at=1019.5, ended_at=1021.0)
    folder.write_state(TrialState(spec.id, "running", [first, Result(spec.candidates[1], "pending")], current=1,
                                  driver_pid=gone.pid, started_at=999.0))
    window = TrialResults(_app_ctx(), spec.id)
    qtbot.addWidget(window)
    qtbot.waitUntil(lambda: window.view is not None, timeout=20000)
    assert window.stop_button.isEnabled()
    _confirm_stop(qtbot, window)
    qtbot.waitUntil(lambda: window.said is not None, timeout=20000)
    assert window.said[1] == f"Trial {spec.id} stopped here: its driver was gone; what was measured is kept."
    state = folder.state()
    assert state.state == "stopped" and [r.state for r in state.results] == ["measured", "skipped"]
    assert state.results[1].reason == "the trial was stopped (its driver was gone)"


def _app_ctx() -> AppContext:
    from PySide6.QtCore import QSettings

    from traindeck.backend.core import paths

    return AppContext(settings=QSettings(str(paths.config_dir() / "window.ini"), QSettings.Format.IniFormat))


# ---- where the dialog and the window open ---------------------------------------------------------------------
def test_try_setups_beside_launch_takes_the_launch_pages_script_and_preset_and_esc_closes(
        qtbot, tmp_path: Path, traindeck_home: Path, probe_cache: Path) -> None:  # noqa: F811
    import shutil

    from PySide6.QtCore import QSettings, Qt

    from traindeck.backend.core import paths
    from traindeck.gui.pages.launch import LaunchPage

    shutil.copytree(probe_cache, traindeck_home / "cache" / "probes")
    ctx = AppContext(settings=QSettings(str(paths.config_dir() / "window.ini"), QSettings.Format.IniFormat))
    ctx.draft.replace(load_preset("cpu-demo"), "cpu-demo")
    page = LaunchPage(ctx)
    qtbot.addWidget(page)
    script = tmp_path / "tiny_ds.py"
    script.write_text("print('not run')\n")
    page.script_box.fill(str(script), "--deepspeed_config {ds_config}")
    bar = page.launch_bar
    assert bar.trial_button.text() == "Try setups…"
    bar.trial_button.click()
    dialog = page.findChild(TrialDialogType(), "trialDialog")
    assert dialog is not None and dialog.isVisible()
    options, preset = dialog.options()
    assert options.script == str(script) and options.script_args == ("--deepspeed_config", "{ds_config}")
    assert preset is not None and preset.name == "cpu-demo" and options.nproc == page.runner.processes()
    assert "tiny_ds.py" in dialog.launch_line.text() and "'cpu-demo'" in dialog.launch_line.text()
    qtbot.waitUntil(lambda: dialog.spec is not None, timeout=20000)
    assert dialog.start_button.isDefault()  # Enter starts
    qtbot.keyClick(dialog, Qt.Key.Key_Escape)
    assert not dialog.isVisible()
    page.shutdown()
    ctx.tasks.wait(30000)


def TrialDialogType() -> type:  # noqa: N802 - a class, imported where Qt is up
    from traindeck.gui.widgets.trial_dialog import TrialDialog

    return TrialDialog


def test_enter_starts_a_detached_trial_and_its_results_open(qtbot, tmp_path: Path) -> None:
    """A real start: the driver is forked away and runs the candidates; an interpreter that does not exist makes
    each fail at its start, so the trial ends at once without a run."""
    from PySide6.QtCore import Qt

    from traindeck.gui.widgets.trial_dialog import TrialDialog, request_from_context
    from traindeck.gui.widgets.trial_results import TrialResults

    ctx = _ctx(tmp_path)
    ctx.set_launch_choice(python=str(tmp_path / "no-such-python"))
    dialog = TrialDialog(ctx, lambda: request_from_context(ctx), stages=[2, 3], offloads=["none"])
    qtbot.addWidget(dialog)
    dialog.show()
    dialog.micro_batch.setText("2")
    started: list[tuple[str, object]] = []
    dialog.started.connect(lambda trial_id, pid: started.append((trial_id, pid)))
    qtbot.waitUntil(lambda: dialog.spec is not None, timeout=20000)
    qtbot.keyClick(dialog, Qt.Key.Key_Return)
    qtbot.waitUntil(lambda: bool(started), timeout=60000)
    trial_id, pid = started[0]
    assert isinstance(pid, int) and not dialog.isVisible()
    window = TrialResults(ctx, trial_id, pid)
    qtbot.addWidget(window)
    qtbot.waitUntil(lambda: window.view is not None and window.view.finished, timeout=60000)
    assert [window.table.item(r, 1).text() for r in range(window.table.rowCount())] == ["zero2-none-mb2",
                                                                                          "zero3-none-mb2"]
    assert all(window.table.item(r, 6).text().startswith("failed: could not start")
               for r in range(window.table.rowCount()))
    assert "winner: none" in window.verdict.text() and not window.use_button.isEnabled()


def test_try_these_setups_on_the_estimate_page_opens_the_dialog_with_the_tables_setups(qtbot, tmp_path: Path,
                                                                                      traindeck_home: Path) -> None:
    from PySide6.QtCore import QSettings

    from traindeck.gui.pages.estimate import EstimatePage

    ctx = AppContext(settings=QSettings(str(traindeck_home / "window.ini"), QSettings.Format.IniFormat))
    page = EstimatePage(ctx)
    qtbot.addWidget(page)
    qtbot.waitUntil(lambda: page.detection_finished, timeout=20000)
    for edit, text in ((page.inputs.params, "7B"), (page.inputs.gpu_mem, "24"), (page.inputs.host_mem, "64")):
        edit.setText(text)
    page.inputs.gpus_per_node.setValue(2)
    qtbot.waitUntil(lambda: page.estimate is not None and page.estimate.machine.gpu_mem_bytes == 24 * 2**30
                    and page.estimate.machine.gpus_per_node == 2 and not page.problems, timeout=20000)
    button = page.results.try_button
    assert button.text() == "Try these setups…" and button.isEnabled()
    maybe = [r for r in page.estimate.rows if r.framework == "deepspeed" and r.fits is not False]
    assert maybe and len(maybe) < len([r for r in page.estimate.rows if r.framework == "deepspeed"])
    button.click()
    dialog = page.findChild(TrialDialogType(), "trialDialog")
    assert dialog is not None
    ticked = [s for s, box in dialog.stage_boxes.items() if box.isChecked()]
    assert ticked == sorted({r.zero_stage for r in maybe})
    assert dialog.model_size.text() == page.estimate.model_size
    dialog.reject()
    qtbot.waitUntil(lambda: page.findChild(TrialDialogType(), "trialDialog") is None, timeout=5000)
    page.shutdown()
    ctx.tasks.wait(30000)


def test_trials_on_the_runs_page_opens_the_newest_trial(qtbot, make_runs_page) -> None:
    _finished_trial("20260101-000000-older0")
    _finished_trial()
    page = make_runs_page()
    page.trials_button.click()
    from traindeck.gui.widgets.trial_results import TrialResults

    window = page.findChild(TrialResults, "trialResults")
    assert window is not None
    qtbot.waitUntil(lambda: window.view is not None, timeout=20000)
    assert window.trial_id() == TRIAL and window.trials.count() == 2
    window.trials.setCurrentIndex(1)
    qtbot.waitUntil(lambda: window.view is not None and window.view.id == "20260101-000000-older0", timeout=20000)
    window.close()


# ---- the dialog's keys, memory and notes ------------------------------------------------------------------------
def _started_without_a_driver(monkeypatch: pytest.MonkeyPatch) -> list[TrialOptions]:
    """Start plans the trial as the real start does, without forking a driver (the real start is
    test_enter_starts_a_detached_trial_and_its_results_open); the options started with."""
    from traindeck.gui.widgets import trial_dialog

    asked: list[TrialOptions] = []

    def start(options: TrialOptions, preset: object) -> tuple[str, int | None]:
        asked.append(options)
        return "20260102-000000-nodrv0", None

    monkeypatch.setattr(trial_dialog, "start", start)
    return asked


@pytest.mark.parametrize("spin", ["warmup", "steps", "headroom"])
def test_enter_in_a_spin_box_starts_the_trial_with_the_value_typed(qtbot, tmp_path: Path, spin: str,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    from PySide6.QtCore import Qt

    from traindeck.gui.widgets.trial_dialog import TrialDialog, request_from_context

    asked = _started_without_a_driver(monkeypatch)
    ctx = _ctx(tmp_path)
    dialog = TrialDialog(ctx, lambda: request_from_context(ctx), stages=[2], offloads=["none"])
    qtbot.addWidget(dialog)
    dialog.show()
    qtbot.waitUntil(lambda: dialog.spec is not None, timeout=20000)
    box = getattr(dialog, spin)
    box.setFocus()
    box.selectAll()
    qtbot.keyClicks(box, "7")  # the plan is made again (Start is off meanwhile): Enter waits for it
    qtbot.keyClick(box, Qt.Key.Key_Return)
    qtbot.waitUntil(lambda: bool(asked), timeout=20000)
    options = asked[0]
    assert (options.warmup, options.steps, options.headroom) == (
        7 if spin == "warmup" else 3, 7 if spin == "steps" else 20, 0.07 if spin == "headroom" else 0.1)
    qtbot.waitUntil(lambda: not dialog.isVisible(), timeout=20000)


def test_the_dialog_opens_with_the_last_choices_except_the_estimates_axes(qtbot, tmp_path: Path,
                                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    from traindeck.gui.widgets.trial_dialog import TrialDialog, request_from_context

    _started_without_a_driver(monkeypatch)
    ctx = _ctx(tmp_path)
    first = TrialDialog(ctx, lambda: request_from_context(ctx))
    qtbot.addWidget(first)
    for stage, box in first.stage_boxes.items():
        box.setChecked(stage == 3)
    for key, box in first.offload_boxes.items():
        box.setChecked(key in ("cpu+params", "nvme"))
    first.nvme_path.setText("/mnt/fast")
    first.micro_batch.setText("2,4")
    first.checkpointing.setText("--gradient_checkpointing")
    first.warmup.setValue(1)
    first.steps.setValue(6)
    first.headroom.setValue(15)
    qtbot.waitUntil(lambda: first.spec is not None, timeout=20000)
    first.start()
    qtbot.waitUntil(lambda: not first.isVisible() and first.result() == 1, timeout=20000)

    again = TrialDialog(ctx, lambda: request_from_context(ctx))
    qtbot.addWidget(again)
    options, _ = again.options()
    assert (options.stages, options.offload) == ("3", "cpu+params,nvme:/mnt/fast")
    assert (options.micro_batch, options.checkpointing_arg) == ("2,4", "--gradient_checkpointing")
    assert (options.warmup, options.steps, options.headroom) == (1, 6, 0.15)
    # The Estimate page passes the set-ups its table lists: those stand, the rest is remembered.
    estimate = TrialDialog(ctx, lambda: request_from_context(ctx), stages=[0, 1], offloads=["none"])
    qtbot.addWidget(estimate)
    options, _ = estimate.options()
    assert (options.stages, options.offload, options.steps) == ("0,1", "none", 6)
    for dialog in (again, estimate):
        dialog.reject()


def test_the_dialog_names_a_single_candidate_warns_of_a_config_that_cannot_reach_the_script_and_has_room(
        qtbot, tmp_path: Path) -> None:
    from PySide6.QtWidgets import QScrollArea

    from traindeck.gui.widgets.trial_dialog import TrialDialog, request_from_context

    ctx = _ctx(tmp_path)
    ctx.set_launch_choice(script_args=["--epochs", "1"], launcher="deepspeed")
    dialog = TrialDialog(ctx, lambda: request_from_context(ctx), stages=[3], offloads=["none"])
    qtbot.addWidget(dialog)
    dialog.micro_batch.setText("2")
    dialog.show()
    qtbot.waitUntil(lambda: dialog.spec is not None and dialog.spec.candidates == [
        {"stage": 3, "offload": "none", "micro_batch": 2, "checkpointing": False, "nvme_path": ""}], timeout=20000)
    text = dialog.summary.text()
    assert "1 candidate to measure: zero3-none-mb2; 3 warm-up + 20 measured steps each" in text
    assert "do not pass the DeepSpeed config" in text and dialog.start_button.isEnabled()  # a warning, not a refusal
    # The notes have a framed area of their own, and the NVMe path a path's width.
    notes = dialog.findChild(QScrollArea, "trialNotes")
    assert notes is not None and notes.height() >= 8 * dialog.fontMetrics().lineSpacing()
    assert dialog.nvme_path.width() >= 25 * dialog.fontMetrics().averageCharWidth()
    ctx.set_launch_choice(script_args=["--deepspeed_config", "{ds_config}"])
    dialog.warmup.setValue(2)  # any change reads the launch again
    qtbot.waitUntil(lambda: dialog.spec is not None and dialog.spec.warmup == 2, timeout=20000)
    assert "DeepSpeed config" not in dialog.summary.text()
    dialog.reject()


def test_the_plot_names_every_point_and_pads_its_ranges(qtbot) -> None:
    from traindeck.gui.widgets.trial_results import TrialResults

    _finished_trial()
    window = TrialResults(_app_ctx(), TRIAL)
    qtbot.addWidget(window)
    qtbot.waitUntil(lambda: window.view is not None, timeout=20000)
    assert sorted(label.toPlainText().strip() for label in window.labels) == [
        "zero2-none-mb2", "zero3-cpu-mb4", "zero3-none-mb2"]
    item = window.plot.getPlotItem()
    (x0, x1), (y0, y1) = item.getViewBox().viewRange()
    assert y0 == pytest.approx(0.0) and y1 >= 612.4 * 1.1 - 1e-6  # samples/s from 0, the fastest below the top
    assert x0 <= 390 * 0.9 and x1 >= 948 * 1.1 - 1e-6  # MiB, as the table's 390M and 948M
    assert item.getAxis("bottom").labelText == "peak host memory per rank (MiB)"


def test_points_measured_alike_share_one_label_a_name_a_line(qtbot) -> None:
    """Two set-ups measured alike (ZeRO-2 with and without CPU offload of a tiny model: 734 and 742 samples/s at
    the same peak) sit on one spot: their names are one label, a name a line, not printed over each other."""
    from traindeck.gui.widgets.trial_results import TrialResults

    trial_id = "20260102-000000-alike0"
    results = [
        Result(_candidate(2, "none", 2), "measured", "20261128-054008-aaaa", 21.8, 734.4, 4, None, 396 * MIB,
               started_at=1000.0, measured_at=1020.0, ended_at=1021.0, steps_ms=[21.8, 21.8, 21.9]),
        Result(_candidate(2, "cpu", 2), "measured", "20261128-054029-bbbb", 21.6, 741.7, 4, None, 396 * MIB,
               started_at=1021.0, measured_at=1041.0, ended_at=1042.0, steps_ms=[21.6, 21.6, 21.7]),
        Result(_candidate(3, "none", 2), "measured", "20261128-054050-cccc", 52.4, 76.3, 4, None, 410 * MIB,
               started_at=1042.0, measured_at=1062.0, ended_at=1063.0, steps_ms=[52.4, 52.4, 52.5]),
    ]
    spec = TrialSpec(id=trial_id, name="tiny", script="tiny_ds.py", script_args=["--deepspeed_config", "{ds_config}"],
                     base_preset=preset_to_mapping(load_preset("cpu-demo")), candidates=[r.candidate for r in results],
                     world_size=2, warmup=2, steps=5)
    folder = TrialFolder(trial_id)
    folder.create(spec)
    folder.write_state(TrialState(trial_id, state="finished", results=results, started_at=999.0, ended_at=1064.0))
    window = TrialResults(_app_ctx(), trial_id)
    qtbot.addWidget(window)
    qtbot.waitUntil(lambda: window.view is not None, timeout=20000)
    texts = sorted(label.toPlainText() for label in window.labels)
    assert texts == [" zero2-none-mb2\n zero2-cpu-mb2", " zero3-none-mb2"]
