"""The Launch page: fields -> ctx.launch_choice and the command preview, what blocks a launch, secrets kept off disk,
the interpreter probe, the memory check's confirmation, and a real CPU demo run launched from the page."""

from __future__ import annotations

import importlib.metadata
import importlib.util
import shlex
import shutil
import subprocess
import sys
from pathlib import Path
from typing import NamedTuple

import pytest
from support.probe_fixture import probe_cache  # noqa: F401 (a fixture)

pytest.importorskip("PySide6")

from PySide6.QtCore import QSettings, Qt  # noqa: E402
from PySide6.QtWidgets import QMessageBox  # noqa: E402

from traindeck.backend.config.messages import Message  # noqa: E402
from traindeck.backend.core import paths  # noqa: E402
from traindeck.backend.presets import load_preset  # noqa: E402
from traindeck.backend.runs.record.run_store import RunRecord, RunStore  # noqa: E402

SECRET = "hf_Sup3rSecretTokenValue"
URL_PASSWORD = "pr0xyPassw0rd"


@pytest.fixture
def make_page(qtbot, traindeck_home, probe_cache):  # noqa: F811
    from traindeck.gui.context import AppContext
    from traindeck.gui.pages.launch import LaunchPage

    shutil.copytree(probe_cache, traindeck_home / "cache" / "probes")
    contexts = []

    def make(demo: bool = False, preset: str | None = "cpu-demo"):
        settings = QSettings(str(paths.config_dir() / "window.ini"), QSettings.Format.IniFormat)
        ctx = AppContext(demo=demo, settings=settings)
        if preset:
            ctx.draft.replace(load_preset(preset), preset)
        contexts.append(ctx)
        page = LaunchPage(ctx)
        qtbot.addWidget(page)
        page.resize(1100, 800)
        return page

    yield make
    for ctx in contexts:
        ctx.tasks.wait(30000)


def _wait_plan(qtbot, page, timeout=15000):
    qtbot.waitUntil(lambda: page.command_box.plan is not None and not page._preview_timer.isActive(),
                    timeout=timeout)
    return page.command_box.plan


class Finished(NamedTuple):
    record: RunRecord
    log: str


def _succeeded(qtbot, run_id: str) -> Finished:
    """The run launched from the page once it ended, and its log; it must have succeeded. The Qt loop runs while it
    waits (the page's polls go on); a run still going after 400 s is stopped, so no test leaves one behind."""
    with RunStore() as store:
        def finished() -> RunRecord | None:
            record = store.get_run(run_id)
            return record if record is not None and record.finished else None

        try:
            qtbot.waitUntil(lambda: finished() is not None, timeout=400000)
        finally:
            if finished() is None:
                from traindeck.backend.runs.control.lifecycle import stop_run

                stop_run(store, run_id, grace_s=2.0)
        record = finished()
    assert record is not None
    log = Path(record.run_dir, "output.log").read_text(errors="replace")
    assert record.state == "succeeded", (record.diagnosis, log[-3000:])
    return Finished(record, log)


def _script(tmp_path: Path, text: str = "print('hi')\n") -> Path:
    script = tmp_path / "work" / "train.py"
    script.parent.mkdir(exist_ok=True)
    script.write_text(text)
    return script


def test_fields_set_the_launch_choice_and_the_command_preview(qtbot, make_page, tmp_path, heavy_imports):
    page = make_page(preset="cpu-demo")
    script = _script(tmp_path)
    with qtbot.waitSignal(page.ctx.launch_choice_changed):
        page.script_box.script.setText(str(script))
    page.script_box.args.setText("--lr 1e-4 --title 'two words'")
    page.script_box.cwd.setText(str(tmp_path))
    page.runner.interpreter.set_python(sys.executable)
    page.runner.launcher.setCurrentIndex(page.runner.launcher.findData("python"))
    page.runner.nproc.setValue(1)
    page.env_box.env.set_env({"FOO": "bar"})  # replaces the demo's DS_ACCELERATOR (nothing was chosen before)

    choice = page.ctx.launch_choice
    assert (choice.script, choice.cwd, choice.python, choice.launcher, choice.nproc) == (
        str(script), str(tmp_path), sys.executable, "python", 1)
    assert choice.script_args == ["--lr", "1e-4", "--title", "two words"] and choice.env == {"FOO": "bar"}
    # One framed word per argument, as the script gets them ("two words" is one argument).
    assert "gets 4 arguments" in page.script_box.argv_label.text()
    # Shown with non-breaking hyphens, so a line never breaks inside one ("--" / "lr"): Qt breaks after a hyphen
    # whatever CSS says; the label is not selectable, as copying it would copy those hyphens.
    shown = page.script_box.argv_label.text().replace("\u2011", "-")
    assert all(f"&nbsp;{word}&nbsp;</code>" in shown for word in ("--lr", "1e-4", "two words"))
    argv_label = page.script_box.argv_label
    assert "--lr" not in argv_label.text() and "\u2011\u2011lr" in argv_label.text()
    assert not argv_label.textInteractionFlags() & Qt.TextInteractionFlag.TextSelectableByMouse

    plan = _wait_plan(qtbot, page)
    assert plan.ok, plan.errors
    assert page.command_box.command.toPlainText() == shlex.join(
        [sys.executable, str(script), "--lr", "1e-4", "--title", "two words"])
    assert "FOO=bar" in page.command_box.command_env.text()

    # Back to the preset's launcher (deepspeed, 2 processes): the command follows, {ds_config} included.
    page.runner.launcher.setCurrentIndex(0)
    page.runner.nproc.setValue(0)
    page.script_box.args.setText("--deepspeed_config {ds_config}")
    plan = _wait_plan(qtbot, page)
    text = page.command_box.command.toPlainText()
    assert "-m deepspeed.launcher.runner --num_gpus 2 --master_port FREE_PORT" in text
    assert str(paths.runs_dir() / "RUN_ID" / "ds_config.json") in text
    assert "{ds_config} becomes" in page.script_box.argv_label.text()
    assert page.launch_bar.launch_button.isEnabled()

    # An unbalanced quote: said beside the field, and nothing can be launched.
    page.script_box.args.setText("--title 'unfinished")
    assert "Arguments: No closing quotation" in page.script_box.args_note.plain_text()
    assert not page.launch_bar.launch_button.isEnabled()
    assert heavy_imports == []  # the page never imports the training stack


def test_draft_errors_block_launch_and_point_to_configure(qtbot, make_page, tmp_path):
    page = make_page(demo=True)
    _wait_plan(qtbot, page)
    assert page.launch_bar.launch_button.isEnabled()
    assert "cpu-demo" in page.banner.preset_label.text() and "unsaved" not in page.banner.preset_label.text()

    with qtbot.assertNotEmitted(page.ctx.launch_choice_changed):  # the preset is not the Launch page's choice
        page.ctx.draft.mark_edited()
    assert "unsaved changes" in page.banner.preset_label.text()
    page.ctx.draft.set_messages([Message("error", "zero_optimization.stage", "must be one of 0, 1, 2, 3, got 4"),
                                 Message("warning", "steps_per_print", "prints every step")])
    assert not page.launch_bar.launch_button.isEnabled()
    shown = page.banner.draft_errors.plain_text()
    assert "fix these on the Configure page" in shown and "zero_optimization.stage: must be one of" in shown
    assert "steps_per_print" not in shown  # warnings do not block
    page.launch()  # Ctrl+Enter does the same: refused, with the reason
    result = page.launch_bar.result
    assert "Not launched" in result.text() and "preset has errors" in result.text()
    assert result.text().count("preset has errors") == 1  # not again as "To launch: ..." below it

    with qtbot.waitSignal(page.ctx.navigate) as navigated:
        page.banner.preset_label.linkActivated.emit("configure")
    assert navigated.args == ["configure"]

    page.ctx.draft.set_messages([])
    assert page.launch_bar.launch_button.isEnabled() and page.banner.draft_errors.isHidden()
    assert "Not launched" not in result.text()  # the refusal's reasons are gone: so is the refusal


def test_secret_values_are_masked_and_never_written_to_settings(qtbot, make_page, tmp_path, traindeck_home):
    page = make_page()
    page.script_box.script.setText(str(_script(tmp_path)))
    page.env_box.env.set_env({})
    page.env_box.env.add_row("HF_TOKEN", SECRET)
    page.env_box.env.add_row("HTTP_PROXY", f"http://me:{URL_PASSWORD}@proxy:3128")
    page.env_box.env.add_row("MY_SETTING", "visible")
    assert page.env_box.env.is_masked("HF_TOKEN") and not page.env_box.env.is_masked("MY_SETTING")
    assert page.env_box.env.value_edit("HF_TOKEN").displayText() != SECRET
    assert page.ctx.launch_choice.env["HF_TOKEN"] == SECRET  # the run gets it
    plan = _wait_plan(qtbot, page)
    command_env = page.command_box.command_env.text()
    assert "HF_TOKEN=***" in command_env and SECRET not in command_env
    assert SECRET not in page.command_box.command.toPlainText() and plan.env["HF_TOKEN"] == SECRET

    # "NAME=value" pasted into the name cell is split.
    row = page.env_box.env.add_row("", "")
    name_edit = page.env_box.env.table.cellWidget(row, 0)
    name_edit.setText("WANDB_API_KEY=abc123456")
    name_edit.editingFinished.emit()
    env = page.env_box.env
    assert env.env()["WANDB_API_KEY"] == "abc123456" and env.is_masked("WANDB_API_KEY")

    page.shutdown()
    page.ctx.settings.sync()
    for root in (traindeck_home, tmp_path):
        for path in Path(root).rglob("*"):
            if path.is_file():
                data = path.read_bytes()
                assert SECRET.encode() not in data and URL_PASSWORD.encode() not in data, path
                assert b"abc123456" not in data, path

    # Reopened: the names come back, the secret values do not; plain values do.
    again = make_page()
    assert again.env_box.env.env() == {"HF_TOKEN": "", "HTTP_PROXY": "", "MY_SETTING": "visible",
                                       "WANDB_API_KEY": ""}
    # The last script is remembered.
    assert again.script_box.script.text() == str(tmp_path / "work" / "train.py")


def test_interpreter_probe_shows_versions_and_missing_ones(qtbot, make_page, tmp_path):
    page = make_page(demo=True)
    picker = page.runner.interpreter
    qtbot.waitUntil(lambda: picker.environment is not None, timeout=30000)
    picker.check_button.click()  # a real probe, not the cached answer
    qtbot.waitUntil(lambda: picker.environment is not None and not picker.environment.from_cache, timeout=60000)
    text = picker.status_text()
    assert "Python {}.{}.{}".format(*sys.version_info[:3]) in text
    for name in ("torch", "accelerate", "deepspeed"):
        assert f"{name} {importlib.metadata.version(name)}" in text

    # A real interpreter without torch (a bare venv): what is missing is said, and the launch is refused.
    bare = tmp_path / "bare-venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(bare)], check=True)
    picker.set_python(str(bare / "bin" / "python"))
    qtbot.waitUntil(lambda: picker.environment is not None, timeout=30000)
    text = picker.status_text()
    assert "torch: not installed" in text and "deepspeed: not installed" in text
    # The preview in flight when the interpreter changed may land first: wait for the one built for the bare venv.
    qtbot.waitUntil(lambda: page.command_box.plan is not None
                    and any("torch is not installed" in e for e in page.command_box.plan.errors),
                    timeout=15000)
    assert not page.launch_bar.launch_button.isEnabled()

    missing = tmp_path / "nowhere" / "python"
    picker.set_python(str(missing))
    qtbot.waitUntil(lambda: picker.environment is not None, timeout=10000)
    assert f"Python interpreter not found: {missing}" in picker.status_text()
    qtbot.waitUntil(lambda: page.command_box.plan is not None
                    and any("interpreter not found" in e for e in page.command_box.plan.errors),
                    timeout=15000)
    assert not page.launch_bar.launch_button.isEnabled()


def test_memory_check_warns_and_asks_before_a_launch_that_does_not_fit(qtbot, make_page, tmp_path):
    page = make_page(demo=True)
    started = []
    page.ctx.run_started.connect(started.append)
    page.memory_box.model_size.setText("1.5Q")
    qtbot.waitUntil(lambda: "model size" in page.memory_box.memory_result.plain_text(), timeout=10000)
    assert page.memory_box.memory_result.items()[0][0] == "error"

    # Far beyond any workstation's RAM for ZeRO-2 with the optimizer on the CPU.
    page.memory_box.model_size.setText("1T")
    qtbot.waitUntil(lambda: page.memory_box.memory is not None, timeout=10000)
    shown = page.memory_box.memory_result.plain_text()
    assert "ZeRO-2 + optimizer offload (CPU)" in shown and "does not fit" in shown
    assert "host RAM" in shown and "OOM killer" in shown

    _wait_plan(qtbot, page)
    assert page.launch_bar.launch_button.isEnabled()  # a warning, not a block
    page.launch_bar.launch_button.click()
    box = page.findChild(QMessageBox, "memoryConfirm")
    assert box is not None and box.isVisible() and "OOM killer" in box.informativeText()
    box.button(QMessageBox.StandardButton.Cancel).click()
    assert "Not launched" in page.launch_bar.result.text()
    page.ctx.tasks.wait(10000)
    assert started == []
    assert not paths.runs_dir().exists() or not any(paths.runs_dir().iterdir())


def test_a_launch_that_fails_leaves_nothing_behind(qtbot, make_page, tmp_path):
    page = make_page(preset="single-process")
    script = _script(tmp_path)
    page.script_box.script.setText(str(script))
    page.script_box.args.setText("")
    page.runner.launcher.setCurrentIndex(page.runner.launcher.findData("python"))
    assert _wait_plan(qtbot, page).ok
    script.unlink()  # gone between the preview and the click
    page.launch()
    qtbot.waitUntil(lambda: not page.launch_bar.launching, timeout=20000)
    result = page.launch_bar.result.text()
    assert "Not launched" in result and "script not found" in result
    assert not any(paths.runs_dir().iterdir())
    with RunStore() as store:
        assert store.list_runs() == []


def test_demo_is_prefilled_for_the_cpu_demo_preset(qtbot, make_page):
    page = make_page(demo=True)
    choice = page.ctx.launch_choice
    assert choice.script == str(paths.resources_dir() / "demo" / "train_tiny.py")
    assert choice.script_args[:2] == ["--deepspeed_config", "{ds_config}"]
    assert choice.env == {} and choice.nproc is None and choice.launcher == ""
    plan = _wait_plan(qtbot, page)
    assert plan.ok, plan.errors
    assert plan.launcher == "deepspeed" and plan.nproc == 2
    # The CPU accelerator comes from the preset, shown beside the table and in the command's environment.
    assert plan.env["DS_ACCELERATOR"] == "cpu"
    assert "from the preset: DS_ACCELERATOR=cpu" in page.env_box.preset_env.text()
    assert not page.env_box.preset_env.isHidden()
    assert "DS_ACCELERATOR=cpu" in page.command_box.command_env.text()


def test_the_demo_leaves_nothing_in_the_saved_environment_after_a_switch_to_a_gpu_preset(qtbot, make_page,
                                                                                          monkeypatch):
    monkeypatch.delenv("DS_ACCELERATOR", raising=False)  # the plan inherits this process's environment
    page = make_page(demo=True)
    page.fill_demo()
    _wait_plan(qtbot, page)
    page.ctx.draft.replace(load_preset("zero2"), "zero2")
    plan = _wait_plan(qtbot, page)
    assert "DS_ACCELERATOR" not in plan.env
    page.shutdown()
    page._save_settings()
    page.ctx.settings.sync()
    saved = (paths.config_dir() / "window.ini").read_text()
    assert "launch" in saved and "DS_ACCELERATOR" not in saved
    # After a restart with the GPU preset: no CPU accelerator in the table or the plan.
    again = make_page(preset="zero2")
    assert again.env_box.env.env() == {}
    assert "DS_ACCELERATOR" not in _wait_plan(qtbot, again).env
    assert again.env_box.preset_env.isHidden()  # zero2 needs no variables of its own


def test_the_default_run_name_says_the_preset_and_a_typed_name_wins(qtbot, make_page):
    """Two demo runs from different presets get different names (shown in the empty name field, and queued as
    such); a typed name wins; a trial's name leaves the preset out (each candidate adds its own set-up)."""
    from traindeck.backend.queue.entries import QueueStore

    with QueueStore() as queue:
        queue.update_settings(paused=True)
    page = make_page(demo=True)
    box = page.script_box
    qtbot.waitUntil(lambda: box.name.placeholderText() == "train_tiny-cpu-demo", timeout=15000)
    assert page.run_name() == "train_tiny-cpu-demo" and page._order().trial_name == "train_tiny"
    names = []
    for preset in ("cpu-demo", "zero2"):
        page.ctx.draft.replace(load_preset(preset), preset)
        _wait_plan(qtbot, page)
        qtbot.waitUntil(lambda: page.launch_bar.queue_button.isEnabled(), timeout=15000)
        names.append(box.name.placeholderText())
        page.launch(queue=True)
        qtbot.waitUntil(lambda: f"Queued 1 run: {names[-1]}" in page.launch_bar.result.text(), timeout=60000)
    with QueueStore() as queue:
        entries = queue.waiting()
        assert [e.name for e in entries] == names == ["train_tiny-cpu-demo", "train_tiny-zero2"]
        for entry in entries:
            queue.remove(entry.run_id)
    box.name.setText("mine")
    assert page.run_name() == "mine" and page._order().trial_name == "mine"


def test_the_table_wins_over_the_preset_and_says_so(qtbot, make_page):
    page = make_page(demo=True)
    page.env_box.env.set_env({"DS_ACCELERATOR": "cuda"})
    plan = _wait_plan(qtbot, page)
    assert plan.env["DS_ACCELERATOR"] == "cuda"
    assert "DS_ACCELERATOR=cpu (the table's value is used)" in page.env_box.preset_env.text()


def test_a_cpu_accelerator_left_in_the_table_is_pointed_out_for_a_gpu_preset(qtbot, make_page):
    page = make_page(preset="zero2")
    page.env_box.env.set_env({"DS_ACCELERATOR": "cpu"})  # as an older traindeck's demo saved it
    note = page.env_box.preset_env
    assert not note.isHidden() and "runs DeepSpeed on the CPU, not the GPUs: remove it" in note.text()
    page.env_box.env.set_env({})
    assert note.isHidden()



def test_the_demo_arguments_follow_each_built_in_preset_and_typed_ones_stay(qtbot, make_page):
    """The demo filled under cpu-demo (DeepSpeed's launcher: `--deepspeed_config {ds_config}`), then each built-in
    preset chosen: the command has no placeholder left, and no error about one (an accelerate preset without a
    DeepSpeed config has no ds_config.json to put there)."""
    from traindeck.backend.presets import BUILTIN_NAMES

    page = make_page(demo=True)
    _wait_plan(qtbot, page)
    for name in BUILTIN_NAMES:
        page.ctx.draft.replace(load_preset(name), name)
        plan = _wait_plan(qtbot, page)
        assert not any("{ds_config}" in word for word in plan.argv), (name, plan.argv)
        assert not any("{ds_config}" in error for error in plan.errors), (name, plan.errors)
        deepspeed = load_preset(name).uses_deepspeed()
        assert ("--deepspeed_config" in plan.argv) == deepspeed, (name, plan.argv)
    # Arguments the user typed are theirs: a preset chosen afterwards leaves them as they are.
    page.script_box.args.setText("--steps 7")
    page.ctx.draft.replace(load_preset("cpu-demo"), "cpu-demo")
    assert page.script_box.args.text() == "--steps 7"


@pytest.mark.launch
@pytest.mark.slow
@pytest.mark.train
@pytest.mark.skipif(importlib.util.find_spec("accelerate") is None, reason="needs the train extra")
def test_the_demo_chosen_under_cpu_demo_runs_under_an_accelerate_preset(qtbot, make_page, heavy_imports):
    page = make_page(demo=True)
    page.ctx.draft.replace(load_preset("single-process"), "single-process")
    # The demo's own arguments for the preset, made short: later options win in argparse.
    page.script_box.args.setText(page.script_box.args.text() + " --steps 3 --step-time 0 --log-every 1")
    plan = _wait_plan(qtbot, page)
    assert plan.ok, plan.errors
    assert plan.launcher == "accelerate" and "--deepspeed_config" not in plan.argv
    with qtbot.waitSignal(page.ctx.run_started, timeout=120000) as started:
        page.launch()
    (run_id,) = started.args
    log = _succeeded(qtbot, run_id).log
    assert "train_tiny: mode=accelerate" in log and "train_tiny: done" in log
    assert heavy_imports == []


def test_without_a_preset_the_demo_runs_with_plain_python(qtbot, make_page):
    page = make_page(preset=None)
    assert page.ctx.launch_choice.script_args[:1] == ["--steps"]  # no {ds_config} without a DeepSpeed config
    assert "No preset" in page.banner.preset_label.text()
    assert page.runner.launcher.itemText(0) == "python (no preset)"
    plan = _wait_plan(qtbot, page)
    assert plan.ok and plan.launcher == "python" and plan.nproc == 1
    page.memory_box.model_size.setText("1B")
    qtbot.waitUntil(lambda: "choose a preset" in page.memory_box.memory_result.plain_text(), timeout=5000)


@pytest.mark.launch
@pytest.mark.slow
@pytest.mark.train
@pytest.mark.skipif(importlib.util.find_spec("deepspeed") is None, reason="needs the train extra")
def test_ctrl_enter_launches_the_cpu_demo_and_it_succeeds(qtbot, make_page, heavy_imports):
    page = make_page(demo=True)
    page.script_box.args.setText(
        "--deepspeed_config {ds_config} --steps 3 --batch-size 4 --step-time 0 --log-every 1")
    plan = _wait_plan(qtbot, page)
    assert plan.ok, plan.errors
    page.show()
    qtbot.waitExposed(page)
    page.activateWindow()
    page.script_box.args.setFocus()
    qtbot.waitUntil(page.script_box.args.hasFocus)
    with qtbot.waitSignal(page.ctx.run_started, timeout=120000) as started:
        qtbot.keyClick(page.script_box.args, Qt.Key.Key_Return, Qt.KeyboardModifier.ControlModifier)
    (run_id,) = started.args
    assert f"Run {run_id} started" in page.launch_bar.result.text()
    done = _succeeded(qtbot, run_id)
    assert (done.record.name, done.record.preset, done.record.launcher) == ("train_tiny-cpu-demo", "cpu-demo",
                                                                           "deepspeed")
    assert "train_tiny: mode=deepspeed world_size=2" in done.log and "train_tiny: done" in done.log
    qtbot.waitUntil(lambda: f"Run {run_id}" not in page.launch_bar.result.text(), timeout=15000)  # it ended
    assert heavy_imports == []


def test_a_sweep_on_the_page_queues_one_named_run_per_value(qtbot, make_page, tmp_path):
    """The sweep editor's Launch queues through the same backend as `run --sweep`: one queued run per value, named
    after it, with its own arguments (the queue is paused, so nothing starts here)."""
    from traindeck.backend.queue.entries import QueueStore

    with QueueStore() as queue:
        queue.update_settings(paused=True)
    page = make_page(preset=None)
    script = _script(tmp_path)
    page.script_box.script.setText(str(script))
    page.script_box.name.setText("tiny")
    page.script_box.args.setText("--steps 5 --lr 0.1")
    page.sweep.rows.setPlainText("steps = 2, 3")
    qtbot.waitUntil(lambda: page.sweep.active and len(page.sweep.points) == 2, timeout=15000)
    assert _wait_plan(qtbot, page).ok
    qtbot.waitUntil(lambda: page.launch_bar.launch_button.isEnabled(), timeout=15000)
    page.launch()
    qtbot.waitUntil(lambda: not page.launch_bar.launching, timeout=60000)
    result = page.launch_bar.result.text()
    assert "Queued 2 runs: tiny-steps=2, tiny-steps=3" in result, result
    with QueueStore() as queue:
        entries = queue.waiting()
        assert [e.name for e in entries] == ["tiny-steps=2", "tiny-steps=3"]
        assert [e.launch.script_args for e in entries] == [["--steps", "2", "--lr", "0.1"],
                                                           ["--steps", "3", "--lr", "0.1"]]
        assert all(e.launch.script == str(script) for e in entries)
    # The sweep stays in its box, the button still says what it does, and the same sweep again (Ctrl+2, then
    # Ctrl+Enter) is asked about, Cancel first: nothing is queued twice unseen.
    assert page.sweep.rows.toPlainText() == "steps = 2, 3" and page.launch_bar.launch_button.text() == "Queue 2 runs"
    page.launch()
    again = page.findChild(QMessageBox, "sweepAgain")
    assert again is not None and again.isVisible() and again.defaultButton() is again.button(
        QMessageBox.StandardButton.Cancel)
    assert again.property("yes").text() == "Queue 2 runs again"
    again.button(QMessageBox.StandardButton.Cancel).click()
    assert "Not queued again" in page.launch_bar.result.text()
    page.ctx.tasks.wait(10000)
    with QueueStore() as queue:
        assert len(queue.waiting()) == 2
    # An edited sweep is another one: queued without a question.
    page.sweep.rows.setPlainText("steps = 4")
    qtbot.waitUntil(lambda: page.sweep.active and len(page.sweep.points) == 1, timeout=15000)
    qtbot.waitUntil(lambda: page.launch_bar.launch_button.isEnabled(), timeout=15000)
    page.launch()
    qtbot.waitUntil(lambda: "Queued 1 run: tiny-steps=4" in page.launch_bar.result.text(), timeout=60000)
    with QueueStore() as queue:
        entries = queue.waiting()
        assert len(entries) == 3
        for entry in entries:
            queue.remove(entry.run_id)


def test_queue_puts_one_run_in_the_queue_for_later(qtbot, make_page, tmp_path):
    """Without a sweep, Queue (Ctrl+Shift+Enter) queues the run as it is instead of starting it: "queue them for
    the night" with one run as well as with a sweep. With a sweep the button hides: Launch queues then."""
    from traindeck.backend.queue.entries import QueueStore

    with QueueStore() as queue:
        queue.update_settings(paused=True)
    page = make_page(preset=None)
    page.show()
    qtbot.waitExposed(page)
    script = _script(tmp_path)
    page.script_box.script.setText(str(script))
    page.script_box.name.setText("overnight")
    page.script_box.args.setText("--steps 5")
    assert _wait_plan(qtbot, page).ok
    qtbot.waitUntil(lambda: page.launch_bar.queue_button.isEnabled(), timeout=15000)
    assert page.launch_bar.queue_button.isVisible() and page.launch_bar.launch_button.text() == "Launch"
    qtbot.keyClick(page.script_box.args, Qt.Key.Key_Return,
                   Qt.KeyboardModifier.ControlModifier | Qt.KeyboardModifier.ShiftModifier)
    qtbot.waitUntil(lambda: "Queued 1 run: overnight" in page.launch_bar.result.text(), timeout=60000)
    with QueueStore() as queue:
        entries = queue.waiting()
        assert [(e.name, e.launch.script, e.launch.script_args) for e in entries] == [
            ("overnight", str(script), ["--steps", "5"])]
        queue.remove(entries[0].run_id)
    # The line is about the preset it was queued with: another preset ends it.
    page.ctx.draft.replace(load_preset("cpu-demo"), "cpu-demo")
    assert "Queued" not in page.launch_bar.result.text() and "Queued" not in page.launch_bar.result.toolTip()
    page.sweep.rows.setPlainText("steps = 2, 3")
    qtbot.waitUntil(lambda: page.sweep.active, timeout=15000)
    qtbot.waitUntil(lambda: not page.launch_bar.queue_button.isVisible(), timeout=15000)


def test_a_long_reason_beside_the_buttons_is_cut_to_two_rows_and_whole_in_the_tooltip(qtbot, make_page):
    page = make_page(preset=None)
    page.resize(1200, 900)
    page.show()
    qtbot.waitExposed(page)
    bar = page.launch_bar
    bar.set_field_problems(["short reason"])
    short = bar.sizeHint().height()
    reason = "a reason " * 120 + "ending here"
    bar.set_field_problems([reason])
    rows = bar.result.fontMetrics().lineSpacing()
    assert bar.sizeHint().height() <= short + 2 * rows + 6  # the page does not reflow around it
    assert bar.heightForWidth(bar.width()) <= short + 2 * rows + 6
    assert "ending here" not in bar.result.text() and "…" in bar.result.text()
    assert reason in bar.result.toolTip()


def test_a_module_picked_on_the_page_is_previewed_with_m_and_queued_as_a_module(qtbot, make_page, tmp_path):
    """Module (-m), chosen from the keyboard beside the field: no Browse button, the preview runs `python -m`, Queue
    keeps the module (not a file path) with the queued run, and the choice is remembered for the next window."""
    from traindeck.backend.queue.entries import QueueStore

    with QueueStore() as queue:
        queue.update_settings(paused=True)
    page = make_page(preset=None)
    page.show()
    qtbot.waitExposed(page)
    box = page.script_box
    assert "axolotl.cli.train" in box.entry.toolTip() and "llamafactory-cli train config.yaml" in box.entry.toolTip()
    box.script.line.setFocus(Qt.FocusReason.TabFocusReason)
    qtbot.keyClick(box.script.line, Qt.Key.Key_Backtab)  # the choice comes just before the field
    qtbot.waitUntil(lambda: box.entry.hasFocus(), timeout=5000)
    qtbot.keyClick(box.entry, Qt.Key.Key_Down)
    assert box.entry_choice() == "module" and not box.script.button.isVisible()
    box.script.setText("tinypkg.train")
    box.args.setText("--steps 2")
    box.cwd.setText(str(tmp_path))
    page.runner.launcher.setCurrentIndex(page.runner.launcher.findData("python"))
    plan = _wait_plan(qtbot, page)
    assert plan.entry == "module" and plan.argv[1:] == ["-m", "tinypkg.train", "--steps", "2"], plan.argv
    assert "-m tinypkg.train --steps 2" in page.command_box.command.toPlainText()
    assert page.ctx.launch_choice.entry == "module" and box.run_name() == "train"
    qtbot.waitUntil(lambda: page.launch_bar.queue_button.isEnabled(), timeout=15000)
    page.launch(queue=True)
    qtbot.waitUntil(lambda: "Queued 1 run: train" in page.launch_bar.result.text(), timeout=60000)
    with QueueStore() as queue:
        entries = queue.waiting()
        assert [(e.name, e.launch.entry, e.launch.script, e.launch.script_args, e.launch.cwd) for e in entries] == [
            ("train", "module", "tinypkg.train", ["--steps", "2"], str(tmp_path))]
        queue.remove(entries[0].run_id)
    # Another entry mode: the queued line was about the module, so it goes.
    box.entry.setCurrentIndex(box.entry.findData("command"))
    assert "Queued" not in page.launch_bar.result.text()
    box.entry.setCurrentIndex(box.entry.findData("module"))
    page._save_timer.timeout.emit()  # what the page does a moment after a change
    again = make_page(preset=None).script_box
    assert (again.entry_choice(), again.script.text(), again.script.button.isHidden()) == (
        "module", "tinypkg.train", True)


@pytest.mark.launch
def test_the_stop_on_nan_box_stops_a_run_launched_from_the_page(qtbot, make_page, tmp_path):
    """Ticked, the box is `--stop-on-nan` for the run launched from the page: a loss printed as NaN ends it
    "stopped: loss became NaN at step 3"; the choice is remembered for the next window."""
    from support.runhelp import SCRIPTS, wait_finished

    page = make_page(preset=None)
    page.script_box.script.setText(str(SCRIPTS / "queue_job.py"))
    page.script_box.args.setText("--steps 600 --step-time 0.1 --nan-at 3")
    page.alert_settings.stop_on_nan.setChecked(True)
    assert _wait_plan(qtbot, page).ok
    with qtbot.waitSignal(page.ctx.run_started, timeout=60000) as started:
        page.launch()
    done = wait_finished(started.args[0], 120)
    assert done.state == "stopped", (done.state, done.diagnosis)
    assert done.diagnosis is not None and done.diagnosis["summary"] == "stopped: loss became NaN at step 3"
    page._save_timer.timeout.emit()  # what the page does a moment after a change
    assert make_page(preset=None).alert_settings.stop_on_nan.isChecked()


def test_estimate_use_this_carries_the_model_to_the_memory_check(qtbot, make_page):
    from traindeck.gui.pages.estimate import EstimatePage

    page = make_page()
    ctx = page.ctx
    estimate = EstimatePage(ctx)
    qtbot.addWidget(estimate)
    qtbot.waitUntil(lambda: estimate.detection_finished, timeout=20000)
    inputs = estimate.inputs
    for edit, text in ((inputs.params, "1.3B"), (inputs.heads, "16"), (inputs.gpu_mem, "24"),
                       (inputs.host_mem, "64")):
        edit.setText(text)
    inputs.gpus_per_node.setValue(1)
    inputs.micro_batch.setValue(1)  # the draft's cpu-demo says 4: in its fp32 nothing fits one 24 GiB GPU
    estimate.recompute()
    qtbot.waitUntil(lambda: estimate.estimate is not None and estimate.estimate.shape.num_heads == 16
                    and estimate.advice.use_button.isEnabled(), timeout=10000)
    assert page.memory_box.model_size.text() != "1.3B"
    with qtbot.waitSignal(ctx.navigate, timeout=5000):
        qtbot.mouseClick(estimate.advice.use_button, Qt.MouseButton.LeftButton)
    assert page.memory_box.model_size.text() == "1.3B"
    qtbot.waitUntil(lambda: page.memory_box.memory is not None, timeout=15000)
    check = page.memory_box.memory
    # The estimate's own shape (16 heads as typed there) under the advised preset, which Launch now has.
    assert check.shape == estimate.estimate.shape and check.shape.num_heads == 16
    assert ctx.draft.preset.name == "zero2-offload-advised"
    assert check.row.label == estimate.estimate.advice.row.label
    assert "1.30B parameters" in page.memory_box.memory_result.plain_text()
    # Said as Estimate's, with the preset it goes with, and not saved as a size the user typed.
    origin = page.memory_box.origin
    assert not origin.isHidden() and "model: <b>1.3B</b> from Estimate with the preset " in origin.text()
    page._save_timer.timeout.emit()
    assert ctx.settings.value("launch/model_size", "") != "1.3B"
    estimate.shutdown()
    # The window builds a page when it is first shown: a Launch page built after "Use this" has the model too.
    from traindeck.gui.pages.launch import LaunchPage

    later = LaunchPage(ctx)
    qtbot.addWidget(later)
    assert later.memory_box.model_size.text() == "1.3B"
    qtbot.waitUntil(lambda: later.memory_box.memory is not None, timeout=15000)
    assert later.memory_box.memory.shape.num_heads == 16
    later.shutdown()

    # Another preset (the 75k-parameter demo): the 1.3B model was estimated for the advised preset, so it goes at
    # once, with its check; the page says why; nothing asks before a launch, and no estimate goes with the run.
    ctx.draft.replace(load_preset("cpu-demo"), "cpu-demo")
    box = page.memory_box
    assert box.model_size.text() == "" and box.memory is None and box.check_for_run() is None
    assert "from Estimate (1.3B) was cleared" in origin.text() and not origin.isHidden()
    assert ctx.chosen_model is None
    fresh = LaunchPage(ctx)
    qtbot.addWidget(fresh)
    assert fresh.memory_box.model_size.text() != "1.3B"
    fresh.shutdown()
    _wait_plan(qtbot, page)
    qtbot.waitUntil(lambda: page.launch_bar.queue_button.isEnabled(), timeout=15000)
    assert not box.check_timer.isActive() and box.memory is None
    # Clear on the line: the field is the user's again, and Estimate's model is forgotten.
    ctx.draft.replace(load_preset("cpu-demo"), "cpu-demo")
    ctx.choose_model("1.3B", None)
    assert box.model_size.text() == "1.3B" and "from Estimate" in origin.text()
    origin.linkActivated.emit("clear")
    assert box.model_size.text() == "" and origin.isHidden() and ctx.chosen_model is None


def test_a_preset_change_takes_the_memory_check_shown_before_it_away(qtbot, make_page):
    """The check shown (and kept with a launched run) is the one for the preset as it is now: a check for the
    preset before is gone the moment the preset changes, not when the next one is done."""
    page = make_page(demo=True)
    box = page.memory_box
    box.model_size.setText("1T")
    qtbot.waitUntil(lambda: box.memory is not None, timeout=10000)
    assert box.check_for_run() is not None and "does not fit" in box.memory_result.plain_text()
    page.ctx.draft.replace(load_preset("single-process"), "single-process")
    assert box.memory is None and box.check_for_run() is None
    assert "does not fit" not in box.memory_result.plain_text()
    qtbot.waitUntil(lambda: box.memory is not None, timeout=10000)
    assert box.memory.row.label != "ZeRO-2 + optimizer offload (CPU)"


def test_the_memory_question_names_the_action_it_asks_about(qtbot, make_page, tmp_path):
    """Queueing a run that does not fit asks with "Queue anyway", not "Launch anyway"; Cancel says "Not queued"."""
    page = make_page(demo=True)
    page.memory_box.model_size.setText("1T")
    qtbot.waitUntil(lambda: page.memory_box.memory is not None, timeout=10000)
    _wait_plan(qtbot, page)
    qtbot.waitUntil(lambda: page.launch_bar.queue_button.isEnabled(), timeout=15000)
    page.launch(queue=True)
    box = page.findChild(QMessageBox, "memoryConfirm")
    assert box is not None and box.isVisible()
    assert [b.text() for b in box.buttons() if box.buttonRole(b) == QMessageBox.ButtonRole.AcceptRole] == [
        "Queue anyway"]
    box.button(QMessageBox.StandardButton.Cancel).click()
    assert "Not queued" in page.launch_bar.result.text()


def _ring_contrast(before, after, inner) -> tuple[int, float]:
    """How many pixels of the band around a control changed when it took focus, and the weakest contrast among
    the strongest perimeter's worth of them (a ring all around reads at that contrast or better)."""
    from traindeck.gui.theme import contrast

    changed = []
    for y in range(before.height()):
        for x in range(before.width()):
            if inner.contains(x, y):
                continue  # inside the control: its text cursor, not a focus cue
            a, b = before.pixelColor(x, y), after.pixelColor(x, y)
            if a != b:
                changed.append(contrast(b, a))
    perimeter = 2 * (inner.width() + inner.height())
    changed.sort(reverse=True)
    return len(changed), (changed[perimeter - 1] if len(changed) >= perimeter else 0.0)


@pytest.mark.parametrize("theme", ["light", "dark"])
def test_keyboard_focus_is_visible_on_every_control(qtbot, make_page, qapp, theme, tmp_path):
    from PySide6.QtCore import QRect
    from PySide6.QtGui import QPalette
    from PySide6.QtWidgets import QAbstractSpinBox, QApplication, QComboBox

    from traindeck.gui.theme import apply_theme

    saved = QPalette(qapp.palette())
    try:
        apply_theme(qapp, theme)
        page = make_page()
        page.show()
        page.activateWindow()
        qtbot.waitActive(page)
        page.script_box.script.line.setFocus(Qt.FocusReason.TabFocusReason)
        qtbot.waitUntil(lambda: QApplication.focusWidget() is not None)
        seen, faint = [], []
        for _ in range(60):
            before_widget = QApplication.focusWidget()
            assert before_widget is not None, [type(w).__name__ for w in seen]
            qtbot.keyClick(before_widget, Qt.Key.Key_Tab)
            widget = QApplication.focusWidget()
            if widget is None or widget in seen:
                break
            seen.append(widget)
        assert len(seen) > 15, [type(w).__name__ for w in seen]
        for previous, widget in zip([seen[-1], *seen[:-1]], seen, strict=True):
            previous.setFocus(Qt.FocusReason.TabFocusReason)
            qtbot.keyClick(previous, Qt.Key.Key_Tab)  # by keyboard, as a person reaches it
            QApplication.processEvents()
            assert QApplication.focusWidget() is widget
            if isinstance(widget.parentWidget(), (QAbstractSpinBox, QComboBox)):
                widget = widget.parentWidget()  # a spin box's field: the spin box is the control
            top_left = widget.mapTo(page, widget.rect().topLeft())
            region = QRect(top_left, widget.size()).adjusted(-3, -3, 3, 3)
            after = page.grab(region).toImage()
            QApplication.focusWidget().clearFocus()  # the same place on screen (focusing may have scrolled it)
            QApplication.processEvents()
            before = page.grab(region).toImage()
            inner = QRect(3, 3, widget.width(), widget.height()).adjusted(3, 3, -3, -3)
            count, weakest = _ring_contrast(before, after, inner)
            if weakest < 3.0:
                after.save(str(tmp_path / f"{len(faint)}.png"))
                faint.append(f"{type(widget).__name__} {getattr(widget, 'text', lambda: '')()!r:.30}: "
                             f"{count} px changed, {weakest:.2f}:1")
        assert not faint, faint
    finally:
        qapp.setPalette(saved)


@pytest.mark.launch
def test_the_run_started_line_goes_when_the_run_ends_or_another_choice_is_made(qtbot, make_page):
    from support.runhelp import SCRIPTS, wait_finished

    from traindeck.backend.runs.control.lifecycle import stop_run

    page = make_page(preset=None)
    bar = page.launch_bar
    page.script_box.script.setText(str(SCRIPTS / "queue_job.py"))
    page.script_box.args.setText("--steps 3 --step-time 0.05")
    assert _wait_plan(qtbot, page).ok
    with qtbot.waitSignal(page.ctx.run_started, timeout=60000) as started:
        page.launch()
    run_id = started.args[0]
    assert f"Run {run_id} started" in bar.result.text()
    assert wait_finished(run_id, 120).state == "succeeded"
    qtbot.waitUntil(lambda: f"Run {run_id}" not in bar.result.text(), timeout=15000)

    # A long run: its line goes as soon as another preset, or another script, is chosen.
    page.script_box.args.setText("--steps 600 --step-time 0.1")
    for choose in (lambda: page.ctx.draft.replace(load_preset("single-process"), "single-process"),
                   lambda: page.script_box.script.setText(str(SCRIPTS / "behave.py"))):
        page.script_box.script.setText(str(SCRIPTS / "queue_job.py"))
        assert _wait_plan(qtbot, page).ok
        with qtbot.waitSignal(page.ctx.run_started, timeout=60000) as started:
            page.launch()
        run_id = started.args[0]
        try:
            assert f"Run {run_id} started" in bar.result.text()
            choose()
            assert f"Run {run_id}" not in bar.result.text()
        finally:
            store = RunStore()
            try:
                stop_run(store, run_id, grace_s=2.0)
            finally:
                store.close()
        wait_finished(run_id, 60)


def test_the_argument_frames_follow_a_theme_switch(qtbot, make_page, qapp):
    from PySide6.QtGui import QPalette

    from traindeck.gui.theme import apply_theme

    saved = QPalette(qapp.palette())
    try:
        apply_theme(qapp, "light")
        page = make_page()
        page.script_box.args.setText("--steps 3")
        light = qapp.palette().color(QPalette.ColorRole.AlternateBase).name()
        assert f"background:{light}" in page.script_box.argv_label.text()
        apply_theme(qapp, "dark")
        dark = qapp.palette().color(QPalette.ColorRole.AlternateBase).name()
        qtbot.waitUntil(lambda: f"background:{dark}" in page.script_box.argv_label.text(), timeout=3000)
    finally:
        qapp.setPalette(saved)


def test_an_fsdp_preset_the_interpreter_cannot_run_is_refused_on_the_page_before_launch(qtbot, make_page, tmp_path):
    from traindeck.backend.launch.builders import ACCELERATE_NO_DEVICE

    page = make_page(preset="fsdp-full-shard")
    page.script_box.script.setText(str(_script(tmp_path)))
    picker = page.runner.interpreter
    picker.set_python(sys.executable)
    qtbot.waitUntil(lambda: picker.environment is not None, timeout=30000)
    if picker.environment.cuda_available:
        pytest.skip("this interpreter's torch has CUDA: accelerate runs FSDP here")
    # The preview built before the probe answered may land first: wait for the one built with its answer.
    qtbot.waitUntil(lambda: page.command_box.plan is not None
                    and any(e.startswith("FSDP under accelerate needs CUDA") for e in page.command_box.plan.errors),
                    timeout=15000)
    (refusal,) = [e for e in page.command_box.plan.errors if e.startswith("FSDP under accelerate needs CUDA")]
    # Under the command, before any launch: accelerate's words and the torchrun route with the preset's sharding.
    assert ("error", refusal) in page.command_box.plan_messages.items()
    assert page.command_box.plan_messages.isVisibleTo(page)
    assert f'"{ACCELERATE_NO_DEVICE}"' in refusal and "--launcher torchrun --nproc 2" in refusal
    assert "fully_shard(module, reshard_after_forward=True, mp_policy=MixedPrecisionPolicy(" \
           "param_dtype=torch.bfloat16))" in refusal
    assert not page.launch_bar.launch_button.isEnabled()
    page.launch()  # Ctrl+Enter: refused with the same line, nothing started
    assert "Not launched" in page.launch_bar.result.text()
    assert "FSDP under accelerate needs CUDA" in page.launch_bar.result.text()
    with RunStore() as store:
        assert store.list_runs() == []


def test_python_as_a_command_previews_the_training_interpreter_and_deepspeeds_local_rank(qtbot, make_page, tmp_path):
    """Command mode, `python -c "print(1)"` under the preset's deepspeed launcher: the preview runs the interpreter
    chosen on the page (not the first python on PATH) and says so, and says that DeepSpeed's --local_rank=N stops
    it; the command itself is left as DeepSpeed runs it."""
    page = make_page(preset="cpu-demo")
    box = page.script_box
    box.set_entry("command")
    box.script.setText('python -c "print(1)"')
    box.args.setText("")  # the demo's own arguments are for its script
    box.cwd.setText(str(tmp_path))
    page.runner.interpreter.set_python(sys.executable)
    page.runner.launcher.setCurrentIndex(page.runner.launcher.findData("deepspeed"))
    qtbot.waitUntil(lambda: page.command_box.plan is not None and not page._preview_timer.isActive()
                    and page.command_box.plan.entry == "command" and page.command_box.plan.launcher == "deepspeed",
                    timeout=15000)
    plan = page.command_box.plan
    assert plan.argv[plan.argv.index("--no_python"):] == ["--no_python", sys.executable, "-c", "print(1)"], plan.argv
    assert page.command_box.command.toPlainText().endswith(f"--no_python {sys.executable} -c 'print(1)'")
    shown = [text for severity, text in page.command_box.plan_messages.items() if severity == "warning"]
    assert any(text.startswith(f"the command's python is the training interpreter {sys.executable}")
               for text in shown), shown
    assert any("puts --local_rank=N before the command's own arguments" in text
               and 'Python itself refuses it ("unknown option --local_rank=0")' in text for text in shown), shown
    assert page.command_box.plan_messages.isVisibleTo(page)


@pytest.mark.launch
def test_runs_of_one_preset_launched_from_the_page_one_after_another_are_numbered(qtbot, make_page):
    """The empty name field gives each run the default name, numbered when the store has it already (`-2`), for a
    run queued from the page and one launched from it alike; a typed name is taken as it is."""
    from support.runhelp import SCRIPTS, get, wait_finished

    from traindeck.backend.queue.entries import QueueStore

    with QueueStore() as queue:
        queue.update_settings(paused=True)
    page = make_page(preset="cpu-demo")
    page.script_box.script.setText(str(SCRIPTS / "queue_job.py"))
    page.script_box.args.setText("--steps 1 --step-time 0")
    assert _wait_plan(qtbot, page).ok
    assert page.script_box.name.placeholderText() == "queue_job-cpu-demo"
    launched = []
    for _ in range(2):
        with qtbot.waitSignal(page.ctx.run_started, timeout=60000) as started:
            page.launch()
        launched.append(started.args[0])
        wait_finished(launched[-1], 120)
        qtbot.waitUntil(lambda: page.launch_bar.launch_button.isEnabled(), timeout=15000)
    assert [get(r).name for r in launched] == ["queue_job-cpu-demo", "queue_job-cpu-demo-2"]
    page.launch(queue=True)
    qtbot.waitUntil(lambda: "Queued 1 run: queue_job-cpu-demo-3" in page.launch_bar.result.text(), timeout=60000)
    page.script_box.name.setText("mine")
    page.launch(queue=True)
    qtbot.waitUntil(lambda: "Queued 1 run: mine" in page.launch_bar.result.text(), timeout=60000)
    with QueueStore() as queue:
        assert [e.name for e in queue.waiting()] == ["queue_job-cpu-demo-3", "mine"]
        for entry in queue.waiting():
            queue.remove(entry.run_id)


def test_the_default_name_and_the_sweeps_names_are_numbered_as_the_launch_numbers_them(qtbot, make_page,
                                                                                     tmp_path):
    """A run named train-cpu-demo exists: the next one is launched as train-cpu-demo-2, so the name field and the
    sweep's summary say so, not the bare name the run will not get."""
    from traindeck.backend.runs.record.run_store import RunRecord

    with RunStore() as store:
        store.add_run(RunRecord(id="20260101-000000-aaaa", run_dir=str(tmp_path / "run"), created_at=1.0,
                                name="train-cpu-demo", state="succeeded"))
    page = make_page(preset="cpu-demo")
    page.script_box.fill(str(_script(tmp_path)), "--deepspeed_config {ds_config}")
    page.page_shown()
    qtbot.waitUntil(lambda: page.script_box.name.placeholderText() == "train-cpu-demo-2", timeout=10000)
    page.sweep.rows.setPlainText("lr = 1e-3, 3e-3")
    qtbot.waitUntil(lambda: "train-cpu-demo-2-lr=1e-3" in page.sweep.summary.text(), timeout=10000)
    assert page.run_name() == "train-cpu-demo-2"
    page.shutdown()
