"""The real tools' own verdicts, asked in a child interpreter (backend/config/native.py)."""

from __future__ import annotations

import importlib.util
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest
from support import TESTS

from traindeck.backend.config.native import native_verdicts, register_native_check
from traindeck.backend.config.source import load_file

DS = TESTS / "fixtures" / "configs" / "deepspeed"
HAS_DEEPSPEED = importlib.util.find_spec("deepspeed") is not None
HAS_ACCELERATE = importlib.util.find_spec("accelerate") is not None


def wrapper(tmp_path: Path, body: str) -> str:
    """An executable standing in for a training interpreter."""
    path = tmp_path / "python"
    path.write_text("#!/bin/sh\n" + body + "\n")
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return str(path)


def test_importing_the_config_modules_pulls_in_no_training_library() -> None:
    code = ("import sys\n"
            "from traindeck.backend.config import native, deepspeed_rules, deepspeed_schema, validate\n"
            "loaded = [m for m in ('torch', 'deepspeed', 'accelerate', 'transformers') if m in sys.modules]\n"
            "assert not loaded, loaded\n")
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120)


@pytest.mark.skipif(sys.platform == "win32", reason="shell wrapper")
def test_a_missing_package_is_one_warning_not_an_error(tmp_path: Path) -> None:
    # The same Python without site-packages: the standard library only, so neither DeepSpeed nor accelerate.
    python = wrapper(tmp_path, f'exec "{sys.executable}" -S -I "$@"')
    (message,) = native_verdicts("deepspeed", {"train_batch_size": 8}, python=python)
    assert (message.severity, message.message) == (
        "warning", f"DeepSpeed is not installed in {python}: its own checks were skipped")
    (message,) = native_verdicts("accelerate", {"distributed_type": "NO"}, python=python)
    assert (message.severity, message.message) == (
        "warning", f"accelerate is not installed in {python}: its own checks were skipped")


@pytest.mark.skipif(sys.platform == "win32", reason="shell wrapper")
def test_a_hung_or_missing_interpreter_is_a_warning(tmp_path: Path) -> None:
    hung = wrapper(tmp_path, "sleep 30")
    (message,) = native_verdicts("deepspeed", {}, python=hung, timeout=1)
    assert message.severity == "warning" and "no answer within 1 s" in message.message
    (message,) = native_verdicts("deepspeed", {}, python=str(tmp_path / "nope" / "python"))
    assert message.severity == "warning" and "cannot run it" in message.message
    crashed = wrapper(tmp_path, "echo 'boom: broken interpreter' >&2; exit 3")
    (message,) = native_verdicts("deepspeed", {}, python=crashed)
    assert message.severity == "warning" and "boom: broken interpreter" in message.message


def test_unknown_kinds_have_no_verdict_and_checks_can_be_registered() -> None:
    assert native_verdicts("fsdp", {}) == []
    from traindeck.backend.config.messages import Message

    register_native_check("example", lambda data, python, timeout, options: [Message("error", "a", str(data))])
    assert native_verdicts("example", {"x": 1})[0].message == "{'x': 1}"


@pytest.mark.train
@pytest.mark.skipif(not HAS_DEEPSPEED, reason="needs the train extra (deepspeed)")
def test_deepspeed_says_what_it_refuses_located_in_the_file(tmp_path: Path) -> None:
    text = """{
  "train_batch_size": 10,
  "train_micro_batch_size_per_gpu": 4,
  "fp16": {"enabled": true, "loss_scale_window": 0},
  "bf16": {"enabled": true, "check_overflow": true},
  "amp": {"enabled": true},
  "communication_data_type": "fp61",
  "optimizer": {"type": "AdamW", "params": {"lr": 1e-4, "weight_decy": 0.1}},
  "scheduler": {"type": "WarmupLR", "params": {"warmup_num_steps": 0}},
  "tensorboard": {"enabled": true, "outpt_path": "runs"},
  "zero_optimization": {
    "stage": 2,
    "offload_optimzer": {"device": "cpu"},
    "offload_optimizer": {"device": "cpuu", "ratio": 0.5}
  }
}
"""
    path = tmp_path / "ds.json"
    path.write_text(text)
    doc = load_file(path)
    messages = native_verdicts("deepspeed", doc.data, world_size=2, doc=doc)
    got = {(m.severity, m.path, m.line) for m in messages}
    assert all(m.message.startswith("DeepSpeed says: ") and m.file == str(path) for m in messages)
    expected = {
        ("error", "zero_optimization.offload_optimzer", 13),  # pydantic: Extra inputs are not permitted
        ("error", "zero_optimization.offload_optimizer.device", 14),  # Input should be 'none', 'cpu' or 'nvme'
        ("error", "fp16", 4),  # fp16.loss_scale_window must be > 0 when dynamic loss scaling is enabled
        ("error", "bf16.check_overflow", 5),
        ("error", "tensorboard.outpt_path", 10),
        ("error", "amp", 6),  # DeepSpeedConfigError: NVIDIA Apex AMP integration has been removed
        ("error", "communication_data_type", 7),
        ("error", "optimizer.params", 8),  # FusedAdam: got an unexpected keyword argument 'weight_decy'
        ("error", "scheduler.params", 9),  # WarmupLR: warmup_num_steps must be a positive integer
        ("error", "train_batch_size", 2),  # Check batch related parameters: 10 != 4 * 1 * 2
    }
    assert expected <= got, sorted(got)
    texts = " | ".join(m.message for m in messages)
    for words in ("Extra inputs are not permitted", "'cpuu'", "NVIDIA Apex AMP integration has been removed",
                  "unexpected keyword argument 'weight_decy'", "warmup_num_steps must be a positive integer",
                  "10 != 4 * 1 * 2", "Invalid communication_data_type"):
        assert words in texts


@pytest.mark.train
@pytest.mark.skipif(not HAS_ACCELERATE, reason="needs the train extra (accelerate)")
def test_accelerate_says_what_it_refuses() -> None:
    messages = native_verdicts("accelerate", {"compute_environment": "LOCAL_MACHINE", "distributed_type": "DEEPSPED",
                                              "num_processes": 2, "mixed_precision": "bf16"})
    assert [(m.severity, m.message) for m in messages] == [
        ("error", "accelerate says: 'DEEPSPED' is not a valid DistributedType")]


@pytest.mark.skipif(sys.platform == "win32", reason="shell wrapper")
def test_the_callers_working_directory_cannot_shadow_a_module(tmp_path: Path) -> None:
    """The probe's text runs with `python -c` from an empty folder: a file named like a module in the caller's
    working directory cannot shadow it."""
    (tmp_path / "deepspeed.py").write_text("raise SystemExit('shadowed')\n")
    cwd = os.getcwd()
    os.chdir(tmp_path)
    try:
        python = wrapper(tmp_path, f'exec "{sys.executable}" -S "$@"')  # -S: no site-packages, cwd not isolated
        (message,) = native_verdicts("deepspeed", {}, python=python)
    finally:
        os.chdir(cwd)
    assert "is not installed" in message.message
