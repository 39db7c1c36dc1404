"""A user's preset built in memory, for the preset tests."""

from __future__ import annotations

from typing import Any

from traindeck.backend.presets import Preset


def user_preset(name: str = "mine", **fields: Any) -> Preset:
    """A small DeepSpeed ZeRO-2 preset named `name`; `fields` replace or add Preset fields."""
    base: dict[str, Any] = dict(name=name, launcher="deepspeed", description="test preset",
                                deepspeed={"train_micro_batch_size_per_gpu": 2, "zero_optimization": {"stage": 2}})
    base.update(fields)
    return Preset(**base)
