"""Sweeps: `--sweep lr=1e-5,3e-5 --sweep zero_stage=2,3` -> one run per combination, named after its values.

A NAME is a preset value when it is one of the short names below or a dotted key path into the preset
(`deepspeed.zero_optimization.stage`); otherwise it is a script argument: `--NAME VALUE` replaces the script's
own `--NAME x` / `--NAME=x`, or is added at the end.

A script argument that the preset's DeepSpeed config decides instead is aimed at the config (`aim_axis`): when the
config defines the optimizer, DeepSpeed builds it from `optimizer.params` and never sees the script's `--lr`, so
`lr` (or `learning_rate`) sets `optimizer.params.lr` (and the scheduler's `warmup_max_lr`, the rate a warm-up
reaches), and any other name that is a key of `optimizer.params` sets that key. The script's own `--NAME` is set
to match where its arguments name it. A value the config leaves "auto" is the script's (HF Trainer fills it in
from its arguments).
"""

from __future__ import annotations

import copy
import itertools
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
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
# Names a sweep means as the learning rate: the DeepSpeed optimizer's `lr`.
LR_NAMES = frozenset({"lr", "learning_rate"})


@dataclass(frozen=True)
class SweepAxis:
    name: str
    values: tuple[str, ...]
    preset_path: str | None  # None: a script argument
    also_paths: tuple[str, ...] = ()  # further preset values set alike (the scheduler's warm-up peak beside lr)
    script_arg: bool = False  # a preset value that the script is given as --NAME too (its arguments name it)


@dataclass(frozen=True)
class SweepPoint:
    """One run of a sweep: its name suffix, its script arguments and its preset values."""

    label: str
    script_args: list[str]
    preset_overrides: dict[str, Any]
    values: dict[str, str] = field(default_factory=dict)  # swept name -> this run's value, as written


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
                for path in (axis.preset_path, *axis.also_paths):
                    overrides[path] = _typed(value)
            if axis.preset_path is None or axis.script_arg:
                args = set_script_arg(args, axis.name, value)
        label = "-".join(f"{a.name}={v}" for a, v in zip(axes, combo, strict=True))
        points.append(SweepPoint(label, args, overrides, {a.name: v for a, v in zip(axes, combo, strict=True)}))
    return points


def aim_axis(axis: SweepAxis, deepspeed: Mapping[str, Any] | None, script_args: Sequence[str]
             ) -> tuple[SweepAxis, str]:
    """A script-argument axis aimed at the DeepSpeed config where the config decides that setting (see the module's
    docstring), with one line that says where the values go ("" when they go where the name says)."""
    if axis.preset_path is not None:
        return axis, ""
    named = names_script_arg(script_args, axis.name)
    optimizer = (deepspeed or {}).get("optimizer")
    params = optimizer.get("params") if isinstance(optimizer, dict) else None
    key = "lr" if axis.name in LR_NAMES else axis.name
    # "auto": HF Trainer fills the value in from its own arguments, and refuses a config that disagrees with them.
    auto = isinstance(params, dict) and params.get(key) == "auto"
    if isinstance(optimizer, dict) and not auto and (key == "lr" or (isinstance(params, dict) and key in params)):
        paths = [f"deepspeed.optimizer.params.{key}"]
        scheduler = (deepspeed or {}).get("scheduler")
        scheduled = scheduler.get("params") if isinstance(scheduler, dict) else None
        if isinstance(scheduled, dict):
            paths += [f"deepspeed.scheduler.params.{k}" for k in (("warmup_max_lr",) if key == "lr" else (key,))
                      if k in scheduled and scheduled[k] != "auto"]
        where = " and ".join(p.removeprefix("deepspeed.") for p in paths)
        also = (f"; the script's --{axis.name} is set to match" if named else
                f"; the script is not given --{axis.name} (its arguments do not name it)")
        note = (f"{axis.name}: set in each run's DeepSpeed config ({where}): the config defines the optimizer, so "
                f"DeepSpeed trains with its {key}, not the script's" + also)
        return SweepAxis(axis.name, axis.values, paths[0], tuple(paths[1:]), script_arg=named), note
    if named:
        return axis, ""
    return axis, (f"{axis.name}: not a preset value: each run's script is given --{axis.name} VALUE, added to its "
                  "arguments (they do not name it now), so the script must accept that option")


def names_script_arg(args: Sequence[str], name: str) -> bool:
    """Do the script's arguments give `--name` a value already?"""
    option = f"--{name}"
    return any((arg == option and i + 1 < len(args)) or arg.startswith(option + "=") for i, arg in enumerate(args))


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
