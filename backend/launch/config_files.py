"""A preset's accelerate and DeepSpeed sections as the files a run directory holds, from plain mappings.

A leaf: it knows file names and what accelerate refuses beside a deepspeed_config_file, and imports nothing of
traindeck. The launch builder and the preset store both render through it, so neither needs the other (without
it they would import each other: builders would need Preset, presets the renderer).
"""

from __future__ import annotations

import copy
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

ACCELERATE_CONFIG = "accelerate_config.yaml"
DS_CONFIG = "ds_config.json"

# What accelerate refuses beside a deepspeed_config_file ("When using `deepspeed_config_file`, the following
# accelerate config variables will be ignored"): these belong in the DeepSpeed JSON.
INLINE_DEEPSPEED_KEYS = (
    "gradient_accumulation_steps", "gradient_clipping", "zero_stage", "offload_optimizer_device",
    "offload_param_device", "offload_param_nvme_path", "offload_optimizer_nvme_path", "zero3_save_16bit_model",
)
_PRECISION_KEYS = ("fp16", "bf16", "bfloat16")


def render_sections(accelerate: Mapping[str, Any] | None, deepspeed: Mapping[str, Any] | None,
                    run_dir: Path) -> dict[str, str]:
    """The config files for these sections as they are written into `run_dir`:
    {"accelerate_config.yaml": ..., "ds_config.json": ...} (a file only for a section that is there).

    With both sections, the accelerate YAML points `deepspeed_config.deepspeed_config_file` at
    `run_dir/ds_config.json` and carries none of the keys accelerate refuses beside it (inline ZeRO settings,
    gradient accumulation/clipping, mixed_precision); a mixed_precision of fp16/bf16 moves into the DeepSpeed
    config when that has no precision section of its own, so the files mean the same thing.
    """
    files: dict[str, str] = {}
    ds = copy.deepcopy(dict(deepspeed)) if deepspeed is not None else None
    acc = copy.deepcopy(dict(accelerate)) if accelerate is not None else None
    if acc is not None and ds is not None:
        precision = acc.get("mixed_precision")
        if precision in ("fp16", "bf16") and not any(key in ds for key in _PRECISION_KEYS):
            ds[precision] = {"enabled": True}
        acc = accelerate_pointing_at(acc, Path(run_dir) / DS_CONFIG)
    if ds is not None:
        files[DS_CONFIG] = json.dumps(ds, indent=2) + "\n"
    if acc is not None:
        files[ACCELERATE_CONFIG] = yaml.safe_dump(acc, sort_keys=False)
    return files


def accelerate_pointing_at(accelerate: Mapping[str, Any], ds_config: Path) -> dict[str, Any]:
    """A copy of an accelerate config that takes its DeepSpeed settings from `ds_config` and nowhere else."""
    data = copy.deepcopy(dict(accelerate))
    data.pop("mixed_precision", None)
    data.pop("fp16", None)  # the old spelling of mixed_precision
    section = data.get("deepspeed_config")
    section = dict(section) if isinstance(section, dict) else {}
    for key in INLINE_DEEPSPEED_KEYS:
        section.pop(key, None)
    section["deepspeed_config_file"] = str(ds_config)
    data["deepspeed_config"] = section
    return data
