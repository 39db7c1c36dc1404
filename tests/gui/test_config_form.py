"""The generated config form edits the user's dict in place and shows messages beside the keys."""

from __future__ import annotations

import copy

import pytest

pytest.importorskip("PySide6")

from traindeck.backend.config.messages import Message  # noqa: E402
from traindeck.backend.config.schema import fields_of  # noqa: E402


@pytest.fixture
def ds_schema():
    from traindeck.backend.config.deepspeed_schema import DeepSpeedConfig

    return DeepSpeedConfig


def test_every_key_of_the_section_gets_a_row_with_its_help_as_tooltip(qtbot, ds_schema):
    from traindeck.gui.widgets.config_form import ConfigForm

    form = ConfigForm(ds_schema, {})
    qtbot.addWidget(form)
    zero = form.child("zero_optimization")
    editor = zero.editor("stage")
    assert fields_of(ds_schema)["zero_optimization"].section is not None
    assert editor.toolTip().startswith(fields_of(fields_of(ds_schema)["zero_optimization"].section)["stage"].help)


def test_form_edits_change_the_data_and_data_changes_show_in_the_form(qtbot, ds_schema):
    from traindeck.gui.widgets.config_form import ConfigForm

    data = {"train_batch_size": 8, "zero_optimization": {"stage": 2}, "my_own_key": {"kept": True}}
    original_unknown = copy.deepcopy(data["my_own_key"])
    form = ConfigForm(ds_schema, data)
    qtbot.addWidget(form)
    zero = form.child("zero_optimization")
    assert zero.editor("stage").currentText() == "2"

    zero.editor("stage").setCurrentText("3")
    assert data["zero_optimization"]["stage"] == 3

    batch = form.editor("train_batch_size")
    assert batch.text() == "8"
    qtbot.keyClicks(batch, "0")  # typed: "80"
    assert data["train_batch_size"] == 80
    batch.clear()
    qtbot.keyClicks(batch, "x")
    assert data["train_batch_size"] == 80 and "expected" in form.note_text("train_batch_size")
    batch.selectAll()
    qtbot.keyClick(batch, "\b")  # emptied: unset, the key leaves the file
    assert "train_batch_size" not in data

    data["zero_optimization"]["stage"] = 1
    form.refresh()
    assert zero.editor("stage").currentText() == "1"
    zero.editor("stage").setCurrentIndex(0)  # "(default: ...)"
    assert "stage" not in data["zero_optimization"]
    assert data["my_own_key"] == original_unknown  # keys the form does not know are never touched


def test_messages_appear_beside_their_key(qtbot, ds_schema):
    from traindeck.gui.widgets.config_form import ConfigForm

    form = ConfigForm(ds_schema, {"zero_optimization": {"stage": 2}})
    qtbot.addWidget(form)
    form.show_messages([Message("error", "zero_optimization.stage", "bad stage"),
                        Message("warning", "train_batch_size", "check the batch")])
    assert form.child("zero_optimization").note_text("stage") == "bad stage"
    assert form.note_text("train_batch_size") == "check the batch"
    form.show_messages([])
    assert form.child("zero_optimization").note_text("stage") == ""


def test_stage_filter_hides_keys_without_effect_and_keeps_their_values(qtbot, ds_schema):
    from traindeck.gui.widgets.config_form import ConfigForm

    zero_section = fields_of(ds_schema)["zero_optimization"].section
    stage3_only = [k for k, s in fields_of(zero_section).items() if s.stages and 2 not in s.stages and s.kind in ("int", "float")]
    assert stage3_only, "the DeepSpeed schema marks stage-3-only keys"
    data = {"zero_optimization": {"stage": 2, stage3_only[0]: 10}}
    form = ConfigForm(ds_schema, data)
    qtbot.addWidget(form)
    form.show()
    zero = form.child("zero_optimization")
    form.show_only_for_stage(2)
    assert not zero.editor(stage3_only[0]).isVisibleTo(form)
    form.show_only_for_stage(3)
    assert zero.editor(stage3_only[0]).isVisibleTo(form)
    assert data["zero_optimization"][stage3_only[0]] == 10


def test_an_aliased_key_gets_one_row_under_the_spelling_the_file_uses(qtbot, ds_schema):
    from traindeck.gui.widgets.config_form import ConfigForm

    # DeepSpeed accepts max_live_parameters and stage3_max_live_parameters alike: the form edits the one in the file.
    data = {"zero_optimization": {"stage": 3, "max_live_parameters": 5}}
    form = ConfigForm(ds_schema, data)
    qtbot.addWidget(form)
    zero = form.child("zero_optimization")
    assert zero.editor("max_live_parameters").text() == "5"
    assert "stage3_max_live_parameters" not in zero._editors
    qtbot.keyClicks(zero.editor("max_live_parameters"), "0")
    assert data["zero_optimization"] == {"stage": 3, "max_live_parameters": 50}

    fresh = ConfigForm(ds_schema, {})
    qtbot.addWidget(fresh)
    assert fresh.child("zero_optimization").editor("stage3_max_live_parameters") is not None
    assert "max_live_parameters" not in fresh.child("zero_optimization")._editors


def test_keys_are_labelled_in_words_with_the_key_beneath():
    from traindeck.gui.widgets.config_form import people_words

    assert people_words("train_micro_batch_size_per_gpu") == "Train micro batch size per GPU"
    assert people_words("nvme_path") == "NVMe path"
    assert people_words("fp16") == "fp16"
    assert people_words("stage3_max_live_parameters") == "Stage 3 max live parameters"


def test_json_typed_in_a_mapping_field_is_stored_and_exported_as_numbers(qtbot, ds_schema, tmp_path):
    import json

    from traindeck.backend.presets import Preset, export_preset, validate_preset
    from traindeck.gui.widgets.config_form import ConfigForm

    data = {"train_micro_batch_size_per_gpu": 1, "optimizer": {"type": "AdamW"}}
    form = ConfigForm(ds_schema, data)
    qtbot.addWidget(form)
    qtbot.keyClicks(form.child("optimizer").editor("params"), '{"lr": 1e-4, "betas": [0.9, 0.999]}')
    assert data["optimizer"]["params"] == {"lr": 1e-4, "betas": [0.9, 0.999]}
    assert isinstance(data["optimizer"]["params"]["lr"], float)
    written, _preset_file = export_preset(Preset(name="typed", launcher="deepspeed", deepspeed=data), tmp_path)
    assert json.loads(written.read_text())["optimizer"]["params"]["lr"] == 1e-4

    form.child("optimizer").editor("params").clear()
    qtbot.keyClicks(form.child("optimizer").editor("params"), '{"lr": "1e-4"}')  # quoted on purpose: text
    (flagged,) = [m for m in validate_preset(Preset(name="typed", launcher="deepspeed", deepspeed=data))
                  if m.path == "deepspeed.optimizer.params.lr"]
    assert flagged.severity == "warning" and "is text, not a number" in flagged.message
