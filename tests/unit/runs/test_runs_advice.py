"""Advice that fits what the run was launched with: never "set it to auto" for an "auto" value, never "leave the
port unset" when traindeck picked the port. The settings are read back from a real run directory."""

from __future__ import annotations

import json
from typing import Any

import pytest

from traindeck.backend.runs.diagnosis.diagnose import Evidence, diagnose
from traindeck.backend.runs.record.launch_settings import launch_settings
from traindeck.backend.runs.record.layout import create_run_dir

PORT = ("torch.distributed.DistNetworkError: The server socket has failed to listen on any local network address. "
        "port: 29500, useIpv6: false, code: -98, name: EADDRINUSE, message: address already in use")
BATCH = ("[rank0]: AssertionError: Check batch related parameters. train_batch_size is not equal to "
         "micro_batch_per_gpu * gradient_acc_step * world_size 16 != 4 * 1 * 1")


@pytest.mark.parametrize(("line", "settings", "says", "never"), [
    (PORT, {"port_fixed": False}, "start the run again", "leave the port unset"),
    (PORT, {"port_fixed": False, "master_port": 29500}, "start the run again", "not the one traindeck chose"),
    # The script or its launcher flags fixed another port than the one traindeck chose: that is what to change.
    (PORT, {"port_fixed": False, "master_port": 40123}, "Port 29500 is not the one traindeck chose (40123)",
     "start the run again"),
    (PORT, {"port_fixed": True}, "leave the port unset", "start the run again"),
    (PORT, {}, "leave the port unset", "start the run again"),  # runs recorded before port_fixed existed
    (BATCH, {"train_batch_size": "auto"}, "Set it to micro-batch x gradient accumulation", 'set it to "auto"'),
    (BATCH, {"train_batch_size": 16}, 'set it to "auto" with the HF Trainer', "remove it"),
    (BATCH, {}, 'set it to "auto" with the HF Trainer', "remove it"),
])
def test_advice_fits_the_setting(line: str, settings: dict[str, Any], says: str, never: str) -> None:
    d = diagnose(Evidence(1, log_tail=["Traceback (most recent call last):", line], settings=settings))
    assert says in d.advice and never not in d.advice, d.advice


@pytest.mark.parametrize(("command", "config", "expected"), [
    ({"port_fixed": False}, {"train_batch_size": "auto"}, {"port_fixed": False, "train_batch_size": "auto"}),
    ({"port_fixed": True}, None, {"port_fixed": True}),
    ({"port_fixed": False, "master_port": 40123}, None, {"port_fixed": False, "master_port": 40123}),
    ({"launcher": "deepspeed", "argv": ["python"]}, None, {"launcher": "deepspeed"}),
    ({}, {"train_micro_batch_size_per_gpu": 4}, {}),
])
def test_launch_settings_from_the_run_directory(command: dict[str, Any], config: dict[str, Any] | None,
                                                expected: dict[str, Any]) -> None:
    run_dir = create_run_dir()
    run_dir.command.write_text(json.dumps(command))
    if config is not None:
        (run_dir.path / "ds_config.json").write_text(json.dumps(config))
    assert launch_settings(run_dir) == expected


def test_broken_files_give_no_settings() -> None:
    run_dir = create_run_dir()
    run_dir.command.write_text("{not json")
    (run_dir.path / "ds_config.json").write_text("[1, 2")
    assert launch_settings(run_dir) == {}


@pytest.mark.parametrize(("line", "settings", "says"), [
    ("train.py: error: unrecognized arguments: --local_rank=0", {"launcher": "deepspeed"},
     "which the deepspeed launcher passes to the script"),
    ("train.py: error: unrecognized arguments: --local_rank=0", {},
     "which its launcher (the deepspeed launcher, or torch.distributed.launch) passes"),
    ("unknown option --local_rank=0", {"launcher": "deepspeed"},
     "Python itself refused --local_rank=N, which the deepspeed launcher puts right after the command"),
])
def test_a_refused_local_rank_names_the_launcher_the_run_used(line: str, settings: dict[str, Any], says: str) -> None:
    d = diagnose(Evidence(2, log_tail=[f"usage: {line.split(':')[0]}", line], settings=settings))
    assert d.kind == "local_rank_arg" and says in d.summary, d
