"""`traindeck presets list [--json] | show NAME | import FILE [FILE] --name NAME | export NAME --dir DIR |
delete NAME`, run as the real command (a subprocess) for the exact forms, and in-process for the details."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import yaml
from support import FIXTURES

from traindeck.backend.cli import main
from traindeck.backend.presets import BUILTIN_NAMES


def _traindeck(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "traindeck", *args], capture_output=True, text=True,
                          env=dict(os.environ), timeout=120)


def test_the_exact_command_forms_end_to_end(tmp_path: Path):
    listed = _traindeck("presets", "list", "--json")
    assert listed.returncode == 0, listed.stderr
    entries = json.loads(listed.stdout)
    assert [e["name"] for e in entries] == list(BUILTIN_NAMES)
    assert all(e["builtin"] and e["description"] for e in entries)

    acc = FIXTURES / "configs/import/accelerate_with_ds_file.yaml"
    imported = _traindeck("presets", "import", str(acc), "--name", "team-zero3")
    assert imported.returncode == 0, imported.stderr
    assert "imported preset 'team-zero3'" in imported.stdout

    shown = _traindeck("presets", "show", "team-zero3")
    assert shown.returncode == 0 and "team_queue: gpu-long" in shown.stdout and "stage: 3" in shown.stdout

    exported = _traindeck("presets", "export", "team-zero3", "--dir", str(tmp_path / "out"))
    assert exported.returncode == 0, exported.stderr
    assert exported.stdout.startswith(f"Exported to {tmp_path / 'out'}: accelerate_config.yaml")
    assert len(exported.stdout.splitlines()) == 1
    paths = [tmp_path / "out" / "accelerate_config.yaml", tmp_path / "out" / "ds_config.json"]
    assert (tmp_path / "out" / "team-zero3.traindeck.yaml").is_file()
    assert yaml.safe_load(paths[0].read_text())["deepspeed_config"]["deepspeed_config_file"] == str(paths[1])

    deleted = _traindeck("presets", "delete", "team-zero3")
    assert deleted.returncode == 0
    gone = _traindeck("presets", "show", "team-zero3")
    assert gone.returncode == 2 and "no preset named 'team-zero3'" in gone.stderr and "Traceback" not in gone.stderr


def test_list_text_shows_origin_launcher_and_description(capsys):
    assert main(["presets", "list"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == len(BUILTIN_NAMES)
    assert lines[-1].split()[:3] == ["cpu-demo", "built-in", "deepspeed"]


def test_show_prints_the_yaml_and_the_validation_messages(capsys):
    assert main(["presets", "show", "zero-infinity-nvme"]) == 0
    out = capsys.readouterr().out
    body = out.split("\n\n# ")[0]
    data = yaml.safe_load(body)
    assert data["name"] == "zero-infinity-nvme" and data["deepspeed"]["zero_optimization"]["stage"] == 3
    assert "2 validation message(s)" in out
    assert "zero-infinity-nvme.yaml:" in out and "error: deepspeed.zero_optimization.offload_param.nvme_path" in out


def test_import_two_files_and_refusals(tmp_path: Path, capsys):
    acc = tmp_path / "acc.yaml"
    acc.write_text("compute_environment: LOCAL_MACHINE\ndistributed_type: DEEPSPEED\nnum_processes: 2\n"
                   "deepspeed_config:\n  zero3_init_flag: false\n")
    ds = FIXTURES / "configs/deepspeed/good/zero2_offload_cpu.json"
    assert main(["presets", "import", str(ds), str(acc), "--name", "pair"]) == 0
    assert "with a DeepSpeed config" in capsys.readouterr().out
    assert main(["presets", "import", str(ds), "--name", "pair"]) == 2
    assert "already exists" in capsys.readouterr().err
    assert main(["presets", "import", str(ds), "--name", "pair", "--force"]) == 0
    assert main(["presets", "import", str(ds), "--name", "zero2"]) == 2
    assert "built-in preset" in capsys.readouterr().err
    assert main(["presets", "import", str(ds), "--name", "a/b"]) == 2
    assert "cannot be a preset name" in capsys.readouterr().err
    assert main(["presets", "delete", "zero2"]) == 2
    assert "built-in preset and cannot be deleted" in capsys.readouterr().err


def test_import_accelerate_default(tmp_path: Path, monkeypatch, capsys):
    default = tmp_path / "hf" / "accelerate" / "default_config.yaml"
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    monkeypatch.delenv("ACCELERATE_CONFIG_FILE", raising=False)
    assert main(["presets", "import", "--accelerate-default", "--name", "mine"]) == 2
    assert "no accelerate default config" in capsys.readouterr().err
    default.parent.mkdir(parents=True)
    default.write_text("compute_environment: LOCAL_MACHINE\ndistributed_type: MULTI_GPU\nnum_processes: 2\n")
    assert main(["presets", "import", "--accelerate-default", "--name", "mine"]) == 0
    assert main(["presets", "list", "--json"]) == 0
    capsys.readouterr()


def test_rename(capsys):
    ds = FIXTURES / "configs/deepspeed/good/zero1_bf16.json"
    assert main(["presets", "import", str(ds), "--name", "old-name"]) == 0
    assert main(["presets", "rename", "old-name", "new-name"]) == 0
    assert main(["presets", "show", "new-name"]) == 0
    assert main(["presets", "show", "old-name"]) == 2


def test_import_prints_the_json_slips_config_check_calls_warnings(tmp_path: Path, capsys):
    ds = tmp_path / "ds.json"
    ds.write_text('{\n  // ZeRO-1\n  "train_batch_size": 8,\n  "zero_optimization": {"stage": 1,},\n}\n')
    assert main(["presets", "import", str(ds), "--name", "with-slips"]) == 0
    out = capsys.readouterr().out.splitlines()
    slips = [line for line in out if "warning: (document): JSON syntax" in line]
    assert [line.split(":")[1] for line in slips] == ["2", "4", "4"] and "imported preset 'with-slips'" in out[3]
