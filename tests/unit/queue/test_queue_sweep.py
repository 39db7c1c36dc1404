"""Sweeps: a grid over script arguments and preset values becomes queued runs named after their values."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from support import TESTS

from traindeck.backend.launch.builders import DS_CONFIG, build_plan
from traindeck.backend.queue.entries import QueueStore
from traindeck.backend.queue.starting import request_for
from traindeck.backend.queue.sweep import expand, parse_axis, set_script_arg

JOB = TESTS / "fixtures" / "scripts" / "queue_job.py"


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "traindeck", *args], capture_output=True, text=True, timeout=120,
                          cwd=JOB.parent)


def test_grid_of_script_arguments_and_preset_values():
    axes = [parse_axis("lr=1e-5,3e-5"), parse_axis("zero_stage=2,3")]
    points = expand(axes, ["--lr", "0.1", "--epochs", "1"])
    assert [p.label for p in points] == ["lr=1e-5-zero_stage=2", "lr=1e-5-zero_stage=3", "lr=3e-5-zero_stage=2",
                                         "lr=3e-5-zero_stage=3"]
    assert points[1].script_args == ["--lr", "1e-5", "--epochs", "1"]
    assert points[1].preset_overrides == {"deepspeed.zero_optimization.stage": 3}
    assert set_script_arg(["--lr=0.1"], "lr", "2") == ["--lr=2"]
    assert set_script_arg(["x"], "warmup", "5") == ["x", "--warmup", "5"]
    assert parse_axis("deepspeed.gradient_clipping=0.5,1").preset_path == "deepspeed.gradient_clipping"
    for bad, text in (("lr", "write NAME=V1,V2"), ("lr=1,,2", "at least one value"), ("lr=1,1", "twice")):
        with pytest.raises(ValueError, match=text):
            parse_axis(bad)


def test_queue_add_sweep_queues_one_named_run_per_combination_with_its_values():
    assert cli("queue", "pause").returncode == 0
    proc = cli("queue", "add", "--preset", "cpu-demo", "--name", "tiny", "--sweep", "lr=1e-5,3e-5",
               "--sweep", "zero_stage=2,3", JOB.name, "--lr", "0.1", "--deepspeed_config", "{ds_config}")
    assert proc.returncode == 0, proc.stderr
    ids = proc.stdout.split()
    assert len(ids) == 4
    with QueueStore() as queue:
        entries = queue.waiting()
        assert [e.name for e in entries] == ["tiny-lr=1e-5-zero_stage=2", "tiny-lr=1e-5-zero_stage=3",
                                             "tiny-lr=3e-5-zero_stage=2", "tiny-lr=3e-5-zero_stage=3"]
        assert [e.run_id for e in entries] == ids
        last = entries[-1]
    request = request_for(last.launch, None)
    assert list(request.script_args) == ["--lr", "3e-5", "--deepspeed_config", "{ds_config}"]
    plan = build_plan(request, JOB.parent / "never-written", free_port=lambda: 29500)
    assert json.loads(plan.files[DS_CONFIG])["zero_optimization"]["stage"] == 3
    # `run --sweep` queues the same way.
    run = cli("run", "--launcher", "python", "--sweep", "lr=1,2", JOB.name)
    assert run.returncode == 0 and len(run.stdout.split()) == 2
    needs_preset = cli("queue", "add", "--sweep", "zero_stage=2,3", JOB.name)
    assert needs_preset.returncode == 2 and "needs --preset" in needs_preset.stderr
