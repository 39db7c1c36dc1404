"""`traindeck config check FILE... [--world-size N] [--json]`, run as users and scripts run it."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from support import TESTS

from traindeck.backend.launch.builders import ACCELERATE_NO_DEVICE, ACCELERATE_NO_MEGATRON

DIR = TESTS / "fixtures" / "configs" / "accelerate"
LINE = re.compile(r"^(?P<file>.+?):(?P<line>\d+):(?P<col>\d+): (?P<sev>error|warning|note): (?P<path>\S+): (?P<msg>.+)$")


# The training interpreter's torch sees no GPU, on any machine (the probe asks with this environment).
NO_CUDA = {"CUDA_VISIBLE_DEVICES": ""}


def check(*args: str | Path, cwd: Path | None = None, env: dict[str, str] | None = None
          ) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "traindeck", "config", "check", *map(str, args)],
                          capture_output=True, text=True, timeout=120, cwd=cwd, check=False,
                          env={**os.environ, **(env or {})})


def test_valid_files_exit_0_with_a_summary_on_stderr() -> None:
    done = check(DIR / "written_deepspeed_zero2.yaml", DIR / "written_multi_gpu.yaml")
    assert (done.returncode, done.stdout) == (0, "")
    assert done.stderr.strip() == "traindeck: no problems found in 2 files"


@pytest.mark.train
def test_fsdp_and_megatron_configs_say_why_the_interpreter_without_cuda_cannot_run_them() -> None:
    pytest.importorskip("torch")
    files = [DIR / "written_fsdp1.yaml", DIR / "written_fsdp2.yaml", DIR / "written_megatron_lm.yaml"]
    done = check(*files, env=NO_CUDA)
    assert done.returncode == 0, done.stdout  # valid files: the machine is what cannot run them
    found = [m for m in map(LINE.match, done.stdout.splitlines()) if m]
    assert len(found) == 3 == len(done.stdout.splitlines()), done.stdout  # one finding a file, nothing else
    assert [(m["file"], m["line"], m["col"], m["sev"], m["path"]) for m in found] == [
        (str(f), "3", "1", "warning", "distributed_type") for f in files]
    fsdp1, fsdp2, megatron = (m["msg"] for m in found)
    # The launch's own words: accelerate's reason, then torchrun with the same sharding on num_processes ranks.
    assert fsdp1.startswith(f"FSDP under accelerate needs CUDA, which {sys.executable} lacks: ")
    assert f'every process stops with "{ACCELERATE_NO_DEVICE}" To shard' in fsdp1
    assert "--launcher torchrun --nproc 4" in fsdp1
    assert "fully_shard(module, reshard_after_forward=True, mp_policy=MixedPrecisionPolicy(" \
           "param_dtype=torch.float16))" in fsdp1
    # FSDP2 drops sync_module_states: accelerate's processes start unsharded instead of stopping.
    assert "distributed type NO" in fsdp2 and ACCELERATE_NO_DEVICE not in fsdp2
    assert "--launcher torchrun --nproc 2" in fsdp2
    assert megatron.startswith("Megatron-LM (distributed_type MEGATRON_LM) cannot start here: CUDA is not available")
    if "megatron-core" in megatron:  # not installed in this training environment
        assert ACCELERATE_NO_MEGATRON in megatron
    assert done.stderr.strip() == "traindeck: 0 errors, 3 warnings in 3 files"
    as_json = json.loads(check("--json", files[1], env=NO_CUDA).stdout)
    assert [(m["severity"], m["path"], m["line"]) for m in as_json] == [("warning", "distributed_type", 3)]


def test_the_wrap_policy_finding_reads_as_the_configure_page_says_it_given_the_same_script(tmp_path: Path) -> None:
    """The Configure page checks a preset with the Launch page's script; `config check --script` with the same
    script says the same line, naming the script it rests on (without a script neither says it)."""
    import yaml

    from traindeck.backend.presets import load_preset, validate_preset

    script = tmp_path / "train.py"
    script.write_text("from accelerate import Accelerator\naccelerator = Accelerator()\n")
    config = DIR / "pitfall_fsdp_no_layer_class.yaml"
    preset = load_preset("fsdp-full-shard")
    preset.accelerate = yaml.safe_load(config.read_text())
    gui = [m.message for m in validate_preset(preset, script=str(script)) if "TRANSFORMER_BASED_WRAP" in m.message]
    done = check("--script", script, config)
    cli = [m["msg"] for m in map(LINE.match, done.stdout.splitlines()) if m and "TRANSFORMER_BASED_WRAP" in m["msg"]]
    assert gui == cli and len(cli) == 1, (gui, done.stdout)
    assert cli[0].endswith("(said because train.py uses Accelerator)")
    assert not [m for m in validate_preset(preset) if "TRANSFORMER_BASED_WRAP" in m.message]
    assert "TRANSFORMER_BASED_WRAP" not in check(config).stdout


def test_an_interpreter_without_torch_adds_no_machine_finding(tmp_path: Path) -> None:
    # This Python without its site-packages: no torch to ask about CUDA, so nothing is said about the machine.
    bare = tmp_path / "python"
    bare.write_text(f"#!/bin/sh\nexec {sys.executable} -S \"$@\"\n")
    bare.chmod(0o755)
    done = check("--python", bare, DIR / "written_fsdp2.yaml", env=NO_CUDA)
    assert (done.returncode, done.stdout) == (0, "")
    assert done.stderr.strip() == "traindeck: no problems found in 1 file"


def test_warnings_alone_exit_0() -> None:
    done = check(DIR / "pitfall_debug.yaml")
    assert done.returncode == 0
    (line,) = done.stdout.splitlines()
    m = LINE.match(line)
    assert m and (m["file"], m["line"], m["col"], m["sev"], m["path"]) == (
        str(DIR / "pitfall_debug.yaml"), "2", "1", "warning", "debug")
    assert done.stderr.strip() == "traindeck: 0 errors, 1 warning in 1 file"


def test_errors_exit_1_one_compiler_style_line_each() -> None:
    done = check(DIR / "pitfall_ds_file_with_inline.yaml", cwd=DIR)  # where accelerate would be launched
    assert done.returncode == 1
    lines = done.stdout.splitlines()
    assert len(lines) == 4 and all(LINE.match(line) for line in lines)
    assert lines[0].startswith(f"{DIR / 'pitfall_ds_file_with_inline.yaml'}:6:3: error: "
                               f"deepspeed_config.gradient_accumulation_steps: accelerate refuses")
    assert done.stderr.strip() == "traindeck: 4 errors, 0 warnings in 1 file"


def test_relative_paths_are_printed_as_given() -> None:
    done = check("typo_mixed_precision.yaml", cwd=DIR)
    assert done.returncode == 1
    assert done.stdout.startswith("typo_mixed_precision.yaml:4:1: error: mixed_precision: 'bf-16' is not allowed")


def test_malformed_yaml_is_located_without_a_traceback() -> None:
    done = check(DIR / "malformed_tab.yaml")
    assert done.returncode == 1 and "Traceback" not in done.stderr
    assert done.stdout.startswith(f"{DIR / 'malformed_tab.yaml'}:3:1: error: (document): YAML syntax:")


def test_a_missing_file_is_an_error_at_that_file() -> None:
    done = check(DIR / "written_no.yaml", "no_such_config.yaml")
    assert done.returncode == 1
    assert done.stdout.startswith("no_such_config.yaml:1:1: error: (document): cannot read the file")


@pytest.mark.parametrize("args", [(), ("--world-size", "0", "a.yaml"), ("--world-size", "two", "a.yaml"),
                                  ("--hf-trainer", "--plain-script", "a.yaml")])
def test_usage_errors_exit_2(args: tuple[str, ...]) -> None:
    done = check(*args)
    assert done.returncode == 2 and "usage:" in done.stderr and done.stdout == ""


def test_config_without_a_subcommand_exits_2() -> None:
    done = subprocess.run([sys.executable, "-m", "traindeck", "config"], capture_output=True, text=True, timeout=60,
                          check=False)
    assert done.returncode == 2 and "check" in done.stdout


def test_json_is_the_list_of_messages() -> None:
    done = check("--json", DIR / "pitfall_gpu_ids_too_few.yaml", DIR / "pitfall_debug.yaml")
    assert done.returncode == 1
    data = json.loads(done.stdout)
    assert [(d["severity"], d["path"], d["line"], d["column"]) for d in data] == [
        ("warning", "debug", 2, 1), ("error", "gpu_ids", 3, 1)]
    assert set(data[0]) == {"file", "line", "column", "severity", "path", "message"}
    assert data[1]["file"] == str(DIR / "pitfall_gpu_ids_too_few.yaml")
    assert json.loads(check("--json", DIR / "written_no.yaml").stdout) == []


def test_world_size_changes_the_batch_verdict() -> None:
    json_file = DIR / "ds_batch16.json"  # train_batch_size 16 = micro 4 x accumulation 2 x 2 processes
    assert check(json_file, "--world-size", "2").returncode == 0
    done = check(json_file, "--world-size", "4")
    assert done.returncode == 1 and "ds_batch16.json:2:3: error: train_batch_size:" in done.stdout
    # Without --world-size the accelerate config's num_processes is the world size ...
    assert check(DIR / "deepspeed_file_batch16_2_gpus.yaml", cwd=DIR).returncode == 0
    done = check(DIR / "pitfall_batch16_4_gpus.yaml", cwd=DIR)
    assert done.returncode == 1 and "x 4 processes = 32" in done.stdout
    # ... and --world-size wins over it.
    assert check(DIR / "pitfall_batch16_4_gpus.yaml", "--world-size", "2", cwd=DIR).returncode == 0
    assert check(DIR / "deepspeed_file_batch16_2_gpus.yaml", "--world-size", "4", cwd=DIR).returncode == 1


def test_an_accelerate_config_and_a_deepspeed_json_given_together() -> None:
    done = check(DIR / "pitfall_precision_no_vs_json.yaml", DIR / "ds_bf16.json")
    assert done.returncode == 0
    files = [LINE.match(line)["file"] for line in done.stdout.splitlines()]  # type: ignore[index]
    assert str(DIR / "ds_bf16.json") in files and str(DIR / "pitfall_precision_no_vs_json.yaml") in files


@pytest.mark.train
def test_native_adds_accelerates_own_verdict() -> None:
    pytest.importorskip("accelerate")
    done = check("--native", DIR / "typo_keys.yaml")
    assert done.returncode == 1
    assert "accelerate says: " in done.stdout and "num_proceses" in done.stdout


@pytest.mark.train
def test_native_judges_a_json_with_slips_as_deepspeed_reads_it(tmp_path: Path) -> None:
    # Comments and trailing commas: strict JSON stops, DeepSpeed's hjson reads past them and refuses stage 7.
    pytest.importorskip("deepspeed")
    slips = tmp_path / "ds.json"
    slips.write_text('{\n  // ZeRO\n  "train_micro_batch_size_per_gpu": 4,\n  "zero_optimization": {"stage": 7,},\n}\n')
    lines = [m for m in map(LINE.match, check("--native", "--plain-script", slips).stdout.splitlines()) if m]
    said = [(m["line"], m["path"], m["msg"]) for m in lines if m["msg"].startswith("DeepSpeed says: ")]
    assert said and said[0][:2] == ("4", "zero_optimization.stage") and "got 7" in said[0][2]


@pytest.mark.train
def test_native_says_why_deepspeed_refuses_an_unreadable_json(tmp_path: Path) -> None:
    pytest.importorskip("deepspeed")
    broken = tmp_path / "ds.json"
    broken.write_text('{"train_batch_size": 8 "gradient_accumulation_steps": 1}')  # no comma, on one line
    done = check("--native", broken)
    said = [line for line in done.stdout.splitlines() if "DeepSpeed says: " in line]
    assert len(said) == 1 and "cannot read the file: HjsonDecodeError" in said[0], done.stdout


def test_native_on_an_empty_file_says_in_one_line_why_it_did_not_run(tmp_path: Path) -> None:
    empty = tmp_path / "ds.json"
    empty.write_text("")
    done = check("--native", empty, tmp_path / "missing.json")
    skipped = [line for line in done.stdout.splitlines() if "own checks did not run" in line]
    assert [LINE.match(line)["file"] for line in skipped] == [str(empty), str(tmp_path / "missing.json")]  # type: ignore[index]


@pytest.mark.train
def test_native_hands_an_unreadable_yaml_to_accelerate_and_prints_one_line(tmp_path: Path) -> None:
    pytest.importorskip("accelerate")
    broken = tmp_path / "acc.yaml"
    broken.write_text("distributed_type: [NO\nnum_processes: 1\n")
    said = [line for line in check("--native", broken).stdout.splitlines() if "accelerate says: " in line]
    assert len(said) == 1 and LINE.match(said[0]) and str(broken) in said[0], said


def test_each_file_is_read_and_parsed_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    import traindeck.backend.config.source as source
    from traindeck.backend.cli import main

    config = tmp_path / "ds.json"
    config.write_text('{\n  "train_micro_batch_size_per_gpu": 4,\n  "layers": [1, 2, 3]\n}\n')
    read: list[str] = []
    real = source.read_config_text

    def counting(path: Path) -> str:
        read.append(str(path))
        return real(path)

    monkeypatch.setattr(source, "read_config_text", counting)
    assert main(["config", "check", str(config)]) == 0
    assert f"{config}:3:3: warning: layers: unknown key 'layers'" in capsys.readouterr().out
    assert read == [str(config)]
