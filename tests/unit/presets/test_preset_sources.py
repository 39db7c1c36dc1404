"""Pasted and opened configs become unsaved presets, with the same repair as `traindeck config fix` offered."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from traindeck.backend.config.repair import repair_text
from traindeck.backend.presets import PresetError, dump_preset, load_preset, validate_preset
from traindeck.backend.presets.native import native_preset_verdicts
from traindeck.backend.presets.sources import (
    blank_preset,
    examine_text,
    free_name,
    read_config_file,
)


def test_pasted_json_with_python_literals_offers_the_config_fix_repair(fixtures: Path):
    text = (fixtures / "configs/repair/ds_pasted_from_python.json").read_text()
    examined = examine_text(text)
    assert not examined.readable and examined.offers_repair
    assert examined.repair is not None and examined.repair.changes == repair_text(text).changes
    assert "+" in examined.diff() and "True" in examined.diff()
    with pytest.raises(PresetError):
        examined.preset(repaired=False)
    preset = examined.preset(repaired=True, name="pasted")
    assert preset.launcher == "deepspeed" and preset.path is None and not preset.builtin
    assert preset.deepspeed is not None and preset.deepspeed["zero_optimization"]["overlap_comm"] is True


def test_flattened_accelerate_yaml_is_re_nested(fixtures: Path):
    examined = read_config_file(fixtures / "configs/repair/accelerate_deepspeed_flat.yaml")
    assert examined.readable and examined.offers_repair
    preset = examined.preset(repaired=True, name="flat")
    assert preset.launcher == "accelerate" and "zero_stage" in preset.accelerate["deepspeed_config"]
    as_is = examined.preset(repaired=False, name="flat")
    assert "zero_stage" in as_is.accelerate  # unchanged: the checks will say where it belongs


def test_opened_accelerate_yaml_brings_its_deepspeed_json(tmp_path: Path):
    ds = {"zero_optimization": {"stage": 3}, "train_micro_batch_size_per_gpu": "auto"}
    (tmp_path / "ds.json").write_text(json.dumps(ds))
    (tmp_path / "acc.yaml").write_text("distributed_type: DEEPSPEED\nnum_processes: 2\n"
                                       "deepspeed_config:\n  deepspeed_config_file: ds.json\n")
    examined = read_config_file(tmp_path / "acc.yaml")
    assert examined.readable and not examined.offers_repair
    preset = examined.preset(repaired=False, name="acc")
    assert preset.deepspeed == ds and preset.accelerate["deepspeed_config"] == {}


def test_a_pasted_preset_file_is_loaded_as_a_preset():
    text = dump_preset(load_preset("zero2"))
    examined = examine_text(text)
    assert examined.is_preset and examined.repair is None
    preset = examined.preset(repaired=False, name="copy-of-zero2")
    assert preset.name == "copy-of-zero2" and not preset.builtin
    assert preset.deepspeed == load_preset("zero2").deepspeed


def test_unreadable_text_is_not_loadable():
    examined = examine_text("{{{ not a config")
    assert not examined.loadable


def test_blank_preset_is_valid_and_names_are_free():
    assert not [m for m in validate_preset(blank_preset()) if m.severity == "error"]
    assert free_name("untitled", ["Untitled", "untitled-2"]) == "untitled-3"
    assert free_name("mine", []) == "mine"


def test_native_verdicts_are_placed_in_the_presets_sections(tmp_path: Path):
    # An interpreter that cannot run: each tool's check says it was skipped, under the preset's section.
    messages = native_preset_verdicts(load_preset("zero3-offload"), python=str(tmp_path / "no-python"), timeout=5)
    assert {m.path for m in messages} == {"deepspeed", "accelerate"}
    assert all(m.severity == "warning" and "skipped" in m.message for m in messages)
