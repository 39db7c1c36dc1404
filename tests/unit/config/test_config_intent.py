"""Who fills "auto" (said once per file), and the files an accelerate config names, found as accelerate finds
them (from the working directory). Real files in temporary folders, checked with check_files and the CLI."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from traindeck.backend.config.auto_fill import FILLS, consumer_of_script, script_consumer
from traindeck.backend.config.messages import Message
from traindeck.backend.config.validate import check_files

HF_STYLE = {  # what transformers' and accelerate's own DeepSpeed templates look like
    "train_batch_size": "auto", "train_micro_batch_size_per_gpu": "auto", "gradient_accumulation_steps": "auto",
    "gradient_clipping": "auto", "bf16": {"enabled": "auto"},
    "optimizer": {"type": "AdamW", "params": {"lr": "auto", "betas": "auto", "eps": "auto", "weight_decay": "auto"}},
    "zero_optimization": {"stage": 3, "offload_optimizer": {"device": "cpu"}, "reduce_bucket_size": "auto",
                          "stage3_prefetch_bucket_size": "auto", "stage3_param_persistence_threshold": "auto"},
}
ACCELERATE_STYLE = {k: v for k, v in HF_STYLE.items() if k != "optimizer"}


def write(path: Path, data: object) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=1) if path.suffix == ".json" else str(data), encoding="utf-8")
    return path


def seen(messages: list[Message]) -> list[tuple[str, str]]:
    return [(m.severity, m.path) for m in messages]


# ------------------------------------------------------------------------------------------ "auto"


def test_a_trainer_config_gets_one_note_and_no_warning(tmp_path: Path) -> None:
    (note,) = check_files([write(tmp_path / "ds.json", HF_STYLE)])
    assert (note.severity, note.path, note.line) == ("note", "", 1)
    assert note.message.startswith("'auto' values: 12; filled by the HF Trainer at start-up (only the HF Trainer "
                                   "fills optimizer.params.betas, optimizer.params.eps)")


def test_without_trainer_only_keys_it_is_the_trainer_or_accelerate(tmp_path: Path) -> None:
    (note,) = check_files([write(tmp_path / "ds.json", ACCELERATE_STYLE)])
    assert note.message.startswith("'auto' values: 8; filled by the HF Trainer or accelerate at start-up")
    # what accelerate needs from a script of one's own to fill them
    assert "a script of your own on accelerate takes the batch size from the DataLoader it prepares" in note.message


def test_under_accelerate_betas_and_eps_stop_every_process(tmp_path: Path) -> None:
    messages = check_files([write(tmp_path / "ds.json", HF_STYLE)], consumer="accelerate",
                           consumer_why="--accelerate-script")
    assert seen(messages) == [("note", ""), ("error", "optimizer.params.betas"), ("error", "optimizer.params.eps")]
    assert "(--accelerate-script)" in messages[0].message
    assert "\"`optimizer.params.betas` not found in kwargs\"" in messages[1].message


def test_a_plain_script_errs_where_deepspeed_stops_and_names_dropped_values_once(tmp_path: Path) -> None:
    messages = check_files([write(tmp_path / "ds.json", HF_STYLE)], hf_trainer=False)
    note = messages[0]
    assert note.severity == "note" and "nobody fills them" in note.message
    assert "DeepSpeed drops zero_optimization.reduce_bucket_size (default 500000000)" in note.message
    assert ("warning", "bf16.enabled") in seen(messages)  # trains without the precision asked for
    assert {p for s, p in seen(messages) if s == "error"} == {
        "train_batch_size", "train_micro_batch_size_per_gpu", "gradient_accumulation_steps", "gradient_clipping",
        "optimizer.params.lr", "optimizer.params.betas", "optimizer.params.eps", "optimizer.params.weight_decay"}


def test_a_key_nobody_fills_is_an_error_for_every_consumer(tmp_path: Path) -> None:
    data = {**ACCELERATE_STYLE, "optimizer": {"type": "AdamW", "params": {"lr": "auto", "amsgrad": "auto"}}}
    for consumer in ("hf_trainer", "accelerate", None):
        messages = check_files([write(tmp_path / "ds.json", data)], consumer=consumer)
        errors = [m for m in messages if m.severity == "error"]
        assert seen(errors) == [("error", "optimizer.params.amsgrad")], consumer
        assert "not found in kwargs" in errors[0].message


def test_a_companion_accelerate_config_says_accelerate_launches_it(tmp_path: Path) -> None:
    write(tmp_path / "ds.json", ACCELERATE_STYLE)
    yaml = write(tmp_path / "acc.yaml", "distributed_type: DEEPSPEED\nnum_processes: 2\n"
                                         "deepspeed_config:\n  deepspeed_config_file: ds.json\n")
    notes = [m for m in check_files([yaml], cwd=tmp_path) if m.severity == "note"]
    assert [m.file for m in notes] == [str(tmp_path / "ds.json")]
    assert "(launched by accelerate: acc.yaml uses it)" in notes[0].message


def test_script_optimizer_with_offload_is_not_a_warning_in_an_auto_config(tmp_path: Path) -> None:
    """accelerate converts the script's optimizer for offload; a config with "auto" is written for it."""
    no_optimizer = {k: v for k, v in HF_STYLE.items() if k != "optimizer"}
    assert [m for m in check_files([write(tmp_path / "a.json", no_optimizer)]) if m.severity != "note"] == []
    plain_numbers = {"train_micro_batch_size_per_gpu": 2, "zero_optimization": {
        "stage": 2, "offload_optimizer": {"device": "cpu"}}}
    assert seen(check_files([write(tmp_path / "b.json", plain_numbers)])) == [
        ("warning", "zero_optimization.offload_optimizer.device")]


@pytest.mark.parametrize(("text", "consumer"), [
    ("from transformers import Trainer, TrainingArguments\nTrainer(model=m, args=a).train()\n", "hf_trainer"),
    ("from trl import SFTTrainer\ntrainer = SFTTrainer(model, args=cfg)\n", "hf_trainer"),
    ("from accelerate import Accelerator\naccelerator = Accelerator()\n", "accelerate"),
    ("import deepspeed\nengine, *_ = deepspeed.initialize(model=m, config=c)\n", "plain"),
    ("import lightning as L\ntrainer = L.Trainer(strategy='deepspeed')\n", None),
    ("print('hello')\n", None),
])
def test_who_fills_auto_is_read_from_the_script(text: str, consumer: str | None) -> None:
    assert consumer_of_script(text) == consumer


def test_cli_script_and_flags(tmp_path: Path) -> None:
    ds = write(tmp_path / "ds.json", HF_STYLE)
    script = write(tmp_path / "train.py", "from accelerate import Accelerator\nAccelerator()\n")
    assert script_consumer(str(script)) == ("accelerate", "train.py uses Accelerator")

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "traindeck", "config", "check", str(ds), *args],
                              capture_output=True, text=True, timeout=120, check=False)

    done = run()
    assert done.returncode == 0 and done.stdout.count("\n") == 1 and ": note: (document): 'auto' values: 12" in done.stdout
    assert done.stderr.strip() == "traindeck: no problems found in 1 file"  # a note is not a problem
    done = run("--script", str(script))
    assert done.returncode == 1 and "(train.py uses Accelerator)" in done.stdout
    assert done.stderr.strip() == "traindeck: 2 errors, 0 warnings in 1 file"
    assert run("--hf-trainer").returncode == 0
    assert run("--accelerate-script").returncode == 1


def test_every_table_key_is_written_in_deepspeeds_spelling() -> None:
    """The tools fill these exact spellings (find_config_node): the table must not hold a dotted typo."""
    assert len({f.path for f in FILLS}) == len(FILLS)
    assert all(all(part and part.strip() == part for part in f.path) for f in FILLS)


# ------------------------------------------------------------------------------------------ other warnings


def test_multinode_launcher_on_one_machine_is_not_worth_a_warning(tmp_path: Path) -> None:
    yaml = write(tmp_path / "a.yaml", "distributed_type: DEEPSPEED\nnum_processes: 2\nnum_machines: 1\n"
                                      "deepspeed_config:\n  deepspeed_multinode_launcher: standard\n  zero_stage: 2\n")
    assert check_files([yaml]) == []


def test_sagemaker_is_a_note(tmp_path: Path) -> None:
    yaml = write(tmp_path / "a.yaml", "compute_environment: AMAZON_SAGEMAKER\ndistributed_type: NO\n"
                                      "ec2_instance_type: ml.p3.2xlarge\niam_role_name: role\n")
    assert [m.severity for m in check_files([yaml]) if m.path == "compute_environment"] == ["note"]


# ------------------------------------------------------------------------------------------ paths


def _accelerate_yaml(folder: Path, ref: str) -> Path:
    return write(folder / "acc.yaml", f"distributed_type: DEEPSPEED\nnum_processes: 2\n"
                                      f"deepspeed_config:\n  deepspeed_config_file: {ref}\n")


def test_a_file_only_beside_the_yaml_is_an_error_naming_both(tmp_path: Path) -> None:
    write(tmp_path / "configs" / "ds.json", {"train_micro_batch_size_per_gpu": 2, "zero_optimization": {"stage": 2}})
    yaml = _accelerate_yaml(tmp_path / "configs", "ds.json")
    messages = check_files([yaml], cwd=tmp_path)
    assert seen(messages) == [("error", "deepspeed_config.deepspeed_config_file")]
    text = messages[0].message
    assert f"is not at {tmp_path / 'ds.json'}: accelerate opens it from the working directory {tmp_path}" in text
    assert f"the YAML's folder has {tmp_path / 'configs' / 'ds.json'}" in text
    assert check_files([yaml], cwd=tmp_path / "configs") == []  # launched from there: fine


def test_a_different_file_in_the_working_directory_is_the_one_checked(tmp_path: Path) -> None:
    write(tmp_path / "configs" / "ds.json", {"train_micro_batch_size_per_gpu": 2, "zero_optimization": {"stage": 2}})
    write(tmp_path / "ds.json", {"train_micro_batch_size_per_gpu": 2, "zero_optimization": {"stage": 7}})
    yaml = _accelerate_yaml(tmp_path / "configs", "ds.json")
    messages = check_files([yaml], cwd=tmp_path)
    warning = next(m for m in messages if m.path == "deepspeed_config.deepspeed_config_file")
    assert warning.severity == "warning"
    assert f"reads the DeepSpeed config {tmp_path / 'ds.json'}" in warning.message
    assert f"not {tmp_path / 'configs' / 'ds.json'} next to this YAML" in warning.message
    # the working directory's file is the one accelerate uses, so its stage 7 is what gets reported
    assert ("error", "zero_optimization.stage") in seen(messages)
    assert next(m for m in messages if m.path == "zero_optimization.stage").file == str(tmp_path / "ds.json")


def test_a_tilde_is_not_expanded_by_accelerate(tmp_path: Path) -> None:
    (m,) = check_files([_accelerate_yaml(tmp_path, "~/no-such-traindeck-ds.json")], cwd=tmp_path)
    assert m.severity == "error" and "accelerate does not expand '~'" in m.message


def test_an_absolute_path_is_found_from_anywhere(tmp_path: Path) -> None:
    ds = write(tmp_path / "a" / "ds.json", {"train_micro_batch_size_per_gpu": 2, "zero_optimization": {"stage": 2}})
    yaml = _accelerate_yaml(tmp_path / "b", str(ds))
    assert check_files([yaml], cwd=tmp_path / "c") == []


def test_the_dashboards_launch_finds_it_from_the_runs_working_directory(tmp_path: Path) -> None:
    from traindeck.backend.launch.builders import LaunchRequest, build_plan

    def plan(yaml: Path):  # type: ignore[no-untyped-def]
        return build_plan(LaunchRequest(script="train.py", config_file=yaml, cwd=tmp_path, python=sys.executable),
                          tmp_path / "run", base_env={"PATH": "/usr/bin:/bin"}, is_port_busy=lambda port: False,
                          free_port=lambda: 29555)

    write(tmp_path / "configs" / "ds.json", {"train_micro_batch_size_per_gpu": 2, "zero_optimization": {"stage": 2}})
    yaml = _accelerate_yaml(tmp_path / "configs", "ds.json")
    (tmp_path / "run").mkdir()
    write(tmp_path / "train.py", "print('hi')\n")
    done = plan(yaml)
    assert done.errors == []  # the run's YAML copy names the snapshot by absolute path: it works, and says why
    (warning,) = [w for w in done.warnings if "deepspeed_config_file" in w]
    assert f"is not at {tmp_path / 'ds.json'}" in warning
    assert f"the YAML's folder has {tmp_path / 'configs' / 'ds.json'}" in warning
    assert "this run uses the YAML's folder's file" in warning
    assert '"stage": 2' in done.files["ds_config.json"]
    write(tmp_path / "ds.json", {"train_micro_batch_size_per_gpu": 2, "zero_optimization": {"stage": 3}})
    done = plan(yaml)
    assert not [e for e in done.errors if "deepspeed_config_file" in e]
    assert any(f"reads the DeepSpeed config {tmp_path / 'ds.json'}" in w for w in done.warnings)
    assert '"stage": 3' in done.files["ds_config.json"]  # the working directory's file is the one snapshotted


def test_a_preset_knows_from_its_launcher_and_script(tmp_path: Path) -> None:
    from traindeck.backend.presets import Preset, validate_preset

    preset = Preset(name="p", launcher="deepspeed", deepspeed=HF_STYLE)
    notes = [m.message for m in validate_preset(preset, world_size=2) if m.severity == "note"]
    assert notes and "filled by the HF Trainer at start-up" in notes[0]
    mine = write(tmp_path / "mine.py", "from accelerate import Accelerator\nAccelerator()\n")
    errors = [m.path for m in validate_preset(preset, world_size=2, script=str(mine)) if m.severity == "error"]
    assert errors == ["deepspeed.optimizer.params.betas", "deepspeed.optimizer.params.eps"]
    plain = write(tmp_path / "plain.py", "import deepspeed\ndeepspeed.initialize(model=m, config='ds.json')\n")
    assert "deepspeed.train_batch_size" in [m.path for m in validate_preset(preset, world_size=2, script=str(plain))
                                            if m.severity == "error"]
    launched = Preset(name="q", launcher="accelerate", deepspeed=ACCELERATE_STYLE,
                      accelerate={"distributed_type": "DEEPSPEED", "num_processes": 2})
    notes = [m.message for m in validate_preset(launched) if m.severity == "note"]
    assert any("(the preset launches it with accelerate)" in n for n in notes), notes


def test_deepspeeds_own_auto_is_fine_for_a_plain_script_and_refused_by_accelerate(tmp_path: Path) -> None:
    """data_types.keep_in_fp32_modules defaults to "auto" in DeepSpeed; accelerate's walk refuses it anyway
    (tests/test_config_auto_fill_tools.py shows it on the installed accelerate)."""
    own = {"train_micro_batch_size_per_gpu": 2, "zero_optimization": {"stage": 2},
           "data_types": {"keep_in_fp32_modules": "auto"}}
    path = write(tmp_path / "own.json", own)
    assert check_files([path]) == []  # nobody said who runs it, and nothing else says "HF Trainer"
    assert check_files([path], hf_trainer=False) == []
    (m,) = check_files([path], consumer="accelerate")
    assert (m.severity, m.path) == ("error", "data_types.keep_in_fp32_modules")
    assert "`data_types.keep_in_fp32_modules` not found in kwargs" in m.message
    mixed = write(tmp_path / "mixed.json", {**own, "train_micro_batch_size_per_gpu": "auto"})
    assert seen(check_files([mixed])) == [("note", ""), ("error", "data_types.keep_in_fp32_modules")]


def test_a_parent_relative_path_is_named_plainly_and_the_folder_to_launch_from_is_the_yamls(tmp_path: Path) -> None:
    write(tmp_path / "examples" / "ds" / "zero1.json", {"train_micro_batch_size_per_gpu": 2,
                                                        "zero_optimization": {"stage": 1}})
    yaml = _accelerate_yaml(tmp_path / "examples" / "yaml", "../ds/zero1.json")
    (m,) = check_files([yaml], cwd=tmp_path)
    assert f"is not at {tmp_path.parent / 'ds' / 'zero1.json'}:" in m.message
    assert (f"the YAML's folder has {tmp_path / 'examples' / 'ds' / 'zero1.json'}: launch from "
            f"{tmp_path / 'examples' / 'yaml'} or write the absolute path") in m.message
