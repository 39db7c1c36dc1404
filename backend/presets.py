"""Presets: a named launch set-up (launcher + accelerate config + DeepSpeed config), built in or the user's own.

Interface fixed here so launch and GUI code can rely on it; the store (load/save/import/export) follows.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

SCHEMA_VERSION = 1

# Names of the built-in presets (resources/presets/NAME.yaml). The advisor and the demo refer to them by name.
BUILTIN_NAMES = (
    "single-process",
    "ddp",
    "zero1",
    "zero2",
    "zero2-offload",
    "zero3",
    "zero3-offload",
    "zero-infinity-nvme",
    "fsdp-full-shard",
    "fsdp-shard-grad-op",
    "fsdp-offload",
    "cpu-demo",
)


@dataclass
class Preset:
    name: str
    launcher: Literal["accelerate", "deepspeed", "python"]
    description: str = ""
    # The accelerate launch config as a mapping (what `accelerate config` writes), or None for deepspeed/python.
    # When `deepspeed` is set too, export writes it to ds_config.json and points deepspeed_config_file at it.
    accelerate: dict[str, Any] | None = None
    # The DeepSpeed JSON config as a mapping, or None when DeepSpeed is not used.
    deepspeed: dict[str, Any] | None = None
    builtin: bool = False
    schema_version: int = SCHEMA_VERSION
    # Keys found in the preset file that this version does not know: kept and written back, never dropped.
    extra: dict[str, Any] = field(default_factory=dict)
