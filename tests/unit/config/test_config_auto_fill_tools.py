"""auto_fill.FILLS against the installed transformers and accelerate (the `train` extra).

A config with "auto" at every key of the table (plus keys nobody fills) goes through HfTrainerDeepSpeedConfig and
through Accelerator.prepare with accelerate's DeepSpeedPlugin, in a subprocess (tests/probes/auto_fill_probe.py):
what each tool really filled must be exactly what the table says, and for the keys only the Trainer fills,
accelerate must stop with "`<key>` not found in kwargs" (the error the checker promises).
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from typing import Any

import pytest
from support import TESTS

from traindeck.backend.config.auto_fill import FILLS, dotted
from traindeck.backend.launch.environ import torch_extensions_dir

pytestmark = pytest.mark.skipif(
    any(importlib.util.find_spec(m) is None for m in ("deepspeed", "accelerate", "transformers", "torch")),
    reason="needs the train extra (deepspeed, accelerate, transformers, torch)")

PROBE = TESTS / "probes" / "auto_fill_probe.py"
# Keys nobody fills, to show the probe sees an unfilled "auto" (DeepSpeed's own spellings included: the field name
# prefetch_bucket_size is not the stage3_ alias that the tools fill; the old "bfloat16" section is never looked at).
NOBODY = (("zero_optimization", "sub_group_size"), ("zero_optimization", "prefetch_bucket_size"),
          ("bfloat16", "enabled"), ("optimizer", "params", "amsgrad"),
          # "auto" is DeepSpeed's own default here, yet accelerate's walk refuses it like any other "auto"
          ("data_types", "keep_in_fp32_modules"))


def _config(paths: list[tuple[str, ...]]) -> dict[str, Any]:
    config: dict[str, Any] = {"zero_optimization": {"stage": 3},
                              "optimizer": {"type": "AdamW", "params": {}},
                              "scheduler": {"type": "WarmupDecayLR", "params": {}}}
    for path in paths:
        node = config
        for key in path[:-1]:
            node = node.setdefault(key, {})
        node[path[-1]] = "auto"
    return config


@pytest.fixture(scope="module")
def probe() -> dict[str, Any]:
    accelerate_keys = [f.path for f in FILLS if f.accelerate is not None]
    trainer_only = [f.path for f in FILLS if f.accelerate is None and f.hf_trainer is not None]
    job = {
        # stage 3 (not "auto": HfDeepSpeedConfig.is_zero3 reads it): the Trainer fills the stage3_* hidden-size keys
        # only there
        "hf_trainer": _config([f.path for f in FILLS if f.path != ("zero_optimization", "stage")] + list(NOBODY)),
        "accelerate": _config(accelerate_keys),
        "refused": {dotted(p): _config(accelerate_keys + [p]) for p in trainer_only + list(NOBODY)},
    }
    # Accelerator(DeepSpeedPlugin) on the CPU loads DeepSpeed's shared-memory comm op: from this interpreter's own
    # folder, which `make setup` built (as every run does), never torch's default folder, which every interpreter
    # on the machine shares and each one with another install rebuilds (minutes).
    env = {**os.environ, "TORCH_EXTENSIONS_DIR": os.environ.get("TORCH_EXTENSIONS_DIR")
           or str(torch_extensions_dir(sys.executable))}
    done = subprocess.run([sys.executable, str(PROBE), json.dumps(job)], capture_output=True, text=True,
                          timeout=900, check=False, env=env)
    line = next((x for x in done.stdout.splitlines() if x.startswith("PROBE ")), None)
    assert line is not None, done.stderr[-3000:]
    return json.loads(line[len("PROBE "):])  # type: ignore[no-any-return]


def test_the_hf_trainer_fills_exactly_the_tables_trainer_keys(probe: dict[str, Any]) -> None:
    # what the Trainer's own code fills; the rest of FILLS (the plugin's keys) it leaves to accelerate's prepare
    assert set(probe["hf_trainer"]) == {dotted(f.path) for f in FILLS if f.hf_trainer is not None}


def test_accelerate_fills_exactly_the_tables_accelerate_keys(probe: dict[str, Any]) -> None:
    assert probe["accelerate_error"] is None
    assert set(probe["accelerate"]) == {dotted(f.path) for f in FILLS if f.accelerate is not None}


def test_accelerate_stops_on_every_auto_it_does_not_fill(probe: dict[str, Any]) -> None:
    for key, error in probe["refused"].items():
        assert error is not None and f"`{key}` not found in kwargs" in error, (key, error)
