"""How a resume argument is added, how templates are checked and remembered, what a kept request gives back
(issue 14 point 2), and the checkpoint layouts on folders shaped as the libraries write them."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest

from traindeck.backend.runs.control.resume import (
    ResumeError,
    check_template,
    remember_template,
    remembered_template,
    request_from,
    resume_args,
)
from traindeck.backend.runs.record.checkpoints import Checkpoint, find_checkpoints, newest, option_dirs


def ckpt(path: str, kind: str = "hf-trainer", step: int | None = 3) -> Checkpoint:
    return Checkpoint(path, kind, step, time.time(), 1)


def test_hf_trainer_gets_resume_from_checkpoint_replacing_an_earlier_one() -> None:
    args = ["--output_dir", "out", "--resume_from_checkpoint", "out/checkpoint-1", "--lr", "1e-4"]
    assert resume_args(args, ckpt("/o/checkpoint-3"), None) == [
        "--output_dir", "out", "--lr", "1e-4", "--resume_from_checkpoint", "/o/checkpoint-3"]
    assert resume_args(["--resume_from_checkpoint=x"], ckpt("/o/checkpoint-3"), None) == [
        "--resume_from_checkpoint", "/o/checkpoint-3"]


def test_a_template_fills_every_placeholder_and_other_layouts_need_one() -> None:
    tag = ckpt("/s/ckpt/global_step40", "deepspeed", 40)
    assert resume_args(["--steps", "4"], tag, "--load_dir {checkpoint_dir} --tag {tag} --from-step={step}") == [
        "--steps", "4", "--load_dir", "/s/ckpt", "--tag", "global_step40", "--from-step=40"]
    with pytest.raises(ResumeError, match="--resume-arg"):
        resume_args([], tag, None)
    with pytest.raises(ResumeError, match="no placeholder"):
        check_template("--load")
    with pytest.raises(ResumeError, match="unknown placeholder"):
        check_template("--load {ckpt}")
    with pytest.raises(ResumeError, match="No closing quotation"):
        check_template("--load '{checkpoint}")


def test_templates_are_remembered_per_script_and_preset(tmp_path: Path) -> None:
    remember_template("--load {checkpoint}", script="train.py", cwd=str(tmp_path), preset="zero2")
    assert remembered_template("train.py", str(tmp_path), None) == "--load {checkpoint}"
    assert remembered_template("other.py", str(tmp_path), "zero2") == "--load {checkpoint}"
    assert remembered_template("other.py", str(tmp_path), None) is None


def test_a_kept_request_takes_masked_secrets_from_the_shell_and_refuses_a_masked_argument(tmp_path: Path) -> None:
    data = {"script": "train.py", "script_args": ["--lr", "1"], "cwd": str(tmp_path), "launcher": "python",
            "env": {"HF_TOKEN": "***", "MODE": "fast"}}
    request = request_from(data, {"HF_TOKEN": "hf_abcdefgh"})
    assert dict(request.env) == {"HF_TOKEN": "hf_abcdefgh", "MODE": "fast"} and list(request.script_args) == [
        "--lr", "1"]
    with pytest.raises(ResumeError, match="HF_TOKEN"):
        request_from(data, {})
    with pytest.raises(ResumeError, match="secret"):
        request_from({**data, "script_args": ["--hub_token", "***"]}, {"HF_TOKEN": "x"})


def _touch(path: Path, size: int = 10) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"x" * size)


def test_layouts_and_where_they_are_looked_for(tmp_path: Path) -> None:
    # HF Trainer with DeepSpeed: the inner global_step folder is part of the Trainer checkpoint, not listed twice.
    _touch(tmp_path / "out" / "checkpoint-10" / "trainer_state.json")
    _touch(tmp_path / "out" / "checkpoint-10" / "latest")
    _touch(tmp_path / "out" / "checkpoint-10" / "global_step10" / "mp_rank_00_model_states.pt", 100)
    # DeepSpeed: latest names the newest tag; a folder without state files is not a checkpoint.
    _touch(tmp_path / "ds" / "global_step5" / "mp_rank_00_model_states.pt")
    _touch(tmp_path / "ds" / "my_tag" / "zero_pp_rank_0_mp_rank_00_optim_states.pt")
    _touch(tmp_path / "ds" / "notes")
    (tmp_path / "ds" / "latest").write_text("my_tag")
    # accelerate save_state.
    _touch(tmp_path / "acc" / "checkpoints" / "checkpoint_2" / "random_states_0.pkl")
    _touch(tmp_path / "acc" / "checkpoints" / "checkpoint_2" / "model.safetensors", 50)
    found = {Path(c.path).relative_to(tmp_path).as_posix(): c for c in find_checkpoints([tmp_path])}
    assert {k: (c.kind, c.step, c.latest) for k, c in found.items()} == {
        "out/checkpoint-10": ("hf-trainer", 10, False),
        "ds/global_step5": ("deepspeed", 5, False),
        "ds/my_tag": ("deepspeed", None, True),
        "acc/checkpoints/checkpoint_2": ("accelerate", 2, False),
    }
    assert found["out/checkpoint-10"].bytes == 120
    chosen = newest(list(found.values()))
    assert chosen is not None and chosen.step == 10
    assert option_dirs(["--output_dir", "o", "--save_dir=s", "--lr", "1", "--logging-dir", "~/l"], "/w") == [
        Path("/w/o"), Path("/w/s"), Path(os.path.expanduser("~/l"))]
    assert json.dumps(chosen.to_json())  # what `runs checkpoints --json` prints
