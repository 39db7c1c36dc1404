"""The preset store: built-ins, user presets (atomic, 0600, versioned, no secrets), names, import, validation."""

from __future__ import annotations

import json
import stat
from pathlib import Path

import pytest
import yaml
from support.presets import user_preset

from traindeck.backend.core import paths
from traindeck.backend.presets import (
    BUILTIN_NAMES,
    NVME_PLACEHOLDER,
    SCHEMA_VERSION,
    PresetError,
    delete_preset,
    dump_preset,
    export_preset,
    find_secrets,
    import_accelerate_default,
    import_preset,
    list_presets,
    load_preset,
    read_preset_file,
    rename_preset,
    save_preset,
    validate_preset,
)

# ------------------------------------------------------------------------------------------ built-ins


def test_every_builtin_name_has_a_file_that_loads_and_describes_itself_in_one_line():
    for name in BUILTIN_NAMES:
        preset = load_preset(name)
        assert preset.name == name and preset.builtin
        assert preset.description and "\n" not in preset.description and len(preset.description) < 200
        assert preset.schema_version == SCHEMA_VERSION
        assert preset.launcher in ("accelerate", "deepspeed", "python")
        if preset.launcher == "accelerate":
            assert preset.accelerate is not None
            # DeepSpeed settings live in the deepspeed section only: nothing accelerate refuses beside a file.
            inline = preset.accelerate.get("deepspeed_config") or {}
            assert set(inline) <= {"zero3_init_flag", "deepspeed_multinode_launcher"}, name


@pytest.mark.parametrize(("name", "distributed", "stage", "offload_opt", "offload_param"), [
    ("single-process", "NO", None, None, None),
    ("ddp", "MULTI_GPU", None, None, None),
    ("zero1", "DEEPSPEED", 1, None, None),
    ("zero2", "DEEPSPEED", 2, None, None),
    ("zero2-offload", "DEEPSPEED", 2, "cpu", None),
    ("zero3", "DEEPSPEED", 3, None, None),
    ("zero3-offload", "DEEPSPEED", 3, "cpu", "cpu"),
    ("zero-infinity-nvme", "DEEPSPEED", 3, "nvme", "nvme"),
    ("fsdp-full-shard", "FSDP", None, None, None),
    ("fsdp-shard-grad-op", "FSDP", None, None, None),
    ("fsdp-offload", "FSDP", None, None, None),
])
def test_builtins_are_what_their_names_say(name, distributed, stage, offload_opt, offload_param):
    preset = load_preset(name)
    assert preset.accelerate["distributed_type"] == distributed
    zero = (preset.deepspeed or {}).get("zero_optimization", {})
    assert zero.get("stage") == stage
    assert zero.get("offload_optimizer", {}).get("device") == offload_opt
    assert zero.get("offload_param", {}).get("device") == offload_param
    if distributed == "FSDP":
        fsdp = preset.accelerate["fsdp_config"]
        # What accelerate 1.15 applies: FSDP v1 reads fsdp_sharding_strategy (default FULL_SHARD) and ignores
        # fsdp_reshard_after_forward, which only FSDP v2 reads.
        if fsdp.get("fsdp_version", 1) == 1:
            applied = fsdp.get("fsdp_sharding_strategy", "FULL_SHARD")
        else:
            applied = "FULL_SHARD" if fsdp.get("fsdp_reshard_after_forward", True) in (True, "FULL_SHARD") else "SHARD_GRAD_OP"
        assert applied == ("SHARD_GRAD_OP" if "grad-op" in name else "FULL_SHARD")
        assert fsdp["fsdp_offload_params"] is (name == "fsdp-offload")


def test_cpu_demo_is_two_deepspeed_ranks_zero2_cpu_offload_fp32_printing_every_step():
    preset = load_preset("cpu-demo")
    ds = preset.deepspeed
    assert preset.launcher == "deepspeed" and preset.accelerate is None and preset.process_count() == 2
    assert ds["zero_optimization"]["stage"] == 2 and ds["zero_optimization"]["offload_optimizer"]["device"] == "cpu"
    assert ds["fp16"]["enabled"] is False and ds["bf16"]["enabled"] is False
    assert ds["steps_per_print"] == 1 and ds["train_micro_batch_size_per_gpu"] <= 8
    assert ds["optimizer"]["type"] == "AdamW"  # a script passing no optimizer gets DeepSpeedCPUAdam


def test_builtins_validate_without_errors_except_the_nvme_placeholder_which_is_named():
    for name in BUILTIN_NAMES:
        messages = validate_preset(load_preset(name))
        errors = [m for m in messages if m.severity == "error"]
        if name == "zero-infinity-nvme":
            assert len(errors) == 2 and all(NVME_PLACEHOLDER in m.message and m.path.endswith("nvme_path")
                                            for m in errors)
            assert all(m.file and m.file.endswith("zero-infinity-nvme.yaml") and m.line for m in errors)
        else:
            assert errors == [], (name, [m.format() for m in messages])
        assert [m for m in messages if m.severity == "warning"] == [], (name, [m.format() for m in messages])


def test_builtins_use_concrete_values_that_work_with_the_plain_deepspeed_launcher():
    def autos(data, path=()):
        if isinstance(data, dict):
            for k, v in data.items():
                yield from autos(v, path + (k,))
        elif data == "auto":
            yield path
    for name in BUILTIN_NAMES:
        assert list(autos(load_preset(name).deepspeed or {})) == [], name


# ------------------------------------------------------------------------------------------ user presets


def test_save_then_load_keeps_everything_including_unknown_keys_and_writes_0600():
    preset = user_preset(extra={"notes": {"who": "me", "why": ["a", 1]}, "future_key": 3},
                   accelerate={"distributed_type": "DEEPSPEED", "my_own_key": "x"}, launcher="accelerate",
                   num_processes=None)
    target = save_preset(preset)
    assert target == paths.presets_dir() / "mine.yaml"
    assert stat.S_IMODE(target.stat().st_mode) == 0o600
    loaded = load_preset("mine")
    assert loaded == preset and not loaded.builtin
    assert loaded.extra == {"notes": {"who": "me", "why": ["a", 1]}, "future_key": 3}
    data = yaml.safe_load(target.read_text())
    assert list(data)[:4] == ["schema_version", "name", "description", "launcher"]
    assert data["schema_version"] == SCHEMA_VERSION and data["future_key"] == 3


def test_existing_preset_is_not_overwritten_unless_asked():
    save_preset(user_preset())
    with pytest.raises(PresetError, match="already exists"):
        save_preset(user_preset(description="other"))
    save_preset(user_preset(description="other"), overwrite=True)
    assert load_preset("mine").description == "other"


@pytest.mark.parametrize("bad", ["a/b", "../up", ".hidden", "", "has space", "x" * 65, "a..b", "name.yaml",
                                 "back\\slash", "nul\0"])
def test_bad_names_are_refused_with_the_reason(bad):
    with pytest.raises(PresetError, match="cannot be a preset name|needs a name"):
        save_preset(user_preset(name=bad))
    assert not any(paths.presets_dir().glob("*")) if paths.presets_dir().exists() else True


@pytest.mark.parametrize("name", ["zero2", "ZERO2", "cpu-demo", "Single-Process"])
def test_user_presets_cannot_take_a_builtin_name(name):
    with pytest.raises(PresetError, match="built-in preset"):
        save_preset(user_preset(name=name))
    with pytest.raises(PresetError, match="built-in"):
        import_preset([Path("x.json")], name)


def test_builtins_cannot_be_deleted_or_renamed():
    with pytest.raises(PresetError, match="built-in preset and cannot be deleted"):
        delete_preset("zero3")
    with pytest.raises(PresetError, match="built-in preset and cannot be renamed"):
        rename_preset("zero3", "my-zero3")


def test_delete_and_rename():
    save_preset(user_preset())
    renamed = rename_preset("mine", "yours")
    assert renamed.name == "yours" and load_preset("yours").deepspeed == user_preset().deepspeed
    assert not (paths.presets_dir() / "mine.yaml").exists()
    assert yaml.safe_load((paths.presets_dir() / "yours.yaml").read_text())["name"] == "yours"
    delete_preset("yours")
    with pytest.raises(PresetError, match="no preset named 'yours'"):
        load_preset("yours")


def test_unknown_name_suggests_the_closest():
    save_preset(user_preset(name="my-zero3-big"))
    with pytest.raises(PresetError, match="did you mean 'zero2'"):
        load_preset("zer02")
    with pytest.raises(PresetError, match="did you mean 'my-zero3-big'"):
        load_preset("my-zero3-bgi")
    with pytest.raises(PresetError, match="no preset named 'qqqq'"):
        load_preset("qqqq")


@pytest.mark.parametrize(("where", "key"), [
    ("extra", "hub_token"), ("accelerate", "wandb_api_key"), ("deepspeed", "password"),
])
def test_secrets_are_refused_naming_the_key(where, key):
    preset = user_preset(launcher="accelerate", accelerate={"distributed_type": "NO"})
    target = {"extra": preset.extra, "accelerate": preset.accelerate, "deepspeed": preset.deepspeed}[where]
    target[key] = "s3cr3t-value"
    with pytest.raises(PresetError, match=f"'{where + '.' if where != 'extra' else ''}{key}' looks like a secret"):
        save_preset(preset)
    assert not (paths.presets_dir() / "mine.yaml").exists()


def test_secret_values_are_refused_under_any_key_and_harmless_keys_pass():
    preset = user_preset(extra={"note": "hf_" + "a" * 34})
    with pytest.raises(PresetError, match="'note' looks like a secret .*access token"):
        save_preset(preset)
    harmless = {"tokenizer_name": "gpt2", "max_tokens": 5, "megatron_lm_calculate_per_token_loss": True,
                "hub_token": None, "comet": {"experiment_key": "abc"}, "private_key_path": "/x",
                "pad_token": "<pad>", "eos_token": "</s>"}
    assert find_secrets(harmless) == []


def test_schema_version_newer_is_a_clear_error_and_older_is_migrated():
    directory = paths.presets_dir()
    directory.mkdir(parents=True)
    (directory / "future.yaml").write_text("schema_version: 99\nname: future\nlauncher: deepspeed\n")
    with pytest.raises(PresetError, match="newer traindeck .*schema version 99.*upgrade"):
        load_preset("future")
    # Version 0: a hand-written file without schema_version using the long section names.
    (directory / "old.yaml").write_text("name: old\nlauncher: deepspeed\nds_config:\n  train_batch_size: 8\n"
                                        "my_note: kept\n")
    old = load_preset("old")
    assert old.deepspeed == {"train_batch_size": 8} and old.extra == {"my_note": "kept"}
    save_preset(old, overwrite=True)
    data = yaml.safe_load((directory / "old.yaml").read_text())
    assert data["schema_version"] == SCHEMA_VERSION and "ds_config" not in data and data["my_note"] == "kept"


def test_list_shows_builtins_then_user_presets_and_reports_broken_files_without_failing():
    save_preset(user_preset(name="b-second"))
    save_preset(user_preset(name="a-first"))
    directory = paths.presets_dir()
    (directory / "broken.yaml").write_text("name: [unclosed\n")
    (directory / ".a-first.yaml.abc123.tmp").write_text("half a fi")  # a killed writer's leftover
    (directory / "zero2.yaml").write_text("name: zero2\nlauncher: deepspeed\n")  # shadowing a built-in
    problems: list[str] = []
    names = [p.name for p in list_presets(problems)]
    assert names == list(BUILTIN_NAMES) + ["a-first", "b-second"]
    assert any("broken.yaml" in p and "not valid YAML" in p for p in problems)
    assert any("zero2.yaml" in p and "built-in" in p for p in problems)


def test_preset_file_errors_point_at_the_line():
    directory = paths.presets_dir()
    directory.mkdir(parents=True)
    (directory / "bad.yaml").write_text("name: bad\nlauncher: deepspeed\ndeepspeed: {a: 1\n")
    with pytest.raises(PresetError, match=r"bad.yaml:\d+:\d+: the preset file is not valid YAML"):
        load_preset("bad")
    (directory / "bad.yaml").write_text("name: bad\nlauncher: mpirun\n")
    with pytest.raises(PresetError, match="launcher must be one of accelerate, deepspeed, python"):
        load_preset("bad")


# ------------------------------------------------------------------------------------------ import


def test_import_accelerate_yaml_brings_in_the_deepspeed_json_it_points_at(tmp_path):
    ds = {"train_micro_batch_size_per_gpu": 4, "zero_optimization": {"stage": 3}, "unknown_ds_key": [1, 2]}
    (tmp_path / "ds.json").write_text(json.dumps(ds))
    acc = {"compute_environment": "LOCAL_MACHINE", "distributed_type": "DEEPSPEED", "num_processes": 4,
           "deepspeed_config": {"deepspeed_config_file": "ds.json", "zero3_init_flag": True}}
    (tmp_path / "acc.yaml").write_text(yaml.safe_dump(acc))
    preset = import_preset([tmp_path / "acc.yaml"], "imported")
    assert preset.launcher == "accelerate" and preset.deepspeed == ds
    assert preset.accelerate["deepspeed_config"] == {"zero3_init_flag": True}  # the machine-specific path is dropped
    assert load_preset("imported") == preset


def test_import_deepspeed_json_alone_uses_the_deepspeed_launcher(tmp_path):
    (tmp_path / "ds.json").write_text('{"train_batch_size": 8, "zero_optimization": {"stage": 1}}')
    preset = import_preset([tmp_path / "ds.json"], "dsonly")
    assert preset.launcher == "deepspeed" and preset.accelerate is None


def test_import_refuses_what_it_cannot_read_with_the_place(tmp_path):
    (tmp_path / "bad.json").write_text('{"train_batch_size": 8,,}')
    with pytest.raises(PresetError, match=r"bad.json:1:\d+: error: .*JSON syntax"):
        import_preset([tmp_path / "bad.json"], "x")
    (tmp_path / "acc.yaml").write_text("distributed_type: DEEPSPEED\nnum_processes: 2\ndeepspeed_config:\n"
                                       "  deepspeed_config_file: missing.json\n")
    with pytest.raises(PresetError, match="missing.json"):
        import_preset([tmp_path / "acc.yaml"], "x")
    with pytest.raises(PresetError, match="no such file"):
        import_preset([tmp_path / "nope.yaml"], "x")
    (tmp_path / "a.json").write_text('{"train_batch_size": 8}')
    with pytest.raises(PresetError, match="two DeepSpeed configs"):
        import_preset([tmp_path / "a.json", tmp_path / "a.json"], "x")


def test_import_from_accelerates_default_location(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    monkeypatch.delenv("ACCELERATE_CONFIG_FILE", raising=False)
    with pytest.raises(PresetError, match="no accelerate default config"):
        import_accelerate_default("x")
    location = paths.accelerate_default_config()
    location.parent.mkdir(parents=True)
    location.write_text("compute_environment: LOCAL_MACHINE\ndistributed_type: MULTI_GPU\nnum_processes: 2\n")
    preset = import_accelerate_default("from-default")
    assert preset.accelerate["distributed_type"] == "MULTI_GPU" and preset.launcher == "accelerate"


# ------------------------------------------------------------------------------------------ validation


def test_validation_is_located_in_the_preset_file_with_section_paths():
    preset = user_preset(launcher="accelerate",
                   accelerate={"distributed_type": "DEEPSPEED", "num_processes": 2,
                               "deepspeed_config": {"zero_stage": 2}},
                   deepspeed={"train_batch_size": 7, "train_micro_batch_size_per_gpu": 2,
                              "zero_optimization": {"stage": 4, "offload_optimizer": {"device": "cpuu"}}})
    save_preset(preset)
    preset = load_preset("mine")
    messages = validate_preset(preset)
    text = (paths.presets_dir() / "mine.yaml").read_text().splitlines()
    by_path = {m.path: m for m in messages}
    stage = by_path["deepspeed.zero_optimization.stage"]
    assert stage.severity == "error" and stage.file == str(preset.path)
    assert text[stage.line - 1].strip().startswith("stage: 4")
    device = by_path["deepspeed.zero_optimization.offload_optimizer.device"]
    assert "did you mean 'cpu'" in device.message and text[device.line - 1].strip() == "device: cpuu"
    inline = by_path["accelerate.deepspeed_config.zero_stage"]
    assert inline.severity == "warning" and "deepspeed' section" in inline.message
    assert any(m.path.startswith("deepspeed.train_batch_size") for m in messages)  # 7 != 2 x 1 x 2


def test_validation_of_a_preset_in_memory_has_no_file():
    messages = validate_preset(user_preset(deepspeed={"zero_optimization": {"stage": 7}}))
    assert messages and all(m.file is None for m in messages)


def test_dump_is_yaml_that_reads_back_to_the_same_preset():
    for name in BUILTIN_NAMES:
        preset = load_preset(name)
        again = yaml.safe_load(dump_preset(preset))
        assert again == yaml.safe_load(Path(preset.path).read_text())


def test_export_of_a_deepspeed_only_preset_writes_the_json_and_the_preset_file(tmp_path):
    written = export_preset("cpu-demo", tmp_path / "out")
    assert [p.name for p in written] == ["ds_config.json", "cpu-demo.traindeck.yaml"]
    assert json.loads(written[0].read_text()) == load_preset("cpu-demo").deepspeed
    assert read_preset_file(Path(load_preset("cpu-demo").path), builtin=True).builtin


def _slips_json(path: Path, entries: int, *, auto: bool) -> None:
    """A DeepSpeed JSON with a // comment before each of `entries` keys and a trailing comma: hjson reads it."""
    batch = '"auto"' if auto else "4"
    lines = ["{", f'  "train_micro_batch_size_per_gpu": {batch},']
    for i in range(entries):
        lines += [f"  // why k{i}", f'  "steps_per_print": {i + 1},' if i == 0 else '  "wall_clock_breakdown": false,'
                  if i == 1 else f'  "k{i}": {i},']
    lines.append("}")
    path.write_text("\n".join(lines) + "\n")


def test_import_judges_json_slips_as_config_check_does(tmp_path):
    from traindeck.backend.config import check_files

    plain = tmp_path / "plain.json"
    _slips_json(plain, 3, auto=False)  # no "auto": DeepSpeed's own launcher reads it: warnings
    checked = [m for m in check_files([plain]) if "JSON syntax" in m.message]
    assert checked and {m.severity for m in checked} == {"warning"}
    slips: list = []
    preset = import_preset([plain], "slips", slips=slips)
    assert slips == checked and preset.deepspeed["steps_per_print"] == 1  # every slip, as config check words it

    auto = tmp_path / "auto.json"
    _slips_json(auto, 14, auto=True)  # "auto": the HF Trainer / accelerate read it with json: errors
    checked = [m for m in check_files([auto]) if "JSON syntax" in m.message]
    assert len(checked) == 15 and {m.severity for m in checked} == {"error"}
    with pytest.raises(PresetError) as refused:
        import_preset([auto], "slips-auto")
    text = str(refused.value)
    assert [m.format() in text for m in checked] == [True] * 10 + [False] * 5
    assert "and 5 more" in text and "traindeck config fix" in text
