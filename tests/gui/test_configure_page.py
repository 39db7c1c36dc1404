"""The Configure page: forms <-> ctx.draft both ways, checks as you type, presets kept through the real store under the
test's TRAINDECK_HOME, and the dialogs (the UI boundary) answered by monkeypatching their static calls."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import pytest
import yaml
from support.probe_fixture import probe_cache  # noqa: F401 (a fixture)

pytest.importorskip("PySide6")
pytest.importorskip("pytestqt")

from PySide6.QtCore import QSettings  # noqa: E402
from PySide6.QtWidgets import QApplication, QFileDialog, QInputDialog, QMessageBox  # noqa: E402

from traindeck.backend.config.messages import Message  # noqa: E402
from traindeck.backend.core import paths  # noqa: E402
from traindeck.backend.presets import Preset, load_preset, save_preset  # noqa: E402
from traindeck.gui.context import AppContext  # noqa: E402

Button = QMessageBox.StandardButton


@pytest.fixture
def page(qtbot, traindeck_home: Path):
    from traindeck.gui.pages.configure import ConfigurePage

    settings = QSettings(str(traindeck_home / "window.ini"), QSettings.Format.IniFormat)
    ctx = AppContext(settings=settings)
    ctx.draft.replace(load_preset("cpu-demo"), "cpu-demo")
    page = ConfigurePage(ctx)
    qtbot.addWidget(page)
    page.resize(1200, 800)
    page.show()
    qtbot.waitUntil(lambda: page.editor is not None)  # built right after the first paint
    wait_checked(qtbot, page)
    qtbot.waitUntil(lambda: "cpu-demo" in page.presets.names())
    yield page
    page.shutdown()
    ctx.tasks.wait(10000)
    QApplication.processEvents()  # results still queued reach the page while it exists, not the next test


def wait_checked(qtbot, page) -> None:
    """Until the debounced check of the latest edit has come back."""
    qtbot.waitUntil(lambda: not page.checks._timer.isActive() and not page.checks.findings._pending, timeout=10000)


def ds_form(page):
    return page.editor.forms["deepspeed"]


def never(*_args, **_kwargs):
    raise AssertionError("no dialog expected here")


def answer(monkeypatch, **static):
    """Patch QMessageBox/QInputDialog/QFileDialog static calls: name -> value (or a list of values in turn)."""
    owners = {"question": QMessageBox, "warning": QMessageBox, "information": QMessageBox, "getText": QInputDialog,
              "getOpenFileNames": QFileDialog, "getOpenFileName": QFileDialog, "getExistingDirectory": QFileDialog}
    asked: dict[str, list] = {}
    for name, value in static.items():
        values = list(value) if isinstance(value, list) else None

        def reply(*args, _name=name, _value=value, _values=values, **kwargs):
            asked.setdefault(_name, []).append(args)
            return _values.pop(0) if _values is not None else _value

        monkeypatch.setattr(owners[name], name, staticmethod(reply))
    return asked


# -------------------------------------------------------------------------------------------------- forms <-> draft


def test_form_edits_change_the_draft_and_loading_a_preset_updates_the_form(qtbot, page, monkeypatch):
    draft = page.ctx.draft
    zero = ds_form(page).child("zero_optimization")
    assert zero.editor("stage").currentText() == "2"
    zero.editor("stage").setCurrentText("3")
    assert draft.preset.deepspeed["zero_optimization"]["stage"] == 3 and draft.dirty
    batch = ds_form(page).editor("train_micro_batch_size_per_gpu")
    batch.selectAll()
    qtbot.keyClicks(batch, "8")
    assert draft.preset.deepspeed["train_micro_batch_size_per_gpu"] == 8
    page.editor.description.setText("")
    qtbot.keyClicks(page.editor.description, "mine")
    assert draft.preset.description == "mine"
    page.editor.launcher.setCurrentText("accelerate")
    assert draft.preset.launcher == "accelerate"
    assert "unsaved" in page.title_label.text()

    # Picking another preset in the list (changes discarded) shows its values.
    asked = answer(monkeypatch, question=Button.Discard)
    page.presets.setCurrentRow(page.presets.names().index("zero3-offload") + 1)  # + the "Built-in" heading
    assert asked["question"], "unsaved changes must be asked about"
    assert draft.saved_as == "zero3-offload" and not draft.dirty
    assert zero.editor("stage").currentText() == "3"
    assert page.editor.launcher.currentText() == "accelerate"
    acc = page.editor.forms["accelerate"]
    assert acc.editor("distributed_type").currentText() == "DEEPSPEED"
    assert page.editor.tabs.isTabVisible(page.editor.tabs.indexOf(page.editor.section_tabs["accelerate"]))
    assert page.ctx.settings.value("draft/preset") == "zero3-offload"

    # A change made elsewhere (another page) shows in the form too.
    draft.preset.deepspeed["zero_optimization"]["stage"] = 1
    draft.mark_edited()
    assert zero.editor("stage").currentText() == "1"


def test_an_invalid_value_shows_its_message_inline_and_in_the_list(qtbot, page):
    draft = page.ctx.draft
    assert not draft.errors()
    batch = ds_form(page).editor("train_micro_batch_size_per_gpu")
    batch.selectAll()
    qtbot.keyClicks(batch, "0")
    wait_checked(qtbot, page)
    assert draft.errors()
    inline = page.editor.note_text("deepspeed.train_micro_batch_size_per_gpu")
    assert "out of range" in inline
    assert "1 error" in page.checks.findings.header_text()
    assert any(m.path == "deepspeed.train_micro_batch_size_per_gpu" for m in page.checks.findings.messages())

    # Clicking the message goes to the field.
    page.editor.search.setText("zero")  # the search hides the field; jumping clears it
    item = page.checks.findings.list.item(0)
    page.checks.findings.list.itemClicked.emit(item)
    assert page.editor.search.text() == "" and batch.isVisibleTo(ds_form(page))
    assert QApplication.focusWidget() is batch or not page.isActiveWindow()

    # Text that is no number at all is an error too (the preset keeps its last value meanwhile).
    batch.selectAll()
    qtbot.keyClicks(batch, "abc")
    wait_checked(qtbot, page)
    assert draft.preset.deepspeed["train_micro_batch_size_per_gpu"] == 0
    assert any("expected" in m.message for m in draft.errors())
    # Issue 12: the same error showed twice beside the field, and the JSON preview silently kept the old value.
    inline = page.editor.note_text("deepspeed.train_micro_batch_size_per_gpu")
    assert inline.count("got 'abc'") == 1, inline
    assert page.checks.preview.not_applied.isVisible()
    assert "deepspeed.train_micro_batch_size_per_gpu" in page.checks.preview.not_applied.text()
    batch.selectAll()
    qtbot.keyClicks(batch, "4")
    wait_checked(qtbot, page)
    assert not draft.errors() and page.editor.note_text("deepspeed.train_micro_batch_size_per_gpu") == ""
    assert "No problems" in page.checks.findings.header_text()
    assert not page.checks.preview.not_applied.isVisible()


def test_the_message_list_is_as_tall_as_its_wrapped_warnings(qtbot, page):
    """Issue 12: the list was one line tall, the rest of each warning cut off."""
    long = ("zero_optimization.offload_optimizer: offloading the optimizer to the CPU with a single process "
            "gives no memory back to other ranks and slows every step down; remove it or raise the process count")
    messages = [Message("warning", "deepspeed.zero_optimization.offload_optimizer", long),
                Message("warning", "deepspeed.gradient_clipping", long)]
    findings = page.checks.findings
    findings.set_messages(messages)
    qtbot.waitUntil(lambda: findings.list.isVisible())
    line = findings.list.fontMetrics().lineSpacing()
    # Each message wraps to two lines or more at this width: the list shows them whole.
    assert findings.list.height() >= 4 * line, (findings.list.height(), line, findings.width())


def test_stage_switch_hides_stage_3_only_settings(qtbot, page):
    form = ds_form(page)
    zero = form.child("zero_optimization")
    stage3_only = zero.editor("stage3_max_live_parameters")
    nvme_path = zero.child("offload_optimizer").editor("nvme_path")
    assert not stage3_only.isVisibleTo(form)
    assert not zero.child("offload_param").isVisibleTo(form)
    zero.editor("stage").setCurrentText("3")
    assert stage3_only.isVisibleTo(form) and zero.child("offload_param").isVisibleTo(form)
    assert not nvme_path.isVisibleTo(form)  # offloading to the CPU: no NVMe settings
    zero.child("offload_optimizer").editor("device").setCurrentText("nvme")
    assert nvme_path.isVisibleTo(form)
    zero.editor("stage").setCurrentText("2")
    assert not stage3_only.isVisibleTo(form)
    page.editor.show_mode.setCurrentIndex(page.editor.show_mode.findData("all"))
    assert stage3_only.isVisibleTo(form)
    # Hidden keys stay in the preset: nothing the user wrote is dropped by hiding it.
    assert page.ctx.draft.preset.deepspeed["zero_optimization"]["offload_optimizer"]["device"] == "nvme"


# -------------------------------------------------------------------------------------------------- presets


def user_file(name: str) -> Path:
    return paths.presets_dir() / f"{name}.yaml"


def test_save_as_save_rename_delete_through_the_actions(qtbot, page, monkeypatch):
    draft = page.ctx.draft
    form = ds_form(page)
    form.child("zero_optimization").editor("stage").setCurrentText("1")

    # A built-in is read-only: Save asks for a new name (Save As).
    asked = answer(monkeypatch, getText=("my-demo", True), warning=never)
    page.action_save.trigger()
    assert asked["getText"]
    qtbot.waitUntil(lambda: draft.saved_as == "my-demo" and not draft.dirty)
    assert yaml.safe_load(user_file("my-demo").read_text())["deepspeed"]["zero_optimization"]["stage"] == 1
    assert load_preset("cpu-demo").deepspeed["zero_optimization"]["stage"] == 2  # the built-in is untouched
    qtbot.waitUntil(lambda: "my-demo" in page.presets.names())
    assert page.ctx.settings.value("draft/preset") == "my-demo"
    assert page.action_rename.isEnabled() and page.action_delete.isEnabled()

    # Now Save writes the user's preset in place, asking nothing.
    answer(monkeypatch, getText=never)
    form.child("zero_optimization").editor("stage").setCurrentText("2")
    page.action_save.trigger()
    qtbot.waitUntil(lambda: not draft.dirty)
    assert yaml.safe_load(user_file("my-demo").read_text())["deepspeed"]["zero_optimization"]["stage"] == 2

    # Save As under a name that exists asks before replacing it.
    save_preset(Preset(name="taken", launcher="python"))
    page.files.refresh()
    qtbot.waitUntil(lambda: "taken" in page.presets.names())
    asked = answer(monkeypatch, getText=("taken", True), question=Button.No)
    page.action_save_as.trigger()
    assert asked["question"] and yaml.safe_load(user_file("taken").read_text())["launcher"] == "python"

    # Rename moves the file.
    answer(monkeypatch, getText=("renamed", True), warning=never)
    page.action_rename.trigger()
    qtbot.waitUntil(lambda: draft.saved_as == "renamed")
    assert user_file("renamed").is_file() and not user_file("my-demo").exists()
    qtbot.waitUntil(lambda: "renamed" in page.presets.names() and "my-demo" not in page.presets.names())

    # Delete asks, then removes it and goes back to the default preset.
    asked = answer(monkeypatch, question=Button.Yes)
    page.action_delete.trigger()
    qtbot.waitUntil(lambda: not user_file("renamed").exists() and draft.saved_as == "cpu-demo")
    assert asked["question"]


def test_bad_names_are_refused_with_a_message_naming_the_problem(qtbot, page, monkeypatch):
    asked = answer(monkeypatch, getText=[("zero2", True), ("bad name!", True), ("good-name", True)],
                   warning=QMessageBox.StandardButton.Ok)
    page.action_save_as.trigger()
    warnings = [args[2] for args in asked["warning"]]
    assert "built-in" in warnings[0] and "cannot be a preset name" in warnings[1]
    qtbot.waitUntil(lambda: user_file("good-name").is_file())


def test_import_and_export_with_real_files(qtbot, page, monkeypatch, tmp_path: Path):
    ds = {"train_micro_batch_size_per_gpu": 2, "zero_optimization": {"stage": 3}}
    (tmp_path / "ds_config.json").write_text(json.dumps(ds))
    (tmp_path / "accelerate.yaml").write_text("compute_environment: LOCAL_MACHINE\ndistributed_type: DEEPSPEED\n"
                                              "num_processes: 2\ndeepspeed_config:\n  zero3_init_flag: true\n")
    files = [str(tmp_path / "accelerate.yaml"), str(tmp_path / "ds_config.json")]
    answer(monkeypatch, getOpenFileNames=(files, ""), getText=("imported-one", True), warning=never)
    page.action_import.trigger()
    draft = page.ctx.draft
    qtbot.waitUntil(lambda: draft.saved_as == "imported-one")
    assert user_file("imported-one").is_file()
    assert draft.preset.deepspeed == ds and draft.preset.launcher == "accelerate"
    assert ds_form(page).child("zero_optimization").editor("stage").currentText() == "3"

    out = tmp_path / "exported"
    out.mkdir()
    answer(monkeypatch, getExistingDirectory=str(out), question=never, warning=never)
    page.action_export.trigger()
    qtbot.waitUntil(lambda: (out / "ds_config.json").is_file() and (out / "accelerate_config.yaml").is_file())
    assert json.loads((out / "ds_config.json").read_text()) == ds
    exported = yaml.safe_load((out / "accelerate_config.yaml").read_text())
    assert exported["deepspeed_config"]["deepspeed_config_file"] == str(out / "ds_config.json")

    # Exporting again over the same files asks first.
    asked = answer(monkeypatch, getExistingDirectory=str(out), question=Button.No)
    page.action_export.trigger()
    assert asked["question"]


def test_export_writes_the_tools_file_and_the_preset_which_import_restores(qtbot, page, monkeypatch, tmp_path: Path):
    draft = page.ctx.draft  # cpu-demo: the deepspeed launcher, 2 processes, DS_ACCELERATOR=cpu
    said: list[str] = []
    page.ctx.status.connect(said.append)
    out = tmp_path / "shared"
    answer(monkeypatch, getExistingDirectory=str(out), question=never, warning=never)
    page.action_export.trigger()
    qtbot.waitUntil(lambda: any(s.startswith("Exported") for s in said))
    assert json.loads((out / "ds_config.json").read_text()) == load_preset("cpu-demo").deepspeed
    assert (out / "cpu-demo.traindeck.yaml").is_file()
    assert said[-1] == (f"Exported to {out}: ds_config.json (DeepSpeed's config), cpu-demo.traindeck.yaml (the "
                        "whole preset, for traindeck presets import)")

    answer(monkeypatch, getOpenFileNames=([str(out / "cpu-demo.traindeck.yaml")], ""), getText=("shared-demo", True),
           warning=never)
    page.action_import.trigger()
    qtbot.waitUntil(lambda: draft.saved_as == "shared-demo")
    back = load_preset("shared-demo")
    assert (back.launcher, back.num_processes, back.env) == ("deepspeed", 2, {"DS_ACCELERATOR": "cpu"})
    assert back.deepspeed == load_preset("cpu-demo").deepspeed


# -------------------------------------------------------------------------------------------------- guard


def test_unsaved_changes_are_guarded(qtbot, page, monkeypatch):
    draft = page.ctx.draft
    ds_form(page).child("zero_optimization").editor("stage").setCurrentText("1")

    # Cancel: stay on the edited preset, list selection included.
    asked = answer(monkeypatch, question=Button.Cancel)
    page.presets.setCurrentRow(page.presets.names().index("zero2") + 1)
    assert asked["question"] and draft.saved_as == "cpu-demo" and draft.dirty
    assert page.presets.currentItem().text() == "cpu-demo"
    assert page.confirm_close() is False

    # New also asks; Save on a built-in asks for a name, saves, then goes on.
    answer(monkeypatch, question=Button.Save, getText=("kept", True))
    page.action_new.trigger()
    qtbot.waitUntil(lambda: draft.saved_as is None and draft.preset.name.startswith("untitled"))
    assert yaml.safe_load(user_file("kept").read_text())["deepspeed"]["zero_optimization"]["stage"] == 1
    answer(monkeypatch, question=never)
    assert page.confirm_close() is True  # a fresh, unedited preset: nothing to ask

    # Closing with changes: Discard closes, Save (a user preset) writes at once.
    assert page.files.load_named("kept")
    ds_form(page).child("zero_optimization").editor("stage").setCurrentText("3")
    answer(monkeypatch, question=Button.Discard)
    assert page.confirm_close() is True
    answer(monkeypatch, question=Button.Save, getText=never)
    assert page.confirm_close() is True
    assert yaml.safe_load(user_file("kept").read_text())["deepspeed"]["zero_optimization"]["stage"] == 3
    assert not draft.dirty


def test_a_value_put_back_is_no_unsaved_change(qtbot, page, monkeypatch):
    """Issue 12: quitting asked to save a built-in preset whose edited value had been put back."""
    draft = page.ctx.draft
    stage = ds_form(page).child("zero_optimization").editor("stage")
    before = stage.currentText()
    stage.setCurrentText("1" if before != "1" else "3")
    assert draft.dirty
    stage.setCurrentText(before)
    assert not draft.dirty
    answer(monkeypatch, question=never)
    assert page.confirm_close() is True


def test_native_check_shows_what_the_tools_said(qtbot, page):
    checks = page.checks
    checks.show_native_result(["DeepSpeed (ds_config.json)"], [])
    assert checks.native_result.isVisible() and "DeepSpeed (ds_config.json) accept" in checks.native_result.text()
    said = Message("error", "deepspeed.zero_optimization.stage", "Input should be 0, 1, 2 or 3")
    checks.show_native_result(["DeepSpeed (ds_config.json)"], [said])
    assert "Input should be 0, 1, 2 or 3" in checks.native_result.text()


# -------------------------------------------------------------------------------------------------- paste / open


def test_paste_offers_the_repair_and_loads_an_unsaved_preset(qtbot, page, monkeypatch, fixtures: Path):
    from traindeck.gui.widgets import repair_dialog

    text = (fixtures / "configs/repair/ds_pasted_from_python.json").read_text()
    QApplication.clipboard().setText(text)
    shown = []

    def choose_repair(dialog):
        shown.append((dialog.changes.text(), dialog.diff.toPlainText(), dialog.as_is_button.isEnabled()))
        dialog.choose(repair_dialog.REPAIR)
        return 1

    monkeypatch.setattr(repair_dialog.RepairDialog, "exec", choose_repair)
    answer(monkeypatch, warning=never)
    page.action_paste.trigger()
    draft = page.ctx.draft
    qtbot.waitUntil(lambda: draft.saved_as is None and draft.dirty)
    changes, diff, as_is_enabled = shown[0]
    assert "True" in diff and changes and not as_is_enabled  # unreadable as it is: only the repair loads it
    assert draft.preset.launcher == "deepspeed"
    assert draft.preset.deepspeed["fp16"]["enabled"] is True
    assert ds_form(page).child("fp16").editor("enabled").currentText() == "true"
    assert "not saved yet" in page.title_label.text()


def test_open_a_clean_config_loads_it_without_asking(qtbot, page, monkeypatch, tmp_path: Path):
    config = tmp_path / "my_ds.json"
    config.write_text(json.dumps({"train_micro_batch_size_per_gpu": 3, "zero_optimization": {"stage": 1}}))
    from traindeck.gui.widgets import repair_dialog

    monkeypatch.setattr(repair_dialog.RepairDialog, "exec", never)
    answer(monkeypatch, getOpenFileName=(str(config), ""), warning=never)
    page.action_open.trigger()
    draft = page.ctx.draft
    qtbot.waitUntil(lambda: draft.saved_as is None and draft.preset.name == "my-ds")
    assert draft.preset.deepspeed["train_micro_batch_size_per_gpu"] == 3


# -------------------------------------------------------------------------------------------------- preview, demo


def test_preview_shows_the_files_and_the_command_for_the_launch_choice(qtbot, page, tmp_path: Path):
    preview = page.checks.preview
    qtbot.waitUntil(lambda: preview.text("ds_config.json") != "")
    ds = json.loads(preview.text("ds_config.json"))
    assert ds == page.ctx.draft.preset.deepspeed
    assert not preview.is_shown("accelerate_config.yaml")  # the deepspeed launcher writes none
    qtbot.waitUntil(lambda: "deepspeed.launcher.runner" in preview.text("Command"))
    script = tmp_path / "train_me.py"
    script.write_text("")
    page.ctx.set_launch_choice(script=str(script), script_args=["--deepspeed_config", "{ds_config}"])
    qtbot.waitUntil(lambda: str(script) in preview.text("Command"))
    assert "RUN_ID/ds_config.json" in preview.text("Command")
    preview.tabs.setCurrentIndex(preview.tabs.indexOf(preview._views["Command"]))
    preview.copy_current()
    copied = QApplication.clipboard().text()
    assert copied == preview.text("Command").splitlines()[-1] and str(script) in copied

    page.editor.launcher.setCurrentText("accelerate")
    qtbot.waitUntil(lambda: "accelerate.commands.launch" in preview.text("Command"))


def test_demo_shows_a_message_and_does_not_count_as_unsaved_work(qtbot, page, monkeypatch):
    page.load_demo()
    wait_checked(qtbot, page)
    assert page.ctx.draft.errors()
    assert page.editor.note_text("deepspeed.train_micro_batch_size_per_gpu")
    assert not user_file("cpu-demo").exists()
    answer(monkeypatch, question=never)
    assert page.confirm_close() is True


def test_keyboard_shortcuts_act_only_while_the_page_is_shown(qtbot, monkeypatch, configure_window):
    from PySide6.QtCore import Qt

    window, page = configure_window()
    wait_checked(qtbot, page)
    field = ds_form(page).editor("train_micro_batch_size_per_gpu")
    field.setFocus()
    qtbot.keyClicks(field, "2")
    assert page.ctx.draft.dirty
    asked = answer(monkeypatch, getText=("from-keys", True))
    qtbot.keyClick(field, Qt.Key.Key_S, Qt.KeyboardModifier.ControlModifier)
    qtbot.waitUntil(lambda: user_file("from-keys").is_file() and not page.ctx.draft.dirty)
    assert asked["getText"]

    others = [p.key for p in window.page_types if p.key != "configure"]
    if others:  # another page in front: Ctrl+Shift+S is not Configure's any more
        window.show_page(others[0])
        answer(monkeypatch, getText=never)
        qtbot.keyClick(window, Qt.Key.Key_S, Qt.KeyboardModifier.ControlModifier | Qt.KeyboardModifier.ShiftModifier)
        QApplication.processEvents()


def test_a_note_is_shown_last_with_an_information_icon_and_not_counted(qtbot) -> None:  # type: ignore[no-untyped-def]
    from traindeck.backend.config.messages import Message
    from traindeck.gui.widgets.findings_list import FindingsList

    widget = FindingsList()
    qtbot.addWidget(widget)
    widget.set_messages([Message("note", "deepspeed", "'auto' values: 12; filled by the HF Trainer at start-up"),
                         Message("warning", "accelerate.debug", "debug: true ...")])
    assert [m.severity for m in widget.messages()] == ["warning", "note"]
    assert widget.counts() == (0, 1)
    assert "1 warning" in widget.header_text()


# -------------------------------------------------------------------------------------------------- one set of findings


def test_what_the_tools_said_goes_when_another_preset_is_loaded_or_the_preset_is_edited(qtbot, page):
    checks = page.checks
    checks.show_native_result(["DeepSpeed (ds_config.json)"], [])
    assert checks.native_result.isVisible()
    assert page.files.load_named("zero2")
    assert not checks.native_result.isVisible() and checks.native_result.text() == ""  # not said of zero2

    checks.show_native_result(["DeepSpeed (ds_config.json)"], [])
    ds_form(page).child("zero_optimization").editor("stage").setCurrentText("1")
    assert not checks.native_result.isVisible()  # said of the preset before this edit


def test_the_list_and_the_command_tab_show_the_same_launch_problems(qtbot, page):
    preview = page.checks.preview
    page.ctx.draft.preset.env = {"1BAD": "x"}  # the launch plan refuses it; the config checks have no word on it
    page.ctx.draft.mark_edited()
    qtbot.waitUntil(lambda: "# error: " in preview.text("Command"))
    wait_checked(qtbot, page)
    errors = [line[len("# error: "):] for line in preview.text("Command").splitlines() if line.startswith("# error: ")]
    listed = [m.message for m in page.checks.findings.messages() if m.severity == "error" and m.path == "launch"]
    assert errors and listed == errors
    assert "No problems found" not in page.checks.findings.header_text()

    preview.tabs.setCurrentIndex(0)
    row = next(i for i, m in enumerate(page.checks.findings.messages()) if m.path == "launch")
    page.checks.findings.list.itemClicked.emit(page.checks.findings.list.item(row))
    assert preview.current_name() == "Command"  # a launch finding shows the command it is about


def test_an_fsdp_preset_the_probed_interpreter_cannot_run_is_said_in_the_list(qtbot, page, traindeck_home,
                                                                              probe_cache):  # noqa: F811
    from traindeck.backend.launch.builders import ACCELERATE_NO_DEVICE
    from traindeck.backend.launch.probe import cached_environment

    shutil.copytree(probe_cache, traindeck_home / "cache" / "probes")  # this interpreter, as the Launch page probed it
    environment = cached_environment(sys.executable)
    assert environment is not None
    if environment.cuda_available:
        pytest.skip("this interpreter's torch has CUDA: accelerate runs FSDP here")
    page.ctx.draft.replace(load_preset("fsdp-full-shard"), "fsdp-full-shard")
    preview = page.checks.preview
    qtbot.waitUntil(lambda: "# warning: FSDP under accelerate needs CUDA" in preview.text("Command"), timeout=15000)
    wait_checked(qtbot, page)
    launch = [m for m in page.checks.findings.messages() if m.path == "launch"]
    (refusal,) = [m.message for m in launch if m.message.startswith("FSDP under accelerate needs CUDA")]
    assert f'"{ACCELERATE_NO_DEVICE}"' in refusal and "--launcher torchrun --nproc 2" in refusal
    # A warning, as `config check` says it (the preset is right, the machine cannot run it); no "runs on the
    # CPU" note beside it, since the run does not start.
    assert [m.severity for m in launch if m.message == refusal] == ["warning"]
    assert not any("the run uses the CPU" in m.message for m in page.checks.findings.messages())
    assert "the run uses the CPU" not in preview.text("Command")
    assert "# error: FSDP" not in preview.text("Command")
    assert "No problems found" not in page.checks.findings.header_text()
    assert page.ctx.draft.errors() == []  # the preset itself is right: nothing blocks it as a preset error


def test_the_preset_list_getting_the_focus_loads_no_other_preset(qtbot, page, monkeypatch):
    from PySide6.QtCore import QEvent, Qt
    from PySide6.QtGui import QFocusEvent

    draft = page.ctx.draft
    answer(monkeypatch, question=never)
    page.action_new.trigger()
    qtbot.waitUntil(lambda: draft.saved_as is None)
    new_name = draft.preset.name
    # What a page switch (or Tab) does: the list, with no preset of its own current, gets the focus.
    QApplication.sendEvent(page.presets, QFocusEvent(QEvent.Type.FocusIn, Qt.FocusReason.OtherFocusReason))
    assert (draft.saved_as, draft.preset.name) == (None, new_name)  # nothing asked, nothing else loaded

    page.editor.forms["accelerate"].editor("num_processes").setText("")
    qtbot.keyClicks(page.editor.forms["accelerate"].editor("num_processes"), "3")
    assert draft.dirty
    QApplication.sendEvent(page.presets, QFocusEvent(QEvent.Type.FocusIn, Qt.FocusReason.TabFocusReason))
    assert (draft.saved_as, draft.preset.name, draft.dirty) == (None, new_name, True)


def test_a_save_cancelled_at_the_name_leaves_the_list_on_the_edited_preset(qtbot, page, monkeypatch):
    """Down in the list, Save in the unsaved-changes question, then Esc in the name dialog: nothing is loaded, and
    the list highlights no other preset than the one the editor shows (an unsaved one: none)."""
    from PySide6.QtCore import Qt

    draft = page.ctx.draft
    answer(monkeypatch, question=never)
    page.action_new.trigger()
    qtbot.waitUntil(lambda: draft.saved_as is None)
    new_name = draft.preset.name
    page.editor.forms["accelerate"].editor("num_processes").setText("")
    qtbot.keyClicks(page.editor.forms["accelerate"].editor("num_processes"), "3")
    assert draft.dirty
    asked = answer(monkeypatch, question=QMessageBox.StandardButton.Save, getText=("", False))
    page.presets.setFocus()
    qtbot.keyClick(page.presets, Qt.Key.Key_Down)
    assert asked.get("getText"), asked  # the name was asked for, and cancelled
    assert (draft.saved_as, draft.preset.name, draft.dirty) == (None, new_name, True)
    qtbot.waitUntil(lambda: page.presets.selectedItems() == [] and page.presets.currentRow() == -1, timeout=5000)

    # The same for a saved user preset: the list goes back to it.
    answer(monkeypatch, question=never, getText=("mine-list", True))
    page.action_save.trigger()
    qtbot.waitUntil(lambda: draft.saved_as == "mine-list" and not draft.dirty)
    qtbot.waitUntil(lambda: page.presets.current_name() == "mine-list")
    page.editor.forms["accelerate"].editor("num_processes").setText("")
    qtbot.keyClicks(page.editor.forms["accelerate"].editor("num_processes"), "5")
    answer(monkeypatch, question=QMessageBox.StandardButton.Cancel)
    page.presets.setFocus()
    qtbot.keyClick(page.presets, Qt.Key.Key_Up)
    assert draft.saved_as == "mine-list" and draft.dirty
    qtbot.waitUntil(lambda: [i.text() for i in page.presets.selectedItems()] == ["mine-list"], timeout=5000)
    assert page.presets.currentItem().text() == "mine-list"


def test_import_takes_a_json_with_slips_deepspeed_reads_and_says_so(qtbot, page, monkeypatch, tmp_path: Path):
    ds = tmp_path / "ds_config.json"
    ds.write_text('{\n  // ZeRO-2, one GPU\n  "train_batch_size": 4,\n  "zero_optimization": {"stage": 2,},\n}\n')
    said: list[str] = []
    page.ctx.status.connect(said.append)
    answer(monkeypatch, getOpenFileNames=([str(ds)], ""), getText=("slipped", True), warning=never)
    page.action_import.trigger()
    qtbot.waitUntil(lambda: page.ctx.draft.saved_as == "slipped")
    assert page.ctx.draft.preset.deepspeed == {"train_batch_size": 4, "zero_optimization": {"stage": 2}}
    assert any(s.startswith("Imported preset slipped: 3 JSON slip(s)") for s in said), said


def test_a_torchrun_preset_shows_and_is_chosen_as_torchrun(qtbot, page):
    draft = page.ctx.draft
    draft.replace(Preset(name="fsdp-native", launcher="torchrun", num_processes=2), "fsdp-native")
    qtbot.waitUntil(lambda: page.editor.launcher.currentText() == "torchrun", timeout=5000)
    page.editor.launcher.setCurrentText("python")
    assert draft.preset.launcher == "python"
    page.editor.launcher.setCurrentText("torchrun")
    assert draft.preset.launcher == "torchrun"
    assert "native DDP or FSDP" in page.editor.launcher.itemData(page.editor.launcher.currentIndex(), 3)


def test_import_of_a_config_with_comments_offers_the_repair_and_imports_it(qtbot, page, monkeypatch,
                                                                             tmp_path: Path):
    """A DeepSpeed JSON for the HF Trainer ("auto" values) with // comments, as LLaMA-Factory ships them, is refused
    by the import (the Trainer reads strict JSON): the page
    offers the repair (Enter takes it) and saves the repaired preset, instead of an error naming a CLI command."""
    from PySide6.QtCore import Qt, QTimer
    from PySide6.QtTest import QTest

    from traindeck.gui.widgets.repair_dialog import RepairDialog

    src = tmp_path / "ds_z3_offload_config.json"
    src.write_text('{\n  "train_micro_batch_size_per_gpu": "auto",\n  "zero_optimization": {"stage": 2},\n'
                   '  // "flops_profiler": {\n  //   "enabled": true\n  // },\n  "steps_per_print": 50\n}\n')
    from PySide6.QtWidgets import QPushButton

    shown: list[RepairDialog] = []
    buttons: list[str] = []
    real_exec = RepairDialog.exec

    def press_enter(dialog) -> None:
        buttons.extend(b.text() for b in dialog.findChildren(QPushButton) if b.isVisible())
        QTest.keyClick(dialog, Qt.Key.Key_Return)

    def exec_and_press_enter(dialog):
        shown.append(dialog)
        QTimer.singleShot(0, lambda: press_enter(dialog))
        return real_exec(dialog)

    monkeypatch.setattr(RepairDialog, "exec", exec_and_press_enter)
    answer(monkeypatch, getOpenFileNames=([str(src)], ""), getText=("ds-z3", True), warning=never)
    page.action_import.trigger()
    qtbot.waitUntil(lambda: user_file("ds-z3").is_file(), timeout=10000)
    qtbot.waitUntil(lambda: page.ctx.draft.saved_as == "ds-z3", timeout=10000)
    assert len(shown) == 1 and buttons == ["Repair and import", "Cancel"]  # the text as it is was refused
    saved = load_preset("ds-z3")
    assert saved.deepspeed == {"train_micro_batch_size_per_gpu": "auto", "zero_optimization": {"stage": 2},
                               "steps_per_print": 50}
    assert not page.ctx.draft.dirty


def test_a_new_preset_built_for_deepspeed_carries_no_stale_accelerate_template(qtbot, page):
    """New, then the deepspeed launcher and a DeepSpeed config: the untouched accelerate template goes (it only
    made two warnings and an exported accelerate_config.yaml with distributed_type NO), and comes back under
    accelerate, then as the DEEPSPEED template since the preset has DeepSpeed now."""
    from traindeck.backend.presets import blank_accelerate

    page.files.new_preset()
    editor = page.editor
    draft = page.ctx.draft
    assert draft.preset.accelerate == blank_accelerate(False)
    editor.launcher.setCurrentText("deepspeed")
    editor.add_section("deepspeed")
    wait_checked(qtbot, page)
    assert draft.preset.accelerate is None
    assert not [m for m in draft.messages if m.path.startswith("accelerate")], [m.format() for m in draft.messages]
    editor.launcher.setCurrentText("accelerate")
    wait_checked(qtbot, page)
    assert draft.preset.accelerate == blank_accelerate(True)
    assert not [m for m in draft.messages if m.severity != "info" and "ignored" in m.message]


def test_adding_deepspeed_to_a_new_accelerate_preset_makes_accelerate_use_it(qtbot, page, monkeypatch):
    from traindeck.backend.presets import blank_accelerate

    page.files.new_preset()
    page.editor.add_section("deepspeed")
    wait_checked(qtbot, page)
    draft = page.ctx.draft
    assert draft.preset.launcher == "accelerate"
    assert draft.preset.accelerate == blank_accelerate(True)
    assert not [m for m in draft.messages if "deepspeed_config is ignored" in m.message]

    answer(monkeypatch, question=QMessageBox.StandardButton.Discard)
    page.files.new_preset()  # a section the user edited is theirs: kept as it is
    draft.preset.accelerate["mixed_precision"] = "bf16"
    edited = dict(draft.preset.accelerate)
    page.editor.add_section("deepspeed")
    assert draft.preset.accelerate == edited
