"""The Launch page's unattended widgets on their own: the GPU picker read through the real sampler from recordings of
real GPUs (the stand-in pynvml is the only double, at the NVML boundary), with a real run's process standing in
for the recorded one; the sweep editor's count and names (the backend's, as `--sweep`); the alert settings saved
where `traindeck notify` reads them, and their Test button running the command for real."""

from __future__ import annotations

import getpass
from pathlib import Path

import pytest

pytest.importorskip("PySide6")

from fixtures.nvml.fake_driver import FakePynvml, recording  # noqa: E402
from support.runhelp import python_job, wait_finished, wait_until  # noqa: E402

from traindeck.backend.monitor.nvml import NvmlLibrary  # noqa: E402
from traindeck.backend.runs.control.lifecycle import stop_run  # noqa: E402
from traindeck.backend.runs.record.run_store import RunStore  # noqa: E402
from traindeck.backend.runs.supervisor import alerts  # noqa: E402

RECORDED_PID = 100477  # the training process on both cards of the dual RTX A5000 recording


@pytest.fixture
def tasks(qtbot):  # type: ignore[no-untyped-def]
    from traindeck.gui.tasks import Tasks

    made = Tasks()
    yield made
    made.wait(20000)


def _picker(qtbot, tasks, name: str | None, **options: object):  # type: ignore[no-untyped-def]
    from traindeck.gui.widgets.gpu_picker import GpuPicker

    picker = GpuPicker(tasks)
    qtbot.addWidget(picker)
    if name is not None:
        picker.gpu_library_factory = lambda: NvmlLibrary(FakePynvml(recording(name), **options),
                                                         host_pid_namespace=True)
    else:  # a machine without NVIDIA: NVML cannot be opened
        picker.gpu_library_factory = lambda: NvmlLibrary(FakePynvml(recording("gt_1030"), init_error=9),
                                                         host_pid_namespace=True)
    with qtbot.waitSignal(picker.refreshed, timeout=20000):
        picker.refresh()
    return picker


@pytest.mark.launch
def test_gpu_picker_shows_each_gpus_use_and_who_is_on_it(qtbot, tasks):
    run = python_job("--steps", "400", "--step-time", "0.1", name="on-the-gpu")
    try:
        with RunStore() as store:
            record = wait_until(lambda: (r := store.get_run(run.id)) and r.launcher_pid and r)
        picker = _picker(qtbot, tasks, "dual_rtx_a5000", pid_map={RECORDED_PID: record.launcher_pid})
        assert [u.index for u in picker.uses] == [0, 1]
        first = picker.uses[0]
        assert first.name == "NVIDIA RTX A5000" and not first.free
        assert "GiB" in first.use_text and "%" in first.use_text
        (who,) = first.who
        assert f"pid {record.launcher_pid}" in who and getpass.getuser() in who and "run on-the-gpu" in who
        assert picker.checks[0].text() == "0: NVIDIA RTX A5000" and not picker.note.isVisible()
    finally:
        with RunStore() as store:
            stop_run(store, run.id, wait=False)
        wait_finished(run.id)

    # The choice, as --gpus takes it.
    assert picker.gpus_text() == ""  # the launcher's default
    picker.checks[1].setChecked(True)
    assert picker.gpus_text() == "1" and picker.mode_chosen.isChecked()
    picker.checks[0].setChecked(True)
    assert picker.gpus_text() == "0,1"
    picker.mode_any.setChecked(True)
    picker.any_count.setValue(2)
    assert picker.gpus_text() == "any:2"
    picker.set_gpus_text("1")
    assert picker.gpus_text() == "1" and not picker.checks[0].isChecked()
    picker.set_gpus_text("")
    picker.mode_chosen.setChecked(True)
    assert picker.problem().startswith("GPUs: tick")


def test_gpu_picker_on_an_idle_mig_card_and_on_a_machine_without_gpus(qtbot, tasks):
    mig = _picker(qtbot, tasks, "a100_sxm4_80gb_mig")
    (card,) = mig.uses
    assert card.free and card.state == "free" and card.who == ()
    assert mig.free_now() == [0]

    none = _picker(qtbot, tasks, None)
    assert none.uses == [] and none.note.text().startswith("No NVIDIA GPU here")
    assert none.table.isHidden() and none.choices.isHidden() and none.gpus_text() == ""


def test_sweep_editor_counts_and_names_runs_as_the_cli_does(qtbot):
    from traindeck.backend.presets import load_preset
    from traindeck.gui.widgets.sweep_editor import SweepEditor

    demo = load_preset("cpu-demo")  # its DeepSpeed config defines the optimizer: lr goes there too
    editor = SweepEditor()
    qtbot.addWidget(editor)
    editor.update_summary(["--lr", "0.1"], demo, base_name="tiny")
    assert not editor.active and "one run" in editor.summary.text()
    editor.rows.setPlainText("lr = 1e-5, 3e-5\n\nzero_stage = 2, 3\n")
    assert editor.axes() == ["lr=1e-5,3e-5", "zero_stage=2,3"]
    editor.update_summary(["--lr", "0.1"], demo, base_name="tiny")
    assert [p.label for p in editor.points] == ["lr=1e-5-zero_stage=2", "lr=1e-5-zero_stage=3",
                                                "lr=3e-5-zero_stage=2", "lr=3e-5-zero_stage=3"]
    assert editor.summary.text().startswith("Makes 4 queued runs: tiny-lr=1e-5-zero_stage=2,")
    assert editor.points[0].preset_overrides["deepspeed.optimizer.params.lr"] == 1e-5
    assert editor.notes == [editor.notes[0]] and "optimizer.params.lr" in editor.notes[0]
    assert editor.notes[0] in editor.summary.text()  # the editor says which setting the value reaches
    editor.update_summary([], None, base_name="tiny")
    assert editor.error == "Sweep: over a preset value needs --preset NAME"
    editor.rows.setPlainText("lr = 1, 1")
    editor.update_summary([], None, base_name="tiny")
    assert "a value is given twice" in editor.error


def test_alert_settings_save_where_notify_reads_and_test_runs_the_command(qtbot, tasks, tmp_path: Path):
    from traindeck.gui.widgets.alert_settings import AlertSettings

    box = AlertSettings(tasks)
    qtbot.addWidget(box)
    assert box.desktop.isChecked() and alerts.desktop_notifications()
    box.desktop.setChecked(False)
    assert alerts.desktop_notifications() is False
    out = tmp_path / "event.txt"
    box.command.setText(f"sh -c 'echo $TRAINDECK_EVENT $TRAINDECK_RUN_NAME > {out}'")
    assert box.save_command()
    assert alerts.notify_command() == ["sh", "-c", f"echo $TRAINDECK_EVENT $TRAINDECK_RUN_NAME > {out}"]
    assert alerts.desktop_notifications() is False  # saving the command kept the other setting
    box.test_button.click()
    qtbot.waitUntil(lambda: box.test_button.isEnabled() and box.result.text().startswith("Test:"), timeout=20000)
    assert "exit code 0" in box.result.text()
    assert out.read_text().strip() == "succeeded traindeck notify --test"
    box.command.setText("")
    assert box.save_command() and alerts.notify_command() is None
