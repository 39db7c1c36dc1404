"""The advisor's choice as a preset: the built-in preset it names, with the settings the estimate assumed.

`advise()` names a built-in preset and the dotted keys to change in it ("accelerate.num_processes",
"deepspeed.train_micro_batch_size_per_gpu", ...). This turns that into a Preset ready to edit and save; what only
the training script can do (activation checkpointing) comes back as notes, not as config.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import Any

from traindeck.backend.estimate.advisor import Advice
from traindeck.backend.presets import Preset, load_builtin

SECTIONS = ("accelerate", "deepspeed")


@dataclass
class AdvisedPreset:
    preset: Preset
    changed: dict[str, Any]  # the dotted keys set in the built-in preset (empty: the built-in as it is)
    script_notes: list[str] = field(default_factory=list)  # what the training script must do itself
    skipped: list[str] = field(default_factory=list)  # settings for a section the preset does not have
    base_name: str = ""  # the built-in preset it starts from


def preset_from_advice(advice: Advice) -> AdvisedPreset:
    """The advised built-in preset with the advice's settings applied (a new, unsaved preset when any applied).

    Raises ValueError when the advice has no preset (nothing fits); PresetError when the built-in is unreadable.
    """
    if advice.preset is None:
        raise ValueError("the advisor found nothing that fits, so there is no preset to use")
    base = load_builtin(advice.preset)
    preset = copy.deepcopy(base)
    changed: dict[str, Any] = {}
    notes: list[str] = []
    skipped: list[str] = []
    for key, value in advice.settings.items():
        section, _, rest = key.partition(".")
        if section not in SECTIONS or not rest:
            notes.append(f"{key}: {value}")
            continue
        data = getattr(preset, section)
        if data is None:
            skipped.append(key)
            continue
        _set(data, rest.split("."), value)
        changed[key] = value
    if changed:
        # Built-in names cannot be saved over: the edited copy gets a name of its own, saved when the user saves.
        preset.name = f"{base.name}-advised"
        preset.builtin = False
        preset.path = None
        what = ", ".join(f"{k.partition('.')[2]}={v}" for k, v in changed.items())
        preset.description = f"{base.description} Advised by the estimate: {what}."
    return AdvisedPreset(preset=preset, changed=changed, script_notes=notes, skipped=skipped, base_name=base.name)


def _set(data: dict[str, Any], path: list[str], value: Any) -> None:
    for part in path[:-1]:
        child = data.get(part)
        if not isinstance(child, dict):
            child = data[part] = {}
        data = child
    data[path[-1]] = value
