"""Sweeps: `--sweep lr=1e-5,3e-5 --sweep zero_stage=2,3` -> one run per combination, named after its values.

A NAME is a preset value when it is one of the short names below or a dotted key path into the preset
(`deepspeed.zero_optimization.stage`); otherwise it is a script argument: `--NAME VALUE` replaces the script's
own `--NAME x` / `--NAME=x`, or is added at the end.
"""

from __future__ import annotations

import copy
import itertools
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import yaml

# Short names for the preset values people sweep most, as dotted paths into the preset.
PRESET_KEYS = {
    "zero_stage": "deepspeed.zero_optimization.stage",
    "gradient_accumulation_steps": "deepspeed.gradient_accumulation_steps",
    "train_micro_batch_size_per_gpu": "deepspeed.train_micro_batch_size_per_gpu",
    "micro_batch_size": "deepspeed.train_micro_batch_size_per_gpu",
    "gradient_clipping": "deepspeed.gradient_clipping",
    "mixed_precision": "accelerate.mixed_precision",
    "num_processes": "accelerate.num_processes",
}
_NAME = re.compile(r"^[A-Za-z_][\w.-]*$")
MAX_RUNS = 256


@dataclass(frozen=True)
class SweepAxis:
    name: str
    values: tuple[str, ...]
    preset_path: str | None  # None: a script argument


@dataclass(frozen=True)
class SweepPoint:
    """One run of a sweep: its name suffix, its script arguments and its preset values."""

    label: str
    script_args: list[str]
    preset_overrides: dict[str, Any]


def parse_axis(text: str) -> SweepAxis:
    """`NAME=V1,V2` -> an axis. Raises ValueError with one clear line."""
    name, sep, values = text.partition("=")
    name = name.strip().lstrip("-")
    if not sep or not _NAME.match(name):
        raise ValueError(f"--sweep {text}: write NAME=V1,V2 (for example lr=1e-5,3e-5)")
    items = tuple(v.strip() for v in values.split(","))
    if not items or any(not v for v in items):
        raise ValueError(f"--sweep {text}: give at least one value, separated by commas")
    if len(set(items)) != len(items):
        raise ValueError(f"--sweep {text}: a value is given twice")
    path = PRESET_KEYS.get(name) or (name if name.split(".", 1)[0] in ("deepspeed", "accelerate") else None)
    return SweepAxis(name, items, path)


def expand(axes: Sequence[SweepAxis], script_args: Sequence[str]) -> list[SweepPoint]:
    """Every combination, in the order given (the last axis varies fastest)."""
    names = [a.name for a in axes]
    if len(set(names)) != len(names):
        raise ValueError("--sweep: the same NAME is swept twice")
    combos = list(itertools.product(*(a.values for a in axes)))
    if len(combos) > MAX_RUNS:
        raise ValueError(f"--sweep: {len(combos)} combinations; at most {MAX_RUNS} runs are queued at once")
    points = []
    for combo in combos:
        args = list(script_args)
        overrides: dict[str, Any] = {}
        for axis, value in zip(axes, combo, strict=True):
            if axis.preset_path is not None:
                overrides[axis.preset_path] = _typed(value)
            else:
                args = set_script_arg(args, axis.name, value)
        label = "-".join(f"{a.name}={v}" for a, v in zip(axes, combo, strict=True))
        points.append(SweepPoint(label, args, overrides))
    return points


def set_script_arg(args: Sequence[str], name: str, value: str) -> list[str]:
    """`--name value` in place of the script's own value for it, or added at the end."""
    option = f"--{name}"
    out = list(args)
    for i, arg in enumerate(out):
        if arg == option and i + 1 < len(out):
            out[i + 1] = value
            return out
        if arg.startswith(option + "="):
            out[i] = f"{option}={value}"
            return out
    return [*out, option, value]


def apply_overrides(section_data: Mapping[str, Any] | None, overrides: Mapping[str, Any], section: str
                    ) -> dict[str, Any] | None:
    """A copy of a preset section (`deepspeed` or `accelerate`) with the sweep's values for it set."""
    mine = {path.split(".", 1)[1]: v for path, v in overrides.items() if path.split(".", 1)[0] == section}
    if not mine:
        return dict(section_data) if section_data is not None else None
    data: dict[str, Any] = copy.deepcopy(dict(section_data or {}))
    for path, value in mine.items():
        node = data
        keys = path.split(".")
        for key in keys[:-1]:
            child = node.get(key)
            if not isinstance(child, dict):
                child = node[key] = {}
            node = child
        node[keys[-1]] = value
    return data


def _typed(text: str) -> Any:
    """`2` -> 2, `1e-5` -> 1e-05, `true` -> True, `bf16` -> "bf16": as the value would be written in YAML."""
    try:
        value = yaml.safe_load(text)
    except yaml.YAMLError:
        return text
    if isinstance(value, str) and re.fullmatch(r"[-+]?\d*\.?\d+[eE][-+]?\d+", text):
        return float(text)  # YAML 1.1 reads 1e-5 (no dot) as text
    return value if isinstance(value, (int, float, bool, str)) else text
