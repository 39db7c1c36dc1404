"""A preset's `env`: the environment variables its runs need (cpu-demo: DS_ACCELERATOR=cpu), kept in the preset
file, checked when read and refused when secret-looking, and never written into the accelerate/DeepSpeed files."""

from __future__ import annotations

import pytest
import yaml
from support.presets import user_preset

from traindeck.backend.core import paths
from traindeck.backend.presets import (
    PresetError,
    dump_preset,
    export_preset,
    find_secrets,
    load_preset,
    preset_from_mapping,
    render_files,
    save_preset,
    validate_preset,
)


def test_cpu_demo_carries_the_cpu_accelerator_and_gpu_presets_carry_none():
    assert load_preset("cpu-demo").env == {"DS_ACCELERATOR": "cpu"}
    assert load_preset("zero2").env == {}
    assert "env" not in yaml.safe_load(dump_preset(load_preset("zero2")))  # no empty section in files


def test_env_round_trips_through_a_user_file_with_unknown_keys():
    preset = user_preset(env={"OMP_NUM_THREADS": "4", "NCCL_DEBUG": "WARN", "EMPTY": ""}, extra={"my_note": "kept"})
    target = save_preset(preset)
    data = yaml.safe_load(target.read_text())
    assert data["env"] == {"OMP_NUM_THREADS": "4", "NCCL_DEBUG": "WARN", "EMPTY": ""}
    assert data["my_note"] == "kept"
    assert list(data).index("env") < list(data).index("deepspeed")  # beside launcher and num_processes
    loaded = load_preset("mine")
    assert loaded == preset and loaded.env == preset.env and loaded.extra == {"my_note": "kept"}
    assert [m.path for m in validate_preset(loaded)] == ["my_note"]  # env is known: only my_note is "unknown"
    # Saved again unchanged: the same file.
    save_preset(loaded, overwrite=True)
    assert yaml.safe_load(target.read_text()) == data


def test_env_is_traindecks_own_key_not_written_into_the_tools_files(tmp_path):
    preset = load_preset("cpu-demo")
    assert "DS_ACCELERATOR" not in "".join(render_files(preset, tmp_path).values())
    *tools_files, preset_file = export_preset(preset, tmp_path / "out")
    assert all("DS_ACCELERATOR" not in p.read_text() for p in tools_files)
    assert preset_file.name == "cpu-demo.traindeck.yaml"  # the preset's own file keeps it


@pytest.mark.parametrize(("env", "why"), [
    ("DS_ACCELERATOR=cpu", "'env' must be a mapping of variable names to values"),
    ({"1BAD": "x"}, "'1BAD' is not an environment variable name"),
    ({"HAS SPACE": "x"}, "'HAS SPACE' is not an environment variable name"),
    ({"A=B": "x"}, "'A=B' is not an environment variable name"),
    ({"OMP_NUM_THREADS": 4}, "env.OMP_NUM_THREADS must be text, not 4: quote it"),
    ({"FLAG": True}, "env.FLAG must be text, not True: quote it"),
    ({"UNSET": None}, "env.UNSET must be text"),
    ({"NUL": "a\0b"}, "env.NUL: a value cannot hold a NUL character"),
])
def test_a_bad_env_is_one_clear_line_with_the_place(env, why):
    with pytest.raises(PresetError) as info:
        preset_from_mapping({"schema_version": 1, "name": "x", "launcher": "python", "env": env})
    assert why in str(info.value) and "\n" not in str(info.value)
    with pytest.raises(PresetError, match="env"):
        save_preset(user_preset(env=env))
    assert not (paths.presets_dir() / "mine.yaml").exists()


@pytest.mark.parametrize(("env", "where", "why"), [
    ({"HF_TOKEN": "abc"}, "env.HF_TOKEN", "names a secret"),
    ({"WANDB_API_KEY": "abc"}, "env.WANDB_API_KEY", "names a secret"),
    ({"SSH_KEY": "abc"}, "env.SSH_KEY", "names a secret"),
    ({"MY_SETTING": "hf_" + "a" * 34}, "env.MY_SETTING", "access token"),
    ({"PROXY": "http://me:pr0xyPassw0rd@proxy:3128"}, "env.PROXY", "password"),
])
def test_a_secret_looking_env_is_refused_in_one_line(env, where, why):
    with pytest.raises(PresetError) as info:
        save_preset(user_preset(env=env))
    text = str(info.value)
    assert f"'{where}' looks like a secret" in text and why in text and "\n" not in text
    assert not (paths.presets_dir() / "mine.yaml").exists()


def test_harmless_env_passes_the_secret_check():
    env = {"TOKENIZERS_PARALLELISM": "false", "DS_ACCELERATOR": "cpu", "HF_HOME": "/data/hf",
           "PRIVATE_KEY_PATH": "/x", "WANDB_BASE_URL": "https://api.wandb.ai"}
    assert find_secrets({"env": env}) == []
    save_preset(user_preset(env=env))
    assert load_preset("mine").env == env
