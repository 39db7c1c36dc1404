"""The advisor's choice as a preset: the built-in preset it names, with the settings the estimate assumed.

`advise()` names a built-in preset and the dotted keys to change in it ("accelerate.num_processes",
"deepspeed.train_micro_batch_size_per_gpu", ...). This turns that into a Preset ready to edit and save; what only
the training script can do (activation checkpointing) comes back as notes, not as config.

The offload sections come out coherent: one whose device is not nvme keeps none of the NVMe-only keys (nvme_path
and the swap buffers: the built-in zero-infinity-nvme preset carries them for both), and one whose device is nvme
gets a real folder for its nvme_path in place of the built-in's placeholder: the folder the estimate was given,
else NVME_FOLDER in traindeck's data folder (created, so it is writable), said in the description.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import Any

from traindeck.backend.core import paths
from traindeck.backend.estimate.advisor import Advice
from traindeck.backend.presets import NVME_PLACEHOLDER, Preset, load_builtin

SECTIONS = ("accelerate", "deepspeed")
OFFLOADS = ("offload_optimizer", "offload_param")
NVME_FOLDER = "nvme-offload"  # below the data folder: the nvme_path an NVMe advice gets when none was given


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
    changed.update(_coherent_offload(preset, advice))
    if changed:
        # Built-in names cannot be saved over: the edited copy gets a name of its own, saved when the user saves.
        preset.name = f"{base.name}-advised"
        preset.builtin = False
        preset.path = None
        what = ", ".join(f"{k.partition('.')[2]}={v}" for k, v in changed.items() if v is not None)
        dropped = " NVMe-only keys left out where the device is not nvme." if None in changed.values() else ""
        preset.description = f"{base.description} Advised by the estimate: {what}.{dropped}"
    return AdvisedPreset(preset=preset, changed=changed, script_notes=notes, skipped=skipped, base_name=base.name)


def _coherent_offload(preset: Preset, advice: Advice) -> dict[str, Any]:
    """Make each offload section of `preset` agree with its device (see the module's docstring); the dotted keys
    changed, a removed key as None."""
    zero = (preset.deepspeed or {}).get("zero_optimization")
    if not isinstance(zero, dict):
        return {}
    changed: dict[str, Any] = {}
    for which in OFFLOADS:
        section = zero.get(which)
        if not isinstance(section, dict):
            continue
        prefix = f"deepspeed.zero_optimization.{which}."
        if section.get("device") == "nvme":
            current = section.get("nvme_path")
            if not isinstance(current, str) or not current.strip() or current.rstrip("/") == NVME_PLACEHOLDER:
                section["nvme_path"] = changed[prefix + "nvme_path"] = _nvme_folder(advice)
            continue
        for key in _nvme_only_keys(which):
            if key in section:
                del section[key]
                changed[prefix + key] = None
    return changed


def _nvme_only_keys(which: str) -> list[str]:
    """The keys of an offload section that only a device of nvme uses (the config schema says which)."""
    from traindeck.backend.config import DeepSpeedConfig, fields_of

    zero = fields_of(DeepSpeedConfig)["zero_optimization"].section
    section = fields_of(zero)[which].section if zero is not None else None
    if section is None:
        return ["nvme_path"]
    return [key for key, spec in fields_of(section).items() if spec.applies == "device nvme"]


def _nvme_folder(advice: Advice) -> str:
    """The NVMe folder the estimate was given, else NVME_FOLDER in the data folder, created."""
    for which in OFFLOADS:
        given = advice.settings.get(f"deepspeed.zero_optimization.{which}.nvme_path")
        if isinstance(given, str) and given.strip():
            return given
    folder = paths.data_dir() / NVME_FOLDER
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError:
        pass  # the path still stands; the launch's own checks say why it cannot be written
    return str(folder)


def _set(data: dict[str, Any], path: list[str], value: Any) -> None:
    for part in path[:-1]:
        child = data.get(part)
        if not isinstance(child, dict):
            child = data[part] = {}
        data = child
    data[path[-1]] = value
