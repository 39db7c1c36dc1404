"""Sweeps: a grid over script arguments and preset values becomes queued runs named after their values."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from support import TESTS

from traindeck.backend.launch.builders import DS_CONFIG, build_plan
from traindeck.backend.queue.adding import sweep_plan
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
    ds_config = json.loads(plan.files[DS_CONFIG])
    assert ds_config["zero_optimization"]["stage"] == 3
    # cpu-demo's DeepSpeed config defines the optimizer: the swept lr is the one DeepSpeed trains with.
    assert ds_config["optimizer"]["params"]["lr"] == 3e-5
    assert proc.stderr.count("optimizer.params.lr") == 1, proc.stderr  # said once for the sweep, not per run
    assert last.launch.sweep["values"] == {"lr": "3e-5", "zero_stage": "3"}
    assert last.launch.sweep["size"] == 4 and last.launch.sweep["name"] == "tiny"
    assert len({e.launch.sweep["sweep_id"] for e in entries}) == 1
    # `run --sweep` queues the same way.
    run = cli("run", "--launcher", "python", "--sweep", "lr=1,2", JOB.name)
    assert run.returncode == 0 and len(run.stdout.split()) == 2
    needs_preset = cli("queue", "add", "--sweep", "zero_stage=2,3", JOB.name)
    assert needs_preset.returncode == 2 and "needs --preset" in needs_preset.stderr


DS_WITH_OPTIMIZER = {"optimizer": {"type": "AdamW", "params": {"lr": 1e-3, "weight_decay": 0.0}},
                     "scheduler": {"type": "WarmupLR", "params": {"warmup_max_lr": 1e-3, "warmup_num_steps": 10}},
                     "zero_optimization": {"stage": 2}}


def _preset(deepspeed: dict | None):  # type: ignore[no-untyped-def]
    from traindeck.backend.presets import Preset

    return Preset(name="p", launcher="deepspeed", deepspeed=deepspeed)


def test_a_swept_name_reaches_the_deepspeed_setting_that_decides_it():
    # The config builds the optimizer: lr (and learning_rate) set optimizer.params.lr and the warm-up's peak; the
    # script's own --lr follows where its arguments name it, and is not added where they do not.
    plan = sweep_plan(["learning_rate=1e-3,3e-3"], ["--learning_rate", "5e-5"], _preset(DS_WITH_OPTIMIZER))
    assert [p.preset_overrides for p in plan.points] == [
        {"deepspeed.optimizer.params.lr": 1e-3, "deepspeed.scheduler.params.warmup_max_lr": 1e-3},
        {"deepspeed.optimizer.params.lr": 3e-3, "deepspeed.scheduler.params.warmup_max_lr": 3e-3}]
    assert plan.points[1].script_args == ["--learning_rate", "3e-3"]
    assert plan.points[1].values == {"learning_rate": "3e-3"}
    (note,) = plan.notes
    assert "optimizer.params.lr and scheduler.params.warmup_max_lr" in note and "set to match" in note
    alone = sweep_plan(["lr=1,2"], ["--steps", "6"], _preset(DS_WITH_OPTIMIZER))
    assert alone.points[0].script_args == ["--steps", "6"] and "not given --lr" in alone.notes[0]
    # Any other key of optimizer.params is the optimizer's too.
    decay = sweep_plan(["weight_decay=0,0.1"], [], _preset(DS_WITH_OPTIMIZER))
    assert decay.points[1].preset_overrides == {"deepspeed.optimizer.params.weight_decay": 0.1}
    # No optimizer in the config (the script builds it), or no DeepSpeed at all: the script's argument decides,
    # and nothing needs saying where the arguments name it already.
    for deepspeed in ({"zero_optimization": {"stage": 2}}, None):
        plain = sweep_plan(["lr=1,2"], ["--lr", "0.1"], _preset(deepspeed))
        assert plain.points[1].preset_overrides == {} and plain.points[1].script_args == ["--lr", "2"]
        assert plain.notes == []
    # "auto" (HF Trainer fills it from its --learning_rate and refuses a config that disagrees): the script's.
    hf = {"optimizer": {"type": "AdamW", "params": {"lr": "auto"}}}
    auto = sweep_plan(["learning_rate=1,2"], ["--learning_rate", "5e-5"], _preset(hf))
    assert auto.points[1].preset_overrides == {} and auto.points[1].script_args == ["--learning_rate", "2"]
    # A name that reaches nothing but an argument the script is not given now: said once.
    added = sweep_plan(["warmup=5,10"], ["--lr", "0.1"], _preset(DS_WITH_OPTIMIZER))
    assert added.points[0].script_args == ["--lr", "0.1", "--warmup", "5"]
    assert len(added.notes) == 1 and "must accept" in added.notes[0]


def test_a_sweep_a_deepspeed_config_file_would_override_is_refused(tmp_path):
    ds = tmp_path / "ds_config.json"
    ds.write_text(json.dumps(DS_WITH_OPTIMIZER))
    with pytest.raises(ValueError, match=r"--sweep lr: .*ds_config.json sets optimizer.params.lr"):
        sweep_plan(["lr=1,2"], ["--lr", "0.1"], None, ds)
    ds.write_text(json.dumps({"zero_optimization": {"stage": 2}}))  # the script builds the optimizer: fine
    assert len(sweep_plan(["lr=1,2"], ["--lr", "0.1"], None, ds).points) == 2
