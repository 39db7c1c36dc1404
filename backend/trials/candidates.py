"""A trial's candidates: ZeRO stage x offload x micro-batch (x activation checkpointing), each one preset and one
argument list for the user's own script.

A candidate is a change to the base preset's DeepSpeed config (`zero_optimization.stage`, its `offload_optimizer`
and `offload_param`, `train_micro_batch_size_per_gpu`, and the gradient accumulation when the global batch is to be
kept) plus, where the script takes them, `--per_device_train_batch_size M` (HF Trainer) and the checkpointing
argument. Pairs that DeepSpeed refuses (offload without ZeRO, parameters or NVMe off-load below stage 3) are left
out with a note, never tried.
"""

from __future__ import annotations

import copy
import dataclasses
import shlex
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from traindeck.backend.presets import Preset
from traindeck.backend.queue import names_script_arg, set_script_arg

OFFLOADS = ("none", "cpu", "cpu+params", "nvme")
HF_BATCH_ARG = "per_device_train_batch_size"
LADDER_CAP = 1024  # a doubling micro-batch ladder stops here at the latest


@dataclass(frozen=True)
class Candidate:
    """One set-up to measure."""

    stage: int
    offload: str  # one of OFFLOADS
    micro_batch: int
    checkpointing: bool = False
    nvme_path: str = ""  # offload "nvme" only

    @property
    def label(self) -> str:
        text = f"zero{self.stage}-{self.offload}-mb{self.micro_batch}"
        return text + ("-ckpt" if self.checkpointing else "")

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Candidate:
        return cls(stage=int(data["stage"]), offload=str(data["offload"]), micro_batch=int(data["micro_batch"]),
                   checkpointing=bool(data.get("checkpointing")), nvme_path=str(data.get("nvme_path") or ""))


def parse_stages(text: str | None) -> tuple[int, ...]:
    """`2,3` -> (2, 3); None -> every stage (0-3). ValueError with one line for anything else."""
    if not text:
        return (0, 1, 2, 3)
    stages = []
    for item in text.split(","):
        item = item.strip()
        if item not in ("0", "1", "2", "3"):
            raise ValueError(f"--stages {text}: a ZeRO stage is 0, 1, 2 or 3, not {item!r}")
        stages.append(int(item))
    return _unique(stages, "--stages")


def parse_offloads(text: str | None) -> tuple[tuple[str, str], ...]:
    """`none,cpu,nvme:/mnt/nvme` -> (("none", ""), ("cpu", ""), ("nvme", "/mnt/nvme")); None -> none and cpu."""
    if not text:
        return (("none", ""), ("cpu", ""))
    out = []
    for item in text.split(","):
        item = item.strip()
        kind, _, path = item.partition(":")
        if kind not in OFFLOADS or (kind == "nvme") != bool(path):
            raise ValueError(f"--offload {text}: each is none, cpu, cpu+params or nvme:PATH, not {item!r}")
        out.append((kind, path))
    return _unique(out, "--offload")


def parse_micro_batches(text: str | None) -> tuple[int, ...]:
    """`1,2,4` -> (1, 2, 4); None -> () (a ladder doubling from 1 while candidates are measured)."""
    if not text:
        return ()
    out = []
    for item in text.split(","):
        try:
            value = int(item.strip())
        except ValueError:
            value = 0
        if value < 1:
            raise ValueError(f"--micro-batch {text}: each is a whole number of 1 or more, not {item.strip()!r}")
        out.append(value)
    return _unique(out, "--micro-batch")


def _unique(items: Sequence[Any], option: str) -> tuple[Any, ...]:
    if len(set(items)) != len(items):
        raise ValueError(f"{option}: a value is given twice")
    return tuple(items)


def refusal(stage: int, offload: str) -> str:
    """Why DeepSpeed would refuse this pair ("" when it takes it)."""
    if offload in ("cpu", "cpu+params", "nvme") and stage == 0:
        return "off-loading needs ZeRO stage 1 or more"
    if offload == "cpu+params" and stage != 3:
        return "parameters are off-loaded only by ZeRO stage 3"
    if offload == "nvme" and stage != 3:
        return "NVMe off-load (ZeRO-Infinity) needs ZeRO stage 3"
    return ""


def expand(stages: Sequence[int], offloads: Sequence[tuple[str, str]], micro_batches: Sequence[int],
           checkpointing: bool) -> tuple[list[Candidate], list[str]]:
    """Every candidate in order (stage, then offload, then micro-batch, checkpointing off before on), and one note
    per stage/offload pair left out. With no micro-batches given each pair starts a ladder at 1."""
    out: list[Candidate] = []
    notes: list[str] = []
    for stage in stages:
        for offload, path in offloads:
            why = refusal(stage, offload)
            if why:
                notes.append(f"ZeRO-{stage} with offload {offload}: left out ({why})")
                continue
            for micro in micro_batches or (1,):
                for ckpt in ((False, True) if checkpointing else (False,)):
                    out.append(Candidate(stage, offload, micro, ckpt, path))
    return out, notes


def next_on_ladder(candidate: Candidate) -> Candidate | None:
    """The same set-up at twice the micro-batch, or None at the cap."""
    doubled = candidate.micro_batch * 2
    return dataclasses.replace(candidate, micro_batch=doubled) if doubled <= LADDER_CAP else None


def candidate_deepspeed(base: dict[str, Any], candidate: Candidate, world_size: int,
                        keep_global_batch: bool) -> dict[str, Any]:
    """The base DeepSpeed config with the candidate's stage, offload and micro-batch set.

    With `keep_global_batch` the gradient accumulation becomes base global batch / (micro-batch x ranks) (at
    least 1); `train_batch_size`, when the base names it, is set to what the three make, so DeepSpeed's check of
    micro x accumulation x ranks = batch holds. A value the base leaves "auto" is the script's (HF Trainer) and is
    left so, except the micro-batch, which the Trainer takes from --per_device_train_batch_size (see script_args).
    """
    ds = copy.deepcopy(base)
    zero = ds.get("zero_optimization")
    zero = dict(zero) if isinstance(zero, dict) else {}
    zero["stage"] = candidate.stage
    for key in ("offload_optimizer", "offload_param"):
        zero.pop(key, None)
    if candidate.stage != 3:  # ZeRO-3's own settings: DeepSpeed ignores them at other stages (config check warns)
        for key in [k for k in zero if k.startswith("stage3_")]:
            del zero[key]
    kept = base.get("zero_optimization")
    pin = _pin(kept if isinstance(kept, dict) else {})
    if candidate.offload in ("cpu", "cpu+params"):
        zero["offload_optimizer"] = {"device": "cpu", "pin_memory": pin}
    if candidate.offload == "cpu+params":
        zero["offload_param"] = {"device": "cpu", "pin_memory": pin}
    if candidate.offload == "nvme":
        zero["offload_optimizer"] = {"device": "nvme", "nvme_path": candidate.nvme_path, "pin_memory": pin}
        zero["offload_param"] = {"device": "nvme", "nvme_path": candidate.nvme_path, "pin_memory": pin}
    ds["zero_optimization"] = zero
    old_micro = base.get("train_micro_batch_size_per_gpu")
    if old_micro != "auto":
        ds["train_micro_batch_size_per_gpu"] = candidate.micro_batch
    accumulation = base.get("gradient_accumulation_steps", 1)
    if keep_global_batch and accumulation != "auto":
        target = global_batch(base, world_size)
        if target is not None:
            ds["gradient_accumulation_steps"] = max(1, target // max(1, candidate.micro_batch * world_size))
    if "train_batch_size" in ds and ds["train_batch_size"] != "auto":
        accumulation = ds.get("gradient_accumulation_steps", 1)
        ds["train_batch_size"] = candidate.micro_batch * (accumulation if isinstance(accumulation, int) else 1) \
            * world_size
    return ds


def _pin(zero: dict[str, Any]) -> bool:
    for key in ("offload_optimizer", "offload_param"):
        section = zero.get(key)
        if isinstance(section, dict) and isinstance(section.get("pin_memory"), bool):
            return bool(section["pin_memory"])
    return False


def global_batch(ds: dict[str, Any], world_size: int) -> int | None:
    """Samples per optimizer step over all ranks that `ds` makes (None when "auto" leaves it to the script)."""
    batch = ds.get("train_batch_size")
    if isinstance(batch, int) and not isinstance(batch, bool) and batch > 0:
        return batch
    micro = ds.get("train_micro_batch_size_per_gpu", 1)
    accumulation = ds.get("gradient_accumulation_steps", 1)
    if not isinstance(micro, int) or not isinstance(accumulation, int):
        return None
    return micro * accumulation * max(1, world_size)


def script_args(args: Sequence[str], candidate: Candidate, checkpointing_arg: str | None,
                micro_auto: bool = False) -> list[str]:
    """The script's arguments for the candidate: its --per_device_train_batch_size set where it names one, or
    added where the DeepSpeed config leaves the micro-batch "auto" (HF Trainer scripts fill it from that argument),
    and the checkpointing argument added when the candidate checkpoints."""
    out = list(args)
    if names_script_arg(out, HF_BATCH_ARG) or micro_auto:
        out = set_script_arg(out, HF_BATCH_ARG, str(candidate.micro_batch))
    if candidate.checkpointing and checkpointing_arg:
        out += shlex.split(checkpointing_arg)
    return out


def trained_batch(ds: dict[str, Any], candidate: Candidate, args: Sequence[str], world_size: int) -> int | None:
    """Samples per optimizer step over all ranks a candidate trains with: its DeepSpeed config's, or, where that
    leaves the batch "auto" (HF Trainer), the micro-batch x the script's --gradient_accumulation_steps (else 1) x
    ranks."""
    known = global_batch(ds, world_size)
    if known is not None:
        return known
    accumulation = ds.get("gradient_accumulation_steps", 1)
    if not isinstance(accumulation, int):
        accumulation = _arg_int(args, "gradient_accumulation_steps") or 1
    return candidate.micro_batch * accumulation * max(1, world_size)


def _arg_int(args: Sequence[str], name: str) -> int | None:
    option = f"--{name}"
    for i, arg in enumerate(args):
        text = args[i + 1] if arg == option and i + 1 < len(args) else arg.removeprefix(option + "=")
        if (arg == option or arg.startswith(option + "=")) and text.isdigit() and int(text) > 0:
            return int(text)
    return None


def candidate_preset(base: Preset, candidate: Candidate, world_size: int, keep_global_batch: bool,
                     name: str) -> Preset:
    """The base preset with the candidate's DeepSpeed config (raises ValueError when the base has none)."""
    if base.deepspeed is None:
        raise ValueError(f"preset '{base.name}' does not use DeepSpeed: a trial varies its ZeRO stage, offload and "
                         "micro-batch")
    ds = candidate_deepspeed(base.deepspeed, candidate, world_size, keep_global_batch)
    accelerate = copy.deepcopy(base.accelerate)
    plugin = (accelerate or {}).get("deepspeed_config")
    if isinstance(plugin, dict) and plugin.get("zero3_init_flag") is True and candidate.stage != 3:
        plugin["zero3_init_flag"] = False  # accelerate applies it at ZeRO-3 only
    return dataclasses.replace(base, name=name, deepspeed=ds, accelerate=accelerate, builtin=False, path=None)
