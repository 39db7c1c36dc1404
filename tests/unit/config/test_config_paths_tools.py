"""deepspeed_config_file found as accelerate finds it, checked against accelerate itself (the `train` extra).

In a subprocess started in a given working directory, accelerate's own launch code reads the YAML
(launch_command_parser + _validate_launch_command, then utils/launch.py prepare_deepspeed_cmd_env, which is what
`accelerate launch` gives each training process), and the process's DeepSpeedPlugin opens the DeepSpeed config
from that environment, as a training process does. traindeck's verdict from the same working directory must agree.
"""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

from traindeck.backend.config.validate import check_files

pytestmark = pytest.mark.skipif(importlib.util.find_spec("accelerate") is None, reason="needs the train extra")

LOAD = """
import os, sys
from accelerate.commands.launch import _validate_launch_command, launch_command_parser
from accelerate.utils.launch import prepare_deepspeed_cmd_env
args = launch_command_parser().parse_args(["--config_file", sys.argv[1], "train.py"])
args, defaults, mp_from_config_flag = _validate_launch_command(args)
# launch_command's own lines before deepspeed_launcher (commands/launch.py)
fields = list(defaults.deepspeed_config.keys()) if defaults else []
args.deepspeed_fields_from_accelerate_config = ",".join(fields + (["mixed_precision"] if mp_from_config_flag else []))
_, env = prepare_deepspeed_cmd_env(args)
os.environ.update(env)
from accelerate.utils import DeepSpeedPlugin
try:
    plugin = DeepSpeedPlugin()
except ValueError as exc:
    print("REFUSED", str(exc).splitlines()[0])
else:
    print("LOADED", plugin.deepspeed_config["zero_optimization"]["stage"])
"""


def accelerate_reads(yaml: Path, cwd: Path) -> str:
    done = subprocess.run([sys.executable, "-c", LOAD, str(yaml)], cwd=cwd, capture_output=True, text=True,
                          timeout=300, check=False)
    line = next((x for x in done.stdout.splitlines() if x.startswith(("LOADED", "REFUSED"))), None)
    assert line is not None, done.stderr[-3000:]
    return line


@pytest.fixture
def layout(tmp_path: Path) -> Path:
    """configs/acc.yaml naming ds.json, which exists only in configs/ (stage 1); root/ has none."""
    (tmp_path / "configs").mkdir()
    (tmp_path / "configs" / "ds.json").write_text(json.dumps(
        {"train_micro_batch_size_per_gpu": 2, "zero_optimization": {"stage": 1}}), encoding="utf-8")
    (tmp_path / "configs" / "acc.yaml").write_text(
        "distributed_type: DEEPSPEED\nnum_processes: 2\nnum_machines: 1\nmachine_rank: 0\n"
        "deepspeed_config:\n  deepspeed_config_file: ds.json\n  zero3_init_flag: false\n", encoding="utf-8")
    return tmp_path


def test_from_the_yamls_folder_both_find_it(layout: Path) -> None:
    yaml = layout / "configs" / "acc.yaml"
    assert accelerate_reads(yaml, layout / "configs") == "LOADED 1"
    assert check_files([yaml], cwd=layout / "configs") == []


def test_from_elsewhere_both_refuse_it(layout: Path) -> None:
    yaml = layout / "configs" / "acc.yaml"
    verdict = accelerate_reads(yaml, layout)
    assert verdict.startswith("REFUSED Expected a string path to an existing deepspeed config"), verdict
    (m,) = check_files([yaml], cwd=layout)
    assert m.severity == "error" and "Expected a string path to an existing deepspeed config" in m.message


def test_a_different_file_in_the_working_directory_is_the_one_both_use(layout: Path) -> None:
    (layout / "ds.json").write_text(json.dumps(
        {"train_micro_batch_size_per_gpu": 2, "zero_optimization": {"stage": 3}}), encoding="utf-8")
    yaml = layout / "configs" / "acc.yaml"
    assert accelerate_reads(yaml, layout) == "LOADED 3"
    (m,) = check_files([yaml], cwd=layout)
    assert m.severity == "warning" and f"reads the DeepSpeed config {layout / 'ds.json'}" in m.message
